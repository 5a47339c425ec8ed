//! What leadership means to the rest of the process, told through three
//! callbacks: started leading, stopped leading, a new leader observed.
//!
//! Mirrors client-go `tools/leaderelection.LeaderCallbacks`
//! (`OnStartedLeading`, `OnStoppedLeading`, `OnNewLeader`). The elector
//! calls them on its own task, outside its locks: they must return quickly
//! (send on a channel, set a gauge), never wait on the API server. The
//! manager starts its leader-only runnables from `on_started_leading`;
//! [`MasterStatus`] keeps `leader_election_master_status` from the first two.
use std::sync::Arc;

use crate::runtime::metrics::{Family, Gauge, SharedMetrics};

/// Hooks into one elector's transitions; each has a no-op default.
pub trait LeaderCallbacks: Send + Sync {
    /// This candidate now holds the lock: leader-only work may start.
    fn on_started_leading(&self) {}
    /// This candidate no longer leads (the lock was lost or released):
    /// leader-only work must stop.
    fn on_stopped_leading(&self) {}
    /// The lock was seen held by `identity` (this candidate's own
    /// included), the first time or after a change of holder. A released
    /// lock (no holder) is not a new leader.
    fn on_new_leader(&self, _identity: &str) {}
}

/// `leader_election_master_status{name=<lease>}`: 1 while leading, 0
/// otherwise (client-go's `leaderelection` metrics, as controller-runtime
/// registers them).
pub struct MasterStatus {
    gauge: Arc<dyn Gauge>,
}

impl MasterStatus {
    /// Registers the family in `registry`; the series starts at 0.
    pub fn register(registry: &SharedMetrics, lease_name: &str) -> Self {
        let gauge = registry
            .gauge(Family {
                name: "leader_election_master_status",
                help: "Whether this process is the leader (1) or not (0), per lease name",
                labels: &["name"],
            })
            .with(&[lease_name]);
        gauge.set(0);
        Self { gauge }
    }
}

impl LeaderCallbacks for MasterStatus {
    fn on_started_leading(&self) {
        self.gauge.set(1);
    }

    fn on_stopped_leading(&self) {
        self.gauge.set(0);
    }
}
