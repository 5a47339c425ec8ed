//! Claiming children: adopt matching orphans, release children that no
//! longer match, ignore what another controller owns.
//!
//! Mirrors `ControllerRefManager` (kubernetes/kubernetes
//! `pkg/controller/controller_ref_manager.go`), used by the Deployment and Job controllers and by
//! Kubeflow: a child belongs to the owner named by its *controller*
//! ownerReference. An orphan (no controller reference) whose labels match the
//! owner's selector is adopted — but only after an uncached read shows the
//! owner still exists and is not being deleted, or we could adopt a child into
//! an owner that garbage collection is about to remove. A child we control
//! whose labels stopped matching is released (our reference removed), so a
//! person can take a Pod out of a job by relabelling it.
//!
//! While the owner is being deleted (it has a `deletionTimestamp`), claim
//! neither adopts nor releases: the garbage collector is about to remove the
//! owner and, with it, its children; releasing them now would orphan them
//! instead (ControllerRefManager's `ClaimObject`, and controller-runtime,
//! leave them alone too).
//!
//! [`claim`] is pure and decides; [`adopt`] and [`release`] write. Patches
//! carry the child's UID as a precondition so a re-created child of the same
//! name is never touched by mistake.
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::json;

/// What [`claim`] decided for each candidate.
#[derive(Debug)]
pub struct Claimed<K> {
    /// Children we control whose labels match: ours.
    pub owned: Vec<Arc<K>>,
    /// Orphans whose labels match: ours once adopted.
    pub adopt: Vec<Arc<K>>,
    /// Children we control whose labels no longer match: to let go.
    pub release: Vec<Arc<K>>,
}

/// The owner as [`claim`] needs it: its UID, and whether it is being
/// deleted. From its metadata (`&owner.metadata`), or from a bare UID for
/// an owner known not to be deleted.
#[derive(Clone, Copy, Debug)]
pub struct ClaimOwner<'a> {
    pub uid: &'a str,
    pub being_deleted: bool,
}

impl<'a> From<&'a ObjectMeta> for ClaimOwner<'a> {
    fn from(meta: &'a ObjectMeta) -> Self {
        Self {
            uid: meta.uid.as_deref().unwrap_or_default(),
            being_deleted: meta.deletion_timestamp.is_some(),
        }
    }
}

impl<'a> From<&'a str> for ClaimOwner<'a> {
    /// An owner known by UID only: taken as not being deleted. Pass the
    /// owner's metadata instead wherever it is at hand.
    fn from(uid: &'a str) -> Self {
        Self {
            uid,
            being_deleted: false,
        }
    }
}

/// The controller ownerReference of an object, if any.
pub fn controller_of<K: Resource>(obj: &K) -> Option<&OwnerReference> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

fn matches(labels: Option<&BTreeMap<String, String>>, selector: &BTreeMap<String, String>) -> bool {
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// Sorts `candidates` into owned / adopt / release for `owner` selecting
/// children by `selector` (every pair must match). Objects controlled by
/// someone else are left out; so are orphans that are being deleted
/// (adopting them is pointless). An owner being deleted adopts and releases
/// nothing: its children stay as they are (those it controls whose labels
/// no longer match are neither owned nor released).
pub fn claim<'a, K: Resource>(
    owner: impl Into<ClaimOwner<'a>>,
    selector: &BTreeMap<String, String>,
    candidates: impl IntoIterator<Item = Arc<K>>,
) -> Claimed<K> {
    let ClaimOwner {
        uid: owner_uid,
        being_deleted,
    } = owner.into();
    let mut c = Claimed {
        owned: Vec::new(),
        adopt: Vec::new(),
        release: Vec::new(),
    };
    for obj in candidates {
        let labels_match = matches(obj.meta().labels.as_ref(), selector);
        match controller_of(obj.as_ref()) {
            Some(owner) if owner.uid == owner_uid && !owner_uid.is_empty() => {
                if labels_match {
                    c.owned.push(obj);
                } else if !being_deleted {
                    c.release.push(obj);
                }
            }
            Some(_) => {}
            None => {
                if labels_match && !being_deleted && obj.meta().deletion_timestamp.is_none() {
                    c.adopt.push(obj);
                }
            }
        }
    }
    c
}

