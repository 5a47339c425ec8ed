//! Both operators at once, by mistake (issue #40 point 3): ours is started
//! while the real training-operator v1.9.2 still runs its TFJob controller
//! on the same namespace. Once ours has seen training-operator write a
//! job's status after ours started, it writes nothing to that job or its
//! Pods, records one Warning (`AnotherControllerWritesStatus`) and names
//! the job on `/readyz` (still 200); training-operator handles a Worker
//! failure alone. Then training-operator stops: ours takes the job over a
//! minute after training-operator's last status write (`QUIET`), and
//! restarts the Worker that failed meanwhile.
//!
//! Who wrote what is told apart by identity: ours runs as a ServiceAccount
//! of its own, so the API server's audit log (creates and deletes of Pods
//! and Services) names it; the job's `managedFields` show any write of
//! ours to it (nobody else but training-operator writes the job after the
//! test created it).
//!
//! To make "after ours started" certain rather than a race (both react to
//! the same Pod failure; whichever writes first wins), ours is paused
//! (SIGSTOP) while training-operator restarts the Worker, as a slower
//! operator would be, with a Lease that outlasts the pause.
use std::collections::BTreeSet;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_operator::tfjob::integrations::rival::{QUIET, REASON_RIVAL_CONTROLLER};

use super::{SLOW, is_true, kubeflow_crd_namespace, manifest, replica, tfjobs, uid_of, wait_job};
use crate::cluster::{cluster_dir, delete_namespace, kubeconfig_path, kubectl, run_ok, wait_until};
use crate::loopback::http_get;
use crate::operator::Operator;
use crate::support::{drive_pod_exit, shared_cluster, warnings};
use crate::training_operator::TrainingOperator;

const JOB: &str = "contested";
const WORKER: &str = "contested-worker-0";
/// Ours's Lease outlasts the pause (the default gives up leading after 10 s).
const LEASE: [&str; 2] = [
    "--leader-elect-lease-duration=300s",
    "--leader-elect-renew-deadline=240s",
];

/// A ServiceAccount for ours, bound to cluster-admin, and a kubeconfig
/// that authenticates as it: the audit log then names ours's requests.
struct Identity {
    user: String,
    kubeconfig: PathBuf,
    binding: String,
}

impl Identity {
    async fn create(client: &Client, ns: &str) -> Self {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        let account: ServiceAccount =
            serde_json::from_value(json!({ "metadata": { "name": "ours" } })).expect("an account");
        accounts
            .create(&PostParams::default(), &account)
            .await
            .expect("create ours's ServiceAccount");
        let binding = format!("e2e-{ns}-ours");
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let bound: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": { "name": binding },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "cluster-admin" },
            "subjects": [{ "kind": "ServiceAccount", "name": "ours", "namespace": ns }],
        }))
        .expect("a binding");
        bindings
            .create(&PostParams::default(), &bound)
            .await
            .expect("bind ours's ServiceAccount");
        let token = run_ok(kubectl().args([
            "--kubeconfig",
            &kubeconfig_path().display().to_string(),
            "create",
            "token",
            "ours",
            "-n",
            ns,
            "--duration=1h",
        ]));
        let admin = std::fs::read_to_string(kubeconfig_path()).expect("the admin kubeconfig");
        let mut config: serde_yaml::Value = serde_yaml::from_str(&admin).expect("a kubeconfig");
        let users = config["users"].as_sequence_mut().expect("kubeconfig users");
        for user in users.iter_mut() {
            user["user"] = serde_yaml::to_value(json!({ "token": token.trim() })).expect("a user");
        }
        let kubeconfig = cluster_dir().join(format!("kubeconfig-{ns}-ours"));
        std::fs::write(&kubeconfig, serde_yaml::to_string(&config).expect("YAML"))
            .expect("write ours's kubeconfig");
        Self {
            user: format!("system:serviceaccount:{ns}:ours"),
            kubeconfig,
            binding,
        }
    }

    async fn delete(&self, client: &Client) {
        let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
        let _ = bindings
            .delete(&self.binding, &DeleteParams::default())
            .await;
    }
}

