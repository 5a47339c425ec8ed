//! Moving from Kubeflow's training-operator with jobs running, and back
//! (issue #40), with the real training-operator v1.9.2 under Kubeflow's own
//! CRD (`TFJOB_E2E_CRD=kubeflow`: the Kubeflow-CRD phase of
//! `e2e/run-suite.sh`, which builds training-operator with `e2e/peers.sh`).
//!
//! Five jobs run under training-operator: `restarted` (its Worker failed
//! with a retryable code and was re-created by training-operator; the new
//! Pod waits on a cordoned node, so the switch comes while the restart is
//! under way), `suspended`, `finished` (Succeeded, its Worker still running
//! under `cleanPodPolicy: None`), `cleanup-all` (`cleanPodPolicy: All`, its
//! Worker restarted in place once) and `steady`. Then training-operator
//! stops and ours starts, as docs/operating.md "Moving from
//! training-operator" says; for [`STILL_FOR`] after ours is ready a watch
//! sees no Pod or Service created, deleted or rewritten, and every job keeps
//! its conditions, `startTime`, `completionTime` and `replicaStatuses`; ours
//! writes down the restarts training-operator made. Ours then ends
//! `restarted` (the next failure is past `backoffLimit: 1`, because the
//! adopted restart counts) and `cleanup-all` (Succeeded, every Pod deleted),
//! creating no Pod. And back: ours stops, training-operator starts again,
//! and for [`STILL_FOR`] nothing is created, deleted or rewritten; it then
//! finishes `steady`, which ours kept running.
//!
//! Mirrors: what a platform team does when it switches a production cluster
//! (Kubeflow removed training-operator from its distribution).
//!
//! [`both_at_once`]: the accident, both running at once.
//! [`kueue_builtin`]: the move with Kueue's built-in TFJob integration on,
//! and switching it off later.
mod both_at_once;
mod kueue_builtin;
mod recorder;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_operator::api::types::TFJob;
use tfjob_operator::tfjob::kubeflow::messages::backoff_limit_exceeded;
use tfjob_operator::tfjob::plan::bookkeeping::{ANNOTATION, Bookkeeping};
use tokio::time::Instant;

use crate::cluster::{client, delete_namespace, test_namespace, wait_until};
use crate::lost_node::{DEDICATED, DedicatedNode};
use crate::operator::{CrdFlavor, Operator, crd_flavor, ensure_crd};
use crate::support::{drive_pod_exit, shared_cluster};
use crate::training_operator::TrainingOperator;
use recorder::Recorder;

/// How long each operator must leave every Pod and Service as it found
/// them after it is ready (the stated time).
const STILL_FOR: Duration = Duration::from_secs(30);
/// One step of a job on a busy machine (an operator's reaction plus KWOK's).
const SLOW: Duration = Duration::from_secs(90);
const JOBS: [&str; 5] = [
    "restarted",
    "suspended",
    "finished",
    "cleanup-all",
    "steady",
];

fn tfjobs(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TFJob>(&()))
}

/// One replica of the tensorflow container; `pod` is merged into its Pod spec.
fn replica(restart_policy: &str, pod: Value) -> Value {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 1,
        "containers": [{ "name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1",
                         "ports": [{ "name": "tfjob-port", "containerPort": 2222 }] }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), pod.as_object()) {
        spec.extend(extra.clone());
    }
    json!({ "replicas": 1, "restartPolicy": restart_policy, "template": { "spec": spec } })
}

fn manifest(name: &str, specs: Value, run_policy: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": { "name": name },
        "spec": { "runPolicy": run_policy, "tfReplicaSpecs": specs },
    }))
    .expect("a valid TFJob")
}

