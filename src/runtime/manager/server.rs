//! The operator's HTTP endpoints: `/healthz`, `/readyz` and `/metrics`.
//!
//! Mirrors controller-runtime's probe server (`pkg/manager/internal.go`,
//! `pkg/healthz`) and metrics server (`pkg/metrics/server/server.go`):
//!
//! - `/healthz` answers 200 while the process can answer at all (a liveness
//!   probe that fails restarts the Pod, so it must not depend on the API
//!   server or on leadership);
//! - `/readyz` answers 503 until every cache has synced, 200 after, and 503
//!   again once shutdown begins, so a rolling update stops sending traffic
//!   (and `kubectl wait`) to a process that is going away;
//! - `/metrics` renders the shared registry in the OpenMetrics text format;
//!   with [`SecureMetrics`] (`--metrics-secure`) over HTTPS
//!   ([`crate::observability::metrics_tls`]) and only for bearer tokens the API
//!   server authenticates and authorizes ([`crate::observability::metrics_auth`]),
//!   as controller-runtime's `SecureServing` with
//!   `filters.WithAuthenticationAndAuthorization`. Probes stay plain HTTP
//!   (the kubelet probes them without a token), so a secure `/metrics`
//!   needs its own address.
//!
//! With `--trace-ui`, one more listener serves the live pipeline view
//! ([`crate::observability::trace_ui`]): the page at `/`, its server-sent events
//! at `/events`.
//!
//! Probes and metrics may share one address or use two. Listeners are bound
//! up front ([`HttpServer::bind`]) so a port conflict fails the start, not a
//! probe minutes later. This module serves state; it never changes it: the
//! manager flips [`Readiness`].
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::BoxFuture;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::observability::metrics::{SharedRegistry, encode};
use crate::observability::metrics_auth::{self, MetricsAuth};
use crate::observability::metrics_tls::MetricsTls;
use crate::observability::tls_listener::TlsListener;
use crate::observability::trace_ui::{self, TraceUi};

use super::listen;

/// Errors starting or running the HTTP server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("failed to bind {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to serve http")]
    Serve(#[source] std::io::Error),
    #[error(
        "a secure /metrics needs an address of its own: the probes at {addr} stay plain HTTP for the kubelet"
    )]
    SecureSharedAddress { addr: SocketAddr },
}

impl ServerError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Bind { .. } => "bind",
            Self::Serve(_) => "serve",
            Self::SecureSharedAddress { .. } => "config",
        }
    }
}

/// What `/readyz` reports. Cheap to clone; all clones share one state.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    synced: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
    /// Lines shown after the verdict, e.g. which CRD schema was detected.
    details: Arc<std::sync::RwLock<Vec<String>>>,
}

impl Readiness {
    /// Not ready: caches have not synced yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every cache has synced.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// Shutdown has begun; not ready from now on.
    pub fn mark_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Adds a line of detail to every `/readyz` answer (facts found at
    /// startup that an operator of the operator wants to see).
    pub fn add_detail(&self, line: impl Into<String>) {
        self.details
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(line.into());
    }

    /// Adds a detail line that its owner may rewrite later
    /// ([`DetailLine::set`]): a fact still being found out, e.g. an
    /// optional API the server has not answered about yet.
    pub fn add_changing_detail(&self, line: impl Into<String>) -> DetailLine {
        let mut details = self.details.write().unwrap_or_else(|p| p.into_inner());
        details.push(line.into());
        DetailLine {
            details: Arc::clone(&self.details),
            index: details.len() - 1,
        }
    }

    /// The verdict's text followed by the detail lines.
    pub fn body(&self, verdict: &str) -> String {
        let details = self.details.read().unwrap_or_else(|p| p.into_inner());
        std::iter::once(verdict)
            .chain(details.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), &'static str> {
        if self.stopping.load(Ordering::SeqCst) {
            Err("shutting down")
        } else if !self.synced.load(Ordering::SeqCst) {
            Err("caches not synced")
        } else {
            Ok(())
        }
    }
}

/// One `/readyz` detail line, rewritten in place
/// ([`Readiness::add_changing_detail`]).
#[derive(Clone, Debug)]
pub struct DetailLine {
    details: Arc<std::sync::RwLock<Vec<String>>>,
    index: usize,
}

impl DetailLine {
    /// Replaces the line's text.
    pub fn set(&self, line: impl Into<String>) {
        let mut details = self.details.write().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = details.get_mut(self.index) {
            *slot = line.into();
        }
    }
}

/// `/metrics` over HTTPS, for authorized bearer tokens only.
#[derive(Clone)]
pub struct SecureMetrics {
    pub tls: MetricsTls,
    pub auth: MetricsAuth,
}

#[derive(Clone)]
struct AppState {
    readiness: Readiness,
    registry: SharedRegistry,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.readiness.check() {
        Ok(()) => (StatusCode::OK, state.readiness.body("ok")).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, state.readiness.body(why)).into_response(),
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        encode(&state.registry),
    )
        .into_response()
}