/// The audit log's creates and deletes of Pods and Services in `ns` by
/// `user` that succeeded, after byte `from` (`e2e/cluster.sh` logs those):
/// when each was stored, and what it was.
fn audited_writes(from: u64, ns: &str, user: &str) -> Vec<(Timestamp, String)> {
    let path = cluster_dir().join("logs/audit.log");
    let Ok(mut file) = std::fs::File::open(&path) else {
        panic!("no audit log at {}", path.display());
    };
    file.seek(SeekFrom::Start(from))
        .expect("seek the audit log");
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .filter(|e| {
            let object = &e["objectRef"];
            e["user"]["username"] == user
                && object["namespace"] == ns
                && matches!(object["resource"].as_str(), Some("pods" | "services"))
                && object["subresource"].is_null()
                && matches!(e["verb"].as_str(), Some("create" | "delete"))
                && e["responseStatus"]["code"]
                    .as_u64()
                    .is_some_and(|c| (200..300).contains(&c))
        })
        .filter_map(|e| {
            let at = e["stageTimestamp"].as_str()?.parse().ok()?;
            let object = &e["objectRef"];
            let what = format!("{} {}/{}", e["verb"], object["resource"], object["name"]);
            Some((at, what))
        })
        .collect()
}

fn audit_end() -> u64 {
    std::fs::metadata(cluster_dir().join("logs/audit.log")).map_or(0, |m| m.len())
}

/// The job's `managedFields` entries of everyone but training-operator:
/// (manager, operation, subresource, time).
fn others_entries(job: &DynamicObject) -> BTreeSet<(String, String, String, String)> {
    job.managed_fields()
        .iter()
        .filter(|m| {
            !m.manager
                .as_deref()
                .unwrap_or_default()
                .starts_with("training-operator")
        })
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
                m.subresource.clone().unwrap_or_default(),
                m.time.as_ref().map(|t| t.0.to_string()).unwrap_or_default(),
            )
        })
        .collect()
}

/// When training-operator last wrote the job's status.
fn training_operators_status_write(job: &DynamicObject) -> Option<Timestamp> {
    job.managed_fields()
        .iter()
        .filter(|m| {
            m.subresource.as_deref() == Some("status")
                && m.manager
                    .as_deref()
                    .is_some_and(|n| n.starts_with("training-operator"))
        })
        .filter_map(|m| Some(m.time.as_ref()?.0))
        .max()
}

