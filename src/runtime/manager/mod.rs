//! The manager: starts everything in the right order and stops it cleanly.
//!
//! Mirrors controller-runtime `pkg/manager` (`internal.go`,
//! `runnable_group.go`) and `pkg/manager/signals`; this folder also holds
//! what the manager serves around the controllers: the health/metrics
//! [`server`] (controller-runtime `pkg/healthz`, `pkg/metrics/server`); it
//! campaigns through [`crate::runtime::leader_election`] (client-go
//! `tools/leaderelection`) and starts the leader-only runnables from its
//! `on_started_leading` callback. Chapter:
//! `docs/10-manager.md`. [`Manager::run`]:
//!
//! 1. binds and serves `/healthz`, `/readyz`, `/metrics` (and starts the
//!    event writer, if a recorder was asked for);
//! 2. starts every [`Cache`] and waits until all have synced, then marks the
//!    process ready;
//! 3. starts the runnables that do not need leadership;
//! 4. with leader election on, campaigns for the Lease and starts the
//!    leader-only runnables once it is held (with it off, at once);
//! 5. on `SIGTERM`/`SIGINT` or [`Manager::shutdown_token`]: marks not-ready,
//!    cancels the runnables and waits for them at most the graceful-shutdown
//!    timeout, *then* releases the Lease (so no standby starts while our
//!    in-flight work still writes), then stops caches and the HTTP server.
//!
//! A lost Lease is fatal, as in controller-runtime: leader-only runnables are
//! cancelled and aborted without waiting (another leader may already be
//! acting), and `run` returns [`ManagerError::LeaderElectionLost`] so the
//! process exits and its Deployment restarts it as a fresh candidate. This
//! holds during the graceful drain too: the Lease is still renewed while
//! in-flight work finishes, and if it is lost then, the drain is cut short
//! and every runnable aborted at once. A
//! runnable returning an error (or panicking) also stops the manager.
//!
//! The manager never reconciles anything itself and never knows what its
//! runnables are; it only orders their start and stop.
//!
//! ```no_run
//! # async fn example(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use tfjob_operator::runtime::cache::factory::InformerFactory;
//! use tfjob_operator::runtime::leader_election::config::LeaderElectionConfig;
//! use tfjob_operator::runtime::manager::{Manager, ManagerConfig};
//! use tfjob_operator::runtime::metrics::Discard;
//!
//! let factory = InformerFactory::new(client.clone());
//! // ... controllers create their informers from `factory` here ...
//! let mut manager = Manager::new(
//!     client,
//!     ManagerConfig {
//!         leader_election: Some(LeaderElectionConfig::new("kubeflow", "tfjob-operator")),
//!         ..ManagerConfig::default()
//!     },
//!     // The process plugs in its Prometheus registry here.
//!     std::sync::Arc::new(Discard),
//! );
//! let recorder = manager.event_recorder("tfjob-controller");
//! manager.add_cache(factory);
//! manager.add_runnable("tfjob-controller", true, move |shutdown| async move {
//!     // Run workers until `shutdown` fires, then finish in-flight reconciles.
//!     shutdown.cancelled().await;
//!     drop(recorder);
//!     Ok(())
//! });
//! manager.run().await?;
//! # Ok(())
//! # }
//! ```
pub mod listen;
pub mod server;

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::runtime::cache::factory::InformerFactory;
use crate::runtime::client::work_gauge::WorkGauge;
use crate::runtime::events::{EventRecorder, EventRecorderConfig, event_recorder};
use crate::runtime::leader_election::callbacks::LeaderCallbacks;
use crate::runtime::leader_election::config::LeaderElectionConfig;
use crate::runtime::leader_election::elector::{HoldOutcome, LeaderElector};
use crate::runtime::leader_election::error::LeaderElectionError;
use crate::runtime::manager::server::{HttpServer, Readiness, SecureMetrics, ServerError};
use crate::runtime::metrics::SharedMetrics;

