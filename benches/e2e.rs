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
//!
//! API requests are counted from the API server's audit log: `cluster.sh up`
//! with `TFJOB_AUDIT=1` gives the peer its own client certificate (user
//! `bench-peer`) and logs that user's requests, and only that user's, one line
//! per finished request. `apiserver_request_total` has no per-client label, and
//! the peers' own metrics are not comparable with each other.
//!
//! Mirrors nothing in client-go; it is the harness of `docs/benchmarks.md`,
//! "Side by side with Kubeflow's training-operator".
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::{StreamExt, stream};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config, ResourceExt};
use kube_runtime::WatchStreamExt;
use kube_runtime::watcher;
use serde::Deserialize as _;
use serde_json::{Value, json};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::{RestartPolicy, TFJob};

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

// ------------------------------------------------------------------ settings

/// Everything a run can be told through the environment (`make bench-e2e` sets
/// the paths; `BENCH_JOBS=50` etc. make a quick run).
struct Settings {
    cluster_dir: PathBuf,
    operator_bin: PathBuf,
    /// Another build of our operator, run as the peer `ours-base` (e.g. the
    /// commit before a change, for a before/after in one run).
    base_operator_bin: Option<PathBuf>,
    kubeflow_dir: PathBuf,
    kubeflow_version: String,
    out: PathBuf,
    jobs: usize,
    noise_pods: usize,
    big_workers: i32,
    phase_timeout: Duration,
    peers: Vec<String>,
    workloads: Vec<String>,
    /// Queue length of the `*-apf` runs' PriorityLevel
    /// (`BENCH_APF_QUEUE_LENGTH`): a request beyond it is refused with 429.
    apf_queue_length: u32,
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| default.to_owned())
}

fn env_num<T: std::str::FromStr>(key: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(key) {
        Ok(v) => v.parse().map_err(|_| anyhow!("{key}={v} is not a number")),
        Err(_) => Ok(default),
    }
}

