//! SIGKILL of the operator at seeded random points while multi-replica jobs
//! run, restart, fail and finish; the operator is restarted at once each time.
//! The same seeded workload runs meanwhile in a second namespace under an
//! operator nobody disturbs: every job must end exactly as its twin did
//! (condition, per-type restarts/succeeded/failed, Pod UIDs per index), and
//! the audit log's Pod creates must match the UIDs the observer saw.
//!
//! Leader election is off here (`--leader-elect=false`): a restarted process
//! has a new identity and would wait out the dead one's Lease (15 s) each
//! round; failover has its own scenario (`failover.rs`).
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use tokio::sync::Notify;

use crate::audit;
use crate::harness::{Cleanup, apiserver_addr, full, identity, report, rng, rounds};
use crate::observer::Observer;
use crate::operator::{Operator, ensure_crd};
use crate::support::{client, test_namespace};
use crate::workload::{self, end_states};

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn jobs_end_as_in_an_undisturbed_run_when_the_operator_is_sigkilled_at_seeded_points() {
    let client = client().await;
    ensure_crd(&client).await;
    let mut rng = rng("sigkill");
    let rounds = rounds(1);
    let jobs = if full() { 20 } else { 6 };
    let timeout = Duration::from_secs(180);

    let reference_ns = test_namespace(&client, "fault-ref").await;
    let ns = test_namespace(&client, "fault-kill").await;
    let _cleanup = Cleanup(vec![ns.clone(), reference_ns.clone()]);
    let observer = Observer::start(&client, None);
    let mark = audit::mark();
    let server = apiserver_addr();
    let reference_kc = identity("fault-op-ref", server).await;
    let kc = identity("fault-op-kill", server).await;
    let mut reference =
        Operator::start_with(&reference_ns, &["--leader-elect=false"], Some(reference_kc));
    reference.wait_ready().await;
    let mut operator = Operator::start_with(&ns, &["--leader-elect=false"], Some(kc.clone()));
    operator.wait_ready().await;

    let scripts = workload::scripts(&mut rng, jobs, Duration::from_millis(1500 * rounds as u64));
    // Odd rounds kill at a random time; even rounds kill 0-300 ms after the
    // test asked KWOK to end a Pod, while the operator acts on the exit
    // (counting a restart, deleting and re-creating a Pod, writing status):
    // the windows in which a crash can make it lose or double-count.
    let kill_plan: Vec<(bool, u64, u64)> = (0..rounds)
        .map(|i| {
            let after_exit = i % 2 == 1;
            let wait = if after_exit {
                rng.random_range(0..300)
            } else {
                rng.random_range(300..3000)
            };
            (after_exit, wait, rng.random_range(0..1000))
        })
        .collect();
    let exits = Arc::new(Notify::new());

    let started = Instant::now();
    let killer = {
        let ns = ns.clone();
        let kc = kc.clone();
        let exits = exits.clone();
        async move {
            let mut logs = vec![operator.log.clone()];
            for (i, (after_exit, before, down)) in kill_plan.iter().enumerate() {
                if *after_exit {
                    // At most 5 s: the workload may have no exit left to drive.
                    let _ = tokio::time::timeout(Duration::from_secs(5), exits.notified()).await;
                }
                tokio::time::sleep(Duration::from_millis(*before)).await;
                operator.kill();
                eprintln!(
                    "sigkill round {}: killed at {:?}{}",
                    i + 1,
                    started.elapsed(),
                    if *after_exit {
                        " (just after a Pod was told to exit)"
                    } else {
                        ""
                    }
                );
                tokio::time::sleep(Duration::from_millis(*down)).await;
                operator = Operator::start_with(&ns, &["--leader-elect=false"], Some(kc.clone()));
                logs.push(operator.log.clone());
            }
            operator.wait_ready().await;
            (operator, logs)
        }
    };
    let (reference_jobs, faulted_jobs, (operator, logs)) = tokio::join!(
        workload::run(&client, &reference_ns, &scripts, timeout, None),
        workload::run(&client, &ns, &scripts, timeout, Some(exits)),
        killer,
    );

    // The operator may still be settling a job it finished; poll, then compare.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (want, got) = loop {
        let seen = observer.snapshot();
        let want = end_states(&reference_jobs, &seen, &reference_ns);
        let jobs_now = crate::harness::wait_finished(
            &client,
            &ns,
            &faulted_jobs.keys().cloned().collect::<Vec<_>>(),
            timeout,
        )
        .await;
        let got = end_states(&jobs_now, &seen, &ns);
        if want == got || Instant::now() > deadline {
            break (want, got);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let mismatched: Vec<&String> = want
        .keys()
        .filter(|name| want.get(*name) != got.get(*name))
        .collect();

    let seen = observer.snapshot();
    let events = audit::since(mark);
    let creates = audit::creates(&events, "pods", &ns);
    let cancelled = audit::cancelled_creates(&events, "pods", &ns);
    let conflicts = events
        .iter()
        .filter(|e| {
            e.verb == "create" && e.code == 409 && e.namespace.as_deref() == Some(ns.as_str())
        })
        .count();
    report(
        "sigkill",
        &[
            ("rounds", rounds.to_string()),
            ("jobs", jobs.to_string()),
            ("mismatched_jobs", mismatched.len().to_string()),
            ("pod_uids", seen.pod_uids(&ns).to_string()),
            (
                "reference_pod_uids",
                seen.pod_uids(&reference_ns).to_string(),
            ),
            ("audit_pod_creates", creates.len().to_string()),
            ("audit_pod_creates_cancelled", cancelled.len().to_string()),
            ("create_conflicts", conflicts.to_string()),
            (
                "elapsed_s",
                format!("{:.1}", started.elapsed().as_secs_f64()),
            ),
        ],
    );
    drop(operator);
    drop(reference);
    let logs: Vec<String> = logs.iter().map(|l| l.display().to_string()).collect();
    for name in &mismatched {
        eprintln!(
            "{name}: undisturbed {:?}\n{name}: sigkilled   {:?}",
            want.get(*name),
            got.get(*name)
        );
    }
    assert!(
        mismatched.is_empty(),
        "{} of {jobs} jobs ended differently from the undisturbed run (seed {}; operator logs: {logs:?})",
        mismatched.len(),
        crate::harness::seed()
    );
    // A restarted operator syncs its caches before it reconciles, so it
    // knows every Pod its predecessor created: a create it sends must not
    // meet one that exists (AlreadyExists, 409).
    assert_eq!(
        conflicts, 0,
        "Pod creates met AlreadyExists after a restart (operator logs: {logs:?})"
    );
    let uids = seen.pod_uids(&ns);
    assert!(
        creates.len() <= uids && uids <= creates.len() + cancelled.len(),
        "the observer saw {uids} Pod UIDs, the audit log {} successful creates and {} cancelled ones",
        creates.len(),
        cancelled.len()
    );
}
