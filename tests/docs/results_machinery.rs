//! The tables of `make bench`'s results files (`BENCH_RECORD=<name> make
//! bench`, `benches/run.sh`): the machinery against client-go and
//! kube-runtime, one function per table named in a
//! `<!-- results: FILE TABLE -->` marker ([`crate::results`] finds the
//! markers and compares). The file's `results` holds what each bench wrote
//! to `target/bench/<bench>.json`:
//!
//! - `workqueue`: ops/s and ops per CPU-second of each workload, ours and
//!   client-go's, medians over the interleaved runs (`benches/workqueue.rs`);
//! - `workqueue-add-latency`: the hot-key producers' add latency, both sides;
//! - `memory` and `memory-ratios`: bytes per cached Pod, ours and
//!   kube-runtime's store, with and without `managedFields` (`benches/memory.rs`);
//! - `sync`: the initial sync of every peer, medians (`benches/sync.rs`);
//! - `latency`: event-to-reconcile percentiles (`benches/latency.rs`).
use std::path::Path;

use serde_json::Value;

use crate::results_numbers::{Load, grouped, median, ratios};

/// The sections a `make bench` results file may hold (`e2e/record.py`).
pub const MACHINERY_BENCHES: [&str; 4] = ["workqueue", "memory", "sync", "latency"];

/// The tables this module renders, for the error naming the known ones.
pub const TABLES: [&str; 6] = [
    "workqueue",
    "workqueue-add-latency",
    "memory",
    "memory-ratios",
    "sync",
    "latency",
];

/// `table` from `doc`, or `None` when it is not one of this module's.
pub fn render(doc: &Value, table: &str) -> Option<Result<String, String>> {
    Some(match table {
        "workqueue" => workqueue_table(doc),
        "workqueue-add-latency" => add_latency_table(doc),
        "memory" => memory_table(doc),
        "memory-ratios" => memory_ratios_table(doc),
        "sync" => sync_table(doc),
        "latency" => latency_table(doc),
        _ => return None,
    })
}

/// True when the file holds at least one bench's results.
pub fn holds_a_bench(doc: &Value) -> bool {
    MACHINERY_BENCHES
        .iter()
        .any(|b| doc["results"][*b].is_object())
}

fn section<'a>(doc: &'a Value, bench: &str) -> Result<&'a Value, String> {
    let s = &doc["results"][bench];
    if s.is_object() {
        Ok(s)
    } else {
        Err(format!(
            "no results.{bench} (a `make bench` file with that bench run)"
        ))
    }
}

fn rows<'a>(doc: &'a Value, bench: &str) -> Result<&'a Vec<Value>, String> {
    section(doc, bench)?["results"]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or(format!("no results.{bench}.results"))
}

fn fixed(v: &Value, digits: usize) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or("-".to_owned(), |x| format!("{x:.digits$}"))
}

fn times(v: &Value) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or("-".to_owned(), |x| format!("{x:.2}×"))
}

fn millions(v: &Value) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or("-".to_owned(), |x| format!("{:.2} M", x / 1e6))
}

fn count(v: &Value) -> String {
    v.as_f64()
        .filter(|x| x.is_finite())
        .map_or("-".to_owned(), |x| grouped(x, 0))
}

fn workqueue_label(workload: &str) -> &str {
    match workload {
        "single_thread_add_get_done" => "single thread, rounds of 1,000 distinct keys",
        "single_thread_add_get_done/arc_str" => {
            "the same with `Arc<str>` keys (client-go: its `string` keys)"
        }
        "single_thread_1m_deep" => "single thread, all N keys deep",
        "8_workers_hot_keys" => "8 workers, 2 producers, 80 % of adds to 10 hot keys",
        other => other,
    }
}

