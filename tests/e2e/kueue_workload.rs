//! Kueue with its built-in TFJob integration off (`TFJOB_KUEUE_MODE=workload`:
//! `integrations.externalFrameworks: [TFJob.v1.kubeflow.org]`, and
//! `waitForPodsReady` with a 20 s timeout), where the operator builds and
//! owns each queued job's Workload (`src/tfjob/kueue/`). The scenarios both
//! modes share are in `tests/e2e/kueue.rs`; these are the ones only this
//! mode has:
//!
//! - `waitForPodsReady`: a job whose Pods cannot all start is evicted by
//!   Kueue after the timeout, stopped by the operator, its quota given back,
//!   and the next job in the queue runs;
//! - a job deleted while queued leaves no Workload (the operator removes
//!   Kueue's finalizer so garbage collection can delete it);
//! - gangs (#30): the job's PodGroup is created only once Kueue admitted it.
//!
//! Without Kueue in this mode the tests say so and pass, unless
//! `TFJOB_E2E_KUEUE=workload` (`e2e/run-suite.sh` sets it for this phase).
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use serde_json::json;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::SchedulingPolicy;

use crate::cluster::wait_until;
use crate::kueue::{
    Env, SLOW, has_condition, is_running, job_condition, job_condition_reason, kueue_running,
    workload_mode,
};
use crate::support::kube_minor;
use crate::test_kueue::kueue_api;

/// Kueue runs in `workload` mode; `None` (the test passes) otherwise, or a
/// panic when the harness promised it.
async fn env(prefix: &str, cpu: &str) -> Option<Env> {
    if !kueue_running() {
        return None;
    }
    if !workload_mode() {
        assert!(
            std::env::var("TFJOB_E2E_KUEUE").as_deref() != Ok("workload"),
            "TFJOB_E2E_KUEUE=workload but Kueue runs with its built-in integration"
        );
        eprintln!(
            "skipping: Kueue runs with its built-in TFJob integration (TFJOB_KUEUE_MODE=workload for these)"
        );
        return None;
    }
    Env::new(prefix, cpu, json!({})).await
}

