//! The operator's command line: `run` (the controller) with its flags,
//! `crd` (print the CRD YAML), `version`.
//!
//! Each flag of `run` can also be set by the environment variable shown; the
//! names are controller-runtime's and kube-controller-manager's where they
//! have one. The flags are listed for operators in `docs/operating.md` ("Flags";
//! `cargo test --test docs` fails when one has no row there).
use clap::{Parser, Subcommand, ValueEnum};

use super::flags::{BindAddress, GoDuration};
use crate::tfjob::integrations::gang::GangMode;
use crate::tfjob::integrations::kueue::KueueMode;

#[derive(Parser)]
#[command(
    name = "tfjob-operator",
    version,
    about = "Runs Kubeflow-compatible TFJobs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the operator against the cluster in KUBECONFIG (or in-cluster config).
    Run(Box<RunArgs>),
    /// Print the TFJob CustomResourceDefinition as YAML (`kubectl apply -f -`).
    Crd,
    /// Moving from Kubeflow's training-operator: `--check` lists what this
    /// operator would take over and what stands in the way, changing nothing.
    Migrate(MigrateArgs),
    /// Print the version.
    Version,
}

/// Flags of `migrate`.
#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// Read the cluster (GET requests only) and report; the only mode.
    /// Exits 0 when every job can be adopted as it is, 2 when something
    /// stands in the way.
    #[arg(long, required = true)]
    pub check: bool,
    /// Look at this namespace only; all namespaces when unset.
    #[arg(long)]
    pub namespace: Option<String>,
    /// `text` for the person on call, `json` for tools.
    #[arg(long, value_enum, default_value = "text")]
    pub output: MigrateOutput,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MigrateOutput {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Flags of `run`; each can also be set by the environment variable shown.
/// A repeated flag's last value wins, as with Go's flags (the chart appends
/// `extraArgs` after its own).
#[derive(clap::Args, Debug)]
#[command(args_override_self = true)]
pub struct RunArgs {
    /// Watch TFJobs (and their Pods and Services) in this namespace only; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Concurrent reconciles (different jobs are reconciled in parallel; one job never is).
    #[arg(long, env = "TFJOB_WORKERS", default_value_t = 4)]
    pub workers: usize,
    /// Threads of the async runtime that runs everything (watches,
    /// reconciles, writes, probes); `0`: one per CPU the process may use
    /// (its cgroup's quota counted), tokio's own default. The work is
    /// waiting on the API server, and a second thread mostly adds wakeups
    /// between the two (issue #42: 13 % of the CPU at 1,000 jobs, no time
    /// won); the chart's 1-CPU limit gave one thread already.
    #[arg(long, env = "TFJOB_RUNTIME_THREADS", default_value_t = 1)]
    pub runtime_threads: usize,
    /// Where /metrics is served: `:8080` (every interface, IPv6 and IPv4;
    /// IPv4 only where IPv6 is off), `host:port`, `[::1]:8080`, or `0` (off).
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8080")]
    pub metrics_bind_address: BindAddress,
    /// Serve /metrics over HTTPS, only to bearer tokens the API server
    /// authenticates (TokenReview) and authorizes for `get` on the
    /// non-resource URL /metrics (SubjectAccessReview)
    /// (`--metrics-secure`, `--metrics-secure=true|false`). Needs a metrics
    /// address other than the probes'.
    #[arg(
        long,
        env = "METRICS_SECURE",
        default_value_t = false,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub metrics_secure: bool,
    /// With --metrics-secure: the directory holding tls.crt and tls.key
    /// (default: a self-signed certificate generated at startup).
    #[arg(long, env = "METRICS_CERT_DIR", value_name = "DIR")]
    pub metrics_cert_dir: Option<std::path::PathBuf>,
    /// Where /healthz and /readyz are served (same forms as the metrics address).
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: BindAddress,
    /// Elect a leader with a Lease so only one replica reconciles
    /// (`--leader-elect`, `--leader-elect=true|false`).
    #[arg(
        long,
        env = "LEADER_ELECT",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (default: the Pod's own
    /// namespace, from its ServiceAccount mount; `default` out of a cluster).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_ID",
        default_value = "tfjob-operator-leader"
    )]
    pub leader_election_id: String,
    /// How long a Lease stays valid without renewal: a standby takes over
    /// this long after the leader stopped renewing (kube-controller-manager's
    /// flag; `15s`, `1m`, ...).
    #[arg(long, env = "LEADER_ELECT_LEASE_DURATION", default_value = "15s")]
    pub leader_elect_lease_duration: GoDuration,
    /// How long the leader keeps trying to renew before it gives up leading
    /// (shorter than the lease duration). Raise both together where the API
    /// server can be unreachable for longer, e.g. while it restarts.
    #[arg(long, env = "LEADER_ELECT_RENEW_DEADLINE", default_value = "10s")]
    pub leader_elect_renew_deadline: GoDuration,
    /// How often a candidate tries to acquire or renew the Lease.
    #[arg(long, env = "LEADER_ELECT_RETRY_PERIOD", default_value = "2s")]
    pub leader_elect_retry_period: GoDuration,
    /// Cluster domain appended to `.svc` in TF_CONFIG addresses (Kubeflow's CUSTOM_CLUSTER_DOMAIN).
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Parallel API writes within one reconcile (creating a big job's Pods).
    #[arg(long, env = "TFJOB_WRITE_CONCURRENCY", default_value_t = 16)]
    pub write_concurrency: usize,
    /// Record one Event per kind of child a reconcile created ("Created 4
    /// pods: a, b, …" with count 4) instead of Kubeflow's one
    /// `SuccessfulCreatePod`/`SuccessfulCreateService` per child: fewer
    /// writes for very large jobs, but not the messages scripts grep for.
    #[arg(long, env = "TFJOB_FOLD_CREATE_EVENTS")]
    pub fold_create_events: bool,
    /// Gang scheduling with Kubernetes' own PodGroups (scheduling.k8s.io/v1beta1):
    /// auto gangs the jobs that set runPolicy.schedulingPolicy when the API is
    /// served; on gangs every job (and refuses to start without the API); off never.
    #[arg(long, env = "TFJOB_GANG_SCHEDULING", value_enum, default_value_t = GangMode::Auto)]
    pub gang_scheduling: GangMode,
    /// Who makes a queued job's Kueue Workload (jobs labelled
    /// kueue.x-k8s.io/queue-name): workload = the operator (Kueue configured
    /// with externalFrameworks: TFJob.v1.kubeflow.org); builtin = Kueue's
    /// built-in kubeflow.org/tfjob integration; auto = workload when the
    /// server serves Kueue's Workloads (a job the built-in already has is
    /// left to it), else off; off = the label is ignored.
    #[arg(long, env = "TFJOB_KUEUE", value_enum, default_value_t = KueueMode::Auto)]
    pub kueue: KueueMode,
    /// Client-side API rate limit in requests per second for each of the
    /// operator's three API clients, as client-go limits each REST client:
    /// the manager's (lists, watches, status writes, leader election), Pod
    /// and Service control (creates, deletes, adoption patches) and the
    /// event recorder. 0: off, rely on the API server's priority and
    /// fairness, as controller-runtime does.
    #[arg(long, env = "KUBE_API_QPS", default_value_t = 0.0)]
    pub kube_api_qps: f64,
    /// Burst above `--kube-api-qps`, for each client.
    #[arg(long, env = "KUBE_API_BURST", default_value_t = 30)]
    pub kube_api_burst: u32,
    /// One more limit, in requests per second, shared by all three clients:
    /// a cap on the whole process (0: none).
    #[arg(long, env = "KUBE_API_QPS_TOTAL", default_value_t = 0.0)]
    pub kube_api_qps_total: f64,
    /// Burst above `--kube-api-qps-total`.
    #[arg(long, env = "KUBE_API_BURST_TOTAL", default_value_t = 30)]
    pub kube_api_burst_total: u32,
    /// Force-delete a replica's Pod that was disrupted (e.g. evicted from a
    /// node that stopped responding) and is still terminating this many
    /// seconds after its grace period ended, so the job can replace it
    /// instead of hanging in Restarting (0: never). Only once its node is
    /// deleted or tainted `node.kubernetes.io/out-of-service`, unless
    /// `--force-delete-stuck-pods-on-any-node`.
    #[arg(
        long,
        env = "FORCE_DELETE_STUCK_PODS_AFTER_SECONDS",
        default_value_t = 300
    )]
    pub force_delete_stuck_pods_after_seconds: u64,
    /// Force-delete stuck Pods after the wait even when their node still
    /// exists without the out-of-service taint: a partitioned node may
    /// still run the old container next to its replacement.
    #[arg(long, env = "FORCE_DELETE_STUCK_PODS_ON_ANY_NODE")]
    pub force_delete_stuck_pods_on_any_node: bool,
    /// Seconds a read or write to the API server may take to answer (a
    /// watch gets its own timeoutSeconds plus 30 s).
    #[arg(long, env = "KUBE_API_TIMEOUT_SECONDS", default_value_t = 30)]
    pub kube_api_timeout_seconds: u64,
    /// Seconds to let in-flight reconciles finish on SIGTERM.
    #[arg(long, env = "GRACEFUL_SHUTDOWN_SECONDS", default_value_t = 30)]
    pub graceful_shutdown_seconds: u64,
    /// Log format: `text`, or `json` (one flat object per line).
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level: zap's `debug`, `info`, `error` or a verbosity number, or a
    /// tracing filter (e.g. `info,tfjob_operator=debug`).
    #[arg(
        long = "zap-log-level",
        alias = "log-level",
        env = "RUST_LOG",
        default_value = "info"
    )]
    pub log_level: String,
    /// Log every stage an event passes through (reflector → FIFO → informer →
    /// queue → worker → reconcile): the pipeline, live.
    #[arg(long, env = "TFJOB_TRACE_PIPELINE")]
    pub trace_pipeline: bool,
    /// Serve a page at this address that draws the pipeline and animates
    /// every event through it, live (same forms as the metrics address;
    /// off by default).
    #[arg(long, env = "TFJOB_TRACE_UI", value_name = "ADDR", default_value = "0")]
    pub trace_ui: BindAddress,
    /// Send traces (one per reconcile, with its phases and API writes) to
    /// this OpenTelemetry collector over OTLP/HTTP, e.g.
    /// `http://collector:4318` or `https://…` (`/v1/traces` is appended);
    /// off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// With an `https://` `--otlp-endpoint`: a PEM file with the CA
    /// certificate(s) to verify the collector with, trusted instead of the
    /// system's roots.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_CERTIFICATE", value_name = "FILE")]
    pub otlp_certificate: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;

    fn run_args(flags: &[&str]) -> Result<RunArgs, clap::Error> {
        let argv = ["tfjob-operator", "run"].iter().chain(flags);
        match Cli::try_parse_from(argv)?.command {
            Command::Run(args) => Ok(*args),
            _ => unreachable!("parsed `run`"),
        }
    }

    #[test]
    fn leader_elect_is_a_bare_flag_or_takes_true_or_false_after_an_equals_sign() {
        assert!(run_args(&["--leader-elect"]).unwrap().leader_elect);
        assert!(run_args(&["--leader-elect=true"]).unwrap().leader_elect);
        assert!(!run_args(&["--leader-elect=false"]).unwrap().leader_elect);
        assert!(run_args(&["--leader-elect=maybe"]).is_err());
        // As Go's bool flags: a separate word is not the flag's value.
        assert!(run_args(&["--leader-elect", "false"]).is_err());
    }

    #[test]
    fn bind_addresses_take_controller_runtimes_forms() {
        let args = run_args(&[
            "--metrics-bind-address=0",
            "--health-probe-bind-address=[::1]:9443",
        ])
        .unwrap();
        assert_eq!(args.metrics_bind_address.addr(), None);
        assert_eq!(
            args.health_probe_bind_address.addr(),
            Some("[::1]:9443".parse().unwrap())
        );
        let defaults = run_args(&[]).unwrap();
        assert_eq!(
            defaults.metrics_bind_address.addr(),
            Some("[::]:8080".parse().unwrap())
        );
        assert!(run_args(&["--metrics-bind-address=8080"]).is_err());
    }

    #[test]
    fn metrics_secure_is_off_by_default_and_spelled_as_controller_runtime() {
        let defaults = run_args(&[]).unwrap();
        assert!(!defaults.metrics_secure);
        assert_eq!(defaults.metrics_cert_dir, None);
        assert!(run_args(&["--metrics-secure"]).unwrap().metrics_secure);
        assert!(
            !run_args(&["--metrics-secure=false"])
                .unwrap()
                .metrics_secure
        );
        let args = run_args(&[
            "--metrics-secure=true",
            "--metrics-cert-dir=/tmp/k8s-metrics-server/serving-certs",
        ])
        .unwrap();
        assert!(args.metrics_secure);
        assert_eq!(
            args.metrics_cert_dir.as_deref(),
            Some(Path::new("/tmp/k8s-metrics-server/serving-certs"))
        );
    }

    #[test]
    fn the_log_level_is_spelled_as_zap_or_as_before() {
        assert_eq!(
            run_args(&["--zap-log-level=debug"]).unwrap().log_level,
            "debug"
        );
        assert_eq!(
            run_args(&["--log-level", "warn"]).unwrap().log_level,
            "warn"
        );
        assert!(matches!(
            run_args(&["--log-format=json"]).unwrap().log_format,
            LogFormat::Json
        ));
        assert!(run_args(&["--log-format=yaml"]).is_err());
    }

    #[test]
    fn leader_election_timings_take_kube_controller_managers_flags() {
        let args = run_args(&[
            "--leader-elect-lease-duration=1m",
            "--leader-elect-renew-deadline=40s",
            "--leader-elect-retry-period=500ms",
        ])
        .unwrap();
        assert_eq!(args.leader_elect_lease_duration.0, Duration::from_secs(60));
        assert_eq!(args.leader_elect_renew_deadline.0, Duration::from_secs(40));
        assert_eq!(args.leader_elect_retry_period.0, Duration::from_millis(500));
        let defaults = run_args(&[]).unwrap();
        assert_eq!(
            defaults.leader_elect_lease_duration.0,
            Duration::from_secs(15)
        );
        assert_eq!(
            defaults.leader_elect_renew_deadline.0,
            Duration::from_secs(10)
        );
        assert_eq!(defaults.leader_elect_retry_period.0, Duration::from_secs(2));
        let e = run_args(&["--leader-elect-renew-deadline=ten"]).unwrap_err();
        assert!(
            e.to_string().contains("--leader-elect-renew-deadline"),
            "{e}"
        );
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value_as_go_flags_do() {
        let args = run_args(&[
            "--workers=2",
            "--zap-log-level=info",
            "--workers=3",
            "--log-level=debug",
        ])
        .unwrap();
        assert_eq!(args.workers, 3);
        assert_eq!(args.log_level, "debug");
    }
}
