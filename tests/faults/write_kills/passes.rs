//! The passes the sweep kills in: how a job is brought to each, what
//! triggers it, when it has settled, and what must hold afterwards.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube_runtime::watcher;
use tfjob_operator::api::constants::{condition, reason};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::pod_group::PodGroup;
use tfjob_operator::api::types::{CleanPodPolicy, RestartPolicy, TFJob};
use tfjob_operator::tfjob::children::scheduling_group::ANNOTATION_POD_GROUP;

use super::{Env, SETTLE};
use crate::cluster::wait_until;
use crate::harness::{create_job, end_pod, finished, has_condition, running};
use crate::support::request_cpu;
use crate::test_kueue as kueue;

const LABEL_JOB: &str = "training.kubeflow.org/job-name";
/// Every job: one Chief and two Workers.
const REPLICAS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// A Chief exits 0 under `cleanPodPolicy: All` (after one retryable
    /// Worker failure): the finishing pass writes `Succeeded`, the cleanup
    /// pass deletes every Pod and Service.
    Finish,
    /// A running gang is suspended by its user: its PodGroup, Pods and
    /// Services go.
    Suspend,
    /// A suspended gang is resumed: a fresh PodGroup, then Pods and Services.
    Resume,
    /// A running gang queued in Kueue (the operator owns its Workload) is
    /// evicted: its Workload is deactivated from outside, Kueue marks it
    /// `Evicted`, and the operator stops the job (PodGroup, Pods and
    /// Services deleted, `Suspended` with reason `TFJobEvicted`), gives
    /// the quota back once no Pod is left, and holds the job as queued
    /// (`TFJobQueued`) while the Workload is pending.
    Evict,
}

/// The job as the pass began.
pub struct Before {
    /// Pod UIDs per (replica type, index), as the observer saw them.
    pods: BTreeMap<(String, String), Vec<String>>,
    /// The UID of the PodGroup the job had before (for [`Pass::Resume`]:
    /// the one deleted when it was suspended).
    group: Option<String>,
    /// The job's Workload ([`Pass::Evict`]).
    workload: Option<String>,
    /// The job's finished condition at every version seen from the trigger on.
    history: Arc<Mutex<Vec<Option<String>>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for Before {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

pub fn jobs(env: &Env) -> Api<TFJob> {
    Api::namespaced(env.client.clone(), &env.ns)
}

fn groups(env: &Env) -> Api<PodGroup> {
    Api::namespaced(env.client.clone(), &env.ns)
}

impl Pass {
    pub fn name(self) -> &'static str {
        match self {
            Pass::Finish => "finish",
            Pass::Suspend => "suspend",
            Pass::Resume => "resume",
            Pass::Evict => "evict",
        }
    }

    /// The operator's flags beyond `--leader-elect=false`.
    pub fn flags(self) -> Vec<&'static str> {
        match self {
            Pass::Finish => vec![],
            Pass::Suspend | Pass::Resume => vec!["--gang-scheduling=on"],
            Pass::Evict => vec!["--gang-scheduling=on", "--kueue=workload"],
        }
    }

    pub fn needs_pod_groups(self) -> bool {
        self != Pass::Finish
    }

    /// Whether the pass runs with Kueue beside the cluster ([`crate::test_kueue`]).
    pub fn needs_kueue(self) -> bool {
        self == Pass::Evict
    }

    /// Retryable failures injected before the pass: the restarts the job
    /// must count.
    fn failures(self) -> i32 {
        match self {
            Pass::Finish => 1,
            Pass::Suspend | Pass::Resume | Pass::Evict => 0,
        }
    }

