//! Realistic Pods for the machinery benchmarks (memory, sync, latency).
//!
//! One generator so every benchmark and every peer sees the same objects: a
//! training-job worker Pod with labels, annotations, a controller
//! ownerReference, a container with env/ports/resources, tolerations, and
//! (for the in-memory benchmark) the server-set parts too: uid,
//! resourceVersion, `managedFields` of the creator and the kubelet, a Running
//! status. About 4 KB of JSON each, half of it `managedFields`, as on a real
//! cluster. It must never depend on the operator's own types: peers decode
//! these as plain `k8s_openapi` Pods.
#![allow(dead_code)] // each bench binary uses a different subset

use serde_json::{Value, json};

/// Namespace, labels, annotations, owner and spec: what a client creates.
/// `node` is `spec.nodeName` (`None`: left to the scheduler).
pub fn pod_manifest(ns: &str, i: usize, node: Option<&str>) -> Value {
    let job = format!("mnist-{}", i / 8);
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{job}-worker-{}", i % 8),
            "namespace": ns,
            "labels": {
                "app.kubernetes.io/name": "tfjob-bench",
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/operator-name": "tfjob-controller",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": (i % 8).to_string(),
                "training.kubeflow.org/job-role": if i.is_multiple_of(8) { "master" } else { "worker" },
            },
            "annotations": {
                "bench.tfjob.dev/index": i.to_string(),
            },
            "ownerReferences": [{
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": job,
                "uid": format!("6a1f0c2e-{:04x}-4b7e-9d3a-{:012x}", i / 8 % 0xffff, i / 8),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "kubeflow/tf-mnist-with-summaries:latest",
                    "ports": [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}],
                    "env": [
                        {"name": "TF_CONFIG", "value": format!(
                            "{{\"cluster\":{{\"worker\":[\"{job}-worker-0.{ns}.svc:2222\",\"{job}-worker-1.{ns}.svc:2222\"]}},\"task\":{{\"type\":\"worker\",\"index\":{}}},\"environment\":\"cloud\"}}",
                            i % 8
                        )},
                    ],
                    "resources": {
                        "limits": {"cpu": "2", "memory": "4Gi"},
                        "requests": {"cpu": "1", "memory": "2Gi"},
                    },
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                },
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    pod
}

/// A Pod as a LIST returns it after it ran: server-set metadata,
/// `managedFields` of the creator and the kubelet (KWOK; `nodeName` is set, so
/// no scheduler), and status.
pub fn full_pod(ns: &str, i: usize) -> Value {
    let node = format!("kwok-node-{}", i % 4);
    let mut pod = pod_manifest(ns, i, Some(&node));
    let time = "2026-11-21T10:00:00Z";
    let meta = &mut pod["metadata"];
    meta["uid"] = json!(format!("0b7c2a4e-{:04x}-4f1e-8a2d-{:012x}", i % 0xffff, i));
    meta["resourceVersion"] = json!((100_000 + i).to_string());
    meta["creationTimestamp"] = json!(time);
    meta["managedFields"] = json!([
        {
            "manager": "tfjob-operator", "operation": "Update", "apiVersion": "v1", "time": time,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:annotations": {".": {}, "f:bench.tfjob.dev/index": {}},
                    "f:labels": {".": {}, "f:app.kubernetes.io/name": {}, "f:training.kubeflow.org/job-name": {},
                        "f:training.kubeflow.org/operator-name": {}, "f:training.kubeflow.org/replica-type": {},
                        "f:training.kubeflow.org/replica-index": {}, "f:training.kubeflow.org/job-role": {}},
                    "f:ownerReferences": {".": {}, "k:{\"uid\":\"6a1f0c2e\"}": {}},
                },
                "f:spec": {
                    "f:containers": {
                        "k:{\"name\":\"tensorflow\"}": {".": {}, "f:env": {".": {},
                            "k:{\"name\":\"TF_CONFIG\"}": {".": {}, "f:name": {}, "f:value": {}}},
                            "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                            "f:ports": {".": {}, "k:{\"containerPort\":2222,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                            "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                            "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}},
                    },
                    "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:nodeName": {}, "f:restartPolicy": {},
                    "f:schedulerName": {}, "f:securityContext": {}, "f:serviceAccountName": {},
                    "f:terminationGracePeriodSeconds": {}, "f:tolerations": {},
                },
            },
        },
        {
            "manager": "kwok", "operation": "Update", "apiVersion": "v1", "time": time,
            "fieldsType": "FieldsV1", "subresource": "status",
            "fieldsV1": {
                "f:status": {
                    "f:conditions": {
                        "k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                        "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                        "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                    },
                    "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {},
                    "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.244.0.1\"}": {".": {}, "f:ip": {}}},
                    "f:startTime": {},
                },
            },
        },
    ]);
    let ip = format!("10.244.{}.{}", i / 250 % 256, i % 250 + 1);
    let condition = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": time});
    let running = |name: &str, image: &str| {
        json!({
            "name": name, "image": image, "imageID": "", "ready": true, "restartCount": 0, "started": true,
            "containerID": format!("kwok://{name}-{i}"),
            "state": {"running": {"startedAt": time}}, "lastState": {},
        })
    };
    pod["status"] = json!({
        "phase": "Running",
        "conditions": [condition("Initialized"), condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": time,
        "qosClass": "Burstable",
        "containerStatuses": [
            running("tensorflow", "kubeflow/tf-mnist-with-summaries:latest"),
        ],
    });
    pod
}

/// Reads an environment variable as a number, with a default.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where results go: `<repo>/target/bench/` (gitignored).
pub fn out_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("failed to create target/bench");
    dir
}

/// Waits (up to 60 s) until namespace `ns` has its `default`
/// ServiceAccount: until the controller-manager has made it, the API server
/// refuses every Pod of a new namespace with 403 (the e2e bench's reset
/// waits for it too). On a fresh cluster the sync bench met exactly that.
pub async fn wait_for_default_service_account(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), ns);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while accounts.get_opt("default").await.ok().flatten().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "namespace {ns}: no default ServiceAccount after 60 s (is kube-controller-manager running?)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
