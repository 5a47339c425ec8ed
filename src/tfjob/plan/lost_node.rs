//! Whether a stuck Pod's node is known to be gone, so that force-deleting
//! the Pod cannot leave a second copy of a replica running.
//!
//! A Pod evicted from a node that stopped responding stays `Terminating`:
//! no kubelet confirms it stopped. Force-deleting it frees its name for a
//! replacement, but if the node is only partitioned (NotReady past the
//! taint's toleration, the taint manager's eviction already done) the old
//! container may still run, and two workers with one identity would write
//! one checkpoint. Kubernetes' own Pod GC force-deletes such Pods only when
//! the node object is gone or an admin has tainted it
//! `node.kubernetes.io/out-of-service` (non-graceful node shutdown: the
//! admin's word that the machine is off). By default we follow that rule;
//! `--force-delete-stuck-pods-on-any-node` restores the bounded wait alone,
//! for clusters where lost nodes are never partitioned (e.g. autoscaled VMs
//! that are deleted, not cut off). The node is read live, once, when a Pod
//! is due: the controller does not cache Nodes.
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;

use crate::tfjob::children::cached::CachedPod;

/// The taint an admin puts on a node known to be shut down
/// (`node.kubernetes.io/out-of-service`, non-graceful node shutdown, GA in 1.28).
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// How often a stuck Pod whose force delete waits for its node is looked at
/// again (a node deleted or tainted wakes no TFJob up).
pub const STUCK_POD_RECHECK: Duration = Duration::from_secs(30);

/// Evicted or disrupted (preemption, node drain, lost node): the Pod failed
/// through no fault of its own, so it is replaced without counting a failure.
pub fn disrupted(pod: &CachedPod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status.reason.as_deref() == Some("Evicted")
        || status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
}

/// When a Pod on a lost node may be force-deleted: it was disrupted (the
/// taint manager evicts Pods from a node that stopped responding, adding
/// `DisruptionTarget`), and it is still there `wait` after its grace period
/// ended, because no kubelet is left to confirm it stopped. `None`: not
/// such a Pod; `Some(0)`: now; `Some(d)`: in `d`.
///
/// Without this a job hangs in Restarting forever (Kubeflow #2072): the
/// terminating Pod holds its slot. Kubernetes' Pod GC force-deletes such Pods
/// only once an admin taints the node out-of-service; we wait a bounded time
/// instead, and only for Pods already evicted for being unreachable.
pub fn stuck_on_lost_node(pod: &CachedPod, now: Timestamp, wait: Duration) -> Option<Duration> {
    let deleted_at = pod.metadata.deletion_timestamp.as_ref()?.0;
    if !disrupted(pod) {
        return None;
    }
    let wait = jiff::SignedDuration::try_from(wait).unwrap_or(jiff::SignedDuration::MAX);
    let due = deleted_at.saturating_add(wait).unwrap_or(deleted_at);
    let left = due
        .as_millisecond()
        .saturating_sub(now.as_millisecond())
        .max(0);
    Some(Duration::from_millis(left.unsigned_abs()))
}

/// What is known of a stuck Pod's node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// The Pod names no node: it never ran anywhere.
    NoNode,
    /// The Node object is deleted.
    Gone(String),
    /// The node carries the out-of-service taint.
    OutOfService(String),
    /// The node is there without the taint: it may still run the Pod.
    StillThere(String),
    /// The node could not be read (e.g. no permission to `get` Nodes).
    Unknown { node: String, error: String },
}

impl NodeState {
    /// Whether a force delete cannot leave the old container running, as
    /// Kubernetes' Pod GC decides it.
    pub fn allows_force_delete(&self) -> bool {
        matches!(self, Self::NoNode | Self::Gone(_) | Self::OutOfService(_))
    }

    /// From the Node as read (`None`: not found).
    pub fn of(name: &str, node: Option<&Node>) -> Self {
        let Some(node) = node else {
            return Self::Gone(name.to_owned());
        };
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|taints| taints.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT));
        if tainted {
            Self::OutOfService(name.to_owned())
        } else {
            Self::StillThere(name.to_owned())
        }
    }

    /// The Warning's message when the Pod is left alone.
    pub fn why_kept(&self, pod: &str) -> String {
        match self {
            Self::StillThere(node) => format!(
                "Pod {pod} is stuck terminating on node {node}, which still exists without the \
                 {OUT_OF_SERVICE_TAINT} taint and may still run it: not force-deleted. Delete the \
                 node, or taint it {OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute once it is shut down"
            ),
            Self::Unknown { node, error } => format!(
                "Pod {pod} is stuck terminating on node {node}, which could not be read ({error}): \
                 not force-deleted. Grant the operator get on nodes, or pass \
                 --force-delete-stuck-pods-on-any-node"
            ),
            _ => String::new(),
        }
    }
}

/// Reads the Pod's node, live: the Pod (for `spec.nodeName`, which the
/// cache drops) and then its Node.
pub async fn node_state(client: &kube::Client, pods: &Api<Pod>, pod: &str) -> NodeState {
    let node = match pods.get_opt(pod).await {
        Ok(Some(p)) => p.spec.and_then(|s| s.node_name),
        // Gone meanwhile: the delete will find nothing to do.
        Ok(None) => return NodeState::NoNode,
        Err(e) => {
            return NodeState::Unknown {
                node: "?".to_owned(),
                error: e.to_string(),
            };
        }
    };
    let Some(node) = node else {
        return NodeState::NoNode;
    };
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.get_opt(&node).await {
        Ok(found) => NodeState::of(&node, found.as_ref()),
        Err(e) => NodeState::Unknown {
            node,
            error: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    fn node(taints: &[&str]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|key| Taint {
                            key: (*key).to_owned(),
                            effect: "NoExecute".to_owned(),
                            ..Taint::default()
                        })
                        .collect(),
                ),
                ..NodeSpec::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_deleted_node_allows_the_force_delete() {
        assert!(NodeState::of("n", None).allows_force_delete());
    }

    #[test]
    fn an_out_of_service_node_allows_the_force_delete() {
        let state = NodeState::of("n", Some(&node(&[OUT_OF_SERVICE_TAINT])));
        assert_eq!(state, NodeState::OutOfService("n".into()));
        assert!(state.allows_force_delete());
    }

    #[test]
    fn an_unreachable_node_still_there_may_run_the_pod_and_keeps_it() {
        // What the node lifecycle controller leaves on a partitioned node.
        let state = NodeState::of(
            "n",
            Some(&node(&[
                "node.kubernetes.io/unreachable",
                "node.kubernetes.io/not-ready",
            ])),
        );
        assert_eq!(state, NodeState::StillThere("n".into()));
        assert!(!state.allows_force_delete());
        assert!(
            state
                .why_kept("j-worker-0")
                .contains("taint it node.kubernetes.io/out-of-service")
        );
    }

    #[test]
    fn a_node_that_cannot_be_read_keeps_the_pod_and_says_how_to_allow_it() {
        let state = NodeState::Unknown {
            node: "n".into(),
            error: "forbidden".into(),
        };
        assert!(!state.allows_force_delete());
        assert!(
            state
                .why_kept("p")
                .contains("--force-delete-stuck-pods-on-any-node")
        );
    }
}
