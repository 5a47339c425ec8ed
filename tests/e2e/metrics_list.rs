//! The committed list of metrics, `docs/metrics.md`, and how an operator's
//! `/metrics` is held to it (name, type, label set): nothing exposed that the
//! list lacks, nothing listed missing unless the list says "on error".
//!
//! Two readers of the same exposition feed [`differences`]:
//! - here, the operator's own OpenMetrics text, read by [`parse_text`] as
//!   Prometheus ingests it (empty labels dropped, `_created` ignored): in
//!   `make e2e`, so in `make test`, without a Prometheus server to build;
//! - `observability`, a real Prometheus scraping it over https (its
//!   metadata and series APIs): in `make test-observability`, one of CI's
//!   extended lanes, which also proves Prometheus' parser accepts the text.
use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::{client, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

pub mod workload;
use workload::{SLOW, run_jobs};

static METRICS_LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::repo_file("docs/metrics.md"));

/// One row of `docs/metrics.md`.
#[derive(Debug)]
pub struct Listed {
    name: String,
    kind: String,
    required: BTreeSet<String>,
    optional: BTreeSet<String>,
    on_error: bool,
}

impl Listed {
    /// The family name in `# TYPE` (and Prometheus' metadata): counters without `_total`.
    fn family(&self) -> &str {
        match self.kind.as_str() {
            "counter" => self.name.strip_suffix("_total").unwrap_or(&self.name),
            _ => &self.name,
        }
    }

    /// Whether series `series` belongs to this metric.
    fn owns(&self, series: &str) -> bool {
        match self.kind.as_str() {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| series.strip_suffix(s) == Some(&self.name)),
            _ => series == self.name,
        }
    }
}

fn ticked(cell: &str) -> String {
    cell.trim().trim_matches('`').to_owned()
}

/// The table of `docs/metrics.md`.
pub fn metrics_list() -> Vec<Listed> {
    let text = std::fs::read_to_string(METRICS_LIST.as_str()).expect("docs/metrics.md");
    let rows: Vec<Listed> = text
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
            assert!(cells.len() >= 4, "a short row in docs/metrics.md: {line}");
            let (mut required, mut optional) = (BTreeSet::new(), BTreeSet::new());
            for label in cells[2].split(',').map(ticked).filter(|l| !l.is_empty()) {
                match label.strip_suffix('?') {
                    Some(l) => optional.insert(l.to_owned()),
                    None => required.insert(label),
                };
            }
            Listed {
                name: ticked(cells[0]),
                kind: cells[1].trim().to_owned(),
                required,
                optional,
                on_error: cells[3].trim() == "on error",
            }
        })
        .collect();
    assert!(
        rows.len() > 30,
        "docs/metrics.md lists only {} metrics",
        rows.len()
    );
    rows
}

/// What one exposition holds: each family's type (from `# TYPE`, as in
/// Prometheus' metadata), and each series' name with its label names
/// (without `le`, and without the scrape's own `job` and `instance`).
#[derive(Debug, Default, PartialEq)]
pub struct Exposed {
    pub families: BTreeMap<String, String>,
    pub series: BTreeSet<(String, BTreeSet<String>)>,
}

/// Labels that are not the metric's own.
pub fn is_own_label(name: &str) -> bool {
    !matches!(name, "job" | "instance" | "le")
}

/// Every way `exposed` differs from `listed`, one line each.
pub fn differences(listed: &[Listed], exposed: &Exposed) -> Vec<String> {
    let mut problems = Vec::new();
    for row in listed {
        match exposed.families.get(row.family()) {
            Some(kind) if *kind != row.kind => problems.push(format!(
                "{} is a {kind}, the list says {}",
                row.name, row.kind
            )),
            None if !row.on_error => problems.push(format!("{} is not exposed", row.name)),
            _ => {}
        }
        let has_series = exposed.series.iter().any(|(name, _)| row.owns(name));
        if exposed.families.contains_key(row.family()) && !has_series {
            problems.push(format!("{} has no series", row.name));
        }
    }
    for family in exposed.families.keys() {
        if !listed.iter().any(|row| row.family() == family) {
            problems.push(format!("{family} is exposed but not in docs/metrics.md"));
        }
    }
    for (name, labels) in &exposed.series {
        let Some(row) = listed.iter().find(|row| row.owns(name)) else {
            problems.push(format!("series {name} belongs to no listed metric"));
            continue;
        };
        let allowed: BTreeSet<String> = row.required.union(&row.optional).cloned().collect();
        if !row.required.is_subset(labels) || !labels.is_subset(&allowed) {
            problems.push(format!(
                "{name} has labels {labels:?}, the list says {:?} (optional {:?})",
                row.required, row.optional
            ));
        }
    }
    problems.dedup();
    problems
}