/// The five jobs; `restarted`'s Worker runs only on `node`.
fn manifests(node: &str, ns: &str) -> Vec<DynamicObject> {
    let pinned = json!({
        "nodeSelector": { "kubernetes.io/hostname": node },
        "tolerations": [{ "key": DEDICATED, "value": ns, "effect": "NoSchedule" }],
    });
    let plain = || json!({});
    vec![
        manifest(
            "restarted",
            json!({ "PS": replica("Never", plain()), "Worker": replica("ExitCode", pinned) }),
            json!({ "backoffLimit": 1, "cleanPodPolicy": "None" }),
        ),
        manifest(
            "suspended",
            json!({ "Chief": replica("Never", plain()), "Worker": replica("Never", plain()) }),
            json!({}),
        ),
        manifest(
            "finished",
            json!({ "Chief": replica("Never", plain()), "Worker": replica("Never", plain()) }),
            json!({ "cleanPodPolicy": "None" }),
        ),
        manifest(
            "cleanup-all",
            json!({ "Chief": replica("Never", plain()), "Worker": replica("OnFailure", plain()),
                    "PS": replica("Never", plain()) }),
            json!({ "cleanPodPolicy": "All" }),
        ),
        manifest(
            "steady",
            json!({ "Chief": replica("Never", plain()), "Worker": replica("Never", plain()) }),
            json!({}),
        ),
    ]
}

fn condition<'a>(job: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    job.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn is_true(job: &DynamicObject, type_: &str) -> bool {
    condition(job, type_).is_some_and(|c| c["status"] == "True")
}

/// What a take-over must keep of a job's status: conditions (type, status,
/// reason, message, when they last changed), `startTime`, `completionTime`,
/// `replicaStatuses`. Of the `Created` message only Kubeflow's sentence
/// ("TFJob j is created."): ours adds why Pods cannot be scheduled while
/// the job does not run (docs/kubeflow-compatibility.md, #999).
fn kept(job: &DynamicObject) -> Value {
    let status = &job.data["status"];
    let conditions: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            const CREATED: &str = " is created.";
            let mut message = c["message"].clone();
            if c["type"] == "Created"
                && let Some(text) = message.as_str()
                && let Some(end) = text.find(CREATED)
            {
                message = Value::from(&text[..end + CREATED.len()]);
            }
            json!({ "type": c["type"], "status": c["status"], "reason": c["reason"],
                    "message": message, "lastTransitionTime": c["lastTransitionTime"] })
        })
        .collect();
    json!({
        "conditions": conditions,
        "startTime": status["startTime"],
        "completionTime": status["completionTime"],
        "replicaStatuses": status["replicaStatuses"],
    })
}

/// Our bookkeeping annotation as written (none: `None`), not as
/// [`Bookkeeping::of`] would infer it from training-operator's conditions.
fn written_bookkeeping(job: &DynamicObject) -> Option<Bookkeeping> {
    let text = job.annotations().get(ANNOTATION)?;
    Some(serde_json::from_str(text).expect("our bookkeeping annotation parses"))
}

async fn wait_job<F>(jobs: &Api<DynamicObject>, name: &str, what: &str, done: F) -> DynamicObject
where
    F: Fn(&DynamicObject) -> bool,
{
    wait_until(&format!("TFJob {name} {what}"), SLOW, || async {
        let job = jobs.get_opt(name).await.ok().flatten()?;
        done(&job).then_some(job)
    })
    .await
}

async fn uid_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get_opt(name).await.ok().flatten()?.metadata.uid
}

async fn job_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    let selector = format!("training.kubeflow.org/job-name={job}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

async fn cordon(node: &DedicatedNode, unschedulable: bool) {
    let patch = json!({ "spec": { "unschedulable": unschedulable } });
    node.api
        .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("cordon or uncordon the dedicated node");
}

async fn snapshot(jobs: &Api<DynamicObject>) -> BTreeMap<String, DynamicObject> {
    let mut all = BTreeMap::new();
    for name in JOBS {
        let job = jobs
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("failed to get TFJob {name}: {e}"));
        all.insert(name.to_string(), job);
    }
    all
}

