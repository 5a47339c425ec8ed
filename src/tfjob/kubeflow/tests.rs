//! [`KUBEFLOW`] against training-operator's own source, read from the Go
//! module cache ([`crate::tfjob::kubeflow::module_cache`]).
use crate::tfjob::kubeflow::messages::KUBEFLOW;
use crate::tfjob::kubeflow::module_cache::{MODULE, module_or_skip};

/// The first Go string literal (interpreted, with `\"` and `\\` escapes)
/// on `line`.
fn go_literal(line: &str) -> Option<String> {
    let start = line.find('"')?;
    let mut out = String::new();
    let mut chars = line[start + 1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// Go's `fmt.Sprintf` for the verbs Kubeflow's messages use: `%s`, `%v`,
/// `%d` print the value, `%q` quotes it.
fn go_sprintf(format: &str, args: &[&str]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some('q') => out.push_str(&format!("{:?}", args.next().expect("a value per verb"))),
            Some('s' | 'v' | 'd') => out.push_str(args.next().expect("a value per verb")),
            other => panic!("verb %{other:?} in {format:?} not handled"),
        }
    }
    assert!(
        args.next().is_none(),
        "more values than verbs in {format:?}"
    );
    out
}

#[test]
fn the_sprintf_stand_in_renders_like_go() {
    assert_eq!(
        go_sprintf("job %q is %s: %v%%", &["a", "b", "1"]),
        "job \"a\" is b: 1%"
    );
    assert_eq!(
        go_literal(r#"  x := fmt.Sprintf("say \"hi\"", y) "no""#).as_deref(),
        Some("say \"hi\"")
    );
}

#[test]
fn every_text_is_kubeflows_word_for_word_or_a_listed_difference() {
    let Some((version, dir)) = module_or_skip() else {
        return;
    };
    let mut wrong = Vec::new();
    for row in KUBEFLOW {
        let mut format = String::new();
        for at in row.kubeflow {
            let path = dir.join(at.file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let line = text
                .lines()
                .nth(at.line as usize - 1)
                .unwrap_or_else(|| panic!("{}:{} is past the end", at.file, at.line));
            let literal = go_literal(line).unwrap_or_else(|| {
                panic!(
                    "{}:{} holds no string literal ({line:?}); has {MODULE}@{version} moved it?",
                    at.file, at.line
                )
            });
            format.push_str(&literal);
        }
        let kubeflow = go_sprintf(&format, row.args);
        let ours = row.sample();
        match (row.difference, kubeflow == ours) {
            (None, false) => wrong.push(format!(
                "{}: Kubeflow {kubeflow:?}, ours {ours:?}",
                row.what
            )),
            (Some(_), true) => wrong.push(format!(
                "{}: listed as a difference but word for word the same: {ours:?}",
                row.what
            )),
            _ => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "against {MODULE}@{version}:\n{}",
        wrong.join("\n")
    );
}
