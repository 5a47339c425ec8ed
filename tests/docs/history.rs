//! Check 11: pointers into the history lead somewhere.
//!
//! A page that retires figures it can no longer back (issue #29: every
//! published figure comes from a committed results file) says where the
//! old text can still be read: `` `git show <commit>:<path>` ``, often
//! followed by the sections meant, quoted (`, "Leader failover"`). Each
//! such pointer must name a commit of this repository's history holding
//! `<path>`, and each quoted section must begin a heading of that file at
//! that commit. Outside a git checkout (a source tarball) there is no
//! history to check and the test says so; in a shallow clone a missing
//! commit fails, with the fetch that brings it.
use std::process::Command;

use crate::repo::{markdown_files, rel, repo_root};

/// One `git show <commit>:<path>` pointer, with the sections it names.
#[derive(Debug, PartialEq)]
pub struct Pointer {
    pub commit: String,
    pub path: String,
    pub sections: Vec<String>,
}

const OPEN: &str = "`git show ";

/// The pointers in a page's text. A pointer and its quoted sections may be
/// wrapped over lines, so the text is read with its whitespace collapsed.
pub fn pointers(text: &str) -> Vec<Pointer> {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut rest = flat.as_str();
    while let Some(at) = rest.find(OPEN) {
        rest = &rest[at + OPEN.len()..];
        let Some(end) = rest.find('`') else { break };
        let target = &rest[..end];
        rest = &rest[end + 1..];
        let Some((commit, path)) = target.split_once(':') else {
            continue;
        };
        let mut sections = Vec::new();
        while let Some(quoted) = rest.strip_prefix(", \"") {
            let Some(close) = quoted.find('"') else { break };
            sections.push(quoted[..close].to_owned());
            rest = &quoted[close + 1..];
        }
        out.push(Pointer {
            commit: commit.to_owned(),
            path: path.to_owned(),
            sections,
        });
    }
    out
}

/// `git` in the checkout: its output when it succeeded.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(repo_root())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// What is wrong with one pointer of `doc`, checked against the history.
fn problems_of(doc: &str, p: &Pointer) -> Vec<String> {
    let spec = format!("{}:{}", p.commit, p.path);
    let Some(old) = git(&["show", &spec]) else {
        let why = if git(&["cat-file", "-e", &format!("{}^{{commit}}", p.commit)]).is_some() {
            format!("commit {} has no {}", p.commit, p.path)
        } else {
            format!(
                "no commit {} in this checkout (a shallow clone? `git fetch --unshallow`)",
                p.commit
            )
        };
        return vec![format!("{doc}: `git show {spec}`: {why}")];
    };
    let headings: Vec<&str> = old
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    p.sections
        .iter()
        .filter(|s| !headings.iter().any(|h| h.starts_with(s.as_str())))
        .map(|s| format!("{doc}: `git show {spec}`: no heading there begins with \"{s}\""))
        .collect()
}

#[test]
fn history_pointers_name_a_commit_a_file_and_sections_that_exist() {
    if git(&["rev-parse", "--git-dir"]).is_none() {
        eprintln!("not a git checkout: the `git show` pointers in the docs are not checked");
        return;
    }
    let mut problems = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("a Markdown file we write");
        // Prose only: a fenced block may show a command for another checkout.
        for p in pointers(&without_fences(&text)) {
            problems.extend(problems_of(&rel(&file), &p));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `text` without its fenced code blocks (inline code kept: the pointers
/// are inline code).
fn without_fences(text: &str) -> String {
    let mut out = String::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence {
            out += line;
            out.push('\n');
        }
    }
    out
}

#[test]
fn history_a_pointer_is_read_across_lines_with_its_sections() {
    let text = "read with `git show\n77e5880:docs/reliability.md`, \"Issue #29,\nround 2\", \"Leader failover\").\n\
                and `git show abc:README.md`. And `git show HEAD` names no file.";
    assert_eq!(
        pointers(text),
        vec![
            Pointer {
                commit: "77e5880".into(),
                path: "docs/reliability.md".into(),
                sections: vec!["Issue #29, round 2".into(), "Leader failover".into()],
            },
            Pointer {
                commit: "abc".into(),
                path: "README.md".into(),
                sections: vec![],
            },
        ]
    );
}

#[test]
fn history_a_missing_commit_file_or_section_is_reported() {
    if git(&["rev-parse", "--git-dir"]).is_none() {
        eprintln!("not a git checkout: nothing to check against");
        return;
    }
    let head = git(&["rev-parse", "HEAD"]).expect("HEAD");
    let pointer = |commit: &str, path: &str, section: &str| Pointer {
        commit: commit.to_owned(),
        path: path.to_owned(),
        sections: vec![section.to_owned()],
    };
    let ok = pointer(head.trim(), "docs/reliability.md", "Reliability");
    assert_eq!(problems_of("d.md", &ok), Vec::<String>::new());
    let no_commit = problems_of("d.md", &pointer("0000000", "README.md", "x"));
    assert!(no_commit[0].contains("no commit 0000000"), "{no_commit:?}");
    let no_file = problems_of("d.md", &pointer(head.trim(), "docs/nope.md", "x"));
    assert!(no_file[0].contains("has no docs/nope.md"), "{no_file:?}");
    let no_section = problems_of("d.md", &pointer(head.trim(), "docs/reliability.md", "Nope"));
    assert!(no_section[0].contains("\"Nope\""), "{no_section:?}");
}
