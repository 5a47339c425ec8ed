//! The SharedInformer: one cache of one kind, feeding every interested handler.
//!
//! Mirrors client-go `tools/cache/shared_informer.go` (`sharedIndexInformer`,
//! with `controller.go`'s `processDeltas`). It runs a [`Reflector`] that fills
//! a [`DeltaFifo`], pops the FIFO one key at a time, writes the change into
//! the [`Indexer`] and only then calls every registered [`EventHandler`], so a
//! handler always sees a cache at least as new as the event it is told about.
//!
//! It must never let a handler mutate a cached object (handlers get `&Arc<K>`)
//! and never let a panicking handler stop the informer. Handlers are called
//! inline, in order, on the informer's task: they must be quick (enqueue a
//! key, nothing more) and must not block.
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::delta_fifo::{DeletedObject, Delta, DeltaFifo, Deltas};
use super::object::Object;
use super::reflector::list_watch::ListWatch;
use super::reflector::{DecodeFailureHandler, Reflector, ReflectorConfig, ReflectorStatus};
use super::store::{
    CONTROLLER_UID_INDEX, IndexFn, Indexer, NAMESPACE_INDEX, controller_uid_index_fn,
    namespace_index_fn,
};

/// Receives the informer's notifications (client-go `ResourceEventHandler`).
pub trait EventHandler<K>: Send + Sync + 'static {
    /// A new object; `in_initial_list` is true while the first list is
    /// being delivered (and for the replay a late handler gets).
    fn on_add(&self, obj: &Arc<K>, in_initial_list: bool);
    /// A changed object. A handler registered with
    /// [`SharedInformer::add_event_handler_with_resync`] also gets the
    /// unchanged ones a relist or resync re-delivers (`old` and `new` then
    /// have the same resourceVersion); others never do.
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>);
    /// A deleted object, or a tombstone when the delete itself was missed.
    fn on_delete(&self, obj: &DeletedObject<K>);
}

/// How an informer lists, watches and resyncs.
pub struct InformerConfig<K> {
    pub reflector: ReflectorConfig<K>,
    /// Re-deliver every cached object as an update this often (`None`:
    /// never), to the handlers that asked for resyncs.
    pub resync: Option<Duration>,
}

impl<K: Object> Default for InformerConfig<K> {
    fn default() -> Self {
        Self {
            reflector: ReflectorConfig::default(),
            resync: None,
        }
    }
}

/// A registered handler and whether it wants syncs.
struct Registered<K> {
    handler: Arc<dyn EventHandler<K>>,
    /// Gets syncs: periodic resyncs, and relisted objects whose
    /// resourceVersion did not change.
    resync: bool,
}

struct Inner<K> {
    indexer: Indexer<K>,
    fifo: DeltaFifo<K>,
    handlers: RwLock<Vec<Registered<K>>>,
    /// Taken by the first `run`; later runs find `None` and return.
    reflector: Mutex<Option<Reflector<K>>>,
    status: ReflectorStatus,
    resync: Option<Duration>,
    started: AtomicBool,
}

/// A shared informer for kind `K`. Cloning shares it.
pub struct SharedInformer<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for SharedInformer<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Object> SharedInformer<K> {
    /// An informer over `list_watch`. The cache starts with the
    /// [`NAMESPACE_INDEX`] and [`CONTROLLER_UID_INDEX`] indexes.
    pub fn new(list_watch: Arc<dyn ListWatch>, config: InformerConfig<K>) -> Self {
        let indexer = Indexer::new();
        indexer.add_index(NAMESPACE_INDEX, namespace_index_fn());
        indexer.add_index(CONTROLLER_UID_INDEX, controller_uid_index_fn());
        let fifo = DeltaFifo::new(indexer.clone());
        let reflector = Reflector::new(list_watch, fifo.clone(), config.reflector);
        let status = reflector.status();
        Self {
            inner: Arc::new(Inner {
                indexer,
                fifo,
                handlers: RwLock::new(Vec::new()),
                reflector: Mutex::new(Some(reflector)),
                status,
                resync: config.resync,
                started: AtomicBool::new(false),
            }),
        }
    }

    /// The informer's cache (shared, read-only for controllers).
    pub fn indexer(&self) -> Indexer<K> {
        self.inner.indexer.clone()
    }

    /// Adds a named index (client-go `AddIndexers`). Meant to be called
    /// before `run`; a later call still indexes the cached objects.
    pub fn add_index(&self, name: &str, f: IndexFn<K>) {
        if self.inner.started.load(Ordering::Relaxed) {
            tracing::warn!(index = name, "index added after the informer started");
        }
        self.inner.indexer.add_index(name, f);
    }

