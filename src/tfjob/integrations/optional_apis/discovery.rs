//! The task that finds the optional APIs and switches the view on
//! ([`super`]): a cache of the manager, so the process is not ready and no
//! TFJob worker starts before the API server has answered about both.
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::api::pod_group::PodGroup;
use crate::api::types::TFJob;
use crate::runtime::cache::factory::{InformerFactory, WatchConfig};
use crate::runtime::cache::informer::SharedInformer;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::object::Object;
use crate::runtime::cache::store::Indexer;
use crate::runtime::client::discovery::versions_serving;
use crate::runtime::controller::handler::{EnqueueHandler, OwnerType};
use crate::runtime::manager::Cache;
use crate::runtime::manager::server::DetailLine;
use crate::runtime::workqueue::rate_limiting::RateLimitingQueue;
use crate::tfjob::integrations::gang::{self, GangMode, GangScheduling};
use crate::tfjob::integrations::kueue::api::{self as kueue_api, ResourceFlavor, Workload};
use crate::tfjob::integrations::kueue::observe::WORKLOAD_OWNER_INDEX;
use crate::tfjob::integrations::kueue::{self, KueueMode};

use super::{OptionalApis, REDISCOVER_EVERY};

/// What switching an API on needs: where its informers come from and
/// whom to wake.
#[derive(Clone)]
pub struct Wiring {
    pub client: kube::Client,
    pub factory: InformerFactory,
    /// Watch one namespace, or all (`--namespace`).
    pub namespace: Option<String>,
    /// The TFJob controller's queue: a found API's events wake jobs, and
    /// every job is reconciled again when it is switched on.
    pub queue: RateLimitingQueue<ObjectKey>,
    pub jobs: Indexer<TFJob>,
}

/// The `/readyz` lines this task keeps up to date.
#[derive(Clone)]
pub struct Lines {
    pub gang: DetailLine,
    pub kueue: DetailLine,
}

/// Finds the optional APIs (a [`Cache`]: synced once the server answered
/// about both and what it serves is switched on). Cheap to clone.
#[derive(Clone)]
pub struct Discovery {
    inner: Arc<Inner>,
}

struct Inner {
    gang_mode: GangMode,
    kueue_mode: KueueMode,
    apis: OptionalApis,
    wiring: Wiring,
    lines: Lines,
    answered: tokio::sync::watch::Sender<bool>,
    /// `--kueue=workload` or `--gang-scheduling=on` on a server that
    /// answered without the API: the operator stops ([`Discovery::refused`]).
    refused: OnceLock<String>,
    /// Stops the manager when refused.
    stop: CancellationToken,
}

impl Discovery {
    pub fn new(
        modes: (GangMode, KueueMode),
        apis: OptionalApis,
        wiring: Wiring,
        lines: Lines,
        stop: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                gang_mode: modes.0,
                kueue_mode: modes.1,
                apis,
                wiring,
                lines,
                answered: tokio::sync::watch::Sender::new(false),
                refused: OnceLock::new(),
                stop,
            }),
        }
    }

    /// Why the operator refused to run with the server's answer, if it did.
    pub fn refused(&self) -> Option<String> {
        self.inner.refused.get().cloned()
    }
}

impl Cache for Discovery {
    fn start(&self, shutdown: CancellationToken) {
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            tokio::select! {
                () = inner.run(&shutdown) => {}
                () = shutdown.cancelled() => {}
            }
        });
    }

    fn wait_for_sync(&self) -> BoxFuture<'_, ()> {
        let mut answered = self.inner.answered.subscribe();
        Box::pin(async move {
            // Err: the task is gone with the sender, which `self` holds.
            let _ = answered.wait_for(|done| *done).await;
        })
    }

    fn has_synced(&self) -> bool {
        *self.inner.answered.borrow()
    }
}

impl Inner {
    async fn run(&self, shutdown: &CancellationToken) {
        let client = &self.wiring.client;
        let (gang, kueue) = tokio::join!(
            gang::detect_reporting(client, self.gang_mode, |line| {
                tracing::warn!("{line}");
                self.lines.gang.set(line);
            }),
            kueue::detect_reporting(client, self.kueue_mode, |line| {
                tracing::warn!("{line}");
                self.lines.kueue.set(line);
            }),
        );
        let (gang, kueue) = match (gang, kueue) {
            (Ok(gang), Ok(kueue)) => (gang, kueue),
            (Err(why), _) | (_, Err(why)) => {
                tracing::error!("{why}");
                let _ = self.refused.set(why);
                self.stop.cancel();
                return;
            }
        };
        tracing::info!(setting = ?gang.setting, "{}", gang.detail);
        tracing::info!(setting = ?kueue.setting, "{}", kueue.detail);
        self.lines.gang.set(&gang.detail);
        self.lines.kueue.set(&kueue.detail);
        self.switch_gang(gang.setting, shutdown).await;
        if kueue.setting.enabled() {
            self.switch_kueue_on(shutdown).await;
        }
        self.answered.send_replace(true);
        self.rediscover(
            self.gang_mode == GangMode::Auto && !gang.setting.enabled(),
            self.kueue_mode == KueueMode::Auto && !kueue.setting.enabled(),
            shutdown,
        )
        .await;
    }