fn list(key: &str, default: &str) -> Vec<String> {
    env_or(key, default)
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

impl Settings {
    fn from_env() -> anyhow::Result<Self> {
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

// ------------------------------------------------------------------ workloads and peers

/// One workload: `jobs` TFJobs of the same shape, optionally with unrelated
/// Pods present beforehand.
#[derive(Clone, Debug)]
struct Workload {
    id: &'static str,
    title: String,
    jobs: usize,
    chief: i32,
    ps: i32,
    workers: i32,
    noise_pods: usize,
}

impl Workload {
    fn pods_per_job(&self) -> usize {
        (self.chief + self.ps + self.workers) as usize
    }
    fn job_names(&self) -> Vec<String> {
        (0..self.jobs).map(|i| format!("bench-{i:04}")).collect()
    }
    fn tfjob(&self, name: &str) -> TFJob {
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
    fn replicas(&self) -> Vec<(&'static str, i32)> {
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

fn workloads(s: &Settings) -> Vec<Workload> {
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

#[derive(Clone, Copy, Debug)]
enum PeerKind {
    TrainingOperator {
        qps: u32,
        burst: u32,
        threads: u32,
    },
    Ours {
        qps: u32,
        burst: u32,
        workers: u32,
    },
    /// Ours with a client-side limit equal to the request rate the peers
    /// `of` (the first that ran in this workload) were measured sending.
    OursAtRateOf {
        of: &'static [&'static str],
        workers: u32,
    },
    Raw,
}

#[derive(Clone, Debug)]
struct Peer {
    id: &'static str,
    label: &'static str,
    kind: PeerKind,
    /// Run under an API Priority and Fairness cap for the peer's user
    /// ([`install_apf_cap`]).
    apf: bool,
}

/// The API Priority and Fairness objects that cap the peer's user in the
/// `*-apf` runs: a PriorityLevel with the least concurrency this API server
/// gives any level (1 share of the server's seats among the default levels'
/// shares: 3 of the default 600 seats, 1 when the bench's cluster runs with
/// `BENCH_APISERVER_INFLIGHT=100`), lending and borrowing nothing, queueing
/// what does not fit (one queue, `BENCH_APF_QUEUE_LENGTH` deep, 50 unless
/// set: a request beyond that is refused with 429); the FlowSchema puts
/// every request of `bench-peer` there. APF
/// exempts `system:masters` (only the `exempt` FlowSchema may have
/// precedence 1, and it matches that group), which is `bench-peer`'s group
/// in the other runs, so these runs use a certificate of their own for the
/// same user in group [`APF_GROUP`] ([`apf_identity`]).
const APF_LEVEL: &str = "bench-peer-cap";
const APF_GROUP: &str = "bench-peers";

fn peers(s: &Settings) -> Vec<Peer> {
    let all = [
        Peer {
            id: "training-operator-default",
            label: "training-operator (defaults: 1 thread, QPS 20/30)",
            kind: PeerKind::TrainingOperator {
                qps: 20,
                burst: 30,
                threads: 1,
            },
            apf: false,
        },
        Peer {
            id: "training-operator-matched",
            label: "training-operator (matched: 4 threads, QPS 20/30)",
            kind: PeerKind::TrainingOperator {
                qps: MATCHED_QPS,
                burst: MATCHED_BURST,
                threads: MATCHED_WORKERS,
            },
            apf: false,
        },
        Peer {
            id: "ours-default",
            label: "tfjob-operator (defaults: 4 workers, no client limit)",
            kind: PeerKind::Ours {
                qps: 0,
                burst: 30,
                workers: 4,
            },
            apf: false,
        },
        Peer {
            id: "ours-base",
            label: "tfjob-operator, BENCH_BASE_OPERATOR_BIN's build (defaults)",
            kind: PeerKind::Ours {
                qps: 0,
                burst: 30,
                workers: 4,
            },
            apf: false,
        },
        Peer {
            id: "ours-matched",
            label: "tfjob-operator (matched: 4 workers, QPS 20/30)",
            kind: PeerKind::Ours {
                qps: MATCHED_QPS,
                burst: MATCHED_BURST,
                workers: MATCHED_WORKERS,
            },
            apf: false,
        },
        Peer {
            id: "ours-at-to-rate",
            label: "tfjob-operator (4 workers, client QPS = training-operator's measured request rate)",
            kind: PeerKind::OursAtRateOf {
                of: &["training-operator-matched", "training-operator-default"],
                workers: MATCHED_WORKERS,
            },
            apf: false,
        },
        Peer {
            id: "training-operator-apf",
            label: "training-operator (4 threads, QPS 20/30, under an APF cap)",
            kind: PeerKind::TrainingOperator {
                qps: MATCHED_QPS,
                burst: MATCHED_BURST,
                threads: MATCHED_WORKERS,
            },
            apf: true,
        },
        Peer {
            id: "ours-apf",
            label: "tfjob-operator (4 workers, no client limit, under an APF cap)",
            kind: PeerKind::Ours {
                qps: 0,
                burst: 30,
                workers: MATCHED_WORKERS,
            },
            apf: true,
        },
        Peer {
            id: "raw",
            label: "raw limit (bare client, 16 concurrent creates)",
            kind: PeerKind::Raw,
            apf: false,
        },
    ];
    all.into_iter()
        .filter(|p| s.peers.iter().any(|id| id == p.id))
        .collect()
}

// ------------------------------------------------------------------ results

/// One peer × workload run, as written to `e2e.json`.
#[derive(Debug, Default, serde::Serialize)]
struct RunResult {
    workload: String,
    peer: String,
    /// "ok", or what went wrong ("timeout in running phase", "peer exited", ...).
    outcome: String,
    apply_s: Option<f64>,
    running_s: Option<f64>,
    succeeded_s: Option<f64>,
    cpu_s: Option<f64>,
    peak_rss_mb: Option<f64>,
    api_requests: u64,
    /// Requests other than watches per second, from the first request
    /// received to the last one completed (audit log timestamps).
    api_rate_per_s: Option<f64>,
    /// The client-side QPS limit the peer ran with, when it had one.
    client_qps: Option<f64>,
    /// Requests the API server's priority level dispatched and refused
    /// (429) in the `*-apf` runs (its `apiserver_flowcontrol_*` metrics).
    apf_dispatched: Option<u64>,
    apf_rejected: Option<u64>,
    apf_seats: Option<u64>,
    api_requests_by_verb: BTreeMap<String, u64>,
    api_errors_by_code: BTreeMap<String, u64>,
    already_exists: u64,
    duplicate_pod_creates: u64,
    duplicate_service_creates: u64,
    pods_created: u64,
    services_created: u64,
}

// ------------------------------------------------------------------ what the watches see

/// The state of the bench namespace as three watches see it. Duplicates are
/// counted per replica identity (job, type, index), not per name, so a peer
/// that used generated names would not hide one.
#[derive(Default)]
struct Observed {
    pod_phase: HashMap<String, String>,
    pod_uids: HashMap<String, HashSet<String>>,
    svc_uids: HashMap<String, HashSet<String>>,
    /// job name -> (running, succeeded, failed)
    jobs: HashMap<String, (bool, bool, bool)>,
    /// When a Pod's phase or a job's conditions last changed. A phase ends
    /// when its condition first holds, which is the last change before the
    /// poll that sees it hold: timing from here, not from the poll, keeps
    /// the poll interval out of every figure.
    changed_at: Option<Instant>,
}

fn replica_identity(meta: &kube::api::ObjectMeta) -> String {
    let labels = meta.labels.clone().unwrap_or_default();
    let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let id = format!(
        "{}/{}/{}",
        get("training.kubeflow.org/job-name"),
        get("training.kubeflow.org/replica-type").to_lowercase(),
        get("training.kubeflow.org/replica-index")
    );
    if id == "//" {
        meta.name.clone().unwrap_or_default()
    } else {
        id
    }
}

impl Observed {
    fn pod(&mut self, pod: &Pod, deleted: bool) {
        let name = pod.name_any();
        if let Some(uid) = pod.metadata.uid.clone() {
            self.pod_uids
                .entry(replica_identity(&pod.metadata))
                .or_default()
                .insert(uid);
        }
        let before = if deleted {
            self.pod_phase.remove(&name)
        } else {
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            self.pod_phase.insert(name.clone(), phase)
        };
        if before.as_ref() != self.pod_phase.get(&name) {
            self.changed_at = Some(Instant::now());
        }
    }
    fn service(&mut self, svc: &Service) {
        if let Some(uid) = svc.metadata.uid.clone() {
            self.svc_uids
                .entry(replica_identity(&svc.metadata))
                .or_default()
                .insert(uid);
        }
    }
    fn job(&mut self, job: &DynamicObject, deleted: bool) {
        let name = job.name_any();
        let before = if deleted {
            self.jobs.remove(&name)
        } else {
            let is_true = |t: &str| {
                job.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
            };
            self.jobs.insert(
                name.clone(),
                (is_true("Running"), is_true("Succeeded"), is_true("Failed")),
            )
        };
        if before.as_ref() != self.jobs.get(&name) {
            self.changed_at = Some(Instant::now());
        }
    }
    fn running_pods(&self) -> usize {
        self.pod_phase.values().filter(|p| *p == "Running").count()
    }
    fn duplicates(uids: &HashMap<String, HashSet<String>>) -> u64 {
        uids.values()
            .map(|u| u.len().saturating_sub(1) as u64)
            .sum()
    }
}

fn spawn_watch<K, F>(
    api: Api<K>,
    state: Arc<Mutex<Observed>>,
    apply: F,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(&mut Observed, &K, bool) + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let Ok(mut s) = state.lock() else { return };
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => apply(&mut s, &o, false),
                watcher::Event::Delete(o) => apply(&mut s, &o, true),
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
    })
}

// ------------------------------------------------------------------ cluster helpers

async fn client_from(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("failed to read {}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn tfjob_resource() -> ApiResource {
    ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "TFJob".into(),
        plural: "tfjobs".into(),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if done().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn delete_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    match nss.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    wait_until(
        &format!("namespace {name} to be gone"),
        Duration::from_secs(600),
        || {
            let nss = nss.clone();
            async move { Ok(nss.get_opt(name).await?.is_none()) }
        },
    )
    .await
}

async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match nss.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    // The ServiceAccount admission plugin refuses every Pod of a namespace
    // (403, "error looking up service account") until the controller-manager
    // has made its `default` ServiceAccount: a peer started before that
    // would be charged for 403s and retries that are the harness's doing.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_until(
        &format!("the default ServiceAccount of namespace {name}"),
        Duration::from_secs(60),
        || {
            let accounts = accounts.clone();
            async move { Ok(accounts.get_opt("default").await?.is_some()) }
        },
    )
    .await
}

/// Deletes the TFJob CRD (whoever's it is) and installs the one from `file`.
async fn reinstall_crd(client: &Client, file: &Path) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.delete(CRD_NAME, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    wait_until(
        "the old TFJob CRD to be gone",
        Duration::from_secs(300),
        || {
            let crds = crds.clone();
            async move { Ok(crds.get_opt(CRD_NAME).await?.is_none()) }
        },
    )
    .await?;
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("failed to read {}", file.display()))?;
    let crd = serde_yaml::Deserializer::from_str(&text)
        .map(serde_yaml::Value::deserialize)
        .find_map(|doc| doc.ok().filter(|d| !d.is_null()))
        .context("no YAML document in the CRD file")?;
    let crd: CustomResourceDefinition = serde_yaml::from_value(crd)?;
    crds.create(&PostParams::default(), &crd).await?;
    wait_until(
        "the TFJob CRD to be Established",
        Duration::from_secs(60),
        || {
            let crds = crds.clone();
            async move {
                let crd = crds.get(CRD_NAME).await?;
                Ok(crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                }))
            }
        },
    )
    .await?;
    // Established can come a moment before the resource is served.
    let jobs: Api<DynamicObject> = Api::all_with(client.clone(), &tfjob_resource());
    wait_until("tfjobs to be served", Duration::from_secs(30), || {
        let jobs = jobs.clone();
        async move { Ok(jobs.list(&ListParams::default().limit(1)).await.is_ok()) }
    })
    .await?;
    warm_up_tfjob_writes(client).await
}

