//! Every change to the Pods and Services of one namespace, from a
//! resourceVersion on, as the API server's watch delivers it: a create, a
//! delete, or a write to what would restart or re-own a Pod (labels,
//! annotations, owner references, a deletion timestamp, the spec). Status
//! changes are the kubelet's (KWOK's) and are not recorded.
//!
//! A watch, not polls: a Pod deleted and re-created under the same name
//! between two polls would look untouched; the watch names both events with
//! their UIDs. A watch that ends (the server's timeout) is resumed from the
//! last version seen, so nothing between is lost; one the server can no
//! longer resume (410 Gone) fails the test rather than miss events.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One recorded change.
#[derive(Clone, Debug)]
pub struct Change {
    pub at: Instant,
    /// `Pod/restarted-worker-0 (uid …) created`, `… deleted`, `… rewritten: …`.
    pub what: String,
    /// The job the object belongs to (its `training.kubeflow.org/job-name` label).
    pub job: String,
}

/// What of an object a change to would count (see the module docs).
fn fingerprint(o: &DynamicObject) -> Value {
    json!({
        "labels": o.metadata.labels,
        "annotations": o.metadata.annotations,
        "ownerReferences": o.metadata.owner_references,
        "deletionTimestamp": o.metadata.deletion_timestamp,
        "spec": o.data.get("spec"),
    })
}

/// The changes to the Pods and Services of a namespace since they were listed.
pub struct Recorder {
    changes: Arc<Mutex<Vec<Change>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Recorder {
    /// Lists the namespace's Pods and Services and records every change from there.
    pub async fn start(client: &Client, ns: &str) -> Self {
        let changes = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (kind, resource) in [
            ("Pod", ApiResource::erase::<Pod>(&())),
            ("Service", ApiResource::erase::<Service>(&())),
        ] {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
            let list = api
                .list(&ListParams::default())
                .await
                .unwrap_or_else(|e| panic!("failed to list {kind}s in {ns}: {e}"));
            let mut known = BTreeMap::new();
            for o in &list.items {
                let uid = o.uid().unwrap_or_default();
                known.insert(uid, fingerprint(o));
            }
            let version = list.metadata.resource_version.unwrap_or_default();
            tasks.push(tokio::spawn(record(
                api,
                kind,
                version,
                known,
                changes.clone(),
            )));
        }
        Self { changes, tasks }
    }

    /// The changes recorded so far.
    pub fn changes(&self) -> Vec<Change> {
        self.changes.lock().expect("the change log").clone()
    }

    /// The changes recorded at or after `since`.
    pub fn changes_since(&self, since: Instant) -> Vec<Change> {
        self.changes()
            .into_iter()
            .filter(|c| c.at >= since)
            .collect()
    }

    /// Watches for `window` from now and fails at the first change (with
    /// all of them so far): the namespace must stay as it is, e.g. while an
    /// operator that just started takes over. Changes recorded before this
    /// call from `since` on count too.
    pub async fn assert_still(&self, since: Instant, window: Duration, while_what: &str) {
        let deadline = Instant::now() + window;
        loop {
            let seen = self.changes_since(since);
            assert!(
                seen.is_empty(),
                "{while_what}: Pods or Services changed: {:#?}",
                seen.iter().map(|c| &c.what).collect::<Vec<_>>()
            );
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Watches one kind from `version` on, for ever (the task is aborted).
async fn record(
    api: Api<DynamicObject>,
    kind: &'static str,
    mut version: String,
    mut known: BTreeMap<String, Value>,
    changes: Arc<Mutex<Vec<Change>>>,
) {
    let params = WatchParams::default().timeout(290).disable_bookmarks();
    loop {
        let mut events = match api.watch(&params, &version).await {
            Ok(events) => events.boxed(),
            Err(e) => {
                push(&changes, "", format!("{kind} watch failed: {e}"));
                return;
            }
        };
        while let Some(event) = events.next().await {
            let (object, deleted) = match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => (o, false),
                Ok(WatchEvent::Deleted(o)) => (o, true),
                Ok(WatchEvent::Bookmark(_)) => continue,
                Ok(WatchEvent::Error(e)) => {
                    // 410 Gone and the like: events may be lost, so the
                    // test cannot say nothing changed.
                    let what = format!("{kind} watch failed: {e:?}");
                    push(&changes, "", what);
                    return;
                }
                Err(e) => {
                    let what = format!("{kind} watch failed: {e}");
                    push(&changes, "", what);
                    return;
                }
            };
            if let Some(v) = object.resource_version() {
                version = v;
            }
            let uid = object.uid().unwrap_or_default();
            let name = format!("{}/{} (uid {uid})", kind, object.name_any());
            let job = object
                .labels()
                .get("training.kubeflow.org/job-name")
                .cloned()
                .unwrap_or_default();
            let now = fingerprint(&object);
            let what = match (known.get(&uid), deleted) {
                (_, true) => {
                    known.remove(&uid);
                    format!("{name} deleted")
                }
                (None, false) => {
                    known.insert(uid.clone(), now);
                    format!("{name} created")
                }
                (Some(before), false) if *before != now => {
                    let what = format!("{name} rewritten: {before} -> {now}");
                    known.insert(uid.clone(), now);
                    what
                }
                (Some(_), false) => continue,
            };
            push(&changes, &job, what);
        }
    }
}

fn push(changes: &Mutex<Vec<Change>>, job: &str, what: String) {
    changes.lock().expect("the change log").push(Change {
        at: Instant::now(),
        what,
        job: job.to_string(),
    });
}
