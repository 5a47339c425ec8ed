//! The fault suite's tables (issue #29, point 11, for `docs/reliability.md`),
//! rendered from a results file `FAULT_RECORD=<name> make test-faults`
//! wrote: `results.scenarios` holds each scenario's `FAULT-RESULT` figures
//! (`tests/faults/harness.rs`, `report`), `results.tests` libtest's counts.
//!
//! - `faults-run`: the run in one row (tests passed, the suite's seconds,
//!   seed, rounds, commit, date, load).
//! - `faults`: one row per scenario, its figures in words and what the
//!   test asserts, with the bounds the file carries (`*_bound*`).
//! - `faults scenario=<id>`: every figure of one scenario, as recorded.
use serde_json::Value;

use crate::results_numbers::grouped;

/// One value as the docs show it: integers grouped by thousands, other
/// numbers as recorded, booleans as yes/no, text as is (`none` when
/// empty, as the flags of an operator run without any); `?` when missing.
fn show(v: &Value) -> String {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map_or_else(|| n.to_string(), |i| grouped(i as f64, 0)),
        Value::Bool(b) => if *b { "yes" } else { "no" }.to_owned(),
        Value::String(s) if s.is_empty() => "none".to_owned(),
        Value::String(s) => s.clone(),
        Value::Null => "?".to_owned(),
        other => other.to_string(),
    }
}

fn scenarios(doc: &Value) -> Result<&Vec<Value>, String> {
    doc["results"]["scenarios"]
        .as_array()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| "no results.scenarios (not a FAULT_RECORD file?)".to_owned())
}

/// Fills `{key}` in `template` with the scenario's figures.
fn fill(template: &str, s: &Value) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out += &rest[..open];
        let Some(close) = rest[open..].find('}') else {
            break;
        };
        out += &show(&s[&rest[open + 1..open + close]]);
        rest = &rest[open + close + 1..];
    }
    out + rest
}

