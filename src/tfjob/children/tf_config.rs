//! `TF_CONFIG`: the cluster layout every TensorFlow process reads.
//!
//! Byte-compatible with Kubeflow's `genTFConfigJSONStr`
//! (`pkg/controller.v1/tensorflow/tensorflow.go`): the same keys, in the same
//! order, with Go's `encoding/json` conventions (map keys sorted, a nil slice
//! written as `null`). Addresses are the per-replica headless Services:
//! `{job}-{type}-{index}.{namespace}.svc[.{cluster domain}]:{port}`.
//!
//! A job's TF_CONFIGs all list the same cluster: every replica's address.
//! For N replicas that is N addresses in each of N Pods, so the cluster is
//! serialised once per job ([`cluster_json`]) and each replica's TF_CONFIG
//! is that text plus its own task ([`with_cluster`]): one copy per Pod, not
//! N formats and a fresh serialisation.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::constants::ReplicaType;
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

/// Where a job's replicas are reached.
struct Addresses<'a> {
    job: &'a str,
    namespace: &'a str,
    spec: &'a JobSpec<'a>,
    /// `svc`, or `svc.{cluster domain}`.
    suffix: String,
}

impl<'a> Addresses<'a> {
    fn new(
        job: &'a str,
        namespace: &'a str,
        spec: &'a JobSpec<'a>,
        cluster_domain: Option<&str>,
    ) -> Self {
        let suffix = match cluster_domain {
            Some(domain) if !domain.is_empty() => format!("svc.{domain}"),
            _ => "svc".to_owned(),
        };
        Self {
            job,
            namespace,
            spec,
            suffix,
        }
    }

    /// Replica `index` of `rtype`, if the spec has that type and index.
    fn one(&self, rtype: ReplicaType, index: i32) -> Option<String> {
        let replica = self.spec.replicas.get(&rtype)?;
        (0..replica.replicas).contains(&index).then(|| {
            format!(
                "{}.{}.{}:{}",
                replica_name(self.job, rtype, index),
                self.namespace,
                self.suffix,
                replica.port
            )
        })
    }

    /// Every replica of `rtype`, or `None` if the spec has no such type.
    fn all(&self, rtype: ReplicaType) -> Option<Vec<String>> {
        let replica = self.spec.replicas.get(&rtype)?;
        Some(
            (0..replica.replicas)
                .filter_map(|i| self.one(rtype, i))
                .collect(),
        )
    }
}

/// The `cluster` of a job's TF_CONFIG, serialised: each replica type (in
/// lower case, sorted) with the address of each of its replicas.
pub fn cluster_json(
    job: &str,
    namespace: &str,
    spec: &JobSpec,
    cluster_domain: Option<&str>,
) -> String {
    let addresses = Addresses::new(job, namespace, spec, cluster_domain);
    let cluster: BTreeMap<&str, Vec<String>> = spec
        .replicas
        .keys()
        .filter_map(|&rtype| Some((rtype.lower(), addresses.all(rtype)?)))
        .collect();
    // Serialising maps of strings cannot fail.
    serde_json::to_string(&cluster).unwrap_or_default()
}

/// The TF_CONFIG of replica `index` of `rtype`, given the job's cluster as
/// [`cluster_json`] serialised it: exactly what serialising
/// `{"cluster": …, "task": …, "environment": "cloud"}` in one go writes.
pub fn with_cluster(cluster_json: &str, rtype: ReplicaType, index: i32) -> String {
    let task = Task {
        type_: rtype.lower(),
        index,
    };
    // Serialising a string and an integer cannot fail.
    let task = serde_json::to_string(&task).unwrap_or_default();
    let mut out = String::with_capacity(cluster_json.len() + task.len() + 48);
    out.push_str(r#"{"cluster":"#);
    out.push_str(cluster_json);
    out.push_str(r#","task":"#);
    out.push_str(&task);
    out.push_str(r#","environment":"cloud"}"#);
    out
}

/// The TF_CONFIG JSON for replica `index` of type `rtype` (a job with many
/// Pods builds [`cluster_json`] once and calls [`with_cluster`] per Pod;
/// `ChildContext` does).
pub fn tf_config(
    job: &str,
    namespace: &str,
    spec: &JobSpec,
    rtype: ReplicaType,
    index: i32,
    cluster_domain: Option<&str>,
) -> String {
    if spec.enable_dynamic_worker {
        let addresses = Addresses::new(job, namespace, spec, cluster_domain);
        sparse(&addresses, rtype, index)
    } else {
        let cluster = cluster_json(job, namespace, spec, cluster_domain);
        with_cluster(&cluster, rtype, index)
    }
}

/// The TF_CONFIG of a job with `enableDynamicWorker`, Kubeflow's
/// `convertClusterSpecToSparseClusterSpec`: a PS sees itself; a worker sees
/// itself and every PS; other types see nothing. Only those addresses are
/// built, so there is nothing to share between Pods.
fn sparse(addresses: &Addresses, rtype: ReplicaType, index: i32) -> String {
    let cluster = match rtype {
        ReplicaType::PS => SparseCluster {
            worker: BTreeMap::new(),
            ps: Some(addresses.one(ReplicaType::PS, index).into_iter().collect()),
        },
        ReplicaType::Worker => SparseCluster {
            worker: addresses
                .one(ReplicaType::Worker, index)
                .map(|a| (index, a))
                .into_iter()
                .collect(),
            ps: addresses.all(ReplicaType::PS),
        },
        _ => SparseCluster {
            worker: BTreeMap::new(),
            ps: Some(Vec::new()),
        },
    };
    let task = Task {
        type_: rtype.lower(),
        index,
    };
    // Serialising maps of strings and integers cannot fail.
    serde_json::to_string(&SparseTfConfig { cluster, task }).unwrap_or_default()
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
    fn the_cluster_serialised_once_gives_what_one_serialisation_gives() {
        #[derive(Serialize)]
        struct Whole<'a> {
            cluster: BTreeMap<&'a str, Vec<String>>,
            task: Task<'a>,
            environment: &'a str,
        }
        let s = spec(TfJobFixture::new("j").chief(1).workers(3).ps(2));
        let cluster = cluster_json("j", "ns", &s, None);
        let parsed: BTreeMap<&str, Vec<String>> = serde_json::from_str(&cluster).unwrap();
        for (rtype, index) in [(ReplicaType::Chief, 0), (ReplicaType::Worker, 2)] {
            let whole = Whole {
                cluster: parsed.clone(),
                task: Task {
                    type_: rtype.lower(),
                    index,
                },
                environment: "cloud",
            };
            assert_eq!(
                with_cluster(&cluster, rtype, index),
                serde_json::to_string(&whole).unwrap()
            );
        }
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
