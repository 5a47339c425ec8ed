//! Kubeflow's Python SDK (`kubeflow-training`, as users run it against
//! Kubeflow's training-operator) works against our operator unchanged:
//! `e2e/sdk/check_sdk.py` creates, waits on, lists the Pods of and deletes a
//! TFJob through `TrainingClient`.
use std::process::Command;

use crate::cluster::{client, cluster_dir, test_namespace};
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kubeflow_python_sdk_drives_a_job_end_to_end() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "tfjob-sdk").await;
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;
    let kubeconfig = cluster_dir().join("kubeconfig");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg(crate::cluster::repo_dir().join("e2e/sdk/run.sh"))
            .arg(kubeconfig)
            .arg(&ns)
            .output()
            .expect("bash runs")
    })
    .await
    .expect("the SDK check finishes");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("SDK CHECK PASSED"),
        "the SDK check failed ({}):\n{stdout}\n{stderr}\noperator log: {}",
        out.status,
        operator.log.display()
    );
}
