//! Another TFJob controller in the model: training-operator writes the
//! job's status (a `managedFields` entry of the `status` subresource, its
//! time the world's clock), and the rule the operator keeps about it
//! (`crate::tfjob::integrations::rival`), stated here on its own terms:
//! a pass whose cache shows such a write, later than the operator's start
//! and less than a minute old, writes nothing; any other pass is not held
//! (a job is never held for good).
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::tfjob::integrations::rival::Verdict;

use super::cluster::{World, bump};

/// training-operator v1.9's field manager.
const MANAGER: &str = "training-operator.v1";
/// The hold's length, as docs/operating.md states it.
const A_MINUTE: SignedDuration = SignedDuration::from_secs(60);

/// What one pass saw and did about another controller.
#[derive(Clone, Debug)]
pub(super) struct RivalPass {
    /// Its cache showed another controller's status write later than the
    /// operator's start and less than a minute old.
    pub visible: bool,
    /// The integration held the job.
    pub held: bool,
    /// The pass changed anything on the server.
    pub wrote: bool,
}

/// training-operator writes the job's status (its entry moves to now).
pub(super) fn writes_status(world: &mut World) {
    let now = world.now();
    let job = &mut world.server.job;
    let entries = job.metadata.managed_fields.get_or_insert_with(Vec::new);
    entries.retain(|m| m.manager.as_deref() != Some(MANAGER));
    entries.push(ManagedFieldsEntry {
        manager: Some(MANAGER.into()),
        operation: Some("Update".into()),
        subresource: Some("status".into()),
        time: Some(Time(now)),
        ..ManagedFieldsEntry::default()
    });
    bump(job);
}

/// The rule on its own terms (see the module docs).
pub(super) fn visible(job: &TFJob, started: Timestamp, now: Timestamp) -> bool {
    job.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(MANAGER)
            && m.subresource.as_deref() == Some("status")
            && m.time
                .as_ref()
                .is_some_and(|t| t.0 > started && now.duration_since(t.0) < A_MINUTE)
    })
}

/// What the operator's integration says of the cached job.
pub(super) fn held(world: &World, now: Timestamp) -> bool {
    let key = ObjectKey::new(world.cache.job.metadata.namespace.as_deref(), "j");
    matches!(
        world.rival.check(&key, &world.cache.job, now),
        Verdict::Held { .. }
    )
}

pub(super) fn check(world: &World) -> Result<(), String> {
    let Some(pass) = &world.facts.rival_pass else {
        return Ok(());
    };
    if pass.visible && pass.wrote {
        return Err(
            "a pass wrote to the job while its cache showed another controller's status write \
             of the last minute"
                .into(),
        );
    }
    if pass.held && !pass.visible {
        return Err(
            "a pass held a job no other controller wrote in the last minute since the operator \
             started"
                .into(),
        );
    }
    Ok(())
}
