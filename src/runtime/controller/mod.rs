//! The controller: watches feed a queue, workers drain it into `reconcile`.
//!
//! This folder mirrors controller-runtime's `pkg/controller`, `pkg/builder`
//! and `pkg/handler`: the controller and its builder here, the
//! [`handler`]s that turn informer events into queue keys, and the two safety
//! nets that keep a reconcile correct while its cache lags: [`expectations`]
//! (k/k `controller_utils.go`) and [`ownership`] (`controller_ref_manager.go`).
//! Chapters: `docs/05-event-handlers.md`, `docs/07-workers.md`,
//! `docs/09-builder.md`, `docs/12-expectations.md`,
//! `docs/13-ownership-and-gc.md`.
//!
//! Mirrors controller-runtime `pkg/builder/controller.go` (the builder:
//! `For`, `Owns`, `Watches`, `WithEventFilter`, plus the `Channel` source as
//! `watches_channel` and [`Controller::queue`]) and
//! `pkg/internal/controller/controller.go` (`Start`, `processNextWorkItem`,
//! `reconcileHandler`), in the lifecycle order sample-controller reads in:
//! build → run (register handlers, wait for caches, start workers) → worker
//! loop → what each reconcile result does to the key.
//!
//! The result rules are controller-runtime's:
//! - `Ok(Action::Done)`: `forget` (the key's backoff resets);
//! - `Ok(Action::RequeueAfter(d))`: `forget`, then `add_after(d)`;
//! - `Err(e)`: `add_rate_limited` (per-key exponential backoff);
//! - `Err(e)` with `e.is_terminal()`: `forget`, never retried, but counted;
//! - a panic: caught, counted, and retried like an error. The worker lives.
//!
//! A controller never reads objects itself and never knows what a key means:
//! the [`Reconciler`] does. It must never run one key on two workers (the
//! queue guarantees it) nor drop a key it was handed without `done`.
pub mod expectations;
pub mod handler;
pub mod ownership;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::cache::informer::SharedInformer;
use super::cache::key::ObjectKey;
use super::cache::object::Object;
use super::workqueue::rate_limiter::{RateLimiter, default_controller_rate_limiter};
use super::workqueue::rate_limiting::RateLimitingQueue;
use crate::runtime::metrics::{
    self, Buckets, CounterFamily, Discard, Family, GaugeFamily, HistogramFamily, SharedMetrics,
    register_once,
};
use handler::{EnqueueHandler, OwnerType, Predicate};

/// What to do with a key after a successful reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing more until the next event.
    Done,
    /// Reconcile again after this long (deadlines, polling), even without events.
    RequeueAfter(Duration),
}

/// The error a reconciler returns.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// A terminal error will not get better by retrying (a bad spec): the key
    /// is forgotten and only a new event brings it back.
    fn is_terminal(&self) -> bool {
        false
    }
    /// A stable, low-cardinality name for logs and metric labels.
    fn category(&self) -> &'static str {
        "reconcile"
    }
}

/// Brings the world in line with one object's spec (controller-runtime `Reconciler`).
///
/// Called with the key only: read the newest object from the cache. Must be
/// idempotent (the same key may be reconciled again at any time) and never
/// runs concurrently for the same key.
pub trait Reconciler: Send + Sync + 'static {
    type Error: ReconcileError;

    fn reconcile(&self, key: ObjectKey)
    -> impl Future<Output = Result<Action, Self::Error>> + Send;
}

/// Errors building or running a controller.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("failed to build controller {0}: owns() needs for_informer() to name the owner kind")]
    OwnsWithoutFor(String),
    #[error("failed to build controller {0}: workers must be at least 1")]
    NoWorkers(String),
    #[error("failed to start controller {0}: caches did not sync within {1:?}")]
    CacheSyncTimeout(String, Duration),
}

/// Registers one watch's handler on its informer, given the queue, the
/// global event filters and the primary kind (for `owns`).
type Register =
    Box<dyn FnOnce(&RateLimitingQueue<ObjectKey>, &[Arc<dyn Predicate>], &OwnerType) + Send>;

/// Waits until one watched informer has synced.
type WaitForSync = Box<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