/// Waits out the API server's readiness for writes to a new CRD. Measured
/// with curl on the local control plane (2026-11-24), for our CRD and
/// Kubeflow's alike: a create sent within a second of `Established` took
/// 2.03 s, even after a LIST had already answered 200; the next creates took
/// 8-11 ms, and a first create sent 3 s after `Established` took 8 ms. A
/// cluster pays this once per CRD install, long before any job; a run must not
/// charge it to whichever peer writes first (ours is ready within a second
/// of the reset, training-operator later, and the raw peer writes no TFJob).
/// A server-side dry-run create goes through the same wait and stores
/// nothing.
async fn warm_up_tfjob_writes(client: &Client) -> anyhow::Result<()> {
    let jobs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &tfjob_resource());
    let probe = TfJobFixture::new("bench-warm-up")
        .namespace("default")
        .workers(1)
        .build();
    let probe: DynamicObject = serde_json::from_value(serde_json::to_value(&probe)?)?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    jobs.create(&dry_run, &probe)
        .await
        .context("a dry-run create of a TFJob after installing the CRD")?;
    eprintln!(
        "  (first TFJob write after the CRD install: {:.2} s, waited out before the run)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

// ------------------------------------------------------------------ peer processes

/// A started peer: the child process and where its output goes.
struct PeerProcess {
    child: Child,
    log: PathBuf,
}

impl PeerProcess {
    fn spawn(mut cmd: Command, log: &Path, stdin: bool) -> anyhow::Result<Self> {
        let out = std::fs::File::create(log)?;
        cmd.stdout(out.try_clone()?).stderr(out);
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() });
        let child = cmd
            .spawn()
            .with_context(|| format!("failed to start {cmd:?}"))?;
        Ok(Self {
            child,
            log: log.to_owned(),
        })
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let last = tail(&self.log, 1);
            bail!(
                "the peer exited ({status}): {last} (log: {})",
                self.log.display()
            );
        }
        Ok(())
    }
    fn log_contains(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|s| s.contains(needle))
    }
    /// CPU seconds (user + system) from `/proc/<pid>/stat`; clock ticks are
    /// 100 per second on every Linux this runs on (USER_HZ).
    fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        let after = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        Some((utime + stime) / 100.0)
    }
    /// Peak resident set size (VmHWM) in MB.
    fn peak_rss_mb(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    }
    /// SIGTERM, then SIGKILL after 20 s.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// True when `GET http://127.0.0.1:{port}{path}` answers 200.
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 32];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).split_whitespace().nth(1) == Some("200")
}

