//! End-to-end tests of the manager's leader election and of the event
//! recorder, against the real API server of the local control plane.
//!
//! What this must never do: rely on timing luck. Every wait is bounded by the
//! lease arithmetic it checks (lease duration, retry period and its 1.2
//! jitter), and each test uses its own namespace and its own Lease.
//!
//! Mirrors: client-go's `tools/leaderelection` integration tests and
//! kubernetes/kubernetes `test/integration/events`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use tfjob_operator::observability::metrics::pipeline::pipeline_metrics;
use tfjob_operator::observability::metrics::{SharedRegistry, encode, new_registry};
use tfjob_operator::runtime::events::{EventRecorderConfig, event_recorder};
use tfjob_operator::runtime::leader_election::config::LeaderElectionConfig;
use tfjob_operator::runtime::manager::{BoxError, Manager, ManagerConfig, ManagerError};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::cluster::{client, random_suffix, test_namespace, wait_until};

/// Short timings (still valid: 6 > 4 > 1.2 × 1) keep the suite quick.
const LEASE: Duration = Duration::from_secs(6);
const RENEW: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_secs(1);
/// The longest pause between two acquire attempts: retry × (1 + 1.2).
const MAX_RETRY_WAIT: Duration = Duration::from_millis(2200);

/// Who is running leader-only work right now, and the most ever at once.
#[derive(Default)]
struct Leadership {
    current: Mutex<Vec<String>>,
    max_at_once: AtomicUsize,
}

impl Leadership {
    fn leaders(&self) -> Vec<String> {
        self.current.lock().unwrap().clone()
    }
}

/// Present in [`Leadership::current`] for as long as it lives.
struct Leading {
    seen: Arc<Leadership>,
    me: String,
}

impl Leading {
    fn start(seen: Arc<Leadership>, me: String) -> Self {
        {
            let mut current = seen.current.lock().unwrap();
            current.push(me.clone());
            seen.max_at_once.fetch_max(current.len(), Ordering::SeqCst);
        }
        Self { seen, me }
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        if let Ok(mut current) = self.seen.current.lock() {
            current.retain(|id| id != &self.me);
        }
    }
}

struct Candidate {
    identity: String,
    registry: SharedRegistry,
    stop: CancellationToken,
    run: JoinHandle<Result<(), ManagerError>>,
}

fn election(ns: &str, lease: &str, identity: &str, release: bool) -> LeaderElectionConfig {
    let mut config = LeaderElectionConfig::new(ns, lease);
    config.identity = identity.to_owned();
    config.lease_duration = LEASE;
    config.renew_deadline = RENEW;
    config.retry_period = RETRY;
    config.release_on_cancel = release;
    config
}

/// Starts a manager whose only leader-only runnable records itself in `seen`.
fn start_candidate(
    client: &Client,
    config: LeaderElectionConfig,
    seen: Arc<Leadership>,
) -> Candidate {
    let identity = config.identity.clone();
    let registry = new_registry();
    let mut manager = Manager::new(
        client.clone(),
        ManagerConfig {
            probe_addr: None,
            metrics_addr: None,
            leader_election: Some(config),
            graceful_shutdown: Duration::from_secs(5),
            handle_signals: false,
        },
        pipeline_metrics(&registry),
    );
    let me = identity.clone();
    manager.add_runnable(
        "controller",
        true,
        move |token: CancellationToken| async move {
            // Dropped when the task ends or is aborted (a lost lease aborts).
            let _leading = Leading::start(seen, me);
            token.cancelled().await;
            Ok::<(), BoxError>(())
        },
    );
    let stop = manager.shutdown_token();
    Candidate {
        identity,
        registry,
        stop,
        run: tokio::spawn(manager.run()),
    }
}

