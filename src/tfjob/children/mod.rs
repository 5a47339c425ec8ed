//! Building a replica's Pod and headless Service from the job (pure).
//!
//! Kubeflow's `createNewPod` / `CreateNewService`
//! (`pkg/controller.v1/common/{pod,service}.go`): the same names, labels,
//! ownerReference and restart-policy mapping, so Kubeflow's tools (the Python
//! SDK's `get_job_pods`) find our children.
pub mod cached;
pub mod creation_events;
pub mod index_set;
pub mod placement;
pub mod scheduling_group;
pub mod tf_config;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{EnvVar, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::ObjectMeta;

use crate::api::constants::ReplicaType;
use crate::api::constants::{
    JOB_ROLE_MASTER, LABEL_JOB_NAME, LABEL_JOB_ROLE, LABEL_OPERATOR_NAME, LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE, OPERATOR_NAME, TF_CONFIG_ENV,
};
use crate::api::defaults::{JobSpec, tensorflow_container_index};
use crate::api::types::{RestartPolicy, TFJob};

use crate::tfjob::children::tf_config::{
    cluster_json, is_distributed, replica_name, tf_config, with_cluster,
};

/// The labels a job's children must carry to be claimed by it (Kubeflow's
/// selector): the job name *and* our operator name, so another operator's
/// Pods that happen to carry a job-name label are never adopted.
pub fn child_selector(job: &str) -> BTreeMap<String, String> {
    [
        (LABEL_JOB_NAME.to_owned(), job.to_owned()),
        (LABEL_OPERATOR_NAME.to_owned(), OPERATOR_NAME.to_owned()),
    ]
    .into()
}

/// The labels that select one replica's Pod (and are its Service's selector).
pub fn replica_labels(job: &str, rtype: ReplicaType, index: i32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_OPERATOR_NAME.to_owned(), OPERATOR_NAME.to_owned()),
        (LABEL_JOB_NAME.to_owned(), job.to_owned()),
        (LABEL_REPLICA_TYPE.to_owned(), rtype.lower().to_owned()),
        (LABEL_REPLICA_INDEX.to_owned(), index.to_string()),
    ])
}

/// Whether replica `index` of `rtype` is the job's master: the Chief/Master,
/// or worker 0 when the job has neither (Kubeflow's `IsMasterRole`).
pub fn is_master_role(spec: &JobSpec, rtype: ReplicaType, index: i32) -> bool {
    match spec.chief_type() {
        Some(_) => rtype.is_chief(),
        None => rtype == ReplicaType::Worker && index == 0,
    }
}

/// The controller ownerReference every child carries, so garbage collection
/// deletes it with the job and our informers map it back to the job.
pub fn owner_reference(job: &TFJob) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: TFJob::api_version(&()).into_owned(),
        kind: TFJob::kind(&()).into_owned(),
        name: job.metadata.name.clone()?,
        uid: job.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// Where a child is built from: the job, its defaulted spec and options.
pub struct ChildContext<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub spec: &'a JobSpec<'a>,
    pub owner: &'a OwnerReference,
    /// Appended to `.svc` in TF_CONFIG addresses (`CUSTOM_CLUSTER_DOMAIN`).
    pub cluster_domain: Option<&'a str>,
    /// The cluster every replica's TF_CONFIG lists, serialised on the first
    /// Pod built and copied into the rest (see `crate::tfjob::children::tf_config`).
    tf_cluster: OnceLock<String>,
}

impl<'a> ChildContext<'a> {
    pub fn new(
        name: &'a str,
        namespace: &'a str,
        spec: &'a JobSpec<'a>,
        owner: &'a OwnerReference,
        cluster_domain: Option<&'a str>,
    ) -> Self {
        Self {
            name,
            namespace,
            spec,
            owner,
            cluster_domain,
            tf_cluster: OnceLock::new(),
        }
    }

