//! What must hold whichever TFJob CRD is installed: ours, or Kubeflow
//! training-operator's (`TFJOB_E2E_CRD=kubeflow`, the second phase of
//! `e2e/run-suite.sh`, `make e2e-kubeflow-crd`).
//!
//! Kubeflow's CRD has no validation of the replica specs and a smaller status
//! schema, so the API server accepts manifests ours refuses and prunes the
//! status fields it does not know. Users who keep it (`crd.install=false`)
//! still need (1) invalid jobs refused, by the operator instead of the API
//! server: a Warning event and a Failed condition naming the field, no Pods;
//! (2) the operator's bookkeeping to survive pruning, e.g. a succeeded
//! worker stays done when its Pod goes away.
//!
//! Mirrors: training-operator's `pkg/controller.v1/tensorflow` validation
//! (`ValidateV1TFJob`), which it also runs in the operator (and a webhook).
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;

use crate::cluster::{client, test_namespace, wait_until};
use crate::operator::{CrdFlavor, Operator, crd_flavor, ensure_crd};
use crate::support::{drive_pod_exit, shared_cluster, wait_condition_within};

const SLOW: Duration = Duration::from_secs(90);
const JOB_NAME_LABEL: &str = "training.kubeflow.org/job-name";

/// A TFJob manifest with the given replica specs.
fn manifest(name: &str, replica_specs: Value) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": { "name": name },
        "spec": { "tfReplicaSpecs": replica_specs }
    })
}

fn replica(replicas: i64, containers: Value) -> Value {
    json!({ "replicas": replicas, "template": { "spec": { "containers": containers } } })
}

fn tensorflow() -> Value {
    json!([{ "name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1" }])
}

fn tfjobs(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TFJob>(&()))
}

