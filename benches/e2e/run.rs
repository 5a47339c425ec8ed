//! One peer × workload run: reset the cluster, start the peer, apply, time
//! each phase, collect the counts.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tfjob_operator::api::types::TFJob;

use crate::apf::{apf_counts, install_apf_cap, remove_apf_cap};
use crate::audit::{audit_offset, count_audit};
use crate::cluster::{delete_namespace, ensure_namespace, reinstall_crd, tfjob_resource};
use crate::observed::{Observed, spawn_watch};
use crate::peers::{Peer, PeerKind, PeerProcess, start_peer};
use crate::settings::{Settings, Workload};
use crate::{BENCH_NS, HARNESS_CONCURRENCY, POLL};

/// One peer × workload run, as written to `e2e.json`.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct RunResult {
    pub(crate) workload: String,
    pub(crate) peer: String,
    /// "ok", or what went wrong ("timeout in running phase", "peer exited", ...).
    pub(crate) outcome: String,
    pub(crate) apply_s: Option<f64>,
    pub(crate) running_s: Option<f64>,
    pub(crate) succeeded_s: Option<f64>,
    pub(crate) cpu_s: Option<f64>,
    pub(crate) peak_rss_mb: Option<f64>,
    /// `raw-watching`: the CPU seconds and peak RSS of client-go's
    /// informers beside the bare client, apart from its own; None otherwise.
    pub(crate) watcher_cpu_s: Option<f64>,
    pub(crate) watcher_peak_rss_mb: Option<f64>,
    /// The events each of its informers handled (Pod, Service, TFJob),
    /// from its last line: that it saw the run's churn.
    pub(crate) watcher_events: Option<[u64; 3]>,
    pub(crate) api_requests: u64,
    /// Requests other than watches per second, from the first request
    /// received to the last one completed (audit log timestamps).
    pub(crate) api_rate_per_s: Option<f64>,
    /// The client-side QPS limit the peer ran with, when it had one.
    pub(crate) client_qps: Option<f64>,
    /// Requests the API server's priority level dispatched and refused
    /// (429) in the `*-apf` runs (its `apiserver_flowcontrol_*` metrics).
    pub(crate) apf_dispatched: Option<u64>,
    pub(crate) apf_rejected: Option<u64>,
    pub(crate) apf_seats: Option<u64>,
    pub(crate) api_requests_by_verb: BTreeMap<String, u64>,
    pub(crate) api_errors_by_code: BTreeMap<String, u64>,
    pub(crate) already_exists: u64,
    pub(crate) duplicate_pod_creates: u64,
    pub(crate) duplicate_service_creates: u64,
    pub(crate) pods_created: u64,
    pub(crate) services_created: u64,
    /// Our operator's `tfjob_operator_events_dropped_total{reason="queue_full"}`
    /// (Events the recorder lost) and
    /// `tfjob_operator_events_write_failures_total` at the end of the run
    /// (read before it stops); None for the other peers.
    pub(crate) events_dropped: Option<u64>,
    pub(crate) event_write_failures: Option<u64>,
    /// `tfjob_operator_events_dropped_total{reason="spam_filtered"}`: Events
    /// client-go's spam filter holds back by design (25 per object at once,
    /// then one per 5 minutes; a 500-worker job's per-child Events), which
    /// training-operator's recorder holds back alike. Reported, not a failure.
    pub(crate) events_spam_filtered: Option<u64>,
}

