//! Helpers only the end-to-end suite needs, on the local control plane that
//! `e2e/cluster.sh up` started (real etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler; KWOK as the kubelet): the pinned versions, KWOK's exits,
//! etcd compaction and API server restarts with the lock that keeps parallel
//! tests out of their way, TFJob conditions. What every test crate needs
//! (client, kubectl, namespaces, `wait_until`) is in `crate::cluster`
//! (`tests/support/cluster.rs`, shared with `tests/real`).
//!
//! What this must never do: start or stop the whole cluster (that is
//! `e2e/run-suite.sh`'s job, once per suite), or touch objects outside the
//! test's own namespace except the few cluster-wide things a helper documents.
//!
//! Mirrors: the `test/e2e/framework` helpers of kubernetes/kubernetes.

#![allow(dead_code)] // Each test module uses a different subset.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tfjob_operator::api::types::TFJob;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use crate::cluster::{cluster_env, harness, kubeconfig_path, random_suffix, repo_dir, wait_until};

/// The default Kubernetes version: `KUBE_VERSION=${KUBE_VERSION:-<default>}`
/// in `e2e/versions.env` (an environment `KUBE_VERSION` picks another).
pub const KUBE_VERSION_DEFAULT: &str = shell_default(pinned("KUBE_VERSION"));
/// The pinned Helm version (`HELM_VERSION` in `e2e/versions.env`).
pub const HELM_VERSION: &str = pinned("HELM_VERSION");

/// Pod annotations the KWOK stages in `e2e/kwok/stages.yaml` act on.
pub const EXIT_CODE_ANNOTATION: &str = "e2e.tfjob-operator.local/exit-code";
pub const EXIT_CONTAINER_ANNOTATION: &str = "e2e.tfjob-operator.local/exit-container";
pub const EXIT_REASON_ANNOTATION: &str = "e2e.tfjob-operator.local/exit-reason";

/// `rel` under [`repo_dir`], as a string for command lines.
pub fn repo_file(rel: &str) -> String {
    repo_dir().join(rel).display().to_string()
}

/// The Helm chart's directory.
pub static CHART: LazyLock<String> = LazyLock::new(|| repo_file("charts/tfjob-operator"));

/// How long `drive_pod_exit` waits for KWOK to act.
const EXIT_TIMEOUT: Duration = Duration::from_secs(30);

const VERSIONS_ENV: &str = include_str!("../../e2e/versions.env");

/// Reads `KEY=value` from `e2e/versions.env` at compile time, so the tests and
/// the harness can never disagree about the pinned versions.
const fn pinned(key: &str) -> &'static str {
    let text = VERSIONS_ENV.as_bytes();
    let key = key.as_bytes();
    let mut line_start = 0;
    while line_start < text.len() {
        let mut line_end = line_start;
        while line_end < text.len() && text[line_end] != b'\n' {
            line_end += 1;
        }
        let mut matches = line_end - line_start > key.len() && text[line_start + key.len()] == b'=';
        let mut i = 0;
        while matches && i < key.len() {
            matches = text[line_start + i] == key[i];
            i += 1;
        }
        if matches {
            let (_, rest) = text.split_at(line_start + key.len() + 1);
            let (value, _) = rest.split_at(line_end - line_start - key.len() - 1);
            return match std::str::from_utf8(value) {
                Ok(v) => v,
                Err(_) => panic!("e2e/versions.env is not UTF-8"),
            };
        }
        line_start = line_end + 1;
    }
    panic!("a key is missing from e2e/versions.env")
}

/// `v1.37.2` from `${KUBE_VERSION:-v1.37.2}`; a plain value as it is.
const fn shell_default(value: &'static str) -> &'static str {
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes[0] != b'$' {
        return value;
    }
    let mut i = 0;
    while i + 1 < bytes.len() && !(bytes[i] == b':' && bytes[i + 1] == b'-') {
        i += 1;
    }
    if i + 2 >= bytes.len() || bytes[bytes.len() - 1] != b'}' {
        panic!("e2e/versions.env: expected ${{KEY:-default}}");
    }
    let (_, rest) = bytes.split_at(i + 2);
    let (default, _) = rest.split_at(rest.len() - 1);
    match std::str::from_utf8(default) {
        Ok(v) => v,
        Err(_) => panic!("e2e/versions.env is not UTF-8"),
    }
}

/// The Kubernetes version of the local cluster: what `e2e/cluster.sh up`
/// recorded in its env file, or the process's `KUBE_VERSION` (as in
/// `KUBE_VERSION=v1.34.4 make e2e`), else the default in `e2e/versions.env`.
pub fn kube_version() -> &'static str {
    static VERSION: LazyLock<String> = LazyLock::new(|| {
        cluster_env("KUBE_VERSION").unwrap_or_else(|| KUBE_VERSION_DEFAULT.to_string())
    });
    &VERSION
}

