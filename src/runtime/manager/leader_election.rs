//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several
//! replicas of the operator only one runs the controllers at a time.
//!
//! Mirrors client-go `tools/leaderelection/leaderelection.go` with the
//! `resourcelock/leaselock.go` lock, and the 15 s / 10 s / 2 s defaults of
//! controller-runtime `pkg/manager/internal.go`:
//!
//! - A candidate reads the Lease and takes it when it is free (no holder),
//!   already its own, or *expired*: not changed for `leaseDurationSeconds`
//!   as measured on this candidate's own clock since it last saw the record
//!   change (never by comparing `renewTime` with the local wall clock, which
//!   would trust the other node's clock).
//! - Every write is a `replace` carrying the `resourceVersion` that was read,
//!   so two candidates racing for a free Lease cannot both win: the API server
//!   refuses the second write with 409 Conflict.
//! - The leader renews every retry period; if it has not renewed for the renew
//!   deadline it gives up leadership, before its Lease can expire for others
//!   (lease duration > renew deadline), so two leaders never overlap.
//! - On a clean shutdown (client-go's `ReleaseOnCancel`) the leader clears the
//!   holder and sets a 1 s duration. A standby *watches* the Lease while it
//!   waits and tries at once when it sees it released or deleted, so a
//!   graceful handover takes a round trip, not a retry period (client-go
//!   only polls: up to 2.2 retry periods, 4.4 s at the defaults).
//!
//! The timing decisions are pure functions ([`may_acquire`],
//! [`renew_deadline_passed`], [`next_spec`], [`released_spec`]) tested with
//! paused time; [`LeaderElector`] only adds the API calls around them.
//! This module never starts or stops work itself: the manager decides what
//! leadership means.
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::runtime::client::fence::WriteFence;

use crate::observability::metrics::SharedRegistry;

/// controller-runtime's default: how long a Lease is valid without renewal.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// controller-runtime's default: how long the leader keeps trying to renew.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// controller-runtime's default: the pause between attempts.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor`: acquire attempts wait `retry × (1 + rand × 1.2)`
/// so that standbys do not hammer the API server in lockstep.
const ACQUIRE_JITTER: f64 = 1.2;
/// A standby tries this long after the Lease it observed runs out (the
/// holder's clock may tick a little slower than ours).
const EXPIRY_MARGIN: Duration = Duration::from_millis(100);

/// Errors from leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderElectionError {
    #[error("failed to validate leader election config: {0}")]
    InvalidConfig(String),
    #[error("failed to read lease {name}")]
    Get {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to create lease {name}")]
    Create {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to update lease {name}")]
    Update {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl LeaderElectionError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidConfig(_) => "invalid_config",
            Self::Get { .. } => "get",
            Self::Create { .. } => "create",
            Self::Update { .. } => "update",
        }
    }
}

/// Where the Lease lives, who we are, and the timings.
#[derive(Clone, Debug)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease (usually the operator's own namespace).
    pub namespace: String,
    /// Name of the Lease; every replica of one operator uses the same name.
    pub lease_name: String,
    /// This candidate's identity, written as `holderIdentity`. Must be unique
    /// per process: two processes with one identity would both think they lead.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Clear the holder on a clean shutdown so a standby takes over at once.
    pub release_on_cancel: bool,
    /// Granted on every successful acquire or renew until the renew
    /// deadline, revoked on stepping down. Put it in front of the client
    /// ([`crate::runtime::client::fence`]) and a frozen-then-woken leader
    /// cannot write after its successor started.
    pub fence: WriteFence,
}

impl LeaderElectionConfig {
    /// The defaults (15 s / 10 s / 2 s, release on cancel) with a fresh identity.
    pub fn new(namespace: impl Into<String>, lease_name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            lease_name: lease_name.into(),
            identity: default_identity(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: true,
            fence: WriteFence::new(),
        }
    }