/// Makes `owner` the controller of `child` (a strategic-merge patch that
/// adds the reference, guarded by the child's UID).
pub async fn adopt<K>(api: &Api<K>, child: &K, owner: &OwnerReference) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = child.meta().name.clone().unwrap_or_default();
    let patch = json!({
        "metadata": {
            "ownerReferences": [owner],
            "uid": child.meta().uid,
        }
    });
    api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
}

/// Removes the reference to the owner with `owner_uid` from `child`.
pub async fn release<K>(api: &Api<K>, child: &K, owner_uid: &str) -> kube::Result<K>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let name = child.meta().name.clone().unwrap_or_default();
    let patch = json!({
        "metadata": {
            "ownerReferences": [{ "$patch": "delete", "uid": owner_uid }],
            "uid": child.meta().uid,
        }
    });
    api.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(name: &str, app: &str, controller: Option<&str>) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.labels = Some(BTreeMap::from([("app".to_owned(), app.to_owned())]));
        p.metadata.owner_references = controller.map(|uid| {
            vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Owner".into(),
                name: "o".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        });
        Arc::new(p)
    }

    fn names(v: &[Arc<Pod>]) -> Vec<&str> {
        v.iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect()
    }

    #[test]
    fn children_are_sorted_into_owned_adopt_and_release() {
        let selector = BTreeMap::from([("app".to_owned(), "a".to_owned())]);
        let c = claim(
            "me",
            &selector,
            [
                pod("mine", "a", Some("me")),
                pod("relabelled", "b", Some("me")),
                pod("orphan", "a", None),
                pod("unrelated-orphan", "b", None),
                pod("someone-elses", "a", Some("other")),
            ],
        );
        assert_eq!(names(&c.owned), ["mine"]);
        assert_eq!(names(&c.adopt), ["orphan"]);
        assert_eq!(names(&c.release), ["relabelled"]);
    }

    #[test]
    fn an_owner_being_deleted_neither_adopts_nor_releases() {
        let selector = BTreeMap::from([("app".to_owned(), "a".to_owned())]);
        let owner = ObjectMeta {
            uid: Some("me".into()),
            deletion_timestamp: Some(Time(jiff::Timestamp::now())),
            ..ObjectMeta::default()
        };
        let c = claim(
            &owner,
            &selector,
            [
                pod("mine", "a", Some("me")),
                pod("relabelled", "b", Some("me")),
                pod("orphan", "a", None),
            ],
        );
        assert!(c.adopt.is_empty(), "adopted {:?}", names(&c.adopt));
        assert!(c.release.is_empty(), "released {:?}", names(&c.release));
        assert_eq!(names(&c.owned), ["mine"]);
    }

    #[test]
    fn an_owner_given_by_metadata_claims_like_one_given_by_uid() {
        let selector = BTreeMap::from([("app".to_owned(), "a".to_owned())]);
        let owner = ObjectMeta {
            uid: Some("me".into()),
            ..ObjectMeta::default()
        };
        let c = claim(
            &owner,
            &selector,
            [pod("relabelled", "b", Some("me")), pod("orphan", "a", None)],
        );
        assert_eq!(names(&c.adopt), ["orphan"]);
        assert_eq!(names(&c.release), ["relabelled"]);
    }

    #[test]
    fn a_terminating_orphan_is_not_adopted() {
        let selector = BTreeMap::from([("app".to_owned(), "a".to_owned())]);
        let mut p = (*pod("orphan", "a", None)).clone();
        p.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        let c = claim("me", &selector, [Arc::new(p)]);
        assert!(c.adopt.is_empty());
    }
}