/// What training-operator needs out of the cluster before it starts its
/// controllers (notes/local-control-plane.md): the webhook Secret (its cert
/// rotator fills it) and a ValidatingWebhookConfiguration of that name. Ours
/// has one webhook that matches no real resource, so no TFJob create ever waits
/// on a webhook that cannot be reached from the API server: the bench measures
/// the controller, not a broken admission path.
async fn prepare_training_operator(client: &Client) -> anyhow::Result<()> {
    ensure_namespace(client, KUBEFLOW_NS).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), KUBEFLOW_NS);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "training-operator-webhook-cert", "namespace": KUBEFLOW_NS}
    }))?;
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let vwc: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "validator.training-operator.kubeflow.org"},
        "webhooks": [{
            "name": "validator.tfjob.training-operator.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/validate-bench-none"},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 1,
            "rules": [{"apiGroups": ["bench.invalid"], "apiVersions": ["v1"],
                       "operations": ["CREATE"], "resources": ["none"]}]
        }]
    }))?;
    match vwcs.create(&PostParams::default(), &vwc).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Copies the rotator's certificates from the Secret to the directory its
/// webhook server reads (a volume mount in a cluster). Returns whether they are there.
async fn sync_kubeflow_certs(client: &Client) -> anyhow::Result<bool> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), KUBEFLOW_NS);
    let Some(secret) = secrets.get_opt("training-operator-webhook-cert").await? else {
        return Ok(false);
    };
    let data = secret.data.unwrap_or_default();
    let keys = ["tls.crt", "tls.key", "ca.crt"];
    if !keys
        .iter()
        .all(|k| data.get(*k).is_some_and(|v| !v.0.is_empty()))
    {
        return Ok(false);
    }
    std::fs::create_dir_all(KUBEFLOW_CERT_DIR)?;
    for k in keys {
        let path = Path::new(KUBEFLOW_CERT_DIR).join(k);
        let bytes = &data[k].0;
        if std::fs::read(&path).ok().as_ref() != Some(bytes) {
            std::fs::write(&path, bytes)?;
        }
    }
    Ok(true)
}