    /// The TF_CONFIG of replica `index` of `rtype`.
    fn tf_config(&self, rtype: ReplicaType, index: i32) -> String {
        let (name, namespace, domain) = (self.name, self.namespace, self.cluster_domain);
        if self.spec.enable_dynamic_worker {
            // Each Pod lists only itself and the PSs: nothing to share.
            return tf_config(name, namespace, self.spec, rtype, index, domain);
        }
        let cluster = self
            .tf_cluster
            .get_or_init(|| cluster_json(name, namespace, self.spec, domain));
        with_cluster(cluster, rtype, index)
    }

    /// Whether [`Self::pod`] builds a Pod for `rtype`: the type is in the
    /// spec and its template has a Pod spec. The plan asks before it plans a
    /// create, since the Pod itself is built only when the create is sent.
    pub fn can_build_pod(&self, rtype: ReplicaType) -> bool {
        self.spec
            .replicas
            .get(&rtype)
            .is_some_and(|r| r.template.spec.is_some())
    }

    /// The Pod of replica `index` of `rtype`, or `None` when
    /// [`Self::can_build_pod`] says no.
    pub fn pod(&self, rtype: ReplicaType, index: i32) -> Option<Pod> {
        let replica = self.spec.replicas.get(&rtype)?;
        let template = &replica.template;
        let mut labels = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        labels.extend(replica_labels(self.name, rtype, index));
        if is_master_role(self.spec, rtype, index) {
            labels.insert(LABEL_JOB_ROLE.into(), JOB_ROLE_MASTER.into());
        }
        let mut pod_spec = template.spec.clone()?;
        // ExitCode is not a Pod restart policy: the operator restarts by
        // re-creating the Pod, so the kubelet must not restart it in place.
        pod_spec.restart_policy = Some(
            match replica.restart_policy {
                RestartPolicy::Always => "Always",
                RestartPolicy::OnFailure => "OnFailure",
                // `Invalid` never gets here: `normalize` refuses it.
                RestartPolicy::Never | RestartPolicy::ExitCode | RestartPolicy::Invalid => "Never",
            }
            .to_owned(),
        );
        if is_distributed(self.spec) {
            let config = self.tf_config(rtype, index);
            if let Some(i) = tensorflow_container_index(template) {
                let env = pod_spec.containers[i].env.get_or_insert_with(Vec::new);
                env.push(EnvVar {
                    name: TF_CONFIG_ENV.into(),
                    value: Some(config),
                    value_from: None,
                });
            }
        }
        Some(Pod {
            metadata: ObjectMeta {
                name: Some(replica_name(self.name, rtype, index)),
                namespace: Some(self.namespace.to_owned()),
                labels: Some(labels),
                annotations: template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.annotations.clone()),
                // Kubeflow copies the template's metadata whole; finalizers
                // matter to tools that hold a Pod back (e.g. log shippers).
                finalizers: template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.finalizers.clone()),
                owner_references: Some(vec![self.owner.clone()]),
                ..ObjectMeta::default()
            },
            spec: Some(pod_spec),
            status: None,
        })
    }

    /// The headless Service of replica `index` of `rtype`: it gives the Pod
    /// the stable DNS name TF_CONFIG uses.
    pub fn service(&self, rtype: ReplicaType, index: i32) -> Option<Service> {
        let replica = self.spec.replicas.get(&rtype)?;
        let container = tensorflow_container_index(&replica.template)
            .and_then(|i| replica.template.spec.as_ref()?.containers.get(i))?;
        let ports = container
            .ports
            .iter()
            .flatten()
            .map(|p| ServicePort {
                name: p.name.clone(),
                port: p.container_port,
                ..ServicePort::default()
            })
            .collect();
        let labels = replica_labels(self.name, rtype, index);
        Some(Service {
            metadata: ObjectMeta {
                name: Some(replica_name(self.name, rtype, index)),
                namespace: Some(self.namespace.to_owned()),
                labels: Some(labels.clone()),
                owner_references: Some(vec![self.owner.clone()]),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                selector: Some(labels),
                ports: Some(ports),
                ..ServiceSpec::default()
            }),
            status: None,
        })
    }
}

