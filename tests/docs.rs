//! The tutorial's drift guard (`cargo test --test docs`, no cluster needed).
//!
//! The chapters in `docs/` quote our code and our logs. Code moves on; a
//! quote that no longer matches teaches something false. Two checks:
//!
//! 1. **Code excerpts.** Every ```` ```rust ```` block in `docs/*.md` must be
//!    preceded by a marker naming the file it quotes:
//!
//!    ```text
//!    <!-- excerpt: src/tfjob/reconcile.rs -->
//!    ```
//!
//!    and its lines must appear in that file verbatim and consecutively,
//!    modulo leading indentation. A line `// ...` marks an elision: the parts
//!    before and after it must each appear, in that order.
//! 2. **Log lines.** Every log line shown in a plain code block whose target
//!    is ours (`pipeline`, or `tfjob_operator::…`) must have its message as a
//!    string literal in the module the target names (for `pipeline`: any
//!    `target: "pipeline"` call), with exactly the fields that call records,
//!    in its order. Timestamps and values differ run to run; messages and field
//!    names must not.
//!
//! A failure names the doc, the line and the source file. This is what makes
//! "every sentence true" checkable for the parts of a chapter that are code.
//!
//! It also guards the house's shape (CONTRIBUTING):
//!
//! 3. **Length.** No `.rs` file we write passes 1,000 lines, and one over 700
//!    lines of code says why in a `//! **Length:**` paragraph. Generated
//!    files are exempt by name ([`GENERATED`]), and each must say so.
//! 4. **Imports go downward.** No `pub use` anywhere in `src/`, so every
//!    import names the module that defines the item; and the top-level
//!    modules import only downward (`observability` never names
//!    `crate::runtime`, `runtime` never `crate::api`, `crate::tfjob` or
//!    `crate::cli`, ...). Line-based: a child reaching a parent's private
//!    `use` through `super::` is not caught.
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const MARKER_PREFIX: &str = "<!-- excerpt:";
const MARKER_SUFFIX: &str = "-->";
const ELISION: &str = "// ...";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The chapters, in order (`docs/*.md`).
fn chapters() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs
}

fn rel(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// One fenced code block of a Markdown file.
struct Block {
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    /// The marker's path, if the nearest non-blank line above is a marker.
    excerpt_of: Option<String>,
    body: Vec<String>,
}

fn fenced_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = text.lines().enumerate();
    let mut previous: Option<&str> = None;
    while let Some((i, line)) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            let indent = line.len() - trimmed.len();
            let mut body = Vec::new();
            for (_, inner) in lines.by_ref() {
                if inner.trim_start().starts_with("```") {
                    break;
                }
                // Drop the fence's own indentation (a block inside a list item).
                let cut = inner.len() - inner.trim_start().len();
                body.push(inner[cut.min(indent)..].to_owned());
            }
            let excerpt_of = previous.and_then(|p| {
                p.trim()
                    .strip_prefix(MARKER_PREFIX)?
                    .strip_suffix(MARKER_SUFFIX)
                    .map(|s| s.trim().to_owned())
            });
            blocks.push(Block {
                line: i + 1,
                lang: lang.trim().to_owned(),
                excerpt_of,
                body,
            });
            previous = None;
        } else if !line.trim().is_empty() {
            previous = Some(line);
        }
    }
    blocks
}

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
    Some(LogLine {
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
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo_root().join("src"), &mut out);
    out
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
    assert!(parse_log_line("kubectl get pods").is_none());
}

/// The test names under `dir` (functions after a `#[test]`-like attribute)
/// and the module paths of its files, for matching `cargo test` filters.
fn test_names(dir: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut files = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    walk(&repo_root().join(dir), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let module = rel(&file).replace('/', "::");
        let mut after_attribute = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
                after_attribute = true;
            } else if after_attribute && line.contains("fn ") {
                let name = line.split("fn ").nth(1).unwrap_or_default();
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.push(format!("{module}::{name}"));
                after_attribute = false;
            }
        }
    }
    names
}