    /// client-go's checks: lease duration > renew deadline > 1.2 × retry period,
    /// all positive, and a non-empty identity. A renew deadline as long as the
    /// lease would let a leader keep working after others see its lease expire.
    pub fn validate(&self) -> Result<(), LeaderElectionError> {
        let invalid = |m: &str| Err(LeaderElectionError::InvalidConfig(m.to_owned()));
        if self.retry_period.is_zero() {
            return invalid("retry period must be greater than zero");
        }
        if self.lease_duration <= self.renew_deadline {
            return invalid("lease duration must be greater than renew deadline");
        }
        if self.renew_deadline.as_secs_f64() <= ACQUIRE_JITTER * self.retry_period.as_secs_f64() {
            return invalid("renew deadline must be greater than 1.2 × retry period");
        }
        if self.lease_duration.as_secs() < 1 {
            return invalid("lease duration must be at least one second");
        }
        if self.identity.is_empty() {
            return invalid("identity must not be empty");
        }
        if self.lease_name.is_empty() || self.namespace.is_empty() {
            return invalid("lease name and namespace must not be empty");
        }
        Ok(())
    }
}

/// `hostname_<random hex>`, like controller-runtime's `hostname + "_" + uuid`:
/// the hostname helps a human find the leader Pod, the suffix keeps two
/// processes on one host (or a restarted Pod) distinct.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "tfjob-operator".to_owned());
    format!("{host}_{:016x}", rand::random::<u64>())
}

/// The last Lease record this candidate saw, and when (on its own clock) it
/// first saw that exact record. Expiry is judged from `at`, not from the
/// record's timestamps.
#[derive(Clone, Debug)]
pub struct Observed {
    pub spec: LeaseSpec,
    pub at: Instant,
}

/// Remembers `fetched`; the observation time moves only when the record changed.
pub fn observe(prev: Option<&Observed>, fetched: LeaseSpec, now: Instant) -> Observed {
    match prev {
        Some(prev) if prev.spec == fetched => prev.clone(),
        _ => Observed {
            spec: fetched,
            at: now,
        },
    }
}

fn holder(spec: &LeaseSpec) -> &str {
    spec.holder_identity.as_deref().unwrap_or("")
}

fn record_duration(spec: &LeaseSpec) -> Duration {
    Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64)
}

/// May `me` write itself into the Lease? Yes when nobody holds it, when `me`
/// holds it, or when the holder has not changed the record for the duration
/// *it* advertised, counted from when we observed the record.
pub fn may_acquire(observed: &Observed, now: Instant, me: &str) -> bool {
    let holder = holder(&observed.spec);
    holder.is_empty()
        || holder == me
        || now.duration_since(observed.at) >= record_duration(&observed.spec)
}

/// How long a standby waits before its next acquire attempt: the jittered
/// retry period, unless the Lease it observed runs out sooner — then just
/// past that moment. client-go waits out the jitter (up to 2.2 retry
/// periods) even when the holder's Lease ran out meanwhile, which made
/// failover take up to ~4 s longer than `leaseDuration` after a leader froze.
pub fn next_attempt_in(
    observed: Option<&Observed>,
    me: &str,
    jittered: Duration,
    now: Instant,
) -> Duration {
    let Some(observed) = observed else {
        return jittered;
    };
    let holder = holder(&observed.spec);
    if holder.is_empty() || holder == me {
        return jittered;
    }
    let expires = observed.at + record_duration(&observed.spec);
    match expires.checked_duration_since(now) {
        Some(left) if left + EXPIRY_MARGIN < jittered => left + EXPIRY_MARGIN,
        _ => jittered,
    }
}

/// Has the leader gone `renew_deadline` without a successful renewal?
pub fn renew_deadline_passed(last_renew: Instant, now: Instant, renew_deadline: Duration) -> bool {
    now.duration_since(last_renew) >= renew_deadline
}

/// The record `me` writes to take or renew the Lease. A renewal keeps the
/// acquire time and transition count; a takeover bumps the transitions.
pub fn next_spec(
    current: Option<&LeaseSpec>,
    me: &str,
    lease_duration: Duration,
    now: Timestamp,
) -> LeaseSpec {
    let renewing = current.is_some_and(|c| holder(c) == me);
    let transitions = current.and_then(|c| c.lease_transitions).unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_owned()),
        lease_duration_seconds: Some(lease_duration.as_secs().min(i32::MAX as u64) as i32),
        acquire_time: if renewing {
            current.and_then(|c| c.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if renewing || current.is_none() {
            transitions
        } else {
            transitions + 1
        }),
        ..current.cloned().unwrap_or_default()
    }
}

