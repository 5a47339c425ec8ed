//! Where the Lease lives, who this candidate is, and the timings, with
//! client-go's checks on them.
//!
//! Mirrors client-go `tools/leaderelection.LeaderElectionConfig` (and
//! `NewLeaderElector`'s validation) with the 15 s / 10 s / 2 s defaults of
//! controller-runtime `pkg/manager/internal.go`.
use std::time::Duration;

use super::error::LeaderElectionError;
use crate::runtime::client::fence::WriteFence;

/// controller-runtime's default: how long a Lease is valid without renewal.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// controller-runtime's default: how long the leader keeps trying to renew.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// controller-runtime's default: the pause between attempts.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor`: acquire attempts wait `retry × (1 + rand × 1.2)`
/// so that standbys do not hammer the API server in lockstep.
pub(super) const ACQUIRE_JITTER: f64 = 1.2;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
