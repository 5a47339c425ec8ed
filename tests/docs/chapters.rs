//! Check 7: the tutorial's chapters are numbered as they are read.
//!
//! A chapter is `docs/NN-name.md` whose title is `# N. Title`, with N its
//! file's number; the numbers run 0, 1, 2, … without a gap, in reading
//! order after the unnumbered [`UNNUMBERED`] pages. Every link that names a
//! chapter by number — the navigation line under each title, the index's
//! table, "[chapter 8](08-reconcile.md)", "[5](05-event-handlers.md)" —
//! names the number of the chapter it leads to; so does a table row that
//! starts with a number (the index's rows, and chapter 0's stage table:
//! stage N of the trace is explained in chapter N). Each navigation line
//! leads to the chapters before and after it.
use std::path::Path;

use crate::markdown::code_free_lines;
use crate::repo::{chapters, rel};

/// `docs/NN-*.md` pages that come first and carry no number in their title.
const UNNUMBERED: &[&str] = &["00-primer.md"];

/// One page of the tutorial, in reading order.
struct Chapter {
    file: String,
    /// The number in its title; `None` for an unnumbered page.
    number: Option<u32>,
}

/// `12-expectations.md` → 12; `None` for a page outside the numbering.
fn file_number(file: &str) -> Option<u32> {
    let (digits, _) = file.split_once('-')?;
    (digits.len() == 2).then(|| digits.parse().ok())?
}

/// The number a title or link text names: "12. Expectations", "12",
/// "chapter 12", "Chapter 12"; `None` for anything else.
fn named_number(text: &str) -> Option<u32> {
    let text = text.trim();
    let text = text
        .strip_prefix("chapter ")
        .or_else(|| text.strip_prefix("Chapter "))
        .unwrap_or(text);
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let rest = &text[digits.len()..];
    (!digits.is_empty() && (rest.is_empty() || rest.starts_with(". ")))
        .then(|| digits.parse().ok())?
}

/// The tutorial's pages in reading order, each with its title's number.
fn tutorial() -> Vec<Chapter> {
    let mut pages = chapters()
        .iter()
        .filter_map(|path| {
            let file = path.file_name()?.to_str()?.to_owned();
            file_number(&file)?;
            let text = std::fs::read_to_string(path).ok()?;
            let title = text.lines().next()?.strip_prefix("# ")?.to_owned();
            Some(Chapter {
                number: named_number(&title),
                file,
            })
        })
        .collect::<Vec<_>>();
    // Unnumbered pages first (they are read first), then by number.
    pages.sort_by_key(|c| (c.number.is_some(), c.number, c.file.clone()));
    pages
}

/// The `[text](NN-file.md…)` links of a line that lead to a tutorial page:
/// (text, file).
fn chapter_links(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some((text, tail)) = after.split_once("](") else {
            break;
        };
        let target = tail.split([')', '#']).next().unwrap_or_default();
        if file_number(target).is_some() && !target.contains('/') {
            out.push((text.to_owned(), target.to_owned()));
        }
        rest = tail;
    }
    out
}

fn numbering_problems(pages: &[Chapter]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut expected = 0;
    for page in pages {
        match page.number {
            None if UNNUMBERED.contains(&page.file.as_str()) => {}
            None => problems.push(format!(
                "docs/{}: its title has no number (`# N. Title`)",
                page.file
            )),
            Some(n) => {
                if Some(n) != file_number(&page.file) {
                    problems.push(format!(
                        "docs/{}: titled chapter {n}, but its file says {:02}",
                        page.file,
                        file_number(&page.file).unwrap_or_default()
                    ));
                }
                if n != expected {
                    problems.push(format!(
                        "docs/{}: chapter {n} where chapter {expected} comes next",
                        page.file
                    ));
                }
                expected = n + 1;
            }
        }
    }
    problems
}

