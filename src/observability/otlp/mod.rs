//! Traces to an OpenTelemetry collector over OTLP (HTTP/protobuf), as a
//! `tracing` layer beside the log's.
//!
//! Kubernetes' own components do this with `k8s.io/component-base/tracing`
//! (a `TracerProvider` with an OTLP exporter, a batch span processor and a
//! resource naming the service); controller-runtime has no tracing of its
//! own. Here `tracing`'s spans become OpenTelemetry spans through
//! `tracing-opentelemetry`: the controller's `reconcile` span is a trace's
//! root, the reconciler's phase and API-write spans its children.
//!
//! Off unless an endpoint is given: then the layer is not installed at all,
//! and the debug-level phase and write spans are never created (with the log
//! at info). What is exported when on ([`exported`]): every span at info and
//! above, this crate's debug spans, and events at info and above (as span
//! events of the span they happen in); never OpenTelemetry's own logs, which
//! would feed back into the exporter.
//!
//! The exporter's HTTP client runs on the operator's tokio runtime
//! ([`OnRuntime`]): the SDK's batch processor exports from a thread of its
//! own, where hyper finds no runtime. An `https://` endpoint is reached with
//! rustls ([`tls`]). The standard `OTEL_*` variables for the sampler
//! (`OTEL_TRACES_SAMPLER`, checked at startup by [`sampler`]), batching
//! (`OTEL_BSP_*`), headers (`OTEL_EXPORTER_OTLP_HEADERS`), the CA
//! (`OTEL_EXPORTER_OTLP_CERTIFICATE`) and resource (`OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`) apply.
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

pub mod sampler;
pub mod tls;

/// The service name traces carry unless `OTEL_SERVICE_NAME` names another.
pub const SERVICE_NAME: &str = "tfjob-operator";

/// How long one export may take (OTLP's default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and as whom traces are sent.
#[derive(Clone, Debug)]
pub struct TracesConfig {
    /// The collector's OTLP/HTTP base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// spells it (`http://collector:4318`, `https://…`): `/v1/traces` is
    /// appended.
    pub endpoint: String,
    /// For an `https://` endpoint: a PEM file with the CA certificates to
    /// verify the collector with, instead of the system's roots.
    pub certificate: Option<PathBuf>,
    /// `service.version`.
    pub service_version: String,
    /// More resource attributes (e.g. `k8s.pod.name`).
    pub attributes: Vec<(&'static str, String)>,
}

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error(
        "invalid OTLP endpoint {0:?} (--otlp-endpoint / OTEL_EXPORTER_OTLP_ENDPOINT): want an \
         http:// or https:// URL such as http://collector:4318"
    )]
    Endpoint(String),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Sampler(#[from] sampler::SamplerError),
    #[error("failed to build the OTLP exporter")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The URL spans are posted to: the base endpoint plus `/v1/traces`, as the
/// OTLP specification derives it from `OTEL_EXPORTER_OTLP_ENDPOINT`.
pub fn traces_url(endpoint: &str) -> Result<String, TracesError> {
    let base = endpoint.trim().trim_end_matches('/');
    let host = base
        .strip_prefix("http://")
        .or_else(|| base.strip_prefix("https://"))
        .ok_or_else(|| TracesError::Endpoint(endpoint.to_owned()))?;
    if host.is_empty() || base.parse::<http::Uri>().is_err() {
        return Err(TracesError::Endpoint(endpoint.to_owned()));
    }
    if base.ends_with("/v1/traces") {
        return Ok(base.to_owned());
    }
    Ok(format!("{base}/v1/traces"))
}

/// A tracer provider exporting to `config.endpoint` in batches, its HTTP
/// requests sent on `runtime`, sampling as `OTEL_TRACES_SAMPLER` says.
/// Shut it down before the runtime stops, so the last batch goes out.
///
/// Every misconfiguration found here is an error, so the operator refuses
/// to start; what goes wrong later (the collector away, a certificate it
/// does not like) only fails exports, which the SDK logs: tracing never
/// stops the controller.
pub fn tracer_provider(
    config: &TracesConfig,
    runtime: tokio::runtime::Handle,
) -> Result<SdkTracerProvider, TracesError> {
    let url = traces_url(&config.endpoint)?;
    let https = url.starts_with("https://");
    let certificate = config
        .certificate
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty());
    if certificate.is_some() && !https {
        return Err(tls::TlsError::CertificateWithoutHttps(url).into());
    }
    let sampler = sampler::from_env()?;
    let builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT);
    let builder = if https {
        let connector = tls::connector(tls::client_config(certificate)?);
        builder.with_http_client(OnRuntime::new(
            runtime,
            HyperClient::new(connector, EXPORT_TIMEOUT, None),
        ))
    } else {
        builder.with_http_client(OnRuntime::new(
            runtime,
            HyperClient::with_default_connector(EXPORT_TIMEOUT, None),
        ))
    };
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(builder.build()?)
        .with_sampler(sampler)
        .with_resource(resource(config))
        .build())
}

