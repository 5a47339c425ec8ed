//! Benchmark 3: initial sync of `BENCH_PODS` Pods (default 10,000) from the
//! local API server — time to "synced" and peak RSS, ours vs kube-runtime's
//! `watcher` + `reflector` vs a client-go informer (`benches/go-informer`).
//!
//! Every peer runs as its own process (this binary re-executed with
//! `SYNC_CHILD=<peer>`, or the Go binary), so its peak RSS (`VmHWM` from
//! `/proc/self/status`, read by the peer once synced) is its own. The clock
//! starts at the peer's `main` and stops when its cache reports synced, so
//! it includes building the client (TLS, kubeconfig) — the same for all.
//! Peers run at their defaults and once with the other stripping choice:
//!
//! - `ours`: an `InformerFactory` Pod informer as the operator builds it
//!   (protobuf, streaming list when the server offers it, `managedFields`
//!   stripped); `ours-keep-mf` keeps `managedFields`; `ours-json` reads
//!   JSON, as it must for custom resources such as TFJob; `ours-json-paged`
//!   reads JSON in a paginated LIST (500 per page), with the streaming list
//!   off, the way `client-go-json` does;
//! - `kube-runtime`: `reflector(writer, watcher(api, Config::default()))`
//!   (paginated list, 500 per page); `kube-runtime-strip` drops
//!   `managedFields` in `.modify()` before the store;
//! - `client-go`: `SharedInformerFactory` + wait for `HasSynced` (v0.34, QPS
//!   limit lifted), at its defaults: paginated LIST in **protobuf** (the
//!   typed clientset prefers protobuf for built-in kinds; kube-rs and
//!   k8s-openapi speak JSON only, as every client must for CRDs such as
//!   TFJob); `client-go-strip` uses `SetTransform`; `client-go-json` asks for
//!   JSON, the wire format every other peer uses; `client-go-json-watchlist`
//!   also turns on its streaming list (`KUBE_FEATURE_WatchListClient=true`).
//!
//! The orchestrator needs `KUBECONFIG` (`benches/run.sh` starts a private
//! local control plane) and `GO_INFORMER_BIN` for the Go peer. It creates
//! the Pods once (namespace `bench-sync`, bound to the KWOK nodes so they
//! carry a Running status and KWOK's `managedFields`, like real ones), waits
//! until they are all Running, then runs `BENCH_REPS` rounds (default 3) of
//! every peer in rotating order and reports medians.
//! Results: `target/bench/sync.json`.
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};
use tfjob_operator::runtime::cache::factory::{InformerFactory, WatchConfig};
use tfjob_operator::runtime::cache::informer::{InformerConfig, SharedInformer};
use tfjob_operator::runtime::cache::reflector::ReflectorConfig;
use tfjob_operator::runtime::cache::reflector::list_watch::ApiListWatch;
use tokio_util::sync::CancellationToken;

#[path = "common/pods.rs"]
mod pods;
#[path = "common/stats.rs"]
mod stats;
use stats::median;

const NAMESPACE: &str = "bench-sync";
const PEERS: [&str; 10] = [
    "ours",
    "ours-keep-mf",
    "ours-json",
    "ours-json-paged",
    "kube-runtime",
    "kube-runtime-strip",
    "client-go",
    "client-go-strip",
    "client-go-json",
    "client-go-json-watchlist",
];

// ---------------------------------------------------------------- child side

/// Peak resident set size of this process, in kB.
fn vm_hwm_kb() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(-1)
}

/// How `ours-*` asks for the Pods.
#[derive(Clone, Copy, PartialEq)]
enum Wire {
    /// Protobuf, streaming list: the operator's informer.
    Protobuf,
    /// JSON, streaming list.
    Json,
    /// JSON, paginated LIST.
    JsonPaged,
}

async fn sync_ours(strip: bool, wire: Wire) -> usize {
    let client = kube::Client::try_default().await.expect("a kube client");
    let shutdown = CancellationToken::new();
    let informer = if wire != Wire::Protobuf {
        let list_watch = ApiListWatch::new::<Pod>(client, None).json();
        let mut config = InformerConfig::default();
        config.reflector.streaming_list = wire == Wire::Json;
        let informer = SharedInformer::<Pod>::new(Arc::new(list_watch), config);
        tokio::spawn(informer.clone().run(shutdown.clone()));
        informer.wait_for_sync().await;
        informer
    } else if strip {
        // Exactly what the operator does.
        let factory = InformerFactory::new(client);
        let informer = factory.informer::<Pod>(WatchConfig::default());
        factory.start(shutdown.clone());
        factory.wait_for_cache_sync().await;
        informer
    } else {
        let config = InformerConfig {
            reflector: ReflectorConfig {
                strip_managed_fields: false,
                ..ReflectorConfig::default()
            },
            resync: None,
        };
        let informer =
            SharedInformer::<Pod>::new(Arc::new(ApiListWatch::new::<Pod>(client, None)), config);
        tokio::spawn(informer.clone().run(shutdown.clone()));
        informer.wait_for_sync().await;
        informer
    };
    let n = informer.indexer().len();
    shutdown.cancel();
    n
}

