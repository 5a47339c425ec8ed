//! Job conditions, with Kubeflow's update rules (`pkg/util/status.go`
//! `UpdateJobConditions` / `setCondition` / `filterOutCondition`):
//!
//! - nothing changes once the job has Failed;
//! - the same type with the same status and reason is a no-op (so an
//!   unchanged job writes no status);
//! - `lastTransitionTime` is kept while the status stays the same;
//! - Running and Restarting replace each other;
//! - Succeeded or Failed turn Running to False.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::constants::condition;
use crate::api::types::JobCondition;
use crate::api::types::TFJobStatus;

/// Whether the status has a condition of this type with status True.
pub fn is_true(status: &TFJobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Succeeded or Failed.
pub fn is_finished(status: &TFJobStatus) -> bool {
    is_true(status, condition::SUCCEEDED) || is_true(status, condition::FAILED)
}

/// Sets a condition, following Kubeflow's rules (see the module docs).
pub fn set(
    status: &mut TFJobStatus,
    type_: &str,
    true_: bool,
    reason: &str,
    message: String,
    now: &Time,
) {
    if is_true(status, condition::FAILED) {
        return;
    }
    let state = if true_ { "True" } else { "False" };
    let current = status.conditions.iter().find(|c| c.type_ == type_);
    if let Some(c) = current
        && c.status == state
        && c.reason.as_deref() == Some(reason)
    {
        return;
    }
    let transition = match current {
        Some(c) if c.status == state => c.last_transition_time.clone(),
        _ => Some(now.clone()),
    };
    let replaced_by = |other: &str| {
        other == type_
            || (type_ == condition::RESTARTING && other == condition::RUNNING)
            || (type_ == condition::RUNNING && other == condition::RESTARTING)
    };
    let finishing = type_ == condition::SUCCEEDED || type_ == condition::FAILED;
    let mut conditions: Vec<JobCondition> = status
        .conditions
        .drain(..)
        .filter(|c| !replaced_by(&c.type_))
        .map(|mut c| {
            if finishing && c.type_ == condition::RUNNING {
                c.status = "False".into();
            }
            c
        })
        .collect();
    conditions.push(JobCondition {
        type_: type_.to_owned(),
        status: state.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_update_time: Some(now.clone()),
        last_transition_time: transition,
    });
    status.conditions = conditions;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::constants::reason;

    fn t(secs: i64) -> Time {
        Time(jiff::Timestamp::from_second(secs).unwrap())
    }

    fn types(s: &TFJobStatus) -> Vec<(&str, &str)> {
        s.conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect()
    }

    #[test]
    fn same_status_and_reason_changes_nothing() {
        let mut s = TFJobStatus::default();
        set(
            &mut s,
            condition::RUNNING,
            true,
            reason::RUNNING,
            "a".into(),
            &t(1),
        );
        let before = s.clone();
        set(
            &mut s,
            condition::RUNNING,
            true,
            reason::RUNNING,
            "b".into(),
            &t(2),
        );
        assert_eq!(s, before);
    }

    #[test]
    fn running_and_restarting_replace_each_other() {
        let mut s = TFJobStatus::default();
        set(
            &mut s,
            condition::CREATED,
            true,
            reason::CREATED,
            String::new(),
            &t(0),
        );
        set(
            &mut s,
            condition::RUNNING,
            true,
            reason::RUNNING,
            String::new(),
            &t(1),
        );
        set(
            &mut s,
            condition::RESTARTING,
            true,
            reason::RESTARTING,
            String::new(),
            &t(2),
        );
        assert_eq!(types(&s), [("Created", "True"), ("Restarting", "True")]);
        set(
            &mut s,
            condition::RUNNING,
            true,
            reason::RUNNING,
            String::new(),
            &t(3),
        );
        assert_eq!(types(&s), [("Created", "True"), ("Running", "True")]);
    }

    #[test]
    fn success_turns_running_false_and_is_last() {
        let mut s = TFJobStatus::default();
        set(
            &mut s,
            condition::RUNNING,
            true,
            reason::RUNNING,
            String::new(),
            &t(1),
        );
        set(
            &mut s,
            condition::SUCCEEDED,
            true,
            reason::SUCCEEDED,
            String::new(),
            &t(2),
        );
        assert_eq!(types(&s), [("Running", "False"), ("Succeeded", "True")]);
        assert!(is_finished(&s));
    }

    #[test]
    fn nothing_changes_after_failed() {
        let mut s = TFJobStatus::default();
        set(
            &mut s,
            condition::FAILED,
            true,
            reason::FAILED,
            String::new(),
            &t(1),
        );
        let before = s.clone();
        set(
            &mut s,
            condition::SUCCEEDED,
            true,
            reason::SUCCEEDED,
            String::new(),
            &t(2),
        );
        assert_eq!(s, before);
    }

    #[test]
    fn transition_time_is_kept_while_status_is_unchanged() {
        let mut s = TFJobStatus::default();
        set(
            &mut s,
            condition::SUSPENDED,
            true,
            reason::SUSPENDED,
            String::new(),
            &t(1),
        );
        set(
            &mut s,
            condition::SUSPENDED,
            true,
            "Other",
            String::new(),
            &t(5),
        );
        let c = &s.conditions[0];
        assert_eq!(c.last_transition_time, Some(t(1)));
        assert_eq!(c.last_update_time, Some(t(5)));
        set(
            &mut s,
            condition::SUSPENDED,
            false,
            reason::RESUMED,
            String::new(),
            &t(9),
        );
        assert_eq!(s.conditions[0].last_transition_time, Some(t(9)));
    }
}
