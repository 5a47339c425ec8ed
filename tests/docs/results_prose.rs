//! The figures in the prose of the benchmark docs (issue #29, point 11:
//! every published figure comes from a committed results file). Their
//! tables are rendered from the files ([`crate::results`]); the sentences
//! around them quote figures too ("recovered 16.7 s after the heal"), and
//! those must be values of the files the page renders its tables from, or
//! a re-recording would leave them behind.
//!
//! A figure here is a decimal number in prose (outside code, comments and
//! tables): the suite's measurements are decimals, while its settings and
//! bounds (30 s, 20 rounds, 42 cases) are integers the tests define.
//! Version numbers (`v0.8`, `1.34.4`, `HTTP/1.1`) are not figures.
//!
//! The numbered chapters (`docs/00-…` on) render no results tables, and
//! name versions with one dot ("Kubernetes 1.34"): there a figure is a
//! decimal followed by a unit ("19.2 s", "0.22×"), and it must be a value of
//! a results file the chapter links to. Integers are not checked (a
//! chapter's "30 s" is a timeout the code sets, not a measurement).
use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::markdown::code_free_lines;
use crate::repo::repo_root;
use crate::results::sections;

/// The pages whose prose is held to their results files.
pub const DOCS: &[&str] = &[
    "docs/reliability.md",
    "docs/benchmarks.md",
    "docs/cpu.md",
    "docs/scale.md",
];

/// The decimal numbers of a page's prose: `(line, number)`.
pub fn prose_decimals(text: &str) -> Vec<(usize, String)> {
    decimals_and_what_follows(text)
        .into_iter()
        .map(|(line, n, _)| (line, n))
        .collect()
}

/// Units after which a decimal is a measurement.
const UNITS: &[&str] = &[
    " s", " ms", " min", " seconds", " minutes", "×", " MB", " MiB", " GB", "%",
];

/// The decimals of a page's prose that a unit follows: `(line, number)`.
pub fn measured_decimals(text: &str) -> Vec<(usize, String)> {
    decimals_and_what_follows(text)
        .into_iter()
        .filter(|(_, _, rest)| {
            UNITS.iter().any(|unit| {
                rest.strip_prefix(unit)
                    .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric()))
            })
        })
        .map(|(line, n, _)| (line, n))
        .collect()
}

/// Each decimal of a page's prose: `(line, number, the rest of its line)`.
fn decimals_and_what_follows(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for (line, prose) in code_free_lines(text) {
        if prose.trim_start().starts_with('|') {
            continue;
        }
        let chars: Vec<char> = prose.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            if !chars[i].is_ascii_digit() {
                i += 1;
                continue;
            }
            let start = i;
            // A thousands comma belongs to the number: `1,234.5` is 1234.5.
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || chars[i] == '.'
                    || (chars[i] == ',' && chars.get(i + 1).is_some_and(char::is_ascii_digit)))
            {
                i += 1;
            }
            let token: String = chars[start..i].iter().filter(|c| **c != ',').collect();
            let token = token.trim_end_matches('.');
            let after_version_mark =
                start > 0 && (chars[start - 1].is_ascii_alphanumeric() || chars[start - 1] == '/');
            if token.matches('.').count() == 1 && !after_version_mark {
                let rest: String = chars[i..].iter().collect();
                out.push((line, token.to_owned(), rest));
            }
        }
    }
    out
}

/// Every number in a results file, as the file has it and as the docs
/// round it (to 1, 2 or 3 decimals), and the decimals inside its texts
/// (the load averages of `meta.machine`).
fn numbers(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Number(n) => {
            out.insert(n.to_string());
            if let Some(x) = n.as_f64() {
                out.extend((1..=3).map(|digits| format!("{x:.digits$}")));
            }
        }
        Value::String(s) => {
            out.extend(prose_decimals(s).into_iter().map(|(_, n)| n));
        }
        Value::Array(items) => items.iter().for_each(|i| numbers(i, out)),
        Value::Object(fields) => fields.values().for_each(|f| numbers(f, out)),
        _ => {}
    }
}

