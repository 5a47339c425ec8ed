//! A Pod stuck terminating on a node that is gone: force-deleted after a
//! wait, so its replica can run again (`--force-delete-stuck-after`).
use std::time::Duration;

use jiff::Timestamp;

use super::lost_node::{STUCK_POD_RECHECK, stuck_on_lost_node};
use super::slots::Slots;
use super::{Action, Plan};

/// Force-deletes each disrupted Pod whose wait (`wait`; `None`: never) is
/// over, and looks again when the next one's is.
pub(super) fn force_delete_stuck(
    p: &mut Plan,
    children: &Slots<'_>,
    now: Timestamp,
    wait: Option<Duration>,
) {
    let Some(wait) = wait else {
        return;
    };
    for pod in children.pods.values().flatten() {
        match stuck_on_lost_node(pod, now, wait) {
            Some(left) if left.is_zero() => {
                p.actions.push(Action::DeletePod {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    uid: pod.metadata.uid.clone(),
                    force: true,
                });
                // The delete waits for the node to be gone or out of
                // service (`super::lost_node`): look again later.
                p.requeue_in(STUCK_POD_RECHECK);
            }
            Some(left) => p.requeue_in(left),
            None => {}
        }
    }
}
