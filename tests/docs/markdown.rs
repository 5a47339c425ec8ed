//! Reading Markdown the way the checks need it: fenced code blocks (with
//! the excerpt marker above them).

pub const MARKER_PREFIX: &str = "<!-- excerpt:";
pub const MARKER_SUFFIX: &str = "-->";

/// One fenced code block of a Markdown file.
pub struct Block {
    /// 1-based line of the opening fence.
    pub line: usize,
    pub lang: String,
    /// The marker's path, if the nearest non-blank line above is a marker.
    pub excerpt_of: Option<String>,
    pub body: Vec<String>,
}

pub fn fenced_blocks(text: &str) -> Vec<Block> {
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

/// Is this line a code fence (```` ``` ```` with any indentation)?
fn is_fence(line: &str) -> bool {
    line.trim_start().starts_with("```")
}

/// `line` without its inline code spans, and the spans' contents.
fn split_code_spans(line: &str) -> (String, Vec<String>) {
    let mut prose = String::new();
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        prose.push_str(&rest[..open]);
        // A span opened by N backticks closes at the next run of N.
        let ticks = rest[open..].chars().take_while(|c| *c == '`').count();
        let fence = "`".repeat(ticks);
        let inner = &rest[open + ticks..];
        match inner.find(&fence) {
            Some(close) => {
                spans.push(inner[..close].to_owned());
                rest = &inner[close + ticks..];
            }
            None => {
                rest = inner;
            }
        }
    }
    prose.push_str(rest);
    (prose, spans)
}

/// The prose lines (1-based number, text without inline code) outside
/// fenced code blocks and HTML comments.
pub fn code_free_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    let mut in_comment = false;
    for (i, line) in text.lines().enumerate() {
        if is_fence(line) {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if in_comment || line.trim_start().starts_with("<!--") {
            in_comment = !line.contains("-->");
            continue;
        }
        out.push((i + 1, split_code_spans(line).0));
    }
    out
}

/// The code a Markdown text shows (1-based line, code): each line of a
/// fenced block, and each inline code span of the prose.
pub fn code_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (i, line) in text.lines().enumerate() {
        if is_fence(line) {
            in_fence = !in_fence;
        } else if in_fence {
            out.push((i + 1, line.to_owned()));
        } else {
            out.extend(split_code_spans(line).1.into_iter().map(|s| (i + 1, s)));
        }
    }
    out
}

/// A heading's anchor as GitHub makes it: lower case, inline code and link
/// targets reduced to their text, punctuation dropped, spaces to `-`.
pub fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](target)` reads as `text`.
    while let Some(open) = rest.find("](") {
        text.push_str(&rest[..open]);
        rest = rest[open + 2..].split_once(')').map_or("", |(_, r)| r);
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a Markdown text defines: its headings' slugs (a repeated
/// one gets `-1`, `-2`, … as on GitHub) and explicit `<a id="…">`s.
pub fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, line) in code_free_lines_keeping_code(text) {
        let trimmed = line.trim_start();
        if let Some(heading) = trimmed.strip_prefix('#') {
            let heading = heading.trim_start_matches('#');
            if !heading.starts_with(' ') {
                continue;
            }
            let base = slug(heading);
            let mut anchor = base.clone();
            let mut n = 0;
            while out.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            out.push(anchor);
        }
        for attr in ["<a id=\"", "<a name=\""] {
            if let Some((_, after)) = line.split_once(attr)
                && let Some((id, _)) = after.split_once('"')
            {
                out.push(id.to_owned());
            }
        }
    }
    out
}

/// The lines outside fenced blocks, inline code kept (headings slug it).
fn code_free_lines_keeping_code(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut in_fence = false;
    for (i, line) in text.lines().enumerate() {
        if is_fence(line) {
            in_fence = !in_fence;
        } else if !in_fence {
            out.push((i + 1, line));
        }
    }
    out
}

#[test]
fn headings_slug_as_github_slugs_them() {
    assert_eq!(
        slug("What the operator may do (RBAC)"),
        "what-the-operator-may-do-rbac"
    );
    assert_eq!(slug("Protecting `/metrics`"), "protecting-metrics");
    assert_eq!(
        slug("Running with Kubeflow's own CRD"),
        "running-with-kubeflows-own-crd"
    );
    assert_eq!(slug("Over TLS (https)"), "over-tls-https");
    assert_eq!(slug("See [the guide](x.md) — now"), "see-the-guide--now");
    let text = "# A\n## A\n```\n# not a heading\n```\n#not either\n<a id=\"here\"></a>\n";
    assert_eq!(anchors(text), ["a", "a-1", "here"]);
}

#[test]
fn inline_code_is_prose_free_and_fenced_code_is_code() {
    let text = "a `make x` b ``c ` d``\n```sh\nmake y\n```\n";
    assert_eq!(code_free_lines(text), [(1, "a  b ".to_owned())]);
    let code: Vec<String> = code_lines(text).into_iter().map(|(_, c)| c).collect();
    assert_eq!(code, ["make x", "c ` d", "make y"]);
}
