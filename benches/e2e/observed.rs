//! The bench namespace as three watches see it: Pods, Services and TFJobs,
//! with duplicate creates counted per replica.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::DynamicObject;
use kube::{Api, ResourceExt};
use kube_runtime::WatchStreamExt;
use kube_runtime::watcher;

/// The state of the bench namespace as three watches see it. Duplicates are
/// counted per replica identity (job, type, index), not per name, so a peer
/// that used generated names would not hide one.
#[derive(Default)]
pub(crate) struct Observed {
    pub(crate) pod_phase: HashMap<String, String>,
    pub(crate) pod_uids: HashMap<String, HashSet<String>>,
    pub(crate) svc_uids: HashMap<String, HashSet<String>>,
    /// job name -> (running, succeeded, failed)
    pub(crate) jobs: HashMap<String, (bool, bool, bool)>,
    /// When a Pod's phase or a job's conditions last changed. A phase ends
    /// when its condition first holds, which is the last change before the
    /// poll that sees it hold: timing from here, not from the poll, keeps
    /// the poll interval out of every figure.
    pub(crate) changed_at: Option<Instant>,
}

pub(crate) fn replica_identity(meta: &kube::api::ObjectMeta) -> String {
    let labels = meta.labels.clone().unwrap_or_default();
    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let id = format!(
        "{}/{}/{}",
        get("training.kubeflow.org/job-name"),
        get("training.kubeflow.org/replica-type").to_lowercase(),
        get("training.kubeflow.org/replica-index")
    );
    if id == "//" {
        meta.name.clone().unwrap_or_default()
    } else {
        id
    }
}

impl Observed {
    pub(crate) fn pod(&mut self, pod: &Pod, deleted: bool) {
        let name = pod.name_any();
        if let Some(uid) = pod.metadata.uid.clone() {
            self.pod_uids
                .entry(replica_identity(&pod.metadata))
                .or_default()
                .insert(uid);
        }
        let before = if deleted {
            self.pod_phase.remove(&name)
        } else {
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            self.pod_phase.insert(name.clone(), phase)
        };
        if before.as_ref() != self.pod_phase.get(&name) {
            self.changed_at = Some(Instant::now());
        }
    }
    pub(crate) fn service(&mut self, svc: &Service) {
        if let Some(uid) = svc.metadata.uid.clone() {
            self.svc_uids
                .entry(replica_identity(&svc.metadata))
                .or_default()
                .insert(uid);
        }
    }
    pub(crate) fn job(&mut self, job: &DynamicObject, deleted: bool) {
        let name = job.name_any();
        let before = if deleted {
            self.jobs.remove(&name)
        } else {
            let is_true = |t: &str| {
                job.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
            };
            self.jobs.insert(
                name.clone(),
                (is_true("Running"), is_true("Succeeded"), is_true("Failed")),
            )
        };
        if before.as_ref() != self.jobs.get(&name) {
            self.changed_at = Some(Instant::now());
        }
    }
    pub(crate) fn running_pods(&self) -> usize {
        self.pod_phase.values().filter(|p| *p == "Running").count()
    }
    pub(crate) fn duplicates(uids: &HashMap<String, HashSet<String>>) -> u64 {
        uids.values()
            .map(|u| u.len().saturating_sub(1) as u64)
            .sum()
    }
}

pub(crate) fn spawn_watch<K, F>(
    api: Api<K>,
    state: Arc<Mutex<Observed>>,
    apply: F,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(&mut Observed, &K, bool) + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let Ok(mut s) = state.lock() else { return };
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => apply(&mut s, &o, false),
                watcher::Event::Delete(o) => apply(&mut s, &o, true),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    })
}
