//! Defaulting and the checks the CRD schema cannot express.
//!
//! Kubeflow applies defaults in memory on every reconcile (it has no mutating
//! webhook, so the stored spec is never defaulted); we do the same, producing
//! a [`JobSpec`] with every optional value resolved and replica keys
//! normalised (`ps` → `PS`). The CRD's schema and CEL rules refuse bad
//! manifests at `kubectl apply`; [`normalize`] re-checks what matters so that
//! a job stored before the CRD was installed, or by a CRD that is not ours,
//! becomes a clear `Failed` condition instead of a retry loop.
use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerPort, PodTemplateSpec};

use super::constants::{
    DEFAULT_CONTAINER_NAME, DEFAULT_PORT, DEFAULT_PORT_NAME, MANAGED_BY_THIS_OPERATOR, ReplicaType,
};
use super::types::{CleanPodPolicy, RestartPolicy, SuccessPolicy, TFJobSpec};

/// The longest a child name (`{job}-{type}-{index}`) may be: a DNS-1035 label.
pub const MAX_CHILD_NAME_LEN: usize = 63;

/// A spec that cannot run, with the field at fault and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SpecError {
    /// The JSON path of the field, e.g. `spec.tfReplicaSpecs[Worker].replicas`.
    pub field: String,
    /// What is wrong and what to do about it.
    pub problem: String,
}

fn spec_error(field: impl Into<String>, problem: impl Into<String>) -> SpecError {
    SpecError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// One replica type with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Replica<'a> {
    pub replicas: i32,
    pub restart_policy: RestartPolicy,
    /// The template with the `tfjob-port` port added when missing: the
    /// job's own template, borrowed, unless the port had to be added. The
    /// spec is normalised on every reconcile and most passes build no Pod,
    /// so a copy of each template per pass was CPU spent for nothing
    /// (`docs/benchmarks.md`, "CPU and the Succeeded path").
    pub template: Cow<'a, PodTemplateSpec>,
    /// The `tfjob-port` container port (default 2222).
    pub port: i32,
}

/// A TFJob spec with every default applied and keys normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec<'a> {
    pub replicas: BTreeMap<ReplicaType, Replica<'a>>,
    pub clean_pod_policy: CleanPodPolicy,
    pub success_policy: SuccessPolicy,
    pub ttl_seconds_after_finished: Option<i32>,
    pub active_deadline_seconds: Option<i64>,
    pub backoff_limit: Option<i32>,
    pub suspend: bool,
    pub enable_dynamic_worker: bool,
}

impl JobSpec<'_> {
    /// The same, owning its templates (for a spec that outlives its job).
    pub fn into_owned(self) -> JobSpec<'static> {
        let replicas = self
            .replicas
            .into_iter()
            .map(|(t, r)| {
                let template = Cow::Owned(r.template.into_owned());
                (t, Replica { template, ..r })
            })
            .collect();
        JobSpec { replicas, ..self }
    }

    /// The Chief or Master, if the job has one.
    pub fn chief_type(&self) -> Option<ReplicaType> {
        self.replicas.keys().copied().find(|t| t.is_chief())
    }

    /// Total replicas over every type.
    pub fn total_replicas(&self) -> i32 {
        self.replicas.values().map(|r| r.replicas).sum()
    }
}

/// Whether this operator should reconcile a job with this `managedBy`.
pub fn is_managed_here(managed_by: Option<&str>) -> bool {
    matches!(managed_by, None | Some(MANAGED_BY_THIS_OPERATOR))
}

