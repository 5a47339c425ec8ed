//! A TFJob stored with a value our types cannot decode. Our CRD refuses such
//! values, but a looser CRD (Kubeflow's, or an older one of ours) stores them,
//! and an operator upgraded onto such a cluster must cope. Here the CRD is
//! ours minus the `enum` on `restartPolicy`, installed for this scenario only
//! and restored afterwards; a running job is then patched to
//! `restartPolicy: Sometimes`.
//!
//! What must hold: the operator reports it on the object (a Warning event)
//! and in its log; other jobs are unaffected (a job created afterwards runs);
//! no Pod of the undecodable job is deleted (the same UIDs stay).
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_yaml::Value;
use tfjob_operator::api::fixtures::TfJobFixture;

use crate::harness::{
    Cleanup, apiserver_addr, create_job, identity, kubectl_stdin, report, running,
};
use crate::operator::{Operator, ensure_crd};
use crate::support::{client, kubectl, run_ok, test_namespace, wait_until};

const CRD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/kubeflow.org_tfjobs.yaml");

/// Our CRD without the `enum` on replica `restartPolicy`.
fn loose_crd() -> String {
    let text = std::fs::read_to_string(CRD).expect("the CRD file");
    let mut crd: Value = serde_yaml::from_str(&text).expect("the CRD parses");
    let policy = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["tfReplicaSpecs"]["additionalProperties"]["properties"]["restartPolicy"];
    let map = policy.as_mapping_mut().expect("restartPolicy has a schema");
    assert!(
        map.remove("enum").is_some(),
        "the CRD no longer has an enum on restartPolicy"
    );
    serde_yaml::to_string(&crd).expect("the CRD serializes")
}

fn restore_crd() {
    run_ok(kubectl().args(["apply", "--server-side", "--force-conflicts", "-f", CRD]));
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
        &loose_crd(),
    )
    .unwrap_or_else(|e| panic!("installing the loose CRD: {e}"));
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
    let patch = r#"{"spec":{"tfReplicaSpecs":{"Worker":{"restartPolicy":"Sometimes"}}}}"#;
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
                e.type_.as_deref() == Some("Warning")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("restartPolicy") || m.contains("decode"))
            }) {
                return e.message.clone().unwrap_or_default();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
    .await
    .ok();
    let log = op.log_text();
    let op_log = op.log.clone();
    // Either way of coping counts: a decode failure, or a validation failure
    // naming the job and the field.
    let logged = log.lines().any(|l| {
        l.contains("failed to decode")
            || (l.contains("/bad") && l.contains("restartPolicy") && !l.contains("DEBUG"))
    });
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
            ("pods_kept", (now == uids).to_string()),
        ],
    );
    drop(op);
    assert_eq!(
        now, uids,
        "Pods of the undecodable job were deleted or replaced"
    );
    assert!(
        logged,
        "the operator logged nothing (INFO or above) about the undecodable job: {}",
        op_log.display()
    );
    assert!(
        reported.is_some(),
        "no Warning event on the undecodable TFJob"
    );
}
