//! The elector: campaigns for the lock, keeps it, and gives it back, and
//! tells the [`super::callbacks`] when leadership changes.
//!
//! Mirrors client-go `tools/leaderelection/leaderelection.go`
//! (`LeaderElector`: `Run` = `acquire`, then `renew` until it fails).
//! The timing decisions are [`super::record`]'s pure functions; the lock is
//! the [`Lock`] trait; this module only adds the loop and the calls around
//! them. It never starts or stops work itself: its callbacks (and
//! [`LeaderElector::run`]'s outcome) tell the caller, and the caller decides
//! what leadership means.
use std::sync::{Arc, Mutex, MutexGuard};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::WatchEvent;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::callbacks::{LeaderCallbacks, MasterStatus};
use super::config::{ACQUIRE_JITTER, LeaderElectionConfig};
use super::error::LeaderElectionError;
use super::lease_lock::LeaseLock;
use super::lock::Lock;
use super::record::{
    Observed, holder, may_acquire, next_attempt_in, next_spec, observe, released_spec,
    renew_deadline_passed,
};
use crate::runtime::metrics::SharedMetrics;

/// Why [`LeaderElector::hold`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The caller cancelled; we are (still) the holder and may release.
    Cancelled,
    /// We could not renew within the renew deadline, or someone else holds
    /// the Lease: leader-only work must stop now.
    Lost,
}

#[derive(Default)]
struct State {
    observed: Option<Observed>,
    leading: bool,
    /// The holder last told to `on_new_leader` (client-go's `reportedLeader`).
    reported: String,
}

/// One candidate for one lock. Cheap to clone.
#[derive(Clone)]
pub struct LeaderElector {
    lock: Arc<dyn Lock>,
    config: Arc<LeaderElectionConfig>,
    state: Arc<Mutex<State>>,
    callbacks: Arc<[Arc<dyn LeaderCallbacks>]>,
}

impl LeaderElector {
    /// A candidate for the Lease `config` names, with
    /// `leader_election_master_status` ([`MasterStatus`]) in `registry`.
    pub fn new(
        client: kube::Client,
        config: LeaderElectionConfig,
        registry: &SharedMetrics,
    ) -> Result<Self, LeaderElectionError> {
        config.validate()?;
        let lock = LeaseLock::new(client, &config.namespace, &config.lease_name);
        let status = MasterStatus::register(registry, &config.lease_name);
        Self::with_lock(Arc::new(lock), config, vec![Arc::new(status)])
    }

    /// A candidate for `lock`, telling `callbacks` (in order) of every
    /// transition. Validates the config.
    pub fn with_lock(
        lock: Arc<dyn Lock>,
        config: LeaderElectionConfig,
        callbacks: Vec<Arc<dyn LeaderCallbacks>>,
    ) -> Result<Self, LeaderElectionError> {
        config.validate()?;
        let elector = Self {
            lock,
            config: Arc::new(config),
            state: Arc::default(),
            callbacks: callbacks.into(),
        };
        elector.set_leading(false);
        Ok(elector)
    }

