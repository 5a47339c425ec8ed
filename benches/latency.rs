//! Benchmark 4: event-to-reconcile latency at 200 events/s against the local
//! API server, ours and kube-runtime's `Controller` (as a peer under the same
//! load, run first; `BENCH_LATENCY_KUBE=0` skips it).
//!
//! `BENCH_LATENCY_OBJECTS` Pods (default 200, namespace `bench-latency`,
//! bound to a KWOK node) are patched round-robin at `BENCH_RATE` per second
//! (default 200) for `BENCH_SECONDS` (default 15). Each patch writes the
//! sender's wall-clock time into an annotation. Two latencies, defined as:
//!
//! - **watch → reconcile** (ours only): from the moment the reflector's
//!   watch stream yields the event (a [`ListWatch`] wrapper stamps each
//!   object's `(name, resourceVersion)` as it comes off the wire, before
//!   decoding) to the moment `reconcile` starts for that key and finds that
//!   resourceVersion in the cache. It covers decode, DeltaFIFO, indexer
//!   write, event handler, workqueue and worker pickup: our machinery only.
//! - **patch → reconcile** (both peers): from just before the PATCH request
//!   is sent to the start of `reconcile` seeing it; this adds the client's
//!   request, the API server, etcd and the watch fan-out.
//!
//! The controllers run with default settings (ours: 1 worker and client-go's
//! default rate limiter; kube-runtime: its defaults). Reconcile only records.
//! Events coalesced by the queue (a key patched again before its reconcile)
//! count once, under the newest patch. Results: `target/bench/latency.json`.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::WatchEvent;
use kube_runtime::watcher;
use serde_json::{Value, json};
use tfjob_operator::runtime::cache::informer::{InformerConfig, SharedInformer};
use tfjob_operator::runtime::cache::key::ObjectKey;
use tfjob_operator::runtime::cache::reflector::framing::{RawList, RawWatchStream};
use tfjob_operator::runtime::cache::reflector::list_watch::ApiListWatch;
use tfjob_operator::runtime::cache::reflector::list_watch::ListWatch;
use tfjob_operator::runtime::cache::store::Indexer;
use tfjob_operator::runtime::controller::{Action, Controller, ReconcileError, Reconciler};
use tokio_util::sync::CancellationToken;

#[path = "common/pods.rs"]
mod pods;

const NAMESPACE: &str = "bench-latency";
const SENT: &str = "bench.tfjob.dev/sent-ns";
/// Patches in flight at most (client connections kept busy, not piled up).
const IN_FLIGHT: usize = 16;

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// When each `(name, resourceVersion)` came off the watch.
type Received = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// Our API server [`ListWatch`], stamping each watch event's arrival.
struct Stamping {
    inner: ApiListWatch,
    received: Received,
}

impl ListWatch for Stamping {
    fn list<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<RawList, kube::Error>> {
        self.inner.list(params)
    }

    fn watch<'a>(
        &'a self,
        params: &'a WatchParams,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<RawWatchStream, kube::Error>> {
        let received = Arc::clone(&self.received);
        Box::pin(async move {
            let stream = self.inner.watch(params, resource_version).await?;
            Ok(stream
                .inspect(move |event| {
                    if let Ok(WatchEvent::Modified(v)) = event {
                        let at = Instant::now();
                        // Read without decoding (JSON or protobuf alike).
                        if let Some(id) = v.identity()
                            && let (Some(name), Some(rv)) = (id.name, id.resource_version)
                        {
                            let mut map = received.lock().unwrap_or_else(|p| p.into_inner());
                            map.insert((name.into_owned(), rv.into_owned()), at);
                        }
                    }
                })
                .boxed())
        })
    }
}

/// Latency samples in milliseconds.
#[derive(Default)]
struct Samples {
    watch_to_reconcile: Vec<f64>,
    patch_to_reconcile: Vec<f64>,
    /// First and last recorded reconcile: the event rate actually achieved.
    window: Option<(Instant, Instant)>,
}

