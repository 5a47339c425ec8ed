//! DeltaFIFO: the queue between the reflector and the informer.
//!
//! Mirrors client-go `tools/cache/delta_fifo.go`. For each object key it keeps
//! the list of changes ("deltas") not yet processed, and queues the key at most
//! once, so a burst of changes to one object is handed to the informer as one
//! batch, in order. The reflector pushes (`add`/`update`/`delete` per watch
//! event, `replace` after every (re)list); the informer pops.
//!
//! What it must never do: lose a deletion. When a relist shows that objects the
//! cache knows about are gone (their delete events were missed while the watch
//! was down), `replace` queues a `Deleted` delta holding a
//! [`DeletedObject::FinalStateUnknown`] tombstone for each of them.
//!
//! Upstream moved its default to an in-order `RealFIFO` in 1.33; we keep the
//! textbook DeltaFIFO because per-key batching is what the informer's
//! old/new bookkeeping and this codebase's teaching purpose want.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, watch};

use super::key::ObjectKey;
use super::object::Object;
use super::store::Indexer;

/// What a handler is told about a deleted object.
///
/// `FinalStateUnknown` is client-go's `DeletedFinalStateUnknown`: the delete
/// event itself was missed (the watch was down), a relist showed the object is
/// gone, and `obj` is the last state the cache knew — possibly stale.
pub enum DeletedObject<K> {
    /// Seen deleted by the watch; the object is its final state.
    Deleted(Arc<K>),
    /// Found missing by a relist; `obj` is the last known state.
    FinalStateUnknown { key: ObjectKey, obj: Arc<K> },
}

impl<K> DeletedObject<K> {
    /// The deleted object (its final or last known state).
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Deleted(obj) | Self::FinalStateUnknown { obj, .. } => obj,
        }
    }

    /// Whether this is a tombstone from a relist rather than a watched delete.
    pub fn is_final_state_unknown(&self) -> bool {
        matches!(self, Self::FinalStateUnknown { .. })
    }
}

impl<K> Clone for DeletedObject<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Deleted(obj) => Self::Deleted(obj.clone()),
            Self::FinalStateUnknown { key, obj } => Self::FinalStateUnknown {
                key: key.clone(),
                obj: obj.clone(),
            },
        }
    }
}

impl<K> std::fmt::Debug for DeletedObject<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Deleted(_) => f.write_str("Deleted"),
            Self::FinalStateUnknown { key, .. } => write!(f, "FinalStateUnknown({key})"),
        }
    }
}

/// Objects a relist returned but the reflector could not decode. They are
/// alive on the server, so a `replace` must not tombstone them: the cache
/// keeps its last good copy of each (client-go has no such case: there, one
/// undecodable object fails the whole list).
#[derive(Clone, Debug, Default)]
pub struct Undecodable {
    /// Keys read from the undecodable objects' metadata.
    pub keys: HashSet<ObjectKey>,
    /// Some undecodable object did not even yield a key: nothing missing
    /// from this list can be called deleted.
    pub unknown_keys: bool,
}

impl Undecodable {
    /// Whether every listed object decoded.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && !self.unknown_keys
    }
}

/// One change to one object (client-go `Delta` with its `DeltaType`).
pub enum Delta<K> {
    /// Seen created by the watch.
    Added(Arc<K>),
    /// Seen modified by the watch.
    Updated(Arc<K>),
    /// Seen deleted by the watch, or found missing by a relist.
    Deleted(DeletedObject<K>),
    /// Listed by a (re)list.
    Replaced(Arc<K>),
    /// Re-delivered by a periodic resync (no change on the server).
    Sync(Arc<K>),
}

