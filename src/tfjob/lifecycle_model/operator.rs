//! One reconcile pass in the model: the real planner on the operator's
//! cache, then its writes in the order `reconcile.rs` sends them —
//! bookkeeping, the PodGroup's, the Workload's, the rest, the status — each
//! refused, conflicting or cut short by a crash as the event says.
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::constants::condition;
use crate::api::defaults::normalize;
use crate::api::types::CleanPodPolicy;
use crate::tfjob::children::cached::{CachedPod, CachedService};
use crate::tfjob::children::scheduling_group::ANNOTATION_POD_GROUP;
use crate::tfjob::children::{ChildContext, owner_reference, replica_of};
use crate::tfjob::integrations::gang::plan::{GangPass, PodGroupWrite};
use crate::tfjob::integrations::kueue::gate::WorkloadWrite;
use crate::tfjob::integrations::kueue::plan::KueuePass;
use crate::tfjob::plan::bookkeeping::ANNOTATION as BOOKKEEPING;
use crate::tfjob::plan::conditions::{is_finished, is_true};
use crate::tfjob::plan::integration::PlanHooks;
use crate::tfjob::plan::{Action, Observed, Plan, PlanConfig, plan};

use super::cluster::{PassFacts, World, bump, pending};

/// The order the reconcile sends a plan's actions in: the PodGroup's
/// writes, then the Workload's, then the rest.
fn in_sending_order(plan: &Plan) -> Vec<&Action> {
    let group = |a: &&Action| a.write::<PodGroupWrite>().is_some();
    let workload = |a: &&Action| a.write::<WorkloadWrite>().is_some();
    let mut out: Vec<&Action> = plan.actions.iter().filter(group).collect();
    out.extend(plan.actions.iter().filter(workload));
    out.extend(plan.actions.iter().filter(|a| !group(a) && !workload(a)));
    out
}

/// One pass, as the reconcile runs it: first the rival integration's hold
/// (the same [`crate::tfjob::integrations::rival::RivalGuard`]), then, if
/// the job is not held, the plan and its writes. What the pass saw and did
/// about another controller goes to the facts for [`super::rival::check`].
pub(super) fn pass(world: &mut World, crash_at: Option<usize>, refuse_status: bool) {
    let now = world.now();
    let visible = super::rival::visible(&world.cache.job, world.started, now);
    let before = format!("{:?}", world.server);
    let held = super::rival::held(world, now);
    if !held {
        pass_unheld(world, crash_at, refuse_status);
    }
    world.facts.rival_pass = Some(super::rival::RivalPass {
        visible,
        held,
        wrote: format!("{:?}", world.server) != before,
    });
}

fn pass_unheld(world: &mut World, crash_at: Option<usize>, refuse_status: bool) {
    let cache = world.cache.clone();
    let pods: Vec<Arc<CachedPod>> = cache
        .pods
        .values()
        .map(|p| Arc::new(CachedPod::from(p.clone())))
        .collect();
    let services: Vec<Arc<CachedService>> = cache
        .services
        .values()
        .map(|s| Arc::new(CachedService::from(s.clone())))
        .collect();
    let gang = GangPass {
        setting: world.gang,
        group: cache.group.clone().map(Arc::new),
    };
    let kueue = KueuePass {
        workloads: cache.workload.iter().cloned().map(Arc::new).collect(),
        flavors: if cache.flavor_known {
            super::kueue::flavors()
        } else {
            BTreeMap::new()
        },
    };
    let mut integrations: Vec<&dyn PlanHooks> = vec![&gang];
    if world.kueue {
        integrations.push(&kueue);
    }
    let plan = plan(
        &Observed {
            job: &cache.job,
            pods: &pods,
            services: &services,
            integrations: &integrations,
            now: world.now(),
        },
        &PlanConfig::default(),
    );
    let cleans_up_all = cache.job.status.as_ref().is_some_and(is_finished)
        && cache.job.spec.run_policy.clean_pod_policy == Some(CleanPodPolicy::All)
        && cache.pods.keys().eq(world.server.pods.keys())
        && cache.services.keys().eq(world.server.services.keys());
    world.saw_pods();
    let finished = is_finished(&plan.status);
    let stopped = is_true(&plan.status, condition::SUSPENDED);
    if !plan.manage {
        return;
    }
    let mut position = 0;
    let mut alive = || {
        let ok = crash_at.is_none_or(|c| position < c);
        position += 1;
        ok
    };
    if let Some(books) = &plan.bookkeeping {
        if !alive() {
            return crash(world);
        }
        if !write_job(world, |job| {
            job.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(BOOKKEEPING.into(), books.to_annotation());
        }) {
            return;
        }
    }
    let mut group_ready = true;
    for action in in_sending_order(&plan) {
        if !alive() {
            return crash(world);
        }
        if matches!(action, Action::CreatePod { .. }) && !group_ready {
            continue;
        }
        if !apply(world, &cache.job, &plan, action, finished || stopped) {
            group_ready &= !matches!(action.write(), Some(PodGroupWrite::Create(_)));
        }
    }
    if !alive() {
        return crash(world);
    }
    if !refuse_status {
        let status = plan.status.clone();
        write_job(world, |job| job.status = Some(status));
    }
    world.facts.last_pass = Some(PassFacts {
        stopped,
        saw_user_suspend: cache.job.spec.run_policy.suspend == Some(true),
        saw_not_admitted: world.kueue && !finished && !admitted(&cache),
        finished,
        cleaned_up_all: cleans_up_all,
    });
}

/// The process died: what it had in memory is gone, its caches relist,
/// and the process that replaces it starts now.
fn crash(world: &mut World) {
    world.operator_restarts();
}

