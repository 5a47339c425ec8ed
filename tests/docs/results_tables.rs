//! The tables a results file renders into (issue #29, points 11-13), one
//! function per table named in a `<!-- results: FILE TABLE key=value … -->`
//! marker ([`crate::results`] finds the markers and compares):
//!
//! - `runs workload=W`: one row per run of workload W (`make bench-e2e`).
//! - `medians workload=W a=P b=Q [metric=M]`: the same-run comparison of two
//!   peers listed alternately in `BENCH_PEERS`: the i-th run of P against the
//!   i-th of Q, each pair's ratio and the median of the ratios
//!   (`benches/e2e/same_run.rs` computes the same in the bench's report).
//! - `scale series=S`: `docs/scale.md`'s table of a `make bench-scale`
//!   invocation recorded with `SCALE_RECORD` (the columns
//!   `e2e/scale/report.py` prints).
//! - `restart`: its fleet-restart table (`e2e/scale/restart.py`).
//! - `headline`: the file is a list of rows (`benches/results/headline-rows.json`),
//!   each naming the results file, runs and metric it comes from.
use std::path::Path;

use serde_json::Value;

use crate::results_numbers::{Load, grouped, median, num, ratios};

fn runs(doc: &Value) -> Result<&Vec<Value>, String> {
    doc["results"]["runs"]
        .as_array()
        .ok_or_else(|| "no results.runs".to_owned())
}

pub fn runs_table(doc: &Value, workload: &str) -> Result<String, String> {
    let runs: Vec<&Value> = runs(doc)?
        .iter()
        .filter(|r| r["workload"] == workload)
        .collect();
    if runs.is_empty() {
        return Err(format!("no run of workload {workload}"));
    }
    let mut out = String::from(
        "| peer | apply → all Running (s) | chief exit → all Succeeded (s) | CPU (s) | peak RSS (MB) | API requests | requests/s | outcome |\n|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in runs {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r["peer"].as_str().unwrap_or("?"),
            num(&r["running_s"], 1),
            num(&r["succeeded_s"], 1),
            num(&r["cpu_s"], 2),
            num(&r["peak_rss_mb"], 0),
            r["api_requests"].as_u64().unwrap_or(0),
            num(&r["api_rate_per_s"], 1),
            r["outcome"].as_str().unwrap_or("?"),
        );
    }
    Ok(out)
}

/// The values of `metric` in the runs of `peer` (workload, and for a scale
/// file series and size, as `filter` says), in the file's order.
pub fn values(doc: &Value, filter: &dyn Fn(&Value) -> bool, peer: &str, metric: &str) -> Vec<f64> {
    runs(doc)
        .map(|rs| {
            rs.iter()
                .filter(|r| r["peer"] == peer && filter(r))
                .filter_map(|r| r[metric].as_f64())
                .collect()
        })
        .unwrap_or_default()
}

/// Each pair's ratio and their median: (a values, b values, ratios, median).
pub type Paired = (Vec<f64>, Vec<f64>, Vec<f64>, Option<f64>);

pub fn paired(
    doc: &Value,
    filter: &dyn Fn(&Value) -> bool,
    a: &str,
    b: &str,
    metric: &str,
) -> Paired {
    let (va, vb) = (
        values(doc, filter, a, metric),
        values(doc, filter, b, metric),
    );
    let ratios = ratios(&va, &vb);
    let mid = median(&ratios);
    (va, vb, ratios, mid)
}

pub fn medians_table(
    doc: &Value,
    workload: &str,
    a: &str,
    b: &str,
    metric: &str,
) -> Result<String, String> {
    let filter = |r: &Value| r["workload"] == workload;
    let (va, vb, ratios, mid) = paired(doc, &filter, a, b, metric);
    if ratios.is_empty() {
        return Err(format!(
            "no pair of {a} and {b} runs with {metric} in workload {workload}"
        ));
    }
    let rates = |p: &str| values(doc, &filter, p, "api_rate_per_s");
    let (ra, rb) = (rates(a), rates(b));
    let mut out = format!(
        "| pair | {a}: {metric} | {b}: {metric} | ratio | {a}: requests/s | {b}: requests/s |\n|---:|---:|---:|---:|---:|---:|\n"
    );
    let digits = if metric == "api_requests" { 0 } else { 1 };
    for (i, r) in ratios.iter().enumerate() {
        let rate = |v: &[f64]| v.get(i).map_or("-".to_owned(), |x| format!("{x:.1}"));
        out += &format!(
            "| {} | {:.digits$} | {:.digits$} | {r:.2}× | {} | {} |\n",
            i + 1,
            va[i],
            vb[i],
            rate(&ra),
            rate(&rb)
        );
    }
    let med = |v: &[f64]| median(v).map_or("-".to_owned(), |x| format!("{x:.digits$}"));
    out += &format!(
        "| **median** | {} | {} | **{:.2}×** | {} | {} |\n",
        med(&va[..ratios.len()]),
        med(&vb[..ratios.len()]),
        mid.unwrap_or(f64::NAN),
        med(&ra),
        med(&rb),
    );
    Ok(out)
}

