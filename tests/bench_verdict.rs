//! The verdict of `make bench-e2e` (`benches/e2e/verdict.rs`, issue #29
//! point 10) on hand-written runs: each way a run can be unusable makes the
//! bench fail, and a clean run passes. No cluster needed.

#[path = "../benches/e2e/verdict.rs"]
mod verdict;

use serde_json::{Value, json};

fn clean(peer: &str) -> Value {
    json!({
        "workload": "jobs",
        "peer": peer,
        "outcome": "ok",
        "duplicate_pod_creates": 0,
        "duplicate_service_creates": 0,
        "already_exists": 0,
        "api_errors_by_code": {"409 update tfjobs/status": 3, "429 create pods": 2},
        "events_dropped": if peer.starts_with("ours") { json!(0) } else { Value::Null },
        "event_write_failures": if peer.starts_with("ours") { json!(0) } else { Value::Null },
    })
}

fn with(mut run: Value, key: &str, value: Value) -> Value {
    run[key] = value;
    run
}

#[test]
fn clean_runs_of_every_peer_kind_pass() {
    for peer in ["ours-default", "training-operator-matched", "raw"] {
        assert_eq!(
            verdict::problems(&clean(peer)),
            Vec::<String>::new(),
            "{peer}"
        );
    }
    let doc = json!({"runs": [clean("ours-default"), clean("raw")]});
    assert!(verdict::check_document(&doc).is_empty());
}

#[test]
fn a_job_that_never_finishes_fails_the_bench() {
    let run = with(
        clean("ours-default"),
        "outcome",
        json!("timeout in the succeeded phase after 600s"),
    );
    let found = verdict::problems(&run);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("timeout in the succeeded phase"),
        "{found:?}"
    );
}

#[test]
fn a_duplicate_create_fails_the_bench() {
    for key in [
        "duplicate_pod_creates",
        "duplicate_service_creates",
        "already_exists",
    ] {
        let found = verdict::problems(&with(clean("training-operator-default"), key, json!(1)));
        assert_eq!(
            found,
            ["jobs × training-operator-default: 1 duplicate creates"],
            "{key}"
        );
    }
}

#[test]
fn an_api_error_other_than_conflict_or_overload_fails_the_bench() {
    let run = with(
        clean("raw"),
        "api_errors_by_code",
        json!({"409 update tfjobs/status": 1, "500 create pods": 4, "403 create events": 1}),
    );
    let mut found = verdict::problems(&run);
    found.sort();
    assert_eq!(
        found,
        [
            "jobs × raw: 1 × API error 403 create events",
            "jobs × raw: 4 × API error 500 create pods"
        ]
    );
}

#[test]
fn a_discovery_404_for_an_api_not_served_is_an_answer_but_a_resources_404_fails() {
    let run = with(
        clean("ours-default"),
        "api_errors_by_code",
        json!({"404 get -": 3, "404 get pods": 1}),
    );
    assert_eq!(
        verdict::problems(&run),
        ["jobs × ours-default: 1 × API error 404 get pods"]
    );
}

#[test]
fn a_dropped_or_unwritten_event_fails_the_bench() {
    let found = verdict::problems(&with(clean("ours-matched"), "events_dropped", json!(187)));
    assert_eq!(
        found,
        [
            "jobs × ours-matched: 187 Events dropped (tfjob_operator_events_dropped_total{reason=\"queue_full\"})"
        ]
    );
    let found = verdict::problems(&with(
        clean("ours-matched"),
        "event_write_failures",
        json!(2),
    ));
    assert_eq!(found.len(), 1, "{found:?}");
}

#[test]
fn events_the_spam_filter_held_back_are_clientgo_behaviour_not_a_failure() {
    // One job of 500 workers: 1,003 Events about one TFJob, 25 let through at
    // once by client-go's spam filter, 978 held back (2026-11-27's big run).
    let run = with(clean("ours-default"), "events_spam_filtered", json!(978));
    assert!(verdict::problems(&run).is_empty());
}

#[test]
fn our_event_counters_unread_fail_the_bench_rather_than_pass_unseen() {
    let found = verdict::problems(&with(clean("ours-default"), "events_dropped", Value::Null));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("were not read"), "{found:?}");
}

#[test]
fn results_without_runs_fail() {
    assert_eq!(verdict::check_document(&json!({"runs": []})).len(), 1);
    assert_eq!(verdict::check_document(&json!({})).len(), 1);
}

#[path = "../benches/e2e/same_run.rs"]
mod same_run;

#[test]
fn same_run_medians_pair_the_ith_runs_and_take_the_middle() {
    // ours, raw, ours, raw, ours, raw: the machine slowed down in the middle.
    let ours = [10.0, 30.0, 12.0];
    let raw = [8.0, 20.0, 10.0];
    let ratios = same_run::paired_ratios(&ours, &raw);
    assert_eq!(ratios, [1.25, 1.5, 1.2]);
    assert_eq!(same_run::median(&ratios), Some(1.25));
    assert_eq!(same_run::median(&[1.0, 3.0]), Some(2.0));
    assert_eq!(same_run::median(&[]), None);
    assert_eq!(
        same_run::paired_ratios(&[1.0, 2.0], &[0.0]),
        Vec::<f64>::new()
    );
}
