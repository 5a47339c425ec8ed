//! Benchmark tables in `docs/*.md`, and the README's first-hour table,
//! generated from the committed results files in `benches/results/` (issue
//! #29, point 11; the folder's README says what a file holds).
//!
//! A table sits between `<!-- results: <file> <table> [key=value ...] -->`
//! and `<!-- /results -->`. [`render`] turns the file into the table;
//! `cargo test --test docs` fails when the text between the markers is not
//! exactly what it renders, and `TFJOB_WRITE_RESULTS=1` (`make
//! results-tables`) rewrites it instead: the generator and the drift guard
//! are one function, so they cannot disagree.
use std::path::Path;

use serde_json::Value;

use crate::results_faults as faults;
use crate::results_numbers::Load;
use crate::results_tables as tables;

pub const OPEN: &str = "<!-- results:";
pub const CLOSE: &str = "<!-- /results -->";
/// Not a results file: the headline table's rows, each naming its file.
pub const HEADLINE_ROWS: &str = "headline-rows.json";
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
    let holds = |k: &str| doc["results"][k].as_array().is_some_and(|a| !a.is_empty());
    // A fault-suite file (FAULT_RECORD) holds scenarios instead of runs.
    if !holds("runs")
        && !holds("restart")
        && !holds("scenarios")
        && !crate::results_first_hour::holds_steps(doc)
        && !crate::results_machinery::holds_a_bench(doc)
        && !crate::results_profile::holds_a_profile(doc)
    {
        found.push("results.runs holds no run".to_owned());
    }
    found
}

/// The table `spec` (e.g. `runs workload=jobs`) from results file `doc`;
/// `load` reads the other files a headline row names.
pub fn render(doc: &Value, spec: &str, load: Load) -> Result<String, String> {
    let mut words = spec.split_whitespace();
    let table = words.next().ok_or("no table named")?;
    let args: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
    let arg = |k: &str| args.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let need = |k: &str| arg(k).ok_or(format!("`{table}` needs {k}=…"));
    if let Some(machinery) = crate::results_machinery::render(doc, table) {
        return machinery;
    }
    match table {
        "runs" => tables::runs_table(doc, need("workload")?),
        "medians" => tables::medians_table(
            doc,
            need("workload")?,
            need("a")?,
            need("b")?,
            arg("metric").unwrap_or("running_s"),
        ),
        "scale" => tables::scale_table(doc, need("series")?),
        "restart" => tables::restart_table(doc),
        "headline" => tables::headline_table(doc, load),
        // The fault suite's (FAULT_RECORD), in their own module.
        "faults" => match arg("scenario") {
            Some(id) => faults::scenario_table(doc, id),
            None => faults::faults_table(doc),
        },
        "faults-run" => faults::run_table(doc),
        // Where the operator's CPU goes (hack/profile/cpu.sh).
        "profile" => crate::results_profile::profile_table(doc, need("part")?),
        "watch-limit" => crate::results_profile::watch_limit_table(
            doc,
            need("workload")?,
            need("a")?,
            need("b")?,
        ),
        // The README's cold first run (e2e/first-hour.sh).
        "first-hour" => crate::results_first_hour::first_hour_table(doc),
        other => Err(format!(
            "unknown table `{other}` (known: runs, medians, scale, restart, headline, faults, faults-run, first-hour, profile, watch-limit, {})",
            crate::results_machinery::TABLES.join(", ")
        )),
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
        let load = |file: &str| {
            std::fs::read_to_string(root.join(file))
                .map_err(|e| format!("{file}: {e}"))
                .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| format!("{file}: {e}")))
        };
        let rendered = load(&s.file).and_then(|v| render(&v, &s.spec, &load));
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

/// The docs in which every table is either rendered from a results file
/// or marked as not backed by one (issue #29, point 11).
/// `docs/reliability.md` holds the fault suite's (`FAULT_RECORD`).
pub const GUARDED_DOCS: [&str; 4] = [
    "docs/benchmarks.md",
    "docs/cpu.md",
    "docs/scale.md",
    "docs/reliability.md",
];
pub const UNBACKED_OPEN: &str = "<!-- unbacked:";
pub const UNBACKED_CLOSE: &str = "<!-- /unbacked -->";
/// The line right above a table that holds no measured figure (settings,
/// commands, definitions).
pub const NO_FIGURES: &str = "<!-- no figures -->";
/// What a reader sees first in a marked region: the line after the marker
/// starts with it.
pub const UNBACKED_NOTE: &str = "> **Not backed by a committed results file:**";

