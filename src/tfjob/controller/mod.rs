//! Wiring the TFJob controller: informers (one shared watch per kind),
//! indexes, expectation observers, the reconciler and the workqueue-driven
//! controller, registered with the manager.
//!
//! sample-controller's `NewController` + `main.go`, and controller-runtime's
//! `ctrl.NewControllerManagedBy(mgr).For(&TFJob{}).Owns(&Pod{}).Owns(&Service{})`.
pub mod lower_expectations;
pub mod reconciler;

use std::sync::Arc;

use crate::api::constants::LABEL_JOB_NAME;
use crate::api::types::TFJob;
use crate::observability::metrics::SharedRegistry;
use crate::runtime::cache::factory::{FactoryError, InformerFactory, WatchConfig};
use crate::runtime::cache::informer::SharedInformer;
use crate::runtime::cache::reflector::Transform;
use crate::runtime::cache::store::label_index_fn;
use crate::runtime::controller::expectations::Expectations;
use crate::runtime::controller::{Action, Controller, ControllerError, ReconcileError, Reconciler};
use crate::runtime::manager::Manager;

use crate::tfjob::apply::Applier;
use crate::tfjob::apply::error::SyncError;
use crate::tfjob::children::cached::{CachedPod, CachedService, slim_status};
use crate::tfjob::integrations::gang::{self, GangMode};
use crate::tfjob::integrations::kueue::KueueMode;
use crate::tfjob::integrations::optional_apis::OptionalApis;
use crate::tfjob::integrations::optional_apis::discovery::{Discovery, Lines, Wiring};
use crate::tfjob::integrations::register;
use crate::tfjob::integrations::rival::RivalGuard;
use crate::tfjob::kubeflow::rival::keep_rival_status_writes;
use crate::tfjob::kubeflow::schema::StatusSchema;
use crate::tfjob::observe::{JOB_NAME_INDEX, Observer};
use crate::tfjob::plan::PlanConfig;
use crate::tfjob::status::StatusWriter;
use crate::tfjob::status::metrics::JobMetrics;

use lower_expectations::ExpectationsObserver;
use reconciler::TfJobReconciler;

/// The event source name on Events we write (Kubeflow's).
pub const COMPONENT: &str = "tfjob-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Watch one namespace, or all.
    pub namespace: Option<String>,
    pub workers: usize,
    pub cluster_domain: Option<String>,
    pub write_concurrency: usize,
    /// One Event per kind of child created in a pass instead of one per
    /// child ([`crate::tfjob::children::creation_events`]).
    pub fold_create_events: bool,
    /// Force-delete stuck Pods whatever their node's state, not only when
    /// it is gone or out of service ([`crate::tfjob::plan::lost_node`]).
    pub force_delete_on_any_node: bool,
    /// The installed CRD's status schema ([`crate::tfjob::kubeflow::schema`]).
    pub status_schema: StatusSchema,
    /// See [`PlanConfig::force_delete_stuck_after`].
    pub force_delete_stuck_after: Option<std::time::Duration>,
    /// `--gang-scheduling`: what the server's answer makes of it
    /// ([`crate::tfjob::integrations::gang`], [`crate::tfjob::integrations::optional_apis`]).
    pub gang: GangMode,
    /// `--kueue`: likewise ([`crate::tfjob::integrations::kueue`]).
    pub kueue: KueueMode,
    /// The Prometheus registry the job metrics go to (the manager's
    /// `registry()` is the pipeline's seam over it).
    pub registry: SharedRegistry,
}

/// Why the controller could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Informers(#[from] FactoryError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
}

/// The informers the controller always reads from. Those of the optional
/// APIs (PodGroups, Workloads, ResourceFlavors) are created when the API
/// server is found to serve them ([`crate::tfjob::integrations::optional_apis`]): a server
/// without the API has nothing to list, and `--gang-scheduling=off` or
/// `--kueue=off` need no permission on them.
pub struct Informers {
    pub jobs: SharedInformer<TFJob>,
    pub pods: SharedInformer<CachedPod>,
    pub services: SharedInformer<CachedService>,
}

/// Creates the informers: TFJobs, with no `managedFields` but another
/// TFJob controller's status writes ([`keep_rival_status_writes`]), and
/// only the Pods and Services that carry the job-name label — unrelated
/// Pods in the cluster are never cached (Kubeflow caches every Pod in
/// scope) — cached without their specs ([`crate::tfjob::children::cached`]).
pub fn informers(
    factory: &InformerFactory,
    namespace: Option<&str>,
) -> Result<Informers, FactoryError> {
    // Children are cached as their metadata and (Pods) the status the
    // controller reads, decoded without their specs: see `crate::tfjob::children::cached`.
    let slim_pod: Transform<CachedPod> = Arc::new(slim_status);
    factory.set_transform(slim_pod)?;
    // What the rival integration reads (`crate::tfjob::integrations::rival`).
    let rival_writes: Transform<TFJob> = Arc::new(keep_rival_status_writes);
    factory.set_transform_reading_managed_fields(rival_writes)?;
    let scope = |label: Option<&str>| WatchConfig {
        namespace: namespace.map(str::to_owned),
        label_selector: label.map(str::to_owned),
        ..WatchConfig::default()
    };
    let pods = factory.view_informer::<CachedPod>(scope(Some(LABEL_JOB_NAME)));
    let services = factory.view_informer::<CachedService>(scope(Some(LABEL_JOB_NAME)));
    pods.add_index(JOB_NAME_INDEX, label_index_fn(LABEL_JOB_NAME));
    services.add_index(JOB_NAME_INDEX, label_index_fn(LABEL_JOB_NAME));
    Ok(Informers {
        jobs: factory.informer::<TFJob>(scope(None)),
        pods,
        services,
    })
}

