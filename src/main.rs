//! The operator binary: `run` (the controller), `crd` (print the CRD YAML),
//! `migrate --check` (the read-only preflight), `version`; the command line is parsed in `tfjob_operator::cli`. Errors
//! are reported with `anyhow` here, at the binary's edge only.
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube::api::{Api, ListParams};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tfjob_operator::api::types::TFJob;
use tfjob_operator::cli::args::{Cli, Command, LogFormat, MigrateOutput, RunArgs};
use tfjob_operator::cli::flags::{SERVICE_ACCOUNT_NAMESPACE, leader_election_namespace};
use tfjob_operator::observability::logging::{FlatJson, log_filter};
use tfjob_operator::observability::metrics::build_info::{self, BuildInfo};
use tfjob_operator::observability::metrics::new_registry;
use tfjob_operator::observability::metrics::pipeline::pipeline_metrics;
use tfjob_operator::observability::metrics::process::ProcessCollector;
use tfjob_operator::observability::metrics_auth::MetricsAuth;
use tfjob_operator::observability::metrics_tls::MetricsTls;
use tfjob_operator::observability::otlp::{self, TracesConfig};
use tfjob_operator::observability::trace_ui::{self, TraceUi};
use tfjob_operator::runtime::cache::factory::InformerFactory;
use tfjob_operator::runtime::client::fence::WriteFence;
use tfjob_operator::runtime::client::metrics::RestClientMetricsLayer;
use tfjob_operator::runtime::client::rate_limit::ClientRateLimits;
use tfjob_operator::runtime::client::span_status::SpanStatusLayer;
use tfjob_operator::runtime::client::timeout::RequestTimeoutLayer;
use tfjob_operator::runtime::client::window::{MAX_IN_FLIGHT, Window};
use tfjob_operator::runtime::client::work_gauge::{WorkGauge, WorkGaugeLayer};
use tfjob_operator::runtime::leader_election::config::LeaderElectionConfig;
use tfjob_operator::runtime::manager::server::{HttpServer, SecureMetrics};
use tfjob_operator::runtime::manager::{Manager, ManagerConfig};
use tfjob_operator::tfjob::controller::{Options, setup};
use tfjob_operator::tfjob::kubeflow::schema::{CRD_NAME, StatusSchema};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::format::JsonFields;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => print!("{}", tfjob_operator::api::crd::crd_yaml()?),
        Command::Version => println!("tfjob-operator {}", env!("CARGO_PKG_VERSION")),
        Command::Migrate(args) => {
            let runtime = tokio::runtime::Runtime::new()?;
            let report =
                runtime.block_on(tfjob_operator::migrate::check(args.namespace.as_deref()))?;
            match args.output {
                MigrateOutput::Text => print!("{}", report.text()),
                MigrateOutput::Json => println!("{}", serde_json::to_string_pretty(&report)?),
            }
            if report.has_blockers() {
                std::process::exit(2);
            }
        }
        Command::Run(args) => {
            // The trace UI's streams end when this fires (at the end of `run`).
            let stop_trace_ui = CancellationToken::new();
            let trace_ui = args
                .trace_ui
                .addr()
                .map(|addr| (addr, TraceUi::new(stop_trace_ui.clone())));
            let runtime = runtime(args.runtime_threads)?;
            let traces = traces(&args, runtime.handle())?;
            init_logging(&args, trace_ui.as_ref().map(|(_, ui)| ui), traces.as_ref())?;
            let result = runtime.block_on(async {
                let result = run(*args, trace_ui).await;
                stop_trace_ui.cancel();
                result
            });
            // The manager has stopped (on SIGTERM too) and the runtime the
            // exporter sends on still runs: the last spans go out now.
            if let Some(provider) = traces
                && let Err(error) = provider.shutdown()
            {
                tracing::warn!(%error, "failed to send the last traces");
            }
            result?;
        }
    }
    Ok(())
}

/// The runtime `run` works on: multi-threaded even with one worker thread,
/// so the OpenTelemetry exporter's tasks still run after the manager's
/// `block_on` returned (the last spans are sent then), which a
/// current-thread runtime would not do.
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        builder.worker_threads(threads);
    }
    builder.enable_all().build()
}