/// The record a leader writes when it steps down cleanly: no holder and a
/// 1 s duration (client-go's `release`), so standbys may take it at once.
pub fn released_spec(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    }
}

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
}

/// One candidate for one Lease. Cheap to clone.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: Arc<LeaderElectionConfig>,
    state: Arc<Mutex<State>>,
    status: Family<Vec<(String, String)>, Gauge>,
}

impl LeaderElector {
    /// Validates the config and registers `leader_election_master_status`
    /// (1 while leading, 0 otherwise, labelled with the lease name).
    pub fn new(
        client: kube::Client,
        config: LeaderElectionConfig,
        registry: &SharedRegistry,
    ) -> Result<Self, LeaderElectionError> {
        config.validate()?;
        let status = Family::<Vec<(String, String)>, Gauge>::default();
        registry.lock().unwrap_or_else(|p| p.into_inner()).register(
            "leader_election_master_status",
            "Whether this process is the leader (1) or not (0), per lease name",
            status.clone(),
        );
        let elector = Self {
            api: Api::namespaced(client, &config.namespace),
            config: Arc::new(config),
            state: Arc::default(),
            status,
        };
        elector.set_leading(false);
        Ok(elector)
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
        self.lock().leading
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_leading(&self, leading: bool) {
        if !leading {
            self.config.fence.revoke();
        }
        self.lock().leading = leading;
        self.status
            .get_or_create(&vec![("name".to_owned(), self.config.lease_name.clone())])
            .set(i64::from(leading));
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
            .api
            .get_opt(name)
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
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.lock().observed = Some(Observed {
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
        let allowed = {
            let mut state = self.lock();
            let observed = observe(state.observed.as_ref(), current.clone(), now);
            let allowed = may_acquire(&observed, now, me);
            state.observed = Some(observed);
            allowed
        };
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
        match self.api.replace(name, &PostParams::default(), &lease).await {
            Ok(_) => {
                self.lock().observed = Some(Observed {
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
        let state = self.lock();
        let observed = state.observed.as_ref()?;
        Some(holder(&observed.spec).to_owned())
    }

    /// Watches the Lease and wakes `free` whenever it is seen without a
    /// holder (released) or deleted. Never returns: a failed or closed watch
    /// is reopened after a retry period. A watch from resourceVersion "0"
    /// starts with the current record, so a release made while no watch was
    /// open is seen too.
    async fn watch_for_release(&self, free: &Notify) {
        let name = &self.config.lease_name;
        loop {
            let params = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(290);
            match self.api.watch(&params, "0").await {
                Ok(events) => {
                    let mut events = std::pin::pin!(events);
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
                                {
                                    let mut state = self.lock();
                                    let seen =
                                        observe(state.observed.as_ref(), spec, Instant::now());
                                    state.observed = Some(seen);
                                }
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
                let state = self.lock();
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
        let Some(mut lease) =
            self.api
                .get_opt(name)
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
        self.api
            .replace(name, &PostParams::default(), &lease)
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
mod tests {
    use super::*;

    fn held_by(who: &str, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(who.to_owned()),
            lease_duration_seconds: Some(secs),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    fn config() -> LeaderElectionConfig {
        LeaderElectionConfig::new("ns", "tfjob-operator")
    }

    #[test]
    fn default_config_is_valid() {
        assert!(config().validate().is_ok());
        assert_eq!(config().lease_duration, Duration::from_secs(15));
        assert_eq!(config().renew_deadline, Duration::from_secs(10));
        assert_eq!(config().retry_period, Duration::from_secs(2));
    }

    #[test]
    fn lease_not_longer_than_renew_deadline_is_rejected() {
        let mut c = config();
        c.lease_duration = c.renew_deadline;
        let err = c.validate().unwrap_err();
        assert!(
            err.to_string().contains("lease duration must be greater"),
            "{err}"
        );
    }

    #[test]
    fn renew_deadline_within_1_2_retry_periods_is_rejected() {
        let mut c = config();
        c.retry_period = Duration::from_secs(5);
        c.renew_deadline = Duration::from_secs(6);
        assert!(c.validate().is_err());
        c.renew_deadline = Duration::from_millis(6001);
        c.lease_duration = Duration::from_secs(15);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn default_identities_are_unique_per_process_start() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        assert!(a.contains('_'));
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_tries_just_after_the_observed_lease_runs_out_not_after_the_jitter() {
        let t0 = Instant::now();
        let obs = observe(None, held_by("other", 15), t0);
        let jittered = Duration::from_millis(4400);
        // 14 s after observing a 15 s Lease: try in 1.1 s, not 4.4 s.
        let at_14 = t0 + Duration::from_secs(14);
        assert_eq!(
            next_attempt_in(Some(&obs), "me", jittered, at_14),
            Duration::from_millis(1100)
        );
        // Far from expiry, or our own Lease, or none: the jittered period.
        assert_eq!(next_attempt_in(Some(&obs), "me", jittered, t0), jittered);
        assert_eq!(
            next_attempt_in(Some(&obs), "other", jittered, at_14),
            jittered
        );
        assert_eq!(next_attempt_in(None, "me", jittered, at_14), jittered);
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_lease_may_be_taken_at_once() {
        let obs = observe(None, LeaseSpec::default(), Instant::now());
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_held_by_another_may_be_taken_only_after_its_duration_unchanged() {
        let t0 = Instant::now();
        let obs = observe(None, held_by("other", 15), t0);
        tokio::time::advance(Duration::from_secs(14)).await;
        assert!(!may_acquire(&obs, Instant::now(), "me"));
        // Seeing the same record again does not restart the clock...
        let obs = observe(Some(&obs), held_by("other", 15), Instant::now());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_record_restarts_the_expiry_clock() {
        let obs = observe(None, held_by("other", 15), Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        let mut renewed = held_by("other", 15);
        renewed.renew_time = Some(MicroTime(Timestamp::now()));
        let obs = observe(Some(&obs), renewed, Instant::now());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(
            !may_acquire(&obs, Instant::now(), "me"),
            "only 10 s since the renewal"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn our_own_lease_may_always_be_renewed() {
        let obs = observe(None, held_by("me", 15), Instant::now());
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_lease_may_be_taken_at_once() {
        let released = released_spec(&held_by("other", 15), Timestamp::now());
        let obs = observe(None, released, Instant::now());
        assert!(may_acquire(&obs, Instant::now(), "me"));
    }

    #[tokio::test(start_paused = true)]
    async fn renew_deadline_passes_exactly_at_the_deadline() {
        let last = Instant::now();
        let deadline = Duration::from_secs(10);
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert!(!renew_deadline_passed(last, Instant::now(), deadline));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(renew_deadline_passed(last, Instant::now(), deadline));
    }

    #[test]
    fn taking_over_bumps_transitions_and_acquire_time() {
        let now = Timestamp::from_second(1_000).unwrap();
        let mut current = held_by("other", 15);
        current.acquire_time = Some(MicroTime(Timestamp::from_second(1).unwrap()));
        let next = next_spec(Some(&current), "me", Duration::from_secs(15), now);
        assert_eq!(next.holder_identity.as_deref(), Some("me"));
        assert_eq!(next.lease_transitions, Some(4));
        assert_eq!(next.acquire_time, Some(MicroTime(now)));
        assert_eq!(next.renew_time, Some(MicroTime(now)));
        assert_eq!(next.lease_duration_seconds, Some(15));
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions() {
        let acquired = MicroTime(Timestamp::from_second(1).unwrap());
        let mut current = held_by("me", 15);
        current.acquire_time = Some(acquired.clone());
        let now = Timestamp::from_second(1_000).unwrap();
        let next = next_spec(Some(&current), "me", Duration::from_secs(15), now);
        assert_eq!(next.lease_transitions, Some(3));
        assert_eq!(next.acquire_time, Some(acquired));
        assert_eq!(next.renew_time, Some(MicroTime(now)));
    }

    #[test]
    fn a_new_lease_starts_with_zero_transitions() {
        let next = next_spec(None, "me", Duration::from_secs(15), Timestamp::UNIX_EPOCH);
        assert_eq!(next.lease_transitions, Some(0));
    }

    #[test]
    fn releasing_clears_the_holder_and_shortens_the_lease() {
        let released = released_spec(&held_by("me", 15), Timestamp::UNIX_EPOCH);
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(3));
    }
}