    /// Asks again every [`REDISCOVER_EVERY`] about the APIs still missing
    /// (`gang`, `kueue`), and switches each on when found.
    async fn rediscover(&self, gang: bool, kueue: bool, shutdown: &CancellationToken) {
        let client = &self.wiring.client;
        let gang = async {
            if !gang {
                return;
            }
            let (group, plural) = (crate::api::pod_group::GROUP, crate::api::pod_group::PLURAL);
            until_served(client, group, plural, gang::served, REDISCOVER_EVERY).await;
            let answer = [crate::api::pod_group::VERSION.to_owned()];
            if let Ok(d) = gang::decide_from(self.gang_mode, Some(&answer)) {
                let line = format!("{} (found after the start)", d.detail);
                tracing::info!(setting = ?d.setting, "{line}");
                self.switch_gang(d.setting, shutdown).await;
                self.lines.gang.set(line);
            }
        };
        let kueue = async {
            if !kueue {
                return;
            }
            let (group, plural) = (kueue_api::GROUP, kueue_api::WORKLOADS);
            until_served(client, group, plural, kueue::served, REDISCOVER_EVERY).await;
            let answer = [kueue_api::VERSION.to_owned()];
            if let Ok(d) = kueue::decide_from(self.kueue_mode, &answer) {
                let line = format!("{} (found after the start)", d.detail);
                tracing::info!(setting = ?d.setting, "{line}");
                self.switch_kueue_on(shutdown).await;
                self.lines.kueue.set(line);
            }
        };
        tokio::join!(gang, kueue);
    }

    /// Sets the gang setting; one that uses PodGroups first gets their
    /// synced cache and wakes every job.
    async fn switch_gang(&self, setting: GangScheduling, shutdown: &CancellationToken) {
        if !setting.enabled() {
            self.apis.set_gang(setting, None);
            return;
        }
        // Every PodGroup in scope, not only ours: a namesake's group must be
        // seen before a job's Pods would join it (`crate::tfjob::integrations::gang::next_step`).
        let groups = self.wiring.factory.informer::<PodGroup>(self.scope());
        if !self.synced(&groups, shutdown).await {
            return;
        }
        self.apis.set_gang(setting, Some(groups.indexer()));
        self.wake_on(&groups);
    }

    /// Switches Kueue on once its caches have synced, and wakes every job.
    async fn switch_kueue_on(&self, shutdown: &CancellationToken) {
        // Every Workload in scope (the built-in integration's too: see
        // `crate::tfjob::integrations::kueue::gate`), and every ResourceFlavor.
        let workloads = self.wiring.factory.informer::<Workload>(self.scope());
        workloads.add_index(WORKLOAD_OWNER_INDEX, Arc::new(workload_owner));
        let flavors = self
            .wiring
            .factory
            .informer::<ResourceFlavor>(WatchConfig::default());
        if !self.synced(&workloads, shutdown).await || !self.synced(&flavors, shutdown).await {
            return;
        }
        self.apis.set_kueue(workloads.indexer(), flavors.indexer());
        // A Workload's admission, eviction or deletion wakes its job up.
        self.wake_on(&workloads);
    }

    fn scope(&self) -> WatchConfig {
        WatchConfig {
            namespace: self.wiring.namespace.clone(),
            ..WatchConfig::default()
        }
    }

    /// Starts `informer` (and any other not running yet) and waits for its
    /// first list; false on shutdown.
    async fn synced<K: Object>(
        &self,
        informer: &SharedInformer<K>,
        shutdown: &CancellationToken,
    ) -> bool {
        self.wiring.factory.start(shutdown.clone());
        tokio::select! {
            () = informer.wait_for_sync() => true,
            () = shutdown.cancelled() => false,
        }
    }

    /// From now on `informer`'s events wake the job that controls the
    /// object; and every job is reconciled again now, with the view on.
    fn wake_on<K: Object>(&self, informer: &SharedInformer<K>) {
        let queue = self.wiring.queue.clone();
        informer.add_event_handler(Arc::new(EnqueueHandler::<K>::for_controller_owner(
            queue,
            OwnerType::of::<TFJob>(),
        )));
        for key in self.wiring.jobs.list_keys() {
            self.wiring.queue.add(key);
        }
    }
}

/// Returns once the server answers that it serves `plural` of `group` in a
/// version `served` accepts, asking every `every`. An error is not an
/// answer either way: what was answered last stands until the next attempt.
pub async fn until_served(
    client: &kube::Client,
    group: &str,
    plural: &str,
    served: fn(&[String]) -> bool,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        match versions_serving(client, group, plural).await {
            Ok(versions) if served(&versions) => return,
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, group, "could not ask the API server again; asking later");
            }
        }
    }
}

/// `namespace/name` of the TFJob controlling a Workload: how the Workloads
/// of a deleted job (gone from the cache) are still found.
fn workload_owner(w: &Workload) -> Vec<String> {
    let namespace = w.metadata.namespace.as_deref().unwrap_or_default();
    w.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true) && o.kind == "TFJob")
        .map(|o| format!("{namespace}/{}", o.name))
        .collect()
}