/// Reads a child's replica type and index from its labels.
pub fn replica_of(meta: &ObjectMeta) -> Option<(ReplicaType, i32)> {
    let labels = meta.labels.as_ref()?;
    let rtype = ReplicaType::parse(labels.get(LABEL_REPLICA_TYPE)?)?;
    let index = labels.get(LABEL_REPLICA_INDEX)?.parse().ok()?;
    Some((rtype, index))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults::normalize;
    use crate::api::fixtures::TfJobFixture;

    fn with_ctx<T>(job: TFJob, f: impl FnOnce(&ChildContext<'_>) -> T) -> T {
        let spec = normalize("mnist", &job.spec).unwrap();
        let owner = owner_reference(&job).unwrap();
        f(&ChildContext::new("mnist", "default", &spec, &owner, None))
    }

    fn job() -> TFJob {
        TfJobFixture::new("mnist")
            .chief(1)
            .workers(2)
            .ps(1)
            .restart_policy(RestartPolicy::ExitCode)
            .uid("uid-1")
            .build()
    }

    #[test]
    fn pod_has_kubeflows_name_labels_and_controller_owner() {
        let pod = with_ctx(job(), |c| c.pod(ReplicaType::Worker, 1)).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("mnist-worker-1"));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels["training.kubeflow.org/job-name"], "mnist");
        assert_eq!(labels["training.kubeflow.org/replica-type"], "worker");
        assert_eq!(labels["training.kubeflow.org/replica-index"], "1");
        assert_eq!(
            labels["training.kubeflow.org/operator-name"],
            "tfjob-controller"
        );
        assert_eq!(labels["app"], "tf", "template labels are kept");
        assert!(!labels.contains_key("training.kubeflow.org/job-role"));
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("TFJob", "uid-1")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    #[test]
    fn only_orphans_with_our_operator_label_are_adopted() {
        use crate::runtime::controller::ownership::claim;
        let orphan = |labels: &[(&str, &str)]| {
            let mut pod = Pod::default();
            pod.metadata.name = Some("mnist-worker-0".into());
            pod.metadata.labels = Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            );
            std::sync::Arc::new(pod)
        };
        let ours = orphan(&[
            (LABEL_JOB_NAME, "mnist"),
            (LABEL_OPERATOR_NAME, OPERATOR_NAME),
        ]);
        let foreign = orphan(&[(LABEL_JOB_NAME, "mnist")]);
        let claimed = claim("uid-1", &child_selector("mnist"), [ours, foreign]);
        assert_eq!(claimed.adopt.len(), 1);
        assert_eq!(
            claimed.adopt[0].metadata.labels.as_ref().unwrap()[LABEL_OPERATOR_NAME],
            OPERATOR_NAME
        );
    }

    #[test]
    fn pod_keeps_the_templates_labels_annotations_and_finalizers() {
        let mut job = job();
        let meta = job
            .spec
            .tf_replica_specs
            .get_mut("Worker")
            .unwrap()
            .template
            .metadata
            .get_or_insert_with(Default::default);
        meta.labels = Some([("team".to_owned(), "ml".to_owned())].into());
        meta.annotations = Some([("note".to_owned(), "x".to_owned())].into());
        meta.finalizers = Some(vec!["example.com/keep-logs".to_owned()]);
        let spec = normalize("mnist", &job.spec).unwrap();
        let owner = owner_reference(&job).unwrap();
        let ctx = ChildContext::new("mnist", "default", &spec, &owner, None);
        let pod = ctx.pod(ReplicaType::Worker, 0).unwrap();
        assert_eq!(pod.metadata.labels.unwrap()["team"], "ml");
        assert_eq!(pod.metadata.annotations.unwrap()["note"], "x");
        assert_eq!(
            pod.metadata.finalizers.unwrap(),
            ["example.com/keep-logs".to_owned()]
        );
    }

    #[test]
    fn chief_gets_the_master_role_and_exit_code_becomes_never() {
        let pod = with_ctx(job(), |c| c.pod(ReplicaType::Chief, 0)).unwrap();
        assert_eq!(
            pod.metadata.labels.unwrap()["training.kubeflow.org/job-role"],
            "master"
        );
        assert_eq!(pod.spec.unwrap().restart_policy.as_deref(), Some("Never"));
    }

    #[test]
    fn worker_zero_is_master_only_without_a_chief() {
        let j = TfJobFixture::new("mnist").workers(2).uid("u").build();
        let spec = normalize("mnist", &j.spec).unwrap();
        assert!(is_master_role(&spec, ReplicaType::Worker, 0));
        assert!(!is_master_role(&spec, ReplicaType::Worker, 1));
    }

    #[test]
    fn tf_config_goes_to_the_tensorflow_container() {
        let pod = with_ctx(job(), |c| c.pod(ReplicaType::PS, 0)).unwrap();
        let env = pod.spec.unwrap().containers[0].env.clone().unwrap();
        assert_eq!(env[0].name, "TF_CONFIG");
        assert!(
            env[0]
                .value
                .as_deref()
                .unwrap()
                .contains(r#""task":{"type":"ps","index":0}"#)
        );
    }

    #[test]
    fn every_pods_tf_config_from_the_shared_cluster_is_the_one_built_alone() {
        for dynamic in [false, true] {
            let j = TfJobFixture::new("mnist")
                .chief(1)
                .workers(3)
                .ps(2)
                .evaluators(1)
                .dynamic_worker(dynamic)
                .uid("u")
                .build();
            let spec = normalize("mnist", &j.spec).unwrap();
            let owner = owner_reference(&j).unwrap();
            let domain = Some("cluster.local");
            let ctx = ChildContext::new("mnist", "ns", &spec, &owner, domain);
            for (&rtype, replica) in &spec.replicas {
                for i in 0..replica.replicas {
                    let env = ctx.pod(rtype, i).unwrap().spec.unwrap().containers[0]
                        .env
                        .clone()
                        .unwrap();
                    let alone = tf_config("mnist", "ns", &spec, rtype, i, domain);
                    assert_eq!(
                        env[0].value.as_deref(),
                        Some(alone.as_str()),
                        "{rtype:?} {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_template_without_a_pod_spec_builds_no_pod_and_says_so_first() {
        // `normalize` refuses such a template; the check is for a spec
        // that reached the builder some other way.
        let j = job();
        let mut spec = normalize("mnist", &j.spec).unwrap();
        if let Some(w) = spec.replicas.get_mut(&ReplicaType::Worker) {
            w.template.to_mut().spec = None;
        }
        let owner = owner_reference(&j).unwrap();
        let ctx = ChildContext::new("mnist", "default", &spec, &owner, None);
        assert!(!ctx.can_build_pod(ReplicaType::Worker));
        assert!(ctx.pod(ReplicaType::Worker, 0).is_none());
        assert!(ctx.can_build_pod(ReplicaType::Chief));
        assert!(ctx.pod(ReplicaType::Chief, 0).is_some());
        assert!(
            !ctx.can_build_pod(ReplicaType::Evaluator),
            "not in the spec"
        );
    }

    #[test]
    fn a_single_replica_job_gets_no_tf_config() {
        let j = TfJobFixture::new("mnist").workers(1).uid("u").build();
        let pod = with_ctx(j, |c| c.pod(ReplicaType::Worker, 0)).unwrap();
        assert!(pod.spec.unwrap().containers[0].env.is_none());
    }

    #[test]
    fn service_is_headless_and_selects_exactly_its_replica() {
        let svc = with_ctx(job(), |c| c.service(ReplicaType::Worker, 1)).unwrap();
        let spec = svc.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        let sel = spec.selector.unwrap();
        assert_eq!(sel.len(), 4);
        assert_eq!(sel["training.kubeflow.org/replica-index"], "1");
        let ports = spec.ports.unwrap();
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].port),
            (Some("tfjob-port"), 2222)
        );
    }

    #[test]
    fn replica_is_read_back_from_labels() {
        let pod = with_ctx(job(), |c| c.pod(ReplicaType::Worker, 1)).unwrap();
        assert_eq!(replica_of(&pod.metadata), Some((ReplicaType::Worker, 1)));
    }
}
