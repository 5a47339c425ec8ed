//! Two operator processes with leader election in one namespace, each with
//! its own client identity (so the audit log tells their writes apart).
//!
//! - SIGSTOP the leader (a hung process: it neither renews nor releases;
//!   namespaced, and in all-namespaces mode as the chart runs it), and
//!   measure how long until the standby holds the Lease and until it writes;
//!   later SIGCONT the old leader: the audit log must show no write of the
//!   old leader after the new one's first write. p50/p95 over the rounds.
//! - SIGTERM the leader under load: its in-flight reconciles finish, it
//!   releases the Lease, and the standby takes over within 2 s.
//! - A released Lease wakes a waiting standby: two in-process candidates with
//!   a 5 s retry period; the standby must hold the Lease long before its next
//!   poll could have found it free (it watches the Lease).
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use tfjob_operator::api::fixtures::TfJobFixture;

use crate::audit::{self, AuditEvent};
use crate::cluster::{client, test_namespace, wait_until};
use crate::harness::{
    Cleanup, apiserver_addr, create_job, error_lines, full, identity, metric, percentile, pods,
    report, rounds,
};
use crate::observer::Observer;
use crate::operator::{Operator, ensure_crd};

const LEASE: &str = "tfjob-operator-leader";
/// leaseDuration + retryPeriod at the 15/10/2 defaults, which are the chart's
/// (it sets no lease flag): asserted on the p95 in `make test-faults`.
const FAILOVER_GOAL: Duration = Duration::from_secs(17);
/// The standby holds a released Lease within this of the leader's exit:
/// asserted in `make test-faults`.
const HANDOVER_GOAL: Duration = Duration::from_secs(2);
/// `make test`'s seeded subset (3 rounds, on a CI machine that may be busy)
/// asserts looser bounds: the goal plus 3 s for the failover (room for a
/// loaded 2-core machine to delay the standby's retry timer, its Lease
/// update and this test's 50 ms polls; 15.1-15.2 s p95 measured on an
/// idle one, docs/reliability.md), and 5 s for the handover
/// (the standby sees the release on its Lease watch: 0.07-0.11 s measured,
/// so 5 s is a wide margin that still fails a standby that waits for its
/// next poll, as the old 10.8 s handover did).
const SUBSET_FAILOVER_BOUND: Duration = Duration::from_secs(20);
const SUBSET_HANDOVER_BOUND: Duration = Duration::from_secs(5);

/// The bound this run asserts: the goal in `make test-faults`, the subset's otherwise.
fn bound(goal: Duration, subset: Duration) -> Duration {
    if full() { goal } else { subset }
}

struct Candidate {
    user: String,
    operator: Operator,
}

impl Candidate {
    async fn start(ns: &str, user: &str) -> Self {
        Self::start_in(ns, user, false).await
    }

    /// In `all_namespaces` mode the operator watches every namespace, as
    /// the chart runs it, with its Lease in `ns` (issue #29, point 8).
    async fn start_in(ns: &str, user: &str, all_namespaces: bool) -> Self {
        let kubeconfig = identity(user, apiserver_addr()).await;
        let mut operator = if all_namespaces {
            Operator::start_all_namespaces(ns, &[], Some(kubeconfig))
        } else {
            Operator::start_with(ns, &[], Some(kubeconfig))
        };
        operator.wait_ready().await;
        Self {
            user: user.to_owned(),
            operator,
        }
    }

    fn leads(&self) -> bool {
        metric(
            &self.operator.metrics(),
            "leader_election_master_status",
            &[],
        ) >= 1.0
    }
}