/// Starts `peer` and waits until it is ready to work (caches synced, workers
/// started), so start-up is not part of the measured times.
async fn start_peer(
    s: &Settings,
    admin: &Client,
    peer: &Peer,
    workload: &Workload,
    logs: &Path,
) -> anyhow::Result<PeerProcess> {
    let kubeconfig = if peer.apf {
        apf_identity(s, admin).await?
    } else {
        s.cluster_dir.join("kubeconfigs").join(PEER_USER)
    };
    let log = logs.join(format!("{}-{}.log", workload.id, peer.id));
    let deadline = Duration::from_secs(180);
    match peer.kind {
        PeerKind::TrainingOperator {
            qps,
            burst,
            threads,
        } => {
            prepare_training_operator(admin).await?;
            let (metrics, probe, webhook) = (free_port()?, free_port()?, free_port()?);
            let mut cmd = Command::new(s.kubeflow_dir.join("bin/training-operator.v1"));
            cmd.env("KUBECONFIG", &kubeconfig)
                .env_remove("MY_POD_NAMESPACE")
                .arg("--enable-scheme=tfjob")
                .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
                .arg(format!("--health-probe-bind-address=127.0.0.1:{probe}"))
                .arg(format!("--webhook-server-port={webhook}"))
                .arg(format!("--controller-threads={threads}"));
            // v1.9.0 has no QPS flags (v1.9.1 added them): its client gets
            // controller-runtime's GetConfig default of 20/30, which is the
            // matched setting. Pass them only to ask for something else.
            if (qps, burst) != (20, 30) {
                cmd.arg(format!("--kube-api-qps={qps}"))
                    .arg(format!("--kube-api-burst={burst}"));
            }
            let mut p = PeerProcess::spawn(cmd, &log, false)?;
            let started = Instant::now();
            loop {
                p.check_alive()?;
                let certs = sync_kubeflow_certs(admin).await?;
                if certs && http_ok(probe, "/readyz") && p.log_contains("Starting workers") {
                    return Ok(p);
                }
                if started.elapsed() > deadline {
                    p.stop();
                    bail!(
                        "training-operator not ready after {deadline:?} (log: {})",
                        log.display()
                    );
                }
                tokio::time::sleep(POLL).await;
            }
        }
        PeerKind::Ours {
            qps,
            burst,
            workers,
        } => {
            let (metrics, probe) = (free_port()?, free_port()?);
            let bin = match (peer.id, &s.base_operator_bin) {
                ("ours-base", Some(base)) => base,
                ("ours-base", None) => bail!("ours-base needs BENCH_BASE_OPERATOR_BIN"),
                _ => &s.operator_bin,
            };
            let mut cmd = Command::new(bin);
            cmd.env("KUBECONFIG", &kubeconfig)
                .arg("run")
                .arg("--leader-elect=false")
                .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
                .arg(format!("--health-probe-bind-address=127.0.0.1:{probe}"))
                .arg(format!("--workers={workers}"))
                .arg(format!("--kube-api-qps={qps}"))
                .arg(format!("--kube-api-burst={burst}"));
            let mut p = PeerProcess::spawn(cmd, &log, false)?;
            let started = Instant::now();
            loop {
                p.check_alive()?;
                if http_ok(probe, "/readyz") {
                    return Ok(p);
                }
                if started.elapsed() > deadline {
                    p.stop();
                    bail!(
                        "tfjob-operator not ready after {deadline:?} (log: {})",
                        log.display()
                    );
                }
                tokio::time::sleep(POLL).await;
            }
        }
        PeerKind::OursAtRateOf { .. } => {
            bail!("the rate of the peer to match was not measured in this workload")
        }
        PeerKind::Raw => {
            let plan = logs.join(format!("{}-raw-plan.json", workload.id));
            let jobs: Vec<Value> = workload
                .job_names()
                .into_iter()
                .map(|name| json!({"name": name, "replicas": workload.replicas()}))
                .collect();
            std::fs::write(
                &plan,
                serde_json::to_vec(&json!({"namespace": BENCH_NS, "jobs": jobs}))?,
            )?;
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.env("KUBECONFIG", &kubeconfig)
                .arg("raw-peer")
                .arg(&plan);
            let mut p = PeerProcess::spawn(cmd, &log, true)?;
            let started = Instant::now();
            loop {
                p.check_alive()?;
                if p.log_contains("raw-peer: ready") {
                    return Ok(p);
                }
                if started.elapsed() > deadline {
                    p.stop();
                    bail!("raw peer not ready after {deadline:?}");
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

// ------------------------------------------------------------------ the raw peer

/// `e2e raw-peer <plan.json>`: waits for "go" on stdin, then creates every
/// Pod and headless Service of the plan, `RAW_CONCURRENCY` at a time, and
/// idles until stopped (so its CPU and RSS are read like any other peer's).
async fn raw_peer(plan: &Path) -> anyhow::Result<()> {
    let plan: Value = serde_json::from_slice(&std::fs::read(plan)?)?;
    let ns = plan["namespace"]
        .as_str()
        .context("plan without namespace")?
        .to_owned();
    let client = Client::try_default().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut objects: Vec<(Pod, Service)> = Vec::new();
    for job in plan["jobs"].as_array().context("plan without jobs")? {
        let name = job["name"].as_str().context("job without name")?;
        let replicas: Vec<(String, i64)> = serde_json::from_value(job["replicas"].clone())?;
        let cluster: serde_json::Map<String, Value> = replicas
            .iter()
            .map(|(t, n)| {
                let addrs = (0..*n)
                    .map(|i| json!(format!("{name}-{t}-{i}.{ns}.svc:2222")))
                    .collect();
                (t.clone(), Value::Array(addrs))
            })
            .collect();
        for (t, n) in &replicas {
            for i in 0..*n {
                objects.push(raw_objects(&ns, name, t, i, &cluster)?);
            }
        }
    }
    eprintln!("raw-peer: ready ({} replicas)", objects.len());
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let started = Instant::now();
    let writes = objects.into_iter().flat_map(|(pod, svc)| {
        let (pods, svcs) = (pods.clone(), svcs.clone());
        [
            futures::future::Either::Left(async move {
                pods.create(&PostParams::default(), &pod).await.map(|_| ())
            }),
            futures::future::Either::Right(async move {
                svcs.create(&PostParams::default(), &svc).await.map(|_| ())
            }),
        ]
    });
    let results: Vec<Result<(), kube::Error>> = stream::iter(writes)
        .buffer_unordered(RAW_CONCURRENCY)
        .collect()
        .await;
    let errors = results.iter().filter(|r| r.is_err()).count();
    eprintln!(
        "raw-peer: {} creates, {errors} errors, in {:.2} s",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    // Idle until stopped.
    let _ = std::io::stdin().lock().read_line(&mut line);
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// The Pod and headless Service an operator would make for one replica: the
/// same labels, port and a TF_CONFIG of the same size.
fn raw_objects(
    ns: &str,
    job: &str,
    rtype: &str,
    index: i64,
    cluster: &serde_json::Map<String, Value>,
) -> anyhow::Result<(Pod, Service)> {
    let name = format!("{job}-{rtype}-{index}");
    let labels = json!({
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": index.to_string(),
    });
    let tf_config = json!({"cluster": cluster, "task": {"type": rtype, "index": index}, "environment": "cloud"});
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "tensorflow",
                "image": "tensorflow/tensorflow:2.16.1",
                "ports": [{"name": "tfjob-port", "containerPort": 2222}],
                "env": [{"name": "TF_CONFIG", "value": tf_config.to_string()}]
            }]
        }
    }))?;
    let svc = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}]
        }
    }))?;
    Ok((pod, svc))
}