    /// Registers a handler. A handler added after objects are cached first
    /// gets `on_add(obj, true)` for each of them, then live events, with no
    /// gap and no duplicate (registration waits for an in-flight event).
    /// Must not be called from inside a handler (it would deadlock).
    ///
    /// The handler gets no syncs: an object a relist (after every `410
    /// Gone`) or a resync re-delivers unchanged is not an update (client-go
    /// delivers those to handlers whose resync period is due; a handler
    /// that wants them says so with [`Self::add_event_handler_with_resync`]).
    pub fn add_event_handler(&self, handler: Arc<dyn EventHandler<K>>) {
        self.register(handler, false);
    }

    /// Like [`Self::add_event_handler`], and the handler also gets syncs:
    /// every cached object each resync period (see
    /// [`InformerConfig::resync`]) and the unchanged objects of a relist, as
    /// updates with the same resourceVersion on both sides.
    pub fn add_event_handler_with_resync(&self, handler: Arc<dyn EventHandler<K>>) {
        self.register(handler, true);
    }

    fn register(&self, handler: Arc<dyn EventHandler<K>>, resync: bool) {
        let mut handlers = self
            .inner
            .handlers
            .write()
            .unwrap_or_else(|p| p.into_inner());
        for obj in self.inner.indexer.list() {
            call(|| handler.on_add(&obj, true));
        }
        handlers.push(Registered { handler, resync });
    }

    /// True once every object of the first list has been cached and
    /// delivered (client-go `HasSynced`).
    pub fn has_synced(&self) -> bool {
        self.inner.fifo.has_synced()
    }

    /// Waits until [`Self::has_synced`]. Cancel-safe.
    pub async fn wait_for_sync(&self) {
        self.inner.fifo.wait_for_sync().await;
    }

    /// The resourceVersion the cache is synced to (last list, event or
    /// bookmark); `None` before the first list.
    pub fn last_sync_resource_version(&self) -> Option<String> {
        self.inner.status.last_sync_resource_version()
    }

    /// The reflector's counters (lists, watches, decode failures).
    pub fn reflector_status(&self) -> ReflectorStatus {
        self.inner.status.clone()
    }

    /// Calls `handler` with every object of this informer that fails to
    /// decode (the reflector logs and counts it, and skips it). Add it
    /// before [`Self::run`] to see the first list's.
    pub fn add_decode_failure_handler(&self, handler: DecodeFailureHandler) {
        self.inner.status.add_decode_failure_handler(handler);
    }