/// Kueue's condition `type_` on the Workload, as JSON.
fn workload_condition(w: &DynamicObject, type_: &str) -> serde_json::Value {
    w.data["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn wait_for_pods_ready_requeues_a_job_whose_pods_cannot_all_start() {
    let Some(env) = env("kueue-podsready", "2").await else {
        return;
    };
    // Worker 1 can never be scheduled: no node has this label.
    let mut stuck = TfJobFixture::new("stuck")
        .workers(2)
        .namespace(&env.ns)
        .build();
    let worker = stuck
        .spec
        .tf_replica_specs
        .get_mut("Worker")
        .and_then(|r| r.template.spec.as_mut())
        .expect("a worker template");
    worker.node_selector = Some(BTreeMap::from([(
        "e2e.tfjob-operator.local/nowhere".to_owned(),
        "true".to_owned(),
    )]));
    env.submit_job(stuck, None).await;
    wait_until("stuck to be admitted", SLOW, || async {
        let wl = env.workload("stuck").await?;
        has_condition(&wl.data, "Admitted").then_some(())
    })
    .await;
    // The operator says its Pods are not all ready yet.
    wait_until("stuck's PodsReady False (WaitForStart)", SLOW, || async {
        let wl = env.workload("stuck").await?;
        let ready = workload_condition(&wl, "PodsReady");
        (ready["status"] == "False" && ready["reason"] == "WaitForStart").then_some(())
    })
    .await;
    env.submit("next", 2, None).await;
    env.wait_held("next").await;

    // After the 20 s timeout Kueue evicts it; the operator stops it and
    // gives the quota back; `next` gets it.
    let what = format!(
        "stuck to be evicted (PodsReadyTimeout), stopped, its quota given back (operator log: {})",
        env.log()
    );
    wait_until(&what, SLOW, || async {
        let wl = env.workload("stuck").await?;
        let evicted = workload_condition(&wl, "Evicted");
        let reserved = has_condition(&wl.data, "QuotaReserved");
        let job = env.job("stuck").await?;
        let stopped = job_condition(&job, "Suspended") == Some(true)
            && env.job_pods("stuck").await.is_empty();
        (evicted["reason"] == "PodsReadyTimeout" && !reserved && stopped).then_some(())
    })
    .await;
    let job = env.job("stuck").await.expect("stuck");
    // Unset, or false where Kubeflow's CRD defaults it: never true.
    assert_ne!(
        job.spec.run_policy.suspend,
        Some(true),
        "the operator stops a job without writing its spec"
    );
    assert_eq!(job_condition(&job, "Failed"), None, "{:?}", job.status);
    let wl = env.workload("stuck").await.expect("stuck's Workload");
    assert!(
        wl.data["status"]["requeueState"]["count"].as_i64() >= Some(1),
        "Kueue requeues it with a backoff: {}",
        wl.data["status"]
    );
    env.wait_admitted_and_running("next", 2).await;
    // `next`'s own PodsReady, written by the operator once both Pods run.
    wait_until("next's PodsReady True", SLOW, || async {
        let wl = env.workload("next").await?;
        (workload_condition(&wl, "PodsReady")["status"] == "True").then_some(())
    })
    .await;
    env.finish("next").await;
    env.cleanup().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_job_deleted_while_queued_leaves_no_workload_or_finalizer() {
    let Some(env) = env("kueue-delete", "2").await else {
        return;
    };
    env.submit("first", 2, None).await;
    env.wait_admitted_and_running("first", 2).await;
    env.submit("queued", 2, None).await;
    env.wait_held("queued").await;
    let wl = env.workload("queued").await.expect("queued's Workload");
    let wl_name = wl.name_any();
    assert!(
        wl.finalizers()
            .iter()
            .any(|f| f == "kueue.x-k8s.io/resource-in-use"),
        "{:?}",
        wl.metadata
    );
    let labels = wl.labels();
    assert_eq!(
        labels
            .get("tfjob-operator.kubeflow.org/workload-created-by")
            .map(String::as_str),
        Some("tfjob-operator"),
        "the operator made it, not Kueue: {labels:?}"
    );

    env.jobs
        .delete("queued", &DeleteParams::default())
        .await
        .expect("delete the queued job");
    let workloads = kueue_api(&env.client, "Workload", "workloads", Some(&env.ns));
    let what = format!(
        "queued's Workload {wl_name} to be gone (operator log: {})",
        env.log()
    );
    wait_until(&what, SLOW, || async {
        let gone = workloads.get_opt(&wl_name).await.ok()?.is_none();
        let job_gone = env.job("queued").await.is_none();
        (gone && job_gone).then_some(())
    })
    .await;
    // The running job is untouched and finishes.
    env.finish("first").await;
    env.cleanup().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_ganged_jobs_pod_group_is_created_only_after_admission() {
    if kube_minor() < 37 {
        eprintln!(
            "no scheduling.k8s.io/v1beta1 PodGroups before Kubernetes 1.37: nothing to check"
        );
        return;
    }
    let Some(env) = env("kueue-gang", "2").await else {
        return;
    };
    let gvk = GroupVersionKind::gvk("scheduling.k8s.io", "v1beta1", "PodGroup");
    let groups: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns,
        &ApiResource::from_gvk_with_plural(&gvk, "podgroups"),
    );
    env.submit("first", 2, None).await;
    env.wait_admitted_and_running("first", 2).await;
    let mut ganged = TfJobFixture::new("ganged")
        .workers(2)
        .namespace(&env.ns)
        .build();
    ganged.spec.run_policy.scheduling_policy = Some(SchedulingPolicy {
        min_available: Some(2),
        ..SchedulingPolicy::default()
    });
    env.submit_job(ganged, None).await;
    env.wait_held("ganged").await;
    assert!(
        groups.get_opt("ganged").await.expect("get").is_none(),
        "a queued job has no PodGroup yet"
    );

    env.finish("first").await;
    let pods = env.wait_admitted_and_running("ganged", 2).await;
    let group = groups.get_opt("ganged").await.expect("get");
    let group = group.expect("the admitted job's PodGroup");
    assert_eq!(
        group.data["spec"]["schedulingPolicy"]["gang"]["minCount"], 2,
        "{:?}",
        group.data
    );
    // Created after the admission: not before Kueue's Admitted condition.
    let wl = env.workload("ganged").await.expect("ganged's Workload");
    let admitted_at = workload_condition(&wl, "Admitted")["lastTransitionTime"]
        .as_str()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .expect("Admitted's time");
    let created_at = group
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("a creation time")
        .0;
    assert!(
        created_at >= admitted_at,
        "PodGroup created at {created_at}, admitted at {admitted_at}"
    );
    assert!(pods.iter().all(is_running));
    env.finish("ganged").await;
    env.cleanup().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_operator_reports_kueues_events_on_the_job() {
    let Some(env) = env("kueue-events", "2").await else {
        return;
    };
    env.submit("job", 2, None).await;
    env.wait_admitted_and_running("job", 2).await;
    env.finish("job").await;
    let workloads = kueue_api(&env.client, "Workload", "workloads", Some(&env.ns));
    let what = format!(
        "job's Workload Finished, finalizer gone (operator log: {})",
        env.log()
    );
    wait_until(&what, SLOW, || async {
        let wl = workloads
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .next()?;
        let finished = workload_condition(&wl, "Finished");
        (finished["status"] == "True"
            && finished["reason"] == "Succeeded"
            && wl.finalizers().is_empty())
        .then_some(())
    })
    .await;
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    let lp = ListParams::default().fields("involvedObject.name=job");
    let reasons: Vec<String> = events
        .list(&lp)
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for wanted in ["CreatedWorkload", "Started", "FinishedWorkload"] {
        assert!(
            reasons.iter().any(|r| r == wanted),
            "no {wanted} event: {reasons:?}"
        );
    }
    let job = env.job("job").await.expect("job");
    assert_ne!(
        job_condition_reason(&job, "Suspended").as_deref(),
        Some("TFJobQueued"),
        "{:?}",
        job.status
    );
    env.cleanup().await;
}
