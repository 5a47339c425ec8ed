//! Runs the operator binary against the local control plane for a test:
//! one process per test, watching only the test's namespace (and holding its
//! leader-election Lease there), so tests run in parallel without seeing each
//! other's jobs. Dropping an [`Operator`] kills its process.
//!
//! Also installs the CRD (once per test binary) from `crds/`, exactly as a
//! user would: `kubectl apply -f crds/`. With `TFJOB_E2E_CRD=kubeflow` it
//! installs Kubeflow's own TFJob CRD instead (the file named by
//! `TFJOB_E2E_KUBEFLOW_CRD`, which `e2e/run-suite.sh` reads from the Go module
//! cache): what a user who keeps Kubeflow's CRD (`crd.install=false`) runs.
#![allow(dead_code)] // Each test module uses a different subset.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use tokio::sync::OnceCell;

use crate::cluster::{cluster_dir, kubectl, run_ok, wait_crd_established, wait_until};
use crate::loopback::{free_port, http_get};

static CRD_INSTALLED: OnceCell<()> = OnceCell::const_new();

/// Which TFJob CRD the suite runs under (`TFJOB_E2E_CRD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdFlavor {
    /// Ours, `crds/kubeflow.org_tfjobs.yaml`: full status schema, CEL validation.
    Ours,
    /// Kubeflow training-operator's: a smaller status schema (the API server
    /// prunes our extra status fields) and no validation of the replica specs.
    Kubeflow,
}

/// `TFJOB_E2E_CRD=kubeflow` selects Kubeflow's CRD; unset or `ours`, ours.
pub fn crd_flavor() -> CrdFlavor {
    match std::env::var("TFJOB_E2E_CRD").as_deref() {
        Ok("kubeflow") => CrdFlavor::Kubeflow,
        Ok("") | Ok("ours") | Err(_) => CrdFlavor::Ours,
        Ok(other) => panic!("TFJOB_E2E_CRD={other}: expected `ours` or `kubeflow`"),
    }
}

/// The CRD file to install: ours from the repo, or Kubeflow's from
/// `TFJOB_E2E_KUBEFLOW_CRD` (set by `e2e/run-suite.sh`).
fn crd_file() -> PathBuf {
    match crd_flavor() {
        CrdFlavor::Ours => {
            crate::cluster::repo_dir().join("crds/kubeflow.org_tfjobs.yaml")
        }
        CrdFlavor::Kubeflow => std::env::var_os("TFJOB_E2E_KUBEFLOW_CRD")
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "TFJOB_E2E_CRD=kubeflow needs TFJOB_E2E_KUBEFLOW_CRD naming Kubeflow's CRD file \
                     (run `make e2e-kubeflow-crd`)"
                )
            }),
    }
}

/// The property names of the status schema of a CRD's first version.
fn status_properties(crd: &CustomResourceDefinition) -> Vec<String> {
    let mut names: Vec<String> = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| s.properties.as_ref())
        .and_then(|p| p.get("status"))
        .and_then(|s| s.properties.as_ref())
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Applies the CRD of [`crd_flavor`] (once) and waits until it is Established.
/// Under Kubeflow's CRD it also checks that the stored status schema is
/// exactly Kubeflow's: a CRD that server-side apply merged with fields
/// another manager (Helm) still owns would not be the CRD users run.
pub async fn ensure_crd(client: &Client) {
    CRD_INSTALLED
        .get_or_init(|| async {
            let file = crd_file();
            run_ok(kubectl().args(["apply", "--server-side", "--force-conflicts", "-f"]).arg(&file));
            let stored =
                wait_crd_established(client, "tfjobs.kubeflow.org", Duration::from_secs(30)).await;
            if crd_flavor() == CrdFlavor::Kubeflow {
                let text = std::fs::read_to_string(&file).expect("the Kubeflow CRD file");
                let wanted: CustomResourceDefinition =
                    serde_yaml::from_str(&text).expect("Kubeflow's CRD parses");
                assert_eq!(
                    status_properties(&stored),
                    status_properties(&wanted),
                    "the installed TFJob CRD is not Kubeflow's (another field manager keeps ours?): \
                     e2e/run-suite.sh deletes it before installing Kubeflow's"
                );
            }
        })
        .await;
}

/// An operator process watching one namespace.
pub struct Operator {
    child: Option<Child>,
    pub namespace: String,
    pub metrics_port: u16,
    pub probe_port: u16,
    pub log: PathBuf,
    /// How it was started, to start it again on other ports if a parallel
    /// test's process took one of ours between `free_port` and the bind.
    extra_args: Vec<String>,
    kubeconfig: Option<PathBuf>,
    env: Vec<(String, String)>,
    /// `None`: every namespace.
    watch_namespace: Option<String>,
    lease_namespace: String,
}

impl Operator {
    /// Starts the operator for `namespace` with the admin kubeconfig.
    pub fn start(namespace: &str) -> Self {
        Self::start_with(namespace, &[], None)
    }