/// The routes for one listener; `/metrics` behind `auth` when given.
fn router(probes: bool, metrics_route: bool, auth: Option<MetricsAuth>, state: AppState) -> Router {
    let mut router = Router::new();
    if probes {
        router = router
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz));
    }
    if metrics_route {
        let mut metrics_router = Router::new().route("/metrics", get(metrics));
        if let Some(auth) = auth {
            metrics_router = metrics_router.route_layer(axum::middleware::from_fn_with_state(
                auth,
                metrics_auth::require,
            ));
        }
        router = router.merge(metrics_router);
    }
    router.with_state(state)
}

/// The trace UI's routes (`--trace-ui`).
fn trace_ui_router(ui: TraceUi) -> Router {
    Router::new()
        .route("/", get(trace_ui::page))
        .route("/events", get(trace_ui::events))
        .route("/docs/{chapter}", get(trace_ui::chapter))
        .with_state(ui)
}

/// Bound listeners, ready to serve.
pub struct HttpServer {
    /// Each listener with its routes and, for a secure `/metrics`, its TLS.
    listeners: Vec<(TcpListener, Router, Option<MetricsTls>)>,
    probe_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    trace_ui_addr: Option<SocketAddr>,
}

impl HttpServer {
    /// Binds the probe and metrics addresses (one listener if they are equal;
    /// `None` turns an endpoint group off). Port 0 picks a free port: see
    /// [`probe_addr`](Self::probe_addr) and [`metrics_addr`](Self::metrics_addr).
    pub async fn bind(
        probe_addr: Option<SocketAddr>,
        metrics_addr: Option<SocketAddr>,
        readiness: Readiness,
        registry: SharedRegistry,
    ) -> Result<Self, ServerError> {
        Self::bind_with(probe_addr, metrics_addr, readiness, registry, None).await
    }

    /// [`bind`](Self::bind), with `/metrics` served as `secure` says when
    /// given (then it must not share the probes' address).
    pub async fn bind_with(
        probe_addr: Option<SocketAddr>,
        metrics_addr: Option<SocketAddr>,
        readiness: Readiness,
        registry: SharedRegistry,
        secure: Option<SecureMetrics>,
    ) -> Result<Self, ServerError> {
        let state = AppState {
            readiness,
            registry,
        };
        let bind = |addr: SocketAddr| async move {
            listen::bind(addr).map_err(|source| ServerError::Bind { addr, source })
        };
        let mut listeners = Vec::new();
        let (mut bound_probe, mut bound_metrics) = (None, None);
        match (probe_addr, metrics_addr) {
            (Some(p), Some(m)) if p == m => {
                if secure.is_some() {
                    return Err(ServerError::SecureSharedAddress { addr: p });
                }
                let listener = bind(p).await?;
                let local = listener.local_addr().ok();
                (bound_probe, bound_metrics) = (local, local);
                listeners.push((listener, router(true, true, None, state), None));
            }
            (probe, metrics_at) => {
                if let Some(p) = probe {
                    let listener = bind(p).await?;
                    bound_probe = listener.local_addr().ok();
                    listeners.push((listener, router(true, false, None, state.clone()), None));
                }
                if let Some(m) = metrics_at {
                    let listener = bind(m).await?;
                    bound_metrics = listener.local_addr().ok();
                    let (tls, auth) = match secure {
                        Some(SecureMetrics { tls, auth }) => (Some(tls), Some(auth)),
                        None => (None, None),
                    };
                    listeners.push((listener, router(false, true, auth, state), tls));
                }
            }
        }
        Ok(Self {
            listeners,
            probe_addr: bound_probe,
            metrics_addr: bound_metrics,
            trace_ui_addr: None,
        })
    }

