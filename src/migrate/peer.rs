//! Whether Kubeflow's training-operator still runs its TFJob controller,
//! from what the cluster shows: its Deployment (replicas, and whether
//! `--enable-scheme` leaves `tfjob` on), its leader Lease, its recent writes
//! of TFJob status (managedFields) and Events, and its validating webhook,
//! which intercepts TFJob updates. Pure.
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;

use crate::api::types::TFJob;

use super::report::PeerFinding;
use super::snapshot::{Seen, Snapshot};

/// training-operator's name: in its Deployment, image, Lease
/// (`1ca428e5.training-operator.kubeflow.org`) and field manager
/// (`training-operator.v1`, its binary).
const NAME: &str = "training-operator";

/// A write this recent means it is still at work.
const RECENT: SignedDuration = SignedDuration::from_secs(600);

pub fn judge(s: &Snapshot) -> PeerFinding {
    let mut f = PeerFinding::default();
    // Its Deployment and Lease say whether it runs now; its recent writes
    // only whether it ran lately (a controller stopped a minute ago still has
    // them), so they decide only when no Deployment of it is found.
    let mut runs = false;
    let mut found_deployment = false;
    let mut wrote_lately = false;
    match &s.deployments {
        Seen::Read(deployments) => {
            for d in deployments.iter().filter(|d| is_training_operator(d)) {
                let (line, runs_tfjobs) = deployment(d);
                found_deployment = true;
                runs |= runs_tfjobs;
                f.signs.push(line);
            }
        }
        Seen::NotVisible(why) => f.signs.push(format!("Deployments not visible: {why}")),
    }
    if let Seen::Read(leases) = &s.leases {
        for lease in leases
            .iter()
            .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.contains(NAME)))
        {
            let (line, fresh) = lease_line(lease, s.now);
            runs |= fresh;
            f.signs.push(line);
        }
    }
    for job in &s.jobs {
        if let Some(line) = recent_status_write(job, s.now) {
            wrote_lately = true;
            f.signs.push(line);
        }
    }
    if let Seen::Read(events) = &s.events {
        let recent: Vec<&Event> = events.iter().filter(|e| by_it_lately(e, s.now)).collect();
        if let Some(last) = recent.last() {
            wrote_lately = true;
            f.signs.push(format!(
                "{} Event(s) from it in the last {} min, e.g. {} on {}/{}",
                recent.len(),
                RECENT.as_secs() / 60,
                last.reason.as_deref().unwrap_or_default(),
                last.involved_object
                    .namespace
                    .as_deref()
                    .unwrap_or_default(),
                last.involved_object.name.as_deref().unwrap_or_default(),
            ));
        }
    }
    if let Seen::Read(webhooks) = &s.webhooks {
        for name in webhooks.iter().filter_map(tfjob_webhook) {
            f.blockers.push(format!(
                "delete the ValidatingWebhookConfiguration {name}: it intercepts TFJob updates, and with \
                 training-operator stopped its failurePolicy Fail refuses this operator's annotation writes"
            ));
        }
    }
    let alive = runs || (wrote_lately && !found_deployment);
    f.verdict = if alive {
        f.blockers.push(
            "stop training-operator's TFJob controller (--enable-scheme without tfjob, or scale it to 0): \
             two controllers would fight over every job"
                .to_owned(),
        );
        "running"
    } else if found_deployment || s.deployments.read().is_some() {
        "stopped"
    } else {
        "unknown"
    }
    .to_owned();
    f
}

fn is_training_operator(d: &Deployment) -> bool {
    d.metadata.name.as_deref().is_some_and(|n| n.contains(NAME))
        || containers(d).any(|c| c.image.as_deref().is_some_and(|i| i.contains(NAME)))
}

fn containers(d: &Deployment) -> impl Iterator<Item = &k8s_openapi::api::core::v1::Container> {
    d.spec
        .iter()
        .flat_map(|s| s.template.spec.iter())
        .flat_map(|p| &p.containers)
}

/// A line about the Deployment, and whether it runs TFJobs now.
fn deployment(d: &Deployment) -> (String, bool) {
    let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let schemes: Vec<String> = containers(d)
        .flat_map(|c| c.args.iter().flatten().chain(c.command.iter().flatten()))
        .filter_map(|a| a.strip_prefix("--enable-scheme="))
        .map(str::to_owned)
        .collect();
    // Unset, every framework is on; the flag repeats, one scheme each.
    let tfjob_on = schemes.is_empty() || schemes.iter().any(|s| s.eq_ignore_ascii_case("tfjob"));
    let line = format!(
        "Deployment {}/{}: {ready}/{replicas} ready, TFJob controller {}",
        d.metadata.namespace.as_deref().unwrap_or_default(),
        d.metadata.name.as_deref().unwrap_or_default(),
        if tfjob_on {
            "on"
        } else {
            "off (--enable-scheme without tfjob)"
        }
    );
    (line, tfjob_on && (replicas > 0 || ready > 0))
}

fn lease_line(lease: &Lease, now: Timestamp) -> (String, bool) {
    let spec = lease.spec.as_ref();
    let holder = spec
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("nobody");
    let duration = spec.and_then(|s| s.lease_duration_seconds).unwrap_or(15);
    let renewed = spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
    let fresh = !holder.is_empty()
        && renewed.is_some_and(|r| now < r + SignedDuration::from_secs(2 * i64::from(duration)));
    let ago = renewed.map_or("never".to_owned(), |r| {
        format!("{} s ago", now.duration_since(r).as_secs())
    });
    let line = format!(
        "Lease {}/{}: held by {holder}, renewed {ago}{}",
        lease.metadata.namespace.as_deref().unwrap_or_default(),
        lease.metadata.name.as_deref().unwrap_or_default(),
        if fresh { " (fresh)" } else { " (stale)" }
    );
    (line, fresh)
}

/// training-operator's last write of a job's status, if recent.
fn recent_status_write(job: &TFJob, now: Timestamp) -> Option<String> {
    let entry = job.metadata.managed_fields.iter().flatten().find(|m| {
        m.subresource.as_deref() == Some("status")
            && m.manager.as_deref().is_some_and(|n| n.starts_with(NAME))
    })?;
    let at = entry.time.as_ref()?.0;
    (now.duration_since(at) < RECENT).then(|| {
        format!(
            "{} wrote the status of TFJob {}/{} {} s ago",
            entry.manager.as_deref().unwrap_or_default(),
            job.metadata.namespace.as_deref().unwrap_or_default(),
            job.metadata.name.as_deref().unwrap_or_default(),
            now.duration_since(at).as_secs()
        )
    })
}

/// An Event training-operator wrote (its field manager) in the last minutes.
fn by_it_lately(e: &Event, now: Timestamp) -> bool {
    let by_it = e
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref().is_some_and(|n| n.starts_with(NAME)));
    let last = e
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or(e.last_timestamp.as_ref().map(|t| t.0))
        .or(e.event_time.as_ref().map(|t| t.0));
    by_it && last.is_some_and(|t| now.duration_since(t) < RECENT)
}

/// The configuration's name when one of its webhooks covers TFJobs.
fn tfjob_webhook(config: &ValidatingWebhookConfiguration) -> Option<String> {
    let covers = config.webhooks.iter().flatten().any(|w| {
        w.rules.iter().flatten().any(|r| {
            r.resources
                .iter()
                .flatten()
                .any(|res| res == "tfjobs" || res == "*")
                && r.api_groups
                    .iter()
                    .flatten()
                    .any(|g| g == "kubeflow.org" || g == "*")
        })
    });
    covers.then(|| config.metadata.name.clone().unwrap_or_default())
}