impl<K> Delta<K> {
    /// The object the delta carries.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Added(o) | Self::Updated(o) | Self::Replaced(o) | Self::Sync(o) => o,
            Self::Deleted(d) => d.object(),
        }
    }

    /// The delta type's name, for logs and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Added(_) => "Added",
            Self::Updated(_) => "Updated",
            Self::Deleted(DeletedObject::Deleted(_)) => "Deleted",
            Self::Deleted(DeletedObject::FinalStateUnknown { .. }) => "DeletedFinalStateUnknown",
            Self::Replaced(_) => "Replaced",
            Self::Sync(_) => "Sync",
        }
    }
}

impl<K> Clone for Delta<K> {
    fn clone(&self) -> Self {
        match self {
            Self::Added(o) => Self::Added(o.clone()),
            Self::Updated(o) => Self::Updated(o.clone()),
            Self::Deleted(d) => Self::Deleted(d.clone()),
            Self::Replaced(o) => Self::Replaced(o.clone()),
            Self::Sync(o) => Self::Sync(o.clone()),
        }
    }
}

impl<K> std::fmt::Debug for Delta<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

/// Everything queued for one key, oldest first, as handed out by a pop.
pub struct Deltas<K> {
    pub key: ObjectKey,
    pub deltas: Vec<Delta<K>>,
    /// Popped before the first list had been fully processed
    /// (client-go `isInInitialList`).
    pub in_initial_list: bool,
}

struct State<K> {
    /// Pending deltas per key; a key is present iff it is queued.
    items: HashMap<ObjectKey, Vec<Delta<K>>>,
    /// Keys in arrival order of their first pending delta; no duplicates.
    queue: VecDeque<ObjectKey>,
    /// `replace` has been called at least once.
    populated: bool,
    /// Keys of the first list still to be popped *and processed*.
    initial_population: usize,
    closed: bool,
}

impl<K> State<K> {
    fn has_synced(&self) -> bool {
        self.populated && self.initial_population == 0
    }

    fn queue_action(&mut self, key: ObjectKey, delta: Delta<K>) {
        let deltas = self.items.entry(key.clone()).or_default();
        let newly_queued = deltas.is_empty();
        deltas.push(delta);
        dedup_deletes(deltas);
        if newly_queued {
            self.queue.push_back(key);
        }
    }
}

/// Merges two consecutive deletes into one (client-go `dedupDeltas`): the
/// last state seen by the watch beats a relist's tombstone.
fn dedup_deletes<K>(deltas: &mut Vec<Delta<K>>) {
    let n = deltas.len();
    if n < 2 {
        return;
    }
    if let (Delta::Deleted(_), Delta::Deleted(newest)) = (&deltas[n - 2], &deltas[n - 1]) {
        if newest.is_final_state_unknown() {
            deltas.pop();
        } else {
            deltas.remove(n - 2);
        }
    }
}

/// The DeltaFIFO (client-go `cache.DeltaFIFO`). Cloning shares the queue.
pub struct DeltaFifo<K> {
    state: Arc<Mutex<State<K>>>,
    /// The informer's cache: what the FIFO's consumer already knows, used to
    /// find vanished keys on `replace` and the objects to resync.
    known: Indexer<K>,
    notify: Arc<Notify>,
    synced: Arc<watch::Sender<bool>>,
}

