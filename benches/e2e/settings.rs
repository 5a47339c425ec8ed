//! What a run is told through the environment, and the workloads it measures.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::{RestartPolicy, TFJob};

use crate::BENCH_NS;

/// Everything a run can be told through the environment (`make bench-e2e` sets
/// the paths; `BENCH_JOBS=50` etc. make a quick run).
pub(crate) struct Settings {
    pub(crate) cluster_dir: PathBuf,
    pub(crate) operator_bin: PathBuf,
    /// Another build of our operator, run as the peer `ours-base` (e.g. the
    /// commit before a change, for a before/after in one run).
    pub(crate) base_operator_bin: Option<PathBuf>,
    pub(crate) kubeflow_dir: PathBuf,
    /// The `raw-watching` peer's watcher (benches/client-go-informers; e2e/bench.sh
    /// builds it when that peer is asked for).
    pub(crate) informers_bin: Option<PathBuf>,
    pub(crate) kubeflow_version: String,
    pub(crate) out: PathBuf,
    pub(crate) jobs: usize,
    pub(crate) noise_pods: usize,
    pub(crate) big_workers: i32,
    pub(crate) phase_timeout: Duration,
    pub(crate) peers: Vec<String>,
    pub(crate) workloads: Vec<String>,
    /// Queue length of the `*-apf` runs' PriorityLevel
    /// (`BENCH_APF_QUEUE_LENGTH`): a request beyond it is refused with 429.
    pub(crate) apf_queue_length: u32,
}

pub(crate) fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_owned())
}

pub(crate) fn env_num<T: std::str::FromStr>(key: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(key) {
        Ok(v) => v.parse().map_err(|_| anyhow!("{key}={v} is not a number")),
        Err(_) => Ok(default),
    }
}

pub(crate) fn list(key: &str, default: &str) -> Vec<String> {
    env_or(key, default)
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

impl Settings {
    pub(crate) fn from_env() -> anyhow::Result<Self> {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("target"));
        Ok(Self {
            cluster_dir: std::env::var_os("TFJOB_CLUSTER_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo.join("target/bench/cluster")),
            operator_bin: std::env::var_os("BENCH_OPERATOR_BIN")
                .map(PathBuf::from)
                .unwrap_or_else(|| target.join("release/tfjob-operator")),
            base_operator_bin: std::env::var_os("BENCH_BASE_OPERATOR_BIN").map(PathBuf::from),
            kubeflow_dir: std::env::var_os("BENCH_KUBEFLOW_DIR")
                .map(PathBuf::from)
                .context("BENCH_KUBEFLOW_DIR is not set (make bench-e2e sets it from e2e/peers.sh --dir)")?,
            informers_bin: std::env::var_os("BENCH_INFORMERS_BIN").map(PathBuf::from),
            kubeflow_version: env_or("TRAINING_OPERATOR_VERSION", "v1.9.0"),
            out: repo.join("target/bench/e2e.json"),
            jobs: env_num("BENCH_JOBS", 200)?,
            apf_queue_length: env_num("BENCH_APF_QUEUE_LENGTH", 50)?,
            noise_pods: env_num("BENCH_NOISE_PODS", 5000)?,
            big_workers: env_num("BENCH_BIG_WORKERS", 500)?,
            phase_timeout: Duration::from_secs(env_num("BENCH_PHASE_TIMEOUT", 600)?),
            peers: list(
                "BENCH_PEERS",
                "training-operator-default,training-operator-matched,ours-default,ours-matched,raw",
            ),
            workloads: list("BENCH_WORKLOADS", "jobs,big,noise"),
        })
    }
}

/// One workload: `jobs` TFJobs of the same shape, optionally with unrelated
/// Pods present beforehand.
#[derive(Clone, Debug)]
pub(crate) struct Workload {
    pub(crate) id: &'static str,
    pub(crate) title: String,
    pub(crate) jobs: usize,
    pub(crate) chief: i32,
    pub(crate) ps: i32,
    pub(crate) workers: i32,
    pub(crate) noise_pods: usize,
}

impl Workload {
    pub(crate) fn pods_per_job(&self) -> usize {
        (self.chief + self.ps + self.workers) as usize
    }
    pub(crate) fn job_names(&self) -> Vec<String> {
        (0..self.jobs).map(|i| format!("bench-{i:04}")).collect()
    }
    pub(crate) fn tfjob(&self, name: &str) -> TFJob {
        let mut f = TfJobFixture::new(name)
            .namespace(BENCH_NS)
            .chief(self.chief);
        if self.ps > 0 {
            f = f.ps(self.ps);
        }
        // Never: a chief that exits 0 ends its Pod as Succeeded (KWOK follows the kubelet's rules).
        f.workers(self.workers)
            .restart_policy(RestartPolicy::Never)
            .port(2222)
            .build()
    }
    /// (lowercase replica type, count), as the Pods are named.
    pub(crate) fn replicas(&self) -> Vec<(&'static str, i32)> {
        [
            ("chief", self.chief),
            ("ps", self.ps),
            ("worker", self.workers),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
    }
}

pub(crate) fn workloads(s: &Settings) -> Vec<Workload> {
    let jobs = Workload {
        id: "jobs",
        title: format!("{} TFJobs × (1 Chief + 1 PS + 2 Workers)", s.jobs),
        jobs: s.jobs,
        chief: 1,
        ps: 1,
        workers: 2,
        noise_pods: 0,
    };
    let noise = Workload {
        id: "noise",
        title: format!(
            "{} with {} unrelated Pods in other namespaces",
            jobs.title, s.noise_pods
        ),
        noise_pods: s.noise_pods,
        ..jobs.clone()
    };
    let big = Workload {
        id: "big",
        title: format!("1 TFJob × (1 Chief + {} Workers)", s.big_workers),
        jobs: 1,
        chief: 1,
        ps: 0,
        workers: s.big_workers,
        noise_pods: 0,
    };
    // The noise workload runs last: its 5,000 Pods stay until the cluster is torn down.
    [jobs, big, noise]
        .into_iter()
        .filter(|w| s.workloads.iter().any(|id| id == w.id))
        .collect()
}