/// Per scenario id: the fault, its figures and what the test asserts, as
/// templates over the recorded keys. The order is the table's.
const ROWS: [(&str, &str, &str, &str); 19] = [
    (
        "sigkill",
        "operator SIGKILL, {rounds} rounds × {jobs} jobs vs an undisturbed twin",
        "restarts counted {counted_restarts} = {injected_restarts} injected; **{kills_in_window} of {aimed_kills} aimed kills in the bookkeeping window**; {mismatched_jobs} jobs differing; Pod UIDs {pod_uids} = {reference_pod_uids}; audit {audit_pod_creates} Pod creates ({audit_pod_creates_cancelled} cut short); {create_conflicts} create conflicts",
        "counted = injected; ≥ 1 aimed kill in the window; 0 differing; 0 conflicts",
    ),
    (
        "sigkill-all-namespaces",
        "the same, all-namespaces mode ({rounds} rounds × {jobs} jobs, checked against the scripts)",
        "restarts counted {counted_restarts} = {injected_restarts} injected; **{kills_in_window} of {aimed_kills} aimed kills in the window**; {mismatched_jobs} jobs differing; {pod_uids} Pod UIDs; {create_conflicts} create conflicts",
        "the same",
    ),
    (
        "failover-sigstop",
        "leader SIGSTOP/SIGCONT, {rounds} rounds",
        "takeover p50 {lease_p50_s} s, **p95 {lease_p95_s} s**, max {lease_max_s} s; first Pod by the new leader p95 {first_write_p95_s} s; {old_leader_late_writes} writes of an old leader after its successor's first",
        "p95 ≤ {lease_p95_bound_s} s; 0 late writes",
    ),
    (
        "failover-sigstop-all-namespaces",
        "the same, all-namespaces mode, {rounds} rounds",
        "takeover p50 {lease_p50_s} s, **p95 {lease_p95_s} s**, max {lease_max_s} s; {old_leader_late_writes} late writes",
        "p95 ≤ {lease_p95_bound_s} s; 0 late writes",
    ),
    (
        "sigterm-handover",
        "SIGTERM under load ({jobs} jobs × 4)",
        "exited {exit_s} s after SIGTERM; Lease released: {lease_released}; the standby held it **{handover_after_exit_s} s** after the exit; {duplicate_pods} duplicate Pods; {old_leader_late_writes} late writes, {old_leader_errors} errors of the old leader",
        "≤ {handover_bound_s} s; released; 0 duplicates, 0 late writes",
    ),
    (
        "lease-release-wakes-standby",
        "Lease released, standby waiting ({rounds} rounds, {retry_period_s} s retry period)",
        "handover p50 {handover_p50_s} s, max {handover_max_s} s",
        "well under the retry period",
    ),
    (
        "etcd-sigstop",
        "etcd SIGSTOP {stopped_s} s",
        "converged {converged_after_s} s after SIGCONT; {operator_restarts} operator restarts (a lost Lease, by design); {duplicate_pods} duplicate Pods",
        "converges; 0 duplicates",
    ),
    (
        "webhook-500",
        "admission webhook answering 500 for {fault_s} s",
        "{pod_creates_500} Pod creates answered 500 ({answered_500} of {requests_during_fault} requests); peak {peak_requests_per_s}/s, {late_requests_per_s}/s in the second half; converged {converged_after_fault_s} s after; {duplicate_pods} duplicates",
        "≥ 1 refused; ≤ {late_requests_per_s_bound}/s in the second half",
    ),
    (
        "apf-429",
        "APF 429 for {fault_s} s, {jobs} jobs",
        "**{answered_429} requests answered 429** of {requests_during_fault}; peak {peak_requests_per_s}/s, {late_requests_per_s}/s in the second half; converged {converged_after_fault_s} s after; {operator_restarts} restarts, {duplicate_pods} duplicates",
        "≥ 1 refused; ≤ {late_requests_per_s_bound}/s in the second half",
    ),
    (
        "half-open",
        "half-open connection (every connection stranded)",
        "the dead watch noticed **{noticed_s} s** after; the deleted Pod back at {recovered_s} s, everything converged {converged_after_s} s later, over {new_connections} new connections; {operator_restarts} restarts",
        "noticed (HTTP/2 ping: 30 s idle + 15 s); recovers",
    ),
    (
        "partition",
        "watch cut, forced 410",
        "cut: converged {cut_converged_s} s; 410: {relists_logged} relists logged, **{unchanged_idle_jobs_reconciled_after_410} of {idle_jobs} unchanged idle jobs re-reconciled** ({reconciles_after_410} reconciles), converged {relist_converged_s} s; {operator_restarts_during_410} restarts during the 410",
        "a relist; fewer than half re-reconciled; 0 restarts in the 410 step",
    ),
    (
        "partition-all-namespaces",
        "the same, all-namespaces mode",
        "cut: converged {cut_converged_s} s; 410: {relists_logged} relists, **{unchanged_idle_jobs_reconciled_after_410} of {idle_jobs} re-reconciled** ({reconciles_after_410} reconciles), converged {relist_converged_s} s",
        "the same",
    ),
    (
        "partition-defaults",
        "{partition_s} s blackhole at the default lease settings, {jobs} jobs",
        "{operator_restarts_in_partition} operator restarts in the partition ({operator_restarts} in all); **recovered {recovered_s} s** after the heal; {duplicate_pod_slots} duplicate Pod slots, {create_conflicts} conflicts, {children_recreated_for_deleted_job} children of the deleted job re-created",
        "≤ {recovery_bound_s} s; nothing lost; 0 duplicates",
    ),
    (
        "user-deletes",
        "user deletes a Pod, a Service, a {deleted_job_workers}-Worker job mid-creation, a namespace",
        "Pod back in {pod_recreated_s} s, Service in {service_recreated_s} s; **{pod_creates_after_job_delete} Pod creates after the job's delete**, its children gone in {deleted_job_children_gone_s} s; over {watched_after_ns_gone_s} s after the namespace was gone: **{log_lines_naming_ns_after_gone} log lines naming it** (last: {last_line_naming_ns_after_gone_s} s), {reconcile_errors_after_ns_gone} reconcile errors, {error_log_lines_after_ns_gone} ERROR lines",
        "≤ {pod_creates_after_job_delete_bound} late creates; last line ≤ {last_line_naming_ns_bound_s} s; 0 errors",
    ),
    (
        "undecodable",
        "a TFJob our types cannot decode (CRD without a spec schema)",
        "Warning Event on the object: {event_on_object}; logged: {logged}; decode failures counted: {decode_failures}; Pods kept: {pods_kept}",
        "all four",
    ),
    (
        "invalid-manifests",
        "{cases} invalid manifests",
        "{refused_naming_path} refused naming the field path, {refused_without_path} refused without it, {accepted} accepted",
        "all refused naming the path",
    ),
    (
        "scale",
        "{jobs} TFJobs × 4 created at once (dev build)",
        "{succeeded} Succeeded in {total_s} s (created in {create_s} s); {reconcile_errors} reconcile errors, {error_log_lines} ERROR lines, {duplicate_pods} duplicate Pods, {create_409} create 409s; {operator_requests} operator requests; peak RSS {peak_rss_mib} MiB",
        "all Succeeded; 0 errors, duplicates, create 409s",
    ),
    (
        "requests",
        "requests of one 4-replica job (audit log; operator flags: `{flags}`)",
        "to Running `{to_running}`; to Succeeded `{to_succeeded}`",
        "each child created once; ≤ 2 status writes to Running; 8 create Events (2 under `--fold-create-events`)",
    ),
    (
        "requests-fold-create-events",
        "the same (operator flags: `{flags}`)",
        "to Running `{to_running}`; to Succeeded `{to_succeeded}`",
        "the same",
    ),
];

