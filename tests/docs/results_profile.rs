//! Where the operator's CPU goes (issue #42): one profiled bench run
//! (`hack/profile/cpu.sh`, `PROFILE_RECORD`), its folded stacks read by
//! `hack/profile/breakdown.py` into three tables of shares; and the fair
//! limit beside it, the bare client with client-go's informers watching
//! what ours watches (the bench's `raw-watching` peer).
use serde_json::Value;

use crate::results_numbers::median;
use crate::results_tables::values;

/// Whether `doc` is a profile file (it holds shares, not runs).
pub fn holds_a_profile(doc: &Value) -> bool {
    doc["results"]["profile"]["task"]
        .as_array()
        .is_some_and(|t| !t.is_empty())
}

/// `profile part=task|self|inclusive`: one row per line of that table,
/// each a share of the samples. Shares, not seconds: perf's DWARF unwinding
/// costs the profiled process CPU of its own (kernel time copying stacks),
/// so the seconds sampled exceed an unprofiled run's.
pub fn profile_table(doc: &Value, part: &str) -> Result<String, String> {
    let profile = &doc["results"]["profile"];
    let heading = match part {
        "task" => "task: what the CPU ran for",
        "self" => "self: what the CPU was executing",
        "inclusive" => "inclusive: on behalf of (rows overlap)",
        other => {
            return Err(format!(
                "`profile` has no part `{other}` (task, self, inclusive)"
            ));
        }
    };
    let sampled = profile["sampled_cpu_s"]
        .as_f64()
        .ok_or("results.profile.sampled_cpu_s is missing")?;
    let rows = profile[part]
        .as_array()
        .filter(|r| !r.is_empty())
        .ok_or(format!("results.profile.{part} holds no row"))?;
    let mut out = format!("| {heading} | share |\n|---|---:|\n");
    for row in rows {
        let what = row["what"].as_str().ok_or("a row without `what`")?;
        let share = row["share_pct"]
            .as_f64()
            .ok_or("a row without `share_pct`")?;
        out += &format!("| {what} | {share:.1} % |\n");
    }
    let jobs = &profile["jobs"];
    out += &format!("| **{sampled:.2} CPU-seconds sampled** ({jobs} jobs, under perf) | 100 % |\n");
    Ok(out)
}

/// `watch-limit workload=… a=… b=…`: per pair, `a`'s CPU seconds beside
/// `b`'s own and its watcher's (`watcher_cpu_s`), `a` over their sum, and
/// the peak RSS of `a` and of the watcher; then the medians.
pub fn watch_limit_table(doc: &Value, workload: &str, a: &str, b: &str) -> Result<String, String> {
    let filter = |r: &Value| r["workload"] == workload;
    let ours = values(doc, &filter, a, "cpu_s");
    let bare = values(doc, &filter, b, "cpu_s");
    let watching = values(doc, &filter, b, "watcher_cpu_s");
    let rss = values(doc, &filter, a, "peak_rss_mb");
    let watcher_rss = values(doc, &filter, b, "watcher_peak_rss_mb");
    let pairs = [&bare, &watching, &rss, &watcher_rss]
        .iter()
        .fold(ours.len(), |n, v| n.min(v.len()));
    if pairs == 0 {
        return Err(format!(
            "no pair of {a} and {b} runs with cpu_s, peak_rss_mb, watcher_cpu_s and watcher_peak_rss_mb in workload {workload}"
        ));
    }
    let mut out = format!(
        "| pair | {a}: CPU-s | {b}: CPU-s | its informers: CPU-s | both | {a} / both | {a} / {b} alone | {a}: peak RSS (MB) | its informers: peak RSS (MB) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let (mut sums, mut to_both, mut to_bare) = (vec![], vec![], vec![]);
    for i in 0..pairs {
        let both = bare[i] + watching[i];
        sums.push(both);
        to_both.push(ours[i] / both);
        to_bare.push(ours[i] / bare[i]);
        out += &format!(
            "| {} | {:.1} | {:.1} | {:.1} | {both:.1} | {:.2}× | {:.2}× | {:.0} | {:.0} |\n",
            i + 1,
            ours[i],
            bare[i],
            watching[i],
            to_both[i],
            to_bare[i],
            rss[i],
            watcher_rss[i]
        );
    }
    let med = |v: &[f64], d: usize| median(v).map_or("-".to_owned(), |x| format!("{x:.d$}"));
    out += &format!(
        "| **median** | {} | {} | {} | {} | **{}×** | {}× | {} | {} |\n",
        med(&ours[..pairs], 1),
        med(&bare[..pairs], 1),
        med(&watching[..pairs], 1),
        med(&sums, 1),
        med(&to_both, 2),
        med(&to_bare, 2),
        med(&rss[..pairs], 0),
        med(&watcher_rss[..pairs], 0)
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn file() -> Value {
        json!({"results": {"profile": {"jobs": 10, "sampled_cpu_s": 4.0,
            "task": [{"what": "watches", "share_pct": 25.0}, {"what": "reconciles", "share_pct": 75.0}]}}})
    }

    #[test]
    fn results_a_profile_row_shows_its_share_and_the_table_the_seconds_sampled() {
        let table = profile_table(&file(), "task").unwrap();
        assert!(table.contains("| watches | 25.0 % |\n"), "{table}");
        assert!(table.contains("| reconciles | 75.0 % |\n"), "{table}");
        assert!(
            table.ends_with("| **4.00 CPU-seconds sampled** (10 jobs, under perf) | 100 % |\n"),
            "{table}"
        );
    }

    #[test]
    fn results_the_watch_limit_sets_ours_beside_the_bare_client_and_its_informers_together() {
        let doc = json!({"results": {"runs": [
            {"workload": "jobs", "peer": "ours", "cpu_s": 9.0, "peak_rss_mb": 70.0},
            {"workload": "jobs", "peer": "raw-watching", "cpu_s": 2.0, "watcher_cpu_s": 4.0, "watcher_peak_rss_mb": 40.0},
            {"workload": "jobs", "peer": "ours", "cpu_s": 12.0, "peak_rss_mb": 74.0},
            {"workload": "jobs", "peer": "raw-watching", "cpu_s": 2.0, "watcher_cpu_s": 6.0, "watcher_peak_rss_mb": 44.0},
        ]}});
        let table = watch_limit_table(&doc, "jobs", "ours", "raw-watching").unwrap();
        assert!(
            table.contains("| 1 | 9.0 | 2.0 | 4.0 | 6.0 | 1.50× | 4.50× | 70 | 40 |"),
            "{table}"
        );
        assert!(
            table.contains("| **median** | 10.5 | 2.0 | 5.0 | 7.0 | **1.50×** | 5.25× | 72 | 42 |"),
            "{table}"
        );
        assert!(watch_limit_table(&doc, "big", "ours", "raw-watching").is_err());
    }

    #[test]
    fn results_a_profile_part_the_file_lacks_is_an_error_naming_it() {
        let err = profile_table(&file(), "self").unwrap_err();
        assert!(err.contains("results.profile.self"), "{err}");
        assert!(profile_table(&file(), "decode").is_err());
    }
}