impl Samples {
    fn events_per_s(&self) -> f64 {
        match self.window {
            Some((a, b)) if b > a => self.patch_to_reconcile.len() as f64 / (b - a).as_secs_f64(),
            _ => f64::NAN,
        }
    }
}

type SharedSamples = Arc<Mutex<Samples>>;

/// The sender's timestamp on a Pod, if it was patched after `since_ns`.
fn sent_ns(pod: &Pod, since_ns: u128) -> Option<u128> {
    let sent: u128 = pod.metadata.annotations.as_ref()?.get(SENT)?.parse().ok()?;
    (sent >= since_ns).then_some(sent)
}

fn record_patch_latency(samples: &SharedSamples, sent: u128, now_ns: u128) {
    let ms = now_ns.saturating_sub(sent) as f64 / 1e6;
    let mut s = samples.lock().unwrap_or_else(|p| p.into_inner());
    s.patch_to_reconcile.push(ms);
    let now = Instant::now();
    s.window = Some(s.window.map_or((now, now), |(first, _)| (first, now)));
}

#[derive(Debug)]
enum Never {}

impl std::fmt::Display for Never {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

impl std::error::Error for Never {}
impl ReconcileError for Never {}

struct Recorder {
    indexer: Indexer<Pod>,
    received: Received,
    samples: SharedSamples,
    since_ns: u128,
}

impl Reconciler for Recorder {
    type Error = Never;

    async fn reconcile(&self, key: ObjectKey) -> Result<Action, Never> {
        let started = Instant::now();
        let now_ns = unix_ns();
        let Some(pod) = self.indexer.get(&key) else {
            return Ok(Action::Done);
        };
        let Some(sent) = sent_ns(&pod, self.since_ns) else {
            return Ok(Action::Done);
        };
        record_patch_latency(&self.samples, sent, now_ns);
        let rv = pod.metadata.resource_version.clone().unwrap_or_default();
        let at = self
            .received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(key.name().to_owned(), rv));
        if let Some(at) = at {
            let ms = started.duration_since(at).as_secs_f64() * 1e3;
            self.samples
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .watch_to_reconcile
                .push(ms);
        }
        Ok(Action::Done)
    }
}

// ---------------------------------------------------------------- setup and load