impl<K> Clone for DeltaFifo<K> {
    fn clone(&self) -> Self {
        Self {
            state: self.state.clone(),
            known: self.known.clone(),
            notify: self.notify.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K: Object> DeltaFifo<K> {
    /// An empty FIFO whose consumer keeps its state in `known`.
    pub fn new(known: Indexer<K>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                items: HashMap::new(),
                queue: VecDeque::new(),
                populated: false,
                initial_population: 0,
                closed: false,
            })),
            known,
            notify: Arc::new(Notify::new()),
            synced: Arc::new(watch::Sender::new(false)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, obj: Arc<K>, make: impl FnOnce(Arc<K>) -> Delta<K>) {
        let Some(key) = ObjectKey::of(obj.as_ref()) else {
            tracing::warn!("ignoring an object without a name");
            return;
        };
        let delta = make(obj);
        tracing::debug!(target: "pipeline", stage = "2 delta_fifo", kind = %K::kind(&()), key = %key, delta = delta.kind(), "delta queued");
        self.lock().queue_action(key, delta);
        self.notify.notify_waiters();
    }

    /// The cached copy of `obj` if the cache holds exactly this version
    /// (same key, UID and resourceVersion), else `obj` itself.
    ///
    /// A relist hands back every object; most are unchanged. Swapping each
    /// for the `Arc` already cached as it is decoded lets the fresh copy go
    /// at once, so a relist peaks near 1× the cache instead of 2× (old and
    /// new copies of everything side by side). client-go has no equivalent.
    pub fn reuse_unchanged(&self, obj: Arc<K>) -> Arc<K> {
        let Some(key) = ObjectKey::of(obj.as_ref()) else {
            return obj;
        };
        let meta = obj.meta();
        let Some(rv) = meta.resource_version.as_deref() else {
            return obj;
        };
        self.cached_unchanged(&key, meta.uid.as_deref(), rv)
            .unwrap_or(obj)
    }

    /// The consumer's cached object for `key` if it is still the one with
    /// this `uid` at this `resource_version`. The reflector asks before
    /// decoding a relisted object at all (see [`Self::reuse_unchanged`]).
    pub fn cached_unchanged(
        &self,
        key: &ObjectKey,
        uid: Option<&str>,
        resource_version: &str,
    ) -> Option<Arc<K>> {
        let cached = self.known.get(key)?;
        let meta = cached.meta();
        (meta.resource_version.as_deref() == Some(resource_version) && meta.uid.as_deref() == uid)
            .then_some(cached)
    }

    /// True while the consumer's cache is empty (before the first list).
    pub fn knows_nothing(&self) -> bool {
        self.known.is_empty()
    }

    /// Queues an `Added` delta (a watch ADDED event).
    pub fn add(&self, obj: Arc<K>) {
        self.push(obj, Delta::Added);
    }

    /// Queues an `Updated` delta (a watch MODIFIED event).
    pub fn update(&self, obj: Arc<K>) {
        self.push(obj, Delta::Updated);
    }

    /// Queues a `Deleted` delta (a watch DELETED event). Ignored when the key
    /// is neither cached nor queued: nobody ever saw the object, so there is
    /// nothing to delete.
    pub fn delete(&self, obj: Arc<K>) {
        let Some(key) = ObjectKey::of(obj.as_ref()) else {
            return;
        };
        {
            let mut state = self.lock();
            if !state.items.contains_key(&key) && !self.known.contains_key(&key) {
                return;
            }
            tracing::debug!(target: "pipeline", stage = "2 delta_fifo", kind = %K::kind(&()), key = %key, delta = "Deleted", "delta queued");
            state.queue_action(key, Delta::Deleted(DeletedObject::Deleted(obj)));
        }
        self.notify.notify_waiters();
    }

    /// Queues a delete of `key` whose final state could not be decoded (an
    /// undecodable watch DELETED): a `FinalStateUnknown` tombstone carrying
    /// the newest state known, queued or cached. Ignored, returning false,
    /// when the key is neither: nobody ever saw the object.
    pub fn delete_key(&self, key: ObjectKey) -> bool {
        {
            let mut state = self.lock();
            let queued = state
                .items
                .get(&key)
                .and_then(|d| d.last())
                .map(|d| d.object().clone());
            let Some(obj) = queued.or_else(|| self.known.get(&key)) else {
                return false;
            };
            tracing::debug!(target: "pipeline", stage = "2 delta_fifo", kind = %K::kind(&()), key = %key, delta = "DeletedFinalStateUnknown", "delta queued");
            let tombstone = DeletedObject::FinalStateUnknown {
                key: key.clone(),
                obj,
            };
            state.queue_action(key, Delta::Deleted(tombstone));
        }
        self.notify.notify_waiters();
        true
    }

    /// Queues the result of a (re)list: `Replaced` for every listed object and
    /// a `FinalStateUnknown` tombstone for every key that is cached or queued
    /// but absent from the list (client-go `Replace`).
    pub fn replace(&self, list: Vec<Arc<K>>) {
        self.replace_keeping(list, &Undecodable::default());
    }

    /// [`Self::replace`] for a list in which the objects in `undecodable`
    /// were present but could not be decoded: they count as listed (no
    /// tombstone) and keep whatever is cached or queued for them. With
    /// `unknown_keys` set, nothing is tombstoned at all.
    pub fn replace_keeping(&self, list: Vec<Arc<K>>, undecodable: &Undecodable) {
        tracing::debug!(target: "pipeline", stage = "2 delta_fifo", kind = %K::kind(&()), objects = list.len(), undecodable = undecodable.keys.len(), "relist: Replaced for each listed object, a tombstone for each vanished key");
        let mut state = self.lock();
        let mut listed = HashSet::with_capacity(list.len() + undecodable.keys.len());
        listed.extend(undecodable.keys.iter().cloned());
        for obj in list {
            let Some(key) = ObjectKey::of(obj.as_ref()) else {
                continue;
            };
            listed.insert(key.clone());
            state.queue_action(key, Delta::Replaced(obj));
        }
        if undecodable.unknown_keys {
            tracing::warn!(kind = %K::kind(&()), "an object of this relist had no readable name: no missing object is treated as deleted this time");
            self.finish_replace(state);
            return;
        }
        // Queued but not listed: its newest known state is in the queue.
        let vanished_queued: Vec<(ObjectKey, Arc<K>)> = state
            .items
            .iter()
            .filter(|(k, _)| !listed.contains(*k))
            .filter_map(|(k, d)| Some((k.clone(), d.last()?.object().clone())))
            .collect();
        for (key, obj) in vanished_queued {
            let tombstone = DeletedObject::FinalStateUnknown {
                key: key.clone(),
                obj,
            };
            state.queue_action(key, Delta::Deleted(tombstone));
        }
        // Cached, nothing queued, not listed: its delete event was missed.
        for key in self.known.list_keys() {
            if listed.contains(&key) || state.items.contains_key(&key) {
                continue;
            }
            if let Some(obj) = self.known.get(&key) {
                let tombstone = DeletedObject::FinalStateUnknown {
                    key: key.clone(),
                    obj,
                };
                state.queue_action(key, Delta::Deleted(tombstone));
            }
        }
        self.finish_replace(state);
    }

    fn finish_replace(&self, mut state: MutexGuard<'_, State<K>>) {
        if !state.populated {
            state.populated = true;
            state.initial_population = state.queue.len();
            if state.initial_population == 0 {
                self.synced.send_replace(true);
            }
        }
        drop(state);
        self.notify.notify_waiters();
    }

    /// Queues a `Sync` delta for every cached key that has nothing queued
    /// (client-go `Resync`): a queued key will be processed anyway, and a
    /// stale Sync behind a newer delta would be wrong.
    pub fn resync(&self) {
        let mut state = self.lock();
        for key in self.known.list_keys() {
            if state.items.contains_key(&key) {
                continue;
            }
            if let Some(obj) = self.known.get(&key) {
                state.queue_action(key, Delta::Sync(obj));
            }
        }
        drop(state);
        self.notify.notify_waiters();
    }

    /// Waits for a queued key, removes it with all its deltas and runs
    /// `process` on them (see [`Self::try_pop_with`]). Returns `None` once
    /// closed and drained.
    ///
    /// Cancel-safe: nothing is taken from the queue until it is processed.
    pub async fn pop_with<R>(&self, process: impl FnOnce(Deltas<K>) -> R) -> Option<R> {
        let mut process = Some(process);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a push in between is not missed.
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if !state.queue.is_empty() {
                    // `process` is still there: we only take it right before returning.
                    let process = process.take()?;
                    return self.pop_locked(&mut state, process);
                }
                if state.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Removes the first queued key with all its deltas, if any, and runs
    /// `process` on them **while holding the queue's lock** (as client-go
    /// does): until `process` has updated the cache, no concurrent `delete` or
    /// `replace` can wrongly conclude the key is unknown. `process` must not
    /// call back into this FIFO.
    pub fn try_pop_with<R>(&self, process: impl FnOnce(Deltas<K>) -> R) -> Option<R> {
        self.pop_locked(&mut self.lock(), process)
    }

    fn pop_locked<R>(
        &self,
        state: &mut State<K>,
        process: impl FnOnce(Deltas<K>) -> R,
    ) -> Option<R> {
        let key = state.queue.pop_front()?;
        let deltas = state.items.remove(&key).unwrap_or_default();
        let in_initial_list = !state.has_synced();
        let out = process(Deltas {
            key,
            deltas,
            in_initial_list,
        });
        if state.initial_population > 0 {
            state.initial_population -= 1;
            if state.has_synced() {
                self.synced.send_replace(true);
            }
        }
        Some(out)
    }

    /// Pops the next key with all its deltas (see [`Self::pop_with`]).
    pub async fn pop(&self) -> Option<Deltas<K>> {
        self.pop_with(|d| d).await
    }

    /// Closes the FIFO: pops drain what is queued, then return `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// True once the first `replace` happened and every key it queued has
    /// been popped and processed (client-go `HasSynced`).
    ///
    /// Reads a flag, not the queue: safe to call from an event handler, which
    /// runs while the queue is locked.
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until [`Self::has_synced`]. Cancel-safe.
    pub async fn wait_for_sync(&self) {
        let mut rx = self.synced.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Number of queued keys.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether no key is queued.
    pub fn is_empty(&self) -> bool {
        self.lock().queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::Duration;

    fn cm(name: &str, rv: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(Some("ns"), name)
    }

    #[test]
    fn a_relisted_object_at_the_cached_version_reuses_the_cached_copy() {
        let indexer = Indexer::new();
        let cached = cm("a", "5");
        indexer.insert(cached.clone());
        let fifo = DeltaFifo::new(indexer);
        let same = fifo.reuse_unchanged(cm("a", "5"));
        assert!(Arc::ptr_eq(&same, &cached), "unchanged: the cached Arc");
        let newer = cm("a", "6");
        assert!(
            Arc::ptr_eq(&fifo.reuse_unchanged(newer.clone()), &newer),
            "changed: the new copy"
        );
        let other = cm("b", "5");
        assert!(
            Arc::ptr_eq(&fifo.reuse_unchanged(other.clone()), &other),
            "unknown key: the new copy"
        );
    }

    fn kinds(d: &Deltas<ConfigMap>) -> Vec<&'static str> {
        d.deltas.iter().map(Delta::kind).collect()
    }

    fn rv(d: &Delta<ConfigMap>) -> String {
        d.object()
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default()
    }

    fn fifo() -> (DeltaFifo<ConfigMap>, Indexer<ConfigMap>) {
        let known = Indexer::new();
        (DeltaFifo::new(known.clone()), known)
    }

    #[test]
    fn a_key_is_queued_once_with_all_its_deltas_in_order() {
        let (f, _) = fifo();
        f.add(cm("a", "1"));
        f.add(cm("b", "2"));
        f.update(cm("a", "3"));
        assert_eq!(f.len(), 2);
        let a = f.try_pop_with(|d| d).unwrap();
        assert_eq!(a.key, key("a"));
        assert_eq!(kinds(&a), ["Added", "Updated"]);
        assert_eq!(rv(&a.deltas[1]), "3");
        assert_eq!(f.try_pop_with(|d| d.key), Some(key("b")));
        assert!(f.try_pop_with(|d| d.key).is_none());
    }

    #[test]
    fn a_delete_of_an_object_nobody_saw_is_ignored() {
        let (f, _) = fifo();
        f.delete(cm("ghost", "1"));
        assert!(f.is_empty());
    }

    #[test]
    fn a_delete_of_a_cached_object_is_queued() {
        let (f, known) = fifo();
        known.insert(cm("a", "1"));
        f.delete(cm("a", "2"));
        let d = f.try_pop_with(|d| d).unwrap();
        assert_eq!(kinds(&d), ["Deleted"]);
    }

    #[test]
    fn two_consecutive_deletes_keep_the_watched_one() {
        let (f, known) = fifo();
        known.insert(cm("a", "1"));
        f.delete(cm("a", "2"));
        // A relist while the delete is still queued adds a tombstone: merged away.
        f.replace(vec![]);
        let d = f.try_pop_with(|d| d).unwrap();
        assert_eq!(kinds(&d), ["Deleted"]);
        assert_eq!(rv(&d.deltas[0]), "2");
    }

    #[test]
    fn a_watched_delete_after_a_tombstone_replaces_it() {
        let (f, known) = fifo();
        known.insert(cm("a", "1"));
        f.replace(vec![]);
        f.delete(cm("a", "2"));
        let d = f.try_pop_with(|d| d).unwrap();
        assert_eq!(kinds(&d), ["Deleted"]);
        assert_eq!(rv(&d.deltas[0]), "2");
    }

    #[test]
    fn replace_tombstones_every_cached_key_missing_from_the_list() {
        let (f, known) = fifo();
        known.insert(cm("kept", "1"));
        known.insert(cm("gone", "2"));
        f.replace(vec![cm("kept", "3"), cm("new", "4")]);
        let mut popped = Vec::new();
        while let Some(d) = f.try_pop_with(|d| d) {
            popped.push((d.key.name().to_string(), kinds(&d)));
        }
        popped.sort();
        assert_eq!(
            popped,
            [
                ("gone".to_string(), vec!["DeletedFinalStateUnknown"]),
                ("kept".to_string(), vec!["Replaced"]),
                ("new".to_string(), vec!["Replaced"]),
            ]
        );
    }

    #[test]
    fn an_undecodable_relisted_object_keeps_its_cached_copy_and_is_not_tombstoned() {
        let (f, known) = fifo();
        known.insert(cm("broken", "1"));
        known.insert(cm("gone", "2"));
        let undecodable = Undecodable {
            keys: HashSet::from([key("broken")]),
            unknown_keys: false,
        };
        f.replace_keeping(vec![], &undecodable);
        let mut popped = Vec::new();
        while let Some(d) = f.try_pop_with(|d| d) {
            popped.push((d.key.name().to_string(), kinds(&d)));
        }
        assert_eq!(
            popped,
            [("gone".to_string(), vec!["DeletedFinalStateUnknown"])]
        );
    }

    #[test]
    fn a_relist_with_an_object_without_a_readable_key_tombstones_nothing() {
        let (f, known) = fifo();
        known.insert(cm("a", "1"));
        let undecodable = Undecodable {
            keys: HashSet::new(),
            unknown_keys: true,
        };
        f.replace_keeping(vec![cm("b", "2")], &undecodable);
        assert_eq!(f.try_pop_with(|d| kinds(&d)), Some(vec!["Replaced"]));
        assert!(f.is_empty(), "a was not tombstoned");
    }

    #[test]
    fn a_delete_by_key_tombstones_the_newest_known_state() {
        let (f, known) = fifo();
        known.insert(cm("a", "1"));
        f.update(cm("a", "2"));
        assert!(f.delete_key(key("a")));
        let d = f.try_pop_with(|d| d).unwrap();
        assert_eq!(kinds(&d), ["Updated", "DeletedFinalStateUnknown"]);
        assert_eq!(rv(&d.deltas[1]), "2");
        assert!(!f.delete_key(key("never-seen")));
        assert!(f.is_empty());
    }

    #[test]
    fn the_tombstone_carries_the_last_known_state() {
        let (f, known) = fifo();
        known.insert(cm("gone", "7"));
        f.replace(vec![]);
        let d = f.try_pop_with(|d| d).unwrap();
        match &d.deltas[0] {
            Delta::Deleted(DeletedObject::FinalStateUnknown { key: k, obj }) => {
                assert_eq!(k, &key("gone"));
                assert_eq!(obj.metadata.resource_version.as_deref(), Some("7"));
            }
            other => panic!("expected a tombstone, got {other:?}"),
        }
    }

    #[test]
    fn replace_tombstones_a_queued_key_missing_from_the_list() {
        let (f, _) = fifo();
        f.add(cm("brief", "1"));
        f.replace(vec![]);
        let d = f.try_pop_with(|d| d).unwrap();
        assert_eq!(kinds(&d), ["Added", "DeletedFinalStateUnknown"]);
    }

    #[test]
    fn resync_skips_keys_that_are_already_queued() {
        let (f, known) = fifo();
        known.insert(cm("idle", "1"));
        known.insert(cm("busy", "2"));
        f.update(cm("busy", "3"));
        f.resync();
        let mut popped = Vec::new();
        while let Some(d) = f.try_pop_with(|d| d) {
            popped.push((d.key.name().to_string(), kinds(&d)));
        }
        popped.sort();
        assert_eq!(
            popped,
            [
                ("busy".to_string(), vec!["Updated"]),
                ("idle".to_string(), vec!["Sync"]),
            ]
        );
    }

    #[test]
    fn has_synced_waits_until_the_first_list_is_processed() {
        let (f, _) = fifo();
        assert!(!f.has_synced());
        f.replace(vec![cm("a", "1"), cm("b", "2")]);
        assert!(!f.has_synced());
        let first = f.try_pop_with(|d| d.in_initial_list);
        assert_eq!(first, Some(true));
        assert!(!f.has_synced());
        // While the last initial key is processed, the FIFO is not yet synced.
        let during = f.try_pop_with(|d| (d.in_initial_list, f.has_synced()));
        assert_eq!(during, Some((true, false)));
        assert!(f.has_synced());
        f.add(cm("c", "3"));
        assert_eq!(f.try_pop_with(|d| d.in_initial_list), Some(false));
    }

    #[test]
    fn an_empty_first_list_is_synced_at_once() {
        let (f, _) = fifo();
        f.replace(vec![]);
        assert!(f.has_synced());
    }

    #[tokio::test(start_paused = true)]
    async fn pop_waits_for_an_item() {
        let (f, _) = fifo();
        let popper = tokio::spawn({
            let f = f.clone();
            async move { f.pop().await.map(|d| d.key) }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!popper.is_finished());
        f.add(cm("a", "1"));
        assert_eq!(popper.await.unwrap(), Some(key("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_sync_resolves_after_the_initial_items_are_popped() {
        let (f, _) = fifo();
        let waiter = tokio::spawn({
            let f = f.clone();
            async move { f.wait_for_sync().await }
        });
        f.replace(vec![cm("a", "1")]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        f.pop().await;
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("wait_for_sync resolves")
            .unwrap();
    }

    /// Several tasks wait for the same sync (the manager's readiness, each
    /// controller): every one is woken. kube-runtime 5's store readiness
    /// keeps one waker, so one of two concurrent waiters waits until
    /// something else polls it (see docs/benchmarks.md, latency).
    #[tokio::test(start_paused = true)]
    async fn wait_for_sync_wakes_every_concurrent_waiter() {
        let (f, _) = fifo();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let f = f.clone();
                tokio::spawn(async move { f.wait_for_sync().await })
            })
            .collect();
        // Let every waiter register before the sync happens.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        f.replace(vec![cm("a", "1")]);
        f.pop().await;
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(1), w)
                .await
                .expect("every waiter is woken by the sync")
                .unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_fifo_drains_then_returns_none() {
        let (f, _) = fifo();
        f.add(cm("a", "1"));
        f.close();
        assert!(f.pop().await.is_some());
        assert!(f.pop().await.is_none());
    }
}