const SCALE_METRICS: [&str; 5] = [
    "running_s",
    "succeeded_s",
    "cpu_s",
    "peak_rss_mb",
    "api_requests",
];

fn scale_label(peer: &str) -> &str {
    match peer {
        "ours-default" => "tfjob-operator",
        "raw" => "bare client (raw)",
        "training-operator-default" => "training-operator",
        "training-operator-matched" => "training-operator (4 threads)",
        other => other,
    }
}

fn opt(v: &Value, digits: usize) -> String {
    v.as_f64().map_or("-".to_owned(), |v| grouped(v, digits))
}

pub fn scale_table(doc: &Value, series: &str) -> Result<String, String> {
    let runs: Vec<&Value> = runs(doc)?
        .iter()
        .filter(|r| r["series"] == series)
        .collect();
    if runs.is_empty() {
        return Err(format!("no run of series {series}"));
    }
    let mut out = String::from(
        "| size | peer | Running (s) | Succeeded (s) | CPU (s) | peak RSS (MB) | requests | ÷ raw: Running | Succeeded | CPU | RSS | requests | outcome |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in &runs {
        let size = r["size"].as_f64().unwrap_or(f64::NAN);
        let raw = runs
            .iter()
            .find(|o| o["size"] == r["size"] && o["peer"] == "raw");
        let peer = r["peer"].as_str().unwrap_or("?");
        let mut cells = vec![
            grouped(size, 0),
            scale_label(peer).to_owned(),
            opt(&r["running_s"], 1),
            opt(&r["succeeded_s"], 1),
            opt(&r["cpu_s"], 2),
            opt(&r["peak_rss_mb"], 0),
            grouped(r["api_requests"].as_f64().unwrap_or(0.0), 0),
        ];
        for m in SCALE_METRICS {
            cells.push(match raw {
                Some(raw) if peer != "raw" => match (r[m].as_f64(), raw[m].as_f64()) {
                    (Some(a), Some(b)) if b != 0.0 => format!("{:.2}×", a / b),
                    _ => "-".to_owned(),
                },
                _ => String::new(),
            });
        }
        cells.push(r["outcome"].as_str().unwrap_or("?").to_owned());
        out += &format!("| {} |\n", cells.join(" | "));
    }
    Ok(out)
}

