//! Real training (issue #28, point 4): TensorFlow 2.20 in the image
//! `e2e/images/build.sh tensorflow` builds, running the programs of
//! `examples/real/` (mounted from a ConfigMap) on the real node, from the
//! TF_CONFIG our operator writes, through its headless Services and the
//! cluster DNS. Each test starts the operator binary on the host for its own
//! namespace (admin kubeconfig) and reads what TensorFlow logged with
//! `kubectl logs`: a KWOK-faked Pod has no log, so every assertion on a log
//! line is proof that a real process ran.
//!
//! - MultiWorkerMirroredStrategy: every replica joined the cluster of 3, the
//!   loss fell, the Chief wrote a checkpoint, the job is Succeeded with
//!   Kubeflow's conditions and replicaStatuses; apply → all joined →
//!   Succeeded is measured and printed (docs/run-it-for-real.md has the
//!   figures).
//! - ParameterServerStrategy with an Evaluator: the Chief trains to the end
//!   and waits for the Evaluator's note of the last checkpoint, the job is
//!   Succeeded, and `cleanPodPolicy: Running` deletes the PS and Workers and
//!   keeps the finished Pods (the Chief's).
//! - Faults with real processes: a Worker's container killed from the host
//!   with SIGKILL (exit 137) under ExitCode is re-created and the training
//!   resumes from the checkpoint; a program exiting 1 under ExitCode fails
//!   the job with Kubeflow's message; OnFailure: the kubelet restarts the
//!   container in place and `restarts` counts it, and backoffLimit ends the
//!   job on those real restarts; activeDeadlineSeconds stops a long run.
//!
//! Mirrors: kubeflow/training-operator's e2e (`sdk/python/test/e2e`), which
//! runs real TFJobs on kind and waits for their conditions.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use tfjob_operator::api::types::TFJob;

use crate::cluster;
use crate::support::{self, Operator};

/// One training on 2 cores shared with the control plane: ~1.5 min when
/// the machine is quiet, several when it is not.
const TRAINING_TIMEOUT: Duration = Duration::from_secs(600);

/// A namespace with the programs' ConfigMap and (once started) our
/// operator for it. `switch.rs` starts the operator later, after Kubeflow's.
pub(crate) struct Setup {
    pub(crate) client: Client,
    pub(crate) ns: String,
    operator: Option<Operator>,
    pub(crate) started: Instant,
}

impl Setup {
    async fn new(prefix: &str) -> Self {
        let mut s = Self::without_operator(prefix).await;
        s.start_operator();
        s
    }

