//! `raw-status`: the raw limit plus the least any operator must add to
//! report a job's state, the fair limit for "chief exit → all Succeeded"
//! (the bare client writes no status, so its Succeeded phase is KWOK's
//! alone). One watch on the jobs' Pods and one status write per change
//! of phase: `Running` once every Pod of the job runs, `Succeeded` once its
//! Chief has; a merge patch each, four at a time (ours' default workers).
//! No cache beyond the Pods' phases, no queue, no compare-and-swap, no
//! Events, no children's services watched: a lower bound, not an operator.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use kube_runtime::watcher;
use serde_json::{Value, json};

use crate::MATCHED_WORKERS;
use crate::cluster::tfjob_resource;

const JOB_LABEL: &str = "training.kubeflow.org/job-name";
const TYPE_LABEL: &str = "training.kubeflow.org/replica-type";

/// What one job's Pods have shown so far, and which writes went out.
#[derive(Default)]
struct Seen {
    running: HashSet<String>,
    running_written: bool,
    succeeded_written: bool,
}

#[derive(Clone, Copy)]
enum Phase {
    Running,
    Succeeded,
}

/// The jobs of the plan: name → replicas by type (`chief` → 1, ...).
pub(crate) type Jobs = HashMap<String, Vec<(String, i64)>>;

/// Starts the Pod watch and the status writer; returns once the watch has
/// listed (synced), so no Pod change of the run is missed.
pub(crate) async fn start(client: Client, ns: &str, jobs: Jobs) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let config = watcher::Config::default().labels(JOB_LABEL);
    let mut events = watcher(pods, config).boxed();
    match events.try_next().await? {
        Some(watcher::Event::Init) => {}
        other => anyhow::bail!("raw-status: the Pod watch began with {other:?}"),
    }
    // An empty namespace lists nothing: the next event ends the list.
    match events.try_next().await? {
        Some(watcher::Event::InitDone) => {}
        other => anyhow::bail!("raw-status: the Pod watch listed Pods before the run: {other:?}"),
    }
    let (tx, rx) = unbounded::<(String, Phase)>();
    let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &tfjob_resource());
    let ns_owned = ns.to_owned();
    let replicas = jobs.clone();
    tokio::spawn(async move {
        rx.map(|(job, phase)| {
            let (api, ns) = (api.clone(), ns_owned.clone());
            let body = status(&ns, &job, phase, replicas.get(&job));
            async move {
                let patch = Patch::Merge(json!({ "status": body }));
                if let Err(e) = api
                    .patch_status(&job, &PatchParams::default(), &patch)
                    .await
                {
                    eprintln!("raw-status: writing {job}'s status: {e}");
                }
            }
        })
        .buffer_unordered(MATCHED_WORKERS as usize)
        .for_each(|()| async {})
        .await;
    });
    tokio::spawn(async move {
        let mut seen: HashMap<String, Seen> = HashMap::new();
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("raw-status: Pod watch: {e}");
                    continue;
                }
            };
            observe(&pod, &jobs, &mut seen, &tx);
        }
    });
    Ok(())
}

/// One Pod's change: a write when it completes a job's phase.
fn observe(
    pod: &Pod,
    jobs: &Jobs,
    seen: &mut HashMap<String, Seen>,
    tx: &UnboundedSender<(String, Phase)>,
) {
    let labels = pod.labels();
    let (Some(job), Some(rtype)) = (labels.get(JOB_LABEL), labels.get(TYPE_LABEL)) else {
        return;
    };
    let Some(replicas) = jobs.get(job) else {
        return;
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let s = seen.entry(job.clone()).or_default();
    if phase == Some("Running") {
        s.running.insert(pod.name_any());
    }
    let pods: i64 = replicas.iter().map(|(_, n)| n).sum();
    if !s.running_written && s.running.len() as i64 >= pods {
        s.running_written = true;
        let _ = tx.unbounded_send((job.clone(), Phase::Running));
    }
    if !s.succeeded_written && rtype == "chief" && phase == Some("Succeeded") {
        s.succeeded_written = true;
        let _ = tx.unbounded_send((job.clone(), Phase::Succeeded));
    }
}

/// The status Kubeflow's operator writes at that phase (conditions with its
/// reasons and messages, replica counts, start or completion time).
fn status(ns: &str, job: &str, phase: Phase, replicas: Option<&Vec<(String, i64)>>) -> Value {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let condition = |kind: &str, on: bool, reason: &str, message: String| {
        json!({"type": kind, "status": if on { "True" } else { "False" }, "reason": reason,
               "message": message, "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let created = condition(
        "Created",
        true,
        "TFJobCreated",
        format!("TFJob {ns}/{job} is created."),
    );
    let running_msg = format!("TFJob {ns}/{job} is running.");
    let key = |t: &str| match t {
        "chief" => "Chief".to_owned(),
        "ps" => "PS".to_owned(),
        "worker" => "Worker".to_owned(),
        other => other.to_owned(),
    };
    let counts = |done: bool| -> serde_json::Map<String, Value> {
        replicas
            .into_iter()
            .flatten()
            .map(|(t, n)| {
                let chief_done = done && t == "chief";
                let v = if chief_done {
                    json!({"succeeded": n})
                } else {
                    json!({"active": n})
                };
                (key(t), v)
            })
            .collect()
    };
    match phase {
        Phase::Running => json!({
            "conditions": [created, condition("Running", true, "TFJobRunning", running_msg)],
            "replicaStatuses": counts(false),
            "startTime": now,
        }),
        Phase::Succeeded => json!({
            "conditions": [
                created,
                condition("Running", false, "TFJobRunning", running_msg),
                condition("Succeeded", true, "TFJobSucceeded",
                          format!("TFJob {ns}/{job} successfully completed.")),
            ],
            "replicaStatuses": counts(true),
            "completionTime": now,
        }),
    }
}

/// The plan's jobs, by name.
pub(crate) fn jobs_of(plan: &Value) -> anyhow::Result<Jobs> {
    plan["jobs"]
        .as_array()
        .context("plan without jobs")?
        .iter()
        .map(|job| {
            let name = job["name"].as_str().context("job without name")?.to_owned();
            let replicas: Vec<(String, i64)> = serde_json::from_value(job["replicas"].clone())?;
            Ok((name, replicas))
        })
        .collect()
}
