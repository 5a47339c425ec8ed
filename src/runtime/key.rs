//! Object keys: what queues carry and caches are indexed by.
//!
//! Mirrors client-go's `cache.MetaNamespaceKeyFunc` (`"namespace/name"`, or
//! just `"name"` for cluster-scoped objects). Queues carry keys, never objects:
//! a worker always reads the newest object from the cache.
use std::fmt;

use kube::Resource;

/// `namespace/name` of an object (namespace is `None` for cluster-scoped kinds).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The key of an object, or `None` if it has no name (never true for
    /// objects read from the API server).
    pub fn of<K: Resource>(obj: &K) -> Option<Self> {
        let meta = obj.meta();
        Some(Self {
            namespace: meta.namespace.clone(),
            name: meta.name.clone()?,
        })
    }

    /// Parses `namespace/name` or `name`.
    pub fn parse(s: &str) -> Self {
        match s.split_once('/') {
            Some((ns, name)) => Self::new(Some(ns), name),
            None => Self::new(None, s),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_key_round_trips_through_its_string_form() {
        let key = ObjectKey::new(Some("team-a"), "mnist");
        assert_eq!(key.to_string(), "team-a/mnist");
        assert_eq!(ObjectKey::parse("team-a/mnist"), key);
    }

    #[test]
    fn cluster_scoped_key_has_no_slash() {
        let key = ObjectKey::new(None, "node-1");
        assert_eq!(key.to_string(), "node-1");
        assert_eq!(ObjectKey::parse("node-1"), key);
    }
}