    /// The namespace and its programs, with no operator yet.
    pub(crate) async fn without_operator(prefix: &str) -> Self {
        let client = cluster::client().await;
        support::ensure_crd(&client).await;
        let ns = cluster::test_namespace(&client, prefix).await;
        let programs = ["trainlib.py", "mwms.py", "ps.py"];
        let data: serde_json::Map<String, serde_json::Value> = programs
            .iter()
            .map(|file| {
                let path = cluster::repo_dir().join("examples/real").join(file);
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
                ((*file).to_owned(), text.into())
            })
            .collect();
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "tfjob-real-programs" },
            "data": data,
        }))
        .expect("a valid ConfigMap");
        Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &cm)
            .await
            .expect("create the programs' ConfigMap");
        Self {
            client,
            ns,
            operator: None,
            started: Instant::now(),
        }
    }

    /// Starts our operator for the namespace (once).
    pub(crate) fn start_operator(&mut self) {
        if self.operator.is_none() {
            self.operator = Some(Operator::start(&self.ns));
        }
    }

    pub(crate) fn say(&self, what: &str) {
        eprintln!(
            "[training {} {:>5.1} s] {what}",
            self.ns,
            self.started.elapsed().as_secs_f64()
        );
    }

    /// Applies an example, renamed to `name`, after `edit` changed it.
    pub(crate) async fn apply(
        &mut self,
        file: &str,
        name: &str,
        edit: impl FnOnce(&mut serde_json::Value),
    ) -> Api<TFJob> {
        let path = cluster::repo_dir().join("examples/real").join(file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
        let mut job: serde_json::Value = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
        job["metadata"]["name"] = name.into();
        edit(&mut job);
        let job: TFJob = serde_json::from_value(job).expect("a valid TFJob");
        let jobs: Api<TFJob> = Api::namespaced(self.client.clone(), &self.ns);
        self.started = Instant::now();
        jobs.create(&PostParams::default(), &job)
            .await
            .unwrap_or_else(|e| panic!("failed to create TFJob {name}: {e}"));
        self.say(&format!("applied {file} as {name}"));
        jobs
    }

    /// Waits for the job's last condition to be `condition` and returns it.
    pub(crate) async fn wait_condition(
        &self,
        jobs: &Api<TFJob>,
        name: &str,
        condition: &str,
    ) -> TFJob {
        let job = cluster::wait_until(
            &format!("TFJob {name} to be {condition}"),
            TRAINING_TIMEOUT,
            || async {
                let job = jobs.get_opt(name).await.ok().flatten()?;
                let last = job.status.as_ref()?.conditions.last()?.clone();
                (last.type_ == condition && last.status == "True").then_some(job)
            },
        )
        .await;
        self.say(&format!("{name} is {condition}"));
        job
    }

    /// Waits until every Pod named in `pods` has logged `needle`.
    pub(crate) async fn wait_logged(&self, pods: &[String], needle: &str) {
        for pod in pods {
            cluster::wait_until(
                &format!("{pod} to log {needle:?}"),
                TRAINING_TIMEOUT,
                || async {
                    let (_, log) = cluster::run(cluster::kubectl().args([
                        "logs",
                        "-n",
                        &self.ns,
                        pod.as_str(),
                    ]));
                    log.contains(needle).then_some(())
                },
            )
            .await;
        }
        self.say(&format!("{} logged {needle:?}", pods.join(", ")));
    }

    pub(crate) fn logs(&self, pod: &str) -> String {
        support::logs(&self.ns, pod)
    }

    fn previous_logs(&self, pod: &str) -> String {
        cluster::run_ok(cluster::kubectl().args(["logs", "--previous", "-n", &self.ns, pod]))
    }

    pub(crate) async fn pods(&self, name: &str) -> Vec<Pod> {
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .list(&ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}")))
            .await
            .expect("list the job's Pods")
            .items
    }
}

pub(crate) fn names(job: &str, roles: &[(&str, i32)]) -> Vec<String> {
    roles
        .iter()
        .flat_map(|(role, n)| (0..*n).map(move |i| format!("{job}-{role}-{i}")))
        .collect()
}

/// The epoch losses a replica logged ("epoch 1/2 loss 2.8456"), in order
/// (not the Evaluator's, which the PS Chief repeats: "evaluated ckpt-2 loss …").
pub(crate) fn losses(log: &str) -> Vec<f64> {
    log.lines()
        .filter(|l| l.contains(": epoch "))
        .filter_map(|l| l.split(" loss ").nth(1))
        .filter_map(|v| v.trim().parse().ok())
        .collect()
}

/// Sets an environment variable on every replica's `tensorflow` container.
pub(crate) fn set_env(job: &mut serde_json::Value, name: &str, value: &str) {
    let Some(specs) = job["spec"]["tfReplicaSpecs"].as_object_mut() else {
        panic!("no tfReplicaSpecs in {job}");
    };
    for spec in specs.values_mut() {
        let env = &mut spec["template"]["spec"]["containers"][0]["env"];
        if let Some(list) = env.as_array_mut() {
            list.push(serde_json::json!({ "name": name, "value": value }));
        }
    }
}