/// Applies Kubeflow's defaults and checks what the schema cannot.
pub fn normalize<'a>(job_name: &str, spec: &'a TFJobSpec) -> Result<JobSpec<'a>, SpecError> {
    let mut replicas = BTreeMap::new();
    if spec.tf_replica_specs.is_empty() {
        return Err(spec_error(
            "spec.tfReplicaSpecs",
            "must list at least one replica type (Chief, Master, Worker, PS or Evaluator)",
        ));
    }
    for (key, rs) in &spec.tf_replica_specs {
        let field = format!("spec.tfReplicaSpecs[{key}]");
        let rtype = ReplicaType::parse(key).ok_or_else(|| {
            spec_error(
                &field,
                format!("unknown replica type {key:?}: use Chief, Master, Worker, PS or Evaluator"),
            )
        })?;
        let count = rs.replicas.unwrap_or(1);
        if count < 0 {
            return Err(spec_error(
                format!("{field}.replicas"),
                format!("must be 0 or more, got {count}"),
            ));
        }
        if rtype.is_chief() && count > 1 {
            return Err(spec_error(
                format!("{field}.replicas"),
                format!("a {rtype} has at most 1 replica, got {count}; use Workers for more"),
            ));
        }
        let restart_policy = rs.restart_policy.unwrap_or(RestartPolicy::Never);
        if restart_policy == RestartPolicy::Invalid {
            return Err(spec_error(
                format!("{field}.restartPolicy"),
                "must be Always, OnFailure, Never or ExitCode",
            ));
        }
        check_containers(&field, &rs.template)?;
        let port = tfjob_port(&rs.template)
            .map_err(|problem| spec_error(format!("{field}.template.spec.containers"), problem))?;
        let (template, port) = match port {
            Some(port) => (Cow::Borrowed(&*rs.template), port),
            None => {
                let mut template = PodTemplateSpec::clone(&rs.template);
                add_tfjob_port(&mut template);
                (Cow::Owned(template), DEFAULT_PORT)
            }
        };
        let replica = Replica {
            replicas: count,
            restart_policy,
            template,
            port,
        };
        if replicas.insert(rtype, replica).is_some() {
            return Err(spec_error(
                &field,
                format!("{rtype} is listed twice (keys are case-insensitive): keep one"),
            ));
        }
        check_child_name_length(job_name, rtype, count)?;
    }
    if replicas.contains_key(&ReplicaType::Chief) && replicas.contains_key(&ReplicaType::Master) {
        return Err(spec_error(
            "spec.tfReplicaSpecs",
            "has both Chief and Master: Master is the legacy name of Chief, keep one",
        ));
    }
    let rp = &spec.run_policy;
    check_run_policy(spec)?;
    Ok(JobSpec {
        replicas,
        clean_pod_policy: rp.clean_pod_policy.unwrap_or(CleanPodPolicy::None),
        success_policy: spec.success_policy.unwrap_or(SuccessPolicy::Default),
        ttl_seconds_after_finished: rp.ttl_seconds_after_finished,
        active_deadline_seconds: rp.active_deadline_seconds,
        backoff_limit: rp.backoff_limit,
        suspend: rp.suspend.unwrap_or(false),
        enable_dynamic_worker: spec.enable_dynamic_worker,
    })
}

/// What the CRD's schema and CEL rules check on a replica's containers, for
/// jobs stored under a CRD that does not (Kubeflow's validates nothing).
fn check_containers(field: &str, template: &PodTemplateSpec) -> Result<(), SpecError> {
    let containers = template
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    let at = format!("{field}.template.spec.containers");
    if !containers.iter().any(|c| c.name == DEFAULT_CONTAINER_NAME) {
        return Err(spec_error(
            at,
            format!(
                "one container must be named {DEFAULT_CONTAINER_NAME:?} (it receives TF_CONFIG and its exit code decides restarts)"
            ),
        ));
    }
    for (i, c) in containers.iter().enumerate() {
        if c.image.as_deref().is_none_or(str::is_empty) {
            return Err(spec_error(
                format!("{at}[{i}].image"),
                format!("container {:?} needs a non-empty image", c.name),
            ));
        }
        for (j, p) in c.ports.iter().flatten().enumerate() {
            if !(1..=65535).contains(&p.container_port) {
                return Err(spec_error(
                    format!("{at}[{i}].ports[{j}].containerPort"),
                    format!("must be between 1 and 65535, got {}", p.container_port),
                ));
            }
        }
    }
    Ok(())
}