/// The decimals of `doc`'s prose (its text `text`) that none of the
/// results files its tables render from holds, one line each, or why the
/// files could not be read.
pub fn strays(root: &Path, doc: &str, text: &str) -> Result<Vec<String>, String> {
    let files: BTreeSet<String> = sections(text)
        .map_err(|e| format!("{doc}: {e}"))?
        .into_iter()
        .map(|s| s.file)
        .collect();
    let mut known = BTreeSet::new();
    // What the page's own rendered tables show (a ratio of two runs, a
    // median) may be quoted too: the drift guard holds those to the files.
    for section in sections(text).map_err(|e| format!("{doc}: {e}"))? {
        let cells = text[section.body].replace('|', " ");
        known.extend(prose_decimals(&cells).into_iter().map(|(_, n)| n));
    }
    numbers_of_files(root, doc, &files, &mut known)?;
    Ok(prose_decimals(text)
        .into_iter()
        .filter(|(_, n)| !known.contains(n))
        .map(|(line, n)| format!("{doc}:{line}: {n} is in none of {files:?}"))
        .collect())
}

/// The numbered chapters, `docs/NN-….md`.
fn chapters(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("a readable docs/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| {
            name.ends_with(".md")
                && name.len() > 3
                && name[..2].chars().all(|c| c.is_ascii_digit())
                && name[2..].starts_with('-')
        })
        .map(|name| format!("docs/{name}"))
        .collect();
    out.sort();
    out
}

/// The results files a page links to (`../benches/results/<name>.json`),
/// as paths from the repository's root.
fn linked_results(text: &str) -> BTreeSet<String> {
    text.match_indices("benches/results/")
        .filter_map(|(at, _)| {
            let rest = &text[at..];
            let end = rest
                .find(|c: char| c == ')' || c == '`' || c == '"' || c.is_whitespace())
                .unwrap_or(rest.len());
            rest[..end]
                .ends_with(".json")
                .then(|| rest[..end].to_owned())
        })
        .collect()
}

/// The measured figures of a chapter's prose (`measured_decimals`) that
/// none of the results files it links to holds, one line each, or why a
/// file could not be read.
pub fn chapter_strays(root: &Path, doc: &str, text: &str) -> Result<Vec<String>, String> {
    let files = linked_results(text);
    let mut known = BTreeSet::new();
    numbers_of_files(root, doc, &files, &mut known)?;
    Ok(measured_decimals(text)
        .into_iter()
        .filter(|(_, n)| !known.contains(n))
        .map(|(line, n)| {
            format!("{doc}:{line}: {n} is in none of the results files it links to {files:?}")
        })
        .collect())
}

#[test]
fn results_the_measured_figures_in_the_chapters_prose_are_in_results_files_they_link() {
    let root = repo_root();
    let chapters = chapters(&root);
    assert!(chapters.len() > 10, "the chapters: {chapters:?}");
    let mut problems = Vec::new();
    for doc in &chapters {
        let text = std::fs::read_to_string(root.join(doc)).expect("a readable chapter");
        match chapter_strays(&root, doc, &text) {
            Ok(found) => problems.extend(found),
            Err(e) => problems.push(e),
        }
    }
    assert!(
        problems.is_empty(),
        "measured figures in the chapters that no results file they link holds (link the file, or say it in words):\n{}",
        problems.join("\n")
    );
}