/// controller-runtime's default bound on draining runnables at shutdown.
pub const DEFAULT_GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(30);
/// How long each final step (releasing the Lease, stopping the HTTP server
/// and the event writer) may take at least once the runnables are done;
/// the infrastructure gets whatever is left of the graceful-shutdown
/// budget if that is longer.
const FINAL_STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// Any error a runnable may return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A cache the manager starts and waits on before starting runnables: in
/// practice the informer factory, which owns every shared informer, and
/// anything else no runnable may start without (an answer from API
/// discovery: the process is not ready until every cache has synced).
pub trait Cache: Send + Sync + 'static {
    /// Starts filling the cache in the background until `shutdown` fires.
    fn start(&self, shutdown: CancellationToken);
    /// Resolves once the first full list is in the cache. Must be cancel-safe.
    fn wait_for_sync(&self) -> BoxFuture<'_, ()>;
    /// Has the first full list arrived?
    fn has_synced(&self) -> bool;
}

/// The informer factory is the manager's cache: starting it starts every
/// shared informer created so far (controllers create theirs before `run`).
impl Cache for InformerFactory {
    fn start(&self, shutdown: CancellationToken) {
        InformerFactory::start(self, shutdown);
    }

    fn wait_for_sync(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.wait_for_cache_sync())
    }

    fn has_synced(&self) -> bool {
        InformerFactory::has_synced(self)
    }
}

/// Errors that end [`Manager::run`].
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error("failed to start the http server")]
    Server(#[source] ServerError),
    #[error("failed to configure leader election")]
    LeaderElection(#[source] LeaderElectionError),
    #[error("failed to install signal handlers")]
    Signal(#[source] std::io::Error),
    #[error("failed to keep the leader lease: leader election lost")]
    LeaderElectionLost,
    #[error("failed to run {name}")]
    Runnable {
        name: String,
        #[source]
        source: BoxError,
    },
    #[error("failed to stop runnables within the graceful shutdown timeout of {0:?}")]
    ShutdownTimeout(Duration),
}

impl ManagerError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Server(_) => "server",
            Self::LeaderElection(_) => "leader_election",
            Self::Signal(_) => "signal",
            Self::LeaderElectionLost => "leader_election_lost",
            Self::Runnable { .. } => "runnable",
            Self::ShutdownTimeout(_) => "shutdown_timeout",
        }
    }
}

/// How the manager runs.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// Where `/healthz` and `/readyz` are served (`None`: not served).
    pub probe_addr: Option<SocketAddr>,
    /// Where `/metrics` is served; may equal `probe_addr` (`None`: not served).
    pub metrics_addr: Option<SocketAddr>,
    /// `None` runs leader-only runnables at once (a single replica).
    pub leader_election: Option<LeaderElectionConfig>,
    /// How long runnables get to finish in-flight work after shutdown begins.
    pub graceful_shutdown: Duration,
    /// Stop on `SIGTERM`/`SIGINT` (off in tests, which use [`Manager::shutdown_token`]).
    pub handle_signals: bool,
}

impl Default for ManagerConfig {
    /// controller-runtime's ports (probes `:8081`, metrics `:8080`), no leader
    /// election, 30 s graceful shutdown, signals handled.
    fn default() -> Self {
        Self {
            probe_addr: Some(SocketAddr::from(([0, 0, 0, 0], 8081))),
            metrics_addr: Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
            leader_election: None,
            graceful_shutdown: DEFAULT_GRACEFUL_SHUTDOWN,
            handle_signals: true,
        }
    }
}

type RunFn = Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, Result<(), BoxError>> + Send>;
type BackgroundFn = Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, ()> + Send>;

struct Runnable {
    name: String,
    leader_only: bool,
    run: RunFn,
}

