//! The table of ratios printed at the end, and `target/bench/e2e.json`.

use serde_json::json;

use crate::peers::Peer;
use crate::run::RunResult;
use crate::same_run::{median, paired_ratios};
use crate::settings::{Settings, Workload};
use crate::{MATCHED_BURST, MATCHED_QPS, MATCHED_WORKERS, RAW_CONCURRENCY};

pub(crate) fn fmt_s(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "-".into(),
    }
}

pub(crate) fn report(results: &[RunResult], workloads: &[Workload], peers: &[Peer]) -> String {
    let mut out = String::new();
    for w in workloads {
        let rows: Vec<&RunResult> = results.iter().filter(|r| r.workload == w.id).collect();
        if rows.is_empty() {
            continue;
        }
        out += &format!("\n## {}: {}\n\n", w.id, w.title);
        out += "| peer | apply → all Running (s) | chief exit → all Succeeded (s) | CPU (s) | peak RSS (MB) | API requests | requests/s | duplicate creates | API errors | outcome |\n";
        out += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
        for r in &rows {
            let label = peers
                .iter()
                .find(|p| p.id == r.peer)
                .map(|p| p.label)
                .unwrap_or("?");
            let mut label = label.to_owned();
            if let Some(qps) = r.client_qps {
                label += &format!(" [QPS {qps:.0}]");
            }
            if let (Some(d), Some(j)) = (r.apf_dispatched, r.apf_rejected) {
                let seats = r.apf_seats.unwrap_or_default();
                label += &format!(" [APF: {seats} seats, {d} dispatched, {j} refused]");
            }
            out += &format!(
                "| {label} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                fmt_s(r.running_s),
                fmt_s(r.succeeded_s),
                r.cpu_s
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_else(|| "-".into()),
                r.peak_rss_mb
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into()),
                r.api_requests,
                fmt_s(r.api_rate_per_s),
                r.duplicate_pod_creates + r.duplicate_service_creates + r.already_exists,
                r.api_errors_by_code.values().sum::<u64>(),
                r.outcome
            );
        }
        out += &breakdown(&rows, w);
        let get = |id: &str| rows.iter().find(|r| r.peer == id).copied();
        let pairs = [
            (
                "ours-default",
                "training-operator-default",
                "ours (defaults) / training-operator (defaults)",
            ),
            (
                "ours-matched",
                "training-operator-matched",
                "ours (matched) / training-operator (matched)",
            ),
            (
                "ours-at-to-rate",
                "training-operator-matched",
                "ours (at its measured rate) / training-operator (matched)",
            ),
            (
                "ours-apf",
                "training-operator-apf",
                "ours (APF cap) / training-operator (APF cap)",
            ),
            ("ours-default", "raw", "ours (defaults) / raw limit"),
            ("ours-matched", "raw", "ours (matched) / raw limit"),
            (
                "ours-default",
                "raw-status",
                "ours (defaults) / raw limit writing status",
            ),
            ("raw-status", "raw", "raw limit writing status / raw limit"),
        ];
        out += &same_run_medians(&rows, &pairs);
        let mut header = false;
        for (a, b, label) in pairs {
            let (Some(a), Some(b)) = (get(a), get(b)) else {
                continue;
            };
            if !header {
                out += "\n| ratio | running time | succeeded time | CPU | peak RSS | API requests |\n|---|---:|---:|---:|---:|---:|\n";
                header = true;
            }
            out += &format!(
                "| {label} | {} | {} | {} | {} | {} |\n",
                ratio(a.running_s, b.running_s),
                ratio(a.succeeded_s, b.succeeded_s),
                ratio(a.cpu_s, b.cpu_s),
                ratio(a.peak_rss_mb, b.peak_rss_mb),
                ratio(Some(a.api_requests as f64), Some(b.api_requests as f64)),
            );
        }
    }
    out
}

/// For each pair of peers that both ran at least twice (repeated in
/// `BENCH_PEERS`): the median of the pairwise running-time ratios.
fn same_run_medians(rows: &[&RunResult], pairs: &[(&str, &str, &str)]) -> String {
    let times = |id: &str| -> Vec<f64> {
        rows.iter()
            .filter(|r| r.peer == id && r.outcome == "ok")
            .filter_map(|r| r.running_s)
            .collect()
    };
    let mut out = String::new();
    for (a, b, label) in pairs {
        let ratios = paired_ratios(&times(a), &times(b));
        let Some(mid) = median(&ratios).filter(|_| ratios.len() >= 2) else {
            continue;
        };
        if out.is_empty() {
            out += "\nSame-run medians (peers repeated in BENCH_PEERS, run in the order listed; the i-th run of each):\n\n| ratio | pairs | median running-time ratio | each pair |\n|---|---:|---:|---|\n";
        }
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}×")).collect();
        out += &format!(
            "| {label} | {} | **{mid:.2}×** | {} |\n",
            ratios.len(),
            each.join(", ")
        );
    }
    out
}

/// The API requests of every peer of one workload by verb and resource (from
/// the audit log), with the count per job: one row per `verb resource`, one
/// column per peer.
pub(crate) fn breakdown(rows: &[&RunResult], w: &Workload) -> String {
    let kinds: std::collections::BTreeSet<&String> = rows
        .iter()
        .flat_map(|r| r.api_requests_by_verb.keys())
        .collect();
    if kinds.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nAPI requests by verb and resource (audit log; per job in brackets, {} jobs):\n\n| request |",
        w.jobs
    );
    for r in rows {
        out += &format!(" {} |", r.peer);
    }
    out += "\n|---|";
    out += &"---:|".repeat(rows.len());
    out += "\n";
    let per_job = |n: u64| n as f64 / w.jobs.max(1) as f64;
    for kind in kinds {
        out += &format!("| {kind} |");
        for r in rows {
            let n = r.api_requests_by_verb.get(kind).copied().unwrap_or(0);
            out += &format!(" {n} ({:.2}) |", per_job(n));
        }
        out += "\n";
    }
    out += "| **total** |";
    for r in rows {
        out += &format!(" **{}** ({:.2}) |", r.api_requests, per_job(r.api_requests));
    }
    out += "\n";
    out
}

pub(crate) fn write_json(s: &Settings, results: &[RunResult]) -> anyhow::Result<()> {
    let doc = json!({
        "training_operator_version": s.kubeflow_version,
        "jobs": s.jobs,
        "noise_pods": s.noise_pods,
        "big_workers": s.big_workers,
        "phase_timeout_s": s.phase_timeout.as_secs(),
        "matched": {"qps": MATCHED_QPS, "burst": MATCHED_BURST, "workers": MATCHED_WORKERS},
        "raw_concurrency": RAW_CONCURRENCY,
        "runs": results,
    });
    std::fs::write(&s.out, serde_json::to_vec_pretty(&doc)?)?;
    Ok(())
}
