//! Protobuf lists and watches decode to exactly what JSON decodes to.
//!
//! The informers of built-in kinds read protobuf (`runtime::client::protobuf`): the
//! decoder presents protobuf bytes to k8s-openapi's types as if they were
//! JSON, guided by tables generated from the Go types. These tests hold it
//! to the only standard that matters — the real API server's JSON for the
//! same objects — on objects that use every special encoding: times and
//! micro-times, quantities, int-or-string, inline fields (volume sources,
//! probe handlers), maps, `[]byte` (base64 in JSON), embedded raw JSON
//! (managedFields), omitted zeros, enums of strings.
//!
//! What these tests must never do: compare protobuf against itself, or
//! against hand-written expectations of the server's output.
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, Namespace, Node, Pod, Secret, Service,
};
use kube::api::{Api, ListParams, PostParams, WatchParams};
use kube::core::WatchEvent;
use serde_json::json;
use tfjob_operator::runtime::cache::object::Object;
use tfjob_operator::runtime::cache::reflector::list_watch::{ApiListWatch, ListWatch};
use tfjob_operator::runtime::cache::reflector::raw::RawObject;

use crate::cluster;
use crate::support;

fn decode<K: Object>(raw: &RawObject) -> K {
    raw.decode::<K>(false)
        .unwrap_or_else(|e| panic!("failed to decode a {}: {e}", K::kind(&())))
}

/// Lists `K` in `namespace` (or everywhere) both ways; asserts the protobuf
/// path was taken and both decode to the same objects. Returns how many.
async fn assert_lists_agree<K: Object + PartialEq>(
    client: &kube::Client,
    namespace: Option<&str>,
) -> usize {
    let proto = ApiListWatch::new::<K>(client.clone(), namespace);
    assert!(
        proto.uses_protobuf(),
        "{} should list in protobuf",
        K::kind(&())
    );
    let json = proto.clone().json();
    let params = ListParams::default();
    let p = proto.list(&params).await.expect("a protobuf list");
    let j = json.list(&params).await.expect("a JSON list");
    assert!(
        p.items
            .iter()
            .all(|i| matches!(i, RawObject::Protobuf { .. })),
        "the server answered {} in protobuf",
        K::kind(&())
    );
    // Keyed by uid and resourceVersion: a cluster-wide list may race with
    // other tests' writes between the two calls; the same version of an
    // object must decode the same either way.
    let by_version = |items: &[RawObject]| -> std::collections::BTreeMap<(String, String), K> {
        items
            .iter()
            .map(decode::<K>)
            .map(|o| {
                (
                    (
                        o.meta().uid.clone().unwrap_or_default(),
                        o.meta().resource_version.clone().unwrap_or_default(),
                    ),
                    o,
                )
            })
            .collect()
    };
    let (p_items, j_items) = (by_version(&p.items), by_version(&j.items));
    if namespace.is_some() {
        assert_eq!(p_items.len(), j_items.len(), "{}: item count", K::kind(&()));
    }
    let mut compared = 0;
    for (version, a) in &p_items {
        if let Some(b) = j_items.get(version) {
            assert_same(a, b);
            compared += 1;
        }
    }
    // What informers do by default: managedFields skipped while decoding.
    for raw in &p.items {
        let stripped: K = raw.decode(true).expect("decodes without managedFields");
        let meta = stripped.meta();
        let version = (
            meta.uid.clone().unwrap_or_default(),
            meta.resource_version.clone().unwrap_or_default(),
        );
        if let Some(b) = j_items.get(&version) {
            let mut b = b.clone();
            b.meta_mut().managed_fields = None;
            assert_same(&stripped, &b);
        }
    }
    assert!(
        compared * 10 >= p_items.len() * 9,
        "{}: only {compared} of {} versions in both lists",
        K::kind(&()),
        p_items.len()
    );
    compared
}

/// Equal, or a readable diff of the two objects' JSON.
fn assert_same<K: Object + PartialEq>(from_protobuf: &K, from_json: &K) {
    if from_protobuf != from_json {
        let show = |o: &K| format!("{o:#?}");
        let (a, b) = (show(from_protobuf), show(from_json));
        let diff: Vec<String> = a
            .lines()
            .zip(b.lines())
            .filter(|(x, y)| x != y)
            .take(10)
            .map(|(x, y)| format!("protobuf: {x}\n    json: {y}"))
            .collect();
        panic!("{} decodes differently:\n{}", K::kind(&()), diff.join("\n"));
    }
}