pub fn workqueue_table(doc: &Value) -> Result<String, String> {
    let wq = section(doc, "workqueue")?;
    let mut out = format!(
        "| workload (N = {}, median of {} runs a side) | ours ops/s | client-go ops/s | ratio (wall) | ours ops/CPU-s | client-go ops/CPU-s | ratio (per CPU-second) |\n|---|---:|---:|---:|---:|---:|---:|\n",
        count(&wq["n"]),
        wq["reps"].as_u64().unwrap_or(0)
    );
    for r in rows(doc, "workqueue")? {
        out += &format!(
            "| {} | {} | {} | **{}** | {} | {} | **{}** |\n",
            workqueue_label(r["workload"].as_str().unwrap_or("?")),
            millions(&r["ours"]["ops_per_s"]),
            millions(&r["client_go"]["ops_per_s"]),
            times(&r["ratio_wall"]),
            millions(&r["ours"]["ops_per_cpu_s"]),
            millions(&r["client_go"]["ops_per_cpu_s"]),
            times(&r["ratio_cpu"]),
        );
    }
    Ok(out)
}

pub fn add_latency_table(doc: &Value) -> Result<String, String> {
    let mut out = String::from(
        "| workload | queue | add p50 (µs) | p99 | p99.9 | max |\n|---|---|---:|---:|---:|---:|\n",
    );
    let mut any = false;
    for r in rows(doc, "workqueue")? {
        for (side, who) in [("ours", "ours"), ("client_go", "client-go")] {
            let l = &r[side]["add_latency_us"];
            if !l.is_object() {
                continue;
            }
            any = true;
            out += &format!(
                "| {} | {who} | {} | {} | {} | {} |\n",
                workqueue_label(r["workload"].as_str().unwrap_or("?")),
                fixed(&l["p50"], 2),
                fixed(&l["p99"], 2),
                fixed(&l["p999"], 1),
                fixed(&l["max"], 1),
            );
        }
    }
    if any {
        Ok(out)
    } else {
        Err("no workload of results.workqueue timed its adds".to_owned())
    }
}

pub fn memory_table(doc: &Value) -> Result<String, String> {
    let mem = section(doc, "memory")?;
    let mut out = format!(
        "| configuration ({} Pods, {} B of JSON each) | payload | steady | overhead | peak, first sync | peak, relist | relist ÷ steady | sync ms | relist ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        count(&mem["pods"]),
        count(&mem["json_bytes_per_pod"]),
    );
    for r in rows(doc, "memory")? {
        let strip = r["strip_managed_fields"] == true;
        let payload = r["payload_bytes_per_pod"].as_f64().unwrap_or(f64::NAN);
        for (side, who) in [("ours", "ours"), ("kube_runtime", "kube-runtime")] {
            let h = &r[side];
            let config = match (side, strip) {
                ("ours", true) => "ours, `managedFields` stripped (**our default**)".to_owned(),
                (_, true) => format!("{who}, stripped"),
                ("ours", false) => "ours, `managedFields` kept".to_owned(),
                (_, false) => format!("{who}, kept (**its default**)"),
            };
            let overhead = h["steady"].as_f64().map(|s| s - payload);
            out += &format!(
                "| {config} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                grouped(payload, 0),
                count(&h["steady"]),
                overhead.map_or("-".to_owned(), |o| grouped(o, 0)),
                count(&h["sync_peak"]),
                count(&h["relist_peak"]),
                times(&h["relist_over_steady"]),
                fixed(&h["sync_ms"], 0),
                fixed(&h["relist_ms"], 0),
            );
        }
    }
    Ok(out)
}

pub fn memory_ratios_table(doc: &Value) -> Result<String, String> {
    let mem = section(doc, "memory")?;
    let rows = rows(doc, "memory")?;
    let by_strip = |strip: bool| {
        rows.iter()
            .find(|r| (r["strip_managed_fields"] == true) == strip)
    };
    let ratio = |strip: bool| by_strip(strip).map_or("-".to_owned(), |r| times(&r["steady_ratio"]));
    let relist: Vec<f64> = rows
        .iter()
        .filter_map(|r| r["ours"]["relist_over_steady"].as_f64())
        .collect();
    let span = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if v.is_empty() {
            "-".to_owned()
        } else if format!("{lo:.2}") == format!("{hi:.2}") {
            format!("{lo:.2}×")
        } else {
            format!("{lo:.2}–{hi:.2}×")
        }
    };
    Ok(format!(
        "| ratio | value |\n|---|---:|\n\
         | ours ÷ kube-runtime, steady, both at their defaults (ours strips, kube-runtime keeps) | **{}** |\n\
         | ours ÷ kube-runtime, steady, neither strips | {} |\n\
         | ours ÷ kube-runtime, steady, both strip | {} |\n\
         | ours: relist peak ÷ steady | {} |\n",
        times(&mem["defaults_ratio"]),
        ratio(false),
        ratio(true),
        span(&relist),
    ))
}