/// Owns the process lifecycle. Build it, add caches and runnables, `run()` it.
pub struct Manager {
    client: kube::Client,
    config: ManagerConfig,
    registry: SharedMetrics,
    readiness: Readiness,
    shutdown: CancellationToken,
    caches: Vec<Arc<dyn Cache>>,
    runnables: Vec<Runnable>,
    /// Infrastructure stopped last (the event writer), after the runnables
    /// that feed it have drained.
    background: Vec<BackgroundFn>,
    recorder: Option<EventRecorder>,
    /// The recorder's client when not the manager's ([`Self::set_event_client`]).
    event_client: Option<kube::Client>,
    /// The work the recorder's writes yield to ([`Self::events_yield_to`]).
    event_yield: Option<WorkGauge>,
    secure_metrics: Option<SecureMetrics>,
}

/// Tells the main loop the Lease is held, from the elector's
/// `on_started_leading` (on the election task; it only sends).
struct StartLeaderOnly(std::sync::Mutex<Option<oneshot::Sender<()>>>);

impl LeaderCallbacks for StartLeaderOnly {
    fn on_started_leading(&self) {
        let sender = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(acquired) = sender {
            let _ = acquired.send(());
        }
    }
}

/// Why the main loop ended.
enum Stop {
    Requested,
    LeaderLost,
    Failed(ManagerError),
}

impl Manager {
    /// A manager whose components count into `metrics` (served on
    /// `/metrics`): the caller plugs the registry in, as controller-runtime's
    /// manager serves `metrics.Registry`.
    pub fn new(client: kube::Client, config: ManagerConfig, metrics: SharedMetrics) -> Self {
        Self {
            client,
            config,
            registry: metrics,
            readiness: Readiness::new(),
            shutdown: CancellationToken::new(),
            caches: Vec::new(),
            runnables: Vec::new(),
            background: Vec::new(),
            recorder: None,
            event_client: None,
            event_yield: None,
            secure_metrics: None,
        }
    }

    /// The registry served on `/metrics`; register component metrics here.
    pub fn registry(&self) -> SharedMetrics {
        self.registry.clone()
    }

    /// The client the manager was built with.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// What `/readyz` reports (for tests and for extra health logic).
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// Cancelling this token stops the manager as a signal would.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Adds a cache to start and wait on before any runnable starts.
    pub fn add_cache(&mut self, cache: impl Cache) {
        self.caches.push(Arc::new(cache));
    }

    /// Adds a runnable: `run` gets a token that fires at shutdown (or when
    /// leadership is lost) and should return once its in-flight work is done.
    /// `leader_only` runnables (controllers) start once the Lease is held.
    pub fn add_runnable<F, Fut>(&mut self, name: impl Into<String>, leader_only: bool, run: F)
    where
        F: FnOnce(CancellationToken) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
    {
        self.runnables.push(Runnable {
            name: name.into(),
            leader_only,
            run: Box::new(move |token| Box::pin(run(token))),
        });
    }

    /// Serves `/metrics` over HTTPS to authorized bearer tokens only
    /// (controller-runtime's `metricsserver.Options{SecureServing: true,
    /// FilterProvider: filters.WithAuthenticationAndAuthorization}`). The
    /// metrics address must then differ from the probe address.
    pub fn secure_metrics(&mut self, secure: SecureMetrics) {
        self.secure_metrics = Some(secure);
    }

    /// Has the event recorder write through `client` instead of the
    /// manager's (client-go's broadcaster has a clientset of its own, so a
    /// client-side rate limit gives Events a bucket of their own). Only
    /// before the first [`Self::event_recorder`]; later calls change nothing.
    pub fn set_event_client(&mut self, client: kube::Client) {
        if self.recorder.is_none() {
            self.event_client = Some(client);
        }
    }

    /// Has the event recorder write its Events after the requests `work`
    /// counts (`runtime::events::work_first`). Only before the first
    /// [`Self::event_recorder`]; later calls change nothing.
    pub fn events_yield_to(&mut self, work: WorkGauge) {
        if self.recorder.is_none() {
            self.event_yield = Some(work);
        }
    }

