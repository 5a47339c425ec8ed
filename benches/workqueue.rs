//! Benchmark 1: our work queue against client-go's, measured in the same run.
//!
//! Two workloads, identical on both sides (see `benches/go-workqueue/main.go`):
//!
//! - `single_thread_add_get_done`: N/1000 rounds of adding 1000 distinct keys
//!   then get + done each (one op = one add/get/done cycle), a realistic
//!   queue depth;
//! - `single_thread_1m_deep`: the same with all N keys in one round, which
//!   mostly measures cache misses and allocation at a depth of N;
//! - `8_workers_hot_keys`: two producer threads add N keys, 80 % of them to 10
//!   hot keys and the rest to 10,000 cold keys, while 8 workers get + done
//!   until the queue is drained (one op = one add; duplicates collapse).
//!
//! Both sides use the queue a controller uses (rate-limiting queue, default
//! controller limiter, no metrics) and report the best of `BENCH_REPS` runs.
//! Set `GO_WORKQUEUE_BIN` to the built Go peer to get ratios (`benches/run.sh`
//! does this); results go to `target/bench/workqueue.json`.
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tfjob_operator::runtime::ObjectKey;
use tfjob_operator::runtime::workqueue::RateLimitingQueue;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Measurement {
    workload: String,
    ops: u64,
    gets: u64,
    seconds: f64,
    ops_per_s: f64,
}

fn keys(n: usize) -> Vec<ObjectKey> {
    (0..n)
        .map(|i| ObjectKey::new(Some("default"), &format!("job-{i}")))
        .collect()
}

/// Rounds of: add `depth` distinct keys, then get + done each of them.
fn single_thread(workload: &str, n: usize, depth: usize) -> Measurement {
    let ks = keys(depth);
    let rounds = n / depth;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let q = RateLimitingQueue::with_default_limiter();
        let start = Instant::now();
        for _ in 0..rounds {
            for k in &ks {
                q.add_ref(k);
            }
            for _ in 0..depth {
                if let Some(k) = q.get().await {
                    q.done(&k);
                }
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        q.shut_down();
        let ops = rounds * depth;
        measurement(workload, ops, ops as u64, seconds)
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let q: RateLimitingQueue<ObjectKey> = RateLimitingQueue::with_default_limiter();
        let gets = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                let q = q.clone();
                let gets = Arc::clone(&gets);
                tokio::spawn(async move {
                    while let Some(k) = q.get().await {
                        gets.fetch_add(1, Ordering::Relaxed);
                        q.done(&k);
                    }
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
                    for chunk in part.chunks(1024) {
                        for k in chunk {
                            q.add_ref(k);
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        for p in producers {
            p.await.expect("producer panicked");
        }
        while !q.is_empty() {
            tokio::task::yield_now().await;
        }
        q.shut_down_with_drain().await;
        for w in workers {
            w.await.expect("worker panicked");
        }
        let seconds = start.elapsed().as_secs_f64();
        measurement(
            "8_workers_hot_keys",
            n,
            gets.load(Ordering::Relaxed),
            seconds,
        )
    })
}

fn measurement(workload: &str, ops: usize, gets: u64, seconds: f64) -> Measurement {
    Measurement {
        workload: workload.to_owned(),
        ops: ops as u64,
        gets,
        seconds,
        ops_per_s: ops as f64 / seconds,
    }
}

fn best(reps: usize, f: impl Fn() -> Measurement) -> Measurement {
    (0..reps)
        .map(|_| f())
        .max_by(|a, b| a.ops_per_s.total_cmp(&b.ops_per_s))
        .expect("at least one repetition")
}

fn run_go(bin: &str, n: usize, reps: usize) -> Vec<Measurement> {
    let out = Command::new(bin)
        .args(["-n", &n.to_string(), "-reps", &reps.to_string()])
        .output()
        .expect("failed to run the Go peer");
    assert!(
        out.status.success(),
        "Go peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("Go peer printed bad JSON"))
        .collect()
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
    let reps = env_usize("BENCH_REPS", 3);
    // BENCH_ONLY=<substring> runs only the matching workloads (for profiling).
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    type Workload = Box<dyn Fn() -> Measurement>;
    let workloads: Vec<(&str, Workload)> = vec![
        (
            "single_thread_add_get_done",
            Box::new(move || single_thread("single_thread_add_get_done", n, 1_000)),
        ),
        (
            "single_thread_1m_deep",
            Box::new(move || single_thread("single_thread_1m_deep", n, n)),
        ),
        ("8_workers_hot_keys", Box::new(move || hot_keys(n, 8))),
    ];
    let ours: Vec<Measurement> = workloads
        .iter()
        .filter(|(name, _)| name.contains(&only))
        .map(|(_, f)| best(reps, f))
        .collect();
    let go = std::env::var("GO_WORKQUEUE_BIN")
        .ok()
        .map(|bin| run_go(&bin, n, reps));

    println!("workqueue benchmark: N = {n}, best of {reps}");
    println!(
        "{:<28} {:>14} {:>14} {:>8}",
        "workload", "ours ops/s", "client-go", "ratio"
    );
    let mut rows = Vec::new();
    for m in &ours {
        let peer = go
            .as_ref()
            .and_then(|g| g.iter().find(|p| p.workload == m.workload));
        let ratio = peer.map(|p| m.ops_per_s / p.ops_per_s);
        println!(
            "{:<28} {:>14.0} {:>14} {:>8}",
            m.workload,
            m.ops_per_s,
            peer.map_or("-".to_owned(), |p| format!("{:.0}", p.ops_per_s)),
            ratio.map_or("-".to_owned(), |r| format!("{r:.2}x")),
        );
        rows.push(serde_json::json!({
            "workload": m.workload,
            "ours": m,
            "client_go": peer,
            "ratio": ratio,
        }));
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