pub(crate) async fn run_one(
    s: &Settings,
    admin: &Client,
    peer: &Peer,
    workload: &Workload,
    logs: &Path,
    r: &mut RunResult,
) -> anyhow::Result<()> {
    // Reset: every run starts from the same state.
    delete_namespace(admin, BENCH_NS).await?;
    let crd = match peer.kind {
        PeerKind::TrainingOperator { .. } => s.kubeflow_dir.join("crds/kubeflow.org_tfjobs.yaml"),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds/kubeflow.org_tfjobs.yaml"),
    };
    reinstall_crd(admin, &crd).await?;
    ensure_namespace(admin, BENCH_NS).await?;

    let state = Arc::new(Mutex::new(Observed::default()));
    let watches = [
        spawn_watch(
            Api::<Pod>::namespaced(admin.clone(), BENCH_NS),
            state.clone(),
            |o, p, d| o.pod(p, d),
        ),
        spawn_watch(
            Api::<Service>::namespaced(admin.clone(), BENCH_NS),
            state.clone(),
            |o, svc, _| o.service(svc),
        ),
        spawn_watch(
            Api::<DynamicObject>::namespaced_with(admin.clone(), BENCH_NS, &tfjob_resource()),
            state.clone(),
            |o, j, d| o.job(j, d),
        ),
    ];
    let audit = s.cluster_dir.join("logs/audit.log");
    let result = async {
        let apf_before = if peer.apf {
            install_apf_cap(admin, s.apf_queue_length).await?;
            Some(apf_counts(admin).await?)
        } else {
            None
        };
        let mut p = start_peer(s, admin, peer, workload, logs).await?;
        let from = audit_offset(&audit);
        let measured = measure(s, admin, peer, workload, &mut p, &state, r).await;
        r.cpu_s = p.cpu_seconds();
        r.peak_rss_mb = p.peak_rss_mb();
        r.watcher_cpu_s = p.watcher.as_ref().and_then(|w| w.cpu_seconds());
        r.watcher_peak_rss_mb = p.watcher.as_ref().and_then(|w| w.peak_rss_mb());
        r.events_dropped = p.counter_where(
            "tfjob_operator_events_dropped_total",
            "reason=\"queue_full\"",
        );
        r.events_spam_filtered = p.counter_where(
            "tfjob_operator_events_dropped_total",
            "reason=\"spam_filtered\"",
        );
        r.event_write_failures = p.counter("tfjob_operator_events_write_failures_total");
        let watcher_log = p.watcher.as_ref().map(|w| w.log.clone());
        tokio::task::spawn_blocking(move || p.stop()).await?;
        r.watcher_events = watcher_log.as_deref().and_then(watcher_events);
        // Long-running requests (watches) are logged when they end: after the stop.
        tokio::time::sleep(Duration::from_secs(2)).await;
        count_audit(&audit, from, r)?;
        if let Some((dispatched, rejected, _)) = apf_before {
            let (d, j, seats) = apf_counts(admin).await?;
            r.apf_dispatched = Some(d.saturating_sub(dispatched));
            r.apf_rejected = Some(j.saturating_sub(rejected));
            r.apf_seats = Some(seats);
        }
        measured
    }
    .await;
    if peer.apf {
        remove_apf_cap(admin).await?;
    }
    for w in watches {
        w.abort();
    }
    let o = state
        .lock()
        .map_err(|_| anyhow!("observer lock poisoned"))?;
    r.pods_created = o.pod_uids.values().map(|u| u.len() as u64).sum();
    r.services_created = o.svc_uids.values().map(|u| u.len() as u64).sum();
    r.duplicate_pod_creates = Observed::duplicates(&o.pod_uids);
    r.duplicate_service_creates = Observed::duplicates(&o.svc_uids);
    result
}