/// The run policy's bounds and enums (the CRD's `minimum`s and enums).
fn check_run_policy(spec: &TFJobSpec) -> Result<(), SpecError> {
    let rp = &spec.run_policy;
    let at_least = |field: &str, value: Option<i64>, min: i64| match value {
        Some(v) if v < min => Err(spec_error(
            format!("spec.runPolicy.{field}"),
            format!("must be {min} or more, got {v}"),
        )),
        _ => Ok(()),
    };
    at_least(
        "ttlSecondsAfterFinished",
        rp.ttl_seconds_after_finished.map(i64::from),
        0,
    )?;
    at_least("backoffLimit", rp.backoff_limit.map(i64::from), 0)?;
    at_least("activeDeadlineSeconds", rp.active_deadline_seconds, 1)?;
    at_least(
        "schedulingPolicy.minAvailable",
        rp.scheduling_policy
            .as_ref()
            .and_then(|s| s.min_available)
            .map(i64::from),
        0,
    )?;
    if rp.clean_pod_policy == Some(CleanPodPolicy::Invalid) {
        return Err(spec_error(
            "spec.runPolicy.cleanPodPolicy",
            "must be All, Running or None",
        ));
    }
    if spec.success_policy == Some(SuccessPolicy::Invalid) {
        return Err(spec_error(
            "spec.successPolicy",
            "must be \"\" (worker 0 decides) or AllWorkers",
        ));
    }
    Ok(())
}

/// The index of the container that gets TF_CONFIG: `tensorflow`, else the first.
pub fn tensorflow_container_index(template: &PodTemplateSpec) -> Option<usize> {
    let containers = &template.spec.as_ref()?.containers;
    if containers.is_empty() {
        return None;
    }
    Some(
        containers
            .iter()
            .position(|c| c.name == DEFAULT_CONTAINER_NAME)
            .unwrap_or(0),
    )
}

/// The TensorFlow container's `tfjob-port` port, if it has one (Kubeflow's
/// `setDefaultPort` adds it when missing: [`add_tfjob_port`]).
fn tfjob_port(template: &PodTemplateSpec) -> Result<Option<i32>, String> {
    let index = tensorflow_container_index(template)
        .ok_or_else(|| format!("needs at least one container, named {DEFAULT_CONTAINER_NAME:?}"))?;
    let Some(spec) = template.spec.as_ref() else {
        return Err("needs a pod spec".into());
    };
    Ok(spec.containers[index]
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(DEFAULT_PORT_NAME))
        .map(|p| p.container_port))
}

/// Adds the `tfjob-port` port (2222) to the TensorFlow container, which
/// [`tfjob_port`] found without one.
fn add_tfjob_port(template: &mut PodTemplateSpec) {
    let index = tensorflow_container_index(template);
    let container = template
        .spec
        .as_mut()
        .and_then(|s| s.containers.get_mut(index?));
    if let Some(container) = container {
        container
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                name: Some(DEFAULT_PORT_NAME.into()),
                container_port: DEFAULT_PORT,
                ..ContainerPort::default()
            });
    }
}

