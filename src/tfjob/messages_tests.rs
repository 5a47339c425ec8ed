//! [`KUBEFLOW`] against training-operator's own source, read from the Go
//! module cache (`go mod download` fetches it if the cache lacks it, as
//! `e2e/run-suite.sh` does for Kubeflow's CRD).
use std::path::PathBuf;
use std::process::Command;

use super::messages::KUBEFLOW;

const MODULE: &str = "github.com/kubeflow/training-operator";

/// The version `e2e/versions.env` pins.
fn pinned_version() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/versions.env");
    let text = std::fs::read_to_string(path).expect("e2e/versions.env");
    text.lines()
        .find_map(|l| l.strip_prefix("KUBEFLOW_TRAINING_OPERATOR_VERSION="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .expect("KUBEFLOW_TRAINING_OPERATOR_VERSION in e2e/versions.env")
}

/// The module's directory in the Go module cache, downloaded if missing;
/// `None` without Go or a way to fetch it.
fn module_dir(version: &str) -> Option<PathBuf> {
    let go = |args: &[&str]| {
        Command::new("go")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let cache = std::env::var("GOMODCACHE")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| go(&["env", "GOMODCACHE"]))?;
    let dir = PathBuf::from(cache).join(format!("{MODULE}@{version}"));
    if dir.is_dir() {
        return Some(dir);
    }
    let json = go(&["mod", "download", "-json", &format!("{MODULE}@{version}")])?;
    let value: serde_json::Value = serde_json::from_str(&json).ok()?;
    value["Dir"].as_str().map(PathBuf::from)
}

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
    let version = pinned_version();
    let Some(dir) = module_dir(&version) else {
        eprintln!(
            "SKIPPED: {MODULE}@{version} is not in the Go module cache and could not be \
             downloaded (no `go`, or offline); run `go mod download {MODULE}@{version}`"
        );
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
