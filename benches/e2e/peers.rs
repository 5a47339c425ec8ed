//! The operators compared (ours, Kubeflow's training-operator, the raw
//! client) and how each is started, readied and stopped.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::apf::apf_identity;
use crate::cluster::{ensure_namespace, is_conflict};
use crate::settings::{Settings, Workload};
use crate::{
    BENCH_NS, KUBEFLOW_CERT_DIR, KUBEFLOW_NS, MATCHED_BURST, MATCHED_QPS, MATCHED_WORKERS,
    PEER_USER, POLL,
};

#[derive(Clone, Copy, Debug)]
pub(crate) enum PeerKind {
    TrainingOperator {
        qps: u32,
        burst: u32,
        threads: u32,
    },
    Ours {
        /// `--kube-api-qps`: per client (ours has three, as client-go has
        /// one per REST client); 0 for none.
        qps: u32,
        burst: u32,
        workers: u32,
        /// `--kube-api-qps-total`: one bucket for the whole process (burst
        /// 1.5× of it); 0 for none.
        qps_total: u32,
    },
    /// Ours with one process-wide client-side limit (`--kube-api-qps-total`)
    /// equal to the request rate the peers `of` (the first that ran in this
    /// workload) were measured sending: the same rate, whatever the clients.
    OursAtRateOf {
        of: &'static [&'static str],
        workers: u32,
    },
    /// The bare client's creates; `watched`: with client-go's informers
    /// on ours' watches beside it ([`PeerProcess::watcher`]); `status`: it
    /// also watches its Pods and writes each job's status (`raw-status`).
    Raw {
        watched: bool,
        status: bool,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Peer {
    pub(crate) id: &'static str,
    pub(crate) label: &'static str,
    pub(crate) kind: PeerKind,
    /// Run under an API Priority and Fairness cap for the peer's user
    /// ([`install_apf_cap`]).
    pub(crate) apf: bool,
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
pub(crate) const APF_LEVEL: &str = "bench-peer-cap";
pub(crate) const APF_GROUP: &str = "bench-peers";

pub(crate) fn peers(s: &Settings) -> Vec<Peer> {
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
                qps_total: 0,
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
                qps_total: 0,
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
                qps_total: 0,
            },
            apf: false,
        },
        Peer {
            id: "ours-at-to-rate",
            label: "tfjob-operator (4 workers, one total client cap = training-operator's measured request rate)",
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
                qps_total: 0,
            },
            apf: true,
        },
        Peer {
            id: "raw",
            label: "raw limit (bare client, 16 concurrent creates)",
            kind: PeerKind::Raw {
                watched: false,
                status: false,
            },
            apf: false,
        },
        Peer {
            id: "raw-status",
            label: "raw limit writing status (the bare client, a Pod watch, each job's Running and Succeeded status written once)",
            kind: PeerKind::Raw {
                watched: false,
                status: true,
            },
            apf: false,
        },
        Peer {
            id: "raw-watching",
            label: "raw limit, with client-go's informers on ours' watches beside it (their CPU and RSS apart)",
            kind: PeerKind::Raw {
                watched: true,
                status: false,
            },
            apf: false,
        },
    ];
    // In the order listed, a peer listed twice running twice
    // (`same_run`: alternating runs for same-run medians).
    s.peers
        .iter()
        .filter_map(|id| all.iter().find(|p| p.id == id).cloned())
        .collect()
}

/// A started peer: the child process and where its output goes.
pub(crate) struct PeerProcess {
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
    /// Where our operator serves `/metrics` (plain HTTP); other peers: none.
    pub(crate) metrics_port: Option<u16>,
    /// A process that watches beside the peer (`raw-watching`: client-go's
    /// informers), measured apart and stopped with it.
    pub(crate) watcher: Option<Box<PeerProcess>>,
}