    /// Binds the trace UI's listener alone (port 0 picks a free port: see
    /// [`trace_ui_addr`](Self::trace_ui_addr)). Its event streams end when
    /// the [`TraceUi`]'s shutdown token fires, so [`serve`](Self::serve)
    /// can finish its graceful shutdown.
    pub async fn bind_trace_ui(addr: SocketAddr, ui: TraceUi) -> Result<Self, ServerError> {
        let listener = listen::bind(addr).map_err(|source| ServerError::Bind { addr, source })?;
        Ok(Self {
            trace_ui_addr: listener.local_addr().ok(),
            listeners: vec![(listener, trace_ui_router(ui), None)],
            probe_addr: None,
            metrics_addr: None,
        })
    }

    /// Where `/healthz` and `/readyz` are served.
    pub fn probe_addr(&self) -> Option<SocketAddr> {
        self.probe_addr
    }

    /// Where `/metrics` is served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where the trace UI is served.
    pub fn trace_ui_addr(&self) -> Option<SocketAddr> {
        self.trace_ui_addr
    }

    /// Serves until `shutdown`, then lets in-flight requests finish.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), ServerError> {
        let servers = self.listeners.into_iter().map(|(listener, router, tls)| {
            let stop = shutdown.clone().cancelled_owned();
            let served: BoxFuture<'static, std::io::Result<()>> = match tls {
                None => Box::pin(async move {
                    axum::serve(listener, router)
                        .with_graceful_shutdown(stop)
                        .await
                }),
                Some(tls) => Box::pin(async move {
                    let listener = TlsListener::new(listener, tls.server_config());
                    axum::serve(listener, router)
                        .with_graceful_shutdown(stop)
                        .await
                }),
            };
            async move { served.await.map_err(ServerError::Serve) }
        });
        futures::future::try_join_all(servers).await.map(|_| ())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::observability::metrics::new_registry;
    use prometheus_client::metrics::counter::Counter;

    /// A minimal HTTP/1.1 GET over a raw socket: (status code, body).
    pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        let mut written = 0;
        while written < request.len() {
            stream.writable().await.unwrap();
            match stream.try_write(&request.as_bytes()[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        let mut response = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            stream.readable().await.unwrap();
            match stream.try_read(&mut buf) {
                Ok(0) => break,
                Ok(n) => response.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap();
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    fn loopback() -> Option<SocketAddr> {
        Some("127.0.0.1:0".parse().unwrap())
    }

    #[test]
    fn readiness_goes_from_unsynced_to_ready_to_stopping() {
        let r = Readiness::new();
        assert_eq!(r.check(), Err("caches not synced"));
        r.mark_synced();
        assert_eq!(r.check(), Ok(()));
        r.mark_stopping();
        assert_eq!(r.check(), Err("shutting down"));
    }

    #[test]
    fn a_changing_detail_line_is_rewritten_in_place() {
        let r = Readiness::new();
        r.add_detail("crd: ours");
        let line = r.add_changing_detail("kueue: asking");
        r.add_detail("last");
        line.set("kueue: served");
        assert_eq!(r.body("ok"), "ok\ncrd: ours\nkueue: served\nlast");
    }

    #[tokio::test]
    async fn probes_and_metrics_answer_on_separate_ports() {
        let registry = new_registry();
        let counter = Counter::<u64>::default();
        registry
            .lock()
            .unwrap()
            .register("demo", "a demo counter", counter.clone());
        counter.inc();
        let readiness = Readiness::new();
        // Different addresses (127.0.0.1 and 127.0.0.2 are both loopback on Linux).
        let other: Option<SocketAddr> = Some("127.0.0.2:0".parse().unwrap());
        let server = HttpServer::bind(loopback(), other, readiness.clone(), registry)
            .await
            .unwrap();
        let (probe, metrics_at) = (server.probe_addr().unwrap(), server.metrics_addr().unwrap());
        assert_ne!(probe, metrics_at);
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.serve(stop.clone()));

        assert_eq!(http_get(probe, "/healthz").await, (200, "ok".to_owned()));
        assert_eq!(http_get(probe, "/readyz").await.0, 503);
        readiness.mark_synced();
        assert_eq!(http_get(probe, "/readyz").await.0, 200);
        readiness.mark_stopping();
        assert_eq!(http_get(probe, "/readyz").await.0, 503);

        let (status, body) = http_get(metrics_at, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("demo_total 1"), "{body}");
        assert_eq!(
            http_get(probe, "/metrics").await.0,
            404,
            "metrics live on their own port"
        );

        stop.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn one_shared_address_serves_every_endpoint() {
        let shared = HttpServer::bind(loopback(), loopback(), Readiness::new(), new_registry())
            .await
            .unwrap();
        let addr = shared.probe_addr().unwrap();
        assert_eq!(shared.metrics_addr(), Some(addr));
        let stop = CancellationToken::new();
        let task = tokio::spawn(shared.serve(stop.clone()));
        assert_eq!(http_get(addr, "/healthz").await.0, 200);
        assert_eq!(http_get(addr, "/metrics").await.0, 200);
        stop.cancel();
        task.await.unwrap().unwrap();
    }

    /// Allows the token "reader"; authenticates no other.
    struct OnlyReader;

    impl crate::observability::metrics_auth::Reviews for OnlyReader {
        fn authenticate<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<metrics_auth::Identity>, metrics_auth::ReviewError>>
        {
            let who = (token == "reader").then(|| metrics_auth::Identity {
                username: "reader".into(),
                ..Default::default()
            });
            Box::pin(async move { Ok(who) })
        }

        fn authorize<'a>(
            &'a self,
            _: &'a metrics_auth::Identity,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<bool, metrics_auth::ReviewError>> {
            Box::pin(async { Ok(true) })
        }
    }

    /// GET over TLS, trusting exactly `cert` for the name `localhost`:
    /// (status code, body), or the error of the connection.
    pub(crate) async fn https_get(
        addr: SocketAddr,
        cert: &rustls_pki_types::CertificateDer<'static>,
        path: &str,
        token: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.clone()).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await?;
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
        tls.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        // rustls reports a peer that closes without close_notify as an
        // error after the data; the response is complete by then.
        let _ = tls.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no HTTP response: {text:?}")))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((status, body))
    }

    #[tokio::test]
    async fn a_secure_metrics_port_speaks_tls_and_answers_only_authorized_tokens() {
        let registry = new_registry();
        registry
            .lock()
            .unwrap()
            .register("demo", "a demo counter", Counter::<u64>::default());
        let tls = MetricsTls::self_signed().unwrap();
        let cert = tls.certificate().clone();
        let secure = SecureMetrics {
            tls,
            auth: MetricsAuth::with_reviews(OnlyReader),
        };
        let other: Option<SocketAddr> = Some("127.0.0.2:0".parse().unwrap());
        let server =
            HttpServer::bind_with(loopback(), other, Readiness::new(), registry, Some(secure))
                .await
                .unwrap();
        let (probe, metrics_at) = (server.probe_addr().unwrap(), server.metrics_addr().unwrap());
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.serve(stop.clone()));

        let (status, body) = https_get(metrics_at, &cert, "/metrics", Some("reader"))
            .await
            .unwrap();
        assert_eq!(status, 200);
        assert!(body.contains("demo_total 0"), "{body}");
        let (status, body) = https_get(metrics_at, &cert, "/metrics", None)
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (401, "Unauthorized\n"));
        let (status, _) = https_get(metrics_at, &cert, "/metrics", Some("intruder"))
            .await
            .unwrap();
        assert_eq!(status, 401);
        // Plain HTTP gets no HTTP answer from a TLS port.
        let plain = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            let mut tcp = tokio::net::TcpStream::connect(metrics_at).await.unwrap();
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            tcp.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
                .await
                .unwrap();
            let mut out = Vec::new();
            let _ = tcp.read_to_end(&mut out).await;
            out
        })
        .await
        .unwrap();
        assert!(
            !plain.starts_with(b"HTTP/"),
            "{:?}",
            String::from_utf8_lossy(&plain)
        );
        // The probes stay plain HTTP, without a token.
        assert_eq!(http_get(probe, "/healthz").await, (200, "ok".to_owned()));

        stop.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_secure_metrics_port_cannot_share_the_probes_address() {
        let secure = SecureMetrics {
            tls: MetricsTls::self_signed().unwrap(),
            auth: MetricsAuth::with_reviews(OnlyReader),
        };
        let err = HttpServer::bind_with(
            loopback(),
            loopback(),
            Readiness::new(),
            new_registry(),
            Some(secure),
        )
        .await
        .err()
        .unwrap();
        assert_eq!(err.category(), "config");
        assert!(err.to_string().contains("plain HTTP"), "{err}");
    }

    #[tokio::test]
    async fn binding_a_taken_port_fails_up_front() {
        let taken = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let err = HttpServer::bind(Some(addr), None, Readiness::new(), new_registry())
            .await
            .err()
            .unwrap();
        assert_eq!(err.category(), "bind");
    }

    // The trace UI served over HTTP (its streaming is tested in
    // `observability::trace_ui`, which does not know this server).
    mod trace_ui_page {
        use std::net::SocketAddr;
        use std::time::Duration;

        use serde_json::Value;
        use tokio_util::sync::CancellationToken;
        use tracing_subscriber::layer::SubscriberExt;

        use super::http_get;
        use crate::observability::trace_ui::TraceUi;
        use crate::runtime::manager::server::HttpServer;

        /// Installs `ui`'s layer as this thread's subscriber while the guard lives.
        fn feed(ui: &TraceUi) -> tracing::subscriber::DefaultGuard {
            tracing::subscriber::set_default(tracing_subscriber::registry().with(ui.layer()))
        }

        async fn wait_for_viewers(ui: &TraceUi, n: usize) {
            tokio::time::timeout(Duration::from_secs(10), async {
                while ui.viewers() < n {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .expect("the viewer subscribed");
        }

        #[tokio::test]
        async fn the_events_endpoint_streams_a_pipeline_event_as_json() {
            let stop = CancellationToken::new();
            let ui = TraceUi::new(stop.clone());
            let _guard = feed(&ui);
            let server = HttpServer::bind_trace_ui("127.0.0.1:0".parse().unwrap(), ui.clone())
                .await
                .unwrap();
            let addr: SocketAddr = server.trace_ui_addr().unwrap();
            let serving = tokio::spawn(server.serve(stop.clone()));

            let (status, page) = http_get(addr, "/").await;
            assert_eq!(status, 200);
            assert!(page.contains("new EventSource(\"events\")"), "{page}");
            // A box's link: the chapter, from the binary, wherever it runs.
            let (status, chapter) = http_get(addr, "/docs/01-reflector.md").await;
            assert_eq!(status, 200);
            assert!(chapter.contains("# 1. Reflector"), "{chapter}");
            let (status, missing) = http_get(addr, "/docs/99-nothing.md").await;
            assert_eq!(status, 404);
            assert!(missing.contains("01-reflector.md"), "{missing}");

            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.writable().await.unwrap();
            let request = b"GET /events HTTP/1.1\r\nHost: test\r\n\r\n";
            assert_eq!(stream.try_write(request).unwrap(), request.len());
            wait_for_viewers(&ui, 1).await;
            tracing::info!(target: "tfjob_operator", "not a pipeline event: never sent");
            tracing::debug!(target: "pipeline", stage = "5 handler", key = "ns/job", depth = 3, "key added to the workqueue");

            // Read the (chunked) response until the first complete data line.
            let data = tokio::time::timeout(Duration::from_secs(10), async {
                let mut text = String::new();
                let mut buf = [0u8; 4096];
                loop {
                    let found = text
                        .split_once("\ndata: ")
                        .and_then(|(_, rest)| rest.split_once('\n'));
                    if let Some((data, _)) = found {
                        break data.to_owned();
                    }
                    stream.readable().await.unwrap();
                    match stream.try_read(&mut buf) {
                        Ok(0) => panic!("the stream closed: {text}"),
                        Ok(n) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            })
            .await
            .expect("a data line");
            let message: Value = serde_json::from_str(&data).unwrap();
            assert_eq!(message["stage"], "5 handler");
            assert_eq!(message["key"], "ns/job");
            assert_eq!(message["msg"], "key added to the workqueue");
            assert_eq!(message["depth"], 3, "the queue's depth, as traced");
            assert_eq!(message["seq"], 1, "the first message sent");

            // Shutdown ends the open stream, so the server's graceful shutdown
            // finishes instead of waiting on it forever.
            stop.cancel();
            tokio::time::timeout(Duration::from_secs(10), serving)
                .await
                .expect("the server stops with a viewer connected")
                .unwrap()
                .unwrap();
        }
    }
}
