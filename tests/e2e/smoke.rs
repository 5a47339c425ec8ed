//! Smoke suite for the local control plane itself: before any operator test
//! can be trusted, the cluster must behave like a real one where it matters to
//! a TFJob controller: the pinned version, scheduling, KWOK's pod lifecycle
//! (Running, driven exits, termination), garbage collection through
//! ownerReferences, RBAC, and the etcd compaction hook reflector tests rely on.
//!
//! What these tests must never do: depend on the operator (they test the
//! harness, not the product) or on one another; each works in its own namespace.
//!
//! Mirrors: the conformance-style checks of kubernetes/kubernetes `test/e2e`
//! (`[sig-node] Pods`, `[sig-api-machinery] Garbage collector`, `[sig-auth]`).

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, Resource};

use crate::cluster::{self, wait_until};
use crate::support::{self, HELM_VERSION};

const RUNNING_TIMEOUT: Duration = Duration::from_secs(60);

/// An owner object: a ConfigMap is enough for the garbage collector, which
/// follows ownerReferences of any kind.
async fn create_owner(client: &Client, ns: &str) -> ConfigMap {
    let owner: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "owner" }
    }))
    .expect("a valid ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &owner)
        .await
        .expect("failed to create the owner")
}

/// A pod owned by `owner` (a controller reference, like the operator writes),
/// with a `tensorflow` container and a sidecar.
async fn create_owned_pod(
    client: &Client,
    ns: &str,
    name: &str,
    owner: &ConfigMap,
    restart_policy: &str,
) -> Pod {
    let owner_ref = owner
        .controller_owner_ref(&())
        .expect("the owner has a name and uid");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "ownerReferences": [owner_ref] },
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [
                { "name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1" },
                { "name": "sidecar", "image": "busybox:1.36" }
            ]
        }
    }))
    .expect("a valid Pod");
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("failed to create pod {name}: {e}"))
}

async fn wait_running(client: &Client, ns: &str, name: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_until(
        &format!("pod {ns}/{name} to be Running and Ready"),
        RUNNING_TIMEOUT,
        || async {
            let p = pods.get(name).await.ok()?;
            let status = p.status.as_ref()?;
            let ready = status
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (status.phase.as_deref() == Some("Running") && ready).then_some(p)
        },
    )
    .await
}