struct Source {
    register: Register,
    wait_for_sync: WaitForSync,
}

fn source<K: Object>(informer: &SharedInformer<K>, register: Register) -> Source {
    let informer = informer.clone();
    Source {
        register,
        wait_for_sync: Box::new(move || {
            let informer = informer.clone();
            Box::pin(async move { informer.wait_for_sync().await })
        }),
    }
}

/// Builds a [`Controller`]; start with [`Controller::builder`].
pub struct ControllerBuilder {
    name: String,
    primary: Option<OwnerType>,
    sources: Vec<Source>,
    channels: Vec<BoxStream<'static, ObjectKey>>,
    needs_primary: bool,
    filters: Vec<Arc<dyn Predicate>>,
    workers: usize,
    registry: Option<SharedMetrics>,
    rate_limiter: Option<Box<dyn RateLimiter<ObjectKey>>>,
    cache_sync_timeout: Duration,
}

impl ControllerBuilder {
    /// The primary kind: its own events enqueue its own key (`For`).
    pub fn for_informer<K: Object>(mut self, informer: &SharedInformer<K>) -> Self
    where
        K::Scope: 'static,
    {
        self.primary = Some(OwnerType::of::<K>());
        let register: Register = Box::new({
            let informer = informer.clone();
            move |queue, filters, _| {
                let handler = EnqueueHandler::<K>::for_object(queue.clone())
                    .with_predicates(filters.to_vec());
                informer.add_event_handler(Arc::new(handler));
            }
        });
        self.sources.push(source(informer, register));
        self
    }

    /// A child kind: its events enqueue the key of its controller owner, if
    /// that owner is of the primary kind (`Owns`, controller owner only).
    pub fn owns<K: Object>(mut self, informer: &SharedInformer<K>) -> Self {
        self.needs_primary = true;
        let register: Register = Box::new({
            let informer = informer.clone();
            move |queue, filters, owner| {
                let handler =
                    EnqueueHandler::<K>::for_controller_owner(queue.clone(), owner.clone())
                        .with_predicates(filters.to_vec());
                informer.add_event_handler(Arc::new(handler));
            }
        });
        self.sources.push(source(informer, register));
        self
    }

    /// Any kind, mapped to the keys it concerns (`Watches` + `EnqueueRequestsFromMapFunc`).
    pub fn watches<K: Object>(
        mut self,
        informer: &SharedInformer<K>,
        map: impl Fn(&K) -> Vec<ObjectKey> + Send + Sync + 'static,
    ) -> Self {
        let register: Register = Box::new({
            let informer = informer.clone();
            move |queue, filters, _| {
                let handler = EnqueueHandler::<K>::mapped(queue.clone(), map)
                    .with_predicates(filters.to_vec());
                informer.add_event_handler(Arc::new(handler));
            }
        });
        self.sources.push(source(informer, register));
        self
    }

    /// External triggers (controller-runtime's `Channel` source): every key
    /// the stream yields is added to the queue once the workers run. Event
    /// filters do not apply (there is no object to look at). For one-off
    /// triggers, [`Controller::queue`] works too.
    pub fn watches_channel(mut self, keys: impl Stream<Item = ObjectKey> + Send + 'static) -> Self {
        self.channels.push(keys.boxed());
        self
    }

    /// A filter applied to the events of every watch (`WithEventFilter`).
    pub fn with_event_filter(mut self, predicate: impl Predicate) -> Self {
        self.filters.push(Arc::new(predicate));
        self
    }

    /// How many keys may be reconciled at once (`MaxConcurrentReconciles`; default 1).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// Where the `controller_runtime_*` and `workqueue_*` metrics go.
    pub fn registry(mut self, registry: &SharedMetrics) -> Self {
        self.registry = Some(Arc::clone(registry));
        self
    }

    /// Replaces client-go's default controller rate limiter.
    pub fn rate_limiter(mut self, limiter: impl RateLimiter<ObjectKey>) -> Self {
        self.rate_limiter = Some(Box::new(limiter));
        self
    }