/// With `--otlp-endpoint` (or `OTEL_EXPORTER_OTLP_ENDPOINT`), the tracer
/// provider exporting there, sending on `runtime`.
fn traces(
    args: &RunArgs,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<Option<SdkTracerProvider>> {
    let Some(endpoint) = args.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    // The chart passes the Pod's name and namespace (downward API).
    let attributes = [
        ("k8s.pod.name", "POD_NAME"),
        ("k8s.namespace.name", "POD_NAMESPACE"),
    ]
    .into_iter()
    .filter_map(|(key, var)| Some((key, std::env::var(var).ok()?)))
    .collect();
    let config = TracesConfig {
        endpoint: endpoint.to_owned(),
        certificate: args.otlp_certificate.clone(),
        service_version: env!("CARGO_PKG_VERSION").to_owned(),
        attributes,
    };
    Ok(Some(otlp::tracer_provider(&config, runtime.clone())?))
}

/// The log (filtered by `--zap-log-level`, plus the pipeline's lines with
/// `--trace-pipeline`) and, with `--trace-ui`, the trace UI's layer beside it
/// with its own filter: the page sees the pipeline without it being printed.
/// Without `--trace-ui` that layer is not installed at all; nor is the
/// OpenTelemetry layer without `traces`.
fn init_logging(
    args: &RunArgs,
    trace_ui: Option<&TraceUi>,
    traces: Option<&SdkTracerProvider>,
) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let ansi = std::io::stdout().is_terminal();
    log_subscriber(args, trace_ui, traces, ansi, std::io::stdout)?
        .try_init()
        .map_err(|e| anyhow::anyhow!("failed to set up logging: {e}"))
}

/// The subscriber [`init_logging`] installs, writing to `writer`.
fn log_subscriber<W>(
    args: &RunArgs,
    trace_ui: Option<&TraceUi>,
    traces: Option<&SdkTracerProvider>,
    ansi: bool,
    writer: W,
) -> anyhow::Result<Box<dyn tracing::Subscriber + Send + Sync>>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let mut filter = log_filter(&args.log_level);
    if args.trace_pipeline {
        filter.push_str(",pipeline=debug");
    }
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer);
    let fmt = match args.log_format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .boxed(),
    };
    // Each optional layer is `None` when off: `Option<Layer>` is a layer
    // that is not there (it enables nothing).
    Ok(Box::new(
        tracing_subscriber::registry()
            .with(fmt.with_filter(tracing_subscriber::EnvFilter::try_new(&filter)?))
            .with(trace_ui.map(|ui| ui.layer()))
            .with(traces.map(otlp::layer)),
    ))
}

