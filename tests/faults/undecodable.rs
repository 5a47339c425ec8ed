//! A TFJob stored with a value our types cannot decode (issue #29, point 3).
//! Our CRD refuses such values, but a CRD without a spec schema stores them,
//! and an operator upgraded onto such a cluster must cope. Kubeflow's v1.9.2
//! CRD has a typed schema (int32 ranges and date-times are checked, and our
//! enums take any string), so the scenario installs ours with the spec's
//! schema replaced by `x-kubernetes-preserve-unknown-fields` (and the
//! root's CEL rules, which read the spec, removed), for this scenario only,
//! restored afterwards. A running job is then patched to
//! `replicas: "two"`: JSON our `i32` cannot take, so the object does not
//! decode at all (not the validation path an unknown `restartPolicy` takes).
//!
//! What must hold: a Warning Event on the object (reason `FailedToDecode`,
//! `src/tfjob/kubeflow/undecodable.rs`), the failure in the log naming the object,
//! `tfjob_operator_informer_decode_failures_total{kind="TFJob"}` up, other
//! jobs unaffected (a job created afterwards runs), and no Pod of the
//! undecodable job deleted (the same UIDs stay).
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_yaml::Value;
use tfjob_operator::api::fixtures::TfJobFixture;

use crate::cluster::{client, kubectl, run_ok, test_namespace, wait_until};
use crate::harness::{
    Cleanup, apiserver_addr, create_job, identity, kubectl_stdin, metric, report, running,
};
use crate::operator::{Operator, ensure_crd};

static CRD: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| crate::support::repo_file("crds/kubeflow.org_tfjobs.yaml"));
const REASON: &str = "FailedToDecode";
const DECODE_FAILURES: &str = "tfjob_operator_informer_decode_failures_total";

/// Our CRD with no schema for `spec` (anything is stored) and no CEL rules.
fn schemaless_crd() -> String {
    let text = std::fs::read_to_string(CRD.as_str()).expect("the CRD file");
    let mut crd: Value = serde_yaml::from_str(&text).expect("the CRD parses");
    let root = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let root_map = root.as_mapping_mut().expect("the root schema is a mapping");
    root_map.remove("x-kubernetes-validations");
    let spec: Value =
        serde_yaml::from_str("{type: object, x-kubernetes-preserve-unknown-fields: true}")
            .expect("the spec schema parses");
    root["properties"]["spec"] = spec;
    serde_yaml::to_string(&crd).expect("the CRD serializes")
}

fn restore_crd() {
    run_ok(kubectl().args([
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        CRD.as_str(),
    ]));
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn an_undecodable_tfjob_is_reported_and_harms_nothing() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "fault-decode").await;
    let _cleanup_ns = Cleanup(vec![ns.clone()]);
    kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &schemaless_crd(),
    )
    .unwrap_or_else(|e| panic!("installing the schemaless CRD: {e}"));
    // Restore our CRD however the scenario ends.
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            restore_crd();
        }
    }
    let _restore = Restore;

    let kubeconfig = identity("fault-op-decode", apiserver_addr()).await;
    let mut op = Operator::start_with(&ns, &[], Some(kubeconfig));
    op.wait_ready().await;
    create_job(&client, &ns, TfJobFixture::new("bad").workers(2)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let uids = wait_until("bad's 2 Pods Running", Duration::from_secs(60), || async {
        let list = pods
            .list(&ListParams::default().labels("training.kubeflow.org/job-name=bad"))
            .await
            .ok()?;
        let mut uids: Vec<String> = list
            .items
            .iter()
            .filter(|p| running(p))
            .filter_map(|p| p.uid())
            .collect();
        uids.sort();
        (uids.len() == 2).then_some(uids)
    })
    .await;

    // kubectl, not our typed client: the answer is the undecodable object.
    let failures_before = metric(&op.metrics(), DECODE_FAILURES, &["kind=\"TFJob\""]);
    let patch = r#"{"spec":{"tfReplicaSpecs":{"Worker":{"replicas":"two"}}}}"#;
    run_ok(kubectl().args([
        "patch",
        "tfjob",
        "bad",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        patch,
    ]));

    // Other jobs are unaffected.
    create_job(&client, &ns, TfJobFixture::new("good").workers(1)).await;
    wait_until("good's Pod Running", Duration::from_secs(60), || async {
        pods.get_opt("good-worker-0")
            .await
            .ok()
            .flatten()
            .filter(running)
            .map(|_| ())
    })
    .await;

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let reported = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=bad"))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            if let Some(e) = list.iter().find(|e| {
                e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(REASON)
            }) {
                return e.message.clone().unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .ok();
    let failures = metric(&op.metrics(), DECODE_FAILURES, &["kind=\"TFJob\""]) - failures_before;
    let log = op.log_text();
    let op_log = op.log.clone();
    let logged = log
        .lines()
        .any(|l| l.contains("failed to decode an object") && l.contains(&format!("{ns}/bad")));
    let list = pods
        .list(&ListParams::default().labels("training.kubeflow.org/job-name=bad"))
        .await
        .expect("list bad's Pods");
    let mut now: Vec<String> = list.items.iter().filter_map(|p| p.uid()).collect();
    now.sort();
    report(
        "undecodable",
        &[
            ("event_on_object", reported.is_some().to_string()),
            ("logged", logged.to_string()),
            ("decode_failures", failures.to_string()),
            ("pods_kept", (now == uids).to_string()),
        ],
    );
    drop(op);
    // Gone before the CRD is restored, so no later scenario's operator meets it.
    run_ok(kubectl().args(["delete", "tfjob", "bad", "-n", &ns, "--wait=true"]));
    assert_eq!(
        now, uids,
        "Pods of the undecodable job were deleted or replaced"
    );
    assert!(
        logged,
        "the operator did not log the decode failure of {ns}/bad: {}",
        op_log.display()
    );
    assert!(
        failures >= 1.0,
        "{DECODE_FAILURES}{{kind=\"TFJob\"}} did not grow: {}",
        op_log.display()
    );
    assert!(
        reported.is_some(),
        "no Warning Event ({REASON}) on the undecodable TFJob: {}",
        op_log.display()
    );
}