    /// How long `run` waits for the informers to sync (default 2 min).
    pub fn cache_sync_timeout(mut self, timeout: Duration) -> Self {
        self.cache_sync_timeout = timeout;
        self
    }

    /// The controller, ready to [`run`](Controller::run).
    pub fn build<R: Reconciler>(self, reconciler: R) -> Result<Controller<R>, ControllerError> {
        if self.workers == 0 {
            return Err(ControllerError::NoWorkers(self.name));
        }
        let primary = match (self.primary, self.needs_primary) {
            (Some(p), _) => p,
            (None, true) => return Err(ControllerError::OwnsWithoutFor(self.name)),
            // No primary and no owns(): only mapped watches or external
            // triggers feed this controller, so no owner type is ever used.
            (None, false) => OwnerType::new("", "", false),
        };
        let limiter = self
            .rate_limiter
            .unwrap_or_else(|| Box::new(default_controller_rate_limiter()));
        let queue = match &self.registry {
            Some(registry) => RateLimitingQueue::with_metrics(&self.name, limiter, registry),
            None => RateLimitingQueue::new(limiter),
        };
        let metrics = ControllerMetrics::new(self.registry.as_ref(), &self.name);
        Ok(Controller {
            inner: Arc::new(Inner {
                name: self.name,
                queue,
                reconciler,
                metrics,
                next_id: AtomicU64::new(1),
            }),
            primary,
            sources: self.sources,
            channels: self.channels,
            filters: self.filters,
            workers: self.workers,
            cache_sync_timeout: self.cache_sync_timeout,
        })
    }
}

impl Controller<()> {
    /// Starts building a controller called `name` (the `controller` label of
    /// its metrics and the `name` of its queue's).
    pub fn builder(name: &str) -> ControllerBuilder {
        ControllerBuilder {
            name: name.to_owned(),
            primary: None,
            sources: Vec::new(),
            channels: Vec::new(),
            needs_primary: false,
            filters: Vec::new(),
            workers: 1,
            registry: None,
            rate_limiter: None,
            cache_sync_timeout: Duration::from_secs(120),
        }
    }
}

/// A controller: its queue, its watches and its reconciler.
pub struct Controller<R> {
    inner: Arc<Inner<R>>,
    primary: OwnerType,
    sources: Vec<Source>,
    channels: Vec<BoxStream<'static, ObjectKey>>,
    filters: Vec<Arc<dyn Predicate>>,
    workers: usize,
    cache_sync_timeout: Duration,
}

/// What the workers share.
struct Inner<R> {
    name: String,
    queue: RateLimitingQueue<ObjectKey>,
    reconciler: R,
    metrics: ControllerMetrics,
    /// Numbers reconciles in logs, like controller-runtime's reconcileID.
    next_id: AtomicU64,
}

impl<R: Reconciler> Controller<R> {
    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The queue, for external triggers (controller-runtime's `Channel`
    /// source): anything may `add` a key and it is reconciled like any other.
    pub fn queue(&self) -> RateLimitingQueue<ObjectKey> {
        self.inner.queue.clone()
    }

    /// Registers the handlers, waits for every watched cache to sync, runs
    /// the workers until `shutdown`, then drains: reconciles in flight
    /// finish, nothing new starts. Returns once every worker has stopped.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ControllerError> {
        let Controller {
            inner,
            primary,
            sources,
            channels,
            filters,
            workers,
            cache_sync_timeout,
        } = self;
        let mut waits = Vec::with_capacity(sources.len());
        for source in sources {
            (source.register)(&inner.queue, &filters, &primary);
            waits.push(source.wait_for_sync);
        }
        let synced = futures::future::join_all(waits.iter().map(|wait| wait()));
        tokio::select! {
            () = shutdown.cancelled() => {
                inner.queue.shut_down();
                return Ok(());
            }
            res = tokio::time::timeout(cache_sync_timeout, synced) => {
                if res.is_err() {
                    inner.queue.shut_down();
                    return Err(ControllerError::CacheSyncTimeout(inner.name.clone(), cache_sync_timeout));
                }
            }
        }
        tracing::info!(controller = %inner.name, workers, "starting workers");
        inner
            .metrics
            .max_concurrent
            .set(i64::try_from(workers).unwrap_or(i64::MAX));
        let mut forwarders = JoinSet::new();
        for mut keys in channels {
            let queue = inner.queue.clone();
            forwarders.spawn(async move {
                while let Some(key) = keys.next().await {
                    queue.add(key);
                }
            });
        }
        let mut tasks = JoinSet::new();
        for _ in 0..workers {
            let inner = Arc::clone(&inner);
            tasks.spawn(async move { while inner.process_next_work_item().await {} });
        }
        shutdown.cancelled().await;
        // Forwarders only move keys into a queue that is about to refuse them.
        forwarders.abort_all();
        tracing::info!(controller = %inner.name, "shutdown signal received, waiting for reconciles in flight");
        inner.queue.shut_down_with_drain().await;
        while tasks.join_next().await.is_some() {}
        tracing::info!(controller = %inner.name, "all workers finished");
        Ok(())
    }
}