/// `status.replicaStatuses[rtype]` as JSON; `null` while there is no status.
pub(crate) fn replica_status(job: &TFJob, rtype: &str) -> serde_json::Value {
    let Some(status) = job.status.as_ref() else {
        return serde_json::Value::Null;
    };
    let status = serde_json::to_value(status).expect("a status serializes");
    status["replicaStatuses"][rtype].clone()
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn mwms_chief_and_two_workers_train_in_step_to_succeeded() {
    let mut s = Setup::new("real-mwms").await;
    let name = format!("mwms-{}", cluster::random_suffix());
    let jobs = s.apply("mwms.yaml", &name, |_| {}).await;
    let replicas = names(&name, &[("chief", 1), ("worker", 2)]);
    s.wait_logged(&replicas, "joined the cluster of 3 replicas")
        .await;
    let joined = s.started.elapsed();
    let job = s.wait_condition(&jobs, &name, "Succeeded").await;
    let succeeded = s.started.elapsed();
    eprintln!(
        "MEASURED mwms: apply -> all 3 joined {:.1} s, -> Succeeded {:.1} s",
        joined.as_secs_f64(),
        succeeded.as_secs_f64()
    );

    let conditions: Vec<&str> = job
        .status
        .as_ref()
        .expect("a status")
        .conditions
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(conditions, ["Created", "Running", "Succeeded"], "{job:?}");
    let last = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.last())
        .cloned();
    let last = last.expect("a condition");
    assert_eq!(last.reason.as_deref(), Some("TFJobSucceeded"));
    assert_eq!(
        last.message.as_deref(),
        Some(format!("TFJob {}/{name} successfully completed.", s.ns).as_str())
    );
    assert_eq!(replica_status(&job, "Chief")["succeeded"], 1);
    assert_eq!(replica_status(&job, "Worker")["succeeded"], 2);

    let mut all_losses = Vec::new();
    for pod in &replicas {
        let log = s.logs(pod);
        let l = losses(&log);
        assert_eq!(l.len(), 2, "two epochs in {pod}'s log:\n{log}");
        assert!(l[1] < l[0], "the loss falls in {pod}: {l:?}");
        all_losses.push(l);
    }
    assert!(
        all_losses.windows(2).all(|w| w[0] == w[1]),
        "the replicas are in step (same losses): {all_losses:?}"
    );
    let chief_log = s.logs(&replicas[0]);
    assert!(
        chief_log.contains(&format!("wrote checkpoint /checkpoints/{name}/ckpt-2")),
        "{chief_log}"
    );
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn ps_strategy_trains_to_the_end_and_running_pods_are_cleaned() {
    let mut s = Setup::new("real-ps").await;
    let name = format!("ps-{}", cluster::random_suffix());
    let jobs = s.apply("ps.yaml", &name, |_| {}).await;
    let chief = format!("{name}-chief-0");
    s.wait_logged(std::slice::from_ref(&chief), "joined the cluster")
        .await;
    let job = s.wait_condition(&jobs, &name, "Succeeded").await;
    eprintln!(
        "MEASURED ps: apply -> Succeeded {:.1} s",
        s.started.elapsed().as_secs_f64()
    );
    let l = losses(&s.logs(&chief));
    assert_eq!(l.len(), 2, "two epochs: {l:?}");
    assert!(l[1] < l[0], "the loss falls: {l:?}");
    assert_eq!(replica_status(&job, "Chief")["succeeded"], 1);
    // The Evaluator, a real process too: it evaluated the Chief's last
    // checkpoint, and the Chief waited for its note before it exited.
    let chief_log = s.logs(&chief);
    assert!(
        chief_log.contains("the evaluator evaluated ckpt-2 loss "),
        "the Chief saw the Evaluator's note of ckpt-2:\n{chief_log}"
    );
    // cleanPodPolicy Running: the PS and Workers (which serve until
    // stopped) are deleted once the job is done ...
    cluster::wait_until(
        "the PS and Worker Pods to be deleted",
        Duration::from_secs(120),
        || async {
            let left: Vec<String> = s
                .pods(&name)
                .await
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .filter(|n| n.contains("-ps-") || n.contains("-worker-"))
                .collect();
            left.is_empty().then_some(())
        },
    )
    .await;
    // ... and finished Pods are kept (Kubeflow deletes Running and Pending
    // ones only): the Chief's, Succeeded; whatever else is left has ended.
    let left: Vec<(String, String)> = s
        .pods(&name)
        .await
        .into_iter()
        .map(|p| {
            let phase = p.status.and_then(|st| st.phase).unwrap_or_default();
            (p.metadata.name.unwrap_or_default(), phase)
        })
        .collect();
    assert!(
        left.contains(&(chief.clone(), "Succeeded".to_owned())),
        "the Chief's Pod is kept, Succeeded: {left:?}"
    );
    assert!(
        left.iter()
            .all(|(_, phase)| phase == "Succeeded" || phase == "Failed"),
        "no Running or Pending Pod is left: {left:?}"
    );
}

/// Kills the `tensorflow` container's process of a Pod from the host, with
/// SIGKILL, through the runtime (crictl finds it by Pod name).
fn kill_container(ns: &str, pod: &str) {
    let crictl = |args: &[&str]| {
        let bin = PathBuf::from(support::node_env("REAL_NODE_BIN")).join("crictl");
        let mut cmd = Command::new(bin);
        cmd.args([
            "--runtime-endpoint",
            &format!("unix://{}", support::node_env("REAL_NODE_CONTAINERD_SOCK")),
        ])
        .args(args);
        cluster::run_ok(&mut cmd)
    };
    let id = crictl(&[
        "ps",
        "-q",
        "--name",
        "tensorflow",
        "--label",
        &format!("io.kubernetes.pod.name={pod}"),
        "--label",
        &format!("io.kubernetes.pod.namespace={ns}"),
    ]);
    let id = id
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no running container for {pod}"));
    let info: serde_json::Value =
        serde_json::from_str(&crictl(&["inspect", id])).expect("crictl inspect prints JSON");
    let pid = info["info"]["pid"]
        .as_i64()
        .unwrap_or_else(|| panic!("no pid in crictl inspect of {pod}"));
    cluster::run_ok(Command::new("kill").args(["-KILL", &pid.to_string()]));
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn a_worker_killed_under_exit_code_is_recreated_and_training_resumes_from_the_checkpoint() {
    let mut s = Setup::new("real-kill").await;
    let name = format!("kill-{}", cluster::random_suffix());
    let jobs = s
        .apply("mwms.yaml", &name, |job| {
            // Long enough to kill a Worker after the first checkpoint.
            set_env(job, "EPOCHS", "3");
            set_env(job, "STEP_SLEEP_SECONDS", "0.5");
        })
        .await;
    let chief = format!("{name}-chief-0");
    let worker = format!("{name}-worker-1");
    s.wait_logged(std::slice::from_ref(&chief), "wrote checkpoint")
        .await;
    let before = s.pods(&name).await;
    let uid_of = |pods: &[Pod], n: &str| {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(n))
            .and_then(|p| p.metadata.uid.clone())
    };
    let old_uid = uid_of(&before, &worker).expect("the worker's Pod");
    kill_container(&s.ns, &worker);
    s.say(&format!("killed {worker}'s container with SIGKILL"));
    let job = s.wait_condition(&jobs, &name, "Succeeded").await;
    let after = s.pods(&name).await;
    assert_ne!(
        uid_of(&after, &worker),
        Some(old_uid),
        "the killed Worker's Pod was re-created"
    );
    let log = s.logs(&worker);
    assert!(
        log.contains("resumed from checkpoint"),
        "the re-created Worker resumed from the checkpoint:\n{log}"
    );
    let restarts = replica_status(&job, "Worker")["restarts"]
        .as_i64()
        .unwrap_or(0);
    assert!(restarts >= 1, "the re-creation is counted: {job:?}");
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn a_program_exiting_1_under_exit_code_fails_the_job_with_kubeflows_message() {
    let mut s = Setup::new("real-exit1").await;
    let name = format!("exit1-{}", cluster::random_suffix());
    let jobs = s
        .apply("mwms.yaml", &name, |job| {
            set_env(job, "EXIT_CODE", "1");
            set_env(job, "EXIT_AT_EPOCH", "1");
            set_env(job, "EXIT_REPLICA", "worker-1");
        })
        .await;
    let job = s.wait_condition(&jobs, &name, "Failed").await;
    let last = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.last())
        .cloned();
    let message = last.and_then(|c| c.message).unwrap_or_default();
    assert_eq!(
        message,
        format!(
            "TFJob {}/{name} has failed because 1 Worker replica(s) failed.",
            s.ns
        )
    );
    let log = s.logs(&format!("{name}-worker-1"));
    assert!(log.contains("exiting with code 1 at epoch 1"), "{log}");
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn on_failure_restarts_in_place_are_counted_and_backoff_limit_ends_the_job() {
    let mut s = Setup::new("real-onfailure").await;
    let name = format!("onfailure-{}", cluster::random_suffix());
    let jobs = s
        .apply("mwms.yaml", &name, |job| {
            // One Worker that fails at once, every time: the kubelet
            // restarts it in place (OnFailure) until the limit.
            let specs = &mut job["spec"]["tfReplicaSpecs"];
            specs.as_object_mut().map(|m| m.remove("Chief"));
            specs["Worker"]["replicas"] = 1.into();
            specs["Worker"]["restartPolicy"] = "OnFailure".into();
            job["spec"]["runPolicy"]["backoffLimit"] = 3.into();
            set_env(job, "EXIT_CODE", "3");
            set_env(job, "EXIT_AT_EPOCH", "1");
            set_env(job, "EXIT_REPLICA", "worker-0");
        })
        .await;
    let pod = format!("{name}-worker-0");
    // The kubelet restarts the container, the Pod stays: its restartCount
    // grows and our status counts it.
    let counted = cluster::wait_until(
        "an in-place restart counted in replicaStatuses.Worker.restarts",
        TRAINING_TIMEOUT,
        || async {
            let job = jobs.get_opt(&name).await.ok().flatten()?;
            let n = replica_status(&job, "Worker")["restarts"].as_i64()?;
            (n >= 1).then_some(n)
        },
    )
    .await;
    s.say(&format!("restarts counted: {counted}"));
    let previous = s.previous_logs(&pod);
    assert!(
        previous.contains("exiting with code 3"),
        "the previous container ran the program: {previous}"
    );
    let job = s.wait_condition(&jobs, &name, "Failed").await;
    let last = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.last())
        .cloned();
    assert_eq!(
        last.and_then(|c| c.message).as_deref(),
        Some(
            format!("Job {name} has failed because it has reached the specified backoff limit")
                .as_str()
        )
    );
    let restarts = replica_status(&job, "Worker")["restarts"]
        .as_i64()
        .unwrap_or(0);
    assert!(restarts >= 3, "the real restarts are counted: {job:?}");
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn active_deadline_seconds_stops_a_long_run() {
    let mut s = Setup::new("real-deadline").await;
    let name = format!("deadline-{}", cluster::random_suffix());
    let jobs = s
        .apply("mwms.yaml", &name, |job| {
            set_env(job, "EPOCHS", "1000");
            set_env(job, "STEP_SLEEP_SECONDS", "1");
            job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 90.into();
        })
        .await;
    let job = s.wait_condition(&jobs, &name, "Failed").await;
    let last = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.last())
        .cloned();
    assert_eq!(
        last.and_then(|c| c.message).as_deref(),
        Some(
            format!("Job {name} has failed because it was active longer than specified deadline")
                .as_str()
        )
    );
    // The running Pods are stopped.
    cluster::wait_until(
        "the job's Pods to stop",
        Duration::from_secs(120),
        || async {
            let running = s
                .pods(&name)
                .await
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running"))
                .count();
            (running == 0).then_some(())
        },
    )
    .await;
}
