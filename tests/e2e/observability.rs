//! What users monitor the operator with, checked against a real Prometheus
//! scraping a running operator while TFJobs succeed, restart, fail and are
//! deleted by their TTL. The operator serves `/metrics` with
//! `--metrics-secure` (https, self-signed) and Prometheus scrapes it with the
//! token of a ServiceAccount bound to the built-in `system:monitoring`
//! ClusterRole, as a cluster's monitoring would:
//!
//! - the exposed metrics are exactly the committed list, `docs/metrics.md`
//!   (name, type, label set), as Prometheus' OpenMetrics parser reads them;
//! - every query of the chart's Grafana dashboard returns data, and every
//!   alert rule of the chart evaluates without error (`make test-observability`);
//! - with `TFJOB_DASHBOARD_PICTURES=<dir>`, the dashboard's main panels are
//!   drawn from that Prometheus into `<dir>` (`e2e/dashboard/pictures.py`;
//!   `make dashboard-pictures` regenerates the ones in `docs/dashboard/`).
//!
//! Why not `promtool check metrics`: it reads only the classic text format,
//! where a counter's `# TYPE` names the `_total` series; on OpenMetrics (what
//! the operator serves) it misreads every counter as help-less.
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::Value;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::{RestartPolicy, TFJob};

use crate::cluster::{client, kubectl, run_ok, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::prometheus::{JOB, Prometheus, RULES, url_encode};
use crate::support::{EXIT_CODE_ANNOTATION, EXIT_CONTAINER_ANNOTATION, shared_cluster};

const SLOW: Duration = Duration::from_secs(90);

static METRICS_LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::repo_file("docs/metrics.md"));
static DASHBOARD: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    crate::support::repo_file("charts/tfjob-operator/files/grafana-dashboard.json")
});

/// One row of `docs/metrics.md`.
#[derive(Debug)]
struct Listed {
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
fn metrics_list() -> Vec<Listed> {
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

/// Asks KWOK to end `pod`'s `tensorflow` container with `code`.
async fn exit(pods: &Api<Pod>, pod: &str, code: i32) {
    let patch = serde_json::json!({ "metadata": { "annotations": {
        EXIT_CODE_ANNOTATION: code.to_string(),
        EXIT_CONTAINER_ANNOTATION: "tensorflow",
    } } });
    pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("failed to annotate {pod}: {e}"));
}

async fn running_pod(pods: &Api<Pod>, name: &str, not_uid: Option<&str>) -> Pod {
    wait_until(&format!("pod {name} to run"), SLOW, || async {
        let pod = pods.get_opt(name).await.ok().flatten()?;
        let running = pod.status.as_ref()?.phase.as_deref() == Some("Running");
        let new = pod.metadata.uid.as_deref() != not_uid;
        (running && new && pod.metadata.deletion_timestamp.is_none()).then_some(pod)
    })
    .await
}

fn has_condition(job: &TFJob, type_: &str) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// Drives every job counter: `ok` succeeds and is deleted by its TTL; `bad`
/// restarts once (exit 137) and then fails past its backoff limit.
///
/// The TTL is 2 s, not 0: with 0 the operator deletes the job in the same
/// reconcile that finds it succeeded, before writing (and so counting) the
/// success (src/tfjob/plan/mod.rs takes the completion time of the status it is
/// about to write).
async fn run_jobs(client: &Client, ns: &str) {
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for fixture in [
        TfJobFixture::new("ok")
            .workers(1)
            .ttl_seconds_after_finished(2),
        TfJobFixture::new("bad")
            .workers(1)
            .restart_policy(RestartPolicy::ExitCode)
            .backoff_limit(1),
    ] {
        jobs.create(&PostParams::default(), &fixture.namespace(ns).build())
            .await
            .unwrap_or_else(|e| panic!("failed to create a TFJob: {e}"));
    }
    running_pod(&pods, "ok-worker-0", None).await;
    exit(&pods, "ok-worker-0", 0).await;
    let first = running_pod(&pods, "bad-worker-0", None).await;
    exit(&pods, "bad-worker-0", 137).await;
    running_pod(&pods, "bad-worker-0", first.metadata.uid.as_deref()).await;
    exit(&pods, "bad-worker-0", 137).await;
    wait_until("TFJob bad to fail", SLOW, || async {
        let job = jobs.get_opt("bad").await.ok().flatten()?;
        has_condition(&job, "Failed").then_some(())
    })
    .await;
    wait_until(
        "TFJob ok to succeed and be deleted by its TTL",
        SLOW,
        || async {
            jobs.get_opt("ok")
                .await
                .ok()
                .and_then(|j| j.is_none().then_some(()))
        },
    )
    .await;
}

/// A token of ServiceAccount `prometheus` in `ns`, bound to the built-in
/// `system:monitoring` ClusterRole (which may `get` `/metrics`). The
/// ClusterRoleBinding outlives the namespace; the suite's cluster is thrown
/// away afterwards.
fn monitoring_token(ns: &str) -> String {
    run_ok(kubectl().args(["create", "serviceaccount", "prometheus", "-n", ns]));
    run_ok(kubectl().args([
        "create",
        "clusterrolebinding",
        &format!("{ns}-prometheus"),
        "--clusterrole=system:monitoring",
        &format!("--serviceaccount={ns}:prometheus"),
    ]));
    run_ok(kubectl().args(["create", "token", "prometheus", "-n", ns, "--duration=1h"]))
        .trim()
        .to_owned()
}

/// An operator for a fresh namespace, serving `/metrics` securely and
/// scraped by Prometheus from the start, after the jobs above ran to their ends.
async fn scraped_operator_after_jobs(prefix: &str) -> (Operator, Prometheus) {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, prefix).await;
    let token = monitoring_token(&ns);
    let mut operator = Operator::start_with(&ns, &["--metrics-secure"], None);
    operator.wait_ready().await;
    let prometheus = Prometheus::start_secure(&[operator.metrics_port], &token);
    prometheus.wait_scraped(1, 2).await;
    run_jobs(&client, &ns).await;
    // The jobs run in seconds on KWOK: let Prometheus scrape the last
    // counter to appear (the TTL deletion) 3 times, so that rates and
    // increases, which need two samples in their window, see every series.
    let deleted = format!(
        "count_over_time(training_operator_jobs_deleted_total{{job_namespace=\"{ns}\"}}[5m]) >= 3"
    );
    wait_until(
        "Prometheus to scrape the TTL deletion 3 times",
        SLOW,
        || async {
            let v = prometheus.query(&deleted).await?;
            (!v.is_empty()).then_some(())
        },
    )
    .await;
    (operator, prometheus)
}