// ------------------------------------------------------------------ audit log

/// Offset of the end of the audit log now, so a run reads only its own lines.
fn audit_offset(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Counts the peer user's requests logged after `from`.
fn count_audit(path: &Path, from: u64, r: &mut RunResult) -> anyhow::Result<()> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    f.seek(SeekFrom::Start(from))?;
    let (mut first, mut last, mut counted) = (None, None, 0u64);
    for line in std::io::BufReader::new(f).lines() {
        let Ok(event) = serde_json::from_str::<Value>(&line?) else {
            continue;
        };
        if event["user"]["username"] != PEER_USER {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let time = |field: &str| event[field].as_str()?.parse::<jiff::Timestamp>().ok();
        if verb != "watch"
            && let (Some(received), Some(done)) =
                (time("requestReceivedTimestamp"), time("stageTimestamp"))
        {
            counted += 1;
            first = Some(first.map_or(received, |f: jiff::Timestamp| f.min(received)));
            last = Some(last.map_or(done, |l: jiff::Timestamp| l.max(done)));
        }
        let resource = event["objectRef"]["resource"].as_str().unwrap_or("-");
        let sub = event["objectRef"]["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        r.api_requests += 1;
        *r.api_requests_by_verb
            .entry(format!("{verb} {resource}{sub}"))
            .or_default() += 1;
        if code >= 400 {
            *r.api_errors_by_code
                .entry(format!("{code} {verb} {resource}{sub}"))
                .or_default() += 1;
        }
        if code == 409 && verb == "create" {
            r.already_exists += 1;
        }
    }
    if let (Some(first), Some(last)) = (first, last) {
        let window = last.duration_since(first).as_secs_f64();
        if window > 0.0 {
            r.api_rate_per_s = Some(counted as f64 / window);
        }
    }
    Ok(())
}

/// Installs the APF cap for the peer's user (see [`APF_LEVEL`]) and waits
/// until the API server's flow-control configuration has it.
async fn install_apf_cap(admin: &Client, queue_length: u32) -> anyhow::Result<()> {
    let levels: Api<PriorityLevelConfiguration> = Api::all(admin.clone());
    let schemas: Api<FlowSchema> = Api::all(admin.clone());
    remove_apf_cap(admin).await?;
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": {"name": APF_LEVEL},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1,
            "lendablePercent": 0,
            "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Queue", "queuing": {
                "queues": 1, "handSize": 1, "queueLengthLimit": queue_length
            }}
        }}
    }))?;
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": APF_LEVEL},
        "spec": {
            "priorityLevelConfiguration": {"name": APF_LEVEL},
            "matchingPrecedence": 100,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "User", "user": {"name": PEER_USER}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                   "namespaces": ["*"], "clusterScope": true}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
            }]
        }
    }))?;
    levels.create(&PostParams::default(), &level).await?;
    schemas.create(&PostParams::default(), &schema).await?;
    // The API server's config controller marks the FlowSchema's condition
    // once it has digested it.
    wait_until(
        "the APF FlowSchema to be in use",
        Duration::from_secs(30),
        || {
            let schemas = schemas.clone();
            async move {
                let fs = schemas.get(APF_LEVEL).await?;
                Ok(fs.status.and_then(|s| s.conditions).is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_.as_deref() == Some("Dangling")
                            && c.status.as_deref() == Some("False")
                    })
                }))
            }
        },
    )
    .await
}

/// A kubeconfig for user `bench-peer` in group [`APF_GROUP`] (not
/// `system:masters`, so APF applies), signed by the cluster's CA, with
/// cluster-admin through a ClusterRoleBinding.
async fn apf_identity(s: &Settings, admin: &Client) -> anyhow::Result<PathBuf> {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let pki = s.cluster_dir.join("pki");
    let dir = pki.join("bench-apf");
    std::fs::create_dir_all(&dir)?;
    let (key, csr, crt, ext) = (
        dir.join("peer.key"),
        dir.join("peer.csr"),
        dir.join("peer.crt"),
        dir.join("peer.ext"),
    );
    // An X.509 v3 certificate (an extension file): rustls refuses v1.
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=clientAuth\n",
    )?;
    let subject = format!("/O={APF_GROUP}/CN={PEER_USER}");
    for args in [
        vec![
            "genrsa".into(),
            "-out".into(),
            key.display().to_string(),
            "2048".into(),
        ],
        vec![
            "req".into(),
            "-new".into(),
            "-key".into(),
            key.display().to_string(),
            "-subj".into(),
            subject,
            "-out".into(),
            csr.display().to_string(),
        ],
        vec![
            "x509".into(),
            "-req".into(),
            "-in".into(),
            csr.display().to_string(),
            "-CA".into(),
            pki.join("ca.crt").display().to_string(),
            "-CAkey".into(),
            pki.join("ca.key").display().to_string(),
            "-CAcreateserial".into(),
            "-days".into(),
            "2".into(),
            "-sha256".into(),
            "-extfile".into(),
            ext.display().to_string(),
            "-out".into(),
            crt.display().to_string(),
        ],
    ] {
        let out = Command::new("openssl").args(&args).output()?;
        if !out.status.success() {
            bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let peer_config = std::fs::read_to_string(s.cluster_dir.join("kubeconfigs").join(PEER_USER))?;
    let server = peer_config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .context("no server in the bench-peer kubeconfig")?;
    let kubeconfig = s.cluster_dir.join("kubeconfigs/bench-peer-apf");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority: {}\n\
             users:\n- name: {PEER_USER}\n  user:\n    client-certificate: {}\n    client-key: {}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: {PEER_USER}}}\ncurrent-context: c\n",
            pki.join("ca.crt").display(),
            crt.display(),
            key.display()
        ),
    )?;
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bench-peers-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": APF_GROUP}]
    }))?;
    match bindings.create(&PostParams::default(), &binding).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(kubeconfig)
}

