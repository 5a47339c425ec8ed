//! Check 6: the names the docs use exist. `cargo test` filters select a
//! test, `make` targets are the Makefile's, `--flags` are ours (or a listed
//! tool's), and every flag of `run` has a row, with its default, in the
//! operating guide's flag table.
use std::path::Path;

use clap::CommandFactory;
use tfjob_operator::cli::args::Cli;

use crate::markdown::code_lines;
use crate::repo::{chapters, files_under, markdown_files, rel, repo_root};

/// The test names under `dir` (functions after a `#[test]`-like attribute)
/// and the module paths of its files, for matching `cargo test` filters.
fn test_names(dir: &str) -> Vec<String> {
    let mut names = Vec::new();
    for file in files_under(dir, "rs") {
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

/// The targets the Makefile defines (`name:` at the start of a line).
fn make_targets() -> Vec<String> {
    let makefile = std::fs::read_to_string(repo_root().join("Makefile")).expect("a Makefile");
    makefile
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let is_name = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            (is_name && !rest.starts_with('=')).then(|| name.to_owned())
        })
        .collect()
}

/// The text a doc's name checks read: everything but CONTRIBUTING's
/// "Shared names for the work in flight", whose names are agreed before
/// the code that defines them lands.
fn checked_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a readable Markdown file");
    if !path.ends_with("CONTRIBUTING.md") {
        return text;
    }
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with("## ") {
            skipping = line.contains("Shared names for the work in flight");
        }
        // Keep the line count, so messages name the right line.
        out.push_str(if skipping { "" } else { line });
        out.push('\n');
    }
    out
}