/// `docs/scale.md`'s fleet-restart table (`e2e/scale/restart.py`'s runs,
/// as `report.py` prints them).
pub fn restart_table(doc: &Value) -> Result<String, String> {
    let runs = doc["results"]["restart"]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or("no results.restart")?;
    let mut out = String::from(
        "| jobs | Pods | ready (s) | first reconcile (s) | every job reconciled (s) | requests | writes | writes by verb | peak RSS (MB) | CPU (s) | outcome |\n|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|\n",
    );
    for r in runs {
        let mut writes: Vec<(&String, u64)> = r["requests_by_verb"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| !["get ", "list ", "watch "].iter().any(|p| k.starts_with(p)))
                    .map(|(k, v)| (k, v.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default();
        writes.sort();
        let by_verb: Vec<String> = writes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        let count = |k: &str| grouped(r[k].as_f64().unwrap_or(0.0), 0);
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            count("jobs"),
            count("pods"),
            opt(&r["ready_s"], 2),
            opt(&r["first_reconcile_s"], 2),
            opt(&r["all_reconciled_s"], 2),
            count("requests"),
            // `+ 0.0`: an empty f64 sum is -0.0, which would print as "-0".
            grouped(writes.iter().map(|(_, v)| *v as f64).sum::<f64>() + 0.0, 0),
            if by_verb.is_empty() {
                "-".to_owned()
            } else {
                by_verb.join(", ")
            },
            opt(&r["peak_rss_mb"], 0),
            opt(&r["cpu_s"], 2),
            r["outcome"].as_str().unwrap_or("?"),
        );
    }
    Ok(out)
}

/// `benches/results/headline-rows.json`: `{"rows": [{"what", "file",
/// "metric", "ours", "peer", "where", and "workload" or "series"+"size"}]}`
/// (a row with `"bench"` is a `make bench` figure:
/// [`crate::results_machinery::headline_row`]).
/// Each row shows the median of `ours`'s runs, of `peer`'s, and the median
/// of the paired ratios, with the file it comes from.
pub fn headline_table(rows: &Value, load: Load) -> Result<String, String> {
    let rows = rows["rows"].as_array().ok_or("no rows")?;
    let mut out = String::from(
        "| what | ours | peer | ratio (median of same-run pairs) | pairs | results file | where |\n|---|---:|---:|---:|---:|---|---|\n",
    );
    for row in rows {
        if let Some(machinery) = crate::results_machinery::headline_row(row, load) {
            out += &machinery?;
            continue;
        }
        let s = |k: &str| row[k].as_str().unwrap_or("");
        let doc = load(s("file"))?;
        let filter = |r: &Value| {
            if row["series"].is_string() {
                r["series"] == row["series"] && r["size"] == row["size"]
            } else {
                r["workload"] == row["workload"]
            }
        };
        let (va, vb, ratios, mid) = paired(&doc, &filter, s("ours"), s("peer"), s("metric"));
        let mid = mid.ok_or(format!(
            "headline `{}`: no pair of runs in {}",
            s("what"),
            s("file")
        ))?;
        let (unit, digits) = match s("metric") {
            "running_s" | "succeeded_s" | "cpu_s" => (" s", 1),
            "peak_rss_mb" => (" MB", 0),
            _ => ("", 0),
        };
        let show = |v: &[f64]| {
            median(&v[..ratios.len()])
                .map_or("-".to_owned(), |x| format!("{}{unit}", grouped(x, digits)))
        };
        let name = Path::new(s("file"))
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?");
        out += &format!(
            "| {} | {} | {} {} | **{mid:.2}×** | {} | [{name}](../{}) | {} |\n",
            s("what"),
            show(&va),
            s("peer_label"),
            show(&vb),
            ratios.len(),
            s("file"),
            s("where"),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Value {
        json!({"meta": {}, "results": {"runs": [
            {"workload": "jobs", "peer": "ours-matched", "running_s": 50.0, "api_rate_per_s": 40.0},
            {"workload": "jobs", "peer": "to-matched", "running_s": 100.0, "api_rate_per_s": 41.0},
            {"workload": "jobs", "peer": "ours-matched", "running_s": 60.0, "api_rate_per_s": 42.0},
            {"workload": "jobs", "peer": "to-matched", "running_s": 90.0, "api_rate_per_s": 43.0},
            {"workload": "big", "peer": "ours-matched", "running_s": 500.0},
            {"series": "big", "size": 2000, "workload": "big", "peer": "ours-default", "outcome": "ok",
             "running_s": 1.0, "succeeded_s": 0.5, "cpu_s": 4.0, "peak_rss_mb": 1217.4, "api_requests": 12345},
            {"series": "big", "size": 2000, "workload": "big", "peer": "raw", "outcome": "ok",
             "running_s": 2.0, "succeeded_s": 0.0, "cpu_s": 1.0, "peak_rss_mb": 100.0, "api_requests": 12000}
        ]}})
    }

    #[test]
    fn results_numbers_are_grouped_as_python_prints_them() {
        assert_eq!(grouped(1_234_567.89, 1), "1,234,567.9");
        assert_eq!(grouped(999.0, 0), "999");
        assert_eq!(grouped(1000.0, 2), "1,000.00");
        assert_eq!(grouped(-0.04, 1), "-0.0");
    }

    #[test]
    fn results_medians_pair_the_ith_runs_of_each_peer_in_file_order() {
        let t = medians_table(&file(), "jobs", "ours-matched", "to-matched", "running_s")
            .expect("renders");
        assert!(
            t.contains("| 1 | 50.0 | 100.0 | 0.50× | 40.0 | 41.0 |"),
            "{t}"
        );
        assert!(
            t.contains("| 2 | 60.0 | 90.0 | 0.67× | 42.0 | 43.0 |"),
            "{t}"
        );
        // median of 0.5 and 0.667, not the ratio of the medians (55 / 95 = 0.58 too, so check both halves)
        assert!(
            t.contains("| **median** | 55.0 | 95.0 | **0.58×** | 41.0 | 42.0 |"),
            "{t}"
        );
        assert!(medians_table(&file(), "jobs", "ours-matched", "nobody", "running_s").is_err());
    }

    #[test]
    fn results_scale_rows_carry_their_ratio_to_the_bare_client_of_the_same_size() {
        let t = scale_table(&file(), "big").expect("renders");
        assert!(
            t.contains("| 2,000 | tfjob-operator | 1.0 | 0.5 | 4.00 | 1,217 | 12,345 | 0.50× | - | 4.00× | 12.17× | 1.03× | ok |"),
            "{t}"
        );
        assert!(t.contains("| 2,000 | bare client (raw) | 2.0 | 0.0 | 1.00 | 100 | 12,000 |  |  |  |  |  | ok |"), "{t}");
        assert!(scale_table(&file(), "noise").is_err());
    }

    #[test]
    fn results_a_headline_row_shows_medians_and_names_its_file() {
        let rows = json!({"rows": [{"what": "200 jobs", "file": "benches/results/f.json", "workload": "jobs",
            "metric": "running_s", "ours": "ours-matched", "peer": "to-matched", "peer_label": "TO",
            "where": "[x](x.md)"}]});
        let load = |f: &str| {
            if f == "benches/results/f.json" {
                Ok(file())
            } else {
                Err(f.to_owned())
            }
        };
        let t = headline_table(&rows, &load).expect("renders");
        assert!(
            t.contains("| 200 jobs | 55.0 s | TO 95.0 s | **0.58×** | 2 | [f.json](../benches/results/f.json) | [x](x.md) |"),
            "{t}"
        );
        let missing = json!({"rows": [{"what": "w", "file": "nope.json", "metric": "running_s"}]});
        assert!(headline_table(&missing, &load).is_err());
    }
}