    /// Creates `job` and brings it to where the pass starts; returns once
    /// the operator is quiet.
    pub async fn setup(self, env: &Env, job: &str) -> Before {
        let fixture = TfJobFixture::new(job).chief(1).workers(2);
        let fixture = match self {
            Pass::Finish => fixture
                .restart_policy(RestartPolicy::ExitCode)
                .clean_pod_policy(CleanPodPolicy::All),
            Pass::Suspend | Pass::Resume | Pass::Evict => {
                fixture.restart_policy(RestartPolicy::Never)
            }
        };
        if self == Pass::Evict {
            create_queued_job(env, fixture).await;
        } else {
            create_job(&env.client, &env.ns, fixture).await;
        }
        wait_running(env, job, &[]).await;
        let (mut group, mut workload) = (None, None);
        match self {
            Pass::Finish => {
                let worker = format!("{job}-worker-0");
                let uid = end_pod(&env.client, &env.ns, &worker, 137, &[], SETTLE, None).await;
                wait_running(env, job, &[uid]).await;
            }
            Pass::Suspend => group = Some(live_group(env, job).await.expect("the job's PodGroup")),
            Pass::Resume => {
                group = Some(live_group(env, job).await.expect("the job's PodGroup"));
                suspend(env, job, true).await;
                wait_until(&format!("{job} to be suspended"), SETTLE, || async {
                    stopped(env, job).await.then_some(())
                })
                .await;
            }
            Pass::Evict => {
                group = Some(live_group(env, job).await.expect("the job's PodGroup"));
                let w = job_workload(env, job).await.expect("the job's Workload");
                workload = w.metadata.name;
            }
        }
        env.quiet("the setup").await;
        let history = Arc::new(Mutex::new(Vec::new()));
        let watch = tokio::spawn(record_history(jobs(env), job.to_owned(), history.clone()));
        Before {
            pods: slots(env, job),
            group,
            workload,
            history,
            watch,
        }
    }

    pub async fn trigger(self, env: &Env, job: &str, before: &Before) {
        match self {
            Pass::Finish => {
                let chief = format!("{job}-chief-0");
                end_pod(&env.client, &env.ns, &chief, 0, &[], SETTLE, None).await;
            }
            Pass::Suspend => suspend(env, job, true).await,
            Pass::Resume => suspend(env, job, false).await,
            Pass::Evict => {
                let name = before.workload.as_deref().expect("the job's Workload");
                kueue::set_active(&env.client, &env.ns, name, false).await;
            }
        }
    }

    /// Whether the job is where the pass leads.
    pub async fn settled(self, env: &Env, job: &str, before: &Before) -> bool {
        let Ok(Some(tfjob)) = jobs(env).get_opt(job).await else {
            return false;
        };
        match self {
            Pass::Finish => {
                finished(&tfjob).as_deref() == Some(condition::SUCCEEDED)
                    && job_pods(env, job).await.is_some_and(|p| p.is_empty())
                    && job_services(env, job).await.is_some_and(|s| s.is_empty())
            }
            Pass::Suspend => has_condition(&tfjob, condition::SUSPENDED) && stopped(env, job).await,
            Pass::Evict => {
                let Some(w) = job_workload(env, job).await else {
                    return false;
                };
                has_condition(&tfjob, condition::SUSPENDED)
                    && kueue::condition_true(&w, "Evicted")
                    && !kueue::condition_true(&w, "QuotaReserved")
                    && stopped(env, job).await
            }
            Pass::Resume => {
                let Some(pods) = job_pods(env, job).await else {
                    return false;
                };
                let up = pods
                    .iter()
                    .filter(|p| running(p) && p.metadata.deletion_timestamp.is_none())
                    .count();
                let group = live_group(env, job).await;
                has_condition(&tfjob, condition::RUNNING)
                    && !has_condition(&tfjob, condition::SUSPENDED)
                    && up == REPLICAS
                    && pods.len() == REPLICAS
                    && group.is_some()
                    && group != before.group
            }
        }
    }