/// Builds the reconciler and registers the expectation observers. The
/// observers go on the informers *before* the controller's enqueueing
/// handlers, so an observation is counted before its job is reconciled.
/// `children` writes the jobs' Pods and Services ([`Applier::children`]);
/// `apis` is filled as the optional APIs are found.
pub fn reconciler(
    manager: &mut Manager,
    informers: &Informers,
    options: &Options,
    children: kube::Client,
    apis: OptionalApis,
) -> TfJobReconciler {
    let expectations = Expectations::new();
    informers
        .pods
        .add_event_handler(Arc::new(ExpectationsObserver::<CachedPod>::new(
            expectations.clone(),
        )));
    informers
        .services
        .add_event_handler(Arc::new(ExpectationsObserver::<CachedService>::new(
            expectations.clone(),
        )));
    let client = manager.client();
    let recorder = manager.event_recorder(COMPONENT);
    let metrics = JobMetrics::register(&options.registry);
    let status = StatusWriter {
        client: client.clone(),
        written: Default::default(),
        deferred: Default::default(),
        metrics: metrics.clone(),
    };
    let rival = RivalGuard::new(
        jiff::Timestamp::now(),
        Some(
            manager
                .readiness()
                .add_changing_detail("another TFJob controller: not looked for yet"),
        ),
    );
    let integrations = register(&client, &recorder, &apis, rival);
    TfJobReconciler {
        observe: Observer {
            client: client.clone(),
            children: children.clone(),
            jobs: informers.jobs.indexer(),
            pods: informers.pods.indexer(),
            services: informers.services.indexer(),
            expectations: expectations.clone(),
            written: status.written.clone(),
            deferred: status.deferred.clone(),
            integrations: integrations.observers,
        },
        plan_config: PlanConfig {
            cluster_domain: options.cluster_domain.clone(),
            status_schema: options.status_schema,
            force_delete_stuck_after: options.force_delete_stuck_after,
        },
        apply: Applier {
            client,
            children,
            jobs: informers.jobs.indexer(),
            expectations,
            recorder,
            metrics,
            cluster_domain: options.cluster_domain.clone(),
            write_concurrency: options.write_concurrency,
            fold_create_events: options.fold_create_events,
            force_delete_on_any_node: options.force_delete_on_any_node,
            integrations: integrations.writers,
        },
        status,
    }
}

/// Creates the informers and the controller and registers them with the
/// manager: the factory and the optional APIs' discovery as its caches
/// (started, and synced or answered, before anything runs), the controller
/// as a leader-only runnable. `children` is the client of Pod and Service
/// control (the manager's own, or one with a rate limit of its own).
/// Returns the discovery, to ask after the manager stopped whether it
/// refused the server's answer ([`Discovery::refused`]).
pub fn setup(
    manager: &mut Manager,
    factory: InformerFactory,
    options: &Options,
    children: kube::Client,
) -> Result<Discovery, SetupError> {
    let informers = informers(&factory, options.namespace.as_deref())?;
    let apis = OptionalApis::default();
    let reconciler = reconciler(manager, &informers, options, children, apis.clone());
    crate::tfjob::kubeflow::undecodable::report_on_the_object(
        &informers.jobs,
        manager.event_recorder(COMPONENT),
    );
    let controller = Controller::builder("tfjob")
        .for_informer(&informers.jobs)
        .owns(&informers.pods)
        .owns(&informers.services)
        .workers(options.workers.max(1))
        .registry(&manager.registry())
        .build(reconciler)?;
    factory.register_metrics(&manager.registry());
    // The optional APIs' informers wake jobs through the controller's
    // queue once they are found (a group's scheduler verdict, a Workload's
    // admission or eviction).
    let readiness = manager.readiness();
    let discovery = Discovery::new(
        (options.gang, options.kueue),
        apis,
        Wiring {
            client: manager.client(),
            factory: factory.clone(),
            namespace: options.namespace.clone(),
            queue: controller.queue(),
            jobs: informers.jobs.indexer(),
        },
        Lines {
            gang: readiness.add_changing_detail(format!(
                "gang-scheduling: {}, asking the API server",
                gang::mode_name(options.gang)
            )),
            kueue: readiness.add_changing_detail(format!(
                "kueue: {}, asking the API server",
                options.kueue.name()
            )),
        },
        manager.shutdown_token(),
    );
    manager.add_cache(factory);
    manager.add_cache(discovery.clone());
    manager.add_runnable("tfjob-controller", true, move |token| async move {
        controller.run(token).await.map_err(Into::into)
    });
    Ok(discovery)
}

impl ReconcileError for SyncError {
    fn category(&self) -> &'static str {
        SyncError::category(self)
    }
}

impl Reconciler for TfJobReconciler {
    type Error = SyncError;

    async fn reconcile(
        &self,
        key: crate::runtime::cache::key::ObjectKey,
    ) -> Result<Action, SyncError> {
        Ok(match self.sync(&key).await? {
            Some(after) => Action::RequeueAfter(after),
            None => Action::Done,
        })
    }
}
