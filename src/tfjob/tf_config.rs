//! `TF_CONFIG`: the cluster layout every TensorFlow process reads.
//!
//! Byte-compatible with Kubeflow's `genTFConfigJSONStr`
//! (`pkg/controller.v1/tensorflow/tensorflow.go`): the same keys, in the same
//! order, with Go's `encoding/json` conventions (map keys sorted, a nil slice
//! written as `null`). Addresses are the per-replica headless Services:
//! `{job}-{type}-{index}.{namespace}.svc[.{cluster domain}]:{port}`.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::ReplicaType;
use crate::api::defaults::JobSpec;

/// The name of a replica's Pod and Service: `{job}-{type}-{index}`.
pub fn replica_name(job: &str, rtype: ReplicaType, index: i32) -> String {
    format!("{job}-{}-{index}", rtype.lower())
}

#[derive(Serialize)]
struct Task<'a> {
    #[serde(rename = "type")]
    type_: &'a str,
    index: i32,
}

#[derive(Serialize)]
struct TfConfig<'a> {
    cluster: BTreeMap<&'a str, Vec<String>>,
    task: Task<'a>,
    environment: &'a str,
}

#[derive(Serialize)]
struct SparseCluster {
    worker: BTreeMap<i32, String>,
    /// `None` (JSON `null`) when a worker's job has no PS, as Go writes a nil slice.
    ps: Option<Vec<String>>,
}

#[derive(Serialize)]
struct SparseTfConfig<'a> {
    cluster: SparseCluster,
    task: Task<'a>,
}

/// Whether the job gets TF_CONFIG at all: Kubeflow leaves it out for a
/// single-replica (local) job (`isDistributed`).
pub fn is_distributed(spec: &JobSpec) -> bool {
    spec.total_replicas() != 1
}

fn cluster(
    job: &str,
    namespace: &str,
    spec: &JobSpec,
    cluster_domain: Option<&str>,
) -> BTreeMap<&'static str, Vec<String>> {
    let suffix = match cluster_domain {
        Some(domain) if !domain.is_empty() => format!("svc.{domain}"),
        _ => "svc".to_owned(),
    };
    spec.replicas
        .iter()
        .map(|(rtype, replica)| {
            let addresses = (0..replica.replicas)
                .map(|i| {
                    format!(
                        "{}.{namespace}.{suffix}:{}",
                        replica_name(job, *rtype, i),
                        replica.port
                    )
                })
                .collect();
            (rtype.lower(), addresses)
        })
        .collect()
}

/// The TF_CONFIG JSON for replica `index` of type `rtype`.
pub fn tf_config(
    job: &str,
    namespace: &str,
    spec: &JobSpec,
    rtype: ReplicaType,
    index: i32,
    cluster_domain: Option<&str>,
) -> String {
    let cluster = cluster(job, namespace, spec, cluster_domain);
    let task = Task {
        type_: rtype.lower(),
        index,
    };
    let json = if spec.enable_dynamic_worker {
        serde_json::to_string(&SparseTfConfig {
            cluster: sparse(&cluster, rtype, index),
            task,
        })
    } else {
        serde_json::to_string(&TfConfig {
            cluster,
            task,
            environment: "cloud",
        })
    };
    // Serialising maps of strings and integers cannot fail.
    json.unwrap_or_default()
}