/// Reads OpenMetrics text as Prometheus ingests it: a label with an empty
/// value is no label, and a counter's or histogram's `_created` sample is
/// not a series. Panics on a line it cannot read (the test fails on it).
pub fn parse_text(text: &str) -> Exposed {
    let mut exposed = Exposed::default();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("a # TYPE line without a type: {line}"));
            exposed.families.insert(family.to_owned(), kind.to_owned());
            continue;
        }
        if line.starts_with('#') {
            continue; // # HELP, # UNIT, # EOF
        }
        let end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("a sample without a value: {line}"));
        let name = &line[..end];
        let created_of = name.strip_suffix("_created");
        if created_of.is_some_and(|f| {
            matches!(
                exposed.families.get(f).map(String::as_str),
                Some("counter" | "histogram")
            )
        }) {
            continue;
        }
        let labels = match line[end..].strip_prefix('{') {
            Some(rest) => label_names(rest, line),
            None => BTreeSet::new(),
        };
        exposed.series.insert((name.to_owned(), labels));
    }
    exposed
}

/// The names of the labels in `rest` (what follows a sample's `{`) whose
/// values are not empty. Values are quoted, with `\"` and `\\` escapes.
fn label_names(rest: &str, line: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut chars = rest.chars();
    loop {
        let mut name = String::new();
        for c in chars.by_ref() {
            match c {
                '=' => break,
                '}' if name.is_empty() => return names,
                ',' if name.is_empty() => {}
                c => name.push(c),
            }
        }
        assert_eq!(chars.next(), Some('"'), "an unquoted label value: {line}");
        let (mut value, mut escaped) = (String::new(), false);
        loop {
            match chars.next() {
                None => panic!("an unterminated label value: {line}"),
                Some(c) if escaped => {
                    value.push(c);
                    escaped = false;
                }
                Some('\\') => escaped = true,
                Some('"') => break,
                Some(c) => value.push(c),
            }
        }
        if !value.is_empty() && is_own_label(&name) {
            names.insert(name);
        }
    }
}

#[test]
#[ignore = "runs with the e2e suite (make e2e), which runs the ignored tests only"]
fn the_text_reader_keeps_families_and_label_names_as_prometheus_would() {
    let text = "# HELP a_total Help.\n# TYPE a counter\n\
        a_total{controller=\"tfjob\",priority=\"\",le=\"x\"} 1\n\
        a_created{controller=\"tfjob\"} 1.7e9\n\
        # TYPE b histogram\n\
        b_bucket{le=\"0.5\",note=\"a \\\"quoted\\\", comma}\"} 2\nb_sum 3.0\n\
        # TYPE c gauge\nc 1\n# EOF\n";
    let names = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    let want = Exposed {
        families: [("a", "counter"), ("b", "histogram"), ("c", "gauge")]
            .into_iter()
            .map(|(f, k)| (f.to_owned(), k.to_owned()))
            .collect(),
        series: [
            ("a_total", names(&["controller"])),
            ("b_bucket", names(&["note"])),
            ("b_sum", names(&[])),
            ("c", names(&[])),
        ]
        .into_iter()
        .map(|(n, l)| (n.to_owned(), l))
        .collect(),
    };
    assert_eq!(parse_text(text), want);
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn every_exposed_metric_matches_the_committed_list() {
    let _cluster = shared_cluster().await;
    let listed = metrics_list();
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "metrics-list").await;
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;
    run_jobs(&client, &ns).await;
    // The last counter to appear: the TTL deletion, counted once the
    // operator's delete returned, so possibly after the job is gone.
    let namespace = format!("job_namespace=\"{ns}\"");
    let text = wait_until("/metrics to count the TTL deletion", SLOW, || async {
        let text = operator.metrics();
        text.lines()
            .any(|l| {
                l.starts_with("training_operator_jobs_deleted_total{") && l.contains(&namespace)
            })
            .then_some(text)
    })
    .await;
    let problems = differences(&listed, &parse_text(&text));
    assert!(
        problems.is_empty(),
        "/metrics differs from docs/metrics.md (operator log: {}):\n  {}",
        operator.log.display(),
        problems.join("\n  ")
    );
}