    /// What broke, once the job has settled.
    pub async fn violations(self, env: &Env, job: &str, before: &Before) -> Vec<String> {
        let mut out = Vec::new();
        let Ok(tfjob) = jobs(env).get(job).await else {
            return vec![format!("{job} could not be read")];
        };
        let restarts: i32 = tfjob
            .status
            .iter()
            .flat_map(|s| s.replica_statuses.values())
            .map(|r| r.restarts)
            .sum();
        if restarts != self.failures() {
            out.push(format!(
                "the status counts {restarts} restarts for {} failures",
                self.failures()
            ));
        }
        // Pod UIDs per index: none new when stopping or finishing, exactly
        // one new per index when resuming.
        let now = slots(env, job);
        let new_per_index = usize::from(self == Pass::Resume);
        for (slot, uids) in &now {
            let had = before.pods.get(slot).map_or(0, Vec::len);
            if uids.len() != had + new_per_index {
                out.push(format!(
                    "{}-{}: {} Pod UIDs, {had} before the pass ({uids:?})",
                    slot.0,
                    slot.1,
                    uids.len()
                ));
            }
        }
        if now.len() != REPLICAS {
            out.push(format!(
                "Pods seen at {} indices: {:?}",
                now.len(),
                now.keys()
            ));
        }
        match self {
            Pass::Finish => {
                let history = before.history.lock().expect("history").clone();
                let first = history.iter().position(Option::is_some);
                if let Some(i) = first
                    && history[i..].iter().any(Option::is_none)
                {
                    out.push(format!("the job was finished, then not: {history:?}"));
                }
                if finished(&tfjob).as_deref() != Some(condition::SUCCEEDED) {
                    out.push(format!("ended {:?}, not Succeeded", finished(&tfjob)));
                }
            }
            Pass::Suspend => {
                if let Some(uid) = live_group(env, job).await {
                    out.push(format!("the stopped gang's PodGroup {uid} is live"));
                }
            }
            Pass::Evict => out.extend(evicted_then_readmitted(env, job, &tfjob, before).await),
            Pass::Resume => {
                let group = live_group(env, job).await;
                if group.is_none() || group == before.group {
                    out.push(format!(
                        "resumed in PodGroup {group:?}, the old one was {:?}",
                        before.group
                    ));
                }
                for pod in job_pods(env, job).await.unwrap_or_default() {
                    if pod
                        .annotations()
                        .get(ANNOTATION_POD_GROUP)
                        .map(String::as_str)
                        != Some(job)
                    {
                        out.push(format!("{} is not in the job's group", pod.name_any()));
                    }
                }
            }
        }
        out
    }
}

/// Sets `spec.runPolicy.suspend`.
async fn suspend(env: &Env, job: &str, on: bool) {
    let patch = serde_json::json!({ "spec": { "runPolicy": { "suspend": on } } });
    jobs(env)
        .patch(job, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("failed to set suspend={on} on {job}: {e}"));
}

/// Waits until the job runs its three Pods, none of them UIDs in `past`,
/// and its status says so.
async fn wait_running(env: &Env, job: &str, past: &[String]) {
    let what = format!("{}/{job} to run {REPLICAS} new Pods", env.ns);
    wait_until(&what, SETTLE, || async {
        let tfjob = jobs(env).get(job).await.ok()?;
        let active: i32 = tfjob
            .status
            .as_ref()?
            .replica_statuses
            .values()
            .map(|r| r.active)
            .sum();
        let pods = job_pods(env, job).await?;
        let up = pods
            .iter()
            .filter(|p| running(p) && p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.uid().is_some_and(|uid| !past.contains(&uid)))
            .count();
        (has_condition(&tfjob, condition::RUNNING)
            && active == REPLICAS as i32
            && pods.len() == REPLICAS
            && up == REPLICAS)
            .then_some(())
    })
    .await
}

/// No Pod, no Service, no live PodGroup.
async fn stopped(env: &Env, job: &str) -> bool {
    job_pods(env, job).await.is_some_and(|p| p.is_empty())
        && job_services(env, job).await.is_some_and(|s| s.is_empty())
        && live_group(env, job).await.is_none()
}

