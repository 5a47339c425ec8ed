//! `make bench-e2e` (issue #6): our operator side by side with Kubeflow's
//! training-operator and with the raw limit, on identical work, in one run.
//!
//! What it is for: every peer × workload run starts from the same cluster
//! state (TFJob CRD and the bench namespace deleted and re-created), starts one
//! peer as a child process, applies the workload, waits until every job is
//! Running with every Pod running, drives every chief to exit 0, waits until
//! every job has Succeeded, and records the two wall times, the peer's CPU
//! seconds and peak RSS (from `/proc/<pid>`), its API requests (from the API
//! server's audit log, see below), duplicate creates and errors. It prints a
//! table of ratios and writes `target/bench/e2e.json`.
//!
//! What it must never do: run two operators at once, touch a cluster it did
//! not start (`make bench-e2e` starts a fresh one in `target/bench/cluster`),
//! or hide a failed or timed-out phase: those are recorded as such.
//!
//! Peers:
//! - `training-operator`: Kubeflow's binary (`e2e/peers.sh`), out of the
//!   cluster, `--enable-scheme=tfjob`, at its defaults and at matched settings.
//! - `ours`: `tfjob-operator run`, at its defaults and at matched settings.
//! - `raw`: this same binary re-executed as `raw-peer`: a bare kube client that
//!   creates exactly the Pods and Services the jobs need, at the same
//!   concurrency, with no controller logic — the fastest any operator could go.
//!   `raw-status`: the same, plus a Pod watch and each job's `Running` and
//!   `Succeeded` status written once ([`raw_status`]): the least any operator
//!   that reports status must add.
//!
//! API requests are counted from the API server's audit log: `cluster.sh up`
//! with `TFJOB_AUDIT=1` gives the peer its own client certificate (user
//! `bench-peer`) and logs that user's requests, and only that user's, one line
//! per finished request. `apiserver_request_total` has no per-client label, and
//! the peers' own metrics are not comparable with each other.
//!
//! Mirrors nothing in client-go; it is the harness of `docs/benchmarks.md`,
//! "Side by side with Kubeflow's training-operator".
//!
//! Here: the constants, `main` and the loop over workloads × peers. Beside
//! it: [`settings`] (the environment, the workloads), [`peers`] (each peer
//! started, readied, stopped), [`raw_peer`] (the raw limit), [`cluster`]
//! (resets between runs, unrelated Pods), [`run`] (one run, timed phase by
//! phase), [`observed`] (what the watches see), [`audit`] and [`apf`] (the
//! peer's requests and the cap on them), [`report`] (the table and the JSON),
//! [`verdict`] (what makes a run's numbers unusable: the bench then exits
//! non-zero, after writing everything it measured).
//!
//! `e2e check FILE` applies the same verdict to a results file written earlier.
#![forbid(unsafe_code)]

mod apf;
mod audit;
mod cluster;
mod observed;
mod peers;
mod raw_peer;
mod raw_status;
mod report;
mod run;
mod same_run;
mod settings;
mod verdict;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cluster::{client_from, create_noise};
use crate::peers::{Peer, PeerKind, peers};
use crate::raw_peer::raw_peer;
use crate::report::{fmt_s, report, write_json};
use crate::run::{RunResult, run_one};
use crate::settings::{Settings, Workload, workloads};

const BENCH_NS: &str = "bench-jobs";
const NOISE_NS_COUNT: usize = 10;
const CRD_NAME: &str = "tfjobs.kubeflow.org";
const PEER_USER: &str = "bench-peer";
const POLL: Duration = Duration::from_millis(250);
/// The matched settings: the same client-side limit and worker count for both operators.
const MATCHED_QPS: u32 = 20;
const MATCHED_BURST: u32 = 30;
const MATCHED_WORKERS: u32 = 4;
/// Our `--write-concurrency` default, and so the raw client's concurrency.
const RAW_CONCURRENCY: usize = 16;
/// How many creates/patches the harness itself sends at once (apply, chief exits, noise).
const HARNESS_CONCURRENCY: usize = 32;
const KUBEFLOW_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
const KUBEFLOW_NS: &str = "kubeflow";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if let Some(i) = args.iter().position(|a| a == "raw-peer") {
        let plan = args.get(i + 1).context("usage: e2e raw-peer <plan.json>")?;
        return runtime.block_on(raw_peer(Path::new(plan)));
    }
    if let Some(i) = args.iter().position(|a| a == "check") {
        let file = args.get(i + 1).context("usage: e2e check <e2e.json>")?;
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        let doc: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{file} is not JSON"))?;
        return fail_on(&verdict::check_document(&doc), file);
    }
    runtime.block_on(bench())
}

