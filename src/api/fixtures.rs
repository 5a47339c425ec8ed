//! Builders of TFJobs for tests (unit and end-to-end) and examples:
//! `TfJobFixture::new("mnist").chief(1).workers(2).ps(1).build()`.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, PodTemplateSpec};
use kube::api::ObjectMeta;

use super::constants::ReplicaType;
use super::types::{CleanPodPolicy, ReplicaSpec, RestartPolicy, TFJob, TFJobSpec};

/// A TFJob under construction. Every replica runs one `tensorflow` container.
#[derive(Clone, Debug)]
pub struct TfJobFixture {
    job: TFJob,
    port: Option<i32>,
}

impl TfJobFixture {
    pub fn new(name: &str) -> Self {
        let mut job = TFJob::new(name, TFJobSpec::default());
        job.metadata.namespace = Some("default".into());
        Self { job, port: None }
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.job.metadata.namespace = Some(ns.into());
        self
    }

    pub fn replicas(mut self, rtype: ReplicaType, n: i32) -> Self {
        self.job.spec.tf_replica_specs.insert(
            rtype.as_str().to_owned(),
            ReplicaSpec {
                replicas: Some(n),
                template: Box::new(tensorflow_template()),
                restart_policy: None,
            },
        );
        self
    }

    pub fn chief(self, n: i32) -> Self {
        self.replicas(ReplicaType::Chief, n)
    }
    pub fn master(self, n: i32) -> Self {
        self.replicas(ReplicaType::Master, n)
    }
    pub fn workers(self, n: i32) -> Self {
        self.replicas(ReplicaType::Worker, n)
    }
    pub fn ps(self, n: i32) -> Self {
        self.replicas(ReplicaType::PS, n)
    }
    pub fn evaluators(self, n: i32) -> Self {
        self.replicas(ReplicaType::Evaluator, n)
    }

    /// Sets the restart policy of every replica type added so far.
    pub fn restart_policy(mut self, policy: RestartPolicy) -> Self {
        for rs in self.job.spec.tf_replica_specs.values_mut() {
            rs.restart_policy = Some(policy);
        }
        self
    }

    /// Names a `tfjob-port` container port on every replica added so far.
    pub fn port(mut self, port: i32) -> Self {
        self.port = Some(port);
        self
    }

    pub fn clean_pod_policy(mut self, p: CleanPodPolicy) -> Self {
        self.job.spec.run_policy.clean_pod_policy = Some(p);
        self
    }
    pub fn backoff_limit(mut self, n: i32) -> Self {
        self.job.spec.run_policy.backoff_limit = Some(n);
        self
    }
    pub fn active_deadline_seconds(mut self, s: i64) -> Self {
        self.job.spec.run_policy.active_deadline_seconds = Some(s);
        self
    }
    pub fn ttl_seconds_after_finished(mut self, s: i32) -> Self {
        self.job.spec.run_policy.ttl_seconds_after_finished = Some(s);
        self
    }
    pub fn suspend(mut self, s: bool) -> Self {
        self.job.spec.run_policy.suspend = Some(s);
        self
    }
    pub fn success_policy(mut self, p: super::types::SuccessPolicy) -> Self {
        self.job.spec.success_policy = Some(p);
        self
    }
    pub fn dynamic_worker(mut self, on: bool) -> Self {
        self.job.spec.enable_dynamic_worker = on;
        self
    }
    pub fn uid(mut self, uid: &str) -> Self {
        self.job.metadata.uid = Some(uid.into());
        self
    }

    pub fn build(mut self) -> TFJob {
        if let Some(port) = self.port {
            for rs in self.job.spec.tf_replica_specs.values_mut() {
                if let Some(spec) = rs.template.spec.as_mut() {
                    spec.containers[0].ports = Some(vec![ContainerPort {
                        name: Some("tfjob-port".into()),
                        container_port: port,
                        ..ContainerPort::default()
                    }]);
                }
            }
        }
        self.job
    }
}

fn tensorflow_template() -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_owned(), "tf".to_owned())])),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "tensorflow".into(),
                image: Some("tensorflow/tensorflow:2.16.1".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}