fn series_labels(series: &Value) -> (String, BTreeSet<String>) {
    let labels = series.as_object().expect("a series is an object of labels");
    let name = labels["__name__"].as_str().unwrap_or_default().to_owned();
    let set = labels
        .keys()
        .filter(|k| !matches!(k.as_str(), "__name__" | "job" | "instance" | "le"))
        .cloned()
        .collect();
    (name, set)
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn every_exposed_metric_matches_the_committed_list() {
    let _cluster = shared_cluster().await;
    let listed = metrics_list();
    let (operator, prometheus) = scraped_operator_after_jobs("obs-list").await;
    let selector = url_encode(&format!("{{job=\"{JOB}\"}}"));
    let metadata = prometheus
        .api(&format!("targets/metadata?match_target={selector}"))
        .expect("the targets' metadata");
    let exposed: BTreeMap<String, String> = metadata
        .as_array()
        .expect("a metadata list")
        .iter()
        .map(|m| {
            let name = m["metric"].as_str().unwrap_or_default().to_owned();
            (name, m["type"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let series = prometheus
        .api(&format!("series?match[]={selector}"))
        .expect("the operator's series");
    let series: Vec<(String, BTreeSet<String>)> = series
        .as_array()
        .expect("a series list")
        .iter()
        .map(series_labels)
        // Prometheus' own series about the scrape.
        .filter(|(name, _)| name != "up" && !name.starts_with("scrape_"))
        .collect();

    let mut problems = Vec::new();
    for row in &listed {
        match exposed.get(row.family()) {
            Some(kind) if *kind != row.kind => problems.push(format!(
                "{} is a {kind}, the list says {}",
                row.name, row.kind
            )),
            None if !row.on_error => problems.push(format!("{} is not exposed", row.name)),
            _ => {}
        }
        let has_series = series.iter().any(|(name, _)| row.owns(name));
        if exposed.contains_key(row.family()) && !has_series {
            problems.push(format!("{} has no series", row.name));
        }
    }
    for family in exposed.keys() {
        if !listed.iter().any(|row| row.family() == family) {
            problems.push(format!("{family} is exposed but not in docs/metrics.md"));
        }
    }
    for (name, labels) in &series {
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
    assert!(
        problems.is_empty(),
        "/metrics differs from docs/metrics.md (operator log: {}):\n  {}",
        operator.log.display(),
        problems.join("\n  ")
    );
}

/// Every query of the dashboard, its Grafana variables filled in.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(DASHBOARD.as_str()).expect("the chart's dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a Prometheus target's expr");
            let filled = expr.replace("$__rate_interval", "1m").replace("$job", JOB);
            assert!(!filled.contains('$'), "an unfilled variable in {expr}");
            queries.push((
                panel["title"].as_str().unwrap_or_default().to_owned(),
                filled,
            ));
        }
    }
    queries
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn every_dashboard_query_and_alert_rule_evaluates_on_a_real_scrape() {
    let _cluster = shared_cluster().await;
    let queries = dashboard_queries();
    assert!(
        queries.len() > 30,
        "only {} dashboard queries",
        queries.len()
    );
    let started = unix_now();
    let (operator, prometheus) = scraped_operator_after_jobs("obs-dash").await;
    let pictures = std::env::var_os("TFJOB_DASHBOARD_PICTURES");
    if pictures.is_some() {
        picture_workload(&operator.namespace, &prometheus).await;
    }

    let mut empty = Vec::new();
    for (panel, expr) in &queries {
        match prometheus.query(expr).await {
            Some(result) if !result.is_empty() => {}
            Some(_) => empty.push(format!("{panel}: no data for {expr}")),
            None => empty.push(format!("{panel}: failed to evaluate {expr}")),
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries without data (operator log: {}, Prometheus log: {}):\n  {}",
        operator.log.display(),
        prometheus.log.display(),
        empty.join("\n  ")
    );

    let alerts = std::fs::read_to_string(RULES.as_str())
        .expect("the chart's rules")
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    let rules = wait_until("every alert rule to be evaluated", SLOW, || async {
        let groups = prometheus.api("rules")?;
        let rules: Vec<Value> = groups["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let evaluated = rules.iter().all(|r| {
            r["lastEvaluation"]
                .as_str()
                .is_some_and(|t| !t.starts_with("0001"))
        });
        (rules.len() == alerts && evaluated).then_some(rules)
    })
    .await;
    for rule in &rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    let down = rules
        .iter()
        .find(|r| r["name"] == "TFJobOperatorDown")
        .expect("the TFJobOperatorDown rule");
    assert_eq!(down["state"], "inactive", "the operator is up: {down}");

    if let Some(dir) = pictures {
        draw_dashboard(&prometheus, std::path::Path::new(&dir), started, unix_now());
    }
}

/// More to draw than the two jobs above: 6 waves of 5 TFJobs (2 workers
/// each), one job of every wave failing, each wave started once the one
/// before has finished, all deleted 5 s after they end.
async fn picture_workload(ns: &str, prometheus: &Prometheus) {
    let client = client().await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let waves = 6;
    for wave in 0..waves {
        let names: Vec<String> = (0..5).map(|i| format!("wave{wave}-{i}")).collect();
        for name in &names {
            let job = TfJobFixture::new(name)
                .workers(2)
                .ttl_seconds_after_finished(5)
                .namespace(ns)
                .build();
            jobs.create(&PostParams::default(), &job)
                .await
                .unwrap_or_else(|e| panic!("failed to create TFJob {name}: {e}"));
        }
        for (i, name) in names.iter().enumerate() {
            let worker = format!("{name}-worker-0");
            running_pod(&pods, &worker, None).await;
            // Worker 0 decides the job: 0 succeeds it, 1 fails it (restart policy Never).
            exit(&pods, &worker, if i == 0 { 1 } else { 0 }).await;
        }
        for name in &names {
            wait_until(&format!("TFJob {name} to finish"), SLOW, || async {
                match jobs.get_opt(name).await.ok()? {
                    None => Some(()),
                    Some(job) => (has_condition(&job, "Succeeded")
                        || has_condition(&job, "Failed"))
                    .then_some(()),
                }
            })
            .await;
        }
    }
    // Until Prometheus has seen the last wave's TTL deletions.
    let deleted = format!(
        "sum(training_operator_jobs_deleted_total{{job_namespace=\"{ns}\"}}) >= {}",
        waves * 5 + 1
    );
    wait_until("Prometheus to see every wave deleted", SLOW, || async {
        let v = prometheus.query(&deleted).await?;
        (!v.is_empty()).then_some(())
    })
    .await;
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Draws the dashboard's main panels from `prometheus` over [start, end]
/// into `dir` (e2e/dashboard/run.sh), and checks every picture was written.
fn draw_dashboard(prometheus: &Prometheus, dir: &std::path::Path, start: u64, end: u64) {
    let script = crate::cluster::repo_dir().join("e2e/dashboard/run.sh");
    let written = run_ok(
        std::process::Command::new("bash")
            .arg(script)
            .arg(format!("http://127.0.0.1:{}", prometheus.port))
            .arg(DASHBOARD.as_str())
            .arg(dir)
            .args([start.to_string(), end.to_string()]),
    );
    let pictures: Vec<&str> = written.lines().collect();
    assert_eq!(pictures.len(), 7, "one picture per main panel: {written}");
    for picture in pictures {
        let bytes = std::fs::read(picture).unwrap_or_else(|e| panic!("{picture}: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{picture} is not a PNG");
    }
}

// Traces in a real Jaeger: a module of its own, run by `make test-observability` too.
mod traces;
