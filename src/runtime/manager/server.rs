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
//! - `/metrics` renders the metrics registry ([`crate::runtime::metrics`])
//!   in the OpenMetrics text format; with [`SecureMetrics`]
//!   (`--metrics-secure`) over HTTPS and only for bearer tokens the API
//!   server authenticates and authorizes, as controller-runtime's
//!   `SecureServing` with a `FilterProvider`
//!   (`filters.WithAuthenticationAndAuthorization`). The caller plugs both
//!   in (the TLS listener and the token filter live with what serves and
//!   observes the process); this server only routes. Probes stay plain
//!   HTTP (the kubelet probes them without a token), so a secure `/metrics`
//!   needs its own address.
//!
//! The caller may add one more listener with routes of its own
//! ([`HttpServer::bind_routes`]: with `--trace-ui`, the live pipeline view),
//! served and shut down with the rest.
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

use crate::runtime::metrics::SharedMetrics;

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

/// Wraps the `/metrics` route: a filter that answers 401/403 itself or lets
/// the request through (controller-runtime's `metricsserver.Filter`).
pub type MetricsFilter = Arc<dyn Fn(Router) -> Router + Send + Sync>;

/// Serves `router` on `listener` over TLS until `stop` resolves, then lets
/// in-flight requests finish.
pub type ServeTls = Arc<
    dyn Fn(TcpListener, Router, BoxFuture<'static, ()>) -> BoxFuture<'static, std::io::Result<()>>
        + Send
        + Sync,
>;

/// `/metrics` over HTTPS, for authorized bearer tokens only: both halves
/// are supplied by the caller.
#[derive(Clone)]
pub struct SecureMetrics {
    pub filter: MetricsFilter,
    pub serve: ServeTls,
}

#[derive(Clone)]
struct AppState {
    readiness: Readiness,
    metrics: SharedMetrics,
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
        state.metrics.render(),
    )
        .into_response()
}

/// The routes for one listener; `/metrics` behind `filter` when given.
fn router(
    probes: bool,
    metrics_route: bool,
    filter: Option<MetricsFilter>,
    state: AppState,
) -> Router {
    let mut router: Router = Router::new();
    if probes {
        router = router.merge(
            Router::new()
                .route("/healthz", get(healthz))
                .route("/readyz", get(readyz))
                .with_state(state.clone()),
        );
    }
    if metrics_route {
        let metrics_router = Router::new()
            .route("/metrics", get(metrics))
            .with_state(state);
        router = router.merge(match filter {
            Some(filter) => filter(metrics_router),
            None => metrics_router,
        });
    }
    router
}

/// Bound listeners, ready to serve.
pub struct HttpServer {
    /// Each listener with its routes and, for a secure `/metrics`, its TLS.
    listeners: Vec<(TcpListener, Router, Option<ServeTls>)>,
    probe_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    routes_addr: Option<SocketAddr>,
}

impl HttpServer {
    /// Binds the probe and metrics addresses (one listener if they are equal;
    /// `None` turns an endpoint group off). Port 0 picks a free port: see
    /// [`probe_addr`](Self::probe_addr) and [`metrics_addr`](Self::metrics_addr).
    pub async fn bind(
        probe_addr: Option<SocketAddr>,
        metrics_addr: Option<SocketAddr>,
        readiness: Readiness,
        metrics: SharedMetrics,
    ) -> Result<Self, ServerError> {
        Self::bind_with(probe_addr, metrics_addr, readiness, metrics, None).await
    }

