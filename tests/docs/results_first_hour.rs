//! The README's "How long" table (issue #41): one first-hour run
//! (`e2e/first-hour.sh`, a fresh clone with every cache empty) as a results
//! file — the target, its total, each step it timed and the load beside it.
use serde_json::Value;

use crate::results_numbers::grouped;

/// Whether `doc` is a first-hour file (it holds steps, not runs).
pub fn holds_steps(doc: &Value) -> bool {
    doc["results"]["steps"]
        .as_array()
        .is_some_and(|s| !s.is_empty())
}

fn seconds(v: &Value) -> String {
    v.as_f64()
        .map(|s| grouped(s, 0))
        .unwrap_or_else(|| "-".to_owned())
}

fn minutes(v: &Value) -> String {
    v.as_f64()
        .map(|s| format!("{:.1}", s / 60.0))
        .unwrap_or_else(|| "-".to_owned())
}

/// `first-hour`: one row per step, then the whole run, its commit and load.
pub fn first_hour_table(doc: &Value) -> Result<String, String> {
    let results = &doc["results"];
    if !holds_steps(doc) {
        return Err("`first-hour` needs results.steps (a file of e2e/first-hour.sh)".to_owned());
    }
    let target = results["target"]
        .as_str()
        .ok_or("results.target is missing")?;
    let mut out = String::from(
        "| step | seconds | Go packages compiled | load (1 min) at its end |\n|---|---:|---:|---:|\n",
    );
    for step in results["steps"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            step["what"].as_str().unwrap_or("?"),
            seconds(&step["seconds"]),
            step["go_packages"]
                .as_u64()
                .map_or("-".to_owned(), |p| grouped(p as f64, 0)),
            step["load1"]
                .as_f64()
                .map_or("-".to_owned(), |l| format!("{l:.2}")),
        ));
    }
    let load = &results["load"];
    let commit: String = doc["meta"]["commit"]
        .as_str()
        .unwrap_or("?")
        .chars()
        .take(7)
        .collect();
    out.push_str(&format!(
        "| **`{target}`, start to end** ({} min; commit `{commit}`, {}; load mean {}, max {}) | **{}** | | |\n",
        minutes(&results["total_s"]),
        doc["meta"]["date"].as_str().unwrap_or("?"),
        load["mean_1min"]
            .as_f64()
            .map_or("-".to_owned(), |l| format!("{l:.2}")),
        load["max_1min"]
            .as_f64()
            .map_or("-".to_owned(), |l| format!("{l:.2}")),
        seconds(&results["total_s"]),
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Value {
        json!({"meta": {"commit": "0123456789abcdef", "command": "bash e2e/first-hour.sh demo",
            "machine": "2 cores", "date": "2026-11-28T16:40:00Z"},
            "results": {"target": "make demo", "exit": 0, "total_s": 1234,
            "steps": [{"what": "building Kubernetes v1.37.2", "seconds": 700, "go_packages": 2107, "load1": 3.5},
                      {"what": "demo: cluster.sh up", "seconds": 17, "go_packages": null, "load1": 1.2}],
            "load": {"samples": 80, "mean_1min": 2.71, "max_1min": 4.4}}})
    }

    #[test]
    fn results_first_hour_rows_are_the_steps_then_the_whole_run_in_minutes_and_seconds() {
        let table = first_hour_table(&file()).expect("renders");
        assert!(table.contains("| building Kubernetes v1.37.2 | 700 | 2,107 | 3.50 |"));
        assert!(table.contains("| demo: cluster.sh up | 17 | - | 1.20 |"));
        assert!(table.contains("**`make demo`, start to end** (20.6 min; commit `0123456`"));
        assert!(table.contains("load mean 2.71, max 4.40) | **1,234** |"));
    }

    #[test]
    fn results_first_hour_refuses_a_file_without_steps() {
        let mut doc = file();
        doc["results"]["steps"] = json!([]);
        assert!(first_hour_table(&doc).is_err());
    }
}
