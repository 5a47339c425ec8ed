//! Benchmark 1: our work queue against client-go's, measured in the same run.
//!
//! Two workloads, identical on both sides (see `benches/go-workqueue/main.go`):
//!
//! - `single_thread_add_get_done`: N/1000 rounds of adding 1000 distinct keys
//!   then get + done each (one op = one add/get/done cycle), a realistic
//!   queue depth;
//! - `single_thread_add_get_done/arc_str`: the same with `Arc<str>` keys,
//!   which copy like Go strings (no allocation), to show the queue alone;
//! - `single_thread_1m_deep`: the same with all N keys in one round, which
//!   mostly measures cache misses and allocation at a depth of N;
//! - `8_workers_hot_keys`: two producers add N keys, 80 % of them to 10 hot
//!   keys and the rest to 10,000 cold keys, while 8 workers get + done until
//!   the queue is drained. One op = one queue call (add, get or done): how
//!   many adds collapse depends on how fast the workers keep up, so counting
//!   adds alone would reward slow workers.
//!
//! Each row reports wall-clock ops/s and ops per CPU-second (all threads of
//! the process). On a shared, loaded machine the second is the fairer one:
//! time spent waiting for a core is not the queue's cost.
//!
//! Both sides use the queue a controller uses (rate-limiting queue, default
//! controller limiter, no metrics). Each workload runs `BENCH_REPS` times
//! (default 7) per side, ours and client-go's taking turns, and each side
//! reports its median ops/s and its median ops per CPU-second. The hot-key
//! rows also report how long the producers' adds took (sampled), since a
//! lock that makes a queue fast can make its callers wait.
//! `BENCH_THREADS=n` runs the hot-key workload on n runtime threads instead
//! of one per core (a diagnostic: with 1, no cache line moves between cores).
//! Set `GO_WORKQUEUE_BIN` to the built Go peer to get ratios (`benches/run.sh`
//! does this); results go to `target/bench/workqueue.json`.
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tfjob_operator::runtime::cache::key::ObjectKey;
use tfjob_operator::runtime::workqueue::rate_limiting::RateLimitingQueue;

#[path = "common/stats.rs"]
mod stats;
use stats::median;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Measurement {
    workload: String,
    ops: u64,
    gets: u64,
    seconds: f64,
    cpu_seconds: f64,
    ops_per_s: f64,
    ops_per_cpu_s: f64,
    /// Hot keys only: how long the producers' adds took (sampled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    add_latency_us: Option<Latency>,
}

/// Percentiles of the producers' sampled add calls, in microseconds: what a
/// contended lock costs the caller (an informer's event handler, in a
/// controller), not just the throughput.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Latency {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

impl Latency {
    fn of(mut ns: Vec<u64>) -> Option<Self> {
        ns.sort_unstable();
        let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1e3;
        (!ns.is_empty()).then(|| Latency {
            p50: at(0.5),
            p99: at(0.99),
            p999: at(0.999),
            max: at(1.0),
        })
    }
}

/// One add in this many is timed (both sides): often enough for a p99.9,
/// rarely enough that reading the clock costs the run nothing measurable.
const SAMPLE_EVERY: usize = 64;

/// Wall time and process CPU time (every live thread), like Go's getrusage.
#[derive(Clone, Copy)]
struct Clock {
    wall: Instant,
    cpu_ns: u64,
}

impl Clock {
    fn now() -> Self {
        Self {
            wall: Instant::now(),
            cpu_ns: process_cpu_ns(),
        }
    }
}

/// Sum of every thread's time on a CPU (`/proc/self/task/*/schedstat`, ns).
/// Read while the runtime's threads are alive, so none is missed.
fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn keys(n: usize) -> Vec<ObjectKey> {
    (0..n)
        .map(|i| ObjectKey::new(Some("default"), &format!("job-{i}")))
        .collect()
}

/// Rounds of: add `depth` distinct keys, then get + done each of them.
fn single_thread<K>(workload: &str, n: usize, ks: &[K]) -> Measurement
where
    K: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let depth = ks.len();
    let rounds = n / depth;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let q = RateLimitingQueue::with_default_limiter();
        let start = Clock::now();
        for _ in 0..rounds {
            for k in ks {
                q.add_ref(k);
            }
            for _ in 0..depth {
                if let Some(k) = q.get().await {
                    q.done(&k);
                }
            }
        }
        let ops = (rounds * depth) as u64;
        let m = measurement(workload, ops, ops, start);
        q.shut_down();
        m
    })
}

/// A tiny deterministic generator, so the key sequence matches run to run.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

