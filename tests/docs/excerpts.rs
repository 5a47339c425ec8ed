//! Checks 1 and 2: code excerpts and log lines in `docs/` match the code.
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::markdown::{Block, fenced_blocks};
use crate::repo::{chapters, files_under, rel, repo_root};

const ELISION: &str = "// ...";

/// Splits an excerpt at its `// ...` lines into the parts that must appear.
fn segments(body: &[String]) -> Vec<Vec<&str>> {
    let mut parts = vec![Vec::new()];
    for line in body {
        let t = line.trim();
        if t == ELISION || t.starts_with("// ... ") {
            parts.push(Vec::new());
        } else if let Some(last) = parts.last_mut() {
            last.push(t);
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// Where `needle` (trimmed lines) occurs in `hay` (trimmed lines) at or
/// after `from`; otherwise the closest partial match, for the message.
fn find_lines(hay: &[&str], needle: &[&str], from: usize) -> Result<usize, (usize, usize)> {
    let mut best = (0, 0); // (lines matched, at source index)
    for start in from..hay.len() {
        let matched = needle
            .iter()
            .zip(&hay[start..])
            .take_while(|(a, b)| a == b)
            .count();
        if matched == needle.len() {
            return Ok(start);
        }
        if matched > best.0 {
            best = (matched, start);
        }
    }
    Err(best)
}

/// Checks one excerpt; returns a message per problem.
fn check_excerpt(doc: &str, block: &Block, source: &str, problems: &mut Vec<String>) {
    let path = repo_root().join(source);
    let Ok(text) = std::fs::read_to_string(&path) else {
        problems.push(format!(
            "{doc}:{}: the excerpt names {source}, which does not exist",
            block.line
        ));
        return;
    };
    let hay: Vec<&str> = text.lines().map(str::trim).collect();
    let mut from = 0;
    for part in segments(&block.body) {
        match find_lines(&hay, &part, from) {
            Ok(at) => from = at + part.len(),
            Err((matched, at)) => {
                let mut msg = format!(
                    "{doc}:{}: excerpt no longer matches {source}",
                    block.line + 1
                );
                if matched == 0 {
                    let _ = write!(msg, "\n    not found: `{}`", part[0]);
                } else {
                    let _ = write!(
                        msg,
                        "\n    {matched} line(s) match from {source}:{}, then\n    doc:    `{}`\n    source: `{}`",
                        at + 1,
                        part[matched],
                        hay.get(at + matched).copied().unwrap_or("<end of file>")
                    );
                }
                if from > 0 {
                    let _ = write!(
                        msg,
                        "\n    (searched after {source}:{from}, where the previous part ended)"
                    );
                }
                problems.push(msg);
                return;
            }
        }
    }
}

#[test]
fn every_rust_block_in_docs_is_a_marked_excerpt_that_still_matches_its_source() {
    let mut problems = Vec::new();
    let mut excerpts = 0;
    for chapter in chapters() {
        let doc = rel(&chapter);
        let text = std::fs::read_to_string(&chapter).expect("a readable chapter");
        for block in fenced_blocks(&text) {
            match (&block.excerpt_of, block.lang.as_str()) {
                (Some(source), _) => {
                    excerpts += 1;
                    check_excerpt(&doc, &block, source, &mut problems);
                }
                (None, "rust") => problems.push(format!(
                    "{doc}:{}: a rust block without `<!-- excerpt: path -->` above it",
                    block.line
                )),
                (None, _) => {}
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} of the docs' code excerpts drifted:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // The check must have had something to check.
    assert!(excerpts > 20, "only {excerpts} excerpts found in docs/");
}

/// One log line as the text formatter prints it.
struct LogLine {
    target: String,
    message: String,
    fields: Vec<String>,
    /// The pipeline's `stage="N name"` value, which the code spells as a
    /// literal: it must be the one the call prints.
    stage: Option<String>,
}

/// Parses `2026-…Z  INFO span{…}: target: message k=v k2=v2`; `None` for
/// anything else (shell lines, `…`, YAML).
fn parse_log_line(line: &str) -> Option<LogLine> {
    let mut words = line.split_whitespace();
    let stamp = words.next()?;
    if !(stamp.len() > 20 && stamp.ends_with('Z') && stamp.starts_with("20")) {
        return None;
    }
    let level = words.next()?;
    if !["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level) {
        return None;
    }
    let mut rest = line[line.find(level)? + level.len()..].trim_start();
    // Span prefixes: `name{fields}: ` (possibly several, `a{…}:b{…}: `).
    while let Some(open) = rest.find('{') {
        let before = &rest[..open];
        if before.contains(' ') || before.contains(": ") {
            break;
        }
        let close = rest.find("}: ")?;
        rest = &rest[close + 3..];
    }
    let (target, rest) = rest.split_once(": ")?;
    let is_field = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
    };
    let words: Vec<&str> = rest.split(' ').collect();
    let first_field = words
        .iter()
        .position(|w| is_field(w))
        .unwrap_or(words.len());
    let stage = line
        .split_once(" stage=\"")
        .and_then(|(_, value)| value.split_once('"'))
        .map(|(value, _)| value.to_owned());
    Some(LogLine {
        stage,
        target: target.to_owned(),
        message: words[..first_field].join(" "),
        fields: words[first_field..]
            .iter()
            .filter(|w| is_field(w))
            .filter_map(|w| w.split_once('=').map(|(n, _)| n.to_owned()))
            .collect(),
    })
}

/// Every `.rs` file under `src/`, with its text.
fn sources() -> Vec<(PathBuf, String)> {
    files_under("src", "rs")
        .into_iter()
        .filter_map(|path| Some((path.clone(), std::fs::read_to_string(&path).ok()?)))
        .collect()
}

/// The files a target's events can come from: `tfjob_operator::a::b` is
/// `src/a/b.rs` or `src/a/b/mod.rs`; `pipeline` is any file.
fn files_for<'a>(target: &str, all: &'a [(PathBuf, String)]) -> Vec<&'a (PathBuf, String)> {
    if target == "pipeline" {
        return all.iter().collect();
    }
    let module = target
        .trim_start_matches("tfjob_operator::")
        .replace("::", "/");
    let candidates = [
        repo_root().join(format!("src/{module}.rs")),
        repo_root().join(format!("src/{module}/mod.rs")),
        repo_root().join("src/main.rs"),
    ];
    let wanted = if target == "tfjob_operator" {
        &candidates[2..]
    } else {
        &candidates[..2]
    };
    all.iter().filter(|(p, _)| wanted.contains(p)).collect()
}

/// The `tracing::…!(…)` call around byte `at` of `text`.
fn call_around(text: &str, at: usize) -> &str {
    let start = text[..at].rfind("tracing::").unwrap_or(at);
    let end = text[at..].find(';').map_or(text.len(), |e| at + e);
    &text[start..end]
}

/// The field names a `tracing::…!(…)` call records, in order: `a = x`,
/// `%a`, `?a` and a bare `a` before the message literal.
fn call_fields(call: &str) -> Vec<String> {
    let Some(open) = call.find('(') else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let (mut depth, mut in_str, mut start) = (0i32, false, open + 1);
    let bytes = call.as_bytes();
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'(' | b'[' | b'{' if !in_str => depth += 1,
            b')' | b']' | b'}' if !in_str => depth -= 1,
            b',' if !in_str && depth == 0 => {
                args.push(call[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            break;
        }
        i += 1;
    }
    let mut fields = Vec::new();
    for arg in args {
        if arg.starts_with('"') {
            break;
        }
        if arg.starts_with("target:") || arg.starts_with("parent:") {
            continue;
        }
        let name = match arg.split_once('=') {
            Some((name, _)) => name.trim(),
            None => arg.trim_start_matches(['%', '?']),
        };
        fields.push(name.to_owned());
    }
    fields
}

#[test]
fn every_log_line_in_docs_is_one_our_code_prints_with_those_fields() {
    let all = sources();
    let mut problems = Vec::new();
    let mut checked = 0;
    for chapter in chapters() {
        let doc = rel(&chapter);
        let text = std::fs::read_to_string(&chapter).expect("a readable chapter");
        for block in fenced_blocks(&text) {
            if !matches!(block.lang.as_str(), "" | "text") {
                continue;
            }
            for (offset, line) in block.body.iter().enumerate() {
                let Some(log) = parse_log_line(line) else {
                    continue;
                };
                if !(log.target == "pipeline" || log.target.starts_with("tfjob_operator")) {
                    continue;
                }
                checked += 1;
                let at = format!("{doc}:{}", block.line + 1 + offset);
                let literal = format!("\"{}\"", log.message);
                let pipeline = log.target == "pipeline";
                let calls: Vec<(&PathBuf, &str)> = files_for(&log.target, &all)
                    .into_iter()
                    .flat_map(|(path, text)| {
                        text.match_indices(&literal)
                            .map(move |(i, _)| (path, call_around(text, i)))
                    })
                    .filter(|(_, call)| !pipeline || call.contains("target: \"pipeline\""))
                    .collect();
                let Some((path, call)) = calls.first() else {
                    problems.push(format!(
                        "{at}: no `{}` event with the message {literal} in the code",
                        log.target
                    ));
                    continue;
                };
                if let Some(stage) = &log.stage {
                    let spelled = format!("stage = \"{stage}\"");
                    if !calls.iter().any(|(_, c)| c.contains(&spelled)) {
                        let spelled_in_code: Vec<&str> = calls
                            .iter()
                            .filter_map(|(_, c)| c.split_once("stage = \"")?.1.split_once('"'))
                            .map(|(value, _)| value)
                            .collect();
                        problems.push(format!(
                            "{at}: the doc shows {literal} at stage {stage:?}, the code logs it at {spelled_in_code:?}"
                        ));
                    }
                }
                if !calls.iter().any(|(_, c)| call_fields(c) == log.fields) {
                    problems.push(format!(
                        "{at}: the doc shows {literal} with the fields {:?}, but {} logs {:?}:\n    {}",
                        log.fields,
                        rel(path),
                        call_fields(call),
                        call.split_whitespace().collect::<Vec<_>>().join(" ")
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} log line(s) in docs/ no longer match the code:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(checked > 30, "only {checked} log lines found in docs/");
}

#[test]
fn an_excerpt_that_drifted_is_reported_with_doc_line_and_source() {
    let doc =
        "<!-- excerpt: src/lib.rs -->\n```rust\npub mod api;\npub mod nothing_like_this;\n```\n";
    let blocks = fenced_blocks(doc);
    let mut problems = Vec::new();
    check_excerpt("docs/x.md", &blocks[0], "src/lib.rs", &mut problems);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("docs/x.md:3: excerpt no longer matches src/lib.rs"));
    assert!(problems[0].contains("pub mod nothing_like_this;"));
}

#[test]
fn an_elided_excerpt_matches_its_parts_in_order_and_not_out_of_order() {
    let in_order =
        "<!-- excerpt: src/lib.rs -->\n```rust\npub mod api;\n// ...\npub mod tfjob;\n```\n";
    let reversed =
        "<!-- excerpt: src/lib.rs -->\n```rust\npub mod tfjob;\n// ...\npub mod api;\n```\n";
    let mut problems = Vec::new();
    check_excerpt(
        "a.md",
        &fenced_blocks(in_order)[0],
        "src/lib.rs",
        &mut problems,
    );
    assert!(problems.is_empty(), "{problems:?}");
    check_excerpt(
        "b.md",
        &fenced_blocks(reversed)[0],
        "src/lib.rs",
        &mut problems,
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
}

#[test]
fn a_log_line_parses_into_target_message_and_field_names() {
    let line = "2026-11-22T00:39:50.899357Z DEBUG reconcile{controller=tfjob key=default/j reconcile_id=1}: pipeline: observed the cache, planned stage=\"6 reconcile\" key=default/j pods=0";
    let log = parse_log_line(line).expect("a log line");
    assert_eq!(log.target, "pipeline");
    assert_eq!(log.message, "observed the cache, planned");
    assert_eq!(log.fields, ["stage", "key", "pods"]);
    assert_eq!(log.stage.as_deref(), Some("6 reconcile"));
    assert!(parse_log_line("kubectl get pods").is_none());
}