/// The Kubernetes minor of the local cluster (37 for v1.37.2).
pub fn kube_minor() -> u32 {
    kube_version()
        .trim_start_matches("v1.")
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("KUBE_VERSION {} is not like v1.37.2", kube_version()))
}

/// A client that authenticates with a bearer `token` instead of the admin
/// certificate (same server, same CA): e.g. a ServiceAccount's token.
pub async fn client_with_token(token: &str) -> Client {
    let path = kubeconfig_path();
    let mut kubeconfig = Kubeconfig::read_from(&path).expect("failed to read the kubeconfig");
    for named in &mut kubeconfig.auth_infos {
        named.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.to_string().into()),
            ..Default::default()
        });
    }
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("failed to build a token config");
    Client::try_from(config).expect("failed to build a kube client")
}

/// Makes KWOK end the named container (or every container when `None`) with
/// `exit_code`, by annotating the pod (see `e2e/kwok/stages.yaml`), and waits
/// until the pod shows it. What the pod shows follows the kubelet's rules:
///
/// - `restartPolicy: Never`, or `OnFailure` with exit code 0: the pod ends,
///   `Succeeded` for 0 and `Failed` otherwise; the named container has
///   `state.terminated.exitCode == exit_code`, other containers exit 0.
/// - `Always`, or `OnFailure` with a non-zero code: an in-place restart: the
///   named container's `restartCount` goes up by one,
///   `lastState.terminated.exitCode == exit_code`, and the pod stays `Running`.
pub async fn drive_pod_exit(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    exit_code: i32,
) {
    drive_pod_exit_with_reason(client, namespace, pod, container, exit_code, None).await;
}

/// [`drive_pod_exit`] with the `reason` the terminated state reports (e.g.
/// `OOMKilled`); `None` means the kubelet's default: `Completed` for exit
/// code 0, `Error` otherwise.
pub async fn drive_pod_exit_with_reason(
    client: &Client,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    exit_code: i32,
    reason: Option<&str>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let before = pods
        .get(pod)
        .await
        .unwrap_or_else(|e| panic!("failed to get pod {namespace}/{pod}: {e}"));
    let policy = before
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.clone())
        .unwrap_or_else(|| "Always".to_string());
    let restarts = policy == "Always" || (policy == "OnFailure" && exit_code != 0);
    let restarts_before = restart_counts(&before);

    let targets = |p: &Pod| -> Vec<k8s_openapi::api::core::v1::ContainerStatus> {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| container.is_none_or(|n| c.name == n))
            .collect()
    };
    // Watch from the version read above, not poll: with a retryable code the
    // operator may delete the ended Pod and create its replacement (same name)
    // within a few milliseconds, so a poll can miss the ended Pod entirely. A
    // watch from `before`'s resourceVersion replays every change to it.
    let uid = before.metadata.uid.clone();
    let version = before.metadata.resource_version.clone().unwrap_or_default();
    let what = format!("KWOK to end container {container:?} of {namespace}/{pod} with {exit_code}");
    let ended = |p: &Pod| -> bool {
        let statuses = targets(p);
        !statuses.is_empty()
            && statuses.iter().all(|c| {
                if restarts {
                    let was = restarts_before.get(&c.name).copied().unwrap_or(0);
                    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                    c.restart_count > was && last.is_some_and(|t| t.exit_code == exit_code)
                } else {
                    let now = c.state.as_ref().and_then(|s| s.terminated.as_ref());
                    now.is_some_and(|t| t.exit_code == exit_code)
                }
            })
    };
    let params = WatchParams::default()
        .fields(&format!("metadata.name={pod}"))
        .timeout(EXIT_TIMEOUT.as_secs() as u32);
    let mut events = pods
        .watch(&params, &version)
        .await
        .unwrap_or_else(|e| panic!("failed to watch pod {namespace}/{pod}: {e}"))
        .boxed();

    let mut annotations = BTreeMap::new();
    annotations.insert(EXIT_CODE_ANNOTATION, Some(exit_code.to_string()));
    annotations.insert(EXIT_CONTAINER_ANNOTATION, container.map(str::to_string));
    annotations.insert(EXIT_REASON_ANNOTATION, reason.map(str::to_string));
    let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
    pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("failed to annotate pod {namespace}/{pod}: {e}"));

    let seen = tokio::time::timeout(EXIT_TIMEOUT, async {
        while let Some(event) = events.next().await {
            match event {
                Ok(WatchEvent::Added(p) | WatchEvent::Modified(p))
                    if p.metadata.uid == uid && ended(&p) =>
                {
                    return Ok(());
                }
                Ok(WatchEvent::Deleted(p)) if p.metadata.uid == uid && !ended(&p) => {
                    return Err(format!("{namespace}/{pod} was deleted before it ended"));
                }
                Ok(WatchEvent::Error(e)) => return Err(format!("the watch failed: {e}")),
                Err(e) => return Err(format!("the watch failed: {e}")),
                _ => {}
            }
        }
        Err("the watch ended".to_string())
    })
    .await;
    match seen {
        Ok(Ok(())) => {}
        Ok(Err(why)) => panic!("waiting for {what}: {why}"),
        Err(_) => panic!("timed out after {EXIT_TIMEOUT:?} waiting for {what}"),
    }
}

