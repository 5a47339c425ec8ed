//! The job's gang in a pass ([`crate::tfjob::integrations::gang`]): its PodGroup before
//! its Pods, or, for a job whose Pods were created without one, no group and
//! one Warning.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::constants::event;
use crate::api::defaults::JobSpec;
use crate::tfjob::plan::bookkeeping::Bookkeeping;
use crate::tfjob::integrations::gang::{self, Step};

use crate::tfjob::plan::tally::terminating;
use crate::tfjob::plan::{Action, Observed, POD_GROUP_WAIT, Plan};

/// A job that asks for a gang but whose Pods were created without one
/// ([`gang::outside_a_gang`]) runs on without it: one Warning (remembered
/// in the bookkeeping), forgotten once the job has no Pods (a resumed job
/// gets its gang).
pub(crate) fn runs_outside_its_gang(
    p: &mut Plan,
    books: &mut Bookkeeping,
    obs: &Observed<'_>,
) -> bool {
    let live = obs.pods.iter().filter(|p| !terminating(p)).count();
    if live == 0 {
        books.outside_a_gang = false;
        return false;
    }
    let uid = obs.job.metadata.uid.as_deref().unwrap_or_default();
    if !gang::outside_a_gang(obs.pods, obs.pod_group, uid) {
        return false;
    }
    if !books.outside_a_gang {
        books.outside_a_gang = true;
        p.event(
            true,
            event::SCHEDULING_POLICY_IGNORED,
            gang::outside_a_gang_warning(live),
        );
    }
    true
}

/// The job's PodGroup before its Pods: create it, or set its `minCount`
/// after scaling. False when no Pod may be created yet (an old group of
/// the job's name is still there); the Pods created otherwise join the group.
pub(crate) fn plan_pod_group(
    p: &mut Plan,
    obs: &Observed<'_>,
    spec: &JobSpec<'_>,
    owner: &OwnerReference,
    name: &str,
) -> bool {
    let uid = obs.job.metadata.uid.as_deref().unwrap_or_default();
    let wanted = gang::desired(obs.job, spec, name, owner);
    match gang::next_step(obs.pod_group, &wanted, uid) {
        Step::Create => p.actions.push(Action::CreatePodGroup(Box::new(wanted))),
        Step::SetMinCount(min_count) => p.actions.push(Action::SetPodGroupMinCount {
            name: gang::group_name(name).to_owned(),
            min_count,
        }),
        Step::Ready => {}
        Step::Wait(why) => {
            p.event(false, event::WAITING_FOR_POD_GROUP, why);
            p.requeue_in(POD_GROUP_WAIT);
            return false;
        }
    }
    p.pod_group = Some(gang::group_name(name).to_owned());
    true
}
