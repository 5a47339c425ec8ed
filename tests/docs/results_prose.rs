//! The figures in the prose of `docs/reliability.md` (issue #29, point 11:
//! every published figure comes from a committed results file). Its tables
//! are rendered from the files ([`crate::results`]); the sentences around
//! them quote figures too ("recovered 16.7 s after the heal"), and those
//! must be values of the files the page renders its tables from, or a
//! re-recording would leave them behind.
//!
//! A figure here is a decimal number in prose (outside code, comments and
//! tables): the suite's measurements are decimals, while its settings and
//! bounds (30 s, 20 rounds, 42 cases) are integers the tests define.
//! Version numbers (`v0.8`, `1.34.4`, `HTTP/1.1`) are not figures.
use std::collections::BTreeSet;

use serde_json::Value;

use crate::markdown::code_free_lines;
use crate::repo::repo_root;
use crate::results::sections;

/// The page whose prose is held to its files.
const DOC: &str = "docs/reliability.md";

/// The decimal numbers of a page's prose: `(line, number)`.
pub fn prose_decimals(text: &str) -> Vec<(usize, String)> {
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
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let token: String = chars[start..i].iter().collect();
            let token = token.trim_end_matches('.');
            let after_version_mark =
                start > 0 && (chars[start - 1].is_ascii_alphanumeric() || chars[start - 1] == '/');
            if token.matches('.').count() == 1 && !after_version_mark {
                out.push((line, token.to_owned()));
            }
        }
    }
    out
}

/// Every number in a results file, as the docs print a decimal, and the
/// decimals inside its texts (the load averages of `meta.machine`).
fn numbers(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Number(n) => {
            out.insert(n.to_string());
        }
        Value::String(s) => {
            out.extend(prose_decimals(s).into_iter().map(|(_, n)| n));
        }
        Value::Array(items) => items.iter().for_each(|i| numbers(i, out)),
        Value::Object(fields) => fields.values().for_each(|f| numbers(f, out)),
        _ => {}
    }
}

#[test]
fn results_the_decimals_in_reliability_prose_are_figures_of_its_results_files() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join(DOC)).expect("the reliability page");
    let files: BTreeSet<String> = sections(&text)
        .expect("its results markers parse")
        .into_iter()
        .map(|s| s.file)
        .collect();
    let mut known = BTreeSet::new();
    for file in &files {
        let raw = std::fs::read_to_string(root.join(file)).expect("a results file it renders");
        let doc: Value = serde_json::from_str(&raw).expect("a results file is JSON");
        numbers(&doc, &mut known);
    }
    let strays: Vec<String> = prose_decimals(&text)
        .into_iter()
        .filter(|(_, n)| !known.contains(n))
        .map(|(line, n)| format!("{DOC}:{line}: {n} is in none of {files:?}"))
        .collect();
    assert!(
        strays.is_empty(),
        "figures in the prose that its results files do not hold (quote the file, or say it in words):\n{}",
        strays.join("\n")
    );
}

#[test]
fn results_prose_decimals_skip_code_tables_versions_and_sentence_ends() {
    let text = "Recovered 16.7 s after the heal, p95 15.2.\n\
                | 99.9 | in a table |\n\
                KWOK v0.8 on Kubernetes 1.34.4 over HTTP/1.1, `0.5` in code.\n\
                <!-- 7.5 in a comment -->\n\
                ```\n3.25 in a block\n```\n\
                2,032 s and 30 s are integers; 0.157 s is not.";
    assert_eq!(
        prose_decimals(text),
        vec![
            (1, "16.7".to_owned()),
            (1, "15.2".to_owned()),
            (8, "0.157".to_owned())
        ]
    );
}
