//! The live pipeline view behind `--trace-ui`: a page that draws the boxes
//! of client-go's controller diagram (Reflector → DeltaFIFO →
//! Informer/Indexer → handlers → workqueue → worker → reconcile → API write)
//! and animates every `pipeline` trace event through them.
//!
//! client-go has no counterpart: it is the diagram of sample-controller's
//! `docs/controller-client-go.md`, drawn from the events `--trace-pipeline`
//! prints (target `pipeline`, a `stage` field). A [`TraceUiLayer`] turns each
//! such event into a small JSON message on a tokio `broadcast` channel; each
//! browser is one receiver, fed as server-sent events by [`events`].
//!
//! What it must never do: slow the pipeline down or grow without bound. The
//! channel holds [`BUFFER`] messages; a viewer that falls further behind
//! loses the oldest (the page shows how many), the sender never waits. When
//! `--trace-ui` is off the layer is not installed, so nothing here runs.
use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde_json::{Map, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;

/// The page: plain HTML, CSS and JavaScript, no framework, in the binary.
const PAGE: &str = include_str!("index.html");

/// The tutorial's chapters the page's boxes link to, in the binary too: a
/// click must work wherever the operator runs, and the server has no
/// repository to read them from. Served as their Markdown text; a test
/// checks every chapter the page names is here.
const CHAPTERS: [(&str, &str); 8] = [
    (
        "01-reflector.md",
        include_str!("../../../docs/01-reflector.md"),
    ),
    (
        "02-delta-fifo.md",
        include_str!("../../../docs/02-delta-fifo.md"),
    ),
    (
        "03-informer.md",
        include_str!("../../../docs/03-informer.md"),
    ),
    (
        "05-event-handlers.md",
        include_str!("../../../docs/05-event-handlers.md"),
    ),
    (
        "06-workqueue.md",
        include_str!("../../../docs/06-workqueue.md"),
    ),
    ("07-workers.md", include_str!("../../../docs/07-workers.md")),
    (
        "08-reconcile.md",
        include_str!("../../../docs/08-reconcile.md"),
    ),
    (
        "11-client-cache-recorder.md",
        include_str!("../../../docs/11-client-cache-recorder.md"),
    ),
];

/// The page's version: a fingerprint (64-bit FNV-1a) of its HTML.
/// `docs/trace-ui.png` records the one it shows, so the docs' drift guard
/// can tell a picture of an older page.
pub fn page_fingerprint() -> String {
    format!("fnv1a64:{:016x}", fnv1a64(PAGE.as_bytes()))
}

/// 64-bit FNV-1a: small, stable across Rust versions (std's hasher is not).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The trace target the pipeline's stages log under.
pub const TARGET: &str = "pipeline";

/// Messages the channel keeps for a viewer that has not read them yet.
pub const BUFFER: usize = 1024;

/// The shared end of the view: the layer publishes into it, the HTTP
/// handlers subscribe to it. Cheap to clone.
#[derive(Clone)]
pub struct TraceUi {
    inner: Arc<Inner>,
}

struct Inner {
    sender: broadcast::Sender<Arc<str>>,
    seq: AtomicU64,
    /// Fires at shutdown: ends every viewer's stream so the HTTP server's
    /// graceful shutdown does not wait on streams that never end.
    shutdown: CancellationToken,
}

impl TraceUi {
    /// A view whose channel keeps [`BUFFER`] messages per viewer; streams end
    /// when `shutdown` fires.
    pub fn new(shutdown: CancellationToken) -> Self {
        Self::with_buffer(BUFFER, shutdown)
    }

    /// As [`new`](Self::new) with another buffer size (tests use small ones).
    pub fn with_buffer(buffer: usize, shutdown: CancellationToken) -> Self {
        let (sender, _) = broadcast::channel(buffer);
        Self {
            inner: Arc::new(Inner {
                sender,
                seq: AtomicU64::new(0),
                shutdown,
            }),
        }
    }

    /// The tracing layer that feeds this view, filtered to [`TARGET`] at
    /// debug: installing it turns the pipeline's trace events on.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        TraceUiLayer { ui: self.clone() }
            .with_filter(Targets::new().with_target(TARGET, Level::DEBUG))
    }

    /// A new viewer's end of the channel: every message from now on, or a
    /// `Lagged` error counting those it fell too far behind to get.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.inner.sender.subscribe()
    }

    /// Browsers connected right now.
    pub fn viewers(&self) -> usize {
        self.inner.sender.receiver_count()
    }

    /// Messages held for viewers that have not read them: at most the buffer.
    pub fn queued(&self) -> usize {
        self.inner.sender.len()
    }

    /// Publishes one pipeline event's fields (already collected).
    fn publish(&self, mut fields: Map<String, Value>) {
        let inner = &self.inner;
        if inner.sender.receiver_count() == 0 {
            return;
        }
        let seq = inner.seq.fetch_add(1, Ordering::Relaxed) + 1;
        fields.insert("seq".into(), seq.into());
        fields.insert("ts".into(), jiff::Timestamp::now().to_string().into());
        if let Ok(text) = serde_json::to_string(&fields) {
            // Err only when every viewer left since the check: nobody to tell.
            let _ = inner.sender.send(text.into());
        }
    }
}