pub fn sync_table(doc: &Value) -> Result<String, String> {
    let sync = section(doc, "sync")?;
    let mut out = format!(
        "| peer ({} Pods created, {} B of JSON each; median of {}) | objects | time to synced (s) | ours ÷ peer (time) | peak RSS (MiB) | ours ÷ peer (RSS) | each run (s) |\n|---|---:|---:|---:|---:|---:|---|\n",
        count(&sync["pods"]),
        count(&sync["json_bytes_per_pod"]),
        sync["reps"].as_u64().unwrap_or(0),
    );
    for r in rows(doc, "sync")? {
        let each: Vec<String> = r["runs"]
            .as_array()
            .map(|runs| runs.iter().map(|x| fixed(&x["seconds"], 2)).collect())
            .unwrap_or_default();
        let peer = r["peer"].as_str().unwrap_or("?");
        let peer = if peer == "ours" {
            "**ours**".to_owned()
        } else {
            peer.to_owned()
        };
        out += &format!(
            "| {peer} | {} | {} | {} | {} | {} | {} |\n",
            count(&r["objects"]),
            fixed(&r["seconds_median"], 2),
            times(&r["ours_time_over_peer"]),
            fixed(&r["peak_rss_mib_median"], 0),
            times(&r["ours_rss_over_peer"]),
            each.join(" / "),
        );
    }
    Ok(out)
}

pub fn latency_table(doc: &Value) -> Result<String, String> {
    let lat = section(doc, "latency")?;
    let mut out = format!(
        "| latency ({} Pods patched at {}/s for {} s) | achieved events/s | events | p50 (ms) | p90 | p99 | max |\n|---|---:|---:|---:|---:|---:|---:|\n",
        count(&lat["objects"]),
        count(&lat["rate_per_s"]),
        count(&lat["seconds"]),
    );
    let rows = [
        (
            "**ours: watch → reconcile** (goal: p99 < 20 ms)",
            &lat["ours"],
            "watch_to_reconcile",
        ),
        (
            "ours: patch → reconcile",
            &lat["ours"],
            "patch_to_reconcile",
        ),
        (
            "kube-runtime: patch → reconcile",
            &lat["kube_runtime"],
            "patch_to_reconcile",
        ),
    ];
    for (label, side, which) in rows {
        let s = &side[which];
        if s["count"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        out += &format!(
            "| {label} | {} | {} | {} | {} | {} | {} |\n",
            fixed(&side["events_per_s"], 0),
            count(&s["count"]),
            fixed(&s["p50_ms"], 2),
            fixed(&s["p90_ms"], 2),
            fixed(&s["p99_ms"], 2),
            fixed(&s["max_ms"], 2),
        );
    }
    let (ours, kube) = (
        &lat["ours"]["patch_to_reconcile"],
        &lat["kube_runtime"]["patch_to_reconcile"],
    );
    if kube["count"].as_u64().unwrap_or(0) > 0 {
        let ratio = |k: &str| match (ours[k].as_f64(), kube[k].as_f64()) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
            _ => "-".to_owned(),
        };
        out += &format!(
            "| ratio ours ÷ kube-runtime (patch → reconcile) | | | {} | {} | {} | {} |\n",
            ratio("p50_ms"),
            ratio("p90_ms"),
            ratio("p99_ms"),
            ratio("max_ms"),
        );
    }
    Ok(out)
}