impl<R: Reconciler> Inner<R> {
    /// One turn of a worker: take a key, reconcile it, mark it done.
    /// Returns false once the queue is shut down.
    async fn process_next_work_item(&self) -> bool {
        let Some(key) = self.queue.get().await else {
            return false;
        };
        // `depth`: keys still ready in the queue behind this one.
        tracing::debug!(target: "pipeline", stage = "7 worker", controller = %self.name, key = %key, depth = self.queue.len(), "key taken from the workqueue: reconciling");
        self.metrics.active_workers.inc();
        self.reconcile_handler(&key).await;
        self.metrics.active_workers.dec();
        // Only now may another worker take this key (if it was re-added).
        self.queue.done(&key);
        true
    }

    /// Runs one reconcile and applies the result rules from the module docs.
    async fn reconcile_handler(&self, key: &ObjectKey) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // controller-runtime's log keys, so JSON logs read like a Go controller's.
        // No parent: each reconcile is a trace of its own (as exported over OTLP).
        let span = tracing::info_span!(parent: None, "reconcile", controller = %self.name, namespace = key.namespace().unwrap_or_default(), name = key.name(), reconcileID = id, otel.status_code = tracing::field::Empty);
        let start = Instant::now();
        // A panic must not take the worker (or the process) down with it.
        let result = AssertUnwindSafe(self.reconciler.reconcile(key.clone()))
            .catch_unwind()
            .instrument(span.clone())
            .await;
        self.metrics
            .reconcile_time
            .observe(start.elapsed().as_secs_f64());
        let _entered = span.enter();
        tracing::debug!(target: "pipeline", stage = "7 worker", key = %key, result = ?result.as_ref().map(|r| r.as_ref().map_err(|e| e.category())).ok(), elapsed = ?start.elapsed(), "reconcile finished");
        let m = &self.metrics;
        match result {
            Ok(Ok(Action::Done)) => {
                self.queue.forget(key);
                m.result(ResultLabel::Success);
            }
            Ok(Ok(Action::RequeueAfter(after))) => {
                // Forget first: a timed requeue is not a failure and must not
                // inherit a backoff.
                self.queue.forget(key);
                self.queue.add_after(key.clone(), after);
                m.result(ResultLabel::RequeueAfter);
                tracing::debug!(?after, "requeue after");
            }
            Ok(Err(err)) if err.is_terminal() => {
                span.record("otel.status_code", "error");
                self.queue.forget(key);
                m.error(err.category());
                m.terminal_errors.inc();
                tracing::error!(error = %err, category = err.category(), "terminal reconcile error, not retrying");
            }
            Ok(Err(err)) => {
                span.record("otel.status_code", "error");
                self.queue.add_rate_limited(key.clone());
                m.error(err.category());
                tracing::warn!(
                    error = %err,
                    category = err.category(),
                    retries = self.queue.num_requeues(key),
                    "reconcile failed, retrying with backoff"
                );
            }
            Err(panic) => {
                span.record("otel.status_code", "error");
                self.queue.add_rate_limited(key.clone());
                m.panics.inc();
                m.error("panic");
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(panic = %msg, "reconcile panicked, retrying with backoff");
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum ResultLabel {
    Success,
    Error,
    RequeueAfter,
}

impl ResultLabel {
    fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::RequeueAfter => "requeue_after",
        }
    }
}

/// controller-runtime's buckets: fine below 1 s, coarse up to a minute.
const RECONCILE_TIME_BUCKETS: Buckets = Buckets::Explicit(&[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
]);

const BY_CONTROLLER: &[&str] = &["controller"];

/// The `controller_runtime_*` families of one registry.
#[derive(Clone)]
struct ControllerFamilies {
    total: Arc<dyn CounterFamily>,
    errors: Arc<dyn CounterFamily>,
    errors_by_category: Arc<dyn CounterFamily>,
    terminal_errors: Arc<dyn CounterFamily>,
    panics: Arc<dyn CounterFamily>,
    time: Arc<dyn HistogramFamily>,
    active_workers: Arc<dyn GaugeFamily>,
    max_concurrent: Arc<dyn GaugeFamily>,
}

impl ControllerFamilies {
    fn new(r: &SharedMetrics) -> Self {
        let family = |name, help| Family {
            name,
            help,
            labels: BY_CONTROLLER,
        };
        // The registry appends `_total` to counter names.
        Self {
            total: r.counter(Family {
                name: "controller_runtime_reconcile",
                help: "Total number of reconciliations per controller",
                labels: &["controller", "result"],
            }),
            errors: r.counter(family(
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
            )),
            errors_by_category: r.counter(Family {
                name: "tfjob_operator_reconcile_errors_by_category",
                help: "Reconciliation errors per controller and error category",
                labels: &["controller", "category"],
            }),
            terminal_errors: r.counter(family(
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
            )),
            panics: r.counter(family(
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
            )),
            time: r.histogram(
                family(
                    "controller_runtime_reconcile_time_seconds",
                    "Length of time per reconciliation per controller",
                ),
                RECONCILE_TIME_BUCKETS,
            ),
            active_workers: r.gauge(family(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
            )),
            max_concurrent: r.gauge(family(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
            )),
        }
    }

