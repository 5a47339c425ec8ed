//! What one job costs the API server (issue #19): the requests the operator
//! sends for one TFJob of 1 Chief, 1 PS and 2 Workers, from apply to
//! Running and from the chief's exit to Succeeded, counted in the audit log
//! under the operator's own identity. No fault is injected; the scenario is
//! here because this suite runs the operator as its own user and reads the
//! audit log, which sees every request whatever the operator's counters say.
//!
//! The lower bound is the job's eight children plus one status write per
//! state the job passes through. What the operator may add on top: status
//! writes coalesced while the replicas start (not one per replica), and no
//! reads its cache answers. Events are counted apart: Kubeflow's one per
//! child created (eight) by default, one per kind of child (two) under
//! `--fold-create-events`.
use std::collections::BTreeMap;
use std::time::Duration;

use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::RestartPolicy;

use crate::audit::{self, AuditEvent};
use crate::cluster::{client, test_namespace, wait_until};
use crate::harness::{
    Cleanup, apiserver_addr, create_job, end_pod, has_condition, identity, jobs, pods, report,
    running,
};
use crate::operator::{Operator, ensure_crd};

const USER: &str = "fault-op-requests";
const SLOW: Duration = Duration::from_secs(120);
/// Late writes (a coalesced status write waits up to a second) are counted
/// too: the scenario reads the log this long after each phase ends.
const SETTLE: Duration = Duration::from_secs(3);

/// The operator's requests on the job's objects (its Lease, and the
/// informers' list and watch, are not the job's cost), by `verb resource`.
fn by_kind(events: &[AuditEvent], ns: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e.user == USER && e.namespace.as_deref() == Some(ns) && e.resource != "leases")
    {
        let sub = e
            .subresource
            .as_deref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        *out.entry(format!("{} {}{sub}", e.verb, e.resource))
            .or_default() += 1;
    }
    out
}

fn count(kinds: &BTreeMap<String, usize>, kind: &str) -> usize {
    kinds.get(kind).copied().unwrap_or(0)
}

/// Writes to the job, its children and its status: everything but reads
/// and Events.
fn object_writes(kinds: &BTreeMap<String, usize>) -> usize {
    kinds
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("get ")
                && !k.starts_with("list ")
                && !k.starts_with("watch ")
                && !k.ends_with(" events")
        })
        .map(|(_, n)| n)
        .sum()
}

/// Event writes (creates and patches).
fn event_writes(kinds: &BTreeMap<String, usize>) -> usize {
    count(kinds, "create events") + count(kinds, "patch events")
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn a_four_replica_job_costs_its_children_kubeflows_eight_events_and_at_most_three_status_writes()
 {
    let (to_running, to_succeeded) = run_one_job(&[]).await;
    // Kubeflow's Events: SuccessfulCreatePod ×4, SuccessfulCreateService ×4.
    assert_eq!(count(&to_running, "create events"), 8, "{to_running:?}");
    assert_eq!(event_writes(&to_running), 8, "{to_running:?}");
    assert_costs(&to_running, &to_succeeded);
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn under_fold_create_events_a_four_replica_job_costs_two_create_events() {
    let (to_running, to_succeeded) = run_one_job(&["--fold-create-events"]).await;
    // One Event per kind of child: "Created 4 pods: …", "Created 4 services: …".
    assert_eq!(count(&to_running, "create events"), 2, "{to_running:?}");
    assert_eq!(event_writes(&to_running), 2, "{to_running:?}");
    assert_costs(&to_running, &to_succeeded);
}

type Requests = BTreeMap<String, usize>;

/// Runs one job of 1 Chief, 1 PS and 2 Workers to Running, then to
/// Succeeded, under an operator started with `flags`; returns the
/// operator's requests in each phase.
async fn run_one_job(flags: &[&str]) -> (Requests, Requests) {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "fault-requests").await;
    let _cleanup = Cleanup(vec![ns.clone()]);
    let kubeconfig = identity(USER, apiserver_addr()).await;
    let mut op = Operator::start_with(&ns, flags, Some(kubeconfig));
    op.wait_ready().await;

    let start = audit::mark();
    let name = "req";
    create_job(
        &client,
        &ns,
        TfJobFixture::new(name)
            .chief(1)
            .ps(1)
            .workers(2)
            .restart_policy(RestartPolicy::Never),
    )
    .await;
    let (job_api, pod_api) = (jobs(&client, &ns), pods(&client, &ns));
    wait_until(
        &format!("{ns}/{name} Running with 4 running Pods and active 4 in its status"),
        SLOW,
        || async {
            let job = job_api.get(name).await.ok()?;
            let active: i32 = job
                .status
                .as_ref()?
                .replica_statuses
                .values()
                .map(|r| r.active)
                .sum();
            let listed = pod_api.list(&Default::default()).await.ok()?;
            let up = listed.items.iter().filter(|p| running(p)).count();
            (has_condition(&job, "Running") && active == 4 && up == 4).then_some(())
        },
    )
    .await;
    tokio::time::sleep(SETTLE).await;
    let exit = audit::mark();
    let to_running = by_kind(&audit::since(start), &ns);

    end_pod(&client, &ns, &format!("{name}-chief-0"), 0, &[], SLOW, None).await;
    wait_until(&format!("{ns}/{name} Succeeded"), SLOW, || async {
        let job = job_api.get(name).await.ok()?;
        has_condition(&job, "Succeeded").then_some(())
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    let to_succeeded = by_kind(&audit::since(exit), &ns);
    drop(op);

    // One name per flag set: a recorded run keeps one file per name
    // (FAULT_RESULTS_DIR), and both runs of this scenario are published.
    let scenario = std::iter::once("requests")
        .chain(flags.iter().map(|f| f.trim_start_matches('-')))
        .collect::<Vec<_>>()
        .join("-");
    report(
        &scenario,
        &[
            ("flags", flags.join(" ")),
            ("to_running", format!("{to_running:?}")),
            ("to_succeeded", format!("{to_succeeded:?}")),
        ],
    );
    (to_running, to_succeeded)
}

/// The job's cost apart from its create Events.
fn assert_costs(to_running: &Requests, to_succeeded: &Requests) {
    // The children, once each.
    assert_eq!(count(to_running, "create pods"), 4, "{to_running:?}");
    assert_eq!(count(to_running, "create services"), 4, "{to_running:?}");
    assert_eq!(count(to_running, "patch events"), 0, "{to_running:?}");
    // Created and Running, coalesced while the replicas start: one write if
    // they all run within a second of the first pass, else two.
    let status_writes = count(to_running, "update tfjobs/status");
    assert!(
        (1..=2).contains(&status_writes),
        "{status_writes} status writes to Running: {to_running:?}"
    );
    assert_eq!(
        object_writes(to_running),
        8 + status_writes,
        "{to_running:?}"
    );
    // Nothing read that the cache holds.
    for kind in ["get tfjobs", "get pods", "get services"] {
        assert_eq!(count(to_running, kind), 0, "{to_running:?}");
        assert_eq!(count(to_succeeded, kind), 0, "{to_succeeded:?}");
    }
    // The chief's exit: the Succeeded status and its Event, no bookkeeping.
    assert_eq!(
        count(to_succeeded, "update tfjobs/status"),
        1,
        "{to_succeeded:?}"
    );
    assert_eq!(count(to_succeeded, "patch tfjobs"), 0, "{to_succeeded:?}");
    assert_eq!(object_writes(to_succeeded), 1, "{to_succeeded:?}");
    assert_eq!(event_writes(to_succeeded), 1, "{to_succeeded:?}");
}