/// The tracing layer: each `pipeline` event becomes one JSON message.
pub struct TraceUiLayer {
    ui: TraceUi,
}

impl<S: Subscriber> Layer<S> for TraceUiLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != TARGET {
            return;
        }
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        self.ui.publish(fields);
    }
}

/// Collects an event's fields as JSON values (`message` becomes `msg`).
struct Fields<'a>(&'a mut Map<String, Value>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let name = match field.name() {
            "message" => "msg",
            name => name,
        };
        self.0.insert(name.to_owned(), value);
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

/// `GET /`: the page.
/// The page's routes (`--trace-ui`), for a listener of their own: the
/// page at `/`, its server-sent events at `/events`, the chapters a box
/// links to at `/docs/{chapter}`. Streams end when the [`TraceUi`]'s
/// shutdown token fires, so the server can finish its graceful shutdown.
pub fn router(ui: TraceUi) -> axum::Router {
    axum::Router::new()
        .route("/", axum::routing::get(page))
        .route("/events", axum::routing::get(events))
        .route("/docs/{chapter}", axum::routing::get(chapter))
        .with_state(ui)
}

pub async fn page() -> Response {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE)).into_response()
}

/// `GET /docs/{chapter}`: a chapter the page links to, as Markdown text.
pub async fn chapter(Path(name): Path<String>) -> Response {
    match CHAPTERS.iter().find(|(file, _)| *file == name) {
        Some((_, text)) => {
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], *text).into_response()
        }
        None => {
            let served: Vec<&str> = CHAPTERS.iter().map(|(file, _)| *file).collect();
            let message = format!(
                "no chapter {name} here: this page serves {}; every chapter is in the repository's docs/",
                served.join(", ")
            );
            (StatusCode::NOT_FOUND, message).into_response()
        }
    }
}

/// `GET /events`: this viewer's server-sent events, until shutdown.
pub async fn events(State(ui): State<TraceUi>) -> Response {
    let stream = viewer_stream(ui.subscribe(), ui.inner.shutdown.clone());
    tracing::info!(viewers = ui.viewers(), "trace UI: a viewer connected");
    Sse::new(stream.map(Ok::<_, Infallible>))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// One viewer's messages: each pipeline event as a `message`, and after a
/// gap an event `dropped` carrying how many this viewer has lost in all.
fn viewer_stream(
    receiver: broadcast::Receiver<Arc<str>>,
    shutdown: CancellationToken,
) -> impl Stream<Item = SseEvent> + Send + 'static {
    futures::stream::unfold((receiver, 0_u64), |(mut receiver, dropped)| async move {
        match receiver.recv().await {
            Ok(message) => Some((SseEvent::default().data(&*message), (receiver, dropped))),
            Err(broadcast::error::RecvError::Lagged(lost)) => {
                let dropped = dropped + lost;
                let event = SseEvent::default()
                    .event("dropped")
                    .data(dropped.to_string());
                Some((event, (receiver, dropped)))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
    .take_until(shutdown.cancelled_owned())
}

#[cfg(test)]
mod tests;
