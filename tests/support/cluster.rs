//! The local cluster as every test crate talks to it: where the harness left
//! it (`<cluster dir>/kubeconfig`, `env`), a client and the harness-built
//! kubectl and helm pointed at it, a namespace of the test's own, and polling
//! with a deadline. One copy for `tests/e2e` (KWOK's fake Pods) and
//! `tests/real` (the real node): each crate declares it with
//! `#[path = "../support/cluster.rs"] mod cluster;` and keeps what only it
//! needs in its own `support.rs`.
//!
//! Why `#[path]` and not a crate: cargo makes a test target of `tests/*.rs`
//! and `tests/*/main.rs` only, so `tests/support/` holds shared source that is
//! never a test binary of its own; a helper crate would need a workspace
//! member and a dev-dependency for some two hundred lines.
//!
//! What this must never do: start or stop the cluster (`e2e/run-suite.sh` and
//! `e2e/run-real.sh` do, once per suite), touch objects outside the test's
//! own namespace, or fall back to a cluster it was not pointed at: without
//! `<cluster dir>/kubeconfig` it panics with the command to run, whatever
//! `KUBECONFIG` says.
//!
//! Mirrors: the `test/e2e/framework` helpers of kubernetes/kubernetes
//! (`CreateTestingNS`, `wait.PollUntilContextTimeout`) and envtest's
//! kubeconfig plumbing in controller-runtime (`pkg/envtest`).

#![allow(dead_code)] // Each test crate, and each of its modules, uses a different subset.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How often [`wait_until`] asks again.
const POLL_EVERY: Duration = Duration::from_millis(200);

/// The checkout this runs from. Cargo sets `CARGO_MANIFEST_DIR` when it runs
/// a test or bench as when it compiles one, and the run-time value is the one
/// to trust: a target directory shared by two checkouts (CI's clone and a
/// developer's) can hold a binary compiled in the other one, which cargo
/// reuses when the sources are older than it, with the other path inside.
pub fn repo_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The cluster state directory: `$TFJOB_CLUSTER_DIR`, default `<repo>/.cluster`.
pub fn cluster_dir() -> PathBuf {
    std::env::var_os("TFJOB_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join(".cluster"))
}

/// `KEY` from an env file the harness wrote (`export KEY=value` lines).
pub fn env_file_value(file: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

/// A value the harness exported in `<cluster dir>/env` (`ETCD_URL`,
/// `KUBE_APISERVER_URL`, ...); the process environment wins when set.
pub fn cluster_env(key: &str) -> Option<String> {
    std::env::var(key)
        .ok()
        .or_else(|| env_file_value(&cluster_dir().join("env"), key))
}

/// The directory of the harness-built kubectl, helm, kwok, etcd (first on the
/// `PATH` line of the env file). Never the machine's own `/usr/bin/kubectl`.
/// `TFJOB_BIN_DIR` names it for a test that needs only the tools, not a
/// cluster (`make chart-lint-helm4`: `bash e2e/tools.sh --bin-dir`).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TFJOB_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let text = std::fs::read_to_string(cluster_dir().join("env")).unwrap_or_else(|e| {
        panic!(
            "no local cluster ({e}): run `make cluster-up` \
             (`e2e/cluster.sh up --real-node` for the real node)"
        )
    });
    text.lines()
        .find_map(|l| l.strip_prefix("export PATH="))
        .and_then(|p| p.split(':').next())
        .map(PathBuf::from)
        .expect("the cluster env file has no PATH line")
}

/// The admin kubeconfig the harness wrote: `<cluster dir>/kubeconfig`.
pub fn kubeconfig_path() -> PathBuf {
    let path = cluster_dir().join("kubeconfig");
    assert!(
        path.exists(),
        "no kubeconfig at {}: run `make cluster-up` (or `make e2e`)",
        path.display()
    );
    path
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

/// The harness-built kubectl, already pointed at the cluster's kubeconfig.
pub fn kubectl() -> Command {
    let mut cmd = Command::new(bin_dir().join("kubectl"));
    cmd.env("KUBECONFIG", kubeconfig_path());
    cmd
}

/// The harness-built helm (Helm 3), already pointed at the cluster's kubeconfig.
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

/// Runs a command and returns its stdout; panics with its output when it fails.
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

/// A lowercase random suffix for names that must not collide across tests.
pub fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..6)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Creates a fresh namespace `<prefix>-<random>` with `labels` and returns
/// its name. Waits for its `default` ServiceAccount (made by
/// kube-controller-manager): until it exists the API server refuses Pods in
/// the namespace.
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

/// [`namespace_with_labels`] with the label that marks a test's namespace.
pub async fn test_namespace(client: &Client, prefix: &str) -> String {
    namespace_with_labels(
        client,
        prefix,
        serde_json::json!({"tfjob-operator.e2e/test-namespace": "true"}),
    )
    .await
}

/// Deletes a test namespace (and so everything in it) without waiting for the
/// namespace controller to finish. Optional: the suite's cluster is thrown
/// away afterwards; useful for tests that create many objects.
pub async fn delete_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.delete(name, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => panic!("failed to delete namespace {name}: {e}"),
    }
}

/// The same from a `Drop` (no runtime to await on): `kubectl delete
/// namespace`, not waiting, a namespace already gone being fine; errors are
/// ignored, as a cleanup's must be.
pub fn delete_namespace_in_background(name: &str) {
    let _ = kubectl()
        .args([
            "delete",
            "namespace",
            name,
            "--wait=false",
            "--ignore-not-found",
        ])
        .output();
}

/// Polls `f` every 200 ms until it returns `Some`, and returns that value.
/// Panics with `what` and the timeout when the deadline passes. Errors belong
/// inside `f` (return `None` to poll again), so a transient API error during,
/// say, an API server restart does not fail the test.
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

/// Waits until the CRD `name` is Established (served) and returns it as stored.
/// Polled: `kubectl wait` fails at once while a new CRD has no conditions yet.
pub async fn wait_crd_established(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_until(
        &format!("the CRD {name} to be Established"),
        timeout,
        || async {
            let crd = crds.get_opt(name).await.ok().flatten()?;
            let established = crd
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(crd)
        },
    )
    .await
}
