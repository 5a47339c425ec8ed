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
use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};

use hashbrown::DefaultHashBuilder;

use kube::Resource;

/// `namespace/name` of an object (namespace is `None` for cluster-scoped kinds).
///
/// One shared allocation: cloning a key (which queues and indexes do on every
/// add, get and done) is a single reference-count increment.
#[derive(Clone, Debug)]
pub struct ObjectKey(Arc<Parts>);

#[derive(Debug)]
struct Parts {
    /// Computed once: queues and indexes hash a key on every operation.
    hash: u64,
    namespace: Option<String>,
    name: String,
}

/// One seed per process, random (so keys cannot be chosen to collide).
static KEY_HASHER: LazyLock<DefaultHashBuilder> = LazyLock::new(DefaultHashBuilder::default);

impl PartialEq for ObjectKey {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
            || (self.0.hash == other.0.hash
                && self.0.name == other.0.name
                && self.0.namespace == other.0.namespace)
    }
}

impl Eq for ObjectKey {}

impl Hash for ObjectKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0.hash);
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl ObjectKey {
    pub fn new(namespace: Option<&str>, name: &str) -> Self {
        Self(Arc::new(Parts {
            hash: KEY_HASHER.hash_one((namespace, name)),
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

    #[test]
    fn keys_built_apart_are_equal_hash_alike_and_sort_by_namespace_then_name() {
        use std::collections::HashSet;
        let a = ObjectKey::new(Some("ns"), "a");
        let again = ObjectKey::parse("ns/a");
        assert_eq!(a, again);
        let hasher = DefaultHashBuilder::default();
        assert_eq!(hasher.hash_one(&a), hasher.hash_one(&again));
        assert_ne!(a, ObjectKey::new(Some("ns"), "b"));
        assert_ne!(a, ObjectKey::new(None, "a"));
        // "ns/a" as a name differs from namespace "ns" + name "a".
        assert_ne!(a, ObjectKey::new(None, "ns/a"));
        let set: HashSet<_> = [a.clone(), again, ObjectKey::new(None, "a")].into();
        assert_eq!(set.len(), 2);
        let mut keys = [
            ObjectKey::new(Some("b"), "a"),
            ObjectKey::new(Some("a"), "z"),
            ObjectKey::new(None, "y"),
        ];
        keys.sort();
        let shown: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["y", "a/z", "b/a"]);
    }
}
