//! The tutorial must stay runnable: its own controller
//! (`examples/configmap_controller.rs`, chapter 14) does what the chapter says
//! against the local control plane, and the `--trace-pipeline` lines chapter 0
//! shows are lines the operator really prints.
//!
//! The example is compiled into this test binary as a module (`#[path]`), so
//! the test runs exactly the code the chapter shows, through its public
//! `manager()` function; only `main` (flags, signals, ports) is left out.
//!
//! What these tests must never do: change the example's behaviour to suit the
//! test, or check a chapter's trace by its timestamps or resourceVersions
//! (those differ run to run; messages and field names must not).
//!
//! Mirrors: kubebuilder's book, whose tutorial project is built and tested
//! in CI (`docs/book/src/cronjob-tutorial/testdata/project`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use tfjob_operator::runtime::manager::ManagerConfig;

use crate::cluster::{client, kubectl, run_ok, test_namespace, wait_until};
use crate::examples::apply_example;
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

#[allow(dead_code)] // `main` is the example's; the test calls `manager()`.
#[path = "../../examples/configmap_controller.rs"]
mod example;

use example::{SOURCE_LABEL, SUMMARY_ANNOTATION, SUMMARY_LABEL};

const REACT: Duration = Duration::from_secs(60);

/// The summary's data, or `None` while it does not exist.
async fn summary_data(api: &Api<ConfigMap>, name: &str) -> Option<BTreeMap<String, String>> {
    api.get_opt(name).await.ok().flatten()?.data
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Waits until `<source>-summary` holds exactly `want`.
async fn wait_for_summary(api: &Api<ConfigMap>, want: &BTreeMap<String, String>, what: &str) {
    wait_until(what, REACT, || async {
        (summary_data(api, "greeting-summary").await.as_ref() == Some(want)).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_tutorials_configmap_controller_summarizes_restores_and_is_garbage_collected() {
    let _guard = shared_cluster().await;
    let client: Client = client().await;
    let ns = test_namespace(&client, "example-controller").await;
    let manager = example::manager(
        client.clone(),
        Some(ns.clone()),
        ManagerConfig {
            probe_addr: None,
            metrics_addr: None,
            leader_election: None,
            handle_signals: false,
            ..ManagerConfig::default()
        },
    )
    .expect("the example's controller builds");
    let stop = manager.shutdown_token();
    let running = tokio::spawn(manager.run());
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // A source appears: its summary is created, owned by it, and named on it.
    let source: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "greeting", "labels": { SOURCE_LABEL: "true" } },
        "data": { "a": "hello", "b": "world!" }
    }))
    .expect("a valid ConfigMap");
    let created = api
        .create(&PostParams::default(), &source)
        .await
        .expect("the source ConfigMap is created");
    wait_for_summary(
        &api,
        &data(&[("keys", "a,b"), ("bytes", "11")]),
        "the summary",
    )
    .await;
    let summary = api.get("greeting-summary").await.expect("the summary");
    let owner = summary
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .expect("the summary has a controller ownerReference");
    assert_eq!(owner.uid, created.metadata.uid.clone().unwrap_or_default());
    assert_eq!(
        summary
            .metadata
            .labels
            .unwrap_or_default()
            .get(SUMMARY_LABEL),
        Some(&"greeting".to_owned())
    );
    wait_until("the summary annotation on the source", REACT, || async {
        let source = api.get_opt("greeting").await.ok().flatten()?;
        let annotations = source.metadata.annotations?;
        (annotations.get(SUMMARY_ANNOTATION)? == "greeting-summary").then_some(())
    })
    .await;

    // The source changes (For): the summary follows.
    let patch = serde_json::json!({ "data": { "c": "x" } });
    api.patch("greeting", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("the source is patched");
    wait_for_summary(
        &api,
        &data(&[("keys", "a,b,c"), ("bytes", "12")]),
        "the summary to follow the source",
    )
    .await;

    // Someone edits the summary (Owns): its event enqueues the owner, whose
    // reconcile puts the summary back.
    let tamper = serde_json::json!({ "data": { "keys": "tampered" } });
    api.patch(
        "greeting-summary",
        &PatchParams::default(),
        &Patch::Merge(&tamper),
    )
    .await
    .expect("the summary is patched by hand");
    wait_for_summary(
        &api,
        &data(&[("keys", "a,b,c"), ("bytes", "12")]),
        "the controller to restore the summary",
    )
    .await;

    // The source is deleted: kube-controller-manager's garbage collector, not
    // the controller, deletes the summary.
    api.delete("greeting", &DeleteParams::default())
        .await
        .expect("the source is deleted");
    wait_until("the summary to be garbage-collected", REACT, || async {
        matches!(api.get_opt("greeting-summary").await, Ok(None)).then_some(())
    })
    .await;

    stop.cancel();
    let stopped = tokio::time::timeout(REACT, running)
        .await
        .expect("the manager stops within the deadline")
        .expect("the manager task did not panic");
    assert!(stopped.is_ok(), "the manager stopped with {stopped:?}");
}

/// A `--trace-pipeline` line's message and field names:
/// `… pipeline: <message> stage="…" k=v …` → (message, [stage, k, …]).
fn trace_shape(line: &str) -> Option<(String, Vec<String>)> {
    let (_, rest) = line.split_once(" pipeline: ")?;
    let (message, fields) = rest.split_once(" stage=")?;
    let names = std::iter::once("stage")
        .chain(
            fields
                .split(' ')
                .filter_map(|w| w.split_once('=').map(|(n, _)| n))
                .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase() || c == '_')),
        )
        .map(str::to_owned)
        .collect();
    Some((message.to_owned(), names))
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn every_trace_line_the_docs_show_is_printed_by_the_operator_with_trace_pipeline() {
    let _guard = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "trace").await;
    let mut operator = Operator::start_with(&ns, &["--trace-pipeline"], None);
    operator.wait_ready().await;

    // Chapter 0's story: apply the two-worker job, let it run, delete it.
    apply_example(&ns, "tfjob-simple.yaml");
    let pods = || {
        run_ok(kubectl().args(["get", "pods", "-n", &ns, "-o", "name"]))
            .lines()
            .count()
    };
    wait_until("the job's two Pods", REACT, || async {
        (pods() == 2).then_some(())
    })
    .await;
    wait_until("the job to be Running", REACT, || async {
        let state = run_ok(kubectl().args([
            "get",
            "tfjob",
            "tfjob-simple",
            "-n",
            &ns,
            "-o",
            "jsonpath={.status.conditions[-1:].type}",
        ]));
        (state == "Running").then_some(())
    })
    .await;
    run_ok(kubectl().args(["delete", "tfjob", "tfjob-simple", "-n", &ns, "--wait=true"]));
    wait_until(
        "the garbage collector to delete the Pods",
        REACT,
        || async { (pods() == 0).then_some(()) },
    )
    .await;

    // Every chapter's trace lines, not only chapter 0's: they all come from
    // this one story (a job applied, running, deleted) and the startup
    // before it. (doc, message, field names)
    let docs = crate::cluster::repo_dir().join("docs");
    let mut shown: Vec<(String, (String, Vec<String>))> = Vec::new();
    for entry in std::fs::read_dir(&docs).expect("docs/") {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            let doc = std::fs::read_to_string(&path).expect("a chapter");
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            shown.extend(
                doc.lines()
                    .filter_map(trace_shape)
                    .map(|s| (name.to_string(), s)),
            );
        }
    }
    let chapters: std::collections::BTreeSet<&str> =
        shown.iter().map(|(d, _)| d.as_str()).collect();
    assert!(
        shown.len() > 30 && chapters.len() > 5,
        "the docs show only {} trace lines in {chapters:?}",
        shown.len()
    );
    // The log is written as events arrive: poll it until every shape is there.
    let deadline = tokio::time::Instant::now() + REACT;
    loop {
        let log = operator.log_text();
        let printed: Vec<(String, Vec<String>)> = log.lines().filter_map(trace_shape).collect();
        let missing: Vec<&(String, (String, Vec<String>))> =
            shown.iter().filter(|(_, s)| !printed.contains(s)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the docs show trace lines the operator did not print (doc, message, fields):\n{missing:#?}\nlog: {}",
            operator.log.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
