//! Kubeflow's training-operator seen from a job's `managedFields`: who else
//! writes TFJob status, and the informer transform that keeps just that of
//! them. What this operator does about it (no writes while another
//! controller writes the job, a Warning, a `/readyz` line) is the
//! integration [`crate::tfjob::integrations::rival`].
//!
//! training-operator writes status with full updates of the `status`
//! subresource (`r.Status().Update`), only when the status it computes
//! differs from the stored one. The API server records the writer as a
//! `managedFields` entry (manager: its binary's name, `training-operator.v1`,
//! which client-go sends as the user agent; subresource `status`), and
//! moves the entry's time only when that writer changes a field: the time
//! is when it last changed the job's status.
use jiff::Timestamp;

use crate::api::types::TFJob;

/// Field managers of controllers known to run TFJobs: training-operator's
/// binaries (`training-operator.v1`, and the older `training-operator`).
pub const RIVALS: [&str; 1] = ["training-operator"];

/// Whether `manager` is one of [`RIVALS`].
pub fn is_rival(manager: &str) -> bool {
    RIVALS.iter().any(|r| manager.starts_with(r))
}

/// The newest status write to `job` by a controller of [`RIVALS`]: its
/// manager's name and when.
pub fn last_rival_status_write(job: &TFJob) -> Option<(&str, Timestamp)> {
    job.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| {
            let manager = m.manager.as_deref().filter(|m| is_rival(m))?;
            Some((manager, m.time.as_ref()?.0))
        })
        .max_by_key(|(_, at)| *at)
}

/// The TFJob informer's transform: keeps of `metadata.managedFields` only
/// the status entries of [`RIVALS`], without their field sets (who and
/// when is all [`last_rival_status_write`] reads). A job nobody else writes
/// is cached without any, as every other kind is; one another controller
/// writes carries one entry of about a hundred bytes.
pub fn keep_rival_status_writes(job: &mut TFJob) {
    let Some(entries) = job.metadata.managed_fields.as_mut() else {
        return;
    };
    entries.retain(|m| {
        m.subresource.as_deref() == Some("status") && m.manager.as_deref().is_some_and(is_rival)
    });
    if entries.is_empty() {
        job.metadata.managed_fields = None;
        return;
    }
    for entry in entries.iter_mut() {
        entry.fields_v1 = None;
        entry.fields_type = None;
    }
    entries.shrink_to_fit();
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};

    use super::*;
    use crate::api::fixtures::TfJobFixture;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn entry(manager: &str, subresource: Option<&str>, secs: i64) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: subresource.map(str::to_owned),
            time: Some(Time(at(secs))),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(serde_json::json!({"f:status": {}}))),
            ..Default::default()
        }
    }

    fn job_with(entries: Vec<ManagedFieldsEntry>) -> TFJob {
        let mut job = TfJobFixture::new("j").workers(1).build();
        job.metadata.managed_fields = Some(entries);
        job
    }

    #[test]
    fn the_newest_status_write_of_training_operator_is_found_and_others_are_not_rivals() {
        let job = job_with(vec![
            entry("kubectl-client-side-apply", None, 0),
            entry("tfjob-operator", Some("status"), 50),
            entry("training-operator.v1", Some("status"), 30),
            entry("training-operator.v1", None, 40),
            entry("training-operator", Some("status"), 20),
        ]);
        assert_eq!(
            last_rival_status_write(&job),
            Some(("training-operator.v1", at(30)))
        );
        let ours = job_with(vec![
            entry("tfjob-operator", Some("status"), 50),
            entry("training-operator.v1", None, 40),
        ]);
        assert_eq!(last_rival_status_write(&ours), None);
    }

    #[test]
    fn the_transform_keeps_only_rival_status_entries_without_their_field_sets() {
        let mut job = job_with(vec![
            entry("kubectl-client-side-apply", None, 0),
            entry("tfjob-operator", Some("status"), 50),
            entry("training-operator.v1", Some("status"), 30),
            entry("training-operator.v1", None, 40),
        ]);
        keep_rival_status_writes(&mut job);
        let kept = job.metadata.managed_fields.as_deref().unwrap_or_default();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].manager.as_deref(), Some("training-operator.v1"));
        assert_eq!(kept[0].time, Some(Time(at(30))));
        assert_eq!(kept[0].fields_v1, None);
        assert_eq!(
            last_rival_status_write(&job),
            Some(("training-operator.v1", at(30)))
        );
    }

    #[test]
    fn a_job_nobody_else_writes_is_cached_without_managed_fields() {
        let mut job = job_with(vec![
            entry("kubectl-client-side-apply", None, 0),
            entry("tfjob-operator", Some("status"), 50),
        ]);
        keep_rival_status_writes(&mut job);
        assert_eq!(job.metadata.managed_fields, None);
        let mut bare = TfJobFixture::new("j").workers(1).build();
        keep_rival_status_writes(&mut bare);
        assert_eq!(bare.metadata.managed_fields, None);
    }
}