/// `make NAME` in a piece of code: the NAMEs.
fn make_invocations(code: &str) -> Vec<&str> {
    let words: Vec<&str> = code
        .split(|c: char| c.is_whitespace() || c == ';' || c == '(' || c == ')')
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| w[0] == "make")
        .map(|w| w[1])
        .filter(|name| {
            name.starts_with(|c: char| c.is_ascii_lowercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
        .collect()
}

#[test]
fn every_make_target_the_docs_name_exists() {
    let targets = make_targets();
    assert!(targets.iter().any(|t| t == "test"), "{targets:?}");
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        for (line, code) in code_lines(&checked_text(&file)) {
            for name in make_invocations(&code) {
                checked += 1;
                if !targets.iter().any(|t| t == name) {
                    problems.push(format!(
                        "{}:{line}: `make {name}`: the Makefile has no such target",
                        rel(&file)
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 50, "only {checked} make invocations found");
}

#[test]
fn make_invocations_are_found_with_variables_around_them() {
    assert_eq!(
        make_invocations("KUBE_VERSION=v1.34.4 make e2e && make cluster-up REAL_NODE=1"),
        ["e2e", "cluster-up"]
    );
    assert!(make_invocations("make sure; make -C dir; make $(X)").len() == 1);
}

// ---- Flags: the docs name only flags that exist; each of ours has a row ----

/// Flags of other programs that the docs show (kubectl, helm, cargo, go,
/// curl, …). A flag in the docs that is neither ours nor listed here fails
/// the check: if it is another tool's, add it here.
const FOREIGN_FLAGS: &[&str] = &[
    // cargo and the test harness
    "bench",
    "example",
    "ignored",
    "include-ignored",
    "install",
    "lib",
    "nocapture",
    "profile",
    "quiet",
    "release",
    "skip",
    "test",
    "test-threads",
    "check",
    "root",
    // kubectl
    "cascade",
    "dry-run",
    "field-selector",
    "from-file",
    "from-literal",
    "ignore-not-found",
    "raw",
    "server-side",
    "subresource",
    "type",
    "logs",
    // helm
    "create-namespace",
    "set",
    "strict",
    // docker
    "rm",
    // kube-apiserver, kube-controller-manager and the scheduler (the local
    // cluster, the benchmarks' peers, the lost-node safety argument)
    "authorization-mode",
    "feature-gates",
    "kubelet-preferred-address-types",
    "max-mutating-requests-inflight",
    "max-requests-inflight",
    "node-monitor-grace-period",
    "runtime-config",
    // Kubeflow's training-operator and client-go's generators
    "controller-threads",
    "enable-scheme",
    "gang-scheduler-name",
    "prefers-protobuf",
    // KWOK
    "manage-nodes-with-label-selector",
    // perf / inferno
    "flamegraph-cost-type",
    "print-flamegraph",
    // our scripts: e2e/cluster.sh, e2e/tools.sh, e2e/peers.sh, the scale bench's restart.py
    "alone",
    "bin-dir",
    "dir",
    "jaeger-bin",
    "operator",
    // the real node's scripts: e2e/cluster.sh up --real-node, e2e/images/build.sh
    // NAME --import, kube-proxy --cleanup, e2e/images/tensorflow.sh --key/--wheels
    "cleanup",
    "import",
    "key",
    "print-ref",
    "real-node",
    "wheels",
];

/// Our flags: every long name (and alias) of every subcommand, from clap.
fn our_flags() -> Vec<String> {
    let mut cli = Cli::command();
    cli.build();
    let mut out = Vec::new();
    for command in std::iter::once(&cli).chain(cli.get_subcommands()) {
        for arg in command.get_arguments() {
            out.extend(arg.get_long().map(str::to_owned));
            out.extend(
                arg.get_all_aliases()
                    .into_iter()
                    .flatten()
                    .map(str::to_owned),
            );
        }
    }
    out
}

/// `--name` words in a piece of code: the names (without `=value`).
fn flags_in(code: &str) -> Vec<&str> {
    code.split(|c: char| c.is_whitespace() || c == '`' || c == '(' || c == ',')
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| {
            let end = w
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(w.len());
            &w[..end]
        })
        .filter(|name| name.len() > 1 && name.starts_with(|c: char| c.is_ascii_lowercase()))
        .collect()
}

#[test]
fn every_flag_the_docs_name_is_ours_or_a_listed_foreign_one() {
    let ours = our_flags();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        for (line, code) in code_lines(&checked_text(&file)) {
            for flag in flags_in(&code) {
                checked += 1;
                if !ours.iter().any(|o| o == flag) && !FOREIGN_FLAGS.contains(&flag) {
                    problems.push(format!(
                        "{}:{line}: `--{flag}` is not a flag of tfjob-operator (src/cli/args.rs); \
                         if another tool's, add it to FOREIGN_FLAGS in tests/docs/names.rs",
                        rel(&file)
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 100, "only {checked} flags found");
}

/// The operating guide's flag table: (flags of the row, its default cell).
fn flag_table() -> Vec<(Vec<String>, String)> {
    let text =
        std::fs::read_to_string(repo_root().join(FLAG_TABLE_DOC)).expect("the operating guide");
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Flags\n"))
        .expect("docs/operating.md has a `## Flags` section");
    section
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .map(|row| {
            let row = row.replace("\\|", "/");
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let flags = flags_in(cells[1]).into_iter().map(str::to_owned).collect();
            (flags, cells.get(2).copied().unwrap_or_default().to_owned())
        })
        .collect()
}

const FLAG_TABLE_DOC: &str = "docs/operating.md";

#[test]
fn every_flag_of_run_has_a_row_in_the_operating_guide_with_the_codes_default() {
    let table = flag_table();
    let cli = Cli::command();
    let run = cli.find_subcommand("run").expect("a run subcommand");
    let mut problems = Vec::new();
    for arg in run.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if long == "help" {
            continue;
        }
        let Some((_, default)) = table
            .iter()
            .find(|(flags, _)| flags.first().is_some_and(|f| f == long))
        else {
            problems.push(format!(
                "`--{long}` has no row in {FLAG_TABLE_DOC}'s flag table (| flag | default | meaning |)"
            ));
            continue;
        };
        for value in arg.get_default_values() {
            let value = value.to_string_lossy();
            if !default.contains(value.as_ref()) {
                problems.push(format!(
                    "`--{long}`: the code's default is `{value}`, the table's row says {default:?}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        table.len() > 20,
        "only {} rows in the flag table",
        table.len()
    );
}