/// Apply → all Running → drive chiefs → all Succeeded. Times go into `r`; a
/// timeout ends the run with an error (recorded as the outcome).
pub(crate) async fn measure(
    s: &Settings,
    admin: &Client,
    peer: &Peer,
    workload: &Workload,
    p: &mut PeerProcess,
    state: &Arc<Mutex<Observed>>,
    r: &mut RunResult,
) -> anyhow::Result<()> {
    // The bare client writes no status: its phases end on the Pods alone.
    let raw = matches!(peer.kind, PeerKind::Raw { status: false, .. });
    let names = workload.job_names();
    let want_pods = workload.jobs * workload.pods_per_job();
    let start = Instant::now();
    if let Some(stdin) = p.child.stdin.as_mut() {
        writeln!(stdin, "go")?;
    }
    let jobs: Api<TFJob> = Api::namespaced(admin.clone(), BENCH_NS);
    let created: Vec<anyhow::Result<()>> = stream::iter(names.iter().map(|n| {
        let (jobs, job) = (jobs.clone(), workload.tfjob(n));
        async move {
            jobs.create(&PostParams::default(), &job).await?;
            Ok(())
        }
    }))
    .buffer_unordered(HARNESS_CONCURRENCY)
    .collect()
    .await;
    if let Some(Err(e)) = created.into_iter().find(|c| c.is_err()) {
        bail!("failed to apply the TFJobs: {e}");
    }
    r.apply_s = Some(start.elapsed().as_secs_f64());

    let running = |o: &Observed| {
        o.running_pods() >= want_pods
            && (raw || o.jobs.values().filter(|j| j.0 || j.1).count() >= names.len())
    };
    let done = phase(s, p, state, "running", running).await?;
    r.running_s = Some(done.saturating_duration_since(start).as_secs_f64());

    let exits = Instant::now();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), BENCH_NS);
    let patch = json!({"metadata": {"annotations": {
        "e2e.tfjob-operator.local/exit-code": "0",
        "e2e.tfjob-operator.local/exit-container": "tensorflow"
    }}});
    let patched: Vec<Result<Pod, kube::Error>> = stream::iter(names.iter().map(|n| {
        let (pods, patch) = (pods.clone(), &patch);
        async move {
            pods.patch(
                &format!("{n}-chief-0"),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await
        }
    }))
    .buffer_unordered(HARNESS_CONCURRENCY)
    .collect()
    .await;
    if let Some(Err(e)) = patched.into_iter().find(|c| c.is_err()) {
        bail!("failed to drive a chief to exit: {e}");
    }
    let chiefs: HashSet<String> = names.iter().map(|n| format!("{n}-chief-0")).collect();
    let succeeded = |o: &Observed| {
        if raw {
            chiefs
                .iter()
                .all(|c| o.pod_phase.get(c).is_some_and(|p| p == "Succeeded"))
        } else {
            o.jobs.values().filter(|j| j.1).count() >= names.len()
        }
    };
    let done = phase(s, p, state, "succeeded", succeeded).await?;
    r.succeeded_s = Some(done.saturating_duration_since(exits).as_secs_f64());
    Ok(())
}

pub(crate) async fn phase(
    s: &Settings,
    p: &mut PeerProcess,
    state: &Arc<Mutex<Observed>>,
    name: &str,
    done: impl Fn(&Observed) -> bool,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + s.phase_timeout;
    loop {
        {
            let o = state
                .lock()
                .map_err(|_| anyhow!("observer lock poisoned"))?;
            if let Some((job, _)) = o.jobs.iter().find(|(_, j)| j.2) {
                bail!("job {job} failed in the {name} phase");
            }
            if done(&o) {
                // The change that made it hold (see `Observed::changed_at`).
                return Ok(o.changed_at.unwrap_or_else(Instant::now));
            }
        }
        p.check_alive()?;
        if Instant::now() > deadline {
            let o = state
                .lock()
                .map_err(|_| anyhow!("observer lock poisoned"))?;
            bail!(
                "timeout in the {name} phase after {:?} ({} pods running, {} jobs running, {} succeeded)",
                s.phase_timeout,
                o.running_pods(),
                o.jobs.values().filter(|j| j.0).count(),
                o.jobs.values().filter(|j| j.1).count()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// "informers: handled 1 Pod, 2 Service and 3 TFJob events" → [1, 2, 3].
fn watcher_events(log: &Path) -> Option<[u64; 3]> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("informers: handled "))?;
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    numbers.try_into().ok()
}
