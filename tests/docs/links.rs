//! Check 5: every link in the Markdown we write leads somewhere.
//!
//! A relative link (`[text](path)`, `![alt](path)`, a reference definition
//! `[name]: path`, a Mermaid `click X "path"`) must name a file or folder
//! that exists, and an anchor (`path.md#anchor`, `#anchor`) must be a
//! heading of that Markdown file, slugged as GitHub slugs it. Links out of
//! the repository (`https://…`) are not fetched: no network in tests.
use std::path::{Component, Path, PathBuf};

use crate::markdown::{anchors, code_free_lines, fenced_blocks};
use crate::repo::{markdown_files, rel, repo_root};

/// One link as written: where, and its target.
#[derive(Debug, PartialEq)]
pub struct Link {
    pub line: usize,
    pub target: String,
}

/// The link targets on one line of prose (inline code already removed).
fn targets_in(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        // A target ends at the first `)` or blank (a title may follow).
        let end = after.find([')', ' ']).unwrap_or(after.len());
        out.push(after[..end].trim_matches(['<', '>']).to_owned());
        rest = &after[end..];
    }
    // A reference definition: `[name]: target`.
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some((_, def)) = trimmed.split_once("]: ")
        && let Some(target) = def.split_whitespace().next()
    {
        out.push(target.to_owned());
    }
    out
}

/// Every link in a Markdown text: prose links outside code, and Mermaid
/// `click` targets inside diagrams.
pub fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    for (line, prose) in code_free_lines(text) {
        for target in targets_in(&prose) {
            out.push(Link { line, target });
        }
    }
    for block in fenced_blocks(text).iter().filter(|b| b.lang == "mermaid") {
        for (i, body) in block.body.iter().enumerate() {
            let mut words = body.split_whitespace();
            if words.next() == Some("click")
                && let Some(target) = body.split('"').nth(1)
            {
                out.push(Link {
                    line: block.line + 1 + i,
                    target: target.to_owned(),
                });
            }
        }
    }
    out.sort_by_key(|l| l.line);
    out
}

/// `base/relative`, with `.` and `..` resolved (without touching the disk).
fn join(base: &Path, relative: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for part in base.join(relative).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with `link`, written in `doc` (relative to the root).
fn problem(doc: &Path, text: &str, link: &Link) -> Option<String> {
    let target = link.target.as_str();
    if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let root = repo_root();
    let file = if path.is_empty() {
        root.join(doc)
    } else {
        let dir = doc.parent().unwrap_or(Path::new(""));
        let resolved = join(&root.join(dir), path);
        if !resolved.starts_with(&root) {
            return Some(format!("`{target}` leads out of the repository"));
        }
        if !resolved.exists() {
            return Some(format!("`{target}`: no such file or folder"));
        }
        resolved
    };
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if file.extension().is_none_or(|e| e != "md") {
        return None; // `file.rs#L10` and the like: GitHub's, not ours to check.
    }
    let heads = if path.is_empty() {
        anchors(text)
    } else {
        anchors(&std::fs::read_to_string(&file).unwrap_or_default())
    };
    (!heads.iter().any(|h| h == anchor)).then(|| {
        format!(
            "`{target}`: {} has no heading with the anchor `#{anchor}`",
            rel(&file)
        )
    })
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_leads_somewhere() {
    let root = repo_root();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let doc = file.strip_prefix(&root).unwrap_or(&file).to_path_buf();
        let text = std::fs::read_to_string(&file).expect("a readable Markdown file");
        for link in links(&text) {
            checked += 1;
            if let Some(p) = problem(&doc, &text, &link) {
                problems.push(format!("{}:{}: {p}", doc.display(), link.line));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} broken links (fix the link, or the heading it points to):\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(checked > 200, "only {checked} links found");
}

#[test]
fn links_are_found_in_prose_references_and_diagrams_but_not_in_code() {
    let text = "See [a](a.md#x) and ![p](p.png \"title\").\n\
                `[not](a link)` here\n\
                [ref]: ../b.md\n\
                ```sh\n[no](link.md)\n```\n\
                ```mermaid\nflowchart LR\n  click R \"src/lib.rs\"\n```\n";
    let found: Vec<(usize, String)> = links(text)
        .into_iter()
        .map(|l| (l.line, l.target))
        .collect();
    let expected = [
        (1, "a.md#x"),
        (1, "p.png"),
        (3, "../b.md"),
        (9, "src/lib.rs"),
    ];
    assert_eq!(found, expected.map(|(l, t)| (l, t.to_owned())));
}

#[test]
fn a_missing_file_a_missing_anchor_and_a_way_out_are_each_reported() {
    let doc = Path::new("docs/x.md");
    let text = "# A heading\n";
    let check = |target: &str| {
        problem(
            doc,
            text,
            &Link {
                line: 1,
                target: target.to_owned(),
            },
        )
    };
    assert_eq!(check("README.md"), None);
    assert_eq!(check("#a-heading"), None);
    assert_eq!(check("../README.md#two-commands"), None);
    assert_eq!(check("https://example.com/#anything"), None);
    assert!(check("nothing-here.md").unwrap().contains("no such file"));
    assert!(check("#no-heading").unwrap().contains("no heading"));
    assert!(check("../README.md#gone").unwrap().contains("no heading"));
    assert!(check("../../elsewhere.md").unwrap().contains("out of"));
}
