//! Whether a run's numbers can be published: the checks that make
//! `make bench-e2e` exit non-zero (issue #29, point 10), the same as
//! `make bench-scale`'s (`e2e/scale/report.py`, `problems`), plus dropped
//! Events.
//!
//! A run fails when it did not end "ok" (a job that never finished, a peer
//! that exited, a failed apply), created a Pod or Service twice for one
//! replica (or met AlreadyExists on a create), met an API error other than
//! 409 Conflict (optimistic concurrency on status writes, by design) or 429
//! (the `*-apf` runs' cap, by design), or — for our operator, the only peer
//! whose recorder can be read — dropped an Event from a full queue or failed
//! to write one. Events the spam filter held back (`events_spam_filtered`:
//! client-go's 25 per object, then one per 5 minutes, which
//! training-operator's recorder applies alike) are reported, not failed on:
//! one job of 500 workers has 1,002 per-child Events about one object.
//!
//! It reads the JSON the bench writes (`target/bench/e2e.json`), so a
//! committed results file can be checked again later (`e2e check FILE`).
//! Kept free of the bench's other modules so `tests/bench_verdict.rs` can
//! test it without a cluster.

use serde_json::Value;

/// API error codes a run may meet and still count (see the module docs).
pub(crate) const ALLOWED_ERROR_CODES: [&str; 2] = ["409", "429"];

/// Answers counted as errors that are answers: a discovery GET of an API
/// group the server does not serve (no resource: `-`) is 404, and under
/// `--kueue=auto` the operator asks for Kueue's group every 10 s until it
/// is found (issue #38, defect 1). A 404 on a resource still fails a run.
pub(crate) const DISCOVERY_NOT_SERVED: &str = "404 get -";

/// What makes one run's numbers unusable, as sentences; empty when usable.
pub(crate) fn problems(run: &Value) -> Vec<String> {
    let count = |key: &str| run[key].as_u64().unwrap_or(0);
    let where_ = format!(
        "{} × {}",
        run["workload"].as_str().unwrap_or("?"),
        run["peer"].as_str().unwrap_or("?")
    );
    let mut found = Vec::new();
    match run["outcome"].as_str() {
        Some("ok") => {}
        Some(outcome) => found.push(format!("{where_}: {outcome}")),
        None => found.push(format!("{where_}: no outcome recorded")),
    }
    let duplicates = count("duplicate_pod_creates")
        + count("duplicate_service_creates")
        + count("already_exists");
    if duplicates > 0 {
        found.push(format!("{where_}: {duplicates} duplicate creates"));
    }
    if let Some(errors) = run["api_errors_by_code"].as_object() {
        for (key, n) in errors {
            let code = key.split(' ').next().unwrap_or_default();
            if !ALLOWED_ERROR_CODES.contains(&code) && key != DISCOVERY_NOT_SERVED {
                found.push(format!(
                    "{where_}: {} × API error {key}",
                    n.as_u64().unwrap_or(0)
                ));
            }
        }
    }
    let dropped = count("events_dropped");
    if dropped > 0 {
        found.push(format!(
            "{where_}: {dropped} Events dropped (tfjob_operator_events_dropped_total{{reason=\"queue_full\"}})"
        ));
    }
    let failed = count("event_write_failures");
    if failed > 0 {
        found.push(format!(
            "{where_}: {failed} Events not written (tfjob_operator_events_write_failures_total)"
        ));
    }
    if run["peer"].as_str().is_some_and(|p| p.starts_with("ours"))
        && run["outcome"] == "ok"
        && run["events_dropped"].is_null()
    {
        found.push(format!(
            "{where_}: the operator's Event counters were not read (its /metrics did not answer)"
        ));
    }
    found
}

/// The problems of every run in an `e2e.json` document.
pub(crate) fn check_document(doc: &Value) -> Vec<String> {
    match doc["runs"].as_array() {
        Some(runs) if !runs.is_empty() => runs.iter().flat_map(problems).collect(),
        _ => vec!["the results hold no runs".to_owned()],
    }
}
