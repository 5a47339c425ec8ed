//! What `migrate --check` found, as data: printed for the person on call
//! ([`Report::text`]) or as JSON (`--output json`, the same fields).
use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;

/// The whole answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub crd: CrdFinding,
    /// Jobs by phase (`Created`, `Running`, `Restarting`, `Succeeded`,
    /// `Failed`, `Suspended`).
    pub phases: BTreeMap<String, usize>,
    pub jobs: Vec<JobFinding>,
    pub training_operator: PeerFinding,
}

/// The installed TFJob CRD.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CrdFinding {
    /// `ours`, `kubeflow`, or `not visible: …`.
    pub schema: String,
    pub notes: Vec<String>,
    /// Why this operator cannot run under it.
    pub blockers: Vec<String>,
}

/// One TFJob.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobFinding {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub pods: Vec<PodFinding>,
    pub services: Vec<String>,
    /// The kubelet's in-place restarts of the job's Pods (`restartCount`),
    /// by replica type.
    pub in_place_restarts: BTreeMap<String, i32>,
    /// Re-creations training-operator announced in `TFJobRestarting`
    /// Events still stored (the API server keeps Events an hour by
    /// default), by replica type.
    pub restarts_in_events: BTreeMap<String, i32>,
    /// Re-creations this operator will count on adoption, by replica type
    /// (its bookkeeping annotation, or what the cluster shows without one:
    /// `tfjob::plan::bookkeeping`).
    pub restarts_counted: BTreeMap<String, i32>,
    /// Field managers that wrote the job's status, with when.
    pub status_managers: Vec<String>,
    /// What this operator will do to the job when it takes over.
    pub on_adoption: Vec<String>,
    /// Why this operator cannot take the job over as it is.
    pub blockers: Vec<String>,
}

/// One Pod of a job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodFinding {
    pub name: String,
    pub uid: String,
    pub phase: String,
    pub restart_count: i32,
}

/// Whether training-operator's TFJob controller looks alive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerFinding {
    /// `running`, `stopped` or `unknown`.
    pub verdict: String,
    /// What the verdict rests on, one line each.
    pub signs: Vec<String>,
    /// What must be done before this operator starts.
    pub blockers: Vec<String>,
}

impl Report {
    /// Whether anything stands in the way (the exit status says so too).
    pub fn has_blockers(&self) -> bool {
        !self.crd.blockers.is_empty()
            || !self.training_operator.blockers.is_empty()
            || self.jobs.iter().any(|j| !j.blockers.is_empty())
    }

    /// The report for a terminal: blockers first, then each job.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "TFJob CRD: {}", self.crd.schema);
        lines(&mut out, "  note: ", &self.crd.notes);
        lines(&mut out, "  CANNOT: ", &self.crd.blockers);
        let _ = writeln!(out, "training-operator: {}", self.training_operator.verdict);
        lines(&mut out, "  ", &self.training_operator.signs);
        lines(&mut out, "  MUST FIRST: ", &self.training_operator.blockers);
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "TFJobs: {} ({})",
            self.jobs.len(),
            if phases.is_empty() {
                "none".to_owned()
            } else {
                phases.join(", ")
            }
        );
        for job in &self.jobs {
            job.text(&mut out);
        }
        let blocked = self.jobs.iter().filter(|j| !j.blockers.is_empty()).count();
        let _ = writeln!(
            out,
            "{}",
            if self.has_blockers() {
                format!(
                    "NOT READY: {blocked} job(s) cannot be adopted as they are; see CANNOT and MUST FIRST above"
                )
            } else {
                "ready: every job can be adopted as it is".to_owned()
            }
        );
        out
    }
}

impl JobFinding {
    fn text(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "- {}/{}: {}, {} Pod(s), {} Service(s)",
            self.namespace,
            self.name,
            self.phase,
            self.pods.len(),
            self.services.len()
        );
        for pod in &self.pods {
            let _ = writeln!(
                out,
                "    pod {} {} restarts {} uid {}",
                pod.name, pod.phase, pod.restart_count, pod.uid
            );
        }
        let counts = [
            ("in-place restarts", &self.in_place_restarts),
            ("re-creations in Events", &self.restarts_in_events),
            ("re-creations counted on adoption", &self.restarts_counted),
        ];
        for (what, by_type) in counts {
            if !by_type.is_empty() {
                let shown: Vec<String> = by_type.iter().map(|(t, n)| format!("{t} {n}")).collect();
                let _ = writeln!(out, "    {what}: {}", shown.join(", "));
            }
        }
        lines(out, "    status written by ", &self.status_managers);
        lines(out, "    on adoption: ", &self.on_adoption);
        lines(out, "    CANNOT: ", &self.blockers);
    }
}

fn lines(out: &mut String, prefix: &str, items: &[String]) {
    for item in items {
        let _ = writeln!(out, "{prefix}{item}");
    }
}
