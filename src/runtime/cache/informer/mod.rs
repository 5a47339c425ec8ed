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
mod tests;
