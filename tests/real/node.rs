//! The real node itself (issue #28, point 1): Pods run for real beside KWOK's
//! fake ones, cluster DNS answers for headless Services, Pod traffic is
//! confined to the machine, the runtime never pulls, and what `down` removes
//! is what `up` left.
//!
//! Mirrors: the node conformance checks of kubernetes/kubernetes
//! `test/e2e/common/node` (a Pod's log, its IP, DNS for a headless Service).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::api::{Api, PostParams};

use crate::cluster;
use crate::support::{self, NODE_IP, NODE_LABEL, NODE_NAME, POD_PREFIX};

const POD_TIMEOUT: Duration = Duration::from_secs(120);

/// A Pod on the real node runs in a real container: its IP is on the bridge,
/// its containers have runtime IDs and `kubectl logs` (the API server asking
/// the kubelet at the node's IP) returns what it printed. KWOK would fake a
/// Pod as Running with an IP from 10.244/16 and no log at all.
#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn a_pod_on_the_real_node_runs_for_real() {
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "real-pod").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let marker = format!("ran-for-real-{}", cluster::random_suffix());
    let script =
        format!("echo {marker} on $(hostname) uid=$(id -u); cat /proc/1/cgroup | head -n 3");
    pods.create(
        &PostParams::default(),
        &support::busybox_pod("hello", &script),
    )
    .await
    .expect("create the Pod");
    let pod = support::wait_pod_ended(&pods, "hello", POD_TIMEOUT).await;
    let status = pod.status.as_ref().expect("a status");
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(NODE_NAME)
    );
    let ip = status.pod_ip.clone().unwrap_or_default();
    assert!(
        ip.starts_with(POD_PREFIX),
        "Pod IP {ip} is not on the bridge 10.88.0.0/16"
    );
    let container = &status
        .container_statuses
        .as_ref()
        .expect("container statuses")[0];
    let id = container.container_id.clone().unwrap_or_default();
    assert!(
        id.starts_with("containerd://"),
        "container ID {id:?} is not containerd's"
    );
    let log = support::logs(&ns, "hello");
    assert!(
        log.contains(&marker),
        "kubectl logs did not return the Pod's output: {log}"
    );
    // The process ran in the kubelet's cgroup tree (cgroupRoot /tfjob-real-node).
    assert!(
        log.contains("/tfjob-real-node/kubepods"),
        "not in the kubelet's cgroups: {log}"
    );
    cluster::delete_namespace(&client, &ns).await;
}

/// The node carries the label KWOK is told to ignore and the taint that keeps
/// Pods without the toleration (KWOK's fake workloads) off it; the kubelet
/// reports a real runtime.
#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn kwok_and_its_pods_leave_the_real_node_alone() {
    let client = cluster::client().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(NODE_NAME).await.expect("the real node");
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(NODE_LABEL).map(String::as_str), Some("true"));
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == NODE_LABEL && t.effect == "NoSchedule"),
        "no NoSchedule taint {NODE_LABEL}: {taints:?}"
    );
    let info = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.clone())
        .expect("nodeInfo");
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "{info:?}"
    );
    assert!(!info.kubelet_version.contains("kwok"), "{info:?}");
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && a.address == NODE_IP),
        "{addresses:?}"
    );

    // Without the toleration a Pod selecting the node is never scheduled there.
    let ns = cluster::test_namespace(&client, "real-taint").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut pod = support::busybox_pod("untolerated", "true");
    pod.spec.as_mut().expect("spec").tolerations = None;
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the Pod");
    let reason = cluster::wait_until("the scheduler to refuse the Pod", POD_TIMEOUT, || async {
        let pod = pods.get("untolerated").await.ok()?;
        let conditions = pod.status?.conditions?;
        conditions
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message)
    })
    .await;
    assert!(reason.contains("untolerated taint"), "{reason}");
    cluster::delete_namespace(&client, &ns).await;
}

