//! Benchmark 2: heap bytes per cached Pod, ours vs kube-runtime, same run.
//!
//! Both sides cache the same `BENCH_PODS` Pods (default 10,000; ~4 KB of
//! JSON each, about half of it `managedFields`, see `common/pods.rs`), served
//! as LIST pages of 500 from bytes held in memory, so no cluster is needed:
//!
//! - **ours**: the real pipeline — a [`SharedInformer`] (Reflector →
//!   DeltaFIFO → Indexer with its two default indexes) over an in-memory
//!   [`ListWatch`]; a relist is forced by a `410 Gone` watch event, exactly
//!   what the reflector does when etcd compacted past its resourceVersion;
//! - **kube-runtime**: its reflector `Writer` fed the events its `watcher`
//!   emits for a paginated list (`Init`, `InitApply` per object of each
//!   decoded page, `InitDone`), so the store buffers the relist and swaps it
//!   in as kube-runtime does.
//!
//! Each runs with and without stripping `managedFields` (ours: the
//! reflector's transform; kube-runtime: the same closure on each object
//! before the store, as `WatchStreamExt::modify` would). Heap is counted by a
//! global allocator wrapper (live bytes and a resettable peak), so numbers
//! are requested bytes, independent of the allocator's fragmentation.
//! Reported per Pod: steady state after the first sync, the peak during the
//! first sync, and the peak during a full relist of identical objects.
//! Results: `target/bench/memory.json`.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, WatchParams};
use kube::core::{ObjectList, WatchEvent};
use kube_runtime::reflector::store::Writer;
use kube_runtime::watcher;
use serde_json::{Value, json};
use tfjob_operator::runtime::cache::delta_fifo::DeletedObject;
use tfjob_operator::runtime::cache::informer::{EventHandler, InformerConfig, SharedInformer};
use tfjob_operator::runtime::cache::reflector::ReflectorConfig;
use tfjob_operator::runtime::cache::reflector::framing::{
    RawList, RawWatchStream, parse_list_body,
};
use tfjob_operator::runtime::cache::reflector::list_watch::ListWatch;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[path = "common/pods.rs"]
mod pods;

// ---------------------------------------------------------------- counting allocator

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Forwards every call to the system allocator and counts live bytes and
/// their high-water mark. `GlobalAlloc` is an `unsafe` trait, so this one
/// impl is the only `unsafe` in the benchmarks; it adds nothing but counting.
struct Counting;

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged and only updates two atomics, so `System`'s guarantees hold.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Starts a new peak window at the current live size.
fn reset_peak() {
    PEAK.store(live(), Ordering::Relaxed);
}

fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------- inputs

/// LIST pages as the API server sends them, serialised once up front.
fn pages(n: usize, page_size: usize) -> (Vec<Vec<u8>>, usize) {
    let mut json_bytes = 0;
    let chunks: Vec<Vec<Value>> = (0..n)
        .map(|i| pods::full_pod("bench", i))
        .collect::<Vec<_>>()
        .chunks(page_size)
        .map(<[Value]>::to_vec)
        .collect();
    let count = chunks.len();
    let pages = chunks
        .into_iter()
        .enumerate()
        .map(|(p, items)| {
            json_bytes += items
                .iter()
                .map(|v| serde_json::to_vec(v).map_or(0, |b| b.len()))
                .sum::<usize>();
            let mut meta = json!({"resourceVersion": "200000"});
            if p + 1 < count {
                meta["continue"] = json!((p + 1).to_string());
            }
            let list =
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": meta, "items": items});
            serde_json::to_vec(&list).expect("a page serialises")
        })
        .collect();
    (pages, json_bytes / n.max(1))
}

// ---------------------------------------------------------------- ours

/// An in-memory API server for one kind: LIST pages from bytes (decoded per
/// request, as from the network), and watches that stay quiet until
/// `expire` is notified, then fail with `410 Gone` (forcing a relist).
struct PagedListWatch {
    pages: Arc<Vec<Vec<u8>>>,
    expire: Arc<Notify>,
    /// When the last full list began (its first page was asked for): the
    /// relist is timed from there, not from the 410, after which the
    /// reflector backs off (0.8 s, jittered) as client-go's does.
    list_started: Arc<Mutex<Option<Instant>>>,
}

impl ListWatch for PagedListWatch {
    fn list<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<RawList, kube::Error>> {
        Box::pin(async move {
            let page = params
                .continue_token
                .as_deref()
                .and_then(|t| t.parse::<usize>().ok())
                .unwrap_or(0);
            if page == 0 {
                *self.list_started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            }
            let text = std::str::from_utf8(&self.pages[page]).map_err(|e| {
                kube::Error::SerdeError(serde::de::Error::custom(format_args!("{e}")))
            })?;
            parse_list_body(text).map_err(kube::Error::SerdeError)
        })
    }