    /// An event recorder reporting as `component`. All recorders share one
    /// writer task, started with the HTTP server and stopped after the
    /// runnables, so events published while draining are still written.
    pub fn event_recorder(&mut self, component: &str) -> EventRecorder {
        if let Some(recorder) = &self.recorder {
            return recorder.for_component(component);
        }
        let mut config = EventRecorderConfig::new(component);
        config.yield_to = self.event_yield.clone();
        let (recorder, broadcaster) = event_recorder(
            self.event_client
                .clone()
                .unwrap_or_else(|| self.client.clone()),
            config,
            &self.registry,
        );
        self.background
            .push(Box::new(move |token| Box::pin(broadcaster.run(token))));
        self.recorder = Some(recorder.clone());
        recorder
    }

    /// Runs until shutdown; see the module docs for the order of events.
    pub async fn run(self) -> Result<(), ManagerError> {
        let Manager {
            client,
            config,
            registry,
            readiness,
            shutdown,
            caches,
            runnables,
            background,
            recorder: _,
            event_client: _,
            event_yield: _,
            secure_metrics,
        } = self;

        let (acquired_tx, mut acquired_rx) = oneshot::channel::<()>();
        let elector = match config.leader_election.clone() {
            Some(le) => Some(
                LeaderElector::new(client, le, &registry)
                    .map_err(ManagerError::LeaderElection)?
                    .with_callbacks(Arc::new(StartLeaderOnly(std::sync::Mutex::new(Some(
                        acquired_tx,
                    ))))),
            ),
            None => None,
        };
        if config.handle_signals {
            watch_signals(shutdown.clone())?;
        }

        // 1. Infrastructure: HTTP server and the event writer, stopped last.
        let infra = CancellationToken::new();
        let mut infra_tasks = JoinSet::new();
        let server = HttpServer::bind_with(
            config.probe_addr,
            config.metrics_addr,
            readiness.clone(),
            registry.clone(),
            secure_metrics,
        )
        .await
        .map_err(ManagerError::Server)?;
        tracing::info!(probe = ?server.probe_addr(), metrics = ?server.metrics_addr(), "serving probes and metrics");
        let server_token = infra.clone();
        infra_tasks.spawn(async move {
            if let Err(error) = server.serve(server_token).await {
                tracing::error!(error = %error, "http server stopped");
            }
        });
        for task in background {
            infra_tasks.spawn(task(infra.clone()));
        }

        // 2. Caches: start all, wait for all (or for shutdown).
        for cache in &caches {
            cache.start(infra.child_token());
        }
        let synced = tokio::select! {
            _ = futures::future::join_all(caches.iter().map(|c| c.wait_for_sync())) => true,
            _ = shutdown.cancelled() => false,
        };
        if synced {
            readiness.mark_synced();
            tracing::info!(caches = caches.len(), "caches synced");
        }

        // 3 & 4. Runnables, then leadership.
        let work = CancellationToken::new();
        let mut tasks = Tasks::default();
        let (leader_only, others): (Vec<_>, Vec<_>) =
            runnables.into_iter().partition(|r| r.leader_only);
        let mut leader_only = Some(leader_only);
        let elect = CancellationToken::new();
        let mut election: Option<JoinHandle<HoldOutcome>> = None;
        let stop = if !synced {
            Stop::Requested
        } else {
            for r in others {
                tasks.spawn(r, &work);
            }
            let mut awaiting_lease = false;
            match &elector {
                Some(elector) => {
                    let (elector, elect) = (elector.clone(), elect.clone());
                    awaiting_lease = true;
                    // Acquire, then renew until lost or cancelled; the
                    // callback above opens `acquired_rx` once it is held.
                    election = Some(tokio::spawn(async move { elector.run(&elect).await }));
                }
                None => {
                    for r in leader_only.take().into_iter().flatten() {
                        tasks.spawn(r, &work);
                    }
                }
            }
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break Stop::Requested,
                    acquired = &mut acquired_rx, if awaiting_lease => {
                        awaiting_lease = false;
                        if acquired.is_ok() {
                            tracing::info!("became leader; starting leader-only runnables");
                            for r in leader_only.take().into_iter().flatten() {
                                tasks.spawn(r, &work);
                            }
                        }
                    }
                    outcome = join_election(&mut election) => {
                        election = None;
                        match outcome {
                            Ok(HoldOutcome::Cancelled) => break Stop::Requested,
                            Ok(HoldOutcome::Lost) | Err(_) => break Stop::LeaderLost,
                        }
                    }
                    Some(done) = tasks.join_next() => {
                        if let Some(error) = done {
                            break Stop::Failed(error);
                        }
                    }
                }
            }
        };

        // 5. Stop: not ready, cancel work, drain (bounded), release, stop infra.
        let stopping_since = tokio::time::Instant::now();
        readiness.mark_stopping();
        work.cancel();
        let mut result = match stop {
            Stop::Requested => Ok(()),
            Stop::LeaderLost => Err(ManagerError::LeaderElectionLost),
            Stop::Failed(error) => Err(error),
        };
        if matches!(result, Err(ManagerError::LeaderElectionLost)) {
            // Another leader may be acting already: do not wait politely.
            tracing::error!("leader election lost; aborting leader-only work");
            tasks.abort_all().await;
        } else {
            tracing::info!(timeout = ?config.graceful_shutdown, "stopping runnables");
            match drain(&mut tasks, config.graceful_shutdown, &mut election).await {
                Drained::Done(Some(error)) if result.is_ok() => result = Err(error),
                Drained::Done(_) => {}
                Drained::TimedOut => {
                    if result.is_ok() {
                        result = Err(ManagerError::ShutdownTimeout(config.graceful_shutdown));
                    }
                }
                Drained::LeaderLost => result = Err(ManagerError::LeaderElectionLost),
            }
        }
        // Leader-only work has stopped: now the Lease may go.
        elect.cancel();
        if let Some(handle) = election {
            let outcome = handle.await;
            if let (Ok(HoldOutcome::Cancelled), Some(elector)) = (outcome, &elector)
                && elector.config().release_on_cancel
            {
                match tokio::time::timeout(FINAL_STEP_TIMEOUT, elector.release()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        tracing::warn!(error = %error, "failed to release leader lease")
                    }
                    Err(_) => tracing::warn!("releasing the leader lease timed out"),
                }
            }
        }
        infra.cancel();
        // The event writer flushes what reconciles recorded last (a burst of
        // `TFJobSucceeded` can be hundreds of Events behind a busy API
        // server): it may use the rest of the budget, not only 5 s, or the
        // write in flight is cut (the API server logs a 504) and the queue
        // is lost.
        let infra_budget = config
            .graceful_shutdown
            .saturating_sub(stopping_since.elapsed())
            .max(FINAL_STEP_TIMEOUT);
        if tokio::time::timeout(infra_budget, async {
            while infra_tasks.join_next().await.is_some() {}
        })
        .await
        .is_err()
        {
            infra_tasks.abort_all();
        }
        // Also ends the signal watcher when we stopped for another reason.
        shutdown.cancel();
        tracing::info!("manager stopped");
        result
    }
}