    /// [`bind`](Self::bind), with `/metrics` served as `secure` says when
    /// given (then it must not share the probes' address).
    pub async fn bind_with(
        probe_addr: Option<SocketAddr>,
        metrics_addr: Option<SocketAddr>,
        readiness: Readiness,
        metrics: SharedMetrics,
        secure: Option<SecureMetrics>,
    ) -> Result<Self, ServerError> {
        let state = AppState { readiness, metrics };
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
                    let (serve, filter) = match secure {
                        Some(SecureMetrics { filter, serve }) => (Some(serve), Some(filter)),
                        None => (None, None),
                    };
                    listeners.push((listener, router(false, true, filter, state), serve));
                }
            }
        }
        Ok(Self {
            listeners,
            probe_addr: bound_probe,
            metrics_addr: bound_metrics,
            routes_addr: None,
        })
    }

    /// Binds one listener for the caller's own `routes` (port 0 picks a
    /// free port: see [`routes_addr`](Self::routes_addr)); with
    /// `--trace-ui`, the pipeline view. Routes that stream (server-sent
    /// events) must end their streams at shutdown, so
    /// [`serve`](Self::serve) can finish its graceful shutdown.
    pub async fn bind_routes(addr: SocketAddr, routes: Router) -> Result<Self, ServerError> {
        let listener = listen::bind(addr).map_err(|source| ServerError::Bind { addr, source })?;
        Ok(Self {
            routes_addr: listener.local_addr().ok(),
            listeners: vec![(listener, routes, None)],
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

    /// Where [`bind_routes`](Self::bind_routes) serves.
    pub fn routes_addr(&self) -> Option<SocketAddr> {
        self.routes_addr
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
                Some(serve) => serve(listener, router, Box::pin(stop)),
            };
            async move { served.await.map_err(ServerError::Serve) }
        });
        futures::future::try_join_all(servers).await.map(|_| ())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtime::metrics::Family;
    use crate::runtime::metrics::testing::new_registry;

    const DEMO: Family = Family {
        name: "demo",
        help: "a demo counter",
        labels: &[],
    };

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
        registry.counter(DEMO).with(&[]).inc();
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

    /// A filter that lets only `Authorization: Bearer reader` through.
    fn only_reader(router: Router) -> Router {
        router.route_layer(axum::middleware::from_fn(
            |request: axum::extract::Request, next: axum::middleware::Next| async move {
                let token = request
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                if token == Some("Bearer reader") {
                    next.run(request).await
                } else {
                    (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response()
                }
            },
        ))
    }

    /// Serves plain HTTP, counting the listeners it was handed (a stand-in
    /// for the caller's TLS).
    fn counting_serve(served: Arc<std::sync::atomic::AtomicUsize>) -> ServeTls {
        Arc::new(move |listener, router, stop| {
            served.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(stop)
                    .await
            })
        })
    }

    /// GET with a bearer token: (status code, body).
    async fn get_with_token(addr: SocketAddr, path: &str, token: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        tcp.read_to_end(&mut response).await.unwrap();
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

    #[tokio::test]
    async fn a_secure_metrics_port_is_served_by_the_callers_tls_behind_its_filter() {
        let registry = new_registry();
        registry.counter(DEMO).with(&[]);
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let secure = SecureMetrics {
            filter: Arc::new(only_reader),
            serve: counting_serve(Arc::clone(&served)),
        };
        let other: Option<SocketAddr> = Some("127.0.0.2:0".parse().unwrap());
        let server =
            HttpServer::bind_with(loopback(), other, Readiness::new(), registry, Some(secure))
                .await
                .unwrap();
        let (probe, metrics_at) = (server.probe_addr().unwrap(), server.metrics_addr().unwrap());
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.serve(stop.clone()));

        let (status, body) = get_with_token(metrics_at, "/metrics", "reader").await;
        assert_eq!(status, 200);
        assert!(body.contains("demo_total 0"), "{body}");
        assert_eq!(
            http_get(metrics_at, "/metrics").await,
            (401, "Unauthorized\n".to_owned())
        );
        assert_eq!(
            get_with_token(metrics_at, "/metrics", "intruder").await.0,
            401
        );
        // The probes stay plain, without a token, on a listener of their own.
        assert_eq!(http_get(probe, "/healthz").await, (200, "ok".to_owned()));
        assert_eq!(served.load(Ordering::SeqCst), 1, "only /metrics is secured");

        stop.cancel();
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_secure_metrics_port_cannot_share_the_probes_address() {
        let secure = SecureMetrics {
            filter: Arc::new(only_reader),
            serve: counting_serve(Arc::default()),
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

    #[tokio::test]
    async fn the_callers_routes_are_served_on_a_listener_of_their_own() {
        let routes = Router::new().route("/", get(|| async { "page" }));
        let server = HttpServer::bind_routes("127.0.0.1:0".parse().unwrap(), routes)
            .await
            .unwrap();
        let addr = server.routes_addr().unwrap();
        assert_eq!((server.probe_addr(), server.metrics_addr()), (None, None));
        let stop = CancellationToken::new();
        let task = tokio::spawn(server.serve(stop.clone()));
        assert_eq!(http_get(addr, "/").await, (200, "page".to_owned()));
        stop.cancel();
        task.await.unwrap().unwrap();
    }
}