    fn watch<'a>(
        &'a self,
        _params: &'a WatchParams,
        _resource_version: &'a str,
    ) -> BoxFuture<'a, Result<RawWatchStream, kube::Error>> {
        let expire = Arc::clone(&self.expire);
        Box::pin(async move {
            let gone = stream::once(async move {
                expire.notified().await;
                let status = serde_json::from_value(json!({
                    "code": 410, "reason": "Expired", "message": "too old resource version"
                }))
                .map_err(kube::Error::SerdeError)?;
                Ok(WatchEvent::Error(Box::new(status)))
            });
            Ok(gone.chain(stream::pending()).boxed())
        })
    }
}

/// Counts the informer's updates, to know when a relist is fully processed.
#[derive(Default)]
struct Counter(AtomicUsize);

impl EventHandler<Pod> for Counter {
    fn on_add(&self, _: &Arc<Pod>, _: bool) {}
    fn on_update(&self, _: &Arc<Pod>, _: &Arc<Pod>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn on_delete(&self, _: &DeletedObject<Pod>) {}
}

/// Bytes (total, not per Pod) above the baseline for one configuration.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct Heap {
    steady: usize,
    sync_peak: usize,
    relist_peak: usize,
    /// Wall time of the first sync and of the relist (one thread, so about
    /// CPU time): decoding dominates both.
    sync_ms: f64,
    relist_ms: f64,
}

fn ours(pages: &Arc<Vec<Vec<u8>>>, n: usize, strip: bool) -> Heap {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let base = live();
    reset_peak();
    let heap = rt.block_on(async {
        let expire = Arc::new(Notify::new());
        let list_started = Arc::new(Mutex::new(None));
        let list_watch = PagedListWatch {
            pages: Arc::clone(pages),
            expire: Arc::clone(&expire),
            list_started: Arc::clone(&list_started),
        };
        let config = InformerConfig {
            reflector: ReflectorConfig {
                // Paginated LIST, as kube-runtime's default; the in-memory
                // server has no WatchList.
                streaming_list: false,
                strip_managed_fields: strip,
                ..ReflectorConfig::default()
            },
            resync: None,
        };
        let informer = SharedInformer::<Pod>::new(Arc::new(list_watch), config);
        let updates = Arc::new(Counter::default());
        // With syncs: the relist re-delivers every Pod unchanged, which a
        // plain handler does not hear of (c9e711c, as client-go), and the
        // wait below counts one update per Pod.
        informer.add_event_handler_with_resync(updates.clone());
        let shutdown = CancellationToken::new();
        let started = Instant::now();
        let task = tokio::spawn(informer.clone().run(shutdown.clone()));
        informer.wait_for_sync().await;
        let sync_ms = started.elapsed().as_secs_f64() * 1e3;
        assert_eq!(informer.indexer().len(), n, "every Pod is cached");
        let steady = live() - base;
        let sync_peak = peak() - base;

        reset_peak();
        expire.notify_one();
        while updates.0.load(Ordering::Relaxed) < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let started = *list_started.lock().unwrap_or_else(|p| p.into_inner());
        let relist_ms = started.map_or(f64::NAN, |t| t.elapsed().as_secs_f64() * 1e3);
        let relist_peak = peak() - base;
        assert_eq!(informer.indexer().len(), n);
        shutdown.cancel();
        task.await.expect("the informer stops");
        Heap {
            steady,
            sync_peak,
            relist_peak,
            sync_ms,
            relist_ms,
        }
    });
    drop(rt);
    heap
}

// ---------------------------------------------------------------- kube-runtime