async fn job_pods(env: &Env, job: &str) -> Option<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
    let params = ListParams::default().labels(&format!("{LABEL_JOB}={job}"));
    api.list(&params).await.ok().map(|l| l.items)
}

async fn job_services(env: &Env, job: &str) -> Option<Vec<Service>> {
    let api: Api<Service> = Api::namespaced(env.client.clone(), &env.ns);
    let params = ListParams::default().labels(&format!("{LABEL_JOB}={job}"));
    api.list(&params).await.ok().map(|l| l.items)
}

/// The UID of the job's PodGroup unless it is gone or being deleted.
async fn live_group(env: &Env, job: &str) -> Option<String> {
    let group = groups(env).get_opt(job).await.ok().flatten()?;
    if group.metadata.deletion_timestamp.is_some() {
        return None;
    }
    group.metadata.uid
}

/// The job's Pod UIDs per (replica type, index), as the observer saw them.
fn slots(env: &Env, job: &str) -> BTreeMap<(String, String), Vec<String>> {
    env.observer
        .snapshot()
        .pods
        .into_iter()
        .filter(|(slot, _)| slot.0 == env.ns && slot.1 == job)
        .map(|(slot, uids)| ((slot.2, slot.3), uids))
        .collect()
}

/// Records the job's finished condition at every version the watch sees.
async fn record_history(api: Api<TFJob>, job: String, history: Arc<Mutex<Vec<Option<String>>>>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={job}"));
    let mut stream = watcher(api, config).boxed();
    while let Some(event) = stream.next().await {
        if let Ok(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = event {
            history.lock().expect("history").push(finished(&j));
        }
    }
}

/// Creates the job in Kueue's LocalQueue, each container asking for one cpu
/// (the quota Kueue counts).
async fn create_queued_job(env: &Env, fixture: TfJobFixture) {
    let mut job = fixture.namespace(&env.ns).build();
    job.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(kueue::QUEUE_LABEL.into(), kueue::QUEUE.into());
    request_cpu(&mut job, "1");
    jobs(env)
        .create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("failed to create TFJob {}/{}: {e}", env.ns, job.name_any()));
}

/// The Workload of `job` (the operator creates it, controlled by the job).
async fn job_workload(env: &Env, job: &str) -> Option<DynamicObject> {
    let uid = jobs(env).get_opt(job).await.ok().flatten()?.metadata.uid?;
    kueue::workload_of(&env.client, &env.ns, &uid).await
}

