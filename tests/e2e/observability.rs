//! What users monitor the operator with, checked against a real Prometheus
//! scraping a running operator while TFJobs succeed, restart, fail and are
//! deleted by their TTL. The operator serves `/metrics` with
//! `--metrics-secure` (https, self-signed) and Prometheus scrapes it with the
//! token of a ServiceAccount bound to the built-in `system:monitoring`
//! ClusterRole, as a cluster's monitoring would:
//!
//! - the exposed metrics are exactly the committed list, `docs/metrics.md`
//!   (name, type, label set), as Prometheus' OpenMetrics parser reads them
//!   (`metrics_list` checks the same in `make e2e` from the text itself);
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

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::Value;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;

use crate::cluster::{client, kubectl, run_ok, test_namespace, wait_until};
use crate::metrics_list::workload::{SLOW, exit, has_condition, run_jobs, running_pod};
use crate::metrics_list::{Exposed, differences, is_own_label, metrics_list};
use crate::operator::{Operator, ensure_crd};
use crate::prometheus::{JOB, Prometheus, RULES, url_encode};
use crate::support::shared_cluster;

static DASHBOARD: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    crate::support::repo_file("charts/tfjob-operator/files/grafana-dashboard.json")
});

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
/// scraped by Prometheus from the start, after `run_jobs`' jobs ran to their ends.
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
        .filter(|k| *k != "__name__" && is_own_label(k))
        .cloned()
        .collect();
    (name, set)
}

#[tokio::test]
#[ignore = "needs the local control plane and a Prometheus server: make test-observability"]
async fn every_exposed_metric_matches_the_committed_list_as_prometheus_reads_it() {
    let _cluster = shared_cluster().await;
    let listed = metrics_list();
    let (operator, prometheus) = scraped_operator_after_jobs("obs-list").await;
    let selector = url_encode(&format!("{{job=\"{JOB}\"}}"));
    let metadata = prometheus
        .api(&format!("targets/metadata?match_target={selector}"))
        .expect("the targets' metadata");
    let families: BTreeMap<String, String> = metadata
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
    let series = series
        .as_array()
        .expect("a series list")
        .iter()
        .map(series_labels)
        // Prometheus' own series about the scrape.
        .filter(|(name, _)| name != "up" && !name.starts_with("scrape_"))
        .collect();
    let problems = differences(&listed, &Exposed { families, series });
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
#[ignore = "needs the local control plane and a Prometheus server: make test-observability"]
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
