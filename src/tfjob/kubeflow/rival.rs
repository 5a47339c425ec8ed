//! "Both at once, by mistake": Kubeflow's training-operator still runs its
//! TFJob controller beside this one (the chart installed before it was
//! stopped). Two controllers writing one job's status and deleting its
//! failed Pods fight until one stops; this one can tell, and step back.
//!
//! The sign is the job's `managedFields`: an entry for the `status`
//! subresource whose manager is training-operator's (`training-operator.v1`,
//! its binary's name, which client-go sends as the user agent) with a time
//! later than this process's start. An entry older than that is history (the
//! writes it made before the switch) and is no reason to wait. Field
//! ownership only moves on a write, so a rival that stopped leaves its last
//! time behind and is not seen again once this process restarts after it.
//!
//! What the controller does with a rival's job (to be wired in
//! `reconcile.rs`, before the plan, like [`crate::tfjob::integrations::managed_by`]): no write at
//! all, one Warning ([`REASON_RIVAL_CONTROLLER`]) per job and manager, and a
//! `/readyz` line. docs/operating.md, "Moving from training-operator".
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;

/// The Warning's reason.
pub const REASON_RIVAL_CONTROLLER: &str = "AnotherControllerWritesStatus";

/// Field managers known to run TFJobs: training-operator's binaries.
const RIVALS: [&str; 1] = ["training-operator"];

/// Another controller's status write to `job` later than `since`: its
/// manager's name and when.
pub fn status_written_by_rival(job: &TFJob, since: Timestamp) -> Option<(String, Timestamp)> {
    job.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| {
            let manager = m.manager.as_deref()?;
            let at = m.time.as_ref()?.0;
            (RIVALS.iter().any(|r| manager.starts_with(r)) && at > since)
                .then(|| (manager.to_owned(), at))
        })
        .max_by_key(|(_, at)| *at)
}

/// What a pass does about a rival.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody else writes the job: reconcile it.
    Alone,
    /// `manager` writes the job's status: no writes. `warning` is the
    /// Warning's message the first time this job is seen so.
    Rival {
        manager: String,
        warning: Option<String>,
    },
}

/// Which jobs were already warned about, for this process's life.
#[derive(Clone, Debug)]
pub struct RivalMemory {
    started: Timestamp,
    warned: Arc<Mutex<HashMap<ObjectKey, String>>>,
}

impl RivalMemory {
    pub fn new(started: Timestamp) -> Self {
        Self {
            started,
            warned: Arc::default(),
        }
    }

    pub fn check(&self, key: &ObjectKey, job: &TFJob) -> Verdict {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let Some((manager, at)) = status_written_by_rival(job, self.started) else {
            return Verdict::Alone;
        };
        let first = warned.get(key) != Some(&manager);
        warned.insert(key.clone(), manager.clone());
        let warning = first.then(|| {
            format!(
                "{manager} wrote this job's status at {at}, after this operator started: \
                 two controllers run it; this one makes no writes to it until {manager} stops \
                 (docs/operating.md, \"Moving from training-operator\")"
            )
        });
        Verdict::Rival { manager, warning }
    }

    /// The `/readyz` line: how many jobs another controller writes.
    pub fn readyz_line(&self) -> Option<String> {
        let warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let mut managers: Vec<&str> = warned.values().map(String::as_str).collect();
        managers.sort_unstable();
        managers.dedup();
        (!warned.is_empty()).then(|| {
            format!(
                "rival controllers: {} writing the status of {} TFJob(s); not reconciling those",
                managers.join(", "),
                warned.len()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    use super::*;
    use crate::api::fixtures::TfJobFixture;

    const STARTED: i64 = 1_800_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(STARTED + secs).unwrap()
    }

    fn job_with_status_writer(manager: &str, secs_after_start: i64) -> TFJob {
        let mut job = TfJobFixture::new("j").workers(1).build();
        job.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: Some("status".into()),
            time: Some(Time(at(secs_after_start))),
            ..Default::default()
        }]);
        job
    }

    fn key() -> ObjectKey {
        ObjectKey::new(Some("default"), "j")
    }

    #[test]
    fn a_status_write_by_training_operator_after_we_started_is_a_rival() {
        let memory = RivalMemory::new(at(0));
        let job = job_with_status_writer("training-operator.v1", 30);
        match memory.check(&key(), &job) {
            Verdict::Rival { manager, warning } => {
                assert_eq!(manager, "training-operator.v1");
                assert!(warning.unwrap().contains("makes no writes to it"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn its_writes_from_before_we_started_are_history() {
        let memory = RivalMemory::new(at(0));
        let job = job_with_status_writer("training-operator.v1", -5);
        assert_eq!(memory.check(&key(), &job), Verdict::Alone);
        assert_eq!(memory.readyz_line(), None);
    }

    #[test]
    fn other_managers_and_writes_to_the_main_resource_are_not_rivals() {
        let memory = RivalMemory::new(at(0));
        let job = job_with_status_writer("kubectl-edit", 30);
        assert_eq!(memory.check(&key(), &job), Verdict::Alone);
        let mut job = job_with_status_writer("training-operator.v1", 30);
        job.metadata.managed_fields.as_mut().unwrap()[0].subresource = None;
        assert_eq!(memory.check(&key(), &job), Verdict::Alone);
    }

    #[test]
    fn the_warning_is_given_once_per_job_and_readyz_says_so() {
        let memory = RivalMemory::new(at(0));
        let job = job_with_status_writer("training-operator.v1", 30);
        let warnings = (0..3)
            .filter(|_| {
                matches!(
                    memory.check(&key(), &job),
                    Verdict::Rival {
                        warning: Some(_),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(warnings, 1);
        assert_eq!(
            memory.readyz_line().as_deref(),
            Some(
                "rival controllers: training-operator.v1 writing the status of 1 TFJob(s); not reconciling those"
            )
        );
    }
}