    /// The same candidate, also telling `callbacks` (call before cloning it
    /// or campaigning).
    pub fn with_callbacks(mut self, callbacks: Arc<dyn LeaderCallbacks>) -> Self {
        let mut all = self.callbacks.to_vec();
        all.push(callbacks);
        self.callbacks = all.into();
        self
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// The config in use.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// True between a successful acquire and a loss or release.
    pub fn is_leader(&self) -> bool {
        self.state().leading
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a transition and tells the callbacks (outside the lock).
    fn set_leading(&self, leading: bool) {
        if !leading {
            self.config.fence.revoke();
        }
        let was = std::mem::replace(&mut self.state().leading, leading);
        for callbacks in self.callbacks.iter() {
            match (was, leading) {
                (false, true) => callbacks.on_started_leading(),
                (true, false) => callbacks.on_stopped_leading(),
                _ => {}
            }
        }
    }

    /// Stores what was seen of the lock and tells `on_new_leader` when its
    /// holder changed (client-go's `maybeReportTransition`).
    fn observed(&self, observed: Observed) {
        let new_leader = {
            let mut state = self.state();
            let now = holder(&observed.spec).to_owned();
            state.observed = Some(observed);
            (!now.is_empty() && now != state.reported).then(|| {
                state.reported.clone_from(&now);
                now
            })
        };
        if let Some(leader) = new_leader {
            for callbacks in self.callbacks.iter() {
                callbacks.on_new_leader(&leader);
            }
        }
    }

    /// One attempt: read the Lease, and write ourselves in if [`may_acquire`]
    /// allows. `Ok(false)` means someone else validly holds it (or won a race).
    pub async fn try_acquire_or_renew(&self) -> Result<bool, LeaderElectionError> {
        // Writes are allowed for the renew deadline from the attempt's start
        // (not its end): never longer than the holder loop would lead.
        let started = Instant::now();
        let won = self.attempt().await?;
        if won {
            self.config
                .fence
                .grant_until(started + self.config.renew_deadline);
        }
        Ok(won)
    }

    async fn attempt(&self) -> Result<bool, LeaderElectionError> {
        let name = &self.config.lease_name;
        let me = self.config.identity.as_str();
        let fetched = self
            .lock
            .get()
            .await
            .map_err(|source| LeaderElectionError::Get {
                name: name.clone(),
                source,
            })?;
        let Some(mut lease) = fetched else {
            let spec = next_spec(None, me, self.config.lease_duration, Timestamp::now());
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec.clone()),
            };
            return match self.lock.create(lease).await {
                Ok(_) => {
                    self.observed(Observed {
                        spec,
                        at: Instant::now(),
                    });
                    Ok(true)
                }
                // Another candidate created it first: it leads.
                Err(kube::Error::Api(status)) if status.is_already_exists() => Ok(false),
                Err(source) => Err(LeaderElectionError::Create {
                    name: name.clone(),
                    source,
                }),
            };
        };

        let current = lease.spec.clone().unwrap_or_default();
        let now = Instant::now();
        let observed = observe(self.state().observed.as_ref(), current.clone(), now);
        let allowed = may_acquire(&observed, now, me);
        self.observed(observed);
        if !allowed {
            return Ok(false);
        }
        let spec = next_spec(
            Some(&current),
            me,
            self.config.lease_duration,
            Timestamp::now(),
        );
        lease.spec = Some(spec.clone());
        // `lease.metadata.resourceVersion` is the one we read: the API server
        // refuses this write if anyone wrote in between.
        match self.lock.update(lease).await {
            Ok(_) => {
                self.observed(Observed {
                    spec,
                    at: Instant::now(),
                });
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.is_conflict() => Ok(false),
            Err(source) => Err(LeaderElectionError::Update {
                name: name.clone(),
                source,
            }),
        }
    }

    /// The holder of the Lease as this candidate last read it.
    pub fn observed_holder(&self) -> Option<String> {
        let state = self.state();
        let observed = state.observed.as_ref()?;
        Some(holder(&observed.spec).to_owned())
    }

    /// Watches the Lease and wakes `free` whenever it is seen without a
    /// holder (released) or deleted. Never returns: a failed or closed watch
    /// is reopened after a retry period. The watch starts with the current
    /// record ([`Lock::watch`]), so a release made while no watch was open
    /// is seen too.
    async fn watch_for_release(&self, free: &Notify) {
        let name = &self.config.lease_name;
        loop {
            match self.lock.watch().await {
                Ok(mut events) => {
                    while let Some(event) = events.next().await {
                        match event {
                            Ok(WatchEvent::Added(lease) | WatchEvent::Modified(lease)) => {
                                let spec = lease.spec.unwrap_or_default();
                                let released = holder(&spec).is_empty();
                                // Each renewal restarts the expiry clock when
                                // the watch shows it, not at our next poll:
                                // counted from a poll up to 2.2 retry periods
                                // after the renewal, failover would take up to
                                // that much longer (issue #29). Never earlier
                                // than the renewal: as safe as a poll.
                                let seen =
                                    observe(self.state().observed.as_ref(), spec, Instant::now());
                                self.observed(seen);
                                if released {
                                    tracing::debug!(lease = %name, "saw the leader lease released: trying at once");
                                    free.notify_one();
                                }
                            }
                            Ok(WatchEvent::Deleted(_)) => free.notify_one(),
                            Ok(WatchEvent::Bookmark(_)) => {}
                            Ok(WatchEvent::Error(_)) | Err(_) => break,
                        }
                    }
                }
                Err(error) => {
                    tracing::debug!(lease = %name, %error, "failed to watch the leader lease; polling meanwhile")
                }
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Tries every retry period (jittered) until the Lease is ours, and at
    /// once when the Lease it watches is released. Returns `false` if
    /// `cancel` fired first.
    pub async fn acquire(&self, cancel: &CancellationToken) -> bool {
        let free = Notify::new();
        let watch = self.watch_for_release(&free);
        let mut watch = std::pin::pin!(watch);
        loop {
            // A hung request must not stall the campaign: cut it off and retry.
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return false,
                attempt = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()) => attempt,
            };
            match attempt {
                Err(_) => {
                    tracing::warn!(lease = %self.config.lease_name, "acquiring the leader lease timed out")
                }
                Ok(Ok(true)) => {
                    self.set_leading(true);
                    tracing::info!(lease = %self.config.lease_name, identity = %self.config.identity, "acquired leader lease");
                    return true;
                }
                Ok(Ok(false)) => {
                    tracing::debug!(lease = %self.config.lease_name, "leader lease is held by another candidate")
                }
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.config.lease_name, error = %error, "failed to acquire leader lease")
                }
            }
            let jittered = self
                .config
                .retry_period
                .mul_f64(1.0 + rand::random::<f64>() * ACQUIRE_JITTER);
            let wait = {
                let state = self.state();
                next_attempt_in(
                    state.observed.as_ref(),
                    &self.config.identity,
                    jittered,
                    Instant::now(),
                )
            };
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
                _ = free.notified() => {}
                _ = &mut watch => {}
            }
        }
    }

    /// client-go's `Run`: campaigns until the lock is ours (callbacks:
    /// started leading), then keeps it until it is lost or `cancel` fires
    /// (callbacks: stopped leading, when lost). [`HoldOutcome::Cancelled`]
    /// also when `cancel` fired before the lock was won.
    pub async fn run(&self, cancel: &CancellationToken) -> HoldOutcome {
        if !self.acquire(cancel).await {
            return HoldOutcome::Cancelled;
        }
        self.hold(cancel).await
    }

    /// Renews every retry period while leading. Returns [`HoldOutcome::Lost`]
    /// as soon as the renew deadline passes without a successful renewal (a
    /// hung request counts: each attempt is cut off at the deadline), or
    /// when another holder is found; [`HoldOutcome::Cancelled`] when `cancel` fires.
    pub async fn hold(&self, cancel: &CancellationToken) -> HoldOutcome {
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return HoldOutcome::Cancelled,
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
            let deadline = last_renew + self.config.renew_deadline;
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return HoldOutcome::Cancelled,
                attempt = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => attempt,
            };
            match attempt {
                Ok(Ok(true)) => last_renew = Instant::now(),
                Ok(Ok(false)) => {
                    tracing::error!(lease = %self.config.lease_name, "leader lease was taken by another candidate");
                    self.set_leading(false);
                    return HoldOutcome::Lost;
                }
                Ok(Err(error)) => {
                    tracing::warn!(lease = %self.config.lease_name, error = %error, "failed to renew leader lease")
                }
                Err(_) => {
                    tracing::warn!(lease = %self.config.lease_name, "renewing the leader lease timed out")
                }
            }
            if renew_deadline_passed(last_renew, Instant::now(), self.config.renew_deadline) {
                tracing::error!(lease = %self.config.lease_name, "failed to renew leader lease within the renew deadline");
                self.set_leading(false);
                return HoldOutcome::Lost;
            }
        }
    }

    /// Steps down: if we still hold the Lease, write the released record.
    /// A no-op when we are not leading (e.g. the lease was lost).
    pub async fn release(&self) -> Result<(), LeaderElectionError> {
        if !self.is_leader() {
            return Ok(());
        }
        self.set_leading(false);
        let name = &self.config.lease_name;
        let Some(mut lease) = self
            .lock
            .get()
            .await
            .map_err(|source| LeaderElectionError::Get {
                name: name.clone(),
                source,
            })?
        else {
            return Ok(());
        };
        let current = lease.spec.clone().unwrap_or_default();
        if holder(&current) != self.config.identity {
            return Ok(());
        }
        lease.spec = Some(released_spec(&current, Timestamp::now()));
        self.lock
            .update(lease)
            .await
            .map_err(|source| LeaderElectionError::Update {
                name: name.clone(),
                source,
            })?;
        tracing::info!(lease = %name, "released leader lease");
        Ok(())
    }
}

#[cfg(test)]
mod tests;