/// `faults`: one row per recorded scenario, in [`ROWS`]' order, then any
/// scenario [`ROWS`] does not know, its figures as recorded.
pub fn faults_table(doc: &Value) -> Result<String, String> {
    let all = scenarios(doc)?;
    let seed = show(&all[0]["seed"]);
    let mut out = format!("| fault | figures (seed {seed}) | asserted |\n|---|---|---|\n");
    let id = |s: &Value| s["scenario"].as_str().unwrap_or("?").to_owned();
    for (scenario, fault, figures, asserted) in ROWS {
        for s in all.iter().filter(|s| id(s) == scenario) {
            out += &format!(
                "| {} | {} | {} |\n",
                fill(fault, s),
                fill(figures, s),
                fill(asserted, s)
            );
        }
    }
    for s in all.iter().filter(|s| !ROWS.iter().any(|r| r.0 == id(s))) {
        let fields: Vec<String> = figures(s).map(|(k, v)| format!("{k} {v}")).collect();
        out += &format!("| `{}` | {} | – |\n", id(s), fields.join("; "));
    }
    Ok(out)
}

/// A scenario's own figures: all but the run's settings.
fn figures(s: &Value) -> impl Iterator<Item = (&String, String)> {
    s.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !["scenario", "seed", "rounds_setting", "full"].contains(&k.as_str()))
        .map(|(k, v)| (k, show(v)))
}

/// `faults scenario=<id>`: every figure that scenario recorded.
pub fn scenario_table(doc: &Value, id: &str) -> Result<String, String> {
    let s = scenarios(doc)?
        .iter()
        .find(|s| s["scenario"] == id)
        .ok_or(format!("no scenario {id} in the file"))?;
    let mut out = String::from("| figure | value |\n|---|---:|\n");
    for (k, v) in figures(s) {
        out += &format!("| `{k}` | {v} |\n");
    }
    Ok(out)
}

/// `faults-run`: the run itself.
pub fn run_table(doc: &Value) -> Result<String, String> {
    let all = scenarios(doc)?;
    let tests = &doc["results"]["tests"];
    let meta = |k: &str| doc["meta"][k].as_str().unwrap_or("?").to_owned();
    let commit: String = meta("commit").chars().take(7).collect();
    let dirty = if meta("commit").ends_with("-dirty") {
        "-dirty"
    } else {
        ""
    };
    Ok(format!(
        "| tests passed | failed | scenarios recorded | suite (s) | seed | rounds | commit | date | machine |\n\
         |---:|---:|---:|---:|---:|---:|---|---|---|\n\
         | {} | {} | {} | {} | {} | {} | `{commit}{dirty}` | {} | {} |\n",
        show(&tests["passed"]),
        show(&tests["failed"]),
        all.len(),
        show(&doc["results"]["suite_s"]),
        show(&all[0]["seed"]),
        show(&all[0]["rounds_setting"]),
        meta("date"),
        meta("machine"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Value {
        json!({"meta": {"commit": "0123456789abcdef", "command": "make test-faults",
            "machine": "2 cores; load average 9 before, 10 after", "date": "2026-11-27T12:00:00Z"},
            "results": {"tests": {"passed": 21, "failed": 0}, "suite_s": 2400, "scenarios": [
            {"scenario": "failover-sigstop", "seed": 20, "rounds_setting": 20, "full": true,
             "rounds": 20, "lease_p50_s": 15.1, "lease_p95_s": 15.2, "lease_max_s": 15.3,
             "first_write_p50_s": 15.2, "first_write_p95_s": 15.4, "old_leader_late_writes": 0,
             "lease_p95_bound_s": 17},
            {"scenario": "something-new", "seed": 20, "rounds_setting": 20, "full": true,
             "operator_requests": 11190, "kept": true}
        ]}})
    }

    #[test]
    fn results_a_fault_row_shows_the_figure_against_its_bound() {
        let t = faults_table(&file()).expect("renders");
        assert!(
            t.contains("| leader SIGSTOP/SIGCONT, 20 rounds | takeover p50 15.1 s, **p95 15.2 s**, max 15.3 s; first Pod by the new leader p95 15.4 s; 0 writes of an old leader after its successor's first | p95 ≤ 17 s; 0 late writes |"),
            "{t}"
        );
        assert!(
            t.contains("| `something-new` | kept yes; operator_requests 11,190 | – |"),
            "{t}"
        );
        assert!(faults_table(&json!({"results": {"runs": []}})).is_err());
    }

    #[test]
    fn results_a_scenario_table_lists_its_figures_and_the_run_table_its_meta() {
        let t = scenario_table(&file(), "failover-sigstop").expect("renders");
        assert!(t.contains("| `lease_p95_s` | 15.2 |\n"), "{t}");
        assert!(!t.contains("rounds_setting"), "{t}");
        assert!(scenario_table(&file(), "nope").is_err());
        let r = run_table(&file()).expect("renders");
        assert!(
            r.contains("| 21 | 0 | 2 | 2,400 | 20 | 20 | `0123456` | 2026-11-27T12:00:00Z | 2 cores; load average 9 before, 10 after |"),
            "{r}"
        );
    }
}