async fn sync_kube(strip: bool) -> usize {
    let client = kube::Client::try_default().await.expect("a kube client");
    let api: Api<Pod> = Api::all(client);
    let (reader, writer) = reflector::store();
    let events = watcher(api, watcher::Config::default())
        .modify(move |pod: &mut Pod| {
            if strip {
                pod.metadata.managed_fields = None;
            }
        })
        .boxed();
    let run = reflector(writer, events).for_each(|_| futures::future::ready(()));
    let task = tokio::spawn(run);
    reader.wait_until_ready().await.expect("the store is ready");
    let n = reader.len();
    task.abort();
    n
}

fn child(peer: &str) {
    let start = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let objects = rt.block_on(async {
        match peer {
            "ours" => sync_ours(true, Wire::Protobuf).await,
            "ours-keep-mf" => sync_ours(false, Wire::Protobuf).await,
            "ours-json" => sync_ours(true, Wire::Json).await,
            "ours-json-paged" => sync_ours(true, Wire::JsonPaged).await,
            "kube-runtime" => sync_kube(false).await,
            "kube-runtime-strip" => sync_kube(true).await,
            other => panic!("unknown peer {other}"),
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"seconds": seconds, "objects": objects, "vmhwm_kb": vm_hwm_kb()})
    );
    // Don't wait for background tasks (the watch) to wind down.
    rt.shutdown_background();
}

// ---------------------------------------------------------------- orchestrator