fn container_status<'a>(
    pod: &'a Pod,
    name: &str,
) -> &'a k8s_openapi::api::core::v1::ContainerStatus {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == name))
        .unwrap_or_else(|| panic!("pod has no status for container {name}"))
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn api_server_reports_the_pinned_version() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let info = client.apiserver_version().await.expect("/version answers");
    assert_eq!(info.git_version, support::kube_version());
    let minor = support::kube_version()
        .trim_start_matches("v1.")
        .split('.')
        .next();
    assert_eq!(Some(info.minor.as_str()), minor);
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn harness_kubectl_and_helm_are_the_pinned_versions() {
    let _guard = support::shared_cluster().await;
    let kubectl = cluster::run_ok(cluster::kubectl().args(["version", "-o", "json"]));
    let v: serde_json::Value = serde_json::from_str(&kubectl).expect("kubectl version is JSON");
    assert_eq!(v["clientVersion"]["gitVersion"], support::kube_version());
    assert_eq!(v["serverVersion"]["gitVersion"], support::kube_version());
    let helm = cluster::run_ok(cluster::helm().args(["version", "--short"]));
    assert!(helm.starts_with(HELM_VERSION), "helm says {helm}");
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn owned_pod_is_scheduled_onto_a_fake_node_and_becomes_running() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-run").await;
    let owner = create_owner(&client, &ns).await;
    create_owned_pod(&client, &ns, "worker-0", &owner, "Never").await;

    let pod = wait_running(&client, &ns, "worker-0").await;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    assert!(
        node.as_deref().is_some_and(|n| n.starts_with("kwok-node-")),
        "scheduled onto {node:?}"
    );
    let status = pod.status.as_ref().expect("a status");
    assert!(status.pod_ip.is_some(), "KWOK assigns a pod IP");
    let tf = container_status(&pod, "tensorflow");
    assert!(tf.ready);
    assert!(tf.state.as_ref().is_some_and(|s| s.running.is_some()));
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn pod_driven_to_exit_137_fails_with_that_exit_code_on_the_named_container() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-fail").await;
    let owner = create_owner(&client, &ns).await;
    create_owned_pod(&client, &ns, "worker-0", &owner, "Never").await;
    wait_running(&client, &ns, "worker-0").await;

    support::drive_pod_exit(&client, &ns, "worker-0", Some("tensorflow"), 137).await;

    let pod = Api::<Pod>::namespaced(client, &ns)
        .get("worker-0")
        .await
        .expect("the pod");
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Failed")
    );
    let tf = container_status(&pod, "tensorflow");
    let terminated = tf.state.as_ref().and_then(|s| s.terminated.as_ref());
    assert_eq!(terminated.map(|t| t.exit_code), Some(137));
    assert_eq!(terminated.and_then(|t| t.reason.as_deref()), Some("Error"));
    let sidecar = container_status(&pod, "sidecar");
    let sidecar_exit = sidecar.state.as_ref().and_then(|s| s.terminated.as_ref());
    assert_eq!(sidecar_exit.map(|t| t.exit_code), Some(0));
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn pod_driven_to_exit_0_succeeds() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-ok").await;
    let owner = create_owner(&client, &ns).await;
    create_owned_pod(&client, &ns, "chief-0", &owner, "OnFailure").await;
    wait_running(&client, &ns, "chief-0").await;

    support::drive_pod_exit(&client, &ns, "chief-0", None, 0).await;

    let pod = Api::<Pod>::namespaced(client, &ns)
        .get("chief-0")
        .await
        .expect("the pod");
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    for name in ["tensorflow", "sidecar"] {
        let exit = container_status(&pod, name)
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code);
        assert_eq!(exit, Some(0), "container {name}");
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn non_zero_exit_under_on_failure_restarts_the_container_in_place() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-restart").await;
    let owner = create_owner(&client, &ns).await;
    create_owned_pod(&client, &ns, "worker-0", &owner, "OnFailure").await;
    wait_running(&client, &ns, "worker-0").await;

    support::drive_pod_exit(&client, &ns, "worker-0", Some("tensorflow"), 3).await;
    support::drive_pod_exit_with_reason(
        &client,
        &ns,
        "worker-0",
        Some("tensorflow"),
        137,
        Some("OOMKilled"),
    )
    .await;

    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let pod = pods.get("worker-0").await.expect("the pod");
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    let tf = container_status(&pod, "tensorflow");
    assert_eq!(tf.restart_count, 2, "one restart per driven exit");
    let last = tf.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    assert_eq!(last.map(|t| t.exit_code), Some(137));
    assert_eq!(last.and_then(|t| t.reason.as_deref()), Some("OOMKilled"));
    assert!(tf.state.as_ref().is_some_and(|s| s.running.is_some()));
    assert_eq!(container_status(&pod, "sidecar").restart_count, 0);
    // The request annotations are consumed, so nothing restarts again later.
    let annotations = pod.metadata.annotations.unwrap_or_default();
    assert!(!annotations.contains_key(support::EXIT_CODE_ANNOTATION));
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn deleting_the_owner_garbage_collects_the_owned_pod() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-gc").await;
    let owner = create_owner(&client, &ns).await;
    create_owned_pod(&client, &ns, "worker-0", &owner, "Never").await;
    wait_running(&client, &ns, "worker-0").await;

    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .delete("owner", &DeleteParams::background())
        .await
        .expect("failed to delete the owner");

    let pods: Api<Pod> = Api::namespaced(client, &ns);
    wait_until(
        "the garbage collector to delete the owned pod (and KWOK to finish terminating it)",
        Duration::from_secs(60),
        || async { matches!(pods.get_opt("worker-0").await, Ok(None)).then_some(()) },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn deleted_pod_finishes_terminating() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-delete").await;
    let owner = create_owner(&client, &ns).await;
    create_owned_pod(&client, &ns, "worker-0", &owner, "Never").await;
    wait_running(&client, &ns, "worker-0").await;

    let pods: Api<Pod> = Api::namespaced(client, &ns);
    // A graceful delete only sets deletionTimestamp; KWOK (the "kubelet") must finish it.
    pods.delete("worker-0", &DeleteParams::default())
        .await
        .expect("failed to delete the pod");
    wait_until("the pod to be gone", Duration::from_secs(30), || async {
        matches!(pods.get_opt("worker-0").await, Ok(None)).then_some(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn service_account_without_bindings_is_forbidden_to_list_pods() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-rbac").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let sa: ServiceAccount =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "nobody" } }))
            .expect("a valid ServiceAccount");
    accounts
        .create(&PostParams::default(), &sa)
        .await
        .expect("failed to create the ServiceAccount");
    let request: TokenRequest = serde_json::from_value(serde_json::json!({
        "spec": { "audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 600 }
    }))
    .expect("a valid TokenRequest");
    let issued: TokenRequest = accounts
        .create_subresource("token", "nobody", &PostParams::default(), &request)
        .await
        .expect("failed to issue a token");
    let token = issued.status.expect("an issued token").token;

    let as_nobody = support::client_with_token(&token).await;
    let err = Api::<Pod>::namespaced(as_nobody.clone(), &ns)
        .list(&ListParams::default())
        .await
        .expect_err("a ServiceAccount without bindings must not list pods");
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden, got {other}"),
    }
    // The token itself is valid: the same identity may ask who it is.
    let version = as_nobody
        .apiserver_version()
        .await
        .expect("/version is public");
    assert_eq!(version.git_version, support::kube_version());
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn etcd_compaction_makes_watches_from_older_versions_expire() {
    // Compaction expires every open watch's resourceVersion: exclusive.
    let _guard = support::exclusive_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-compact").await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let old_version = maps
        .list(&ListParams::default())
        .await
        .expect("a list")
        .metadata
        .resource_version
        .expect("a list has a resourceVersion");

    let compacted = support::compact_etcd(&client).await;
    assert!(compacted > 0);

    // ConfigMaps are not watch-cached on this cluster, so etcd itself answers
    // the watch; polling only rides out a transient connection error.
    wait_until(
        "a watch from before the compaction to be refused with 410 Gone",
        Duration::from_secs(10),
        || async {
            let stream = maps
                .watch(&WatchParams::default().timeout(5), &old_version)
                .await;
            let first = match stream {
                Err(kube::Error::Api(s)) if s.code == 410 => return Some(()),
                Err(_) => return None,
                Ok(s) => s.boxed().try_next().await,
            };
            match first {
                Ok(Some(WatchEvent::Error(e))) if e.code == 410 => Some(()),
                Err(kube::Error::Api(s)) if s.code == 410 => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn api_server_restart_keeps_the_data_and_expires_compacted_versions_of_cached_kinds() {
    // Restarting the API server interrupts everyone: exclusive.
    let _guard = support::exclusive_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-restart-api").await;
    let owner = create_owner(&client, &ns).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let old_version = pods
        .list(&ListParams::default())
        .await
        .expect("a list")
        .metadata
        .resource_version
        .expect("a list has a resourceVersion");
    let url_before = cluster::cluster_env("KUBE_APISERVER_URL");

    support::compact_etcd(&client).await;
    support::restart_apiserver_async().await;

    // Same port (the env file still points at it), same data (the owner survived).
    assert_eq!(cluster::cluster_env("KUBE_APISERVER_URL"), url_before);
    let owners: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let survived = owners
        .get("owner")
        .await
        .expect("the owner survives the restart");
    assert_eq!(survived.metadata.uid, owner.metadata.uid);
    // Pods are watch-cached; the restarted cache starts after the compaction.
    let first = pods
        .watch(&WatchParams::default().timeout(5), &old_version)
        .await
        .expect("the watch request is accepted")
        .boxed()
        .try_next()
        .await;
    let code = match first {
        Ok(Some(WatchEvent::Error(e))) => e.code,
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected 410 Gone, got {other:?}"),
    };
    assert_eq!(code, 410);
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn harness_helm_installs_and_uninstalls_a_chart() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "smoke-helm").await;
    let chart = std::env::temp_dir().join(format!("tfjob-e2e-chart-{}", cluster::random_suffix()));
    std::fs::create_dir_all(chart.join("templates")).expect("a temp chart dir");
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: smoke\nversion: 0.1.0\nkubeVersion: \">=1.33.0-0\"\n",
    )
    .expect("Chart.yaml");
    std::fs::write(
        chart.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n\
         data:\n  kubeVersion: {{ .Capabilities.KubeVersion.Version | quote }}\n",
    )
    .expect("a template");

    cluster::run_ok(
        cluster::helm()
            .args(["install", "smoke"])
            .arg(&chart)
            .args(["-n", &ns, "--wait"]),
    );
    let maps: Api<ConfigMap> = Api::namespaced(client, &ns);
    let cm = maps
        .get("smoke-cm")
        .await
        .expect("helm created the ConfigMap");
    // Helm asked the server for its version: the chart saw the real one.
    let seen = cm.data.unwrap_or_default().remove("kubeVersion");
    assert_eq!(seen.as_deref(), Some(support::kube_version()));
    cluster::run_ok(cluster::helm().args(["uninstall", "smoke", "-n", &ns, "--wait"]));
    assert!(maps.get_opt("smoke-cm").await.expect("a get").is_none());
    std::fs::remove_dir_all(&chart).ok();
}
