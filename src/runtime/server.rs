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
//! - `/metrics` renders the shared registry in the OpenMetrics text format.
//!
//! With `--trace-ui`, one more listener serves the live pipeline view
//! ([`crate::runtime::trace_ui`]): the page at `/`, its server-sent events
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
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::runtime::metrics::{SharedRegistry, encode};
use crate::runtime::trace_ui::{self, TraceUi};

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
}

impl ServerError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Bind { .. } => "bind",
            Self::Serve(_) => "serve",
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

    /// The verdict's text followed by the detail lines.
    fn body(&self, verdict: &str) -> String {
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

/// The routes for one listener.
fn router(probes: bool, metrics_route: bool, state: AppState) -> Router {
    let mut router = Router::new();
    if probes {
        router = router
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz));
    }
    if metrics_route {
        router = router.route("/metrics", get(metrics));
    }
    router.with_state(state)
}

/// The trace UI's routes (`--trace-ui`).
fn trace_ui_router(ui: TraceUi) -> Router {
    Router::new()
        .route("/", get(trace_ui::page))
        .route("/events", get(trace_ui::events))
        .with_state(ui)
}

/// Bound listeners, ready to serve.
pub struct HttpServer {
    listeners: Vec<(TcpListener, Router)>,
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
        let state = AppState {
            readiness,
            registry,
        };
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ServerError::Bind { addr, source })
        };
        let mut listeners = Vec::new();
        let (mut bound_probe, mut bound_metrics) = (None, None);
        match (probe_addr, metrics_addr) {
            (Some(p), Some(m)) if p == m => {
                let listener = bind(p).await?;
                let local = listener.local_addr().ok();
                (bound_probe, bound_metrics) = (local, local);
                listeners.push((listener, router(true, true, state)));
            }
            (probe, metrics_at) => {
                if let Some(p) = probe {
                    let listener = bind(p).await?;
                    bound_probe = listener.local_addr().ok();
                    listeners.push((listener, router(true, false, state.clone())));
                }
                if let Some(m) = metrics_at {
                    let listener = bind(m).await?;
                    bound_metrics = listener.local_addr().ok();
                    listeners.push((listener, router(false, true, state)));
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
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        Ok(Self {
            trace_ui_addr: listener.local_addr().ok(),
            listeners: vec![(listener, trace_ui_router(ui))],
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
        let servers = self.listeners.into_iter().map(|(listener, router)| {
            let shutdown = shutdown.clone();
            async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(shutdown.cancelled_owned())
                    .await
                    .map_err(ServerError::Serve)
            }
        });
        futures::future::try_join_all(servers).await.map(|_| ())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtime::metrics::new_registry;
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
}