async fn holder(client: &Client, ns: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    leases
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// Waits until exactly one of the two leads; returns its index.
async fn leader_of(pair: &[Candidate; 2]) -> usize {
    wait_until("one leader of two", Duration::from_secs(60), || async {
        match (pair[0].leads(), pair[1].leads()) {
            (true, false) => Some(0),
            (false, true) => Some(1),
            _ => None,
        }
    })
    .await
}

/// Successful writes of `old` received after `new`'s first successful write.
fn late_writes(
    events: &[AuditEvent],
    old: &str,
    new: &str,
) -> (Option<jiff::Timestamp>, Vec<AuditEvent>) {
    let first_new = events
        .iter()
        .filter(|e| e.user == new && e.is_successful_write())
        .map(|e| e.at)
        .min();
    let late = match first_new {
        Some(t) => events
            .iter()
            .filter(|e| e.user == old && e.is_successful_write() && e.received > t)
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    (first_new, late)
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn a_sigstopped_leader_is_replaced_in_time_and_never_writes_after_its_successor() {
    sigstop_failover(false).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn in_all_namespaces_mode_a_sigstopped_leader_is_replaced_in_time_too() {
    sigstop_failover(true).await;
}

async fn sigstop_failover(all_namespaces: bool) {
    let client = client().await;
    ensure_crd(&client).await;
    let rounds = rounds(3);
    let ns = test_namespace(&client, "fault-failover").await;
    let _cleanup_ns = Cleanup(vec![ns.clone()]);
    let (user_a, user_b, scenario) = if all_namespaces {
        (
            "fault-op-a-all",
            "fault-op-b-all",
            "failover-sigstop-all-namespaces",
        )
    } else {
        ("fault-op-a", "fault-op-b", "failover-sigstop")
    };
    let first = Candidate::start_in(&ns, user_a, all_namespaces).await;
    wait_until("a Lease holder", Duration::from_secs(30), || {
        holder(&client, &ns)
    })
    .await;
    let second = Candidate::start_in(&ns, user_b, all_namespaces).await;
    let mut pair = [first, second];
    let mut takeovers = Vec::new();
    let mut first_writes = Vec::new();
    let mut split_brain = Vec::new();

    for round in 0..rounds {
        let old = leader_of(&pair).await;
        let new = 1 - old;
        let old_holder = holder(&client, &ns).await.expect("a holder");
        let mark = audit::mark();
        let stopped = Instant::now();
        pair[old].operator.signal("STOP");
        // Work only a leader can do: the new leader's first write.
        let job = format!("round-{round:02}");
        create_job(&client, &ns, TfJobFixture::new(&job).workers(2)).await;
        let pods = pods(&client, &ns);
        let mut took_over = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        let wrote = loop {
            if took_over.is_none() && holder(&client, &ns).await.is_some_and(|h| h != old_holder) {
                took_over = Some(stopped.elapsed());
            }
            let pod = pods
                .get_opt(&format!("{job}-worker-0"))
                .await
                .ok()
                .flatten();
            if took_over.is_some() && pod.is_some() {
                break stopped.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "no takeover in round {round} within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let took_over = took_over.expect("set before the wait ends");
        takeovers.push(took_over.as_secs_f64());
        first_writes.push(wrote.as_secs_f64());
        eprintln!("failover round {round}: lease {took_over:.1?}, first Pod {wrote:.1?}");

        // Wake the old leader: it must notice it lost the Lease and write nothing.
        pair[old].operator.signal("CONT");
        let woke = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(pair[old].operator.exited()
            || (!pair[old].operator.metrics().is_empty() && !pair[old].leads()))
        {
            assert!(
                Instant::now() < deadline,
                "the old leader neither stepped down nor exited"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Give a resumed old leader the time to act on what it had queued (its
        // renew deadline passed long ago, so anything it writes is a bug).
        tokio::time::sleep(Duration::from_secs(3).saturating_sub(woke.elapsed())).await;
        let events = audit::since(mark);
        let (_, late) = late_writes(&events, &pair[old].user, &pair[new].user);
        for e in &late {
            eprintln!(
                "round {round}: {} wrote {} {}/{} ({}) at {} after its successor's first write",
                e.user,
                e.verb,
                e.resource,
                e.name.as_deref().unwrap_or("-"),
                e.code,
                e.received
            );
        }
        split_brain.extend(late);
        if pair[old].operator.exited() {
            let user = pair[old].user.clone();
            pair[old] = Candidate::start_in(&ns, &user, all_namespaces).await;
        }
    }

    let p50 = percentile(&takeovers, 50.0);
    let p95 = percentile(&takeovers, 95.0);
    report(
        scenario,
        &[
            ("rounds", rounds.to_string()),
            ("lease_p50_s", format!("{p50:.1}")),
            ("lease_p95_s", format!("{p95:.1}")),
            (
                "lease_max_s",
                format!("{:.1}", percentile(&takeovers, 100.0)),
            ),
            (
                "first_write_p50_s",
                format!("{:.1}", percentile(&first_writes, 50.0)),
            ),
            (
                "first_write_p95_s",
                format!("{:.1}", percentile(&first_writes, 95.0)),
            ),
            ("old_leader_late_writes", split_brain.len().to_string()),
            (
                "lease_p95_bound_s",
                bound(FAILOVER_GOAL, SUBSET_FAILOVER_BOUND)
                    .as_secs()
                    .to_string(),
            ),
        ],
    );
    drop(pair);
    assert!(
        split_brain.is_empty(),
        "{} writes of an old leader after its successor's first write",
        split_brain.len()
    );
    // The goal is asserted (issue #29): a timing figure the docs publish
    // must turn the suite red when it regresses.
    let bound = bound(FAILOVER_GOAL, SUBSET_FAILOVER_BOUND);
    assert!(
        p95 <= bound.as_secs_f64(),
        "failover p95 {p95:.1} s > {bound:?} (goal {FAILOVER_GOAL:?} = leaseDuration + retryPeriod at the chart's defaults; takeovers: {takeovers:.1?})"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn a_sigtermed_leader_finishes_its_work_releases_the_lease_and_the_standby_takes_over_within_2_s()
 {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "fault-sigterm").await;
    let _cleanup_ns = Cleanup(vec![ns.clone()]);
    let observer = Observer::start(&client, Some(&ns));
    let first = Candidate::start(&ns, "fault-op-a").await;
    wait_until("a Lease holder", Duration::from_secs(30), || {
        holder(&client, &ns)
    })
    .await;
    let second = Candidate::start(&ns, "fault-op-b").await;
    let mut pair = [first, second];
    let old = leader_of(&pair).await;
    let new = 1 - old;
    let old_holder = holder(&client, &ns).await.expect("a holder");
    let mark = audit::mark();

    // Heavy load: many jobs at once, and SIGTERM while their Pods are being created.
    let jobs = 30;
    let creates = (0..jobs).map(|i| {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            create_job(
                &client,
                &ns,
                TfJobFixture::new(&format!("load-{i:02}"))
                    .chief(1)
                    .workers(3),
            )
            .await;
        }
    });
    futures::future::join_all(creates).await;
    let pods = pods(&client, &ns);
    wait_until(
        "the leader to be creating Pods",
        Duration::from_secs(30),
        || async {
            let n = pods.list(&Default::default()).await.ok()?.items.len();
            (n >= 8).then_some(())
        },
    )
    .await;
    let termed = Instant::now();
    pair[old].operator.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(40);
    while !pair[old].operator.exited() {
        assert!(
            Instant::now() < deadline,
            "the old leader did not exit within 40 s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let exited = termed.elapsed();
    let taken = wait_until(
        "the standby to hold the Lease",
        Duration::from_secs(30),
        || async {
            holder(&client, &ns)
                .await
                .is_some_and(|h| h != old_holder)
                .then(|| termed.elapsed())
        },
    )
    .await;
    let handover = taken.saturating_sub(exited);
    let all = jobs * 4;
    wait_until(&format!("{all} Pods"), Duration::from_secs(120), || async {
        let n = pods.list(&Default::default()).await.ok()?.items.len();
        (n == all).then_some(())
    })
    .await;
    let seen = observer.snapshot();
    let duplicated = seen.extra_pods(|_| 1);
    let log = pair[old].operator.log_text();
    let released = log.contains("released leader lease");
    let aborted = log.contains("did not stop") || log.contains("runnable failed while stopping");
    let events = audit::since(mark);
    let (_, late) = late_writes(&events, &pair[old].user, &pair[new].user);
    report(
        "sigterm-handover",
        &[
            ("jobs", jobs.to_string()),
            ("exit_s", format!("{:.2}", exited.as_secs_f64())),
            (
                "handover_after_exit_s",
                format!("{:.2}", handover.as_secs_f64()),
            ),
            ("lease_released", released.to_string()),
            ("duplicate_pods", duplicated.len().to_string()),
            ("old_leader_late_writes", late.len().to_string()),
            ("old_leader_errors", error_lines(&log).len().to_string()),
            (
                "handover_bound_s",
                bound(HANDOVER_GOAL, SUBSET_HANDOVER_BOUND)
                    .as_secs()
                    .to_string(),
            ),
        ],
    );
    assert!(
        released,
        "the old leader did not release its Lease: {}",
        pair[old].operator.log.display()
    );
    assert!(
        !aborted,
        "in-flight work was cut short: {}",
        pair[old].operator.log.display()
    );
    assert!(duplicated.is_empty(), "Pods created twice: {duplicated:?}");
    assert!(
        late.is_empty(),
        "the old leader wrote after its successor: {late:?}"
    );
    let bound = bound(HANDOVER_GOAL, SUBSET_HANDOVER_BOUND);
    assert!(
        handover <= bound,
        "the standby took over {handover:.2?} after the leader exited: more than {bound:?} (goal {HANDOVER_GOAL:?})"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn a_standby_takes_a_released_lease_when_it_sees_the_release_not_at_its_next_poll() {
    use tfjob_operator::observability::metrics::new_registry;
    use tfjob_operator::observability::metrics::pipeline::pipeline_metrics;
    use tfjob_operator::runtime::leader_election::config::LeaderElectionConfig;
    use tfjob_operator::runtime::leader_election::elector::LeaderElector;
    use tokio_util::sync::CancellationToken;

    let client = client().await;
    let ns = test_namespace(&client, "fault-release").await;
    let _cleanup_ns = Cleanup(vec![ns.clone()]);
    // A long retry period makes the difference plain: a standby that only
    // polls waits 5-11 s (client-go's jitter) after its first look.
    let retry = Duration::from_secs(5);
    let candidate = |who: &str| {
        let config = LeaderElectionConfig {
            identity: who.to_owned(),
            lease_duration: Duration::from_secs(30),
            renew_deadline: Duration::from_secs(20),
            retry_period: retry,
            ..LeaderElectionConfig::new(&ns, "release-test")
        };
        LeaderElector::new(client.clone(), config, &pipeline_metrics(&new_registry()))
            .expect("a valid config")
    };
    let (a, b) = (candidate("a"), candidate("b"));
    let mut handovers = Vec::new();
    for round in 0..rounds(2).min(5) {
        let (leader, standby) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let cancel = CancellationToken::new();
        assert!(leader.acquire(&cancel).await, "the first candidate leads");
        let waiting = {
            let standby = standby.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                let won = standby.acquire(&cancel).await;
                (won, Instant::now())
            })
        };
        // The standby has looked once and found the Lease held.
        wait_until(
            "the standby's first look",
            Duration::from_secs(10),
            || async {
                (standby.observed_holder().as_deref() == Some(leader.identity())).then_some(())
            },
        )
        .await;
        let released = Instant::now();
        leader
            .release()
            .await
            .expect("the leader releases its Lease");
        let (won, at) = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the standby takes the Lease within 30 s")
            .expect("the standby's task");
        assert!(won, "the standby acquired");
        let handover = at.saturating_duration_since(released);
        eprintln!(
            "release round {round}: the standby held the Lease {handover:.2?} after the release"
        );
        handovers.push(handover.as_secs_f64());
        // Its next poll could not have come before `retry` after its first
        // look: holding the Lease sooner shows it acted on the watch.
        assert!(
            handover < retry - Duration::from_secs(1),
            "the standby took {handover:?} after the release: it waited for its next poll ({retry:?} retry period) instead of seeing the release"
        );
        standby
            .release()
            .await
            .expect("the standby steps down again");
        cancel.cancel();
    }
    report(
        "lease-release-wakes-standby",
        &[
            ("rounds", handovers.len().to_string()),
            ("retry_period_s", retry.as_secs().to_string()),
            (
                "handover_p50_s",
                format!("{:.3}", percentile(&handovers, 50.0)),
            ),
            (
                "handover_max_s",
                format!("{:.3}", percentile(&handovers, 100.0)),
            ),
        ],
    );
}