fn hot_keys(n: usize, workers: usize) -> Measurement {
    let hot = keys(10);
    let cold: Vec<_> = keys(10_010).split_off(10);
    let mut rng = SplitMix(42);
    let seq: Vec<ObjectKey> = (0..n)
        .map(|_| {
            if rng.below(100) < 80 {
                hot[rng.below(10) as usize].clone()
            } else {
                cold[rng.below(cold.len() as u64) as usize].clone()
            }
        })
        .collect();
    let seq = Arc::new(seq);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    // BENCH_THREADS=1 puts every task on one core: the queue's cost with no
    // cache line ever moving between cores (a diagnostic, not the workload).
    if let Some(threads) = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        rt.worker_threads(threads);
    }
    let rt = rt.enable_time().build().expect("runtime");
    rt.block_on(async {
        let q: RateLimitingQueue<ObjectKey> = RateLimitingQueue::with_default_limiter();
        let gets = Arc::new(AtomicU64::new(0));
        let start = Clock::now();
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                let q = q.clone();
                let gets = Arc::clone(&gets);
                tokio::spawn(async move {
                    // Counted locally: a shared counter bumped on every get
                    // would be a second contended cache line, measured as
                    // the queue's cost (the Go peer counts the same way).
                    let mut mine = 0;
                    while let Some(k) = q.get().await {
                        mine += 1;
                        q.done(&k);
                    }
                    gets.fetch_add(mine, Ordering::Relaxed);
                })
            })
            .collect();
        const PRODUCERS: usize = 2;
        // Producers are tasks on the same runtime, as informer event handlers
        // are. Go preempts a busy goroutine; a tokio task must yield now and
        // then or it would starve the workers sharing its thread.
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = q.clone();
                let seq = Arc::clone(&seq);
                tokio::spawn(async move {
                    let part = &seq[p * n / PRODUCERS..(p + 1) * n / PRODUCERS];
                    let mut sampled = Vec::with_capacity(part.len() / SAMPLE_EVERY + 1);
                    for (i, k) in part.iter().enumerate() {
                        if i % SAMPLE_EVERY == 0 {
                            let t = Instant::now();
                            q.add_ref(k);
                            sampled.push(t.elapsed().as_nanos() as u64);
                        } else {
                            q.add_ref(k);
                        }
                        if i % 1024 == 1023 {
                            tokio::task::yield_now().await;
                        }
                    }
                    sampled
                })
            })
            .collect();
        let mut sampled = Vec::new();
        for p in producers {
            sampled.extend(p.await.expect("producer panicked"));
        }
        // Poll for the drain every 50 µs, like the Go peer. (This loop runs
        // on the main thread, outside the runtime's two workers; spinning on
        // `is_empty` here would add a third thread contending for the
        // queue's lock on two cores.)
        while !q.is_empty() {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        q.shut_down_with_drain().await;
        for w in workers {
            w.await.expect("worker panicked");
        }
        let gets = gets.load(Ordering::Relaxed);
        let mut m = measurement("8_workers_hot_keys", n as u64 + 2 * gets, gets, start);
        m.add_latency_us = Latency::of(sampled);
        m
    })
}

fn measurement(workload: &str, ops: u64, gets: u64, start: Clock) -> Measurement {
    let end = Clock::now();
    let seconds = (end.wall - start.wall).as_secs_f64();
    let cpu_seconds = end.cpu_ns.saturating_sub(start.cpu_ns) as f64 / 1e9;
    Measurement {
        workload: workload.to_owned(),
        ops,
        gets,
        seconds,
        cpu_seconds,
        ops_per_s: ops as f64 / seconds,
        ops_per_cpu_s: ops as f64 / cpu_seconds,
        add_latency_us: None,
    }
}

/// One side's runs of one workload, and their medians. Not the best run:
/// under contention runs are bimodal (now and then the scheduler happens to
/// keep every adder on one core, and a run is 4x faster), and the best of a
/// few would report that lucky mode. Wall time and CPU time get a median
/// each: the run with the median CPU time need not be the median on the
/// clock.
#[derive(Clone, Debug, Serialize)]
struct Summary {
    ops_per_s: f64,
    ops_per_cpu_s: f64,
    /// Each percentile's median over the runs; `max` is the worst of all.
    #[serde(skip_serializing_if = "Option::is_none")]
    add_latency_us: Option<Latency>,
    runs: Vec<Measurement>,
}

impl Summary {
    fn of(runs: Vec<Measurement>) -> Self {
        let lat: Vec<&Latency> = runs
            .iter()
            .filter_map(|m| m.add_latency_us.as_ref())
            .collect();
        let add_latency_us = (!lat.is_empty()).then(|| {
            let each = |f: fn(&Latency) -> f64| median(lat.iter().map(|l| f(l)).collect());
            Latency {
                p50: each(|l| l.p50),
                p99: each(|l| l.p99),
                p999: each(|l| l.p999),
                max: lat.iter().map(|l| l.max).fold(0.0, f64::max),
            }
        });
        Summary {
            ops_per_s: median(runs.iter().map(|m| m.ops_per_s).collect()),
            ops_per_cpu_s: median(runs.iter().map(|m| m.ops_per_cpu_s).collect()),
            add_latency_us,
            runs,
        }
    }
}