/// A client and a fresh namespace under Kubeflow's CRD (these tests run
/// beside training-operator, which serves only that CRD's jobs as it ships).
async fn kubeflow_crd_namespace(prefix: &str) -> (Client, String) {
    assert_eq!(
        crd_flavor(),
        CrdFlavor::Kubeflow,
        "this test runs under Kubeflow's CRD, beside training-operator: make e2e-kubeflow-crd"
    );
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, prefix).await;
    (client, ns)
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn jobs_move_from_training_operator_to_ours_and_back_with_no_pod_deleted_or_created_and_no_count_reset()
 {
    let _cluster = shared_cluster().await;
    let (client, ns) = kubeflow_crd_namespace("migration").await;
    let node = DedicatedNode::create(&client, &ns).await;
    let jobs = tfjobs(&client, &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // 1. training-operator runs the five jobs into their states.
    let mut kubeflow = TrainingOperator::start(&client, &ns).await;
    for job in manifests(&node.name, &ns) {
        jobs.create(&PostParams::default(), &job)
            .await
            .unwrap_or_else(|e| panic!("failed to create TFJob {}: {e}", job.name_any()));
    }
    for name in JOBS {
        wait_job(&jobs, name, "Running under training-operator", |j| {
            is_true(j, "Running")
        })
        .await;
    }
    // restarted: Worker 0 fails with a retryable code; training-operator
    // deletes and re-creates it, and the new Pod waits on the cordoned node.
    let first_worker = uid_of(&pods, "restarted-worker-0").await;
    cordon(&node, true).await;
    drive_pod_exit(&client, &ns, "restarted-worker-0", None, 137).await;
    let recreated = wait_until(
        "training-operator to re-create restarted-worker-0 and say Restarting",
        SLOW,
        || async {
            let job = jobs.get_opt("restarted").await.ok().flatten()?;
            let uid = uid_of(&pods, "restarted-worker-0").await?;
            (is_true(&job, "Restarting") && Some(&uid) != first_worker.as_ref()).then_some(uid)
        },
    )
    .await;
    // cleanup-all: Worker 0 restarts in place once (OnFailure, exit 1).
    drive_pod_exit(&client, &ns, "cleanup-all-worker-0", None, 1).await;
    // suspended: training-operator deletes its Pods.
    let suspend = json!({ "spec": { "runPolicy": { "suspend": true } } });
    jobs.patch(
        "suspended",
        &PatchParams::default(),
        &Patch::Merge(&suspend),
    )
    .await
    .expect("suspend the job");
    wait_job(&jobs, "suspended", "Suspended", |j| is_true(j, "Suspended")).await;
    wait_until("suspended's Pods to be gone", SLOW, || async {
        job_pods(&pods, "suspended").await.is_empty().then_some(())
    })
    .await;
    // finished: the Chief succeeds; the Worker runs on (cleanPodPolicy None).
    drive_pod_exit(&client, &ns, "finished-chief-0", None, 0).await;
    wait_job(&jobs, "finished", "Succeeded", |j| is_true(j, "Succeeded")).await;
    // training-operator's pass after writing Succeeded counts the replicas
    // still active as succeeded (pkg/controller.v1/common/job.go); stopped
    // before that pass, it leaves `active` for ours to settle the same way,
    // which is Kubeflow's rule but not "nothing changed". Switch once it
    // has settled (a make test at 97e1a7a stopped it in between).
    wait_job(&jobs, "finished", "its replicas settled", |j| {
        j.data["status"]["replicaStatuses"]
            .as_object()
            .is_some_and(|r| r.values().all(|s| s["active"].as_i64().unwrap_or(0) == 0))
    })
    .await;

    // 2. The switch: training-operator stops, ours starts. For STILL_FOR
    // after ours is ready nothing may change.
    kubeflow.stop();
    let before = snapshot(&jobs).await;
    assert!(
        is_true(&before["restarted"], "Restarting"),
        "the switch should come while training-operator's restart is under way"
    );
    let recorder = Recorder::start(&client, &ns).await;
    let switched = Instant::now();
    let mut ours = Operator::start(&ns);
    ours.wait_ready().await;
    recorder
        .assert_still(
            switched,
            STILL_FOR,
            "ours taking over from training-operator",
        )
        .await;
    let adopted = snapshot(&jobs).await;
    for name in JOBS {
        assert_eq!(
            kept(&adopted[name]),
            kept(&before[name]),
            "ours changed what training-operator left of {name}'s status (operator log: {})",
            ours.log.display()
        );
    }
    // The restarts training-operator made are written down on the first pass.
    let books = written_bookkeeping(&adopted["restarted"])
        .expect("ours writes restarted's bookkeeping on its first pass");
    assert_eq!(books.restarts.get("Worker"), Some(&1), "{books:?}");
    let in_place = written_bookkeeping(&adopted["cleanup-all"])
        .expect("ours writes cleanup-all's in-place restarts on its first pass");
    assert_eq!(in_place.in_place_of("Worker"), 1, "{in_place:?}");

    // 3. Ours ends the running jobs, creating no Pod.
    let driving = Instant::now();
    cordon(&node, false).await;
    wait_until("the re-created restarted-worker-0 to run", SLOW, || async {
        let pod = pods.get_opt("restarted-worker-0").await.ok().flatten()?;
        let running = pod.status.as_ref()?.phase.as_deref() == Some("Running");
        (running && pod.metadata.uid.as_ref() == Some(&recreated)).then_some(())
    })
    .await;
    drive_pod_exit(&client, &ns, "restarted-worker-0", None, 137).await;
    // Failed, not restarted: a build that forgot training-operator's
    // restart would re-create the Worker (restart 1 of 1) instead.
    let failed = wait_until("TFJob restarted Failed", SLOW, || async {
        let uid = uid_of(&pods, "restarted-worker-0").await;
        assert!(
            uid.is_none() || uid.as_ref() == Some(&recreated),
            "ours re-created restarted-worker-0 instead of failing the job: \
             the restart training-operator made was not counted"
        );
        let job = jobs.get_opt("restarted").await.ok().flatten()?;
        is_true(&job, "Failed").then_some(job)
    })
    .await;
    assert_eq!(
        condition(&failed, "Failed").and_then(|c| c["message"].as_str()),
        Some(backoff_limit_exceeded("restarted").as_str()),
        "training-operator's restart plus this one are past backoffLimit 1"
    );
    drive_pod_exit(&client, &ns, "cleanup-all-chief-0", None, 0).await;
    wait_job(&jobs, "cleanup-all", "Succeeded", |j| {
        is_true(j, "Succeeded")
    })
    .await;
    wait_until("cleanup-all's Pods to be deleted", SLOW, || async {
        job_pods(&pods, "cleanup-all")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let driven = recorder.changes_since(driving);
    let created: Vec<_> = driven
        .iter()
        .filter(|c| c.what.ends_with(" created"))
        .collect();
    assert!(created.is_empty(), "ours created Pods: {created:#?}");
    let elsewhere: Vec<_> = driven
        .iter()
        .filter(|c| c.job != "restarted" && c.job != "cleanup-all")
        .collect();
    assert!(
        elsewhere.is_empty(),
        "ours touched other jobs: {elsewhere:#?}"
    );

    // 4. And back: ours stops, training-operator starts again.
    assert!(
        ours.terminate(Duration::from_secs(10)),
        "ours stops on SIGTERM"
    );
    let handed_back = snapshot(&jobs).await;
    assert!(
        is_true(&handed_back["steady"], "Running"),
        "ours kept steady running"
    );
    let back = Instant::now();
    let mut kubeflow = TrainingOperator::start(&client, &ns).await;
    recorder
        .assert_still(back, STILL_FOR, "training-operator taking back from ours")
        .await;
    let returned = snapshot(&jobs).await;
    for name in JOBS {
        assert_eq!(
            kept(&returned[name])["conditions"],
            kept(&handed_back[name])["conditions"],
            "training-operator changed the conditions ours left on {name}"
        );
    }
    drive_pod_exit(&client, &ns, "steady-chief-0", None, 0).await;
    wait_job(&jobs, "steady", "Succeeded under training-operator", |j| {
        is_true(j, "Succeeded")
    })
    .await;
    // Its controllers' "Reconciler error" lines, but its cert rotator's:
    // each training-operator the tests run side by side rotates into the one
    // cluster-scoped ValidatingWebhookConfiguration, so their rotators race
    // on it and one logs the conflict it then retries ("Operation cannot be
    // fulfilled on validatingwebhookconfigurations", seen in a `make test` on
    // 2026-11-29): nothing to do with any job.
    let errors: Vec<String> = kubeflow
        .log_text()
        .lines()
        .filter(|l| l.contains("Reconciler error"))
        .filter(|l| !l.contains("\"controller\": \"cert-rotator\""))
        .map(str::to_owned)
        .collect();
    assert!(
        errors.is_empty(),
        "training-operator choked on what ours left: {errors:#?}"
    );

    kubeflow.stop();
    node.delete().await;
    delete_namespace(&client, &ns).await;
}