fn restart_counts(pod: &Pod) -> BTreeMap<String, i32> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| {
            cs.iter()
                .map(|c| (c.name.clone(), c.restart_count))
                .collect()
        })
        .unwrap_or_default()
}

/// Compacts etcd up to its current revision (physically), so a watch from an
/// older resourceVersion gets `410 Gone` ("too old resource version") and a
/// reflector must relist. Returns the compacted revision. Talks to etcd's JSON
/// gateway on `ETCD_URL`.
///
/// Which watches see the 410 at once: **ConfigMaps**, because this cluster's
/// API server does not watch-cache them (`--watch-cache-sizes configmaps#0`),
/// so their watches are served by etcd itself. Other kinds are served from
/// the API server's watch cache, which keeps its own history; for them call
/// [`restart_apiserver`] after compacting: the restarted cache starts at the
/// compacted revision and refuses anything older with 410.
///
/// Writes (creates, then deletes) a ConfigMap in `default` first: compacting
/// at revision R keeps R itself, and a watch from resourceVersion X needs X+1,
/// so two writes make even the newest version a test has seen too old.
pub async fn compact_etcd(client: &Client) -> i64 {
    let marker_name = format!("e2e-compaction-{}", random_suffix());
    let marker: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": marker_name } }))
            .expect("a valid ConfigMap");
    let maps = Api::<ConfigMap>::namespaced(client.clone(), "default");
    maps.create(&PostParams::default(), &marker)
        .await
        .expect("failed to write the compaction marker");
    maps.delete(&marker_name, &Default::default())
        .await
        .expect("failed to delete the compaction marker");

    // Any range answers with the current revision in its header.
    let range = etcd_post("/v3/kv/range", r#"{"key":"AA==","limit":1}"#).await;
    let revision: i64 = range["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("etcd range answered without a revision: {range}"));
    let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
    etcd_post("/v3/kv/compaction", &body).await;
    revision
}

/// POSTs JSON to etcd's gRPC gateway over plain HTTP/1.1 on loopback. A raw
/// request keeps an HTTP client library out of the dev-dependencies; it is a
/// few hundred bytes to a local process, so a blocking socket is fine here.
async fn etcd_post(path: &str, body: &str) -> serde_json::Value {
    let url = cluster_env("ETCD_URL").expect("ETCD_URL is not in the cluster env file");
    let authority = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut stream = std::net::TcpStream::connect(&authority)
        .unwrap_or_else(|e| panic!("failed to connect to etcd at {authority}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a socket timeout");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .expect("failed to write to etcd");
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .expect("failed to read from etcd");
    let response = String::from_utf8_lossy(&response);
    let (head, payload) = response
        .split_once("\r\n\r\n")
        .expect("an HTTP response from etcd");
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "etcd {path} failed: {head}\n{payload}"
    );
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let json = if chunked {
        dechunk(payload)
    } else {
        payload.to_string()
    };
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("etcd {path}: {e}: {payload}"))
}

/// Joins the chunks of an HTTP/1.1 chunked body (`<hex len>\r\n<data>\r\n ... 0\r\n\r\n`).
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = body.split_once("\r\n") {
        let len = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if len == 0 || rest.len() < len {
            break;
        }
        out.push_str(&rest[..len]);
        body = rest[len..].trim_start_matches("\r\n");
    }
    out
}