/// Whether the cache shows the job's Workload admitted and not evicted.
fn admitted(cache: &super::cluster::Cluster) -> bool {
    cache
        .workload
        .as_ref()
        .is_some_and(|w| w.is_admitted() && w.evicted().is_none())
}

/// An update of the job (its status or its bookkeeping annotation) from the
/// cached copy: refused with a conflict when the server's is newer.
fn write_job(world: &mut World, f: impl FnOnce(&mut crate::api::types::TFJob)) -> bool {
    if world.cache.job.metadata.resource_version != world.server.job.metadata.resource_version {
        return false;
    }
    f(&mut world.server.job);
    bump(&mut world.server.job);
    if world.server.job.status.as_ref().is_some_and(is_finished) {
        world.facts.stored_finished = true;
    }
    world.cache.job = world.server.job.clone();
    true
}

/// Sends one action; false when the server refused it. `ending`: the
/// pass finishes or stops the job (its deletes are no restarts).
fn apply(
    world: &mut World,
    job: &crate::api::types::TFJob,
    plan: &Plan,
    action: &Action,
    ending: bool,
) -> bool {
    match action {
        Action::CreatePod { rtype, index, name } => {
            if world.server.pods.contains_key(name) {
                world.facts.duplicate_creates.push(name.clone());
                return false;
            }
            let Ok(spec) = normalize("j", &job.spec) else {
                return false;
            };
            let Some(owner) = owner_reference(job) else {
                return false;
            };
            let ctx = ChildContext::new("j", "default", &spec, &owner, None);
            let Some(mut pod) = ctx.pod(*rtype, *index) else {
                return false;
            };
            if let Some(placement) = plan.placements.get(rtype) {
                placement.apply(&mut pod);
            }
            if let Some(group) = &plan.pod_group {
                pod.metadata
                    .annotations
                    .get_or_insert_with(BTreeMap::new)
                    .insert(ANNOTATION_POD_GROUP.into(), group.clone());
            }
            if world.facts.stored_finished {
                world.facts.created_after_finish.push(name.clone());
            }
            if world.facts.succeeded_slots.contains(&(*rtype, *index)) {
                world.facts.created_for_succeeded.push(name.clone());
            }
            let uid = world.uid("pod");
            let pod = pending(pod, uid);
            world.server.pods.insert(name.clone(), pod.clone());
            world.cache.pods.insert(name.clone(), pod);
            true
        }
        Action::DeletePod { name, uid, .. } => {
            let current = world
                .server
                .pods
                .get(name)
                .and_then(|p| p.metadata.uid.clone());
            if current.is_none() || (uid.is_some() && current != *uid) {
                return false;
            }
            let retryable_failure = world.server.pods.get(name).is_some_and(|p| {
                let s = p.status.as_ref();
                s.and_then(|s| s.phase.as_deref()) == Some("Failed")
                    && s.and_then(|s| s.container_statuses.as_ref())
                        .and_then(|c| c.first())
                        .and_then(|c| c.state.as_ref())
                        .and_then(|st| st.terminated.as_ref())
                        .is_some_and(|t| t.exit_code >= 128)
            });
            // A Pod scaled away is deleted, not restarted.
            let in_spec = world
                .server
                .pods
                .get(name)
                .and_then(|p| replica_of(&p.metadata))
                .is_some_and(|(rtype, index)| {
                    normalize("j", &job.spec).is_ok_and(|spec| {
                        spec.replicas
                            .get(&rtype)
                            .is_some_and(|r| index < r.replicas)
                    })
                });
            if retryable_failure && in_spec && !ending {
                world.facts.restart_deletes += 1;
            }
            let finish_unstored =
                !job.status.as_ref().is_some_and(is_finished) && is_finished(&plan.status);
            if finish_unstored && !retryable_failure {
                world.facts.deleted_before_finish_stored.push(name.clone());
            }
            world.server.pods.remove(name);
            world.cache.pods.remove(name);
            world.settle_group();
            true
        }
        Action::CreateService(svc) => {
            let Some(name) = svc.metadata.name.clone() else {
                return false;
            };
            if replica_of(&svc.metadata).is_none() || world.server.services.contains_key(&name) {
                return false;
            }
            world.server.services.insert(name.clone(), (**svc).clone());
            world.cache.services.insert(name, (**svc).clone());
            true
        }
        Action::DeleteService { name } => {
            world.cache.services.remove(name);
            world.server.services.remove(name).is_some()
        }
        Action::Integration(write) => {
            if let Some(write) = write.get::<WorkloadWrite>() {
                return super::kueue::apply(world, write);
            }
            match write.get::<PodGroupWrite>() {
                Some(write) => apply_to_group(world, write),
                None => false,
            }
        }
        Action::DeleteJob => true,
    }
}

/// A PodGroup write, as the API server takes it.
fn apply_to_group(world: &mut World, write: &PodGroupWrite) -> bool {
    match write {
        PodGroupWrite::Create(group) => {
            if world.server.group.is_some() {
                return false;
            }
            let mut group = (**group).clone();
            group.metadata.uid = Some(world.uid("group"));
            world.server.group = Some(group.clone());
            world.cache.group = Some(group);
            true
        }
        PodGroupWrite::SetMinCount { .. } => world.server.group.is_some(),
        PodGroupWrite::Delete { uid, .. } => {
            let stamp = world.stamp();
            let Some(group) = world.server.group.as_mut() else {
                return false;
            };
            if uid.is_some() && group.metadata.uid != *uid {
                return false;
            }
            group.metadata.deletion_timestamp = Some(stamp);
            world.settle_group();
            world.cache.group = world.server.group.clone();
            true
        }
    }
}