/// Child names are `{job}-{type}-{index}` and must fit a DNS-1035 label.
fn check_child_name_length(job: &str, rtype: ReplicaType, count: i32) -> Result<(), SpecError> {
    let highest = count.saturating_sub(1).max(0);
    let longest = format!("{job}-{}-{highest}", rtype.lower());
    if longest.len() > MAX_CHILD_NAME_LEN {
        return Err(spec_error(
            "metadata.name",
            format!(
                "is too long: child name {longest:?} has {} characters, the limit is {MAX_CHILD_NAME_LEN}; shorten the TFJob name",
                longest.len()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::TfJobFixture;

    #[test]
    fn defaults_match_kubeflow() {
        let job = TfJobFixture::new("mnist").workers(2).build();
        let spec = normalize("mnist", &job.spec).unwrap();
        assert_eq!(spec.clean_pod_policy, CleanPodPolicy::None);
        assert_eq!(spec.success_policy, SuccessPolicy::Default);
        assert!(!spec.suspend);
        let worker = &spec.replicas[&ReplicaType::Worker];
        assert_eq!(worker.replicas, 2);
        assert_eq!(worker.restart_policy, RestartPolicy::Never);
        assert_eq!(worker.port, 2222);
        let ports = worker.template.spec.as_ref().unwrap().containers[0]
            .ports
            .as_ref()
            .unwrap();
        assert_eq!(ports[0].name.as_deref(), Some("tfjob-port"));
    }

    #[test]
    fn replica_count_defaults_to_one() {
        let mut job = TfJobFixture::new("j").workers(3).build();
        job.spec
            .tf_replica_specs
            .get_mut("Worker")
            .unwrap()
            .replicas = None;
        let spec = normalize("j", &job.spec).unwrap();
        assert_eq!(spec.replicas[&ReplicaType::Worker].replicas, 1);
    }

    #[test]
    fn lowercase_keys_are_normalised() {
        let mut job = TfJobFixture::new("j").ps(1).build();
        let ps = job.spec.tf_replica_specs.remove("PS").unwrap();
        job.spec.tf_replica_specs.insert("ps".into(), ps);
        let spec = normalize("j", &job.spec).unwrap();
        assert!(spec.replicas.contains_key(&ReplicaType::PS));
    }

    #[test]
    fn an_existing_tfjob_port_is_kept_and_used() {
        let job = TfJobFixture::new("j").workers(1).port(3333).build();
        let spec = normalize("j", &job.spec).unwrap();
        let worker = &spec.replicas[&ReplicaType::Worker];
        assert_eq!(worker.port, 3333);
        let ports = worker.template.spec.as_ref().unwrap().containers[0]
            .ports
            .as_ref()
            .unwrap();
        assert_eq!(ports.len(), 1);
    }

    #[test]
    fn a_template_that_has_the_tfjob_port_is_borrowed_not_copied() {
        let job = TfJobFixture::new("j").workers(1).port(3333).build();
        let spec = normalize("j", &job.spec).unwrap();
        let worker = &spec.replicas[&ReplicaType::Worker];
        assert!(matches!(worker.template, Cow::Borrowed(_)));
        assert!(std::ptr::eq(
            &*worker.template,
            &*job.spec.tf_replica_specs["Worker"].template
        ));
    }

    #[test]
    fn a_template_without_the_tfjob_port_gets_port_2222_on_its_tensorflow_container() {
        let job = TfJobFixture::new("j").workers(1).build();
        let spec = normalize("j", &job.spec).unwrap();
        let worker = &spec.replicas[&ReplicaType::Worker];
        assert_eq!(worker.port, DEFAULT_PORT);
        let ports = worker.template.spec.as_ref().unwrap().containers[0]
            .ports
            .as_ref()
            .unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name.as_deref(), Some(DEFAULT_PORT_NAME));
        assert_eq!(ports[0].container_port, DEFAULT_PORT);
        // The job's own template is left as it was.
        let stored = &job.spec.tf_replica_specs["Worker"].template;
        assert_eq!(stored.spec.as_ref().unwrap().containers[0].ports, None);
    }

    #[test]
    fn unknown_replica_type_names_the_key_and_the_fix() {
        let mut job = TfJobFixture::new("j").workers(1).build();
        let w = job.spec.tf_replica_specs["Worker"].clone();
        job.spec.tf_replica_specs.insert("Launcher".into(), w);
        let err = normalize("j", &job.spec).unwrap_err();
        assert_eq!(err.field, "spec.tfReplicaSpecs[Launcher]");
        assert!(
            err.problem
                .contains("use Chief, Master, Worker, PS or Evaluator")
        );
    }

    #[test]
    fn chief_and_master_together_are_refused() {
        let job = TfJobFixture::new("j").chief(1).master(1).build();
        let err = normalize("j", &job.spec).unwrap_err();
        assert!(err.problem.contains("keep one"), "{err}");
    }

    #[test]
    fn a_name_whose_children_exceed_63_characters_is_refused() {
        let name = "a".repeat(52); // 52 + "-evaluator-0" = 64
        let job = TfJobFixture::new(&name).evaluators(1).build();
        let err = normalize(&name, &job.spec).unwrap_err();
        assert_eq!(err.field, "metadata.name");
        assert!(err.problem.contains("shorten the TFJob name"));
        let ok = "a".repeat(51); // 51 + "-evaluator-0" = 63
        assert!(normalize(&ok, &TfJobFixture::new(&ok).evaluators(1).build().spec).is_ok());
    }

    /// Under Kubeflow's CRD nothing is validated at `kubectl apply`: every
    /// rule our CRD enforces must be enforced here too, naming the field.
    #[test]
    fn every_rule_of_our_crd_is_checked_again_naming_the_field() {
        let from_json = |json: serde_json::Value| -> TFJobSpec {
            serde_json::from_value(json).expect("decodes, however invalid")
        };
        let worker = |extra: serde_json::Value| {
            let mut w = serde_json::json!({
                "replicas": 1,
                "template": {"spec": {"containers": [
                    {"name": "tensorflow", "image": "tf:2"}
                ]}}
            });
            if let (Some(w), Some(extra)) = (w.as_object_mut(), extra.as_object()) {
                w.extend(extra.clone());
            }
            w
        };
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            (
                "no tensorflow container",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({
                    "template": {"spec": {"containers": [{"name": "main", "image": "tf:2"}]}}}))}}),
                "spec.tfReplicaSpecs[Worker].template.spec.containers",
            ),
            (
                "empty image",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({
                    "template": {"spec": {"containers": [{"name": "tensorflow", "image": ""}]}}}))}}),
                "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image",
            ),
            (
                "negative replicas",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({"replicas": -1}))}}),
                "spec.tfReplicaSpecs[Worker].replicas",
            ),
            (
                "bad restartPolicy",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({"restartPolicy": "Sometimes"}))}}),
                "spec.tfReplicaSpecs[Worker].restartPolicy",
            ),
            (
                "two chiefs",
                serde_json::json!({"tfReplicaSpecs": {"Chief": worker(serde_json::json!({"replicas": 2}))}}),
                "spec.tfReplicaSpecs[Chief].replicas",
            ),
            (
                "chief and master",
                serde_json::json!({"tfReplicaSpecs": {"Chief": worker(serde_json::json!({})), "Master": worker(serde_json::json!({}))}}),
                "spec.tfReplicaSpecs",
            ),
            (
                "unknown replica type",
                serde_json::json!({"tfReplicaSpecs": {"Launcher": worker(serde_json::json!({}))}}),
                "spec.tfReplicaSpecs[Launcher]",
            ),
            (
                "port out of range",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({
                    "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf:2",
                        "ports": [{"name": "tfjob-port", "containerPort": 70000}]}]}}}))}}),
                "spec.tfReplicaSpecs[Worker].template.spec.containers[0].ports[0].containerPort",
            ),
            (
                "zero deadline",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({}))},
                    "runPolicy": {"activeDeadlineSeconds": 0}}),
                "spec.runPolicy.activeDeadlineSeconds",
            ),
            (
                "negative backoffLimit",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({}))},
                    "runPolicy": {"backoffLimit": -1}}),
                "spec.runPolicy.backoffLimit",
            ),
            (
                "negative minAvailable",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({}))},
                    "runPolicy": {"schedulingPolicy": {"minAvailable": -1}}}),
                "spec.runPolicy.schedulingPolicy.minAvailable",
            ),
            (
                "bad cleanPodPolicy",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({}))},
                    "runPolicy": {"cleanPodPolicy": "Some"}}),
                "spec.runPolicy.cleanPodPolicy",
            ),
            (
                "bad successPolicy",
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({}))},
                    "successPolicy": "AnyWorker"}),
                "spec.successPolicy",
            ),
            (
                "no replica types",
                serde_json::json!({"tfReplicaSpecs": {}}),
                "spec.tfReplicaSpecs",
            ),
        ];
        for (what, json, field) in cases {
            let err =
                normalize("j", &from_json(json)).expect_err(&format!("{what} must be refused"));
            assert_eq!(err.field, field, "{what}: {err}");
        }
        let long = "a".repeat(60);
        let err = normalize(
            &long,
            &from_json(
                serde_json::json!({"tfReplicaSpecs": {"Worker": worker(serde_json::json!({}))}}),
            ),
        )
        .unwrap_err();
        assert_eq!(err.field, "metadata.name");
    }

    #[test]
    fn only_unset_or_training_operator_managed_by_is_ours() {
        assert!(is_managed_here(None));
        assert!(is_managed_here(Some("kubeflow.org/training-operator")));
        assert!(!is_managed_here(Some("kueue.x-k8s.io/multikueue")));
    }
}
