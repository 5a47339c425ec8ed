//! Lowers the job's expectations as its children show up in (or leave) the
//! informer cache.
//!
//! Kubeflow's `OnDependentCreateFunc` / `OnDependentDeleteFunc`. It is
//! registered on the Pod and Service informers *before* the handler that
//! enqueues the owning job, so by the time the job is reconciled the
//! observation is already counted.
use std::marker::PhantomData;
use std::sync::Arc;

use kube::Resource;

use crate::api::types::TFJob;
use crate::runtime::cache::delta_fifo::DeletedObject;
use crate::runtime::cache::informer::EventHandler;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::controller::expectations::Expectations;

/// The key of the TFJob that controls `child`, if one does.
pub fn controller_job_key<K: Resource>(child: &K) -> Option<ObjectKey> {
    let meta = child.meta();
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))?;
    let kind_matches =
        owner.kind == TFJob::kind(&()) && owner.api_version == TFJob::api_version(&());
    kind_matches.then(|| ObjectKey::new(meta.namespace.as_deref(), &owner.name))
}

/// An informer handler that only updates expectations.
pub struct ExpectationsObserver<K> {
    expectations: Expectations,
    kind: PhantomData<fn() -> K>,
}

impl<K> ExpectationsObserver<K> {
    pub fn new(expectations: Expectations) -> Self {
        Self {
            expectations,
            kind: PhantomData,
        }
    }
}

impl<K: Resource + Send + Sync + 'static> EventHandler<K> for ExpectationsObserver<K> {
    fn on_add(&self, obj: &Arc<K>, _in_initial_list: bool) {
        if let Some(owner) = controller_job_key(obj.as_ref()) {
            self.expectations.creation_observed(&owner);
        }
    }

    fn on_update(&self, _old: &Arc<K>, new: &Arc<K>) {
        // A graceful delete first shows up as an update that sets
        // deletionTimestamp: the delete we asked for has happened.
        if new.meta().deletion_timestamp.is_some()
            && let (Some(owner), Some(uid)) =
                (controller_job_key(new.as_ref()), new.meta().uid.as_deref())
        {
            self.expectations.deletion_observed(&owner, uid);
        }
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        let obj = obj.object();
        if let (Some(owner), Some(uid)) =
            (controller_job_key(obj.as_ref()), obj.meta().uid.as_deref())
        {
            self.expectations.deletion_observed(&owner, uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults::normalize;
    use crate::api::fixtures::TfJobFixture;
    use crate::tfjob::children::{ChildContext, owner_reference};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod() -> Pod {
        let job = TfJobFixture::new("j").workers(2).uid("u1").build();
        let spec = normalize("j", &job.spec).unwrap();
        let owner = owner_reference(&job).unwrap();
        let ctx = ChildContext::new("j", "default", &spec, &owner, None);
        let mut pod = ctx
            .pod(crate::api::constants::ReplicaType::Worker, 0)
            .unwrap();
        pod.metadata.uid = Some("p1".into());
        pod
    }

    #[test]
    fn child_maps_to_its_controller_job() {
        assert_eq!(
            controller_job_key(&pod()),
            Some(ObjectKey::new(Some("default"), "j"))
        );
        let mut orphan = pod();
        orphan.metadata.owner_references = None;
        assert_eq!(controller_job_key(&orphan), None);
    }

    #[test]
    fn observed_creates_and_deletes_satisfy_expectations() {
        let exp = Expectations::new();
        let key = ObjectKey::new(Some("default"), "j");
        let observer = ExpectationsObserver::<Pod>::new(exp.clone());
        exp.expect_creations(&key, 1);
        exp.expect_deletions(&key, &["p1"]);
        let p = Arc::new(pod());
        observer.on_add(&p, false);
        assert!(!exp.satisfied(&key), "the delete is still pending");
        let mut terminating = pod();
        terminating.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
        observer.on_update(&p, &Arc::new(terminating));
        assert!(exp.satisfied(&key));
    }
}
