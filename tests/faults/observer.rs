//! An observer of the cluster that does not go through the operator: its own
//! watches (kube-runtime's watcher, a different implementation from the
//! product's `src/runtime`), on the admin connection (never through the fault
//! proxy), recording every Pod and Service the operator's labels mark, by
//! UID, per (job, replica type, index).
//!
//! Two Pods with different UIDs at one index mean the index's Pod was
//! created twice; whether that is right depends on the restart policy (an
//! `ExitCode` restart re-creates it on purpose), so the scenario compares the
//! count with what it drove. A Pod created and deleted while the watch was
//! relisting would be missed here; the audit log ([`crate::audit`]) sees it.
#![allow(dead_code)] // Each scenario uses a different subset.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;
use kube::{Client, Resource, ResourceExt};
use kube_runtime::watcher;
use tokio::task::JoinHandle;

const LABEL_JOB: &str = "training.kubeflow.org/job-name";
const LABEL_TYPE: &str = "training.kubeflow.org/replica-type";
const LABEL_INDEX: &str = "training.kubeflow.org/replica-index";

/// (namespace, job, replica type, index).
pub type Slot = (String, String, String, String);

#[derive(Default, Debug)]
pub struct Seen {
    /// Every UID ever seen per slot, in order of first sight.
    pub pods: BTreeMap<Slot, Vec<String>>,
    pub services: BTreeMap<Slot, Vec<String>>,
    /// UIDs seen deleted.
    pub deleted: BTreeSet<String>,
}

impl Seen {
    /// Slots with more Pod UIDs than `expected(slot)` allows.
    pub fn extra_pods(&self, expected: impl Fn(&Slot) -> usize) -> Vec<(Slot, Vec<String>)> {
        self.pods
            .iter()
            .filter(|(slot, uids)| uids.len() > expected(slot))
            .map(|(s, u)| (s.clone(), u.clone()))
            .collect()
    }

    pub fn pod_uids(&self, namespace: &str) -> usize {
        self.pods
            .iter()
            .filter(|(s, _)| s.0 == namespace)
            .map(|(_, u)| u.len())
            .sum()
    }

    pub fn service_uids(&self, namespace: &str) -> usize {
        self.services
            .iter()
            .filter(|(s, _)| s.0 == namespace)
            .map(|(_, u)| u.len())
            .sum()
    }
}

/// The running watches; dropping the observer stops them.
pub struct Observer {
    pub seen: Arc<Mutex<Seen>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Observer {
    /// Watches `namespace`, or every namespace when `None`.
    pub fn start(client: &Client, namespace: Option<&str>) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let pods: Api<Pod> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let services: Api<Service> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let tasks = vec![
            tokio::spawn(watch(pods, seen.clone(), |s| &mut s.pods)),
            tokio::spawn(watch(services, seen.clone(), |s| &mut s.services)),
        ];
        Self { seen, tasks }
    }

    /// A copy of what was seen so far.
    pub fn snapshot(&self) -> Seen {
        let seen = self.seen.lock().expect("observer lock");
        Seen {
            pods: seen.pods.clone(),
            services: seen.services.clone(),
            deleted: seen.deleted.clone(),
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn slot<K: Resource>(obj: &K) -> Option<Slot> {
    let labels = obj.meta().labels.as_ref()?;
    Some((
        obj.meta().namespace.clone()?,
        labels.get(LABEL_JOB)?.clone(),
        labels.get(LABEL_TYPE)?.clone(),
        labels.get(LABEL_INDEX)?.clone(),
    ))
}

async fn watch<K>(
    api: Api<K>,
    seen: Arc<Mutex<Seen>>,
    map: fn(&mut Seen) -> &mut BTreeMap<Slot, Vec<String>>,
) where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
{
    let config = watcher::Config::default().labels(LABEL_JOB);
    let mut stream = watcher(api, config).boxed();
    while let Some(event) = stream.next().await {
        let Ok(event) = event else {
            // The watcher backs off and relists by itself.
            continue;
        };
        let mut seen = match seen.lock() {
            Ok(s) => s,
            Err(_) => return,
        };
        match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                if let (Some(slot), Some(uid)) = (slot(&obj), obj.uid()) {
                    let uids = map(&mut seen).entry(slot).or_default();
                    if !uids.contains(&uid) {
                        uids.push(uid);
                    }
                }
            }
            watcher::Event::Delete(obj) => {
                if let (Some(slot), Some(uid)) = (slot(&obj), obj.uid()) {
                    let uids = map(&mut seen).entry(slot).or_default();
                    if !uids.contains(&uid) {
                        uids.push(uid.clone());
                    }
                    seen.deleted.insert(uid);
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}
