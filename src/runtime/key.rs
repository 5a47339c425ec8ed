//! Object keys: what queues carry and caches are indexed by.
//!
//! Mirrors client-go's `cache.MetaNamespaceKeyFunc` (`"namespace/name"`, or
//! just `"name"` for cluster-scoped objects). Queues carry keys, never objects:
//! a worker always reads the newest object from the cache.
//!
//! The parts are `Arc<str>`: a key is cloned on every queue add, get and done
//! and on every index update, and cloning an `Arc` is a counter increment
//! where cloning a `String` is an allocation and a copy (Go strings copy for
//! free, so this is what keeps our workqueue ahead of client-go's).
use std::fmt;
use std::sync::Arc;

use kube::Resource;

/// `namespace/name` of an object (namespace is `None` for cluster-scoped kinds).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Option<Arc<str>>,
    pub name: Arc<str>,
}

impl ObjectKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self {
            namespace: namespace.map(Arc::from),
            name: Arc::from(name),
        }
    }

    /// The key of an object, or `None` if it has no name (never true for
    /// objects read from the API server).
    pub fn of<K: Resource>(obj: &K) -> Option<Self> {
        let meta = obj.meta();
        Some(Self::new(meta.namespace.as_deref(), meta.name.as_deref()?))
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
