//! The Indexer: the informer's thread-safe, indexed cache of objects.
//!
//! Mirrors client-go `tools/cache/thread_safe_store.go` + `index.go`
//! (`ThreadSafeStore`, `Indexer`, `MetaNamespaceIndexFunc`). Objects are kept
//! as `ObjectKey → Arc<K>`; every named index is an *inverted* map
//! `index value → keys`, maintained on every add/update/delete, so
//! [`Indexer::by_index`] is a lookup and never a scan of the cache.
//!
//! It must never hand out a mutable object: everything leaves as `Arc<K>`,
//! shared with every other reader ("never mutate an object from the cache").
//! Only the informer (and tests) write to it; controllers read.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::key::ObjectKey;
use super::object::Object;

/// Computes the index values of an object (client-go `IndexFunc`). An object
/// may have zero, one or several values under one index.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Index of objects by namespace (client-go `cache.NamespaceIndex`).
pub const NAMESPACE_INDEX: &str = "namespace";
/// Index of objects by the UID of their controller ownerReference.
pub const CONTROLLER_UID_INDEX: &str = "controller-uid";

/// The namespace of an object (client-go `MetaNamespaceIndexFunc`);
/// cluster-scoped objects have no value.
pub fn namespace_index_fn<K: Object>() -> IndexFn<K> {
    Arc::new(|obj: &K| obj.meta().namespace.iter().cloned().collect())
}

/// The UID of the object's controller ownerReference (`controller: true`),
/// so a controller finds the children it owns with one lookup.
pub fn controller_uid_index_fn<K: Object>() -> IndexFn<K> {
    Arc::new(|obj: &K| {
        obj.meta()
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.controller == Some(true))
            .map(|r| r.uid.clone())
            .collect()
    })
}

/// The value of one label, e.g. `label_index_fn("training.kubeflow.org/job-name")`;
/// objects without the label have no value.
pub fn label_index_fn<K: Object>(label: &str) -> IndexFn<K> {
    let label = label.to_owned();
    Arc::new(move |obj: &K| {
        obj.meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(&label))
            .cloned()
            .into_iter()
            .collect()
    })
}

/// One named index: its function and its inverted map `value → keys`.
struct Index<K> {
    func: IndexFn<K>,
    values: HashMap<String, HashSet<ObjectKey>>,
}

impl<K> Index<K> {
    fn insert(&mut self, key: &ObjectKey, obj: &K) {
        for value in (self.func)(obj) {
            self.values.entry(value).or_default().insert(key.clone());
        }
    }

    fn remove(&mut self, key: &ObjectKey, obj: &K) {
        for value in (self.func)(obj) {
            if let Some(keys) = self.values.get_mut(&value) {
                keys.remove(key);
                // Drop empty sets so memory follows the live objects, not history.
                if keys.is_empty() {
                    self.values.remove(&value);
                }
            }
        }
    }
}

struct Inner<K> {
    items: HashMap<ObjectKey, Arc<K>>,
    indices: HashMap<String, Index<K>>,
}