/// The running runnables, with their names for error messages.
#[derive(Default)]
struct Tasks {
    set: JoinSet<Result<(), BoxError>>,
    names: HashMap<tokio::task::Id, String>,
}

impl Tasks {
    fn spawn(&mut self, runnable: Runnable, work: &CancellationToken) {
        tracing::debug!(name = %runnable.name, leader_only = runnable.leader_only, "starting runnable");
        let handle = self.set.spawn((runnable.run)(work.child_token()));
        self.names.insert(handle.id(), runnable.name);
    }

    /// The next runnable to finish: `Some(None)` if it ended cleanly,
    /// `Some(Some(error))` if it failed or panicked, `None` if none are running.
    async fn join_next(&mut self) -> Option<Option<ManagerError>> {
        let done = self.set.join_next_with_id().await?;
        Some(match done {
            Ok((id, Ok(()))) => {
                let name = self.names.remove(&id).unwrap_or_default();
                tracing::debug!(name = %name, "runnable finished");
                None
            }
            Ok((id, Err(source))) => Some(ManagerError::Runnable {
                name: self.names.remove(&id).unwrap_or_default(),
                source,
            }),
            Err(join_error) => {
                let name = self.names.remove(&join_error.id()).unwrap_or_default();
                let what = if join_error.is_panic() {
                    "panicked"
                } else {
                    "was aborted"
                };
                Some(ManagerError::Runnable {
                    name,
                    source: format!("runnable {what}").into(),
                })
            }
        })
    }

