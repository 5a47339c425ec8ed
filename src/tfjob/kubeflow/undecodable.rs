//! A TFJob our types cannot decode, reported on the object.
//!
//! Our CRD refuses such objects, but Kubeflow's (installed by users who keep
//! `crd.install=false`) or an older one of ours may store them. The
//! reflector logs, counts (`tfjob_operator_informer_decode_failures_total`)
//! and skips the object, keeping the cache's last good copy: its Pods are
//! left alone. This handler adds what the user looking at the job sees: a
//! Warning Event on it, naming the field serde could not read.
//!
//! Every replica's informer hears the failure (informers run on standbys
//! too), so with leader election each replica may write the Event; each
//! replica's recorder folds its repeats of one message into a `count`.
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};

use crate::api::types::TFJob;
use crate::runtime::cache::informer::SharedInformer;
use crate::runtime::cache::reflector::DecodeFailure;
use crate::runtime::events::EventRecorder;

/// The Event's reason.
pub const REASON: &str = "FailedToDecode";

/// Has `recorder` write a Warning on every TFJob `jobs` fails to decode.
pub fn report_on_the_object(jobs: &SharedInformer<TFJob>, recorder: EventRecorder) {
    jobs.add_decode_failure_handler(Arc::new(move |failure: &DecodeFailure| {
        if let Some((job, message)) = warning_for(failure) {
            recorder.warning(&job, REASON, message);
        }
    }));
}

/// The object the Event is about and its message; None when the failure
/// does not name an object (its metadata did not decode either: only the
/// log and the counter can tell).
pub fn warning_for(failure: &DecodeFailure) -> Option<(PartialObjectMeta<TFJob>, String)> {
    let meta = ObjectMeta {
        namespace: failure.namespace.clone(),
        name: Some(failure.name.clone()?),
        uid: failure.uid.clone(),
        resource_version: failure.resource_version.clone(),
        ..ObjectMeta::default()
    };
    let message = format!(
        "the operator cannot read this TFJob ({}); it leaves the job and its Pods as they are until the spec is fixed (the CRD installed does not validate it: Kubeflow's, or an old one of ours)",
        failure.error
    );
    Some((meta.into_request_partial::<TFJob>(), message))
}

#[cfg(test)]
mod tests {
    use kube::Resource;

    use super::*;

    #[test]
    fn the_warning_is_about_the_tfjob_by_uid_and_names_the_field() {
        let failure = DecodeFailure {
            namespace: Some("team-a".into()),
            name: Some("mnist".into()),
            uid: Some("0b1c".into()),
            resource_version: Some("42".into()),
            error: "invalid type: string \"two\", expected i32 at line 1 column 210".into(),
        };
        let (job, message) = warning_for(&failure).expect("a named object");
        let r = job.object_ref(&());
        assert_eq!(r.kind.as_deref(), Some("TFJob"));
        assert_eq!(r.api_version.as_deref(), Some("kubeflow.org/v1"));
        assert_eq!(r.namespace.as_deref(), Some("team-a"));
        assert_eq!(r.name.as_deref(), Some("mnist"));
        assert_eq!(r.uid.as_deref(), Some("0b1c"));
        assert!(
            message.contains("invalid type: string \"two\""),
            "{message}"
        );
    }

    #[test]
    fn a_failure_without_a_name_is_left_to_the_log() {
        let failure = DecodeFailure {
            error: "no metadata".into(),
            ..DecodeFailure::default()
        };
        assert!(warning_for(&failure).is_none());
    }
}
