use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

use super::*;
use crate::api::fixtures::TfJobFixture;
use crate::runtime::manager::server::Readiness;

const STARTED: i64 = 1_800_000_000;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(STARTED + secs).unwrap()
}

fn job_written_by(manager: &str, when: Timestamp) -> TFJob {
    let mut job = TfJobFixture::new("j").uid("u1").workers(1).build();
    job.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Update".into()),
        subresource: Some("status".into()),
        time: Some(Time(when)),
        ..Default::default()
    }]);
    job
}

fn key() -> ObjectKey {
    ObjectKey::new(Some("default"), "j")
}

fn guard() -> RivalGuard {
    RivalGuard::new(at(0), None)
}

fn is_held(verdict: &Verdict) -> bool {
    matches!(verdict, Verdict::Held { .. })
}

#[test]
fn a_status_write_by_training_operator_after_we_started_holds_the_job_with_a_warning() {
    let job = job_written_by("training-operator.v1", at(30));
    let Verdict::Held { write, warning } = guard().check(&key(), &job, at(31)) else {
        panic!("the job must be held");
    };
    assert_eq!(write.manager, "training-operator.v1");
    assert_eq!(write.until(), at(90));
    let warning = warning.expect("a Warning the first time");
    assert!(
        warning.contains("training-operator.v1 wrote this job's status at")
            && warning.contains("makes no writes to it")
            && warning.contains("Stop training-operator.v1's TFJob controller")
            && warning.contains("Moving from training-operator"),
        "{warning}"
    );
}

#[test]
fn its_writes_from_before_we_started_are_history() {
    let job = job_written_by("training-operator.v1", at(-5));
    assert_eq!(guard().check(&key(), &job, at(1)), Verdict::Alone);
}

#[test]
fn a_write_in_the_second_we_started_is_history_since_managed_fields_times_have_whole_seconds() {
    // We started half a second into the second in which training-operator
    // last wrote (a move as the docs say, done quickly): not held. Its
    // write in the next second holds the job.
    let started = at(0) + SignedDuration::from_millis(500);
    let guard = RivalGuard::new(started, None);
    let same_second = job_written_by("training-operator.v1", at(0));
    assert_eq!(guard.check(&key(), &same_second, at(1)), Verdict::Alone);
    let next_second = job_written_by("training-operator.v1", at(1));
    assert!(is_held(&guard.check(&key(), &next_second, at(2))));
}

#[test]
fn other_managers_and_writes_to_the_main_resource_do_not_hold_a_job() {
    let g = guard();
    let job = job_written_by("kubectl-edit", at(30));
    assert_eq!(g.check(&key(), &job, at(31)), Verdict::Alone);
    let mut job = job_written_by("training-operator.v1", at(30));
    job.metadata.managed_fields.as_mut().unwrap()[0].subresource = None;
    assert_eq!(g.check(&key(), &job, at(31)), Verdict::Alone);
    assert!(
        g.lock().is_empty(),
        "jobs nobody else writes are not remembered"
    );
}

#[test]
fn a_job_whose_rival_stopped_writing_comes_back_after_the_quiet_period() {
    // training-operator wrote once after we started, then was stopped: the
    // job is held until QUIET after that write, never longer.
    let g = guard();
    let job = job_written_by("training-operator.v1", at(10));
    assert!(is_held(&g.check(&key(), &job, at(11))));
    assert!(is_held(&g.check(&key(), &job, at(69))));
    assert_eq!(g.check(&key(), &job, at(70)), Verdict::Alone);
    assert_eq!(g.check(&key(), &job, at(10_000)), Verdict::Alone);
}