/// `service.name` (unless `OTEL_SERVICE_NAME` is set), `service.version`,
/// the given attributes, and `OTEL_RESOURCE_ATTRIBUTES`.
fn resource(config: &TracesConfig) -> Resource {
    let mut builder = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        builder = builder.with_service_name(SERVICE_NAME);
    }
    builder
        .with_attribute(KeyValue::new(
            "service.version",
            config.service_version.clone(),
        ))
        .with_attributes(
            config
                .attributes
                .iter()
                .map(|(key, value)| KeyValue::new(*key, value.clone())),
        )
        .build()
}

/// The layer turning spans into OpenTelemetry spans for `provider`,
/// filtered to what is [`exported`].
pub fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + Send + Sync + 'static
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SERVICE_NAME))
        // Thread names and ids say nothing on a work-stealing runtime.
        .with_threads(false)
        .with_filter(tracing_subscriber::filter::filter_fn(exported))
}

/// What the layer exports: spans at info and above (the reconcile), this
/// crate's debug spans (the phases and API writes under it), events at info
/// and above; nothing from OpenTelemetry itself (its export errors are
/// logged, and exporting them would feed the exporter its own failures).
pub fn exported(meta: &Metadata<'_>) -> bool {
    if meta.target().starts_with("opentelemetry") {
        return false;
    }
    let level = *meta.level();
    level <= Level::INFO
        || (meta.is_span() && level <= Level::DEBUG && meta.target().starts_with("tfjob_operator"))
}

/// An [`HttpClient`] whose requests run on a tokio runtime, whichever
/// thread awaits them: the batch span processor drives exports on its own
/// thread with a plain executor, where hyper's connections and timers would
/// find no reactor.
pub struct OnRuntime<C> {
    runtime: tokio::runtime::Handle,
    inner: Arc<C>,
}

impl<C> OnRuntime<C> {
    pub fn new(runtime: tokio::runtime::Handle, inner: C) -> Self {
        Self {
            runtime,
            inner: Arc::new(inner),
        }
    }
}

impl<C: fmt::Debug> fmt::Debug for OnRuntime<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnRuntime")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

type Sent<'a> = Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'a>>;

// The trait is declared with `#[async_trait]`; this is the signature it expands to.
impl<C: HttpClient + 'static> HttpClient for OnRuntime<C> {
    fn send_bytes<'life0, 'async_trait>(&'life0 self, request: Request<Bytes>) -> Sent<'async_trait>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let inner = Arc::clone(&self.inner);
        let sent = self.runtime.spawn(async move {
            let sent = inner.send_bytes(request).await;
            if let Err(error) = &sent {
                // The exporter logs only "network error" (at error level)
                // and the cause at debug: say what went wrong here, or a
                // collector's certificate we do not trust goes unexplained.
                // Outside any span, so it is not exported itself.
                let (cause, tls) = failure(error.as_ref());
                if tls {
                    // One literal: docs/tracing.md quotes it (tests/docs/excerpts.rs).
                    tracing::warn!(
                        error = cause,
                        "failed to send traces: the OTLP collector's TLS certificate was not accepted; give its CA with --otlp-certificate / OTEL_EXPORTER_OTLP_CERTIFICATE"
                    );
                } else {
                    tracing::warn!(error = cause, "failed to send traces to the OTLP collector");
                }
            }
            sent
        });
        Box::pin(async move { sent.await.map_err(|e| Box::new(e) as HttpError)? })
    }
}

