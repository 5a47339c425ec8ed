//! Job metrics, with Kubeflow's names so existing dashboards keep working
//! (`training_operator_jobs_{created,successful,failed,restarted,deleted}_total`,
//! labels `job_namespace` and `framework`), plus a job-duration histogram
//! Kubeflow lacks (`tfjob_operator_job_duration_seconds`).
//!
//! Each is counted when *our status write* records the transition, so a job
//! is counted once — not again when the operator restarts and relists, which
//! is a known Kubeflow bug (its "created" counter runs in an event predicate).
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::api::constants::condition;
use crate::api::types::TFJobStatus;
use crate::observability::metrics::SharedRegistry;

use crate::tfjob::plan::conditions::is_true;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job_namespace: String,
    framework: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    job_namespace: String,
    result: String,
}

/// The job counters and the duration histogram.
#[derive(Clone)]
pub struct JobMetrics {
    created: Family<JobLabels, Counter>,
    successful: Family<JobLabels, Counter>,
    failed: Family<JobLabels, Counter>,
    restarted: Family<JobLabels, Counter>,
    deleted: Family<JobLabels, Counter>,
    duration: Family<ResultLabels, Histogram>,
}

impl JobMetrics {
    pub fn register(registry: &SharedRegistry) -> Self {
        let m = Self {
            created: Family::default(),
            successful: Family::default(),
            failed: Family::default(),
            restarted: Family::default(),
            deleted: Family::default(),
            duration: Family::new_with_constructor(|| {
                // 1 s … ~9 h
                Histogram::new(exponential_buckets(1.0, 2.0, 16))
            }),
        };
        let mut r = registry.lock().unwrap_or_else(|p| p.into_inner());
        let sub = r.sub_registry_with_prefix("training_operator");
        // prometheus-client appends `_total` to counters.
        sub.register("jobs_created", "TFJobs created", m.created.clone());
        sub.register(
            "jobs_successful",
            "TFJobs that succeeded",
            m.successful.clone(),
        );
        sub.register("jobs_failed", "TFJobs that failed", m.failed.clone());
        sub.register(
            "jobs_restarted",
            "TFJob replica restarts",
            m.restarted.clone(),
        );
        sub.register(
            "jobs_deleted",
            "TFJobs deleted by the operator (ttlSecondsAfterFinished)",
            m.deleted.clone(),
        );
        r.register(
            "tfjob_operator_job_duration_seconds",
            "Seconds from a TFJob's start to its success or failure",
            m.duration.clone(),
        );
        m
    }

    fn labels(namespace: &str) -> JobLabels {
        JobLabels {
            job_namespace: namespace.to_owned(),
            framework: "tensorflow".to_owned(),
        }
    }

    /// Counts a job the operator deleted (as Kubeflow's `DeleteJob` does).
    pub fn record_deleted(&self, namespace: &str) {
        self.deleted.get_or_create(&Self::labels(namespace)).inc();
    }

    /// Counts the transitions between two statuses that were just written.
    pub fn record_transition(&self, namespace: &str, old: Option<&TFJobStatus>, new: &TFJobStatus) {
        let labels = Self::labels(namespace);
        let was = |t: &str| old.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == t));
        let was_true = |t: &str| old.is_some_and(|s| is_true(s, t));
        if !was(condition::CREATED) && new.conditions.iter().any(|c| c.type_ == condition::CREATED)
        {
            self.created.get_or_create(&labels).inc();
        }
        let restarts =
            |s: &TFJobStatus| s.replica_statuses.values().map(|r| r.restarts).sum::<i32>();
        let new_restarts = restarts(new) - old.map_or(0, restarts);
        if new_restarts > 0 {
            self.restarted
                .get_or_create(&labels)
                .inc_by(new_restarts as u64);
        }
        for (type_, counter, result) in [
            (condition::SUCCEEDED, &self.successful, "succeeded"),
            (condition::FAILED, &self.failed, "failed"),
        ] {
            if !was_true(type_) && is_true(new, type_) {
                counter.get_or_create(&labels).inc();
                if let (Some(start), Some(end)) = (&new.start_time, &new.completion_time) {
                    let secs = end
                        .0
                        .as_millisecond()
                        .saturating_sub(start.0.as_millisecond())
                        as f64
                        / 1000.0;
                    self.duration
                        .get_or_create(&ResultLabels {
                            job_namespace: namespace.to_owned(),
                            result: result.to_owned(),
                        })
                        .observe(secs.max(0.0));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::{encode, new_registry};
    use crate::tfjob::plan::conditions::set;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn t(s: i64) -> Time {
        Time(jiff::Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn each_transition_is_counted_once_with_kubeflows_names() {
        let registry = new_registry();
        let m = JobMetrics::register(&registry);
        let mut s = TFJobStatus::default();
        set(
            &mut s,
            "Created",
            true,
            "TFJobCreated",
            String::new(),
            &t(0),
        );
        m.record_transition("ns", None, &s);
        let created = s.clone();
        m.record_transition("ns", Some(&created), &created);
        s.start_time = Some(t(0));
        s.completion_time = Some(t(30));
        set(
            &mut s,
            "Succeeded",
            true,
            "TFJobSucceeded",
            String::new(),
            &t(30),
        );
        m.record_transition("ns", Some(&created), &s);
        m.record_transition("ns", Some(&s), &s);
        m.record_deleted("ns");
        let text = encode(&registry);
        assert!(
            text.contains(r#"training_operator_jobs_deleted_total{job_namespace="ns",framework="tensorflow"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"training_operator_jobs_created_total{job_namespace="ns",framework="tensorflow"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"training_operator_jobs_successful_total{job_namespace="ns",framework="tensorflow"} 1"#));
        assert!(text.contains(r#"tfjob_operator_job_duration_seconds_sum{job_namespace="ns",result="succeeded"} 30.0"#), "{text}");
    }
}