/// One run of one workload by the Go peer.
fn run_go(bin: &str, n: usize, workload: &str) -> Measurement {
    let out = Command::new(bin)
        .args(["-n", &n.to_string(), "-workload", workload])
        .output()
        .expect("failed to run the Go peer");
    assert!(
        out.status.success(),
        "Go peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("Go peer printed bad JSON")
}

/// The hot-key producers' add latency, ours beside client-go's, from the
/// same interleaved runs as the throughput table.
fn print_add_latency(workload: &str, ours: &Summary, go: Option<&Summary>) {
    let Some(l) = &ours.add_latency_us else {
        return;
    };
    println!(
        "{workload}: producers' add latency, µs (1 add in {SAMPLE_EVERY} timed; \
         median over the runs, max the worst)"
    );
    println!(
        "  {:<10} {:>8} {:>8} {:>8} {:>8}",
        "", "p50", "p99", "p99.9", "max"
    );
    let peer = go.and_then(|g| g.add_latency_us.as_ref());
    for (who, l) in [("ours", Some(l)), ("client-go", peer)] {
        if let Some(l) = l {
            println!(
                "  {who:<10} {:>8.2} {:>8.2} {:>8.1} {:>8.1}",
                l.p50, l.p99, l.p999, l.max
            );
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let n = env_usize("BENCH_N", 1_000_000);
    let reps = env_usize("BENCH_REPS", 7);
    // BENCH_ONLY=<substring> runs only the matching workloads (for profiling).
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    type Workload = Box<dyn Fn() -> Measurement>;
    let (shallow, deep) = (keys(1_000), keys(n));
    // Go strings are immutable and shared on copy; `Arc<str>` is the Rust
    // key with the same cost model, ObjectKey (two Strings) is ours.
    let shallow_arc: Vec<Arc<str>> = shallow.iter().map(|k| Arc::from(k.to_string())).collect();
    let workloads: Vec<(&str, Workload)> = vec![
        (
            "single_thread_add_get_done",
            Box::new(move || single_thread("single_thread_add_get_done", n, &shallow)),
        ),
        (
            "single_thread_add_get_done/arc_str",
            Box::new(move || single_thread("single_thread_add_get_done/arc_str", n, &shallow_arc)),
        ),
        (
            "single_thread_1m_deep",
            Box::new(move || single_thread("single_thread_1m_deep", n, &deep)),
        ),
        ("8_workers_hot_keys", Box::new(move || hot_keys(n, 8))),
    ];
    let go_bin = std::env::var("GO_WORKQUEUE_BIN").ok();

    println!(
        "workqueue benchmark: N = {n}, median of {reps} runs, ours and client-go's interleaved"
    );
    println!(
        "{:<36} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7}",
        "workload", "ours ops/s", "client-go", "ratio", "ours ops/cpu", "client-go", "ratio"
    );
    let fmt_opt = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
    let fmt_ratio = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}x"));
    let mut rows = Vec::new();
    let mut latencies = Vec::new();
    for (workload, f) in workloads.iter().filter(|(name, _)| name.contains(&only)) {
        // `name/variant` rows compare with the Go workload `name`.
        let base = workload.split('/').next().unwrap_or(workload);
        // One run each in turn: a noisy spell on a shared machine then
        // falls on both sides alike, instead of on whichever ran during it.
        let (mut ours, mut peer) = (Vec::new(), Vec::new());
        for _ in 0..reps.max(1) {
            ours.push(f());
            if let Some(bin) = &go_bin {
                peer.push(run_go(bin, n, base));
            }
        }
        let ours = Summary::of(ours);
        let peer = (!peer.is_empty()).then(|| Summary::of(peer));
        let ratio = peer.as_ref().map(|p| ours.ops_per_s / p.ops_per_s);
        let cpu_ratio = peer.as_ref().map(|p| ours.ops_per_cpu_s / p.ops_per_cpu_s);
        println!(
            "{:<36} {:>12.0} {:>12} {:>7} {:>12.0} {:>12} {:>7}",
            workload,
            ours.ops_per_s,
            fmt_opt(peer.as_ref().map(|p| p.ops_per_s)),
            fmt_ratio(ratio),
            ours.ops_per_cpu_s,
            fmt_opt(peer.as_ref().map(|p| p.ops_per_cpu_s)),
            fmt_ratio(cpu_ratio),
        );
        rows.push(serde_json::json!({
            "workload": workload,
            "ours": ours,
            "client_go": peer,
            "ratio_wall": ratio,
            "ratio_cpu": cpu_ratio,
        }));
        latencies.push((*workload, ours, peer));
    }
    for (workload, ours, peer) in &latencies {
        print_add_latency(workload, ours, peer.as_ref());
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&dir).expect("failed to create target/bench");
    let json = serde_json::json!({ "n": n, "reps": reps, "results": rows });
    std::fs::write(
        dir.join("workqueue.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("failed to write target/bench/workqueue.json");
    println!("wrote {}", dir.join("workqueue.json").display());
}
