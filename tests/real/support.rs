//! Helpers the real-node tests share: the cluster the harness started
//! (`e2e/cluster.sh up --real-node`), the images it imported, Pods pinned to
//! the real node, polling with deadlines.
//!
//! What this must never do: start or stop the cluster, or fall back to a
//! cluster it was not pointed at (without `<cluster dir>/real-node/env` it
//! panics with the command to run).
//!
//! Mirrors: the `test/e2e/framework` helpers of kubernetes/kubernetes, like
//! `tests/e2e/support.rs` (which assumes KWOK's fake Pods; these do not).

#![allow(dead_code)] // Each test module uses a different subset.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The real node's name, label and taint key (e2e/real-node/network.env).
pub const NODE_NAME: &str = "real-node-0";
pub const NODE_LABEL: &str = "e2e.tfjob-operator.local/real-node";
/// The Pod range on the bridge tfjob0 and the node's address on it.
pub const POD_PREFIX: &str = "10.88.";
pub const NODE_IP: &str = "10.88.0.1";

const POLL_EVERY: Duration = Duration::from_millis(500);

/// The cluster state directory: `$TFJOB_CLUSTER_DIR`, default `<repo>/.cluster`.
pub fn cluster_dir() -> PathBuf {
    std::env::var_os("TFJOB_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join(".cluster"))
}

/// The checkout this runs from: cargo's run-time `CARGO_MANIFEST_DIR`, not
/// the compile-time one (a target directory shared by two checkouts can hold
/// a binary compiled in the other, which cargo reuses).
pub fn repo_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// `KEY` from an env file the harness wrote (`export KEY=value` lines).
fn env_file_value(file: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

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

/// The harness-built kubectl, helm, ... (first on the `PATH` line of the env file).
pub fn bin_dir() -> PathBuf {
    let file = cluster_dir().join("env");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("no local cluster ({e}): run `e2e/cluster.sh up --real-node`"));
    text.lines()
        .find_map(|l| l.strip_prefix("export PATH="))
        .and_then(|p| p.split(':').next())
        .map(PathBuf::from)
        .expect("the cluster env file has no PATH line")
}

pub fn kubeconfig_path() -> PathBuf {
    cluster_dir().join("kubeconfig")
}

/// A client for the admin user of the local cluster.
pub async fn client() -> Client {
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("failed to read {}: {e}", path.display()));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("failed to load {}: {e}", path.display()));
    Client::try_from(config).expect("failed to build a kube client")
}

/// The harness-built kubectl, pointed at the cluster.
pub fn kubectl() -> Command {
    let mut cmd = Command::new(bin_dir().join("kubectl"));
    cmd.env("KUBECONFIG", kubeconfig_path());
    cmd
}

/// The harness-built helm (Helm 3), pointed at the cluster.
pub fn helm() -> Command {
    let mut cmd = Command::new(bin_dir().join("helm"));
    cmd.env("KUBECONFIG", kubeconfig_path());
    cmd
}

/// A script of the harness (`e2e/...`), with the cluster dir in its environment.
pub fn harness(script: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_dir().join(script))
        .env("TFJOB_CLUSTER_DIR", cluster_dir());
    cmd
}

/// Runs a command and returns its stdout; panics with stderr when it fails.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command; returns (success, stdout + stderr).
pub fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Creates the TFJob CRD from `crds/` unless it is there (the chart's tests
/// install it with the chart and leave it: a run of the training tests alone,
/// `REAL_TEST_FILTER=training::`, finds none), and waits until it is served.
pub async fn ensure_tfjob_crd() {
    let (present, _) = run(kubectl().args(["get", "crd", "tfjobs.kubeflow.org"]));
    if !present {
        let crd = repo_dir().join("crds/kubeflow.org_tfjobs.yaml");
        run_ok(kubectl().arg("create").arg("-f").arg(&crd));
    }
    // Polled: `kubectl wait` fails at once while the CRD has no conditions yet.
    wait_until(
        "the TFJob CRD to be Established",
        Duration::from_secs(60),
        || async {
            let (_, established) = run(kubectl().args([
                "get",
                "crd",
                "tfjobs.kubeflow.org",
                "-o",
                r#"jsonpath={.status.conditions[?(@.type=="Established")].status}"#,
            ]));
            (established.trim() == "True").then_some(())
        },
    )
    .await;
}

pub fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..6)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Creates a namespace `<prefix>-<random>` with `labels`, waits for its
/// default ServiceAccount, and returns its name.
pub async fn namespace_with_labels(
    client: &Client,
    prefix: &str,
    labels: serde_json::Value,
) -> String {
    let name = format!("{prefix}-{}", random_suffix());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": labels }
    }))
    .expect("a valid Namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("failed to create namespace {name}: {e}"));
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait_until(
        &format!("the default ServiceAccount in {name}"),
        Duration::from_secs(60),
        || async { accounts.get_opt("default").await.ok().flatten() },
    )
    .await;
    name
}

pub async fn test_namespace(client: &Client, prefix: &str) -> String {
    namespace_with_labels(
        client,
        prefix,
        serde_json::json!({"tfjob-operator.e2e/test-namespace": "true"}),
    )
    .await
}

pub async fn delete_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => panic!("failed to delete namespace {name}: {e}"),
    }
}

/// Polls `f` until it returns `Some`; panics naming `what` after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
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
    wait_until(
        "the TFJob CRD to be Established",
        Duration::from_secs(60),
        || async {
            let crd = crds.get_opt("tfjobs.kubeflow.org").await.ok().flatten()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        },
    )
    .await;
}
