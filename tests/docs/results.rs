//! Benchmark tables in `docs/*.md` generated from the committed results
//! files in `benches/results/` (issue #29, point 11; the folder's README
//! says what a file holds).
//!
//! A table sits between `<!-- results: <file> <table> [key=value ...] -->`
//! and `<!-- /results -->`. [`render`] turns the file into the table;
//! `cargo test --test docs` fails when the text between the markers is not
//! exactly what it renders, and `TFJOB_WRITE_RESULTS=1` (`make
//! results-tables`) rewrites it instead: the generator and the drift guard
//! are one function, so they cannot disagree.
use std::path::Path;

use serde_json::Value;

pub const OPEN: &str = "<!-- results:";
pub const CLOSE: &str = "<!-- /results -->";
pub const META_FIELDS: [&str; 4] = ["commit", "command", "machine", "date"];

/// What a results file lacks to be published from; empty when complete.
pub fn meta_problems(doc: &Value) -> Vec<String> {
    let mut found: Vec<String> = META_FIELDS
        .iter()
        .filter(|f| {
            doc["meta"][**f]
                .as_str()
                .is_none_or(|v| v.trim().is_empty())
        })
        .map(|f| format!("meta.{f} is missing or empty"))
        .collect();
    if doc["results"]["runs"].as_array().is_none_or(Vec::is_empty) {
        found.push("results.runs holds no run".to_owned());
    }
    found
}

fn num(v: &Value, digits: usize) -> String {
    v.as_f64()
        .map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "-".to_owned())
}

/// The table `spec` (e.g. `runs workload=jobs`) from results file `doc`.
pub fn render(doc: &Value, spec: &str) -> Result<String, String> {
    let mut words = spec.split_whitespace();
    let table = words.next().ok_or("no table named")?;
    let args: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
    let arg = |k: &str| args.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    match table {
        "runs" => {
            let workload = arg("workload").ok_or("`runs` needs workload=<id>")?;
            let runs: Vec<&Value> = doc["results"]["runs"]
                .as_array()
                .ok_or("no results.runs")?
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
        other => Err(format!("unknown table `{other}` (known: runs)")),
    }
}

/// One marked table in a doc: the marker's file and spec, and the byte
/// range of the text between the markers.
pub struct Section {
    pub line: usize,
    pub file: String,
    pub spec: String,
    pub body: std::ops::Range<usize>,
}

pub fn sections(text: &str) -> Result<Vec<Section>, String> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(start) = text[at..].find(OPEN).map(|i| i + at) {
        let line = text[..start].lines().count() + 1;
        let end_of_marker = text[start..]
            .find("-->")
            .map(|i| start + i + 3)
            .ok_or(format!("line {line}: unclosed results marker"))?;
        let marker = text[start + OPEN.len()..end_of_marker - 3].trim();
        let (file, spec) = marker
            .split_once(' ')
            .ok_or(format!("line {line}: `{marker}` names no table"))?;
        let body_start = end_of_marker + usize::from(text[end_of_marker..].starts_with('\n'));
        let close = text[body_start..]
            .find(CLOSE)
            .map(|i| body_start + i)
            .ok_or(format!("line {line}: no {CLOSE}"))?;
        found.push(Section {
            line,
            file: file.to_owned(),
            spec: spec.trim().to_owned(),
            body: body_start..close,
        });
        at = close + CLOSE.len();
    }
    Ok(found)
}

