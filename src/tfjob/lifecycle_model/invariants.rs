//! What must hold after every step of a history, whatever happened before.
use std::collections::BTreeMap;

use crate::api::constants::condition;
use crate::tfjob::children::replica_of;
use crate::tfjob::plan::bookkeeping::Bookkeeping;
use crate::tfjob::plan::conditions::{is_finished, is_true};

use super::cluster::World;

pub(super) fn check(world: &World) -> Result<(), String> {
    let f = &world.facts;
    if let Some(name) = f.created_after_finish.first() {
        return Err(format!("a finished job got a Pod: {name}"));
    }
    if let Some(name) = f.deleted_before_finish_stored.first() {
        return Err(format!(
            "the pass that found the job finished deleted {name} before the finish was stored"
        ));
    }
    if let Some(name) = f.created_for_succeeded.first() {
        return Err(format!("a succeeded index was run again: {name}"));
    }
    if let Some(name) = f.duplicate_creates.first() {
        return Err(format!("a Pod was created twice: {name}"));
    }
    stored_status(world)?;
    restarts(world)?;
    super::rival::check(world)?;
    admitted_shape(world)?;
    if let Some(pass) = &f.last_pass {
        let live_pods = world.server.pods.len();
        if pass.saw_not_admitted && !pass.saw_user_suspend && live_pods > 0 {
            return Err(format!(
                "{live_pods} Pod(s) left running after a pass saw the Workload not admitted"
            ));
        }
        let services = world.server.services.len();
        if pass.cleaned_up_all && services > 0 {
            return Err(format!(
                "{services} Service(s) of a job finished under cleanPodPolicy All left after the \
                 pass that cleaned it up"
            ));
        }
        if pass.stopped {
            let live_group = world
                .server
                .group
                .as_ref()
                .is_some_and(|g| g.metadata.deletion_timestamp.is_none());
            if live_group {
                return Err("a stopped job kept a live PodGroup".into());
            }
            if live_pods > 0 {
                return Err(format!("a stopped job kept {live_pods} Pod(s)"));
            }
        }
        let workload_active = world
            .server
            .workload
            .as_ref()
            .is_some_and(|w| !w.is_finished() && w.spec.active != Some(false));
        if pass.saw_user_suspend && !pass.finished && workload_active {
            return Err("a job suspended by its user left its Workload active (quota held)".into());
        }
    }
    Ok(())
}

/// Conditions in Kubeflow's order: `Created` first; `Running` and
/// `Restarting` never both true; a stored finish is never taken back.
fn stored_status(world: &World) -> Result<(), String> {
    let Some(status) = world.server.job.status.as_ref() else {
        return Ok(());
    };
    if let Some(first) = status.conditions.first()
        && first.type_ != condition::CREATED
    {
        return Err(format!(
            "the first condition is {}, not Created",
            first.type_
        ));
    }
    if is_true(status, condition::RUNNING) && is_true(status, condition::RESTARTING) {
        return Err("Running and Restarting are both True".into());
    }
    if world.facts.stored_finished && !is_finished(status) {
        return Err("a stored Succeeded/Failed was taken back".into());
    }
    Ok(())
}

/// Restarts are counted once: never more than happened, and every Pod
/// deleted to be restarted was counted first.
fn restarts(world: &World) -> Result<(), String> {
    let counted = Bookkeeping::of(&world.server.job).total_restarts();
    let f = &world.facts;
    if counted > f.restarts_happened {
        return Err(format!(
            "{counted} restarts counted, {} happened",
            f.restarts_happened
        ));
    }
    if f.restart_deletes > counted {
        return Err(format!(
            "{} failed Pods deleted for a restart, {counted} counted",
            f.restart_deletes
        ));
    }
    Ok(())
}

/// While the Workload holds quota, no replica type runs more Pods than it
/// was admitted with.
fn admitted_shape(world: &World) -> Result<(), String> {
    let Some(admitted) = &world.facts.admitted_counts else {
        return Ok(());
    };
    let mut live: BTreeMap<String, i32> = BTreeMap::new();
    for pod in world.server.pods.values() {
        if let Some((rtype, _)) = replica_of(&pod.metadata) {
            *live.entry(rtype.lower().to_owned()).or_default() += 1;
        }
    }
    for (set, n) in &live {
        let allowed = admitted.get(set).copied().unwrap_or(0);
        if *n > allowed {
            return Err(format!(
                "{n} {set} Pod(s) run on a quota admitted for {allowed}"
            ));
        }
    }
    Ok(())
}
