//! Helpers only the real-node tests need: the real node the harness started
//! (`e2e/cluster.sh up --real-node`), the images it imported, Pods pinned to
//! the real node, the operator on the host. What every test crate needs
//! (client, kubectl, namespaces, `wait_until`) is in `crate::cluster`
//! (`tests/support/cluster.rs`, shared with `tests/e2e`).
//!
//! What this must never do: start or stop the cluster, or fall back to a
//! cluster it was not pointed at (without `<cluster dir>/real-node/env` it
//! panics with the command to run).
//!
//! Mirrors: the `test/e2e/framework` helpers of kubernetes/kubernetes, like
//! `tests/e2e/support.rs` (which assumes KWOK's fake Pods; these do not).

#![allow(dead_code)] // Each test module uses a different subset.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::Api;

use crate::cluster::{
    cluster_dir, env_file_value, kubeconfig_path, kubectl, repo_dir, run_ok, wait_crd_established,
    wait_until,
};

/// The real node's name, label and taint key (e2e/real-node/network.env).
pub const NODE_NAME: &str = "real-node-0";
pub const NODE_LABEL: &str = "e2e.tfjob-operator.local/real-node";
/// The Pod range on the bridge tfjob0 and the node's address on it.
pub const POD_PREFIX: &str = "10.88.";
pub const NODE_IP: &str = "10.88.0.1";

/// A value of the real node's env file (`REAL_NODE_CONTAINERD_LOG`, ...).
pub fn node_env(key: &str) -> String {
    let file = cluster_dir().join("real-node/env");
    env_file_value(&file, key).unwrap_or_else(|| {
        panic!(
            "no {key} in {}: start the cluster with the real node (e2e/cluster.sh up --real-node)",
            file.display()
        )
    })
}

/// The name of an image `e2e/images/build.sh <name> --import` imported into
/// the real node (`busybox`, `curl`, `operator`, `tensorflow`).
pub fn image(name: &str) -> String {
    let file = cluster_dir().join("real-node/images.env");
    let key = format!("REAL_NODE_IMAGE_{}", name.to_uppercase());
    env_file_value(&file, &key).unwrap_or_else(|| {
        panic!("the {name} image was not imported: run `bash e2e/images/build.sh {name} --import`")
    })
}

/// What a Pod spec needs to land on the real node: its label as the node
/// selector and a toleration of its taint.
pub fn on_real_node() -> serde_json::Value {
    serde_json::json!({
        "nodeSelector": { NODE_LABEL: "true" },
        "tolerations": [{ "key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule" }]
    })
}

/// A Pod on the real node running `script` in the busybox image, never restarted.
pub fn busybox_pod(name: &str, script: &str) -> Pod {
    let mut spec = on_real_node();
    spec["restartPolicy"] = "Never".into();
    spec["terminationGracePeriodSeconds"] = 1.into();
    spec["containers"] = serde_json::json!([{
        "name": "main",
        "image": image("busybox"),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }]);
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": spec,
    }))
    .expect("a valid Pod")
}

/// Waits until the Pod has ended (`Succeeded` or `Failed`) and returns it.
pub async fn wait_pod_ended(pods: &Api<Pod>, name: &str, timeout: Duration) -> Pod {
    wait_until(&format!("Pod {name} to end"), timeout, || async {
        let pod = pods.get_opt(name).await.ok().flatten()?;
        let phase = pod.status.as_ref()?.phase.clone()?;
        (phase == "Succeeded" || phase == "Failed").then_some(pod)
    })
    .await
}

/// The Pod's container log, read the way a person would: `kubectl logs`
/// (the API server asks the kubelet on the node, by its IP).
pub fn logs(namespace: &str, pod: &str) -> String {
    run_ok(kubectl().args(["logs", "-n", namespace, pod]))
}

/// The operator binary of this build, on the host, for one namespace
/// (admin kubeconfig, default flags: `--gang-scheduling=auto`); killed when
/// dropped, its log kept in the cluster's logs dir.
pub struct Operator {
    child: Child,
    pub log: PathBuf,
}

impl Operator {
    pub fn start(namespace: &str) -> Self {
        let logs = cluster_dir().join("logs");
        std::fs::create_dir_all(&logs).expect("the cluster logs dir");
        let log = logs.join(format!("operator-{namespace}.log"));
        let file = std::fs::File::create(&log).expect("the operator log file");
        let child = Command::new(env!("CARGO_BIN_EXE_tfjob-operator"))
            .arg("run")
            .arg(format!("--namespace={namespace}"))
            .args(["--leader-election-namespace", namespace])
            // Port 0: no listener to collide with the other operators here.
            .args(["--metrics-bind-address", "0"])
            .args(["--health-probe-bind-address", "0"])
            .env("KUBECONFIG", kubeconfig_path())
            .env_remove("WATCH_NAMESPACE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::from(file.try_clone().expect("a log file handle")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("failed to start the operator binary");
        Self { child, log }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("operator log: {}", self.log.display());
    }
}

/// Installs our TFJob CRD (`crds/`) unless one is there, and waits until it
/// is served. The chart's test (which runs first in `make test-real`) leaves
/// the chart's CRD installed; a suite run alone (`REAL_TEST_FILTER`) has none.
pub async fn ensure_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds
        .get_opt("tfjobs.kubeflow.org")
        .await
        .ok()
        .flatten()
        .is_none()
    {
        let file = repo_dir().join("crds/kubeflow.org_tfjobs.yaml");
        run_ok(kubectl().args(["apply", "--server-side", "-f"]).arg(&file));
    }
    wait_crd_established(client, "tfjobs.kubeflow.org", Duration::from_secs(60)).await;
}
