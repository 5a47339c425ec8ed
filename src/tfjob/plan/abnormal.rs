//! Why a replica's Pod is stuck, as Warning events on the job: Kubeflow's
//! `RecordAbnormalPods` (`pkg/core/job.go`), so `kubectl describe tfjob`
//! shows `ImagePullBackOff`, `CrashLoopBackOff`, `OOMKilled` or
//! `Unschedulable` without a trip to each Pod.
//!
//! Same rules and messages as Kubeflow: a container that terminated with a
//! non-zero code (reason: the termination's, e.g. `OOMKilled`); a waiting
//! container with a message (reason: the wait's, e.g. `ImagePullBackOff`);
//! for a Pod with no container statuses yet, its newest condition when that
//! is not True (e.g. `PodScheduled=False`, reason `Unschedulable`). Repeats
//! on later passes are folded into one Event with a count by the recorder.
use k8s_openapi::api::core::v1::ContainerStatus;

use crate::tfjob::children::cached::CachedPod;
use crate::tfjob::kubeflow::messages;

/// One Warning to record: `(reason, message)`.
pub type Abnormal = (String, String);

/// What is abnormal about a live (pending or running) Pod.
pub fn abnormal(pod: &CachedPod) -> Vec<Abnormal> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let containers = status
        .container_statuses
        .as_deref()
        .filter(|c| !c.is_empty())
        .or(status.init_container_statuses.as_deref())
        .unwrap_or_default();
    if !containers.is_empty() {
        return containers
            .iter()
            .filter_map(|c| container_abnormal(name, c))
            .collect();
    }
    let newest = status
        .conditions
        .iter()
        .flatten()
        .max_by_key(|c| c.last_transition_time.as_ref().map(|t| t.0));
    match newest {
        Some(c) if c.status != "True" => vec![(
            c.reason.clone().unwrap_or_else(|| c.type_.clone()),
            messages::pod_condition(name, c.message.as_deref().unwrap_or_default()),
        )],
        _ => Vec::new(),
    }
}

fn container_abnormal(pod: &str, c: &ContainerStatus) -> Option<Abnormal> {
    let state = c.state.as_ref()?;
    if let Some(t) = state.terminated.as_ref().filter(|t| t.exit_code != 0) {
        return Some((
            t.reason.clone().unwrap_or_else(|| "Error".into()),
            messages::pod_terminated(
                pod,
                &c.name,
                t.exit_code,
                t.message.as_deref().unwrap_or_default(),
            ),
        ));
    }
    let w = state
        .waiting
        .as_ref()
        .filter(|w| w.message.as_deref().is_some_and(|m| !m.is_empty()))?;
    Some((
        w.reason.clone().unwrap_or_else(|| "Waiting".into()),
        messages::pod_waiting(pod, &c.name, w.message.as_deref().unwrap_or_default()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, PodCondition, PodStatus,
    };

    fn pod(status: PodStatus) -> CachedPod {
        let mut pod = CachedPod::default();
        pod.metadata.name = Some("j-worker-0".into());
        pod.status = Some(status);
        pod
    }

    fn container(state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: "tensorflow".into(),
            state: Some(state),
            ..ContainerStatus::default()
        }
    }

    #[test]
    fn an_image_pull_backoff_is_reported_with_kubeflows_message() {
        let p = pod(PodStatus {
            container_statuses: Some(vec![container(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ImagePullBackOff".into()),
                    message: Some("Back-off pulling image \"nope\"".into()),
                }),
                ..ContainerState::default()
            })]),
            ..PodStatus::default()
        });
        assert_eq!(
            abnormal(&p),
            [(
                "ImagePullBackOff".to_owned(),
                "Error pod j-worker-0 container tensorflow waiting message: Back-off pulling image \"nope\"".to_owned()
            )]
        );
    }

    #[test]
    fn an_oom_kill_is_reported_and_a_clean_exit_is_not() {
        let terminated = |code: i32, reason: &str| {
            pod(PodStatus {
                container_statuses: Some(vec![container(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: code,
                        reason: Some(reason.into()),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                })]),
                ..PodStatus::default()
            })
        };
        assert_eq!(abnormal(&terminated(137, "OOMKilled"))[0].0, "OOMKilled");
        assert!(abnormal(&terminated(0, "Completed")).is_empty());
    }

    #[test]
    fn an_unschedulable_pod_is_reported_by_its_condition() {
        let p = pod(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                message: Some("0/4 nodes are available".into()),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        });
        assert_eq!(
            abnormal(&p),
            [(
                "Unschedulable".to_owned(),
                "Error pod j-worker-0 condition message: 0/4 nodes are available".to_owned()
            )]
        );
    }
}
