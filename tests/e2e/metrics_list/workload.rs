//! The jobs that make the operator expose every series of `docs/metrics.md`
//! that is not "on error": one succeeds and is deleted by its TTL, one
//! restarts and then fails. Shared with `observability` (the same workload
//! under a real Prometheus) and its dashboard pictures.
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::{RestartPolicy, TFJob};

use crate::cluster::wait_until;
use crate::support::{EXIT_CODE_ANNOTATION, EXIT_CONTAINER_ANNOTATION};

pub const SLOW: Duration = Duration::from_secs(90);

/// Asks KWOK to end `pod`'s `tensorflow` container with `code`.
pub async fn exit(pods: &Api<Pod>, pod: &str, code: i32) {
    let patch = serde_json::json!({ "metadata": { "annotations": {
        EXIT_CODE_ANNOTATION: code.to_string(),
        EXIT_CONTAINER_ANNOTATION: "tensorflow",
    } } });
    pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("failed to annotate {pod}: {e}"));
}

pub async fn running_pod(pods: &Api<Pod>, name: &str, not_uid: Option<&str>) -> Pod {
    wait_until(&format!("pod {name} to run"), SLOW, || async {
        let pod = pods.get_opt(name).await.ok().flatten()?;
        let running = pod.status.as_ref()?.phase.as_deref() == Some("Running");
        let new = pod.metadata.uid.as_deref() != not_uid;
        (running && new && pod.metadata.deletion_timestamp.is_none()).then_some(pod)
    })
    .await
}

pub fn has_condition(job: &TFJob, type_: &str) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// Drives every job counter: `ok` succeeds and is deleted by its TTL; `bad`
/// restarts once (exit 137) and then fails past its backoff limit.
///
/// The TTL is 2 s, not 0: with 0 the operator deletes the job in the same
/// reconcile that finds it succeeded, before writing (and so counting) the
/// success (src/tfjob/plan/mod.rs takes the completion time of the status it is
/// about to write).
pub async fn run_jobs(client: &Client, ns: &str) {
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for fixture in [
        TfJobFixture::new("ok")
            .workers(1)
            .ttl_seconds_after_finished(2),
        TfJobFixture::new("bad")
            .workers(1)
            .restart_policy(RestartPolicy::ExitCode)
            .backoff_limit(1),
    ] {
        jobs.create(&PostParams::default(), &fixture.namespace(ns).build())
            .await
            .unwrap_or_else(|e| panic!("failed to create a TFJob: {e}"));
    }
    running_pod(&pods, "ok-worker-0", None).await;
    exit(&pods, "ok-worker-0", 0).await;
    let first = running_pod(&pods, "bad-worker-0", None).await;
    exit(&pods, "bad-worker-0", 137).await;
    running_pod(&pods, "bad-worker-0", first.metadata.uid.as_deref()).await;
    exit(&pods, "bad-worker-0", 137).await;
    wait_until("TFJob bad to fail", SLOW, || async {
        let job = jobs.get_opt("bad").await.ok().flatten()?;
        has_condition(&job, "Failed").then_some(())
    })
    .await;
    wait_until(
        "TFJob ok to succeed and be deleted by its TTL",
        SLOW,
        || async {
            jobs.get_opt("ok")
                .await
                .ok()
                .and_then(|j| j.is_none().then_some(()))
        },
    )
    .await;
}