#[test]
fn every_cargo_test_filter_in_docs_selects_at_least_one_test() {
    let lib = test_names("src");
    let e2e = test_names("tests/e2e");
    let mut problems = Vec::new();
    let mut checked = 0;
    for chapter in chapters() {
        let doc = rel(&chapter);
        let text = std::fs::read_to_string(&chapter).expect("a readable chapter");
        for (i, line) in text.lines().enumerate() {
            let Some(command) = line.split("cargo test ").nth(1) else {
                continue;
            };
            let words: Vec<&str> = command
                .split(|c: char| c.is_whitespace() || c == '`')
                .filter(|w| !w.is_empty())
                .collect();
            let (names, filter) = match words.as_slice() {
                ["--lib", filter, ..] if !filter.starts_with('-') => (&lib, *filter),
                ["--test", "e2e", filter, ..] if !filter.starts_with('-') => (&e2e, *filter),
                _ => continue,
            };
            checked += 1;
            if !names.iter().any(|n| n.contains(filter)) {
                problems.push(format!(
                    "{doc}:{}: `cargo test … {filter}` selects no test",
                    i + 1
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked > 20,
        "only {checked} cargo test filters found in docs/"
    );
}

// ---- The house's shape: file length and imports ----

/// Files that are generated, not written: exempt from the length limit.
/// Each must say so in its first line (checked), so the list cannot hide a
/// hand-written file.
const GENERATED: &[&str] = &["src/runtime/client/protobuf/generated.rs"];

/// CONTRIBUTING: "split a file that grows near 1,000 lines along a seam".
const MAX_LINES: usize = 1000;

/// Above this many lines of code, a file's `//!` says why it is one file,
/// in a paragraph starting `**Length:**`.
const EXPLAINED_LINES_OF_CODE: usize = 700;

/// Every `.rs` file we write: `src/`, `tests/`, `benches/`, `examples/`.
fn rust_files() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "examples"] {
        walk(&repo_root().join(dir), &mut files);
    }
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a readable source file");
            (rel(&p), text)
        })
        .collect()
}