async fn readyz(ours: &Operator) -> (u16, String) {
    http_get(ours.probe_port, "/readyz").expect("ours answers /readyz")
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn with_training_operator_still_running_ours_writes_nothing_to_a_job_it_writes_warns_once_and_takes_over_a_minute_after_it_stops()
 {
    let _cluster = shared_cluster().await;
    let (client, ns) = kubeflow_crd_namespace("both-at-once").await;
    let jobs = tfjobs(&client, &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let identity = Identity::create(&client, &ns).await;

    // 1. training-operator runs the job.
    let mut kubeflow = TrainingOperator::start(&client, &ns).await;
    let job = manifest(
        JOB,
        json!({ "Chief": replica("Never", json!({})), "Worker": replica("ExitCode", json!({})) }),
        json!({ "backoffLimit": 5, "cleanPodPolicy": "None" }),
    );
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the job");
    wait_job(&jobs, JOB, "Running under training-operator", |j| {
        is_true(j, "Running")
    })
    .await;

    // 2. Ours starts beside it (the accident), then pauses while
    // training-operator restarts the Worker: its status write comes after
    // ours started.
    let mut ours = Operator::start_with(&ns, &LEASE, Some(identity.kubeconfig.clone()));
    ours.wait_ready().await;
    let ours_started = Timestamp::now();
    ours.signal("STOP");
    // managedFields times have whole seconds, and ours takes a write in
    // the second it started for history: the failure comes a second later.
    wait_until("the next second", Duration::from_secs(2), || async {
        (Timestamp::now().as_second() > ours_started.as_second()).then_some(())
    })
    .await;
    let before = jobs.get(JOB).await.expect("the job");
    let first = uid_of(&pods, WORKER).await;
    drive_pod_exit(&client, &ns, WORKER, None, 137).await;
    let second = wait_until(
        "training-operator to re-create the Worker and write the status",
        SLOW,
        || async {
            let job = jobs.get_opt(JOB).await.ok().flatten()?;
            let uid = uid_of(&pods, WORKER).await?;
            let at = training_operators_status_write(&job)?;
            let wrote = at.as_second() > ours_started.as_second();
            (wrote && Some(&uid) != first.as_ref()).then_some(uid)
        },
    )
    .await;
    let mark = audit_end();
    ours.signal("CONT");

    // 3. Ours steps back: one Warning, the job on /readyz, still ready.
    wait_until("ours's Warning about training-operator", SLOW, || async {
        (!warnings(&client, &ns, REASON_RIVAL_CONTROLLER)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    let (code, body) = readyz(&ours).await;
    eprintln!("/readyz while the job is held:\n{body}");
    assert_eq!(code, 200, "a held job does not make ours unready:\n{body}");
    assert!(
        body.contains("another TFJob controller: training-operator")
            && body.contains(&format!("{ns}/{JOB} (until")),
        "/readyz must name the held job:\n{body}"
    );

    // 4. Held: a second Worker failure is training-operator's alone.
    drive_pod_exit(&client, &ns, WORKER, None, 137).await;
    wait_until(
        "training-operator to re-create the Worker again",
        SLOW,
        || async {
            let uid = uid_of(&pods, WORKER).await?;
            (uid != second).then_some(())
        },
    )
    .await;
    let held = jobs.get(JOB).await.expect("the job");
    assert_eq!(
        others_entries(&held),
        others_entries(&before),
        "ours wrote to the job while training-operator ran it (operator log: {})",
        ours.log.display()
    );
    let written = audited_writes(mark, &ns, &identity.user);
    assert!(
        written.is_empty(),
        "ours wrote Pods or Services: {written:#?}"
    );
    let warned = warnings(&client, &ns, REASON_RIVAL_CONTROLLER).await;
    assert_eq!(
        warned.len(),
        1,
        "one Warning per job and manager: {warned:#?}"
    );
    assert!(
        warned[0].contains("training-operator.v1 wrote this job's status"),
        "{}",
        warned[0]
    );

    // 5. training-operator stops; a Worker failure waits for ours, which
    // takes the job over QUIET after training-operator's last status write.
    kubeflow.stop();
    let last = jobs
        .get(JOB)
        .await
        .ok()
        .as_ref()
        .and_then(training_operators_status_write)
        .expect("training-operator's status write");
    let third = uid_of(&pods, WORKER).await;
    let takeover = audit_end();
    drive_pod_exit(&client, &ns, WORKER, None, 137).await;
    let bound = QUIET.unsigned_abs() + SLOW;
    wait_until("ours to restart the Worker", bound, || async {
        let uid = uid_of(&pods, WORKER).await?;
        (Some(&uid) != third.as_ref()).then_some(())
    })
    .await;
    let recreated = pods.get(WORKER).await.expect("the new Worker");
    let at = recreated
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("a creation time")
        .0;
    assert!(
        at >= last + QUIET - SignedDuration::from_secs(1),
        "ours restarted the Worker at {at}, before its hold ended ({last} + {} s)",
        QUIET.as_secs()
    );
    let written = audited_writes(takeover, &ns, &identity.user);
    assert!(
        written.iter().any(|(_, w)| w.contains(WORKER)),
        "the restart after the hold is ours (the audit log names it): {written:#?}"
    );
    // From the moment ours saw training-operator's write to the end of the
    // hold, ours wrote no Pod or Service.
    let early: Vec<_> = audited_writes(mark, &ns, &identity.user)
        .into_iter()
        .filter(|(when, _)| *when < last + QUIET - SignedDuration::from_secs(1))
        .collect();
    assert!(early.is_empty(), "ours wrote during the hold: {early:#?}");
    let (_, body) = readyz(&ours).await;
    assert!(
        body.contains("another TFJob controller: none seen"),
        "/readyz no longer names the job:\n{body}"
    );

    drop(ours);
    identity.delete(&client).await;
    delete_namespace(&client, &ns).await;
}