/// What an eviction must leave, once the job has settled: the job stopped
/// as our docs say (`Suspended`, reason `TFJobEvicted`; its spec's
/// `suspend` untouched), the Workload's quota given back; then, reactivated,
/// the job admitted again and running one new Pod per index, none created
/// before the readmission, in a fresh PodGroup.
async fn evicted_then_readmitted(
    env: &Env,
    job: &str,
    tfjob: &TFJob,
    before: &Before,
) -> Vec<String> {
    let mut out = Vec::new();
    // Evicted (`TFJobEvicted`) while its Pods go; once the quota is given
    // back the Workload is pending, and the job held like any queued one
    // (`TFJobQueued`): docs/kueue.md, "What the operator does".
    let suspended = tfjob.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == condition::SUSPENDED && c.status == "True")
    });
    let why = suspended.and_then(|c| c.reason.as_deref());
    if why != Some(reason::EVICTED) && why != Some(reason::QUEUED) {
        out.push(format!(
            "the evicted job's Suspended condition is {suspended:?}, not reason {} or {}",
            reason::EVICTED,
            reason::QUEUED
        ));
    }
    if has_condition(tfjob, condition::RUNNING) {
        out.push("the evicted job's status says Running".to_owned());
    }
    let active: i32 = tfjob
        .status
        .iter()
        .flat_map(|s| s.replica_statuses.values())
        .map(|r| r.active)
        .sum();
    if active != 0 {
        out.push(format!(
            "the evicted job's status counts {active} active Pods"
        ));
    }
    if tfjob.spec.run_policy.suspend == Some(true) {
        out.push("the eviction wrote the job's spec.runPolicy.suspend".to_owned());
    }
    if let Some(uid) = live_group(env, job).await {
        out.push(format!("the evicted gang's PodGroup {uid} is live"));
    }
    let Some(name) = before.workload.as_deref() else {
        return vec!["no Workload was seen before the eviction".to_owned()];
    };
    match job_workload(env, job).await {
        Some(w)
            if kueue::condition_true(&w, "QuotaReserved")
                || !w.data["status"]["admission"].is_null() =>
        {
            out.push(format!(
                "the evicted Workload {name} still holds quota: {}",
                w.data["status"]
            ));
        }
        Some(w) if w.metadata.name.as_deref() != Some(name) => {
            out.push(format!(
                "the Workload {name} was replaced by {:?}",
                w.metadata.name
            ));
        }
        Some(_) => {}
        None => out.push(format!("the Workload {name} is gone")),
    }
    if !out.is_empty() {
        return out;
    }

    // Reactivated: Kueue admits it again, and it runs once per index.
    kueue::set_active(&env.client, &env.ns, name, true).await;
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        match readmitted(env, job, before).await {
            Readmission::Running => break,
            Readmission::Broken(why) => {
                out.push(why);
                return out;
            }
            Readmission::Waiting(why) if tokio::time::Instant::now() >= deadline => {
                out.push(format!(
                    "not running again {SETTLE:?} after its reactivation: {why}"
                ));
                return out;
            }
            Readmission::Waiting(_) => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for (slot, uids) in &slots(env, job) {
        let had = before.pods.get(slot).map_or(0, Vec::len);
        if uids.len() != had + 1 {
            out.push(format!(
                "{}-{} after the readmission: {} Pod UIDs, {had} before the eviction ({uids:?})",
                slot.0,
                slot.1,
                uids.len()
            ));
        }
    }
    out
}

/// Where a reactivated job is.
enum Readmission {
    /// Admitted, its three Pods new and running, in a fresh PodGroup.
    Running,
    /// Not yet (what is missing).
    Waiting(String),
    /// A Pod created before Kueue admitted the job again.
    Broken(String),
}

async fn readmitted(env: &Env, job: &str, before: &Before) -> Readmission {
    let waiting = |why: &str| Readmission::Waiting(why.to_owned());
    let Some(w) = job_workload(env, job).await else {
        return waiting("no Workload");
    };
    let Some(reserved) = kueue::condition(&w, "QuotaReserved").filter(|c| c["status"] == "True")
    else {
        return waiting("the Workload holds no quota");
    };
    let Some(admitted_at) = reserved["lastTransitionTime"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return waiting("QuotaReserved has no lastTransitionTime");
    };
    let Ok(tfjob) = jobs(env).get(job).await else {
        return waiting("the job unread");
    };
    let Some(pods) = job_pods(env, job).await else {
        return waiting("Pods unlisted");
    };
    for pod in &pods {
        let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
        // Both are whole seconds: a Pod of the admission's second is after it.
        if created.is_none_or(|c| c < admitted_at) {
            return Readmission::Broken(format!(
                "{} was created at {created:?}, before Kueue admitted the job again at {admitted_at}",
                pod.name_any()
            ));
        }
    }
    if !has_condition(&tfjob, condition::RUNNING) || has_condition(&tfjob, condition::SUSPENDED) {
        return Readmission::Waiting(format!("the job's status: {:?}", tfjob.status));
    }
    let up = pods
        .iter()
        .filter(|p| running(p) && p.metadata.deletion_timestamp.is_none())
        .count();
    if pods.len() != REPLICAS || up != REPLICAS {
        return Readmission::Waiting(format!("{up} of {} Pods running", pods.len()));
    }
    let group = live_group(env, job).await;
    if group.is_none() || group == before.group {
        return Readmission::Waiting(format!(
            "PodGroup {group:?}, the evicted one was {:?}",
            before.group
        ));
    }
    Readmission::Running
}
