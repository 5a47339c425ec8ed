//! `tfjob-operator migrate --check`: a read-only preflight for moving from
//! Kubeflow's training-operator. It lists what this operator would take
//! over (TFJobs by phase, their Pods and Services, the restarts already
//! made), what it would do to them on its first pass, anything it cannot
//! adopt and why, and whether training-operator still runs. It changes
//! nothing: its client sends GET requests only ([`read_only`]).
//! The procedure around it is docs/operating.md, "Moving from
//! training-operator".
//!
//! [`snapshot`] reads, [`crd`], [`job`] and [`peer`] judge plain data,
//! [`report`] prints.
pub mod crd;
pub mod job;
pub mod peer;
pub mod read_only;
pub mod report;
pub mod snapshot;

use std::collections::BTreeMap;

use report::Report;
use snapshot::{Seen, Snapshot};

/// Judges a snapshot of the cluster.
pub fn classify(s: &Snapshot) -> Report {
    let no_events = Vec::new();
    let events = s.events.read().unwrap_or(&no_events);
    let jobs: Vec<_> = s
        .jobs
        .iter()
        .map(|j| job::judge(j, &s.pods, &s.services, events, s.now))
        .collect();
    let mut phases = BTreeMap::new();
    for j in &jobs {
        *phases.entry(j.phase.clone()).or_default() += 1;
    }
    let mut crd = crd::judge(&s.crd);
    if let Seen::NotVisible(why) = &s.events {
        crd.notes.push(format!(
            "Events not visible ({why}): re-creations they tell are not shown"
        ));
    }
    Report {
        crd,
        phases,
        jobs,
        training_operator: peer::judge(s),
    }
}

/// Reads the cluster through a GET-only client and judges it.
pub async fn check(namespace: Option<&str>) -> anyhow::Result<Report> {
    let config = kube::Config::infer()
        .await
        .map_err(|e| anyhow::anyhow!("failed to find cluster credentials: {e}"))?;
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&read_only::ReadOnlyLayer)
        .build();
    let snapshot = Snapshot::read(&client, namespace).await?;
    Ok(classify(&snapshot))
}
#[cfg(test)]
mod tests;