/// Lines that are neither blank nor only a comment.
fn lines_of_code(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// What is wrong with the length of the file at `path`: over
/// [`MAX_LINES`] lines, or over [`EXPLAINED_LINES_OF_CODE`] lines of code
/// without a `//! **Length:**` paragraph. Generated files are exempt.
fn length_problems(path: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if GENERATED.contains(&path) {
        return problems;
    }
    let lines = text.lines().count();
    if lines > MAX_LINES {
        problems.push(format!(
            "{path}: {lines} lines (limit {MAX_LINES}): split it along a seam"
        ));
    }
    let code = lines_of_code(text);
    if code > EXPLAINED_LINES_OF_CODE && !text.contains("//! **Length:**") {
        problems.push(format!(
            "{path}: {code} lines of code (over {EXPLAINED_LINES_OF_CODE}) and no `//! **Length:**` paragraph saying why it is one file"
        ));
    }
    problems
}

#[test]
fn no_file_we_write_passes_a_thousand_lines_and_a_long_one_says_why() {
    let mut problems = Vec::new();
    for generated in GENERATED {
        let text = std::fs::read_to_string(repo_root().join(generated)).unwrap_or_default();
        let first = text.lines().next().unwrap_or_default();
        if !first.contains("Generated by") {
            problems.push(format!(
                "{generated} is exempt as generated, but its first line does not say `Generated by`"
            ));
        }
    }
    for (path, text) in rust_files() {
        problems.extend(length_problems(&path, &text));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_long_file_is_reported_a_long_one_that_says_why_is_not_and_comments_are_not_code() {
    assert_eq!(
        lines_of_code("fn a() {}\n\n// why\n    //! doc\nlet x = 1;\n"),
        2
    );
    let code = "let x = 1;\n".repeat(EXPLAINED_LINES_OF_CODE + 1);
    assert_eq!(length_problems("src/a.rs", &code).len(), 1, "unexplained");
    let explained = format!("//! **Length:** one state machine.\n{code}");
    assert!(length_problems("src/a.rs", &explained).is_empty());
    let comments = "// a comment\n".repeat(MAX_LINES + 1);
    let too_long = length_problems("src/a.rs", &comments);
    assert_eq!(too_long.len(), 1, "{too_long:?}");
    assert!(too_long[0].contains("limit 1000"), "{too_long:?}");
    assert!(length_problems(GENERATED[0], &format!("{explained}{comments}")).is_empty());
}

/// The `use` statements of `text` that are re-exports (`pub use`,
/// `pub(crate) use`, ...), by line.
fn re_exports(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let l = l.trim_start();
            l.strip_prefix("pub")
                .map(|rest| rest.trim_start_matches(|c: char| c != ' ' && c != '('))
                .is_some_and(|rest| {
                    let rest = match rest.strip_prefix('(') {
                        Some(r) => r.split_once(')').map_or("", |(_, after)| after),
                        None => rest,
                    };
                    rest.trim_start().starts_with("use ")
                })
        })
        .map(|(i, l)| (i + 1, l))
        .collect()
}

#[test]
fn no_module_re_exports_so_every_import_names_the_module_that_defines_it() {
    let mut problems = Vec::new();
    for (path, text) in rust_files() {
        if !path.starts_with("src/") {
            continue;
        }
        for (line, statement) in re_exports(&text) {
            problems.push(format!(
                "{path}:{line}: `{}`: import it from where it is defined instead",
                statement.trim()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_re_export_is_found_in_any_visibility_and_a_plain_use_is_not() {
    let text = "use a::B;\npub use c::D;\n    pub(crate) use e::F;\npub(super) use g::H;\npub fn user() {}\n";
    let found: Vec<usize> = re_exports(text).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, [2, 3, 4]);
}

/// Lines of `text` outside comments that name `path` (`crate::runtime`, ...).
fn imports_of<'a>(text: &'a str, path: &str) -> Vec<(usize, &'a str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//") && l.contains(path))
        .map(|(i, l)| (i + 1, l))
        .collect()
}

#[test]
fn imports_go_downward_between_the_top_level_modules() {
    // (folder, what it must never name): lib.rs lists the order.
    let rules = [
        ("src/observability/", "crate::runtime"),
        ("src/observability/", "crate::api"),
        ("src/observability/", "crate::tfjob"),
        ("src/observability/", "crate::cli"),
        ("src/runtime/", "crate::api"),
        ("src/runtime/", "crate::tfjob"),
        ("src/runtime/", "crate::cli"),
        ("src/api/", "crate::runtime"),
        ("src/api/", "crate::tfjob"),
        ("src/api/", "crate::cli"),
        ("src/tfjob/", "crate::cli"),
    ];
    let mut problems = Vec::new();
    for (path, text) in rust_files() {
        for (folder, forbidden) in rules {
            if !path.starts_with(folder) {
                continue;
            }
            for (line, code) in imports_of(&text, forbidden) {
                problems.push(format!(
                    "{path}:{line}: {folder} must not use {forbidden}: `{}`",
                    code.trim()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The compatibility doc's table of Kubeflow's texts, as
/// `tfjob::messages::KUBEFLOW` renders it.
fn kubeflow_texts_table() -> String {
    let mut table =
        String::from("| where | ours, for sample values | against Kubeflow |\n|---|---|---|\n");
    for row in tfjob_operator::tfjob::messages::KUBEFLOW {
        let verdict = if row.difference.is_some() {
            "differs on purpose (below)"
        } else {
            "word for word"
        };
        let _ = writeln!(
            table,
            "| {} | `{}` | {verdict} |",
            row.what,
            row.sample().replace('|', "\\|")
        );
    }
    table
}

#[test]
fn the_compatibility_doc_lists_every_kubeflow_text_and_each_difference() {
    let path = repo_root().join("docs/kubeflow-compatibility.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let table = kubeflow_texts_table();
    assert!(
        doc.contains(&table),
        "docs/kubeflow-compatibility.md must hold this table (from src/tfjob/messages.rs) under \"Messages word for word\":\n\n{table}"
    );
    let differences = doc
        .split("## Differences we keep on purpose")
        .nth(1)
        .expect("a \"Differences we keep on purpose\" section");
    for row in tfjob_operator::tfjob::messages::KUBEFLOW {
        if let Some(why) = row.difference {
            assert!(
                differences.contains(row.what),
                "the differences section must name {:?} ({why})",
                row.what
            );
        }
    }
}