/// A headline row from a `make bench` file (`headline-rows.json`, a row
/// with `"bench": "workqueue"`, its `"workload"` and `"metric"`
/// `ops_per_s` or `ops_per_cpu_s`): ours and client-go's medians and the
/// median of the ratios of the runs that took turns (the i-th of ours
/// against the i-th of client-go's). `None` for a row of another kind.
pub fn headline_row(row: &Value, load: Load) -> Option<Result<String, String>> {
    let bench = row["bench"].as_str()?;
    Some(workqueue_headline(row, bench, load))
}

fn workqueue_headline(row: &Value, bench: &str, load: Load) -> Result<String, String> {
    let s = |k: &str| row[k].as_str().unwrap_or("");
    if bench != "workqueue" {
        return Err(format!(
            "headline `{}`: no headline rows from `{bench}` yet (only workqueue)",
            s("what")
        ));
    }
    let doc = load(s("file"))?;
    let found = rows(&doc, "workqueue")?
        .iter()
        .find(|r| r["workload"] == s("workload"))
        .ok_or(format!(
            "headline `{}`: no workload {}",
            s("what"),
            s("workload")
        ))?;
    let metric = s("metric");
    let runs = |side: &str| -> Vec<f64> {
        found[side]["runs"]
            .as_array()
            .map(|rs| rs.iter().filter_map(|r| r[metric].as_f64()).collect())
            .unwrap_or_default()
    };
    let (ours, peer) = (runs("ours"), runs("client_go"));
    let ratios = ratios(&ours, &peer);
    let mid = median(&ratios).ok_or(format!(
        "headline `{}`: no pair of runs of {metric}",
        s("what")
    ))?;
    let show = |v: &[f64]| median(v).map_or("-".to_owned(), |x| format!("{:.2} M", x / 1e6));
    let name = Path::new(s("file"))
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("?");
    Ok(format!(
        "| {} | {} | {} {} | **{mid:.2}×** | {} | [{name}](../{}) | {} |\n",
        s("what"),
        show(&ours),
        s("peer_label"),
        show(&peer),
        ratios.len(),
        s("file"),
        s("where"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Value {
        json!({"meta": {}, "results": {
            "workqueue": {"n": 1_000_000, "reps": 7, "results": [
                {"workload": "single_thread_add_get_done",
                 "ours": {"ops_per_s": 19_750_000.0, "ops_per_cpu_s": 20_000_000.0},
                 "client_go": {"ops_per_s": 4_640_000.0, "ops_per_cpu_s": 5_000_000.0},
                 "ratio_wall": 4.2565, "ratio_cpu": 4.0},
                {"workload": "8_workers_hot_keys",
                 "ours": {"ops_per_s": 2e7, "ops_per_cpu_s": 1e7,
                          "add_latency_us": {"p50": 0.03, "p99": 0.44, "p999": 26.04, "max": 138.0}},
                 "client_go": null, "ratio_wall": null, "ratio_cpu": null}
            ]},
            "memory": {"pods": 10000, "json_bytes_per_pod": 4479, "defaults_ratio": 0.381, "results": [
                {"strip_managed_fields": false, "payload_bytes_per_pod": 25627, "steady_ratio": 1.0,
                 "ours": {"steady": 25888, "sync_peak": 25930, "relist_peak": 26126,
                          "relist_over_steady": 1.009, "sync_ms": 328.4, "relist_ms": 93.0},
                 "kube_runtime": {"steady": 25881, "sync_peak": 26101, "relist_peak": 51982,
                                  "relist_over_steady": 2.008, "sync_ms": 387.0, "relist_ms": 761.0}},
                {"strip_managed_fields": true, "payload_bytes_per_pod": 9600, "steady_ratio": 1.0007,
                 "ours": {"steady": 9861, "relist_over_steady": 1.024},
                 "kube_runtime": {"steady": 9854}}
            ]},
            "latency": {"objects": 200, "rate_per_s": 200, "seconds": 15,
                "ours": {"events_per_s": 201.2, "watch_to_reconcile": {"count": 3000, "p50_ms": 0.12, "p90_ms": 0.38, "p99_ms": 1.1, "max_ms": 3.32},
                         "patch_to_reconcile": {"count": 3000, "p50_ms": 5.0, "p90_ms": 10.0, "p99_ms": 30.0, "max_ms": 50.0}},
                "kube_runtime": {"events_per_s": 0.0, "patch_to_reconcile": {"count": 0, "p50_ms": null}}}
        }})
    }

    #[test]
    fn results_machinery_workqueue_rows_show_millions_and_both_ratios() {
        let t = workqueue_table(&file()).expect("renders");
        assert!(
            t.contains("(N = 1,000,000, median of 7 runs a side)"),
            "{t}"
        );
        assert!(
            t.contains("| single thread, rounds of 1,000 distinct keys | 19.75 M | 4.64 M | **4.26×** | 20.00 M | 5.00 M | **4.00×** |"),
            "{t}"
        );
        // A workload without the Go peer shows dashes, not zeros.
        assert!(t.contains("| 20.00 M | - | **-** |"), "{t}");
        let l = add_latency_table(&file()).expect("renders");
        assert!(
            l.contains("| ours | 0.03 | 0.44 | 26.0 | 138.0 |") && !l.contains("client-go |"),
            "{l}"
        );
    }

    #[test]
    fn results_machinery_a_headline_row_pairs_the_runs_that_took_turns() {
        let mut doc = file();
        doc["results"]["workqueue"]["results"][0]["ours"]["runs"] =
            json!([{"ops_per_s": 2e7}, {"ops_per_s": 1e7}, {"ops_per_s": 3e7}]);
        doc["results"]["workqueue"]["results"][0]["client_go"]["runs"] =
            json!([{"ops_per_s": 4e6}, {"ops_per_s": 5e6}, {"ops_per_s": 1e7}]);
        let row = json!({"what": "wq", "file": "benches/results/b.json", "bench": "workqueue",
            "workload": "single_thread_add_get_done", "metric": "ops_per_s",
            "peer_label": "client-go", "where": "[w](#w)"});
        let load = |_: &str| Ok(doc.clone());
        let line = headline_row(&row, &load)
            .expect("a bench row")
            .expect("renders");
        // pairs 5×, 2×, 3×: the median of the ratios (3×), not of the sides (20 M / 5 M = 4×)
        assert_eq!(
            line,
            "| wq | 20.00 M | client-go 5.00 M | **3.00×** | 3 | [b.json](../benches/results/b.json) | [w](#w) |\n"
        );
        assert!(headline_row(&json!({"what": "e2e row"}), &load).is_none());
    }

    #[test]
    fn results_machinery_memory_overhead_is_steady_minus_payload() {
        let t = memory_table(&file()).expect("renders");
        assert!(
            t.contains("| ours, `managedFields` kept | 25,627 | 25,888 | 261 | 25,930 | 26,126 | 1.01× | 328 | 93 |"),
            "{t}"
        );
        assert!(
            t.contains("| kube-runtime, kept (**its default**) | 25,627 | 25,881 | 254 |"),
            "{t}"
        );
        let r = memory_ratios_table(&file()).expect("renders");
        assert!(
            r.contains("(ours strips, kube-runtime keeps) | **0.38×** |"),
            "{r}"
        );
        assert!(
            r.contains("| ours: relist peak ÷ steady | 1.01–1.02× |"),
            "{r}"
        );
    }

    #[test]
    fn results_machinery_latency_skips_a_peer_that_did_not_run() {
        let t = latency_table(&file()).expect("renders");
        assert!(
            t.contains("| **ours: watch → reconcile** (goal: p99 < 20 ms) | 201 | 3,000 | 0.12 | 0.38 | 1.10 | 3.32 |"),
            "{t}"
        );
        assert!(
            !t.contains("kube-runtime: patch") && !t.contains("ratio"),
            "{t}"
        );
        assert!(sync_table(&file()).is_err(), "no sync section, no table");
        assert!(holds_a_bench(&file()));
        assert!(!holds_a_bench(&json!({"results": {"runs": []}})));
    }
}
