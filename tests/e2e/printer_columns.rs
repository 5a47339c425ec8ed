//! `kubectl get tfjobs` and `-o wide` for every job shape (#27): the
//! default columns are Kubeflow's (`NAME STATE AGE`); the wide ones show each
//! running job's replicas under its own types and an empty cell under the
//! others, for a Chief-only, a Master, a PS/Worker and an Evaluator job.
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;

use crate::cluster::{client, kubectl, run_ok, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

const SLOW: Duration = Duration::from_secs(90);
/// Every per-type column `-o wide` shows, by the type it reads.
const TYPE_COLUMNS: [(&str, &str); 5] = [
    ("Chief", "CHIEF-ACTIVE"),
    ("Master", "MASTER-ACTIVE"),
    ("PS", "PS-ACTIVE"),
    ("Worker", "WORKER-ACTIVE"),
    ("Evaluator", "EVALUATOR-ACTIVE"),
];

/// `kubectl get` output as rows of header → cell, cut where each header
/// starts (a missing value is an empty cell, not a shifted one).
fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let mut starts: Vec<(usize, &str)> = Vec::new();
    let mut at = 0;
    for name in header.split_whitespace() {
        let start = at + header[at..].find(name).unwrap_or(0);
        starts.push((start, name));
        at = start + name.len();
    }
    lines
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(i, (start, name))| {
                    let end = starts.get(i + 1).map_or(line.len(), |(next, _)| *next);
                    let cell = line.get(*start..end.min(line.len())).unwrap_or_default();
                    ((*name).to_owned(), cell.trim().to_owned())
                })
                .collect()
        })
        .collect()
}

/// A job's name, its fixture, and its running replicas by type.
type Shape = (&'static str, TfJobFixture, Vec<(&'static str, usize)>);

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn every_job_shape_shows_its_own_replicas_and_none_of_the_others() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "columns").await;
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;

    // name → (fixture, running replicas by type)
    let shapes: Vec<Shape> = vec![
        (
            "chief-only",
            TfJobFixture::new("chief-only").chief(1),
            vec![("Chief", 1)],
        ),
        (
            "master",
            TfJobFixture::new("master").master(1).workers(2),
            vec![("Master", 1), ("Worker", 2)],
        ),
        (
            "ps-worker",
            TfJobFixture::new("ps-worker").ps(1).workers(2),
            vec![("PS", 1), ("Worker", 2)],
        ),
        (
            "evaluator",
            TfJobFixture::new("evaluator").workers(1).evaluators(1),
            vec![("Worker", 1), ("Evaluator", 1)],
        ),
    ];
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for (_, fixture, _) in &shapes {
        let job = fixture.clone().namespace(&ns).build();
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("the TFJob");
    }
    for (name, _, want) in &shapes {
        let total: usize = want.iter().map(|(_, n)| n).sum();
        wait_until(
            &format!("{name}: {total} running Pods, all active in its status"),
            SLOW,
            || async {
                let lp =
                    ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"));
                let listed = pods.list(&lp).await.ok()?;
                let running = listed
                    .items
                    .iter()
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .count();
                let job = jobs.get_opt(name).await.ok().flatten()?;
                let status = job.status?;
                let active_ok = want.iter().all(|(rtype, n)| {
                    status.replica_statuses.get(*rtype).map(|r| r.active) == Some(*n as i32)
                });
                (running == total && active_ok).then_some(())
            },
        )
        .await;
    }

    let plain = run_ok(kubectl().args(["get", "tfjobs", "-n", &ns]));
    let headers: Vec<&str> = plain
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        headers,
        ["NAME", "STATE", "AGE"],
        "Kubeflow's columns:\n{plain}"
    );

    let wide = run_ok(kubectl().args(["get", "tfjobs", "-n", &ns, "-o", "wide"]));
    let rows = table(&wide);
    for (name, _, want) in &shapes {
        let row = rows
            .iter()
            .find(|r| r.get("NAME").map(String::as_str) == Some(*name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{wide}"));
        assert_eq!(
            row.get("STATE").map(String::as_str),
            Some("Running"),
            "{name}:\n{wide}"
        );
        for (rtype, column) in TYPE_COLUMNS {
            let expected = want
                .iter()
                .find(|(t, _)| *t == rtype)
                .map_or_else(String::new, |(_, n)| n.to_string());
            assert_eq!(
                row.get(column),
                Some(&expected),
                "{name}'s {column}:\n{wide}"
            );
        }
    }
}