/// Creates `manifest` and checks who refuses it, naming `field`: under our
/// CRD the API server (422, nothing stored); under Kubeflow's the operator: a Warning event and a
/// Failed condition whose messages contain `field` (the last segment of the
/// field's path, e.g. `replicas` for `spec.tfReplicaSpecs[Worker].replicas`),
/// and no Pod ever created.
async fn refused_naming(prefix: &str, manifest: Value, field: &str) {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, prefix).await;
    let name = manifest["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let object: DynamicObject = serde_json::from_value(manifest).expect("a valid object");
    let jobs = tfjobs(&client, &ns);

    if crd_flavor() == CrdFlavor::Ours {
        match jobs.create(&PostParams::default(), &object).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{status:?}");
                assert!(
                    status.message.contains(field),
                    "the API server's refusal should name `{field}`: {:?}",
                    status.message
                );
            }
            other => panic!("our CRD should refuse {name} at the API server, got {other:?}"),
        }
        return;
    }

    let operator = {
        let mut op = Operator::start(&ns);
        op.wait_ready().await;
        op
    };
    jobs.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("Kubeflow's CRD should accept {name}: {e}"));
    let what = format!(
        "TFJob {ns}/{name} to be Failed with a message naming `{field}` (operator log: {})",
        operator.log.display()
    );
    let failed_message = wait_until(&what, Duration::from_secs(30), || async {
        let job = jobs.get_opt(&name).await.ok().flatten()?;
        let conditions = job.data["status"]["conditions"].as_array()?.clone();
        conditions.iter().find_map(|c| {
            (c["type"] == "Failed" && c["status"] == "True")
                .then(|| c["message"].as_str().unwrap_or_default().to_owned())
        })
    })
    .await;
    assert!(
        failed_message.contains(field),
        "the Failed condition should name `{field}`: {failed_message:?}"
    );

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let by_job = ListParams::default().fields(&format!("involvedObject.name={name}"));
    let warning = wait_until(
        &format!("a Warning event on {ns}/{name}"),
        Duration::from_secs(30),
        || async {
            let list = events.list(&by_job).await.ok()?;
            list.items.into_iter().find(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.message.as_deref().is_some_and(|m| m.contains(field))
            })
        },
    )
    .await;
    assert!(warning.reason.is_some(), "{warning:?}");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let children = pods
        .list(&ListParams::default().labels(&format!("{JOB_NAME_LABEL}={name}")))
        .await
        .expect("list pods");
    assert!(
        children.items.is_empty(),
        "no Pod for a refused job: {:?}",
        children
            .items
            .iter()
            .map(|p| p.name_any())
            .collect::<Vec<_>>()
    );
    let created = events
        .list(&by_job)
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("SuccessfulCreatePod"))
        .count();
    assert_eq!(created, 0, "the operator created Pods for a refused job");
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_job_without_a_tensorflow_container_is_refused_naming_tensorflow() {
    let specs = json!({ "Worker": replica(1, json!([{ "name": "main", "image": "busybox" }])) });
    refused_naming("kf-no-tf", manifest("no-tf", specs), "tensorflow").await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_job_with_negative_replicas_is_refused_naming_replicas() {
    let specs = json!({ "Worker": replica(-1, tensorflow()) });
    refused_naming("kf-neg", manifest("neg", specs), "replicas").await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_job_with_an_unknown_restart_policy_is_refused_naming_restart_policy() {
    let mut worker = replica(1, tensorflow());
    worker["restartPolicy"] = "Sometimes".into();
    let specs = json!({ "Worker": worker });
    refused_naming("kf-rp", manifest("rp", specs), "restartPolicy").await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_job_with_chief_and_master_is_refused_naming_master() {
    let specs = json!({ "Chief": replica(1, tensorflow()), "Master": replica(1, tensorflow()) });
    refused_naming("kf-two-chiefs", manifest("two-chiefs", specs), "Master").await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_job_with_an_empty_image_is_refused_naming_image() {
    let specs = json!({ "Worker": replica(1, json!([{ "name": "tensorflow", "image": "" }])) });
    refused_naming("kf-no-image", manifest("no-image", specs), "image").await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_job_with_an_unknown_replica_type_is_refused_naming_tf_replica_specs() {
    // The path is `spec.tfReplicaSpecs[Launcher]`; our CRD's message names the map only.
    let specs = json!({ "Launcher": replica(1, tensorflow()) });
    refused_naming("kf-bad-type", manifest("bad-type", specs), "tfReplicaSpecs").await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_job_whose_name_is_too_long_for_its_pods_is_refused_naming_metadata_name() {
    // 60 characters: "<name>-worker-0" would not fit a 63-character Service name.
    let specs = json!({ "Worker": replica(1, tensorflow()) });
    let name = "x".repeat(60);
    refused_naming("kf-long", manifest(&name, specs), "metadata.name").await;
}

/// A succeeded worker stays done when its Pod is deleted: the operator must
/// remember it (our CRD: `replicaStatuses.Worker.succeededIndexes`; under
/// Kubeflow's CRD that field is pruned, so the memory must live elsewhere).
/// The scale-up to 3 workers is the barrier: the reconcile that creates
/// `w-worker-2` sees `w-worker-1` gone. The default cleanPodPolicy (None)
/// keeps every Pod after success, so a worker 1 created again at any point
/// is still there at the end.
#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_succeeded_worker_whose_pod_is_deleted_is_not_created_again() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "kf-succeeded").await;
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let job = TfJobFixture::new("w").workers(2).namespace(&ns).build();
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the TFJob");
    let by_job = ListParams::default().labels(&format!("{JOB_NAME_LABEL}=w"));
    let running = |p: &Pod| {
        p.metadata.deletion_timestamp.is_none()
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    };
    wait_until("2 running workers", SLOW, || async {
        let list = pods.list(&by_job).await.ok()?;
        (list.items.iter().filter(|p| running(p)).count() == 2).then_some(())
    })
    .await;

    // Worker 1 succeeds (the job goes on: worker 0 decides), then its Pod goes.
    drive_pod_exit(&client, &ns, "w-worker-1", Some("tensorflow"), 0).await;
    let log = operator.log.display().to_string();
    wait_until(
        &format!("the operator to count worker 1 as succeeded (log: {log})"),
        SLOW,
        || async {
            let job = jobs.get_opt("w").await.ok().flatten()?;
            let succeeded = job.status?.replica_statuses.get("Worker")?.succeeded;
            (succeeded == 1).then_some(())
        },
    )
    .await;
    let first_uid = pods.get("w-worker-1").await.expect("w-worker-1").uid();
    pods.delete("w-worker-1", &Default::default())
        .await
        .expect("delete w-worker-1");
    wait_until("w-worker-1 to be gone", SLOW, || async {
        match pods.get_opt("w-worker-1").await {
            Ok(Some(p)) if p.uid() != first_uid => Some(()), // re-created: checked below
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;

    // The barrier: one more worker. Its creation proves a reconcile after the delete.
    let scale = json!({ "spec": { "tfReplicaSpecs": { "Worker": { "replicas": 3 } } } });
    jobs.patch("w", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .expect("scale to 3 workers");
    wait_until(&format!("w-worker-2 to run (log: {log})"), SLOW, || async {
        let p = pods.get_opt("w-worker-2").await.ok().flatten()?;
        running(&p).then_some(())
    })
    .await;
    let names: Vec<String> = pods
        .list(&by_job)
        .await
        .expect("list pods")
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(
        !names.iter().any(|n| n == "w-worker-1"),
        "the succeeded worker 1 was created again: {names:?} (log: {log})"
    );

    // And the job still finishes as a job whose worker 1 succeeded.
    drive_pod_exit(&client, &ns, "w-worker-0", Some("tensorflow"), 0).await;
    wait_condition_within(&client, &ns, "w", "Succeeded", "True", SLOW).await;
    let pods_now: Vec<String> = pods
        .list(&by_job)
        .await
        .expect("list pods")
        .items
        .iter()
        .map(|p| p.name_any())
        .collect();
    assert!(
        !pods_now.iter().any(|n| n == "w-worker-1"),
        "w-worker-1 came back: {pods_now:?}"
    );
}

/// ExitCode restarts count against `backoffLimit` through pruning: a worker
/// killed with 137 (retryable) is created again, the second kill fails the
/// job. Asserts only what Kubeflow's CRD keeps (Pods, conditions), not our
/// `replicaStatuses.*.restarts` (tfjob.rs checks that one under our CRD).
#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_crd_exit_code_restarts_count_against_the_backoff_limit() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "kf-backoff").await;
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;
    let log = operator.log.display().to_string();
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let job = TfJobFixture::new("b")
        .workers(2)
        .restart_policy(tfjob_operator::api::types::RestartPolicy::ExitCode)
        .backoff_limit(1)
        .namespace(&ns)
        .build();
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the TFJob");
    let running_uid = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let p = pods.get_opt(name).await.ok().flatten()?;
            let running = p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            running.then(|| p.uid()).flatten()
        }
    };
    let first = wait_until("b-worker-1 to run", SLOW, || running_uid("b-worker-1")).await;
    let kill = json!({ "metadata": { "annotations": {
        crate::support::EXIT_CODE_ANNOTATION: "137",
        crate::support::EXIT_CONTAINER_ANNOTATION: "tensorflow",
    } } });

    // First 137: created again (a new UID), the job carries on.
    pods.patch("b-worker-1", &PatchParams::default(), &Patch::Merge(&kill))
        .await
        .expect("kill b-worker-1");
    wait_until(
        &format!("b-worker-1 to be created again (log: {log})"),
        SLOW,
        || async {
            let uid = running_uid("b-worker-1").await?;
            (uid != first).then_some(())
        },
    )
    .await;
    let has_condition = |job: &TFJob, type_: &str| {
        job.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
    };
    let now = jobs.get("b").await.expect("the job");
    assert!(!has_condition(&now, "Failed"), "{:?}", now.status);

    // Second 137: past backoffLimit 1, the job fails.
    pods.patch("b-worker-1", &PatchParams::default(), &Patch::Merge(&kill))
        .await
        .expect("kill b-worker-1 again");
    let failed = wait_until(
        &format!("the job to fail past its backoff limit (log: {log})"),
        SLOW,
        || async {
            let job = jobs.get_opt("b").await.ok().flatten()?;
            has_condition(&job, "Failed").then_some(job)
        },
    )
    .await;
    let message = failed
        .status
        .and_then(|s| s.conditions.last().and_then(|c| c.message.clone()))
        .unwrap_or_default();
    assert!(message.contains("backoff limit"), "{message}");
}

/// The startup detection, as an operator reads it: the log line naming the
/// CRD and its schema, and the same fact on `/readyz`, for whichever CRD is
/// installed (under Kubeflow's, the one training-operator's release ships,
/// from the module cache).
#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_detected_crd_is_named_in_the_log_and_on_readyz() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "crd-detect").await;
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;
    let schema = match crd_flavor() {
        CrdFlavor::Kubeflow => tfjob_operator::tfjob::kubeflow::schema::StatusSchema::Kubeflow,
        CrdFlavor::Ours => tfjob_operator::tfjob::kubeflow::schema::StatusSchema::Ours,
    };
    let log = operator.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("detected the TFJob CRD's status schema"))
        .unwrap_or_else(|| panic!("no detection line in the operator's log:\n{log}"));
    assert!(
        line.contains("tfjobs.kubeflow.org") && line.contains(&schema.to_string()),
        "the detection line must name the CRD and {schema}: {line}"
    );
    let (code, body) =
        crate::loopback::http_get(operator.probe_port, "/readyz").expect("an answer on /readyz");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(&format!("crd tfjobs.kubeflow.org: {schema}")),
        "/readyz must say which CRD was found: {body}"
    );
}