async fn run(
    args: RunArgs,
    trace_ui: Option<(std::net::SocketAddr, TraceUi)>,
) -> anyhow::Result<()> {
    tracing::info!(
        ?args,
        "starting tfjob-operator {}",
        env!("CARGO_PKG_VERSION")
    );
    // Bound first, so a taken port fails the start rather than the page later.
    let trace_ui = match trace_ui {
        Some((addr, ui)) => {
            let server = HttpServer::bind_routes(addr, trace_ui::router(ui)).await?;
            if let Some(at) = server.routes_addr() {
                tracing::info!(url = %format!("http://{at}/"), "serving the trace UI");
            }
            Some(server)
        }
        None => None,
    };
    let config = kube::Config::infer()
        .await
        .context("failed to find cluster credentials: set KUBECONFIG or run in a Pod")?;
    let host = config
        .cluster_url
        .authority()
        .map(|a| a.to_string())
        .unwrap_or_default();
    // The Prometheus registry `/metrics` serves; the pipeline counts into
    // it through its seam (runtime::metrics), plugged in here.
    let registry = new_registry();
    let metrics = pipeline_metrics(&registry);
    let rest_metrics = RestClientMetricsLayer::new(host, &metrics);
    let timeout = RequestTimeoutLayer::new(Duration::from_secs(args.kube_api_timeout_seconds));
    // With leader election, writes go out only while our Lease is fresh
    // (runtime::client::fence), checked as each attempt is sent
    // (client_builder puts it under the retries): a leader frozen and woken
    // cannot write.
    let fence = if args.leader_elect {
        WriteFence::new()
    } else {
        WriteFence::open()
    };
    // One client per role, each with its own token bucket when
    // --kube-api-qps is set (client-go's meaning), all under the optional
    // total (runtime::client::rate_limit).
    let limits = ClientRateLimits::new(
        args.kube_api_qps,
        args.kube_api_burst,
        args.kube_api_qps_total,
        args.kube_api_burst_total,
    );
    // One window on requests in flight for all three clients: APF gives one
    // identity one priority level, so its room is shared (a window each lets
    // the three overflow the level's queue together).
    // runtime::client::window.
    let window = Window::new(MAX_IN_FLIGHT);
    // Metrics outermost, so a request cut by its deadline or refused by the
    // fence is counted too.
    // HTTP/2 with client-go's 30 s + 15 s ping health check (runtime::client::connect).
    let api_client = || {
        anyhow::Ok(
            tfjob_operator::runtime::client::connect::client_builder(
                config.clone(),
                &window,
                &fence,
            )?
            .with_layer(&timeout)
            .with_layer(&rest_metrics)
            .with_layer(&SpanStatusLayer)
            .with_layer(&limits.for_client()),
        )
    };
    // The work clients count their requests in flight; the Events' client
    // writes after them (runtime::events::work_first).
    let work = WorkGauge::new();
    let counted = WorkGaugeLayer::new(work.clone());
    let client = api_client()?.with_layer(&counted).build();
    let children_client = api_client()?.with_layer(&counted).build();
    let events_client = api_client()?.build();
    check_crd_installed(&client, args.namespace.as_deref()).await?;

    let leader_election = args.leader_elect.then(|| {
        let namespace = leader_election_namespace(
            args.leader_election_namespace.as_deref(),
            Path::new(SERVICE_ACCOUNT_NAMESPACE),
        );
        LeaderElectionConfig {
            fence,
            lease_duration: args.leader_elect_lease_duration.0,
            renew_deadline: args.leader_elect_renew_deadline.0,
            retry_period: args.leader_elect_retry_period.0,
            ..LeaderElectionConfig::new(&namespace, &args.leader_election_id)
        }
    });
    if let Some(config) = &leader_election {
        config.validate().map_err(|e| {
            anyhow::anyhow!(
                "{e}: check --leader-elect-lease-duration, --leader-elect-renew-deadline and --leader-elect-retry-period"
            )
        })?;
    }
    let mut manager = Manager::new(
        client.clone(),
        ManagerConfig {
            probe_addr: args.health_probe_bind_address.addr(),
            metrics_addr: args.metrics_bind_address.addr(),
            leader_election,
            graceful_shutdown: Duration::from_secs(args.graceful_shutdown_seconds),
            handle_signals: true,
        },
        metrics,
    );
    let detected = StatusSchema::detect(&client).await;
    let status_schema = detected.schema;
    match &detected.unreadable {
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
    if let Some(note) = detected.multikueue_note() {
        tracing::info!(crd = CRD_NAME, "{note}");
        manager.readiness().add_detail(note);
    }
    if args.metrics_secure {
        let tls = MetricsTls::new(args.metrics_cert_dir.as_deref())?;
        tracing::info!(
            certificate = tls.source(),
            "serving /metrics over HTTPS to authorized tokens"
        );
        let auth = MetricsAuth::new(client.clone());
        manager.secure_metrics(SecureMetrics {
            filter: Arc::new(move |routes| auth.protect(routes)),
            serve: Arc::new(move |listener, routes, stop| tls.serve(listener, routes, stop)),
        });
    }
    ProcessCollector::register(&registry);
    build_info::register(
        &registry,
        "tfjob_operator",
        &BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            git_commit: env!("TFJOB_GIT_COMMIT").to_owned(),
            rust_version: env!("TFJOB_RUSTC_VERSION").to_owned(),
        },
    );
    let options = Options {
        registry: registry.clone(),
        namespace: args.namespace.clone(),
        workers: args.workers,
        cluster_domain: args.cluster_domain.clone(),
        write_concurrency: args.write_concurrency,
        fold_create_events: args.fold_create_events,
        force_delete_on_any_node: args.force_delete_stuck_pods_on_any_node,
        status_schema,
        force_delete_stuck_after: (args.force_delete_stuck_pods_after_seconds > 0)
            .then(|| Duration::from_secs(args.force_delete_stuck_pods_after_seconds)),
        // Asked once the manager runs (not ready until answered):
        // tfjob::optional_apis.
        gang: args.gang_scheduling,
        kueue: args.kueue,
    };
    manager.set_event_client(events_client);
    manager.events_yield_to(work);
    let discovery = setup(
        &mut manager,
        InformerFactory::new(client),
        &options,
        children_client,
    )?;
    if let Some(server) = trace_ui {
        // Serves until the manager shuts down (which cancels this token at
        // the latest when `run` returns).
        let stop = manager.shutdown_token();
        tokio::spawn(async move {
            if let Err(error) = server.serve(stop).await {
                tracing::error!(error = %error, "trace UI server stopped");
            }
        });
    }
    manager.run().await?;
    // `--kueue=workload` or `--gang-scheduling=on` on a server that answered
    // without the API: the manager was stopped before anything ran.
    if let Some(why) = discovery.refused() {
        anyhow::bail!(why);
    }
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

#[cfg(test)]
mod tests {
    use tfjob_operator::cli::flags::BindAddress;

    use super::*;

    fn run_args(flags: &[&str]) -> Result<RunArgs, clap::Error> {
        let argv = ["tfjob-operator", "run"].iter().chain(flags);
        match Cli::try_parse_from(argv)?.command {
            Command::Run(args) => Ok(*args),
            _ => unreachable!("parsed `run`"),
        }
    }

    /// Lines the operator's log subscriber printed.
    #[derive(Clone, Default)]
    struct Printed(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Printed {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// tracing caches each callsite's interest process-wide and rebuilds it
    /// whenever a subscriber is created; two tests building subscribers at
    /// once race on that cache (a CI run saw the trace UI's "always" leak
    /// into the test without it), so the tests that build one take turns.
    fn one_subscriber_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        static ONE_SUBSCRIBER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        ONE_SUBSCRIBER_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Emits one pipeline event under the subscriber for `flags`: (whether
    /// pipeline events were enabled at all, what was printed, what a trace
    /// UI viewer received).
    fn one_pipeline_event(flags: &[&str]) -> (bool, String, Vec<String>) {
        let _turn = one_subscriber_at_a_time();
        let args = run_args(flags).unwrap();
        let ui = args
            .trace_ui
            .addr()
            .map(|_| TraceUi::new(CancellationToken::new()));
        let mut viewer = ui.as_ref().map(TraceUi::subscribe);
        let printed = Printed::default();
        let sink = printed.clone();
        let subscriber =
            log_subscriber(&args, ui.as_ref(), None, false, move || sink.clone()).unwrap();
        let enabled = tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "pipeline", stage = "5 handler", key = "ns/job", "key added to the workqueue");
            tracing::enabled!(target: "pipeline", tracing::Level::DEBUG)
        });
        let received = std::iter::from_fn(|| viewer.as_mut()?.try_recv().ok())
            .map(|m| m.to_string())
            .collect();
        let text = String::from_utf8(printed.0.lock().unwrap().clone()).unwrap();
        (enabled, text, received)
    }

    #[test]
    fn without_trace_flags_pipeline_events_are_not_even_enabled() {
        let (enabled, printed, received) = one_pipeline_event(&[]);
        assert!(!enabled, "the trace UI's layer must not be installed");
        assert_eq!(printed, "");
        assert!(received.is_empty());
        assert_eq!(run_args(&[]).unwrap().trace_ui, BindAddress::Off);
    }

    #[test]
    fn the_trace_ui_receives_pipeline_events_without_printing_them() {
        let (enabled, printed, received) = one_pipeline_event(&["--trace-ui", "127.0.0.1:0"]);
        assert!(enabled);
        assert_eq!(printed, "", "--trace-ui alone prints no pipeline lines");
        assert_eq!(received.len(), 1, "{received:?}");
        assert!(received[0].contains(r#""key":"ns/job""#), "{received:?}");
    }

    #[test]
    fn trace_pipeline_still_prints_with_or_without_the_trace_ui() {
        for flags in [
            &["--trace-pipeline"][..],
            &["--trace-pipeline", "--trace-ui=:0"],
        ] {
            let (_, printed, received) = one_pipeline_event(flags);
            assert!(
                printed.contains("pipeline: key added to the workqueue stage=\"5 handler\""),
                "{flags:?}: {printed}"
            );
            assert_eq!(received.len(), flags.len() - 1, "{flags:?}");
        }
    }

    /// Opens a reconcile span with a phase span inside (as the TFJob
    /// reconciler does) under the subscriber for `flags`, its traces going
    /// to `traces`: (whether the phase span was enabled at all, what was printed).
    fn one_reconcile(flags: &[&str], traces: Option<&SdkTracerProvider>) -> (bool, String) {
        let _turn = one_subscriber_at_a_time();
        let args = run_args(flags).unwrap();
        let printed = Printed::default();
        let sink = printed.clone();
        let subscriber = log_subscriber(&args, None, traces, false, move || sink.clone()).unwrap();
        let enabled = tracing::subscriber::with_default(subscriber, || {
            let reconcile =
                tracing::info_span!(parent: None, "reconcile", namespace = "ns", name = "job");
            let _in_reconcile = reconcile.enter();
            let plan = tracing::debug_span!(target: "tfjob_operator::tfjob::controller::reconciler", "plan");
            let _in_plan = plan.enter();
            tracing::info!("planned");
            !plan.is_disabled()
        });
        let text = String::from_utf8(printed.0.lock().unwrap().clone()).unwrap();
        (enabled, text)
    }

    #[test]
    fn the_runtime_has_one_worker_thread_unless_asked_for_more() {
        assert_eq!(run_args(&[]).unwrap().runtime_threads, 1);
        let workers = |threads| runtime(threads).unwrap().metrics().num_workers();
        assert_eq!(workers(1), 1);
        assert_eq!(workers(3), 3);
        let per_cpu = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(workers(0), per_cpu);
        // Multi-threaded with one worker: a task spawned before `block_on`
        // returned still runs after it (the exporter's last spans).
        let rt = runtime(1).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        rt.block_on(async {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(());
            });
        });
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
    }

    #[test]
    fn without_an_otlp_endpoint_there_is_no_tracer_and_phase_spans_are_not_even_enabled() {
        let args = run_args(&[]).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(traces(&args, runtime.handle()).unwrap().is_none());
        let (enabled, printed) = one_reconcile(&[], None);
        assert!(!enabled, "the OpenTelemetry layer must not be installed");
        assert!(
            printed.contains("reconcile{namespace=\"ns\" name=\"job\"}"),
            "{printed}"
        );
    }

    #[test]
    fn with_an_otlp_endpoint_reconciles_are_traced_and_the_log_is_as_without() {
        let flags = ["--otlp-endpoint=http://127.0.0.1:4318"];
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let args = run_args(&flags).unwrap();
        assert!(traces(&args, runtime.handle()).unwrap().is_some());
        let refused = run_args(&["--otlp-endpoint=collector:4318"]).unwrap();
        assert!(traces(&refused, runtime.handle()).is_err());

        let exporter = opentelemetry_sdk::trace::InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let (enabled, printed) = one_reconcile(&flags, Some(&provider));
        assert!(enabled);
        let (_, printed_without) = one_reconcile(&[], None);
        // Only the timestamp differs.
        let strip = |s: &str| s.split_once(' ').map(|(_, rest)| rest.to_owned());
        assert_eq!(strip(&printed), strip(&printed_without));
        let spans = exporter.get_finished_spans().unwrap();
        let names: Vec<_> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["plan", "reconcile"]);
    }
}