    /// Starts the operator with extra flags and, optionally, another kubeconfig.
    pub fn start_with(namespace: &str, extra_args: &[&str], kubeconfig: Option<PathBuf>) -> Self {
        Self::spawn(Some(namespace), namespace, extra_args, kubeconfig, &[])
    }

    /// Starts the operator with extra flags and environment variables.
    pub fn start_with_env(namespace: &str, extra_args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(Some(namespace), namespace, extra_args, None, env)
    }

    /// Starts the operator as the Helm chart runs it: no `--namespace`, so it
    /// watches every namespace; its Lease lives in `lease_namespace`.
    pub fn start_all_namespaces(
        lease_namespace: &str,
        extra_args: &[&str],
        kubeconfig: Option<PathBuf>,
    ) -> Self {
        Self::spawn(None, lease_namespace, extra_args, kubeconfig, &[])
    }

    fn spawn(
        namespace: Option<&str>,
        lease_namespace: &str,
        extra_args: &[&str],
        kubeconfig: Option<PathBuf>,
        env: &[(&str, &str)],
    ) -> Self {
        let metrics_port = free_port();
        let probe_port = free_port();
        let logs = cluster_dir().join("logs");
        std::fs::create_dir_all(&logs).expect("the cluster logs dir");
        let label = namespace.unwrap_or("all-namespaces");
        let log = logs.join(format!("operator-{label}-{metrics_port}.log"));
        let file = std::fs::File::create(&log).expect("the operator log file");
        let kubeconfig_arg = kubeconfig.clone();
        let kubeconfig = kubeconfig.unwrap_or_else(|| cluster_dir().join("kubeconfig"));
        let child = Command::new(env!("CARGO_BIN_EXE_tfjob-operator"))
            .arg("run")
            .args(namespace.map(|ns| format!("--namespace={ns}")))
            .args(["--leader-election-namespace", lease_namespace])
            .args([
                "--metrics-bind-address",
                &format!("127.0.0.1:{metrics_port}"),
            ])
            .args([
                "--health-probe-bind-address",
                &format!("127.0.0.1:{probe_port}"),
            ])
            .args(["--log-level", "info,tfjob_operator=debug"])
            .args(extra_args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("WATCH_NAMESPACE")
            // Traces only where a test asks for them, configured as it says.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_CERTIFICATE")
            .env_remove("OTEL_TRACES_SAMPLER")
            .env_remove("OTEL_TRACES_SAMPLER_ARG")
            .envs(env.iter().copied())
            .stdout(Stdio::from(file.try_clone().expect("a log file handle")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("failed to start the operator binary");
        Self {
            child: Some(child),
            namespace: label.to_owned(),
            metrics_port,
            probe_port,
            log,
            extra_args: extra_args.iter().map(|a| (*a).to_owned()).collect(),
            kubeconfig: kubeconfig_arg,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            watch_namespace: namespace.map(str::to_owned),
            lease_namespace: lease_namespace.to_owned(),
        }
    }

    /// Waits until `/readyz` answers 200 (caches synced).
    pub async fn wait_ready(&mut self) {
        // `free_port` releases the port before the operator binds it, so a
        // parallel test's operator can take it first: start again on fresh
        // ports (twice at most) rather than fail the test on a harness race.
        for attempt in 0.. {
            let port = self.probe_port;
            let log = self.log.clone();
            let child = self.child.as_mut().expect("a running operator");
            let exited = wait_until(
                &format!("the operator to be ready (log: {})", log.display()),
                Duration::from_secs(60),
                || {
                    let exited = child.try_wait().ok().flatten();
                    async move {
                        if let Some(status) = exited {
                            return Some(Some(status));
                        }
                        http_get(port, "/readyz")
                            .filter(|(code, _)| *code == 200)
                            .map(|_| None)
                    }
                },
            )
            .await;
            let Some(status) = exited else {
                return;
            };
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            if attempt >= 2 || !tail.contains("failed to start the http server") {
                panic!("the operator exited with {status}:\n{tail}");
            }
            let args: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> = self
                .env
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            // As it was started: an all-namespaces operator stays one.
            let again = Self::spawn(
                self.watch_namespace.as_deref(),
                &self.lease_namespace,
                &args,
                self.kubeconfig.take(),
                &env,
            );
            // The old process has exited: nothing to kill.
            std::mem::forget(std::mem::replace(self, again));
        }
    }

    /// The operator's `/metrics` text.
    pub fn metrics(&self) -> String {
        http_get(self.metrics_port, "/metrics")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    /// The operator's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process has exited (it may exit by itself, e.g. after
    /// losing its Lease).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().ok().flatten().is_some(),
            None => true,
        }
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`, `"TERM"`, ...) to the process.
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .status();
        }
    }

    /// SIGKILL: no graceful shutdown, no Lease release (a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait for the process to exit; returns whether it exited in time.
    pub fn terminate(&mut self, within: Duration) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}