impl PeerProcess {
    pub(crate) fn spawn(mut cmd: Command, log: &Path, stdin: bool) -> anyhow::Result<Self> {
        let out = std::fs::File::create(log)?;
        cmd.stdout(out.try_clone()?).stderr(out);
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() });
        let child = cmd
            .spawn()
            .with_context(|| format!("failed to start {cmd:?}"))?;
        Ok(Self {
            child,
            log: log.to_owned(),
            metrics_port: None,
            watcher: None,
        })
    }
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
    pub(crate) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let last = tail(&self.log, 1);
            bail!(
                "the peer exited ({status}): {last} (log: {})",
                self.log.display()
            );
        }
        Ok(())
    }
    /// Polls `ready` until it holds. When the process exits first, or
    /// `deadline` passes, it is stopped (its watcher with it: nothing is
    /// left running) and the error names `what` and the log.
    pub(crate) async fn until_ready(
        mut self,
        what: &str,
        deadline: Duration,
        ready: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<Self> {
        let started = Instant::now();
        loop {
            if let Err(e) = self.check_alive() {
                self.stop();
                return Err(e);
            }
            if ready(&self) {
                return Ok(self);
            }
            if started.elapsed() > deadline {
                let log = self.log.display().to_string();
                self.stop();
                bail!("{what} not ready after {deadline:?} (log: {log})");
            }
            tokio::time::sleep(POLL).await;
        }
    }
    /// The sum of every series of counter `name` on our operator's
    /// `/metrics` (0 when it has none yet); None when there is no endpoint
    /// or it did not answer.
    pub(crate) fn counter(&self, name: &str) -> Option<u64> {
        self.counter_where(name, "")
    }
    /// The sum of `name`'s series whose labels contain `label` (e.g.
    /// `reason="queue_full"`; empty: every series).
    pub(crate) fn counter_where(&self, name: &str, label: &str) -> Option<u64> {
        let text = http_get(self.metrics_port?, "/metrics")?;
        Some(sum_series_where(&text, name, label) as u64)
    }
    pub(crate) fn log_contains(&self, needle: &str) -> bool {
        std::fs::read_to_string(&self.log).is_ok_and(|s| s.contains(needle))
    }
    /// CPU seconds (user + system) from `/proc/<pid>/stat`; clock ticks are
    /// 100 per second on every Linux this runs on (USER_HZ).
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        let after = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = after.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        Some((utime + stime) / 100.0)
    }
    /// Peak resident set size (VmHWM) in MB.
    pub(crate) fn peak_rss_mb(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb / 1024.0)
    }
    /// SIGTERM, then SIGKILL after 20 s; the watcher first.
    pub(crate) fn stop(mut self) {
        if let Some(w) = self.watcher.take() {
            w.stop();
        }
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

pub(crate) fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The body of `GET http://127.0.0.1:{port}{path}` when it answers 200.
pub(crate) fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_owned())
}

/// Sum of the samples of `name` in Prometheus text whose labels contain
/// `label` (empty: every label set).
pub(crate) fn sum_series_where(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.contains(label))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// True when `GET http://127.0.0.1:{port}{path}` answers 200.
pub(crate) fn http_ok(port: u16, path: &str) -> bool {
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
pub(crate) async fn prepare_training_operator(client: &Client) -> anyhow::Result<()> {
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
pub(crate) async fn sync_kubeflow_certs(client: &Client) -> anyhow::Result<bool> {
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
pub(crate) async fn start_peer(
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
            // Not `until_ready`: each poll also copies the certificates,
            // which needs the API server (async).
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
            qps_total,
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
            if qps_total > 0 {
                cmd.arg(format!("--kube-api-qps-total={qps_total}"))
                    .arg(format!(
                        "--kube-api-burst-total={}",
                        qps_total + qps_total / 2
                    ));
            }
            let mut p = PeerProcess::spawn(cmd, &log, false)?;
            p.metrics_port = Some(metrics);
            p.until_ready("tfjob-operator", deadline, |_| http_ok(probe, "/readyz"))
                .await
        }
        PeerKind::OursAtRateOf { .. } => {
            bail!("the rate of the peer to match was not measured in this workload")
        }
        PeerKind::Raw { watched, status } => {
            // The watcher first, synced before the creates can start: it
            // must see the whole run, as ours does.
            let watcher = if watched {
                Some(Box::new(
                    start_watcher(s, &kubeconfig, workload, logs).await?,
                ))
            } else {
                None
            };
            let plan = logs.join(format!("{}-raw-plan.json", workload.id));
            let jobs: Vec<Value> = workload
                .job_names()
                .into_iter()
                .map(|name| json!({"name": name, "replicas": workload.replicas()}))
                .collect();
            std::fs::write(
                &plan,
                serde_json::to_vec(
                    &json!({"namespace": BENCH_NS, "jobs": jobs, "status": status}),
                )?,
            )?;
            let mut cmd = Command::new(std::env::current_exe()?);
            cmd.env("KUBECONFIG", &kubeconfig)
                .arg("raw-peer")
                .arg(&plan);
            let mut p = match PeerProcess::spawn(cmd, &log, true) {
                Ok(p) => p,
                Err(e) => {
                    // The watcher started above must not outlive the run.
                    if let Some(w) = watcher {
                        w.stop();
                    }
                    return Err(e);
                }
            };
            p.watcher = watcher;
            p.until_ready("raw peer", deadline, |p| p.log_contains("raw-peer: ready"))
                .await
        }
    }
}

/// Client-go's informers on ours' watches (benches/client-go-informers),
/// started and synced.
async fn start_watcher(
    s: &Settings,
    kubeconfig: &Path,
    workload: &Workload,
    logs: &Path,
) -> anyhow::Result<PeerProcess> {
    let bin = s
        .informers_bin
        .as_ref()
        .context("raw-watching needs BENCH_INFORMERS_BIN (e2e/bench.sh builds it)")?;
    let log = logs.join(format!("{}-informers.log", workload.id));
    let mut cmd = Command::new(bin);
    cmd.env("KUBECONFIG", kubeconfig);
    PeerProcess::spawn(cmd, &log, false)?
        .until_ready("client-go informers", Duration::from_secs(60), |w| {
            w.log_contains("informers: synced")
        })
        .await
}