/// Creates the namespace and whichever of the `n` Pods are missing, then
/// waits (up to 3 min) until KWOK has them all Running.
async fn ensure_pods(client: &kube::Client, n: usize) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("a namespace");
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("failed to create namespace {NAMESPACE}: {e}"),
    }
    pods::wait_for_default_service_account(client, NAMESPACE).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let existing: std::collections::HashSet<String> = list_names(&api, None).await;
    let missing: Vec<Pod> = (0..n)
        .map(|i| {
            let node = format!("kwok-node-{}", i % 4);
            let mut pod = pods::pod_manifest(NAMESPACE, i, Some(&node));
            // No TFJob exists here: the garbage collector would delete
            // Pods whose owner is missing.
            pod["metadata"]
                .as_object_mut()
                .map(|m| m.remove("ownerReferences"));
            serde_json::from_value::<Pod>(pod).expect("a pod")
        })
        .filter(|p| {
            p.metadata
                .name
                .as_ref()
                .is_some_and(|name| !existing.contains(name))
        })
        .collect();
    if !missing.is_empty() {
        let started = Instant::now();
        println!("creating {} Pods in {NAMESPACE}", missing.len());
        futures::stream::iter(missing)
            .map(|pod| {
                let api = api.clone();
                async move { api.create(&PostParams::default(), &pod).await.map(|_| ()) }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<()>>()
            .await
            .expect("failed to create the Pods");
        println!("created in {:.1} s", started.elapsed().as_secs_f64());
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let running = list_names(&api, Some("status.phase=Running")).await.len();
        if running >= n || Instant::now() > deadline {
            println!("{running} of {n} Pods Running");
            break;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

async fn list_names(
    api: &Api<Pod>,
    field_selector: Option<&str>,
) -> std::collections::HashSet<String> {
    let mut names = std::collections::HashSet::new();
    let mut params = ListParams::default().limit(500);
    params.field_selector = field_selector.map(str::to_owned);
    loop {
        let page = api
            .list_metadata(&params)
            .await
            .expect("failed to list Pods");
        names.extend(page.items.into_iter().filter_map(|p| p.metadata.name));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => return names,
        }
    }
}

/// Average JSON size of the Pods as the server lists them.
async fn json_bytes_per_pod(client: &kube::Client) -> usize {
    let req = kube::core::Request::new(format!("/api/v1/namespaces/{NAMESPACE}/pods"))
        .list(&ListParams::default().limit(200))
        .expect("a list request");
    let text = client.request_text(req).await.expect("failed to list Pods");
    let list: Value = serde_json::from_str(&text).expect("a list");
    let items = list["items"].as_array().map_or(&[][..], Vec::as_slice);
    let total: usize = items
        .iter()
        .map(|p| serde_json::to_vec(p).map_or(0, |b| b.len()))
        .sum();
    total / items.len().max(1)
}

#[derive(Clone, Debug, serde::Serialize)]
struct Run {
    seconds: f64,
    objects: u64,
    vmhwm_kb: i64,
}

fn run_peer(peer: &str, go_bin: Option<&str>) -> Option<Run> {
    let mut cmd = match peer.strip_prefix("client-go") {
        Some(variant) => {
            let mut c = Command::new(go_bin?);
            match variant {
                "" => {}
                "-strip" => {
                    c.arg("-strip");
                }
                "-json" => {
                    c.arg("-json");
                }
                "-json-watchlist" => {
                    c.arg("-json").env("KUBE_FEATURE_WatchListClient", "true");
                }
                other => panic!("unknown client-go variant {other}"),
            }
            c
        }
        None => {
            let mut c = Command::new(std::env::current_exe().expect("this binary"));
            c.env("SYNC_CHILD", peer);
            c
        }
    };
    let out = cmd.output().expect("failed to start a peer");
    if !out.status.success() {
        eprintln!(
            "peer {peer} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(line.lines().last().unwrap_or("")).ok()?;
    Some(Run {
        seconds: v["seconds"].as_f64()?,
        objects: v["objects"].as_u64()?,
        vmhwm_kb: v["vmhwm_kb"].as_i64()?,
    })
}

fn main() {
    if let Ok(peer) = std::env::var("SYNC_CHILD") {
        child(&peer);
        return;
    }
    if std::env::var_os("KUBECONFIG").is_none() {
        println!("sync benchmark skipped: set KUBECONFIG (benches/run.sh starts a local cluster)");
        return;
    }
    let n = pods::env_usize("BENCH_PODS", 10_000);
    let reps = pods::env_usize("BENCH_REPS", 3);
    let go_bin = std::env::var("GO_INFORMER_BIN").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let json_per_pod = rt.block_on(async {
        let client = kube::Client::try_default().await.expect("a kube client");
        ensure_pods(&client, n).await;
        json_bytes_per_pod(&client).await
    });
    drop(rt);

    // One round first, not counted: right after the Pods turn Running the
    // API server is still busy with them (KWOK's status writes, the watch
    // cache), and whichever peer ran first paid for it (the run that showed
    // it: `docs/benchmarks.md`, "Initial sync of 10,000 Pods").
    println!("warm-up round (not counted)");
    for peer in PEERS {
        run_peer(peer, go_bin.as_deref());
    }
    let mut runs: Vec<(&str, Vec<Run>)> = PEERS.iter().map(|p| (*p, Vec::new())).collect();
    for rep in 0..reps {
        // Rotate the order so no peer always runs right after another's
        // load on the API server.
        for k in 0..PEERS.len() {
            let i = (k + rep) % PEERS.len();
            if let Some(run) = run_peer(PEERS[i], go_bin.as_deref()) {
                runs[i].1.push(run);
            }
        }
    }

    println!(
        "sync benchmark: {n} Pods ({json_per_pod} B JSON each) in {NAMESPACE}, median of {reps}"
    );
    println!(
        "{:<24} {:>9} {:>13} {:>9} {:>13} {:>12}",
        "peer", "objects", "time to sync", "vs ours", "peak RSS MiB", "vs ours"
    );
    let summary: Vec<(&str, f64, f64, u64)> = runs
        .iter()
        .filter(|(_, r)| !r.is_empty())
        .map(|(peer, r)| {
            (
                *peer,
                median(r.iter().map(|x| x.seconds).collect()),
                median(r.iter().map(|x| x.vmhwm_kb as f64).collect()) / 1024.0,
                r.iter().map(|x| x.objects).min().unwrap_or(0),
            )
        })
        .collect();
    let ours = summary.iter().find(|s| s.0 == "ours").copied();
    let mut rows = Vec::new();
    for &(peer, secs, mib, objects) in &summary {
        let (t_ratio, m_ratio) = ours.map_or((f64::NAN, f64::NAN), |o| (o.1 / secs, o.2 / mib));
        println!(
            "{peer:<24} {objects:>9} {:>11.2} s {:>8.2}x {mib:>13.1} {:>11.2}x",
            secs, t_ratio, m_ratio
        );
        rows.push(json!({
            "peer": peer,
            "objects": objects,
            "seconds_median": secs,
            "peak_rss_mib_median": mib,
            "ours_time_over_peer": t_ratio,
            "ours_rss_over_peer": m_ratio,
            "runs": runs.iter().find(|r| r.0 == peer).map(|r| &r.1),
        }));
    }
    println!("(vs ours = ours / peer: below 1.00x means ours is faster / smaller)");
    let json = json!({
        "pods": n,
        "json_bytes_per_pod": json_per_pod,
        "reps": reps,
        "results": rows,
    });
    let path = pods::out_dir().join("sync.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json).expect("json"))
        .expect("failed to write target/bench/sync.json");
    println!("wrote {}", path.display());
}