    /// Waits for every runnable; returns the first error.
    async fn drain(&mut self) -> Option<ManagerError> {
        let mut first = None;
        while let Some(done) = self.join_next().await {
            if let Some(error) = done {
                tracing::error!(error = %error, source = ?std::error::Error::source(&error), "runnable failed while stopping");
                first.get_or_insert(error);
            }
        }
        first
    }

    async fn abort_all(&mut self) {
        self.set.abort_all();
        while self.set.join_next().await.is_some() {}
        self.names.clear();
    }
}

/// How the graceful drain ended.
#[derive(Debug)]
enum Drained {
    /// Every runnable returned; the first error, if any.
    Done(Option<ManagerError>),
    /// The graceful-shutdown timeout passed; the rest were aborted.
    TimedOut,
    /// The Lease was lost while draining; everything was aborted at once.
    LeaderLost,
}

/// Waits for the runnables to finish their in-flight work, at most
/// `timeout`, while still watching the Lease: a Lease lost during the drain
/// aborts every runnable at once, since another leader may already be
/// acting and a process that lost the Lease must stop writing.
async fn drain(
    tasks: &mut Tasks,
    timeout: Duration,
    election: &mut Option<JoinHandle<HoldOutcome>>,
) -> Drained {
    let drained = tokio::select! {
        drained = tokio::time::timeout(timeout, tasks.drain()) => match drained {
            Ok(first_error) => Drained::Done(first_error),
            Err(_) => Drained::TimedOut,
        },
        // The Lease is not given up before the drain ends, so any outcome
        // here means it is no longer ours.
        outcome = join_election(election) => {
            tracing::error!(?outcome, "leader election lost while draining; aborting in-flight work");
            Drained::LeaderLost
        }
    };
    match drained {
        Drained::Done(_) => {}
        Drained::TimedOut => {
            tracing::error!(
                "runnables did not stop within the graceful shutdown timeout; aborting them"
            );
            tasks.abort_all().await;
        }
        Drained::LeaderLost => {
            // Finished: it must not be awaited again.
            *election = None;
            tasks.abort_all().await;
        }
    }
    drained
}

/// The election task's outcome; never resolves when there is none.
async fn join_election(
    election: &mut Option<JoinHandle<HoldOutcome>>,
) -> Result<HoldOutcome, tokio::task::JoinError> {
    match election {
        Some(handle) => handle.await,
        None => std::future::pending().await,
    }
}

/// First `SIGTERM`/`SIGINT`: cancel `shutdown`. A second one exits at once,
/// as controller-runtime's `SetupSignalHandler` does, for an operator who
/// does not want to wait out the drain.
fn watch_signals(shutdown: CancellationToken) -> Result<(), ManagerError> {
    let mut term = signal(SignalKind::terminate()).map_err(ManagerError::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(ManagerError::Signal)?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("received SIGTERM; shutting down"),
            _ = int.recv() => tracing::info!("received SIGINT; shutting down"),
            _ = shutdown.cancelled() => return,
        }
        shutdown.cancel();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!("second signal; exiting without waiting");
        std::process::exit(1);
    });
    Ok(())
}

#[cfg(test)]
mod tests;