/// Restarts kube-apiserver in place (same port, same etcd data) with
/// `e2e/cluster.sh restart apiserver`, which returns once `/readyz` is ok and
/// the API server's own clients (KWOK, scheduler, controller-manager) have
/// been restarted too, so pods keep moving right away (~10 s in all).
/// Blocks the calling thread for the few seconds that takes: from a
/// `#[tokio::test]` whose background tasks must keep running meanwhile, use
/// [`restart_apiserver_async`]. Hold [`exclusive_cluster`] around it when other
/// tests must not see the outage.
pub fn restart_apiserver() {
    let out = harness("e2e/cluster.sh")
        .args(["restart", "apiserver"])
        .output()
        .unwrap_or_else(|e| panic!("failed to run e2e/cluster.sh: {e}"));
    assert!(
        out.status.success(),
        "restarting the API server failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`restart_apiserver`] on a blocking thread, so the test's runtime keeps
/// driving its tasks (e.g. a reflector that should notice the outage).
pub async fn restart_apiserver_async() {
    tokio::task::spawn_blocking(restart_apiserver)
        .await
        .expect("the restart task panicked");
}

/// Tests run in parallel against one cluster. A test that disrupts it for
/// everyone (restarting the API server, compacting etcd) holds
/// [`exclusive_cluster`]; tests that would be hurt by such a disruption hold
/// [`shared_cluster`]. Both are plain process-wide locks (the suite is one
/// test binary), so tests that take neither are unaffected.
static CLUSTER_LOCK: LazyLock<Arc<RwLock<()>>> = LazyLock::new(|| Arc::new(RwLock::new(())));

/// See [`CLUSTER_LOCK`]: held for the whole of a test that must not see disruptions.
pub async fn shared_cluster() -> OwnedRwLockReadGuard<()> {
    CLUSTER_LOCK.clone().read_owned().await
}

/// See [`CLUSTER_LOCK`]: held by a test that disrupts the cluster.
pub async fn exclusive_cluster() -> OwnedRwLockWriteGuard<()> {
    CLUSTER_LOCK.clone().write_owned().await
}

/// The status condition `type_` of the job, if it has one.
pub fn condition<'a>(
    job: &'a TFJob,
    type_: &str,
) -> Option<&'a tfjob_operator::api::types::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Waits until the job's condition `type_` has `status` ("True"/"False") and
/// returns the job; at most 60 s (the operator's reaction to one change on a
/// busy machine).
pub async fn wait_condition(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
) -> TFJob {
    wait_condition_within(client, ns, name, type_, status, Duration::from_secs(60)).await
}

/// [`wait_condition`] with its own deadline.
pub async fn wait_condition_within(
    client: &Client,
    ns: &str,
    name: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
) -> TFJob {
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
    wait_until(
        &format!("TFJob {ns}/{name} to have condition {type_}={status}"),
        timeout,
        || async {
            let job = jobs.get_opt(name).await.ok().flatten()?;
            let found = condition(&job, type_).is_some_and(|c| c.status == status);
            found.then_some(job)
        },
    )
    .await
}

/// The messages of the Warning events with `reason` in `ns` (none if the
/// list fails: callers poll).
pub async fn warnings(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&kube::api::ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

/// Gives every container of `job` a CPU request of `cpu`: what Kueue's
/// quota counts (a job without requests takes none of it).
pub fn request_cpu(job: &mut TFJob, cpu: &str) {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    for spec in job.spec.tf_replica_specs.values_mut() {
        for c in spec
            .template
            .spec
            .iter_mut()
            .flat_map(|s| s.containers.iter_mut())
        {
            c.resources = Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".into(), Quantity(cpu.into()))])),
                ..ResourceRequirements::default()
            });
        }
    }
}
