//! The elector's loop and callbacks over a lock in memory (the Lease's own
//! API calls are shown on the control plane: `tests/e2e/manager.rs`,
//! `tests/faults/failover.rs`).
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::core::Status;

use super::*;
use crate::runtime::leader_election::lock::LockEvents;
use crate::runtime::metrics::testing::{encode, new_registry};

/// One Lease in memory; writes carry and check a resourceVersion as the
/// API server's do.
#[derive(Default)]
struct MemoryLock {
    lease: Mutex<Option<Lease>>,
    version: Mutex<u64>,
}

fn refused(reason: &str) -> kube::Error {
    kube::Error::Api(Box::new(Status::failure(reason, reason).with_code(409)))
}

impl MemoryLock {
    fn store(&self, mut lease: Lease) -> Lease {
        let mut version = self.version.lock().unwrap();
        *version += 1;
        lease.metadata.resource_version = Some(version.to_string());
        *self.lease.lock().unwrap() = Some(lease.clone());
        lease
    }

    /// Another candidate writes itself in.
    fn taken_by(&self, who: &str) {
        let mut lease = self.lease.lock().unwrap().clone().unwrap();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(who.to_owned()),
            lease_duration_seconds: Some(15),
            ..LeaseSpec::default()
        });
        self.store(lease);
    }
}

impl Lock for MemoryLock {
    fn get(&self) -> BoxFuture<'_, Result<Option<Lease>, kube::Error>> {
        let lease = self.lease.lock().unwrap().clone();
        Box::pin(async move { Ok(lease) })
    }

    fn create(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, kube::Error>> {
        let exists = self.lease.lock().unwrap().is_some();
        let result = if exists {
            Err(refused("AlreadyExists"))
        } else {
            Ok(self.store(lease))
        };
        Box::pin(async move { result })
    }

    fn update(&self, lease: Lease) -> BoxFuture<'_, Result<Lease, kube::Error>> {
        let current = self.lease.lock().unwrap().clone();
        let result = match current {
            Some(c) if c.metadata.resource_version == lease.metadata.resource_version => {
                Ok(self.store(lease))
            }
            _ => Err(refused("Conflict")),
        };
        Box::pin(async move { result })
    }

    fn watch(&self) -> BoxFuture<'_, Result<LockEvents, kube::Error>> {
        Box::pin(async { Ok(futures::stream::pending().boxed()) })
    }
}

/// Every callback, in the order it was called.
#[derive(Default)]
struct Calls(Mutex<Vec<String>>);

impl LeaderCallbacks for Calls {
    fn on_started_leading(&self) {
        self.0.lock().unwrap().push("started".into());
    }
    fn on_stopped_leading(&self) {
        self.0.lock().unwrap().push("stopped".into());
    }
    fn on_new_leader(&self, identity: &str) {
        self.0
            .lock()
            .unwrap()
            .push(format!("new leader {identity}"));
    }
}

fn candidate(lock: &Arc<MemoryLock>, calls: &Arc<Calls>) -> LeaderElector {
    let config = LeaderElectionConfig {
        identity: "me".into(),
        ..LeaderElectionConfig::new("ns", "lease")
    };
    LeaderElector::with_lock(
        Arc::clone(lock) as Arc<dyn Lock>,
        config,
        vec![Arc::clone(calls) as Arc<dyn LeaderCallbacks>],
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_candidate_that_takes_a_free_lock_is_told_who_leads_then_that_it_started() {
    let (lock, calls) = (Arc::new(MemoryLock::default()), Arc::new(Calls::default()));
    let elector = candidate(&lock, &calls);
    assert!(elector.acquire(&CancellationToken::new()).await);
    assert!(elector.is_leader());
    assert_eq!(*calls.0.lock().unwrap(), ["new leader me", "started"]);
    // Renewing is not news.
    assert!(elector.try_acquire_or_renew().await.unwrap());
    assert_eq!(calls.0.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_finds_its_lock_taken_is_told_it_stopped_and_who_leads_now() {
    let (lock, calls) = (Arc::new(MemoryLock::default()), Arc::new(Calls::default()));
    let elector = candidate(&lock, &calls);
    assert!(elector.acquire(&CancellationToken::new()).await);
    lock.taken_by("other");
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        elector.hold(&CancellationToken::new()),
    )
    .await
    .expect("the loss is seen at the next renewal");
    assert_eq!(outcome, HoldOutcome::Lost);
    assert!(!elector.is_leader());
    assert_eq!(
        *calls.0.lock().unwrap(),
        ["new leader me", "started", "new leader other", "stopped"]
    );
}

#[tokio::test(start_paused = true)]
async fn run_leads_until_cancelled_and_a_release_gives_the_lock_back() {
    let (lock, calls) = (Arc::new(MemoryLock::default()), Arc::new(Calls::default()));
    let elector = candidate(&lock, &calls);
    let cancel = CancellationToken::new();
    let running = tokio::spawn({
        let (elector, cancel) = (elector.clone(), cancel.clone());
        async move { elector.run(&cancel).await }
    });
    while !elector.is_leader() {
        tokio::task::yield_now().await;
    }
    cancel.cancel();
    assert_eq!(running.await.unwrap(), HoldOutcome::Cancelled);
    assert!(
        elector.is_leader(),
        "cancelling keeps the lock until released"
    );

    elector.release().await.unwrap();
    let spec = lock.lease.lock().unwrap().clone().unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity, None);
    assert_eq!(
        *calls.0.lock().unwrap(),
        ["new leader me", "started", "stopped"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_master_status_gauge_follows_leadership() {
    let registry = new_registry();
    let lock = Arc::new(MemoryLock::default());
    let status = MasterStatus::register(&registry, "lease");
    let elector = LeaderElector::with_lock(
        lock,
        LeaderElectionConfig::new("ns", "lease"),
        vec![Arc::new(status)],
    )
    .unwrap();
    let series = "leader_election_master_status{name=\"lease\"}";
    assert!(encode(&registry).contains(&format!("{series} 0\n")));
    assert!(elector.acquire(&CancellationToken::new()).await);
    assert!(encode(&registry).contains(&format!("{series} 1\n")));
    elector.release().await.unwrap();
    assert!(encode(&registry).contains(&format!("{series} 0\n")));
}