#[test]
fn every_new_write_extends_the_hold_and_the_warning_is_given_once_per_job_and_manager() {
    let g = guard();
    let warnings = |job: &TFJob, now| match g.check(&key(), job, now) {
        Verdict::Held { warning, .. } => warning.is_some(),
        Verdict::Alone => panic!("held"),
    };
    assert!(warnings(
        &job_written_by("training-operator.v1", at(10)),
        at(11)
    ));
    assert!(!warnings(
        &job_written_by("training-operator.v1", at(10)),
        at(12)
    ));
    // Held again after a quiet spell: still no second Warning.
    let later = job_written_by("training-operator.v1", at(100));
    assert_eq!(
        g.check(
            &key(),
            &job_written_by("training-operator.v1", at(10)),
            at(80)
        ),
        Verdict::Alone
    );
    assert!(!warnings(&later, at(101)));
    assert!(is_held(&g.check(&key(), &later, at(159))));
    // Another of training-operator's binaries is another manager.
    assert!(warnings(
        &job_written_by("training-operator", at(120)),
        at(121)
    ));
}

#[test]
fn a_namesake_of_a_held_job_starts_afresh_and_a_deleted_job_is_forgotten() {
    let g = guard();
    let job = job_written_by("training-operator.v1", at(10));
    assert!(is_held(&g.check(&key(), &job, at(11))));
    let mut namesake = job_written_by("training-operator.v1", at(20));
    namesake.metadata.uid = Some("u2".into());
    let Verdict::Held { warning, .. } = g.check(&key(), &namesake, at(21)) else {
        panic!("held");
    };
    assert!(warning.is_some(), "another job: warned about again");
    g.forget(&key());
    assert!(g.lock().is_empty());
}

#[test]
fn readyz_names_the_held_jobs_and_drops_them_when_their_hold_ends() {
    let readiness = Readiness::new();
    let line = readiness.add_changing_detail("another TFJob controller: asking");
    let g = RivalGuard::new(at(0), Some(line));
    let idle = "ok\nanother TFJob controller: none seen writing a job's status";
    assert_eq!(readiness.body("ok"), idle);
    let job = job_written_by("training-operator.v1", at(10));
    g.check(&key(), &job, at(11));
    let body = readiness.body("ok");
    assert!(
        body.contains("training-operator.v1 writes the status of 1 job(s)")
            && body.contains("default/j (until 2027-01-15T08:01:10Z unless it writes again)"),
        "{body}"
    );
    assert_eq!(
        readiness.check(),
        Err("caches not synced"),
        "unchanged by it"
    );
    g.check(&key(), &job, at(70));
    assert_eq!(readiness.body("ok"), idle);
    g.check(
        &key(),
        &job_written_by("training-operator.v1", at(80)),
        at(81),
    );
    g.forget(&key());
    assert_eq!(readiness.body("ok"), idle);
}

#[test]
fn readyz_names_ten_jobs_and_counts_the_rest() {
    let g = guard();
    for i in 0..12 {
        let job = job_written_by("training-operator.v1", at(10));
        g.check(
            &ObjectKey::new(Some("ns"), &format!("j{i:02}")),
            &job,
            at(11),
        );
    }
    let line = g.readyz_line();
    assert!(
        line.contains("of 12 job(s)") && line.contains("and 2 more"),
        "{line}"
    );
    assert!(
        line.contains("ns/j09 ") && !line.contains("ns/j10 "),
        "{line}"
    );
}

#[test]
fn the_hook_holds_a_job_until_a_second_after_the_quiet_period_ends() {
    let started = Timestamp::now() - SignedDuration::from_secs(60);
    let g = RivalGuard::new(started, None);
    let job = job_written_by(
        "training-operator.v1",
        Timestamp::now() - SignedDuration::from_secs(10),
    );
    let hold = g.hold(&key(), &job).expect("held");
    assert!(
        (Duration::from_secs(50)..=Duration::from_secs(51)).contains(&hold.recheck_after),
        "{hold:?}"
    );
    assert_eq!(
        hold.warning.map(|(reason, _)| reason),
        Some(REASON_RIVAL_CONTROLLER)
    );
    assert_eq!(g.hold(&key(), &job).and_then(|h| h.warning), None);
    let quiet = job_written_by(
        "training-operator.v1",
        Timestamp::now() - SignedDuration::from_secs(61),
    );
    assert_eq!(g.hold(&key(), &quiet), None);
}