/// Checks (or, with `write`, rewrites) every marked table of `text`;
/// returns the new text and the problems.
pub fn check(root: &Path, doc: &str, text: &str, write: bool) -> (String, Vec<String>) {
    let mut problems = Vec::new();
    let sections = match sections(text) {
        Ok(s) => s,
        Err(e) => return (text.to_owned(), vec![format!("{doc}: {e}")]),
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for s in sections {
        let rendered = std::fs::read_to_string(root.join(&s.file))
            .map_err(|e| format!("{}: {e}", s.file))
            .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| format!("{}: {e}", s.file)))
            .and_then(|v| render(&v, &s.spec));
        out += &text[copied..s.body.start];
        match rendered {
            Ok(table) if table == text[s.body.clone()] => out += &table,
            Ok(table) if write => out += &table,
            Ok(_) => {
                out += &text[s.body.clone()];
                problems.push(format!(
                    "{doc}:{}: the table differs from {} ({}): run `make results-tables`",
                    s.line, s.file, s.spec
                ));
            }
            Err(e) => {
                out += &text[s.body.clone()];
                problems.push(format!("{doc}:{}: {e}", s.line));
            }
        }
        copied = s.body.end;
    }
    out += &text[copied..];
    (out, problems)
}

// ---- The checks, run by `cargo test --test docs` ----

#[test]
fn results_tables_in_docs_are_what_their_committed_results_files_render() {
    let write = std::env::var("TFJOB_WRITE_RESULTS").is_ok_and(|v| v == "1");
    let mut problems = Vec::new();
    for chapter in crate::repo::chapters() {
        let doc = crate::repo::rel(&chapter);
        let text = std::fs::read_to_string(&chapter).expect("a readable chapter");
        let (new, found) = check(&crate::repo::repo_root(), &doc, &text, write);
        problems.extend(found);
        if write && new != text {
            std::fs::write(&chapter, new).expect("rewrite the chapter");
            eprintln!("{doc}: results tables rewritten");
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn results_every_committed_file_says_its_commit_command_machine_and_date() {
    let dir = crate::repo::repo_root().join("benches/results");
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(&dir)
        .expect("benches/results/ exists")
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(doc) => problems.extend(
                meta_problems(&doc)
                    .into_iter()
                    .map(|p| format!("{}: {p}", crate::repo::rel(&path))),
            ),
            Err(e) => problems.push(format!("{}: not JSON: {e}", crate::repo::rel(&path))),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn results_a_table_that_drifted_from_its_file_is_reported_and_rewritten_on_request() {
    let dir = std::env::temp_dir().join(format!("tfjob-results-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("benches/results")).expect("a temp dir");
    let file = serde_json::json!({
        "meta": {"commit": "abc", "command": "make bench-e2e", "machine": "2 cores", "date": "2026-11-27"},
        "results": {"runs": [
            {"workload": "jobs", "peer": "ours-default", "outcome": "ok", "running_s": 10.04,
             "succeeded_s": 2.0, "cpu_s": 1.234, "peak_rss_mb": 30.4, "api_requests": 2600,
             "api_rate_per_s": 41.25},
            {"workload": "big", "peer": "raw", "outcome": "ok"}
        ]}
    });
    std::fs::write(dir.join("benches/results/r.json"), file.to_string()).expect("write");
    assert!(meta_problems(&file).is_empty());
    let table = render(&file, "runs workload=jobs").expect("renders");
    assert!(
        table.contains("| ours-default | 10.0 | 2.0 | 1.23 | 30 | 2600 | 41.2 | ok |"),
        "{table}"
    );
    let stale = format!(
        "intro\n<!-- results: benches/results/r.json runs workload=jobs -->\n| old |\n{}\nafter\n",
        CLOSE
    );
    let (_, problems) = check(&dir, "d.md", &stale, false);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("d.md:2: the table differs"),
        "{problems:?}"
    );
    let (fresh, problems) = check(&dir, "d.md", &stale, true);
    assert!(problems.is_empty(), "{problems:?}");
    assert!(
        fresh.contains(&table) && fresh.ends_with("after\n"),
        "{fresh}"
    );
    let (_, problems) = check(&dir, "d.md", &fresh, false);
    assert!(problems.is_empty(), "{problems:?}");
    let incomplete = serde_json::json!({"meta": {"commit": "abc"}, "results": {"runs": []}});
    assert_eq!(meta_problems(&incomplete).len(), 4);
    let _ = std::fs::remove_dir_all(&dir);
}