/// Kubeflow's `convertClusterSpecToSparseClusterSpec`: a PS sees itself; a
/// worker sees itself and every PS; other types see nothing.
fn sparse(cluster: &BTreeMap<&str, Vec<String>>, rtype: ReplicaType, index: i32) -> SparseCluster {
    let own = |t: &str| {
        cluster
            .get(t)
            .and_then(|v| usize::try_from(index).ok().and_then(|i| v.get(i)).cloned())
    };
    match rtype {
        ReplicaType::PS => SparseCluster {
            worker: BTreeMap::new(),
            ps: Some(own("ps").into_iter().collect()),
        },
        ReplicaType::Worker => SparseCluster {
            worker: own("worker").map(|a| (index, a)).into_iter().collect(),
            ps: cluster.get("ps").cloned(),
        },
        _ => SparseCluster {
            worker: BTreeMap::new(),
            ps: Some(Vec::new()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults::normalize;
    use crate::api::fixtures::TfJobFixture;

    fn spec(f: TfJobFixture) -> JobSpec<'static> {
        let job = f.build();
        normalize(job.metadata.name.as_deref().unwrap(), &job.spec)
            .unwrap()
            .into_owned()
    }

    #[test]
    fn matches_kubeflows_string_for_worker_ps_and_evaluator() {
        // The exact string from Kubeflow's pod_test.go (evaluator included).
        let s = spec(
            TfJobFixture::new("test-tfjob")
                .workers(1)
                .ps(1)
                .evaluators(1),
        );
        assert_eq!(
            tf_config("test-tfjob", "ns0", &s, ReplicaType::Worker, 0, None),
            r#"{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns0.svc:2222"],"ps":["test-tfjob-ps-0.ns0.svc:2222"],"worker":["test-tfjob-worker-0.ns0.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}"#
        );
    }

    #[test]
    fn custom_cluster_domain_is_appended_after_svc() {
        let s = spec(TfJobFixture::new("j").workers(2));
        let c = tf_config("j", "ns", &s, ReplicaType::Worker, 1, Some("cluster.local"));
        assert_eq!(
            c,
            r#"{"cluster":{"worker":["j-worker-0.ns.svc.cluster.local:2222","j-worker-1.ns.svc.cluster.local:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#
        );
    }

    #[test]
    fn each_type_uses_its_own_tfjob_port() {
        let mut job = TfJobFixture::new("j").workers(1).build();
        let ps = TfJobFixture::new("j").ps(1).port(3333).build();
        job.spec
            .tf_replica_specs
            .insert("PS".into(), ps.spec.tf_replica_specs["PS"].clone());
        let s = normalize("j", &job.spec).unwrap();
        let c = tf_config("j", "ns", &s, ReplicaType::PS, 0, None);
        assert!(c.contains(r#""ps":["j-ps-0.ns.svc:3333"]"#), "{c}");
        assert!(c.contains(r#""worker":["j-worker-0.ns.svc:2222"]"#), "{c}");
    }

    #[test]
    fn master_is_keyed_master_and_chief_is_keyed_chief() {
        let s = spec(TfJobFixture::new("j").master(1).workers(1));
        let c = tf_config("j", "ns", &s, ReplicaType::Master, 0, None);
        assert!(c.contains(r#""master":["j-master-0.ns.svc:2222"]"#), "{c}");
        assert!(c.contains(r#""task":{"type":"master","index":0}"#), "{c}");
    }

    #[test]
    fn dynamic_worker_sees_itself_and_every_ps() {
        let s = spec(TfJobFixture::new("j").workers(3).ps(2).dynamic_worker(true));
        assert_eq!(
            tf_config("j", "ns", &s, ReplicaType::Worker, 2, None),
            r#"{"cluster":{"worker":{"2":"j-worker-2.ns.svc:2222"},"ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"]},"task":{"type":"worker","index":2}}"#
        );
    }

    #[test]
    fn dynamic_ps_sees_only_itself() {
        let s = spec(TfJobFixture::new("j").workers(3).ps(2).dynamic_worker(true));
        assert_eq!(
            tf_config("j", "ns", &s, ReplicaType::PS, 1, None),
            r#"{"cluster":{"worker":{},"ps":["j-ps-1.ns.svc:2222"]},"task":{"type":"ps","index":1}}"#
        );
    }

    #[test]
    fn dynamic_worker_without_ps_writes_null_like_go() {
        let s = spec(TfJobFixture::new("j").workers(2).dynamic_worker(true));
        let c = tf_config("j", "ns", &s, ReplicaType::Worker, 0, None);
        assert!(c.contains(r#""ps":null"#), "{c}");
    }

    #[test]
    fn a_single_replica_job_is_not_distributed() {
        assert!(!is_distributed(&spec(TfJobFixture::new("j").workers(1))));
        assert!(is_distributed(&spec(TfJobFixture::new("j").workers(2))));
        assert!(is_distributed(&spec(
            TfJobFixture::new("j").chief(1).workers(1)
        )));
    }
}