fn rich_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app": "proto", "tier": "test"},
            "annotations": {"note": "ünïcode ✓", "empty": ""},
            "finalizers": ["example.com/keep"],
        },
        "spec": {
            "nodeName": "kwok-node-0",
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 600,
            "terminationGracePeriodSeconds": 5,
            "hostNetwork": false,
            "automountServiceAccountToken": false,
            "priority": 0,
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "k", "operator": "Equal", "value": "v", "tolerationSeconds": 30, "effect": "NoExecute"}
            ],
            "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}}
            ]}},
            "securityContext": {"runAsUser": 1000, "runAsNonRoot": true, "fsGroup": 0, "sysctls": [{"name": "net.ipv4.ip_forward", "value": "0"}]},
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi", "medium": ""}},
                {"name": "config", "configMap": {"name": "cm", "defaultMode": 420, "optional": true, "items": [{"key": "a", "path": "a.txt", "mode": 256}]}},
                {"name": "proj", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}, {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}
            ],
            "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
            "containers": [{
                "name": "tensorflow",
                "image": "tensorflow/tensorflow:2.16.1",
                "args": ["--epochs", "3", ""],
                "ports": [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}, {"containerPort": 8080, "hostPort": 0}],
                "env": [
                    {"name": "TF_CONFIG", "value": "{\"cluster\":{\"worker\":[\"w-0:2222\"]},\"task\":{\"type\":\"worker\",\"index\":0}}"},
                    {"name": "EMPTY", "value": ""},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}
                ],
                "resources": {
                    "requests": {"cpu": "250m", "memory": "64Mi", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": "1.5", "memory": "1G", "nvidia.com/gpu": "1"}
                },
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "tfjob-port", "scheme": "HTTP", "httpHeaders": [{"name": "X", "value": "y"}]}, "initialDelaySeconds": 0, "periodSeconds": 7},
                "readinessProbe": {"tcpSocket": {"port": 2222}, "failureThreshold": 2},
                "startupProbe": {"exec": {"command": ["cat", "/tmp/ok"]}},
                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
                "securityContext": {"privileged": false, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true},
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": false}, {"name": "config", "mountPath": "/config", "readOnly": true, "subPath": "a.txt"}]
            }]
        }
    }))
    .expect("a valid Pod")
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn protobuf_lists_decode_exactly_like_json() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "proto").await;
    let pp = PostParams::default();

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for i in 0..3 {
        pods.create(&pp, &rich_pod(&format!("rich-{i}")))
            .await
            .expect("create a Pod");
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    for svc in [
        json!({"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "selector": {"app": "proto"},
            "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}], "publishNotReadyAddresses": true}}),
        json!({"metadata": {"name": "named-port"}, "spec": {"type": "NodePort", "selector": {"app": "proto"},
            "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
            "ports": [{"name": "http", "port": 80, "targetPort": "tfjob-port", "protocol": "TCP"}, {"name": "udp", "port": 53, "protocol": "UDP"}]}}),
    ] {
        let svc: Service = serde_json::from_value(svc).expect("a valid Service");
        services.create(&pp, &svc).await.expect("create a Service");
    }
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "cm"},
        "data": {"a": "1", "empty": "", "multi": "line\nline"}, "binaryData": {"bin": "AAECAwT/"}, "immutable": false}))
    .expect("a valid ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&pp, &cm)
        .await
        .expect("create a ConfigMap");
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "type": "Opaque",
        "data": {"k": "c2VjcmV0", "zero": ""}, "stringData": {"plain": "text"}}))
        .expect("a valid Secret");
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&pp, &secret)
        .await
        .expect("create a Secret");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "me",
        "leaseDurationSeconds": 15, "acquireTime": "2026-11-22T04:36:05.123456Z", "renewTime": "2026-11-22T04:36:06.000001Z", "leaseTransitions": 0}}))
    .expect("a valid Lease");
    Api::<Lease>::namespaced(client.clone(), &ns)
        .create(&pp, &lease)
        .await
        .expect("create a Lease");
    let event: Event = serde_json::from_value(json!({"metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "rich-0", "namespace": ns, "apiVersion": "v1"},
        "reason": "Test", "message": "a message", "type": "Normal", "count": 3,
        "firstTimestamp": "2026-11-22T04:00:00Z", "lastTimestamp": "2026-11-22T04:01:00Z",
        "eventTime": "2026-11-22T04:01:00.654321Z", "action": "Testing", "reportingComponent": "e2e", "reportingInstance": "e2e-1",
        "source": {"component": "e2e"}, "series": {"count": 2, "lastObservedTime": "2026-11-22T04:01:00.000002Z"}}))
    .expect("a valid Event");
    Api::<Event>::namespaced(client.clone(), &ns)
        .create(&pp, &event)
        .await
        .expect("create an Event");

    assert_eq!(assert_lists_agree::<Pod>(&client, Some(&ns)).await, 3);
    assert_eq!(assert_lists_agree::<Service>(&client, Some(&ns)).await, 2);
    assert!(assert_lists_agree::<ConfigMap>(&client, Some(&ns)).await >= 1);
    assert!(assert_lists_agree::<Secret>(&client, Some(&ns)).await >= 1);
    assert_eq!(assert_lists_agree::<Lease>(&client, Some(&ns)).await, 1);
    assert!(assert_lists_agree::<Event>(&client, Some(&ns)).await >= 1);
    // Cluster-wide, objects other components wrote (KWOK's node and pod
    // statuses, the controller-manager's, the API server's own).
    assert!(assert_lists_agree::<Node>(&client, None).await >= 1);
    assert!(assert_lists_agree::<Namespace>(&client, None).await >= 1);
    assert!(assert_lists_agree::<Pod>(&client, None).await >= 3);
    assert!(assert_lists_agree::<Endpoints>(&client, None).await >= 1);
    assert!(assert_lists_agree::<Event>(&client, None).await >= 1);
    cluster::delete_namespace(&client, &ns).await;
}

