//! 1,000 TFJobs of 4 replicas each (Chief, 2 Workers, PS) created at once and
//! driven to Succeeded (each Chief exits 0 once Running). `make test-faults`
//! only (`FAULT_FULL=1`; `make test` skips it): it takes minutes.
//!
//! What must hold: zero operator errors (metric and log), zero duplicate Pods
//! (observer), zero 409 on creates and no 409 storm on updates (audit log),
//! all jobs Succeeded. Peak RSS and total time are reported.
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use tfjob_operator::api::fixtures::TfJobFixture;

use crate::audit;
use crate::cluster::{client, test_namespace};
use crate::harness::{
    Cleanup, apiserver_addr, error_lines, finished, identity, jobs, metric, report, running,
};
use crate::observer::Observer;
use crate::operator::{Operator, ensure_crd};
use crate::support::{EXIT_CODE_ANNOTATION, EXIT_CONTAINER_ANNOTATION};

fn jobs_count() -> usize {
    std::env::var("FAULT_SCALE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// Peak resident memory (VmHWM) of a process, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn scale_a_thousand_jobs_created_at_once_all_succeed_with_no_errors_or_duplicates() {
    let client = client().await;
    ensure_crd(&client).await;
    let n = jobs_count();
    let ns = test_namespace(&client, "fault-scale").await;
    let _cleanup_ns = Cleanup(vec![ns.clone()]);
    let observer = Observer::start(&client, Some(&ns));
    let user = "fault-op-scale";
    let kubeconfig = identity(user, apiserver_addr()).await;
    let mut op = Operator::start_with(&ns, &[], Some(kubeconfig));
    op.wait_ready().await;
    let pid = op.pid().expect("the operator runs");
    let mark = audit::mark();
    let started = Instant::now();

    let api = jobs(&client, &ns);
    futures::stream::iter(0..n)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            let ns = ns.clone();
            async move {
                let job = TfJobFixture::new(&format!("s{i:04}"))
                    .chief(1)
                    .workers(2)
                    .ps(1)
                    .namespace(&ns)
                    .build();
                api.create(&Default::default(), &job)
                    .await
                    .unwrap_or_else(|e| panic!("create s{i:04}: {e}"));
            }
        })
        .await;
    let created = started.elapsed();

    // Drive every Running Chief to exit 0, until every job has finished.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut ended: BTreeSet<String> = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(1800);
    let succeeded = loop {
        let chiefs = pods
            .list(&ListParams::default().labels("training.kubeflow.org/replica-type=chief"))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let todo: Vec<String> = chiefs
            .iter()
            .filter(|p| running(p) && !ended.contains(&p.name_any()))
            .map(|p| p.name_any())
            .collect();
        futures::stream::iter(todo.clone())
            .for_each_concurrent(32, |name| {
                let pods = pods.clone();
                async move {
                    let patch = serde_json::json!({"metadata": {"annotations": {
                        EXIT_CODE_ANNOTATION: "0", EXIT_CONTAINER_ANNOTATION: "tensorflow"}}});
                    let _ = pods
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            })
            .await;
        ended.extend(todo);
        let list = api
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let done = list
            .iter()
            .filter(|j| finished(j).as_deref() == Some("Succeeded"))
            .count();
        let failed = list
            .iter()
            .filter(|j| finished(j).as_deref() == Some("Failed"))
            .count();
        if done + failed == n {
            break done;
        }
        assert!(
            Instant::now() < deadline,
            "{done} of {n} jobs Succeeded after 30 min"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let total = started.elapsed();
    let rss = peak_rss_mib(pid);
    let metrics = op.metrics();
    let reconcile_errors = metric(&metrics, "controller_runtime_reconcile_errors_total", &[]);
    let log_errors = error_lines(&op.log_text()).len();
    let duplicates = observer.snapshot().extra_pods(|_| 1).len();
    let events = audit::since(mark);
    let mine: Vec<_> = events.iter().filter(|e| e.user == user).collect();
    let create_conflicts = mine
        .iter()
        .filter(|e| e.verb == "create" && e.code == 409)
        .count();
    let conflicts = mine.iter().filter(|e| e.code == 409).count();
    report(
        "scale",
        &[
            ("jobs", n.to_string()),
            ("succeeded", succeeded.to_string()),
            ("create_s", format!("{:.1}", created.as_secs_f64())),
            ("total_s", format!("{:.1}", total.as_secs_f64())),
            ("peak_rss_mib", format!("{rss:.1}")),
            ("reconcile_errors", reconcile_errors.to_string()),
            ("error_log_lines", log_errors.to_string()),
            ("duplicate_pods", duplicates.to_string()),
            ("operator_requests", mine.len().to_string()),
            ("create_409", create_conflicts.to_string()),
            ("all_409", conflicts.to_string()),
        ],
    );
    let log = op.log.clone();
    drop(op);
    assert_eq!(succeeded, n, "not every job Succeeded");
    assert_eq!(reconcile_errors, 0.0, "reconcile errors: {}", log.display());
    assert_eq!(log_errors, 0, "ERROR lines in {}", log.display());
    assert_eq!(duplicates, 0, "Pods created twice");
    assert_eq!(create_conflicts, 0, "creates answered 409 AlreadyExists");
    assert!(
        conflicts * 100 <= mine.len(),
        "a 409 storm: {conflicts} of {} requests",
        mine.len()
    );
}
