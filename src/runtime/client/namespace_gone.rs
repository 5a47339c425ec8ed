//! Whether the API server refused a write because the namespace it was for
//! is being deleted or is gone: client-go's
//! `apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause)`, and a 404
//! naming the namespace itself.
//!
//! Once a namespace is Terminating, the NamespaceLifecycle admission plugin
//! refuses every create in it with a 403 whose causes include
//! `NamespaceTerminating`; once it is gone, with a 404 whose details name the
//! `namespaces` resource (`apiserver/pkg/admission/plugin/namespace/lifecycle`).
//! Neither goes away on a retry: the namespace never becomes Active again,
//! and its objects, ours included, are being deleted. Kubernetes' own
//! controllers take the refusal as the end of the attempt, not as an error
//! (the Job controller's and ReplicaSet's Pod creates, the event recorder in
//! `tools/record`); a retry with backoff only fills logs and error counts
//! until the object's delete arrives.
use kube::core::Status;

/// client-go's `v1.NamespaceTerminatingCause`.
pub const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// Whether `err` is the API server refusing a write because its namespace
/// is being deleted or no longer exists (see the module doc).
pub fn is_namespace_gone(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status_says_namespace_gone(status),
        _ => false,
    }
}

fn status_says_namespace_gone(status: &Status) -> bool {
    let Some(details) = &status.details else {
        return false;
    };
    match status.code {
        403 => details
            .causes
            .iter()
            .any(|cause| cause.reason == NAMESPACE_TERMINATING),
        // The namespace itself not found, not the object (a 404 for the
        // object names its own kind).
        404 => details.kind == "namespaces" && details.group.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error as the API server sends it (JSON), decoded as kube does.
    fn refused(status: serde_json::Value) -> kube::Error {
        kube::Error::Api(
            serde_json::from_value::<Status>(status)
                .expect("a Status")
                .boxed(),
        )
    }

    #[test]
    fn a_create_in_a_terminating_namespace_is_a_namespace_gone() {
        // As NamespaceLifecycle answers a Pod create (Kubernetes 1.37).
        let err = refused(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "pods \"j-worker-0\" is forbidden: unable to create new content in namespace ns because it is being terminated",
            "reason": "Forbidden",
            "details": {"name": "j-worker-0", "kind": "pods", "causes": [{
                "reason": "NamespaceTerminating",
                "message": "namespace ns is being terminated",
                "field": "metadata.namespace"
            }]},
            "code": 403
        }));
        assert!(is_namespace_gone(&err));
    }

    #[test]
    fn a_create_in_a_namespace_that_is_gone_is_a_namespace_gone() {
        let err = refused(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "namespaces \"ns\" not found", "reason": "NotFound",
            "details": {"name": "ns", "kind": "namespaces"}, "code": 404
        }));
        assert!(is_namespace_gone(&err));
    }

    #[test]
    fn other_refusals_are_not() {
        for status in [
            // The object itself not found (a delete, a patch).
            serde_json::json!({"reason": "NotFound", "code": 404,
                "details": {"name": "j-worker-0", "kind": "pods"}}),
            // Forbidden by RBAC or a policy: no NamespaceTerminating cause.
            serde_json::json!({"reason": "Forbidden", "code": 403,
                "details": {"name": "j-worker-0", "kind": "pods"}}),
            serde_json::json!({"reason": "Forbidden", "code": 403}),
            // A quota or a webhook refusing: another code, whatever the cause says.
            serde_json::json!({"reason": "Invalid", "code": 422, "details": {
                "kind": "namespaces", "causes": [{"reason": "NamespaceTerminating"}]}}),
            serde_json::json!({"reason": "AlreadyExists", "code": 409,
                "details": {"name": "j-worker-0", "kind": "pods"}}),
            // A namespaces resource of another group.
            serde_json::json!({"reason": "NotFound", "code": 404,
                "details": {"name": "ns", "group": "example.com", "kind": "namespaces"}}),
        ] {
            assert!(!is_namespace_gone(&refused(status.clone())), "{status}");
        }
        assert!(!is_namespace_gone(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
    }
}