async fn bench() -> anyhow::Result<()> {
    let s = Settings::from_env()?;
    let admin = client_from(&s.cluster_dir.join("kubeconfig")).await?;
    let logs = s
        .out
        .parent()
        .context("output path has no parent")?
        .join("logs");
    std::fs::create_dir_all(&logs)?;
    let (workloads, peers) = (workloads(&s), peers(&s));
    let mut results = Vec::new();
    let started = Instant::now();
    for w in &workloads {
        if w.noise_pods > 0 {
            create_noise(&admin, w.noise_pods, s.phase_timeout).await?;
        }
        for peer in &peers {
            eprintln!(
                "[{:>5.0} s] {} × {} ...",
                started.elapsed().as_secs_f64(),
                w.id,
                peer.id
            );
            let mut r = RunResult {
                workload: w.id.into(),
                peer: peer.id.into(),
                ..RunResult::default()
            };
            let peer = &resolve_rate(peer, &results, w);
            if let PeerKind::Ours { qps, qps_total, .. } = peer.kind
                && qps.max(qps_total) > 0
            {
                r.client_qps = Some(f64::from(if qps_total > 0 { qps_total } else { qps }));
            }
            r.outcome = match run_one(&s, &admin, peer, w, &logs, &mut r).await {
                Ok(()) => "ok".into(),
                Err(e) => format!("{e:#}")
                    .lines()
                    .next()
                    .unwrap_or("error")
                    .to_owned(),
            };
            eprintln!(
                "[{:>5.0} s] {} × {}: running {} s, succeeded {} s, cpu {} s, rss {} MB, {} requests: {}",
                started.elapsed().as_secs_f64(),
                w.id,
                peer.id,
                fmt_s(r.running_s),
                fmt_s(r.succeeded_s),
                fmt_s(r.cpu_s),
                fmt_s(r.peak_rss_mb),
                r.api_requests,
                r.outcome
            );
            results.push(r);
            // Written after every run, so an interrupted bench keeps what it measured.
            write_json(&s, &results)?;
        }
    }
    println!("{}", report(&results, &workloads, &peers));
    println!(
        "(written to {}; total {:.0} s)",
        s.out.display(),
        started.elapsed().as_secs_f64()
    );
    let doc = serde_json::json!({ "runs": serde_json::to_value(&results)? });
    fail_on(&verdict::check_document(&doc), &s.out.display().to_string())
}

/// Ok when there is nothing wrong; otherwise prints every problem and fails,
/// so `make bench-e2e` exits non-zero.
fn fail_on(problems: &[String], file: &str) -> anyhow::Result<()> {
    if problems.is_empty() {
        eprintln!("every run is usable ({file})");
        return Ok(());
    }
    for p in problems {
        eprintln!("unusable: {p}");
    }
    anyhow::bail!(
        "{} problem(s) in the runs (see above; the numbers are in {file})",
        problems.len()
    )
}

/// A peer that runs at another's measured request rate, as an `Ours` peer
/// with that QPS (burst 1.5× it, as 20/30); unchanged when there is nothing
/// to resolve (it then fails to start, and says why).
fn resolve_rate(peer: &Peer, results: &[RunResult], w: &Workload) -> Peer {
    let PeerKind::OursAtRateOf { of, workers } = peer.kind else {
        return peer.clone();
    };
    let measured = of.iter().find_map(|id| {
        results
            .iter()
            .find(|r| r.workload == w.id && r.peer == *id && r.outcome == "ok")
            .and_then(|r| r.api_rate_per_s)
    });
    match measured {
        Some(rate) => {
            let qps = rate.round().max(1.0) as u32;
            Peer {
                kind: PeerKind::Ours {
                    qps: 0,
                    burst: 30,
                    workers,
                    qps_total: qps,
                },
                ..peer.clone()
            }
        }
        None => peer.clone(),
    }
}