impl<K> Inner<K> {
    fn put(&mut self, key: ObjectKey, obj: Arc<K>) -> Option<Arc<K>> {
        let old = self.items.insert(key.clone(), obj.clone());
        for index in self.indices.values_mut() {
            if let Some(old) = &old {
                index.remove(&key, old);
            }
            index.insert(&key, &obj);
        }
        old
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Arc<K>> {
        let old = self.items.remove(key)?;
        for index in self.indices.values_mut() {
            index.remove(key, &old);
        }
        Some(old)
    }
}

/// Thread-safe, indexed cache of objects (client-go `cache.Indexer`).
///
/// Cloning is cheap and shares the same cache.
pub struct Indexer<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Object> Default for Indexer<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Object> Indexer<K> {
    /// An empty cache with no indexes.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                items: HashMap::new(),
                indices: HashMap::new(),
            })),
        }
    }

    // A panic while holding the lock cannot leave the maps half-updated in a
    // way readers could observe as unsafe, so a poisoned lock is still usable.
    fn read(&self) -> RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds (or replaces) a named index and builds it over the objects
    /// already cached (client-go `AddIndexers`).
    pub fn add_index(&self, name: &str, func: IndexFn<K>) {
        let mut inner = self.write();
        let mut index = Index {
            func,
            values: HashMap::new(),
        };
        for (key, obj) in &inner.items {
            index.insert(key, obj);
        }
        inner.indices.insert(name.to_owned(), index);
    }

    /// Whether an index of that name exists.
    pub fn has_index(&self, name: &str) -> bool {
        self.read().indices.contains_key(name)
    }

    /// The object stored under `key`.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.read().items.get(key).cloned()
    }

    /// Whether an object is stored under `key`.
    pub fn contains_key(&self, key: &ObjectKey) -> bool {
        self.read().items.contains_key(key)
    }

    /// Every cached object, in no particular order.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.read().items.values().cloned().collect()
    }

    /// Every cached key, in no particular order.
    pub fn list_keys(&self) -> Vec<ObjectKey> {
        self.read().items.keys().cloned().collect()
    }

    /// The objects whose index function returned `value` under `index`.
    /// An unknown index or value yields nothing.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let inner = self.read();
        let Some(keys) = inner.indices.get(index).and_then(|i| i.values.get(value)) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|k| inner.items.get(k).cloned())
            .collect()
    }

    /// The keys whose index function returned `value` under `index`
    /// (client-go `IndexKeys`).
    pub fn index_keys(&self, index: &str, value: &str) -> Vec<ObjectKey> {
        self.read()
            .indices
            .get(index)
            .and_then(|i| i.values.get(value))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.read().items.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.read().items.is_empty()
    }

    /// Inserts or replaces an object; returns the previous one. Objects
    /// without a name cannot be keyed and are ignored (returns `None`).
    /// Written by the informer; exposed for tests that need a filled cache.
    pub fn insert(&self, obj: Arc<K>) -> Option<Arc<K>> {
        let key = ObjectKey::of(obj.as_ref())?;
        self.write().put(key, obj)
    }

    /// Removes the object stored under `key`; returns it.
    pub fn remove(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.write().remove(key)
    }

    /// Atomically replaces the whole content (client-go `Replace`): readers
    /// see either the old or the new set, never a mix. Indexes are rebuilt.
    pub fn replace(&self, objects: impl IntoIterator<Item = Arc<K>>) {
        let items: HashMap<ObjectKey, Arc<K>> = objects
            .into_iter()
            .filter_map(|o| Some((ObjectKey::of(o.as_ref())?, o)))
            .collect();
        // Rebuild under one write lock so no reader sees new items with old
        // index values, and no add/remove can slip in between.
        let mut inner = self.write();
        for index in inner.indices.values_mut() {
            index.values.clear();
            for (key, obj) in &items {
                index.insert(key, obj);
            }
        }
        inner.items = items;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn cm(ns: &str, name: &str, owner: Option<&str>, job: Option<&str>) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        controller: Some(true),
                        uid: uid.into(),
                        ..Default::default()
                    }]
                }),
                labels: job.map(|j| [("job".to_string(), j.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn indexed() -> Indexer<ConfigMap> {
        let idx = Indexer::new();
        idx.add_index(NAMESPACE_INDEX, namespace_index_fn());
        idx.add_index(CONTROLLER_UID_INDEX, controller_uid_index_fn());
        idx.add_index("job", label_index_fn("job"));
        idx
    }

    fn names(objs: Vec<Arc<ConfigMap>>) -> Vec<String> {
        let mut v: Vec<String> = objs
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn by_index_finds_objects_by_namespace_owner_and_label() {
        let idx = indexed();
        idx.insert(cm("a", "one", Some("uid-1"), Some("mnist")));
        idx.insert(cm("a", "two", Some("uid-2"), Some("mnist")));
        idx.insert(cm("b", "three", Some("uid-1"), None));
        assert_eq!(names(idx.by_index(NAMESPACE_INDEX, "a")), ["one", "two"]);
        assert_eq!(
            names(idx.by_index(CONTROLLER_UID_INDEX, "uid-1")),
            ["one", "three"]
        );
        assert_eq!(names(idx.by_index("job", "mnist")), ["one", "two"]);
        assert!(idx.by_index("job", "other").is_empty());
        assert!(idx.by_index("no-such-index", "a").is_empty());
    }

    #[test]
    fn update_moves_an_object_between_index_values() {
        let idx = indexed();
        idx.insert(cm("a", "one", Some("uid-1"), Some("mnist")));
        let old = idx.insert(cm("a", "one", Some("uid-2"), Some("resnet")));
        assert!(old.is_some());
        assert!(idx.by_index(CONTROLLER_UID_INDEX, "uid-1").is_empty());
        assert!(idx.by_index("job", "mnist").is_empty());
        assert_eq!(names(idx.by_index("job", "resnet")), ["one"]);
        assert_eq!(idx.len(), 1);
    }

    #[test]
    fn remove_drops_the_object_from_every_index() {
        let idx = indexed();
        idx.insert(cm("a", "one", Some("uid-1"), Some("mnist")));
        let key = ObjectKey::new(Some("a"), "one");
        assert!(idx.remove(&key).is_some());
        assert!(idx.get(&key).is_none());
        assert!(idx.by_index(NAMESPACE_INDEX, "a").is_empty());
        assert!(idx.index_keys(CONTROLLER_UID_INDEX, "uid-1").is_empty());
        assert!(idx.is_empty());
    }

    #[test]
    fn only_the_controller_owner_reference_is_indexed() {
        let idx = indexed();
        let mut obj = (*cm("a", "one", None, None)).clone();
        obj.metadata.owner_references = Some(vec![OwnerReference {
            controller: Some(false),
            uid: "not-controller".into(),
            ..Default::default()
        }]);
        idx.insert(Arc::new(obj));
        assert!(
            idx.by_index(CONTROLLER_UID_INDEX, "not-controller")
                .is_empty()
        );
    }

    #[test]
    fn replace_swaps_the_content_and_rebuilds_indexes() {
        let idx = indexed();
        idx.insert(cm("a", "gone", Some("uid-1"), Some("mnist")));
        idx.replace([cm("b", "new", Some("uid-1"), Some("mnist"))]);
        assert_eq!(idx.len(), 1);
        assert!(idx.get(&ObjectKey::new(Some("a"), "gone")).is_none());
        assert_eq!(names(idx.by_index("job", "mnist")), ["new"]);
        assert!(idx.by_index(NAMESPACE_INDEX, "a").is_empty());
    }

    #[test]
    fn an_index_added_late_covers_objects_already_cached() {
        let idx = Indexer::new();
        idx.insert(cm("a", "one", None, Some("mnist")));
        idx.add_index("job", label_index_fn("job"));
        assert_eq!(names(idx.by_index("job", "mnist")), ["one"]);
    }

    #[test]
    fn objects_handed_out_are_shared_not_copied() {
        let idx = indexed();
        let obj = cm("a", "one", None, None);
        idx.insert(obj.clone());
        let got = idx.get(&ObjectKey::new(Some("a"), "one"));
        assert!(got.is_some_and(|g| Arc::ptr_eq(&g, &obj)));
    }
}