async fn remove_apf_cap(admin: &Client) -> anyhow::Result<()> {
    let levels: Api<PriorityLevelConfiguration> = Api::all(admin.clone());
    let schemas: Api<FlowSchema> = Api::all(admin.clone());
    for result in [
        schemas
            .delete(APF_LEVEL, &DeleteParams::default())
            .await
            .map(drop),
        levels
            .delete(APF_LEVEL, &DeleteParams::default())
            .await
            .map(drop),
    ] {
        match result {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The API server's counters of the cap's priority level: (dispatched, rejected).
/// The level's dispatched and refused request counters, and its seats
/// (`apiserver_flowcontrol_nominal_limit_seats`).
async fn apf_counts(admin: &Client) -> anyhow::Result<(u64, u64, u64)> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = admin.request_text(req).await?;
    let sum = |metric: &str| -> u64 {
        text.lines()
            .filter(|l| {
                l.starts_with(metric) && l.contains(&format!("priority_level=\"{APF_LEVEL}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    Ok((
        sum("apiserver_flowcontrol_dispatched_requests_total"),
        sum("apiserver_flowcontrol_rejected_requests_total"),
        sum("apiserver_flowcontrol_nominal_limit_seats"),
    ))
}

// ------------------------------------------------------------------ one run

async fn run_one(
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
        tokio::task::spawn_blocking(move || p.stop()).await?;
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
async fn measure(
    s: &Settings,
    admin: &Client,
    peer: &Peer,
    workload: &Workload,
    p: &mut PeerProcess,
    state: &Arc<Mutex<Observed>>,
    r: &mut RunResult,
) -> anyhow::Result<()> {
    let raw = matches!(peer.kind, PeerKind::Raw);
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

async fn phase(
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

// ------------------------------------------------------------------ noise

/// Creates `count` unrelated Pods in `NOISE_NS_COUNT` other namespaces and
/// waits until KWOK has them all Running, so no run pays for their start-up.
async fn create_noise(admin: &Client, count: usize, timeout: Duration) -> anyhow::Result<()> {
    for i in 0..NOISE_NS_COUNT {
        ensure_namespace(admin, &format!("bench-noise-{i}")).await?;
    }
    let started = Instant::now();
    let results: Vec<Result<(), kube::Error>> = stream::iter((0..count).map(|i| {
        let admin = admin.clone();
        async move {
            let ns = format!("bench-noise-{}", i % NOISE_NS_COUNT);
            let pods: Api<Pod> = Api::namespaced(admin, &ns);
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("noise-{i:05}"), "labels": {"app": "bench-noise"}},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
            }))
            .map_err(kube::Error::SerdeError)?;
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => Ok(()),
                Err(e) if is_conflict(&e) => Ok(()),
                Err(e) => Err(e),
            }
        }
    }))
    .buffer_unordered(HARNESS_CONCURRENCY)
    .collect()
    .await;
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        bail!("failed to create a noise pod: {e}");
    }
    eprintln!(
        "noise: {count} pods created in {:.1} s; waiting for Running",
        started.elapsed().as_secs_f64()
    );
    let pods: Api<Pod> = Api::all(admin.clone());
    wait_until("the noise pods to be Running", timeout, || {
        let pods = pods.clone();
        async move {
            let lp = ListParams::default()
                .labels("app=bench-noise")
                .fields("status.phase!=Running");
            Ok(pods.list_metadata(&lp).await?.items.is_empty())
        }
    })
    .await?;
    eprintln!(
        "noise: {count} pods Running after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

// ------------------------------------------------------------------ report

fn fmt_s(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "-".into(),
    }
}

fn report(results: &[RunResult], workloads: &[Workload], peers: &[Peer]) -> String {
    let mut out = String::new();
    for w in workloads {
        let rows: Vec<&RunResult> = results.iter().filter(|r| r.workload == w.id).collect();
        if rows.is_empty() {
            continue;
        }
        out += &format!("\n## {}: {}\n\n", w.id, w.title);
        out += "| peer | apply → all Running (s) | chief exit → all Succeeded (s) | CPU (s) | peak RSS (MB) | API requests | requests/s | duplicate creates | API errors | outcome |\n";
        out += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
        for r in &rows {
            let label = peers
                .iter()
                .find(|p| p.id == r.peer)
                .map(|p| p.label)
                .unwrap_or("?");
            let mut label = label.to_owned();
            if let Some(qps) = r.client_qps {
                label += &format!(" [QPS {qps:.0}]");
            }
            if let (Some(d), Some(j)) = (r.apf_dispatched, r.apf_rejected) {
                let seats = r.apf_seats.unwrap_or_default();
                label += &format!(" [APF: {seats} seats, {d} dispatched, {j} refused]");
            }
            out += &format!(
                "| {label} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                fmt_s(r.running_s),
                fmt_s(r.succeeded_s),
                r.cpu_s
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_else(|| "-".into()),
                r.peak_rss_mb
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into()),
                r.api_requests,
                fmt_s(r.api_rate_per_s),
                r.duplicate_pod_creates + r.duplicate_service_creates + r.already_exists,
                r.api_errors_by_code.values().sum::<u64>(),
                r.outcome
            );
        }
        out += &breakdown(&rows, w);
        let get = |id: &str| rows.iter().find(|r| r.peer == id).copied();
        let pairs = [
            (
                "ours-default",
                "training-operator-default",
                "ours (defaults) / training-operator (defaults)",
            ),
            (
                "ours-matched",
                "training-operator-matched",
                "ours (matched) / training-operator (matched)",
            ),
            (
                "ours-at-to-rate",
                "training-operator-matched",
                "ours (at its measured rate) / training-operator (matched)",
            ),
            (
                "ours-apf",
                "training-operator-apf",
                "ours (APF cap) / training-operator (APF cap)",
            ),
            ("ours-default", "raw", "ours (defaults) / raw limit"),
            ("ours-matched", "raw", "ours (matched) / raw limit"),
        ];
        let mut header = false;
        for (a, b, label) in pairs {
            let (Some(a), Some(b)) = (get(a), get(b)) else {
                continue;
            };
            if !header {
                out += "\n| ratio | running time | succeeded time | CPU | peak RSS | API requests |\n|---|---:|---:|---:|---:|---:|\n";
                header = true;
            }
            out += &format!(
                "| {label} | {} | {} | {} | {} | {} |\n",
                ratio(a.running_s, b.running_s),
                ratio(a.succeeded_s, b.succeeded_s),
                ratio(a.cpu_s, b.cpu_s),
                ratio(a.peak_rss_mb, b.peak_rss_mb),
                ratio(Some(a.api_requests as f64), Some(b.api_requests as f64)),
            );
        }
    }
    out
}

/// The API requests of every peer of one workload by verb and resource (from
/// the audit log), with the count per job: one row per `verb resource`, one
/// column per peer.
fn breakdown(rows: &[&RunResult], w: &Workload) -> String {
    let kinds: std::collections::BTreeSet<&String> = rows
        .iter()
        .flat_map(|r| r.api_requests_by_verb.keys())
        .collect();
    if kinds.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\nAPI requests by verb and resource (audit log; per job in brackets, {} jobs):\n\n| request |",
        w.jobs
    );
    for r in rows {
        out += &format!(" {} |", r.peer);
    }
    out += "\n|---|";
    out += &"---:|".repeat(rows.len());
    out += "\n";
    let per_job = |n: u64| n as f64 / w.jobs.max(1) as f64;
    for kind in kinds {
        out += &format!("| {kind} |");
        for r in rows {
            let n = r.api_requests_by_verb.get(kind).copied().unwrap_or(0);
            out += &format!(" {n} ({:.2}) |", per_job(n));
        }
        out += "\n";
    }
    out += "| **total** |";
    for r in rows {
        out += &format!(" **{}** ({:.2}) |", r.api_requests, per_job(r.api_requests));
    }
    out += "\n";
    out
}

// ------------------------------------------------------------------ main

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if let Some(i) = args.iter().position(|a| a == "raw-peer") {
        let plan = args.get(i + 1).context("usage: e2e raw-peer <plan.json>")?;
        return runtime.block_on(raw_peer(Path::new(plan)));
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
            if let PeerKind::Ours { qps, .. } = peer.kind
                && qps > 0
            {
                r.client_qps = Some(f64::from(qps));
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
    Ok(())
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
                    qps,
                    burst: qps + qps / 2,
                    workers,
                },
                ..peer.clone()
            }
        }
        None => peer.clone(),
    }
}

fn write_json(s: &Settings, results: &[RunResult]) -> anyhow::Result<()> {
    let doc = json!({
        "training_operator_version": s.kubeflow_version,
        "jobs": s.jobs,
        "noise_pods": s.noise_pods,
        "big_workers": s.big_workers,
        "phase_timeout_s": s.phase_timeout.as_secs(),
        "matched": {"qps": MATCHED_QPS, "burst": MATCHED_BURST, "workers": MATCHED_WORKERS},
        "raw_concurrency": RAW_CONCURRENCY,
        "runs": results,
    });
    std::fs::write(&s.out, serde_json::to_vec_pretty(&doc)?)?;
    Ok(())
}