#[test]
fn results_prose_a_chapter_figure_no_linked_results_file_holds_is_reported() {
    let dir = std::env::temp_dir().join(format!("tfjob-chapter-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("benches/results")).expect("a temp dir");
    let file = serde_json::json!({"results": {"running_s": 19.2137, "ratio": 0.2231}});
    std::fs::write(dir.join("benches/results/r.json"), file.to_string()).expect("write");
    let text = "On Kubernetes 1.34 with client-go 0.23, ours took 19.2 s, 0.22× \
                ([r](../benches/results/r.json)).\n\
                Without it, 407.5 s and 3.5×; 1.05 seconds; a 2.5 GB disk.\n\
                `0.33 s` in code, 30 s an integer, 2.5 sessions no unit.\n";
    let found = chapter_strays(&dir, "c.md", text).expect("the file reads");
    assert_eq!(
        found,
        ["407.5", "3.5", "1.05", "2.5"]
            .map(|n| format!(
                "c.md:2: {n} is in none of the results files it links to {{\"benches/results/r.json\"}}"
            ))
            .to_vec()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn results_the_decimals_in_the_docs_prose_are_figures_of_their_results_files() {
    let root = repo_root();
    let mut problems = Vec::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(root.join(doc)).expect("a readable doc");
        match strays(&root, doc, &text) {
            Ok(found) => problems.extend(found),
            Err(e) => problems.push(e),
        }
    }
    assert!(
        problems.is_empty(),
        "figures in the prose that its results files do not hold (quote the file, or say it in words):\n{}",
        problems.join("\n")
    );
}

#[test]
fn results_prose_a_decimal_no_results_file_holds_is_reported() {
    let dir = std::env::temp_dir().join(format!("tfjob-prose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = serde_json::json!({
        "meta": {"machine": "2 cores, load average 10.36 before"},
        "results": {"scenarios": [{"recovered_s": 16.7, "running_s": 1234.5678}]}
    });
    std::fs::write(dir.join("r.json"), file.to_string()).expect("write");
    let text = "<!-- results: r.json faults -->\n| x | **0.97×** |\n<!-- /results -->\n\
                Recovered 16.7 s after the heal, load 10.36, Running in 1,234.6 s.\n\
                The ratio in the table, 0.97×, may be quoted.\n\
                Misquoted: 16.8 s, 1,234.7 s; 0.98×.\n";
    let found = strays(&dir, "d.md", text).expect("the file reads");
    assert_eq!(
        found,
        ["16.8", "1234.7", "0.98"]
            .map(|n| format!("d.md:6: {n} is in none of {{\"r.json\"}}"))
            .to_vec()
    );
    let missing = strays(
        &dir,
        "d.md",
        "<!-- results: nope.json faults -->\n<!-- /results -->\n",
    );
    assert!(
        missing
            .as_ref()
            .is_err_and(|e| e.starts_with("d.md: nope.json:")),
        "{missing:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn results_prose_decimals_skip_code_tables_versions_and_sentence_ends() {
    let text = "Recovered 16.7 s after the heal, p95 15.2.\n\
                | 99.9 | in a table |\n\
                KWOK v0.8 on Kubernetes 1.34.4 over HTTP/1.1, `0.5` in code.\n\
                <!-- 7.5 in a comment -->\n\
                ```\n3.25 in a block\n```\n\
                2,032 s and 30 s are integers; 0.157 s is not, nor 1,234.5.";
    assert_eq!(
        prose_decimals(text),
        vec![
            (1, "16.7".to_owned()),
            (1, "15.2".to_owned()),
            (8, "0.157".to_owned()),
            (8, "1234.5".to_owned())
        ]
    );
}

/// Every number of each results file in `files` (paths from the root).
fn numbers_of_files(
    root: &Path,
    doc: &str,
    files: &BTreeSet<String>,
    known: &mut BTreeSet<String>,
) -> Result<(), String> {
    for file in files {
        let raw =
            std::fs::read_to_string(root.join(file)).map_err(|e| format!("{doc}: {file}: {e}"))?;
        let parsed: Value =
            serde_json::from_str(&raw).map_err(|e| format!("{doc}: {file}: not JSON: {e}"))?;
        numbers(&parsed, known);
    }
    Ok(())
}
