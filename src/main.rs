//! The operator binary: `run` (the controller), `crd` (print the CRD YAML),
//! `version`. Errors are reported with `anyhow` here, at the binary's edge only.
use std::net::SocketAddr;

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use kube::api::{Api, ListParams};
use tfjob_operator::api::TFJob;
use tfjob_operator::runtime::InformerFactory;
use tfjob_operator::runtime::client::RateLimitLayer;
use tfjob_operator::runtime::leader_election::LeaderElectionConfig;
use tfjob_operator::runtime::manager::{Manager, ManagerConfig};
use tfjob_operator::tfjob::controller::{Options, setup};
use tfjob_operator::tfjob::schema::{CRD_NAME, StatusSchema};

#[derive(Parser)]
#[command(
    name = "tfjob-operator",
    version,
    about = "Runs Kubeflow-compatible TFJobs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator against the cluster in KUBECONFIG (or in-cluster config).
    Run(Box<RunArgs>),
    /// Print the TFJob CustomResourceDefinition as YAML (`kubectl apply -f -`).
    Crd,
    /// Print the version.
    Version,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Flags of `run`; each can also be set by the environment variable shown.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Watch TFJobs (and their Pods and Services) in this namespace only; all namespaces when unset.
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Concurrent reconciles (different jobs are reconciled in parallel; one job never is).
    #[arg(long, env = "TFJOB_WORKERS", default_value_t = 4)]
    workers: usize,
    /// Where /metrics is served.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_bind_address: SocketAddr,
    /// Where /healthz and /readyz are served.
    #[arg(
        long,
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value = "0.0.0.0:8081"
    )]
    health_probe_bind_address: SocketAddr,
    /// Elect a leader with a Lease so only one replica reconciles.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease (defaults to the Pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_ID",
        default_value = "tfjob-operator-leader"
    )]
    leader_election_id: String,
    /// Cluster domain appended to `.svc` in TF_CONFIG addresses (Kubeflow's CUSTOM_CLUSTER_DOMAIN).
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN")]
    cluster_domain: Option<String>,
    /// Parallel API writes within one reconcile (creating a big job's Pods).
    #[arg(long, env = "TFJOB_WRITE_CONCURRENCY", default_value_t = 16)]
    write_concurrency: usize,
    /// Client-side API rate limit in requests per second (0: off, rely on the
    /// API server's priority and fairness, as controller-runtime does).
    #[arg(long, env = "KUBE_API_QPS", default_value_t = 0.0)]
    kube_api_qps: f64,
    /// Burst above `--kube-api-qps`.
    #[arg(long, env = "KUBE_API_BURST", default_value_t = 30)]
    kube_api_burst: u32,
    /// Seconds to let in-flight reconciles finish on SIGTERM.
    #[arg(long, env = "GRACEFUL_SHUTDOWN_SECONDS", default_value_t = 30)]
    graceful_shutdown_seconds: u64,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter (tracing EnvFilter syntax, e.g. `info,tfjob_operator=debug`).
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    log_level: String,
    /// Log every stage an event passes through (reflector → FIFO → informer →
    /// queue → worker → reconcile): the pipeline, live.
    #[arg(long, env = "TFJOB_TRACE_PIPELINE")]
    trace_pipeline: bool,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => print!("{}", tfjob_operator::api::crd::crd_yaml()?),
        Command::Version => println!("tfjob-operator {}", env!("CARGO_PKG_VERSION")),
        Command::Run(args) => {
            init_logging(&args)?;
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(run(*args))?;
        }
    }
    Ok(())
}

fn init_logging(args: &RunArgs) -> anyhow::Result<()> {
    let mut filter = args.log_level.clone();
    if args.trace_pipeline {
        filter.push_str(",pipeline=debug");
    }
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_ansi(std::io::stdout().is_terminal())
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&filter)?);
    match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| anyhow::anyhow!("failed to set up logging: {e}"))
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    tracing::info!(
        ?args,
        "starting tfjob-operator {}",
        env!("CARGO_PKG_VERSION")
    );
    let config = kube::Config::infer()
        .await
        .context("failed to find cluster credentials: set KUBECONFIG or run in a Pod")?;
    let client = if args.kube_api_qps > 0.0 {
        kube::client::ClientBuilder::try_from(config)?
            .with_layer(&RateLimitLayer::new(args.kube_api_qps, args.kube_api_burst))
            .build()
    } else {
        kube::Client::try_from(config)?
    };
    check_crd_installed(&client, args.namespace.as_deref()).await?;

    let leader_election = args.leader_elect.then(|| {
        LeaderElectionConfig::new(&args.leader_election_namespace, &args.leader_election_id)
    });
    let mut manager = Manager::new(
        client.clone(),
        ManagerConfig {
            probe_addr: Some(args.health_probe_bind_address),
            metrics_addr: Some(args.metrics_bind_address),
            leader_election,
            graceful_shutdown: Duration::from_secs(args.graceful_shutdown_seconds),
            handle_signals: true,
        },
    );
    let (status_schema, unknown) = StatusSchema::detect(&client).await;
    match &unknown {
        None => {
            tracing::info!(crd = CRD_NAME, schema = %status_schema, "detected the TFJob CRD's status schema")
        }
        Some(why) => {
            tracing::warn!(crd = CRD_NAME, schema = %status_schema, "{why}; assuming Kubeflow's status schema, which is safe under either CRD")
        }
    }
    manager
        .readiness()
        .add_detail(format!("crd {CRD_NAME}: {status_schema}"));
    let options = Options {
        namespace: args.namespace.clone(),
        workers: args.workers,
        cluster_domain: args.cluster_domain.clone(),
        write_concurrency: args.write_concurrency,
        status_schema,
    };
    setup(&mut manager, InformerFactory::new(client), &options)?;
    manager.run().await?;
    tracing::info!("stopped");
    Ok(())
}

/// Fails with the exact command to run when the TFJob CRD is not installed
/// (a LIST of TFJobs answers 404 then), instead of retrying forever.
async fn check_crd_installed(client: &kube::Client, namespace: Option<&str>) -> anyhow::Result<()> {
    let api: Api<TFJob> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => anyhow::bail!(
            "the TFJob CRD (tfjobs.kubeflow.org) is not installed; install it with:\n  \
             tfjob-operator crd | kubectl apply --server-side -f -"
        ),
        Err(e) => Err(e).context(
            "failed to list TFJobs (is the API server reachable, and may this identity list tfjobs?)",
        ),
    }
}