/// Cluster DNS: `<service>.<namespace>.svc` of a headless Service resolves to
/// its Pod's IP (as TF_CONFIG's addresses must), from a Pod on the node;
/// names outside the cluster domain do not resolve (no upstream resolver).
#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn cluster_dns_resolves_headless_services_and_nothing_outside() {
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "real-dns").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    pods.create(
        &PostParams::default(),
        &support::busybox_pod("target", "sleep 300"),
    )
    .await
    .expect("create the target Pod");
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "target" },
        "spec": { "clusterIP": "None", "selector": { "app": "target" }, "ports": [{ "port": 2222 }] }
    }))
    .expect("a valid Service");
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("create the Service");
    let target_ip = cluster::wait_until("the target Pod's IP", POD_TIMEOUT, || async {
        let pod = pods.get("target").await.ok()?;
        let status = pod.status?;
        (status.phase.as_deref() == Some("Running")).then_some(())?;
        status.pod_ip
    })
    .await;
    // busybox's nslookup does not walk the search list, so it asks for the
    // full name; programs using libc's resolver (TensorFlow) write
    // `target.<ns>.svc` and get there through the search list checked below.
    let script = format!(
        "for i in $(seq 30); do nslookup target.{ns}.svc.cluster.local && break; sleep 1; done; \
         grep ^search /etc/resolv.conf; \
         echo ---; nslookup tfjob-operator-outside.example; echo; ip route"
    );
    pods.create(
        &PostParams::default(),
        &support::busybox_pod("client", &script),
    )
    .await
    .expect("create the client Pod");
    support::wait_pod_ended(&pods, "client", POD_TIMEOUT).await;
    let log = support::logs(&ns, "client");
    let (inside, outside) = log.split_once("---").expect("the script's separator");
    assert!(
        inside.contains(&format!("Address: {target_ip}")),
        "target.{ns}.svc.cluster.local did not resolve to {target_ip}: {inside}"
    );
    assert!(
        inside.contains(&format!(
            "search {ns}.svc.cluster.local svc.cluster.local cluster.local"
        )),
        "the Pod's search list does not make target.{ns}.svc resolve: {inside}"
    );
    assert!(
        outside.contains("can't find tfjob-operator-outside.example") && !outside.contains("Name:"),
        "a name outside the cluster domain resolved: {outside}"
    );
    // No default route: only the bridge and the Service range via the node.
    assert!(
        !outside.contains("default"),
        "the Pod has a default route: {outside}"
    );
    assert!(
        outside.contains(&format!("10.0.0.0/24 via {NODE_IP}")),
        "{outside}"
    );
    cluster::delete_namespace(&client, &ns).await;
}

/// The drop rules are in place and first in their chains, read back from
/// iptables (no packet is sent anywhere to check them); CoreDNS has no
/// plugin that could forward a query.
#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn pod_traffic_is_confined_to_the_machine() {
    let out = cluster::run_ok(cluster::harness("e2e/real-node/network.sh").arg("check"));
    assert!(out.contains("confined"), "{out}");
    // The check can fail: its expectations are the rules network.sh installs,
    // and one of them is the catch-all drop for traffic from the bridge.
    let mangle = cluster::run_ok(std::process::Command::new("iptables").args([
        "-t",
        "mangle",
        "-S",
        "TFJOB-RN-PRE",
    ]));
    assert!(
        mangle.contains("-A TFJOB-RN-PRE -i tfjob0 -j DROP"),
        "{mangle}"
    );
    let post = cluster::run_ok(std::process::Command::new("iptables").args([
        "-t",
        "mangle",
        "-S",
        "TFJOB-RN-POST",
    ]));
    assert!(
        post.contains("-A TFJOB-RN-POST -s 10.88.0.0/16 -j DROP"),
        "{post}"
    );
    let coredns = std::path::Path::new(&support::node_env("REAL_NODE_BIN")).join("coredns");
    let plugins = cluster::run_ok(std::process::Command::new(coredns).arg("-plugins"));
    assert!(plugins.contains("kubernetes"), "{plugins}");
    for upstream in ["forward", "grpc", "route53", "clouddns", "azure"] {
        assert!(
            !plugins.lines().any(|l| l.trim() == upstream),
            "CoreDNS is built with {upstream}: {plugins}"
        );
    }
}

/// Every image was imported: containerd's log has no pull (the CRI logs
/// `PullImage` for each one, the sandbox image included).
#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn the_runtime_never_pulls() {
    let log_path = support::node_env("REAL_NODE_CONTAINERD_LOG");
    let log = std::fs::read_to_string(&log_path).unwrap_or_else(|e| panic!("{log_path}: {e}"));
    // The log is the runtime's: the CRI plugin started, so it would have logged pulls.
    assert!(
        log.contains("Start cri plugin"),
        "{log_path} is not the CRI runtime's log"
    );
    let pulls: Vec<&str> = log.lines().filter(|l| l.contains("PullImage")).collect();
    assert!(
        pulls.is_empty(),
        "the runtime pulled images:\n{}",
        pulls.join("\n")
    );
}

/// `node.sh leftovers` (what `down` verifies is empty) sees the running
/// node's processes, bridge, rules and cgroups: the check `down` relies on
/// can fail. `e2e/run-real.sh` checks it is empty after `cluster.sh down`.
#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn the_leftover_check_sees_a_running_node() {
    let out = cluster::run_ok(cluster::harness("e2e/real-node/node.sh").arg("leftovers"));
    for thing in [
        "process kubelet",
        "process containerd",
        "process kube-proxy",
        "process coredns",
        "bridge tfjob0",
        "iptables -t mangle chain TFJOB-RN-PRE",
        "iptables -t nat: KUBE-* chains",
        "cgroup /sys/fs/cgroup/",
    ] {
        assert!(
            out.contains(thing),
            "leftovers does not list {thing:?}:\n{out}"
        );
    }
}