/// The first `n` events of a watch from `rv`, decoded.
async fn first_events<K: Object>(lw: &ApiListWatch, rv: &str, n: usize) -> Vec<(String, K)> {
    let mut stream = lw
        .watch(&WatchParams::default().timeout(30), rv)
        .await
        .expect("a watch");
    let mut out = Vec::new();
    while out.len() < n {
        match stream.next().await {
            Some(Ok(WatchEvent::Added(o))) => out.push(("ADDED".to_owned(), decode(&o))),
            Some(Ok(WatchEvent::Modified(o))) => out.push(("MODIFIED".to_owned(), decode(&o))),
            Some(Ok(WatchEvent::Deleted(o))) => out.push(("DELETED".to_owned(), decode(&o))),
            Some(Ok(_)) => {}
            other => panic!("the watch ended early: {other:?}"),
        }
    }
    out
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn protobuf_watch_events_decode_exactly_like_json() {
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "proto-watch").await;
    let lw = ApiListWatch::new::<Pod>(client.clone(), Some(&ns));
    let start = lw
        .list(&ListParams::default())
        .await
        .expect("a list")
        .resource_version;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &rich_pod("w"))
        .await
        .expect("create");
    pods.patch(
        "w",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"labels": {"more": "x"}}})),
    )
    .await
    .expect("patch");
    pods.delete("w", &Default::default()).await.expect("delete");
    // create, patch, the deletion (graceful: MODIFIED with deletionTimestamp,
    // then DELETED once the finalizer is gone) — compare the first three.
    let proto: Vec<(String, Pod)> = first_events(&lw, &start, 3).await;
    let json: Vec<(String, Pod)> = first_events(&lw.clone().json(), &start, 3).await;
    for ((pt, po), (jt, jo)) in proto.iter().zip(&json) {
        assert_eq!(pt, jt);
        assert_same(po, jo);
    }
    assert_eq!(proto[0].0, "ADDED");
    // An error answer to a protobuf request is still the server's Status.
    let bad = WatchParams::default().labels("a in (");
    match lw.watch(&bad, &start).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (400, "BadRequest"),
                "{status:?}"
            );
            assert!(
                status.message.contains("unable to parse requirement"),
                "{status:?}"
            );
        }
        Err(e) => panic!("expected 400 BadRequest, got {e}"),
        Ok(_) => panic!("expected 400 BadRequest, got a watch"),
    }
    pods.patch(
        "w",
        &Default::default(),
        &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("drop the finalizer");
    cluster::delete_namespace(&client, &ns).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_server_answering_json_to_a_protobuf_request_is_read_as_json() {
    use tfjob_operator::api::types::TFJob;
    use tfjob_operator::runtime::client::protobuf::schema::{Message, ProtobufKind};
    let _guard = support::shared_cluster().await;
    let client = cluster::client().await;
    let ns = cluster::test_namespace(&client, "proto-json").await;
    // Custom resources exist only in JSON: asked for protobuf, the server
    // answers JSON, and both the list and the watch must still read it.
    let table: &'static Message = <Pod as ProtobufKind>::MESSAGE;
    let lw = ApiListWatch::new::<TFJob>(client.clone(), Some(&ns)).with_protobuf_table(table);
    let tfjob: TFJob = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "j"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1"}]}}}}}
    }))
    .expect("a valid TFJob");
    let api: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &tfjob)
        .await
        .expect("create a TFJob");
    let list = lw.list(&ListParams::default()).await.expect("a list");
    assert_eq!(list.items.len(), 1);
    assert!(list.items[0].json().is_some(), "the list came as JSON");
    let listed: TFJob = decode(&list.items[0]);
    assert_eq!(listed.metadata.name.as_deref(), Some("j"));
    let events: Vec<(String, TFJob)> = first_events(&lw, "0", 1).await;
    assert_eq!(events[0].0, "ADDED");
    assert_eq!(events[0].1.metadata.name.as_deref(), Some("j"));
    cluster::delete_namespace(&client, &ns).await;
}