    /// Runs the reflector, the processing loop and the resync timer until
    /// `shutdown` is cancelled. Only the first call runs; later calls return.
    pub async fn run(self, shutdown: CancellationToken) {
        let reflector = self
            .inner
            .reflector
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(reflector) = reflector else {
            tracing::warn!("informer already running; ignoring a second run");
            return;
        };
        self.inner.started.store(true, Ordering::Relaxed);
        let process = async {
            while self
                .inner
                .fifo
                .pop_with(|deltas| self.process(deltas))
                .await
                .is_some()
            {}
        };
        let resync = async {
            match self.inner.resync {
                Some(period) => {
                    let start = tokio::time::Instant::now() + period;
                    let mut timer = tokio::time::interval_at(start, period);
                    loop {
                        timer.tick().await;
                        self.inner.fifo.resync();
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = reflector.run(shutdown.clone()) => {}
            _ = process => {}
            _ = resync => {}
        }
    }

    /// client-go `processDeltas`: cache first, then handlers.
    fn process(&self, deltas: Deltas<K>) {
        let handlers = self
            .inner
            .handlers
            .read()
            .unwrap_or_else(|p| p.into_inner());
        let indexer = &self.inner.indexer;
        tracing::debug!(target: "pipeline", stage = "3 informer", kind = %K::kind(&()), key = %deltas.key, deltas = deltas.deltas.len(), handlers = handlers.len(), "popped: indexer updated, then handlers called");
        for delta in deltas.deltas {
            let (obj, replaced) = match delta {
                Delta::Deleted(deleted) => {
                    indexer.remove(&deltas.key);
                    for h in handlers.iter() {
                        call(|| h.handler.on_delete(&deleted));
                    }
                    continue;
                }
                Delta::Sync(obj) => {
                    // A resync only ever re-delivers what is cached.
                    if let Some(old) = indexer.insert(obj.clone()) {
                        for h in handlers.iter().filter(|h| h.resync) {
                            call(|| h.handler.on_update(&old, &obj));
                        }
                    }
                    continue;
                }
                Delta::Replaced(obj) => (obj, true),
                Delta::Added(obj) | Delta::Updated(obj) => (obj, false),
            };
            match indexer.insert(obj.clone()) {
                Some(old) => {
                    // client-go's processDeltas: a relisted object at the
                    // cached resourceVersion is a sync, not an update.
                    let sync = replaced && same_version(old.as_ref(), obj.as_ref());
                    for h in handlers.iter().filter(|h| h.resync || !sync) {
                        call(|| h.handler.on_update(&old, &obj));
                    }
                }
                None => {
                    for h in handlers.iter() {
                        call(|| h.handler.on_add(&obj, deltas.in_initial_list));
                    }
                }
            }
        }
    }
}

/// Whether two states of an object have the same (known) resourceVersion.
fn same_version<K: Object>(a: &K, b: &K) -> bool {
    let rv = |o: &K| o.meta().resource_version.clone();
    rv(a).is_some() && rv(a) == rv(b)
}

/// Calls a handler, containing a panic so one faulty handler cannot stop the
/// informer (and with it every other controller sharing it).
fn call(f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        tracing::error!("an event handler panicked; the event is dropped for that handler");
    }
}

#[cfg(test)]
mod model_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cache::key::ObjectKey;
    use crate::runtime::cache::reflector::script::*;
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::WatchEvent;

    /// Records every notification, and whether the cache already reflected
    /// it when the handler was called.
    struct Recorder {
        indexer: Indexer<ConfigMap>,
        events: Mutex<Vec<String>>,
        cache_was_ahead: Mutex<Vec<bool>>,
    }

    impl Recorder {
        fn new(informer: &SharedInformer<ConfigMap>) -> Arc<Self> {
            Arc::new(Self {
                indexer: informer.indexer(),
                events: Mutex::new(Vec::new()),
                cache_was_ahead: Mutex::new(Vec::new()),
            })
        }

        fn events(&self) -> Vec<String> {
            self.events.lock().unwrap().clone()
        }

        fn cache_always_ahead(&self) -> bool {
            self.cache_was_ahead.lock().unwrap().iter().all(|b| *b)
        }

        fn cached(&self, obj: &Arc<ConfigMap>) -> bool {
            ObjectKey::of(obj.as_ref())
                .and_then(|k| self.indexer.get(&k))
                .is_some_and(|c| Arc::ptr_eq(&c, obj))
        }
    }

    fn name(obj: &ConfigMap) -> String {
        obj.metadata.name.clone().unwrap_or_default()
    }

    fn rv(obj: &ConfigMap) -> String {
        obj.metadata.resource_version.clone().unwrap_or_default()
    }

    impl EventHandler<ConfigMap> for Recorder {
        fn on_add(&self, obj: &Arc<ConfigMap>, in_initial_list: bool) {
            let initial = if in_initial_list { " (initial)" } else { "" };
            self.events
                .lock()
                .unwrap()
                .push(format!("add {}@{}{initial}", name(obj), rv(obj)));
            let ahead = self.cached(obj);
            self.cache_was_ahead.lock().unwrap().push(ahead);
        }

        fn on_update(&self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
            self.events.lock().unwrap().push(format!(
                "update {}@{}->{}",
                name(new),
                rv(old),
                rv(new)
            ));
            let ahead = self.cached(new);
            self.cache_was_ahead.lock().unwrap().push(ahead);
        }

        fn on_delete(&self, obj: &DeletedObject<ConfigMap>) {
            let what = if obj.is_final_state_unknown() {
                "tombstone"
            } else {
                "delete"
            };
            let o = obj.object();
            self.events
                .lock()
                .unwrap()
                .push(format!("{what} {}@{}", name(o), rv(o)));
            let gone = ObjectKey::of(o.as_ref()).is_some_and(|k| self.indexer.get(&k).is_none());
            self.cache_was_ahead.lock().unwrap().push(gone);
        }
    }

    struct Panicker;
    impl EventHandler<ConfigMap> for Panicker {
        fn on_add(&self, _: &Arc<ConfigMap>, _: bool) {
            panic!("handler bug");
        }
        fn on_update(&self, _: &Arc<ConfigMap>, _: &Arc<ConfigMap>) {
            panic!("handler bug");
        }
        fn on_delete(&self, _: &DeletedObject<ConfigMap>) {
            panic!("handler bug");
        }
    }

    fn informer(lw: ScriptedListWatch, resync: Option<Duration>) -> SharedInformer<ConfigMap> {
        let mut config = InformerConfig::default();
        config.reflector.streaming_list = false;
        config.resync = resync;
        SharedInformer::new(Arc::new(lw), config)
    }

    fn run(informer: &SharedInformer<ConfigMap>) -> tokio_util::sync::DropGuard {
        let shutdown = CancellationToken::new();
        tokio::spawn(informer.clone().run(shutdown.clone()));
        shutdown.drop_guard()
    }

    async fn settle(secs: u64) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }

    fn live() -> (mpsc::UnboundedSender<Event>, ScriptedWatch) {
        let (tx, rx) = mpsc::unbounded();
        (tx, ScriptedWatch::Live(rx))
    }

    #[tokio::test(start_paused = true)]
    async fn handlers_see_every_change_after_the_cache_has_it() {
        let (tx, watch) = live();
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![cm_json("a", "1")], "1", None)))
            .watch(watch);
        let inf = informer(lw, None);
        let rec = Recorder::new(&inf);
        inf.add_event_handler(rec.clone());
        let _guard = run(&inf);
        settle(1).await;
        tx.unbounded_send(Ok(WatchEvent::Added(cm_json("b", "2"))))
            .unwrap();
        tx.unbounded_send(Ok(WatchEvent::Modified(cm_json("a", "3"))))
            .unwrap();
        tx.unbounded_send(Ok(WatchEvent::Deleted(cm_json("b", "4"))))
            .unwrap();
        settle(1).await;
        // Order is kept per key, not across keys: b's deltas were queued
        // before a's update, so they are delivered together, first.
        assert_eq!(
            rec.events(),
            [
                "add a@1 (initial)",
                "add b@2",
                "delete b@4",
                "update a@1->3"
            ]
        );
        assert!(rec.cache_always_ahead());
        assert_eq!(inf.indexer().len(), 1);
        assert_eq!(inf.last_sync_resource_version().as_deref(), Some("4"));
    }

    #[tokio::test(start_paused = true)]
    async fn has_synced_turns_true_once_the_first_list_is_delivered() {
        let lw = ScriptedListWatch::new().list(Ok(page(
            vec![cm_json("a", "1"), cm_json("b", "1")],
            "1",
            None,
        )));
        let inf = informer(lw, None);
        assert!(!inf.has_synced());
        let _guard = run(&inf);
        tokio::time::timeout(Duration::from_secs(5), inf.wait_for_sync())
            .await
            .expect("synced");
        assert!(inf.has_synced());
        assert_eq!(inf.indexer().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_sync_does_not_resolve_while_the_list_keeps_failing() {
        let lw = ScriptedListWatch::new().list(Err(api_error(500, "InternalError")));
        let inf = informer(lw, None);
        let _guard = run(&inf);
        let waited = tokio::time::timeout(Duration::from_secs(60), inf.wait_for_sync()).await;
        assert!(waited.is_err());
        assert!(!inf.has_synced());
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_missed_while_the_watch_was_down_arrives_as_a_tombstone() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(
                vec![cm_json("a", "1"), cm_json("b", "2")],
                "5",
                None,
            )))
            .watch(ScriptedWatch::Events {
                events: vec![expired_event()],
                stay_open: false,
            })
            .list(Ok(page(vec![cm_json("a", "1")], "9", None)));
        let inf = informer(lw, None);
        let rec = Recorder::new(&inf);
        inf.add_event_handler(rec.clone());
        let _guard = run(&inf);
        settle(5).await;
        let events = rec.events();
        assert_eq!(
            events
                .iter()
                .filter(|e| e.starts_with("tombstone b@2"))
                .count(),
            1
        );
        assert!(rec.cache_always_ahead());
        assert!(
            inf.indexer()
                .get(&ObjectKey::new(Some("ns"), "b"))
                .is_none()
        );
        assert_eq!(inf.indexer().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_handler_first_gets_the_cached_objects_as_initial_adds() {
        let lw = ScriptedListWatch::new().list(Ok(page(vec![cm_json("a", "1")], "1", None)));
        let inf = informer(lw, None);
        let _guard = run(&inf);
        inf.wait_for_sync().await;
        let rec = Recorder::new(&inf);
        inf.add_event_handler(rec.clone());
        assert_eq!(rec.events(), ["add a@1 (initial)"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_handler_does_not_stop_the_informer_or_other_handlers() {
        let (tx, watch) = live();
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![cm_json("a", "1")], "1", None)))
            .watch(watch);
        let inf = informer(lw, None);
        inf.add_event_handler(Arc::new(Panicker));
        let rec = Recorder::new(&inf);
        inf.add_event_handler(rec.clone());
        let _guard = run(&inf);
        settle(1).await;
        tx.unbounded_send(Ok(WatchEvent::Added(cm_json("b", "2"))))
            .unwrap();
        settle(1).await;
        assert_eq!(rec.events(), ["add a@1 (initial)", "add b@2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn resync_redelivers_cached_objects_as_updates_to_handlers_that_asked() {
        let lw = ScriptedListWatch::new().list(Ok(page(vec![cm_json("a", "1")], "1", None)));
        let inf = informer(lw, Some(Duration::from_secs(60)));
        let resyncing = Recorder::new(&inf);
        inf.add_event_handler_with_resync(resyncing.clone());
        let plain = Recorder::new(&inf);
        inf.add_event_handler(plain.clone());
        let _guard = run(&inf);
        settle(59).await;
        assert_eq!(resyncing.events(), ["add a@1 (initial)"]);
        settle(2).await;
        assert_eq!(resyncing.events(), ["add a@1 (initial)", "update a@1->1"]);
        assert_eq!(plain.events(), ["add a@1 (initial)"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_delivers_only_what_changed_except_to_handlers_that_asked_for_syncs() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(
                vec![cm_json("a", "1"), cm_json("b", "1")],
                "1",
                None,
            )))
            .watch(ScriptedWatch::Events {
                events: vec![expired_event()],
                stay_open: false,
            })
            .list(Ok(page(
                vec![cm_json("a", "1"), cm_json("b", "2")],
                "5",
                None,
            )));
        let inf = informer(lw, None);
        let plain = Recorder::new(&inf);
        inf.add_event_handler(plain.clone());
        let resyncing = Recorder::new(&inf);
        inf.add_event_handler_with_resync(resyncing.clone());
        let _guard = run(&inf);
        settle(5).await;
        let updates = |r: &Recorder| -> Vec<String> {
            let mut u: Vec<String> = r
                .events()
                .into_iter()
                .filter(|e| e.starts_with("update"))
                .collect();
            u.sort();
            u
        };
        assert_eq!(updates(&plain), ["update b@1->2"]);
        assert_eq!(updates(&resyncing), ["update a@1->1", "update b@1->2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_run_returns_at_once() {
        let inf = informer(ScriptedListWatch::new(), None);
        let _guard = run(&inf);
        settle(1).await;
        let second = tokio::time::timeout(
            Duration::from_secs(1),
            inf.clone().run(CancellationToken::new()),
        )
        .await;
        assert!(second.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn run_returns_when_shutdown_is_cancelled() {
        let inf = informer(ScriptedListWatch::new(), None);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(inf.clone().run(shutdown.clone()));
        settle(1).await;
        assert!(!task.is_finished());
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("run returned")
            .unwrap();
    }

    /// Reads the informer from inside a handler, as a controller might.
    struct SyncProbe {
        informer: SharedInformer<ConfigMap>,
        seen: Mutex<Vec<(bool, usize)>>,
    }

    impl EventHandler<ConfigMap> for SyncProbe {
        fn on_add(&self, _: &Arc<ConfigMap>, _: bool) {
            let seen = (self.informer.has_synced(), self.informer.indexer().len());
            self.seen.lock().unwrap().push(seen);
        }
        fn on_update(&self, _: &Arc<ConfigMap>, _: &Arc<ConfigMap>) {}
        fn on_delete(&self, _: &DeletedObject<ConfigMap>) {}
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_may_read_the_informer_without_deadlocking() {
        let lw = ScriptedListWatch::new().list(Ok(page(vec![cm_json("a", "1")], "1", None)));
        let inf = informer(lw, None);
        let probe = Arc::new(SyncProbe {
            informer: inf.clone(),
            seen: Mutex::new(Vec::new()),
        });
        inf.add_event_handler(probe.clone());
        let _guard = run(&inf);
        tokio::time::timeout(Duration::from_secs(5), inf.wait_for_sync())
            .await
            .expect("synced, no deadlock");
        // Not yet synced while the last initial object is being delivered.
        assert_eq!(*probe.seen.lock().unwrap(), [(false, 1)]);
    }

    #[test]
    fn every_informer_has_the_namespace_and_controller_uid_indexes() {
        let inf = informer(ScriptedListWatch::new(), None);
        assert!(inf.indexer().has_index(NAMESPACE_INDEX));
        assert!(inf.indexer().has_index(CONTROLLER_UID_INDEX));
    }
}