async fn ensure_pods(client: &kube::Client, n: usize) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("a namespace");
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) | Err(kube::Error::Api(_)) => {}
        Err(e) => panic!("failed to create namespace {NAMESPACE}: {e}"),
    }
    pods::wait_for_default_service_account(client, NAMESPACE).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..n {
        let mut pod = pods::pod_manifest(NAMESPACE, i, Some("kwok-node-0"));
        pod["metadata"]
            .as_object_mut()
            .map(|m| m.remove("ownerReferences"));
        let pod: Pod = serde_json::from_value(pod).expect("a pod");
        match api.create(&PostParams::default(), &pod).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("failed to create a Pod: {e}"),
        }
    }
    // Let KWOK finish marking them Running, so its status writes don't
    // overlap the measurement.
    let deadline = Instant::now() + Duration::from_secs(60);
    let running = ListParams::default().fields("status.phase=Running");
    while api
        .list_metadata(&running)
        .await
        .map_or(0, |l| l.items.len())
        < n
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn pod_names(n: usize) -> Vec<String> {
    (0..n)
        .filter_map(|i| {
            pods::pod_manifest(NAMESPACE, i, None)["metadata"]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// Patches the Pods round-robin at `rate` per second for `seconds`; returns
/// how many patches succeeded.
async fn patch_load(client: &kube::Client, names: &[String], rate: u64, seconds: u64) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
    let total = (rate * seconds) as usize;
    let mut tasks = tokio::task::JoinSet::new();
    // Bounded in flight, so the client reuses its connections; the stamp is
    // taken once a slot is free, so client-side queueing is not counted.
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    for i in 0..total {
        tick.tick().await;
        let api = api.clone();
        let name = names[i % names.len()].clone();
        let slots = Arc::clone(&slots);
        tasks.spawn(async move {
            let _slot = slots.acquire_owned().await.ok()?;
            let patch = json!({"metadata": {"annotations": {SENT: unix_ns().to_string()}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .ok()
        });
    }
    let mut ok = 0;
    while let Some(res) = tasks.join_next().await {
        ok += usize::from(matches!(res, Ok(Some(_))));
    }
    ok
}

// ---------------------------------------------------------------- peers

/// Waits a little for a controller to stop after shutdown; says so if not.
async fn stopped<T>(task: tokio::task::JoinHandle<T>, peer: &str) {
    if tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .is_err()
    {
        eprintln!("warning: {peer}'s controller did not stop within 5 s of shutdown");
    }
}

async fn run_ours(
    client: &kube::Client,
    names: &[String],
    rate: u64,
    seconds: u64,
) -> (Samples, usize) {
    let received: Received = Arc::default();
    let samples: SharedSamples = Arc::default();
    let list_watch = Stamping {
        inner: ApiListWatch::new::<Pod>(client.clone(), Some(NAMESPACE)),
        received: Arc::clone(&received),
    };
    let informer = SharedInformer::<Pod>::new(Arc::new(list_watch), InformerConfig::default());
    let recorder = Recorder {
        indexer: informer.indexer(),
        received,
        samples: Arc::clone(&samples),
        since_ns: unix_ns(),
    };
    let controller = Controller::builder("latency")
        .for_informer(&informer)
        .build(recorder)
        .expect("a controller");
    let shutdown = CancellationToken::new();
    tokio::spawn(informer.clone().run(shutdown.clone()));
    let running = tokio::spawn(controller.run(shutdown.clone()));
    informer.wait_for_sync().await;
    eprintln!("ours: synced, patching");
    let sent = patch_load(client, names, rate, seconds).await;
    eprintln!("{sent} patches sent");
    tokio::time::sleep(Duration::from_secs(2)).await;
    shutdown.cancel();
    stopped(running, "ours").await;
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|p| p.into_inner()));
    (samples, sent)
}

async fn run_kube(
    client: &kube::Client,
    names: &[String],
    rate: u64,
    seconds: u64,
) -> (Samples, usize) {
    use kube_runtime::controller::{Action as KubeAction, Controller as KubeController};
    let samples: SharedSamples = Arc::default();
    let since_ns = unix_ns();
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let controller = KubeController::new(api, watcher::Config::default());
    let store = controller.store();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let ctx = Arc::clone(&samples);
    let running = tokio::spawn(
        controller
            .graceful_shutdown_on(async move { stop.cancelled().await })
            .run(
                move |pod: Arc<Pod>, samples: Arc<SharedSamples>| async move {
                    let now_ns = unix_ns();
                    if let Some(sent) = sent_ns(&pod, since_ns) {
                        record_patch_latency(&samples, sent, now_ns);
                    }
                    Ok::<_, Never>(KubeAction::await_change())
                },
                |_, _: &Never, _| KubeAction::await_change(),
                Arc::new(ctx),
            )
            .for_each(|res| {
                if let Err(e) = res {
                    eprintln!("kube-runtime controller: {e}");
                }
                futures::future::ready(())
            }),
    );
    // Not `store.wait_until_ready()`: kube-runtime 5's `DelayedInit` polls
    // one `futures` oneshot receiver, which remembers only the last task that
    // polled it, and the Controller's own runner waits on the same store. One
    // of the two waiters is never woken (here it was this one, until the
    // 30 s timeout that used to wrap it re-polled it: every kube-runtime run
    // began 30 s late). Its store is swapped in whole at `InitDone`, so
    // holding every Pod means the initial list is done; polling that
    // registers no waker, so the runner keeps its wake-up.
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.len() < names.len() {
        if Instant::now() > deadline {
            eprintln!(
                "warning: kube-runtime's controller store was not ready within 30 s; skipped"
            );
            shutdown.cancel();
            return (Samples::default(), 0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("kube-runtime: synced, patching");
    let sent = patch_load(client, names, rate, seconds).await;
    eprintln!("{sent} patches sent");
    tokio::time::sleep(Duration::from_secs(2)).await;
    shutdown.cancel();
    stopped(running, "kube-runtime").await;
    let samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|p| p.into_inner()));
    (samples, sent)
}

// ---------------------------------------------------------------- report

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    json!({
        "count": v.len(),
        "p50_ms": percentile(&v, 50.0),
        "p90_ms": percentile(&v, 90.0),
        "p99_ms": percentile(&v, 99.0),
        "max_ms": v.last().copied().unwrap_or(f64::NAN),
    })
}

fn print_row(label: &str, s: &Value) {
    println!(
        "{label:<36} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        s["count"],
        s["p50_ms"].as_f64().unwrap_or(f64::NAN),
        s["p90_ms"].as_f64().unwrap_or(f64::NAN),
        s["p99_ms"].as_f64().unwrap_or(f64::NAN),
        s["max_ms"].as_f64().unwrap_or(f64::NAN),
    );
}

fn main() {
    if std::env::var_os("KUBECONFIG").is_none() {
        println!(
            "latency benchmark skipped: set KUBECONFIG (benches/run.sh starts a local cluster)"
        );
        return;
    }
    let objects = pods::env_usize("BENCH_LATENCY_OBJECTS", 200);
    let rate = pods::env_usize("BENCH_RATE", 200) as u64;
    let seconds = pods::env_usize("BENCH_SECONDS", 15) as u64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (ours, ours_sent, kube, kube_sent) = rt.block_on(async {
        let client = kube::Client::try_default().await.expect("a kube client");
        ensure_pods(&client, objects).await;
        eprintln!("{objects} Pods ready");
        let names = pod_names(objects);
        // kube-runtime first, then ours (the order does not matter; see the
        // readiness wait in `run_kube`). BENCH_LATENCY_KUBE=0 skips it.
        let (kube, kube_sent) = if std::env::var("BENCH_LATENCY_KUBE").is_ok_and(|v| v == "0") {
            (Samples::default(), 0)
        } else {
            let client = kube::Client::try_default().await.expect("a kube client");
            run_kube(&client, &names, rate, seconds).await
        };
        let (ours, ours_sent) = run_ours(&client, &names, rate, seconds).await;
        (ours, ours_sent, kube, kube_sent)
    });
    let ours_rate = ours.events_per_s();
    let kube_rate = kube.events_per_s();
    let ours_watch = stats(ours.watch_to_reconcile);
    let ours_patch = stats(ours.patch_to_reconcile);
    let kube_patch = stats(kube.patch_to_reconcile);
    println!(
        "latency benchmark: {objects} Pods patched round-robin at {rate}/s for {seconds} s \
         (ours: {ours_sent} patches, kube-runtime: {kube_sent})"
    );
    println!(
        "{:<36} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "latency (ms)", "events", "p50", "p90", "p99", "max"
    );
    println!("achieved event rate: ours {ours_rate:.0}/s, kube-runtime {kube_rate:.0}/s");
    print_row("ours: watch -> reconcile", &ours_watch);
    print_row("ours: patch -> reconcile", &ours_patch);
    print_row("kube-runtime: patch -> reconcile", &kube_patch);
    let ratio = |k: &str| {
        ours_patch[k].as_f64().unwrap_or(f64::NAN) / kube_patch[k].as_f64().unwrap_or(f64::NAN)
    };
    println!(
        "ours / kube-runtime (patch -> reconcile): p50 {:.2}x, p99 {:.2}x; goal: ours watch -> reconcile p99 < 20 ms",
        ratio("p50_ms"),
        ratio("p99_ms")
    );
    let json = json!({
        "objects": objects,
        "rate_per_s": rate,
        "seconds": seconds,
        "ours": {"patches": ours_sent, "events_per_s": ours_rate, "watch_to_reconcile": ours_watch, "patch_to_reconcile": ours_patch},
        "kube_runtime": {"patches": kube_sent, "events_per_s": kube_rate, "patch_to_reconcile": kube_patch},
    });
    let path = pods::out_dir().join("latency.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("json"))
        .expect("failed to write target/bench/latency.json");
    println!("wrote {}", path.display());
}