/// Tables of `text` that are neither between results markers nor in a
/// region marked unbacked, and marked regions that do not say so visibly.
pub fn unbacked_tables(doc: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let (mut in_results, mut unbacked_at, mut in_fence, mut in_table) = (false, None, false, false);
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let n = i + 1;
        let t = line.trim_start();
        if t.starts_with("```") {
            in_fence = !in_fence;
        }
        if in_fence {
            continue;
        }
        if t.starts_with(OPEN) {
            in_results = true;
        } else if t.starts_with(CLOSE) {
            in_results = false;
        } else if let Some(marker) = t.strip_prefix(UNBACKED_OPEN) {
            let why = marker.trim_end_matches("-->").trim();
            if why.is_empty() {
                problems.push(format!(
                    "{doc}:{n}: say why the figures are not backed: `{UNBACKED_OPEN} <why> -->`"
                ));
            }
            if unbacked_at.is_some() {
                problems.push(format!("{doc}:{n}: an unbacked region inside another"));
            }
            unbacked_at = Some(n);
            let next = lines.peek().map(|(_, l)| l.trim_start()).unwrap_or("");
            if !next.starts_with(UNBACKED_NOTE) {
                problems.push(format!(
                    "{doc}:{n}: the line after an unbacked marker must tell the reader: `{UNBACKED_NOTE} …`"
                ));
            }
        } else if t.starts_with(UNBACKED_CLOSE) && unbacked_at.take().is_none() {
            problems.push(format!(
                "{doc}:{n}: {UNBACKED_CLOSE} without its opening marker"
            ));
        }
        let is_table = t.starts_with('|');
        let says_no_figures = i > 0
            && text
                .lines()
                .nth(i - 1)
                .is_some_and(|p| p.trim() == NO_FIGURES);
        if is_table && !in_table && !in_results && unbacked_at.is_none() && !says_no_figures {
            problems.push(format!(
                "{doc}:{n}: a table of figures from no results file: render it from one \
                 (`{OPEN} benches/results/<file>.json <table> -->`, benches/results/README.md) \
                 or mark it `{UNBACKED_OPEN} <why> -->` … `{UNBACKED_CLOSE}`"
            ));
        }
        in_table = is_table;
    }
    if let Some(at) = unbacked_at {
        problems.push(format!("{doc}:{at}: no {UNBACKED_CLOSE}"));
    }
    problems
}

// ---- The checks, run by `cargo test --test docs` ----

#[test]
fn results_tables_in_docs_are_what_their_committed_results_files_render() {
    let write = std::env::var("TFJOB_WRITE_RESULTS").is_ok_and(|v| v == "1");
    let mut problems = Vec::new();
    // The README's "How long" table too (e2e/first-hour.sh's runs).
    let readme = crate::repo::repo_root().join("README.md");
    for chapter in crate::repo::chapters().into_iter().chain([readme]) {
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
fn results_every_table_in_the_benchmark_docs_is_rendered_from_a_file_or_marked_unbacked() {
    let mut problems = Vec::new();
    for doc in GUARDED_DOCS {
        let text =
            std::fs::read_to_string(crate::repo::repo_root().join(doc)).expect("a readable doc");
        problems.extend(unbacked_tables(doc, &text));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn results_an_unmarked_table_and_a_silent_unbacked_region_are_reported() {
    let marked = format!(
        "{UNBACKED_OPEN} measured before the results folder -->\n{UNBACKED_NOTE} old run.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n{UNBACKED_CLOSE}\n"
    );
    assert!(
        unbacked_tables("d.md", &marked).is_empty(),
        "{:?}",
        unbacked_tables("d.md", &marked)
    );
    let rendered =
        format!("{OPEN} benches/results/r.json runs workload=jobs -->\n| a |\n|---|\n{CLOSE}\n");
    assert!(unbacked_tables("d.md", &rendered).is_empty());
    let settings = format!("{NO_FIGURES}\n| flag | meaning |\n|---|---|\n");
    assert!(unbacked_tables("d.md", &settings).is_empty());
    let fenced = "```text\n| not a table |\n```\n";
    assert!(unbacked_tables("d.md", fenced).is_empty());
    let bare = "text\n\n| a | b |\n|---|---|\n| 1 | 2 |\n";
    let found = unbacked_tables("d.md", bare);
    assert_eq!(found.len(), 1, "one table, one problem: {found:?}");
    assert!(
        found[0].starts_with("d.md:3: a table of figures from no results file"),
        "{found:?}"
    );
    let silent = format!("{UNBACKED_OPEN} old -->\n| a |\n{UNBACKED_CLOSE}\n");
    let found = unbacked_tables("d.md", &silent);
    assert!(
        found.len() == 1 && found[0].contains("must tell the reader"),
        "{found:?}"
    );
    let unclosed = format!("{UNBACKED_OPEN} old -->\n{UNBACKED_NOTE} x\n");
    assert!(unbacked_tables("d.md", &unclosed)[0].contains("no <!-- /unbacked -->"));
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
        if path.extension().is_none_or(|e| e != "json") || path.ends_with(HEADLINE_ROWS) {
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
    let no_other = |f: &str| Err(format!("{f}: not in this test"));
    let table = render(&file, "runs workload=jobs", &no_other).expect("renders");
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