/// What kube-runtime's `watcher` emits for one paginated list, applied to
/// its reflector `Writer` as `reflector()` does: each page decoded as a
/// typed `ObjectList`, one `InitApply` per object (the store clones it into
/// an `Arc` in its buffer; the event is then dropped), `InitDone` swaps.
fn kube_list(writer: &mut Writer<Pod>, pages: &[Vec<u8>], strip: bool) {
    writer.apply_watcher_event(&watcher::Event::Init);
    for page in pages {
        let list: ObjectList<Pod> = serde_json::from_slice(page).expect("a page decodes");
        for mut pod in list.items {
            if strip {
                pod.metadata.managed_fields = None;
            }
            writer.apply_watcher_event(&watcher::Event::InitApply(pod));
        }
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

fn kube(pages: &[Vec<u8>], n: usize, strip: bool) -> Heap {
    let base = live();
    reset_peak();
    let mut writer = Writer::<Pod>::default();
    let reader = writer.as_reader();
    let started = Instant::now();
    kube_list(&mut writer, pages, strip);
    let sync_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(reader.len(), n, "every Pod is cached");
    let steady = live() - base;
    let sync_peak = peak() - base;
    reset_peak();
    let started = Instant::now();
    kube_list(&mut writer, pages, strip);
    let relist_ms = started.elapsed().as_secs_f64() * 1e3;
    let relist_peak = peak() - base;
    assert_eq!(reader.len(), n);
    Heap {
        steady,
        sync_peak,
        relist_peak,
        sync_ms,
        relist_ms,
    }
}

/// The decoded Pods alone, cloned into a `Vec` (a clone has exact
/// capacities, as both stores' objects do): the payload any cache must hold.
fn payload(pages: &[Vec<u8>], strip: bool) -> usize {
    let base = live();
    let mut all = Vec::new();
    for page in pages {
        let list: ObjectList<Pod> = serde_json::from_slice(page).expect("a page decodes");
        for mut pod in list.items {
            if strip {
                pod.metadata.managed_fields = None;
            }
            all.push(pod.clone());
        }
    }
    all.shrink_to_fit();
    // Includes the `Vec`'s buffer: the `Pod` structs themselves.
    live() - base
}

// ---------------------------------------------------------------- report

fn main() {
    let n = pods::env_usize("BENCH_PODS", 10_000);
    let (pages, json_per_pod) = pages(n, 500);
    let pages = Arc::new(pages);
    println!(
        "memory benchmark: {n} Pods, {json_per_pod} B of JSON each, heap bytes per cached Pod"
    );
    println!(
        "{:<37} {:>8} {:>8} {:>9} {:>10} {:>12} {:>14} {:>8} {:>10}",
        "configuration",
        "payload",
        "steady",
        "overhead",
        "sync peak",
        "relist peak",
        "relist/steady",
        "sync ms",
        "relist ms"
    );
    let mut rows = Vec::new();
    for strip in [false, true] {
        let pay = payload(&pages, strip) / n;
        let o = ours(&pages, n, strip);
        let k = kube(&pages, n, strip);
        let label = if strip {
            "managedFields stripped"
        } else {
            "as listed"
        };
        for (peer, h) in [("ours", o), ("kube-runtime", k)] {
            println!(
                "{:<37} {:>8} {:>8} {:>9} {:>10} {:>12} {:>13.2}x {:>8.0} {:>10.0}",
                format!("{peer}, {label}"),
                pay,
                h.steady / n,
                (h.steady / n).saturating_sub(pay),
                h.sync_peak / n,
                h.relist_peak / n,
                h.relist_peak as f64 / h.steady as f64,
                h.sync_ms,
                h.relist_ms,
            );
        }
        rows.push(json!({
            "strip_managed_fields": strip,
            "payload_bytes_per_pod": pay,
            "ours": per_pod(o, n),
            "kube_runtime": per_pod(k, n),
            "steady_ratio": o.steady as f64 / k.steady as f64,
        }));
    }
    let ours_default = rows[1]["ours"]["steady"].as_f64().unwrap_or(0.0);
    let kube_default = rows[0]["kube_runtime"]["steady"].as_f64().unwrap_or(1.0);
    println!("ratios (ours / kube-runtime, steady state):");
    for r in &rows {
        println!(
            "  {:<24} {:.2}x",
            if r["strip_managed_fields"] == true {
                "both stripped"
            } else {
                "neither stripped"
            },
            r["steady_ratio"].as_f64().unwrap_or(f64::NAN)
        );
    }
    let default_ratio = ours_default / kube_default;
    println!(
        "  {:<24} {default_ratio:.2}x   (goal <= 0.70x)",
        "defaults (ours strips)"
    );
    let json = json!({
        "pods": n,
        "json_bytes_per_pod": json_per_pod,
        "results": rows,
        "defaults_ratio": default_ratio,
    });
    let path = pods::out_dir().join("memory.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json).expect("json serialises"),
    )
    .expect("failed to write target/bench/memory.json");
    println!("wrote {}", path.display());
}

fn per_pod(h: Heap, n: usize) -> Value {
    json!({
        "steady": h.steady / n,
        "sync_peak": h.sync_peak / n,
        "relist_peak": h.relist_peak / n,
        "relist_over_steady": h.relist_peak as f64 / h.steady as f64,
        "sync_ms": h.sync_ms,
        "relist_ms": h.relist_ms,
    })
}