async fn holder(client: &Client, ns: &str, lease: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

async fn wait_for_leader(seen: &Leadership, who: &str, within: Duration) {
    wait_until(&format!("{who} to lead"), within, || async {
        seen.leaders().contains(&who.to_owned()).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn one_leader_at_a_time_and_a_released_lease_fails_over_quickly() {
    let _cluster = crate::support::shared_cluster().await;
    let client = client().await;
    let ns = test_namespace(&client, "mgr-release").await;
    let lease = "tfjob-operator-lock";
    let seen = Arc::new(Leadership::default());

    let a = start_candidate(&client, election(&ns, lease, "a", true), seen.clone());
    wait_for_leader(&seen, &a.identity, Duration::from_secs(20)).await;
    let b = start_candidate(&client, election(&ns, lease, "b", true), seen.clone());

    // b keeps campaigning for longer than a lease while a renews: a stays leader.
    tokio::time::sleep(LEASE + RETRY).await;
    assert_eq!(seen.leaders(), vec!["a".to_owned()]);
    assert_eq!(holder(&client, &ns, lease).await.as_deref(), Some("a"));
    let status = |c: &Candidate| {
        let text = encode(&c.registry);
        text.lines()
            .find(|l| l.starts_with("leader_election_master_status{"))
            .map(|l| l.ends_with(" 1"))
    };
    assert_eq!(status(&a), Some(true), "a reports itself leader");
    assert_eq!(status(&b), Some(false), "b reports itself not leader");

    // A clean stop releases the Lease, so b need not wait out the lease duration.
    let stopped = Instant::now();
    a.stop.cancel();
    a.run.await.unwrap().unwrap();
    wait_for_leader(&seen, &b.identity, LEASE).await;
    let took = stopped.elapsed();
    assert!(
        took < LEASE,
        "a released lease was taken over after {took:?}, not within the {LEASE:?} lease"
    );
    assert_eq!(holder(&client, &ns, lease).await.as_deref(), Some("b"));
    assert_eq!(
        seen.max_at_once.load(Ordering::SeqCst),
        1,
        "two leaders overlapped"
    );

    b.stop.cancel();
    b.run.await.unwrap().unwrap();
    assert_eq!(
        holder(&client, &ns, lease).await,
        None,
        "b released the lease on stop"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_leader_that_stops_without_release_is_replaced_within_the_lease_duration() {
    let _cluster = crate::support::shared_cluster().await;
    let client = client().await;
    let ns = test_namespace(&client, "mgr-expire").await;
    let lease = "tfjob-operator-lock";
    let seen = Arc::new(Leadership::default());

    // a never releases: to b it looks exactly like a killed process.
    let a = start_candidate(&client, election(&ns, lease, "a", false), seen.clone());
    wait_for_leader(&seen, &a.identity, Duration::from_secs(20)).await;
    let b = start_candidate(&client, election(&ns, lease, "b", true), seen.clone());
    tokio::time::sleep(2 * RETRY).await;

    let stopped = Instant::now();
    a.stop.cancel();
    a.run.await.unwrap().unwrap();
    assert_eq!(
        holder(&client, &ns, lease).await.as_deref(),
        Some("a"),
        "a left its record in place"
    );
    // b saw a's last renewal at most one retry period before the stop (plus
    // b's own polling delay), and takes over one lease duration after that.
    let bound = LEASE + MAX_RETRY_WAIT + Duration::from_secs(2);
    wait_for_leader(&seen, &b.identity, bound).await;
    let took = stopped.elapsed();
    assert!(
        took >= LEASE - RETRY - Duration::from_millis(500),
        "b took over after {took:?}, before a's lease could have expired"
    );
    assert_eq!(
        seen.max_at_once.load(Ordering::SeqCst),
        1,
        "two leaders overlapped"
    );

    b.stop.cancel();
    b.run.await.unwrap().unwrap();
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_leader_whose_lease_is_taken_stops_its_work_and_fails() {
    let _cluster = crate::support::shared_cluster().await;
    let client = client().await;
    let ns = test_namespace(&client, "mgr-lost").await;
    let lease = "tfjob-operator-lock";
    let seen = Arc::new(Leadership::default());

    let a = start_candidate(&client, election(&ns, lease, "a", true), seen.clone());
    wait_for_leader(&seen, &a.identity, Duration::from_secs(20)).await;

    // Someone else writes itself into the Lease (as a candidate with a skewed
    // view might): a must notice at its next renewal and stop leading.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let mut stolen = leases.get(lease).await.unwrap();
    if let Some(spec) = stolen.spec.as_mut() {
        spec.holder_identity = Some("intruder".to_owned());
        spec.lease_duration_seconds = Some(60);
    }
    leases
        .replace(lease, &PostParams::default(), &stolen)
        .await
        .unwrap();

    let result = tokio::time::timeout(RENEW + RETRY, a.run)
        .await
        .expect("a noticed the loss within a renew deadline")
        .unwrap();
    assert!(
        matches!(result, Err(ManagerError::LeaderElectionLost)),
        "{result:?}"
    );
    assert!(seen.leaders().is_empty(), "leader-only work was stopped");
    assert_eq!(
        holder(&client, &ns, lease).await.as_deref(),
        Some("intruder"),
        "a lost leader must not release someone else's lease"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_event_recorder_aggregates_repeats_into_one_event() {
    let _cluster = crate::support::shared_cluster().await;
    let client = client().await;
    let ns = test_namespace(&client, "mgr-events").await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let name = format!("subject-{}", random_suffix());
    let subject: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "namespace": ns }
    }))
    .unwrap();
    let subject = configmaps
        .create(&PostParams::default(), &subject)
        .await
        .unwrap();

    let (recorder, broadcaster) = event_recorder(
        client.clone(),
        EventRecorderConfig::new("tfjob-e2e"),
        &pipeline_metrics(&new_registry()),
    );
    let stop = CancellationToken::new();
    let writer = tokio::spawn(broadcaster.run(stop.clone()));

    for _ in 0..3 {
        recorder.warning(&subject, "Broken", "the same thing broke");
    }
    recorder.normal(&subject, "Fixed", "a different event");

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let selector = format!("involvedObject.name={name}");
    let found = wait_until(
        "one aggregated event with count 3",
        Duration::from_secs(20),
        || async {
            let list = events
                .list(&ListParams::default().fields(&selector))
                .await
                .ok()?;
            let broken: Vec<_> = list
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Broken"))
                .cloned()
                .collect();
            let fixed = list
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("Fixed"));
            (fixed && broken.len() == 1 && broken[0].count == Some(3)).then(|| broken[0].clone())
        },
    )
    .await;
    assert_eq!(found.type_.as_deref(), Some("Warning"));
    assert_eq!(found.reporting_component.as_deref(), Some("tfjob-e2e"));
    assert_eq!(found.involved_object.uid, subject.metadata.uid);
    assert!(found.last_timestamp >= found.first_timestamp);

    stop.cancel();
    writer.await.unwrap();
}