    fn register(registry: &SharedMetrics) -> Self {
        register_once(registry, Self::new)
    }
}

/// One controller's metric handles.
struct ControllerMetrics {
    name: String,
    families: ControllerFamilies,
    /// reconcile_total by `ResultLabel as usize`.
    results: [Arc<dyn metrics::Counter>; 3],
    errors: Arc<dyn metrics::Counter>,
    terminal_errors: Arc<dyn metrics::Counter>,
    panics: Arc<dyn metrics::Counter>,
    reconcile_time: Arc<dyn metrics::Histogram>,
    active_workers: Arc<dyn metrics::Gauge>,
    max_concurrent: Arc<dyn metrics::Gauge>,
}

impl ControllerMetrics {
    fn new(registry: Option<&SharedMetrics>, name: &str) -> Self {
        let families = match registry {
            Some(registry) => ControllerFamilies::register(registry),
            None => ControllerFamilies::new(&(Arc::new(Discard) as SharedMetrics)),
        };
        let labels = [name];
        // Every result series exists from the start, so dashboards see
        // zeros (as with controller-runtime), and counting needs no lookup.
        let results = [
            ResultLabel::Success,
            ResultLabel::Error,
            ResultLabel::RequeueAfter,
        ]
        .map(|r| families.total.with(&[name, r.as_str()]));
        let errors = families.errors.with(&labels);
        let terminal_errors = families.terminal_errors.with(&labels);
        let panics = families.panics.with(&labels);
        let reconcile_time = families.time.with(&labels);
        let active_workers = families.active_workers.with(&labels);
        let max_concurrent = families.max_concurrent.with(&labels);
        Self {
            name: name.to_owned(),
            families,
            results,
            errors,
            terminal_errors,
            panics,
            reconcile_time,
            active_workers,
            max_concurrent,
        }
    }

    fn result(&self, result: ResultLabel) {
        self.results[result as usize].inc();
    }

    fn error(&self, category: &'static str) {
        self.result(ResultLabel::Error);
        self.errors.inc();
        self.families
            .errors_by_category
            .with(&[&self.name, category])
            .inc();
    }
}

#[cfg(test)]
mod tests;