/// An export failure's whole chain of causes, one `: ` apart (hyper's own
/// message is only "client error (Connect)"), and whether TLS refused it.
fn failure(error: &(dyn std::error::Error + 'static)) -> (String, bool) {
    let mut text = error.to_string();
    let mut tls = false;
    let mut cause = Some(error);
    while let Some(current) = cause {
        tls |= is_tls(current);
        cause = current.source();
        if let Some(next) = cause {
            let next = next.to_string();
            if !text.ends_with(&next) {
                text = format!("{text}: {next}");
            }
        }
    }
    (text, tls)
}

/// Whether `error` is rustls', perhaps inside io::Errors (hyper-rustls
/// wraps tokio-rustls' io::Error, which wraps rustls', in one more; an
/// io::Error's `source` skips what it wraps).
fn is_tls(error: &(dyn std::error::Error + 'static)) -> bool {
    error.is::<rustls::Error>()
        || error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| is_tls(inner))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_the_endpoint_plus_v1_traces() {
        for endpoint in [
            "http://collector:4318",
            "http://collector:4318/",
            " http://collector:4318/v1/traces",
        ] {
            assert_eq!(
                traces_url(endpoint).unwrap(),
                "http://collector:4318/v1/traces",
                "{endpoint:?}"
            );
        }
        assert_eq!(
            traces_url("http://[::1]:4318/otlp").unwrap(),
            "http://[::1]:4318/otlp/v1/traces"
        );
        assert_eq!(
            traces_url("https://collector.example:4318/").unwrap(),
            "https://collector.example:4318/v1/traces"
        );
        for refused in [
            "collector:4318",
            "grpc://collector:4317",
            "http://",
            "https://",
            "",
        ] {
            assert!(traces_url(refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn a_reconcile_is_one_trace_with_this_crates_debug_spans_and_without_other_libraries() {
        use opentelemetry::trace::SpanId;
        use opentelemetry_sdk::trace::InMemorySpanExporter;
        use tracing_subscriber::layer::SubscriberExt;

        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(layer(&provider));
        tracing::subscriber::with_default(subscriber, || {
            let reconcile = tracing::info_span!("reconcile", namespace = "ns", name = "job");
            let _in_reconcile = reconcile.enter();
            let plan = tracing::debug_span!("plan");
            let _in_plan = plan.enter();
            tracing::debug_span!(target: "kube_client::client", "HTTP").in_scope(|| {});
            tracing::info!("planned");
            tracing::debug!("not exported");
            tracing::error!(target: "opentelemetry_sdk", "export failed");
        });
        provider.force_flush().unwrap();
        let spans = exporter.get_finished_spans().unwrap();
        let names: Vec<_> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["plan", "reconcile"]);
        let (plan, reconcile) = (&spans[0], &spans[1]);
        assert_eq!(reconcile.parent_span_id, SpanId::INVALID, "a trace's root");
        assert_eq!(plan.parent_span_id, reconcile.span_context.span_id());
        assert_eq!(
            plan.span_context.trace_id(),
            reconcile.span_context.trace_id()
        );
        let events: Vec<_> = plan.events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(events, ["planned"]);
        let attribute = |key: &str| {
            reconcile
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attribute("namespace").as_deref(), Some("ns"));
        assert_eq!(attribute("name").as_deref(), Some("job"));
    }

    #[tokio::test]
    async fn a_ca_file_is_refused_for_a_plain_http_endpoint_and_taken_for_https() {
        let dir = std::env::temp_dir().join(format!("otlp-provider-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = rcgen::generate_simple_self_signed(vec!["collector".to_owned()]).unwrap();
        let file = dir.join("ca.crt");
        std::fs::write(&file, ca.cert.pem()).unwrap();
        let config = |endpoint: &str| TracesConfig {
            endpoint: endpoint.to_owned(),
            certificate: Some(file.clone()),
            service_version: "test".to_owned(),
            attributes: Vec::new(),
        };
        let runtime = tokio::runtime::Handle::current();
        let refused = tracer_provider(&config("http://collector:4318"), runtime.clone())
            .expect_err("a CA for plain http");
        assert!(
            refused.to_string().contains("is plain http: use https://"),
            "{refused}"
        );
        let provider = tracer_provider(&config("https://collector:4318"), runtime)
            .expect("an https endpoint with a CA file");
        // Nothing was recorded: the shutdown has nothing to send.
        provider.shutdown().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_export_failure_names_its_whole_cause_and_whether_tls_refused_it() {
        #[derive(Debug, thiserror::Error)]
        #[error("client error (Connect)")]
        struct Client(#[source] std::io::Error);

        let untrusted = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        // As hyper-rustls returns it: tokio-rustls' io::Error in another.
        let error = Client(std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            untrusted,
        )));
        let (text, tls) = failure(&error);
        assert_eq!(
            text,
            "client error (Connect): invalid peer certificate: UnknownIssuer"
        );
        assert!(tls);

        let refused = Client(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let (text, tls) = failure(&refused);
        assert_eq!(text, "client error (Connect): connection refused");
        assert!(!tls);
    }
}
