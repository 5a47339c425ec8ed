//! Object keys: what queues carry and caches are indexed by.
//!
//! Mirrors client-go's `cache.MetaNamespaceKeyFunc` (`"namespace/name"`, or
//! just `"name"` for cluster-scoped objects). Queues carry keys, never objects:
//! a worker always reads the newest object from the cache.
//!
//! A key is cloned on every queue add, get and done and on every index
//! update, so it is one `Arc`: cloning it is a counter increment where
//! cloning two `String`s is two allocations and copies (Go strings copy for
//! free; this is what keeps our workqueue ahead of client-go's).
use std::fmt;
use std::sync::Arc;

use kube::Resource;

/// `namespace/name` of an object (namespace is `None` for cluster-scoped kinds).
///
/// One shared allocation: cloning a key (which queues and indexes do on every
/// add, get and done) is a single reference-count increment.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(Arc<Parts>);

#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Parts {
    namespace: Option<String>,
    name: String,
}

impl ObjectKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self(Arc::new(Parts {
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }))
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

    /// The namespace (`None` for cluster-scoped kinds).
    pub fn namespace(&self) -> Option<&str> {
        self.0.namespace.as_deref()
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.0.name
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace() {
            Some(ns) => write!(f, "{ns}/{}", self.name()),
            None => f.write_str(self.name()),
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