#[test]
fn chapters_are_numbered_in_reading_order_without_gaps() {
    let pages = tutorial();
    assert!(pages.len() > 10, "only {} chapters found", pages.len());
    let problems = numbering_problems(&pages);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A table row whose first cell is a number, or a code span starting with
/// one (the index's `| 8 |`, chapter 0's stage table's `` | `6 reconcile` | ``):
/// that number, which the row's first chapter link must lead to.
fn row_number(line: &str) -> Option<u32> {
    let first = line.strip_prefix('|')?.split('|').next()?.trim();
    let first = first.trim_matches('`');
    let digits: String = first.chars().take_while(char::is_ascii_digit).collect();
    let rest = &first[digits.len()..];
    (!digits.is_empty() && (rest.is_empty() || rest.starts_with(' ')))
        .then(|| digits.parse().ok())?
}

#[test]
fn every_link_that_names_a_chapter_number_leads_to_that_chapter() {
    let pages = tutorial();
    let number_of = |file: &str| pages.iter().find(|p| p.file == file).and_then(|p| p.number);
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in chapters() {
        let text = std::fs::read_to_string(&path).expect("a readable page");
        let raw: Vec<&str> = text.lines().collect();
        for (line, prose) in code_free_lines(&text) {
            let row = row_number(raw[line - 1]);
            for (i, (text, target)) in chapter_links(&prose).into_iter().enumerate() {
                let named = match (i, row) {
                    (0, Some(n)) => n,
                    _ => match named_number(&text) {
                        Some(n) => n,
                        None => continue,
                    },
                };
                checked += 1;
                if number_of(&target) != Some(named) {
                    problems.push(format!(
                        "{}:{line}: `[{text}]({target})` names chapter {named}, but {target} is {}",
                        rel(&path),
                        number_of(&target)
                            .map_or("unnumbered".to_owned(), |n| format!("chapter {n}"))
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 40, "only {checked} numbered chapter links found");
}

#[test]
fn each_chapter_leads_to_the_one_before_and_the_one_after() {
    let pages = tutorial();
    let mut problems = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let path = Path::new("docs").join(&page.file);
        let text = std::fs::read_to_string(crate::repo::repo_root().join(&path))
            .expect("a readable chapter");
        // The navigation line: the first line after the title that links.
        let Some(nav) = text.lines().skip(1).find(|l| l.contains("](")) else {
            problems.push(format!("{}: no navigation line", path.display()));
            continue;
        };
        let links: Vec<String> = chapter_links(nav).into_iter().map(|(_, f)| f).collect();
        let before = i.checked_sub(1).map(|j| pages[j].file.clone());
        let after = pages.get(i + 1).map(|p| p.file.clone());
        let expected: Vec<String> = before.into_iter().chain(after).collect();
        if links != expected {
            problems.push(format!(
                "{}: its navigation line leads to {links:?}, reading order says {expected:?}",
                path.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_gap_a_mismatch_and_a_missing_number_are_each_reported() {
    let page = |file: &str, number: Option<u32>| Chapter {
        file: file.to_owned(),
        number,
    };
    let good = [
        page("00-primer.md", None),
        page("00-a.md", Some(0)),
        page("01-b.md", Some(1)),
    ];
    assert!(numbering_problems(&good).is_empty());
    let gap = [page("00-a.md", Some(0)), page("02-b.md", Some(2))];
    assert_eq!(numbering_problems(&gap).len(), 1);
    let mismatch = [page("00-a.md", Some(0)), page("01-b.md", Some(2))];
    assert!(numbering_problems(&mismatch)[0].contains("its file says 01"));
    let unnumbered = [page("03-c.md", None)];
    assert!(numbering_problems(&unnumbered)[0].contains("no number"));
    assert_eq!(named_number("chapter 12"), Some(12));
    assert_eq!(named_number("12. Expectations"), Some(12));
    assert_eq!(named_number("index"), None);
    assert_eq!(named_number("12 things"), None);
    assert_eq!(
        row_number("| `4 handler` | `enqueue` | [5](05-event-handlers.md) |"),
        Some(4)
    );
    assert_eq!(row_number("| 8 | [Reconcile](08-reconcile.md) |"), Some(8));
    assert_eq!(row_number("| – | [Primer](00-primer.md) |"), None);
}
