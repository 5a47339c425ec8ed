//! The Reflector: keeps a DeltaFIFO in step with the API server.
//!
//! Mirrors client-go `tools/cache/reflector.go`. It LISTs every object of a
//! kind (paginated, 500 per page; or, where the server supports it, one
//! streaming "WatchList" request), hands the result to the FIFO as one
//! `replace`, then WATCHes from the list's resourceVersion and pushes every
//! event into the FIFO. Bookmarks only advance the resourceVersion.
//!
//! Failure handling is the point of this module:
//! - a watch that ends normally (server timeout, randomised to 5–10 minutes so
//!   reflectors do not reconnect in lockstep) is re-opened from the last
//!   resourceVersion, without a relist;
//! - `410 Gone` / "too old resource version" (etcd compacted past our
//!   resourceVersion) means events were lost: relist, and the FIFO's
//!   `replace` turns every vanished object into a tombstone;
//! - any other error waits a jittered exponential backoff (0.8 s → 30 s) and
//!   retries; `429` waits at least the server's Retry-After;
//! - an object that fails to decode is logged, counted and skipped: the page
//!   or watch it came in goes on.
//!
//! It must never write the cache directly (only the informer does, via the
//! FIFO) and never give up: it runs until shut down.
mod backoff;
mod framing;
mod list_watch;
mod protobuf_requests;
mod raw;
#[cfg(test)]
pub(crate) mod script;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ListParams, WatchParams};
use kube::core::{Status, WatchEvent};
use rand::Rng;
use tokio_util::sync::CancellationToken;

pub use backoff::Backoff;
pub use framing::{
    FrameTooLarge, MAX_FRAME_BYTES, RawList, RawWatchStream, parse_list_body, parse_watch_line,
};
pub use list_watch::{ApiListWatch, ListWatch};
pub use raw::{DecodeError, Identity, RawObject};

use super::Object;
use super::delta_fifo::DeltaFifo;

/// Annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END_ANNOTATION: &str = "k8s.io/initial-events-end";

/// Changes each object once, before it is stored (client-go `TransformFunc`).
pub type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

/// Drops `metadata.managedFields`: often half an object's size, and no
/// controller reads it (controller-runtime `TransformStripManagedFields`).
pub fn strip_managed_fields<K: Object>() -> Transform<K> {
    Arc::new(|obj: &mut K| obj.meta_mut().managed_fields = None)
}

/// Errors of one list or watch attempt; the reflector logs them and retries.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    #[error("failed to list: {0}")]
    List(#[source] kube::Error),
    #[error("failed to start a watch: {0}")]
    StartWatch(#[source] kube::Error),
    #[error("failed to read the watch stream: {0}")]
    Watch(#[source] kube::Error),
    #[error("failed to watch: the server sent an error event: {}", .0.message)]
    WatchEvent(Box<Status>),
    #[error(
        "failed to finish a streaming list: the watch ended before the initial-events-end bookmark"
    )]
    StreamingListIncomplete,
    #[error("failed to watch: the server closed the watch at once without any event")]
    VeryShortWatch,
}

impl ReflectorError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::List(_) => "list",
            Self::StartWatch(_) => "start_watch",
            Self::Watch(_) => "watch",
            Self::WatchEvent(_) => "watch_event",
            Self::StreamingListIncomplete => "streaming_list",
            Self::VeryShortWatch => "very_short_watch",
        }
    }

    fn status(&self) -> Option<&Status> {
        match self {
            Self::List(kube::Error::Api(s))
            | Self::StartWatch(kube::Error::Api(s))
            | Self::Watch(kube::Error::Api(s)) => Some(s),
            Self::WatchEvent(s) => Some(s),
            _ => None,
        }
    }

    /// Whether our resourceVersion is too old: only a relist can recover.
    pub fn is_expired(&self) -> bool {
        self.status().is_some_and(is_expired)
    }

    /// How long the server asked us to wait (429 Too Many Requests).
    fn retry_after(&self) -> Option<Duration> {
        let status = self.status()?;
        if status.code != 429 {
            return None;
        }
        let secs = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
        Some(Duration::from_secs(u64::from(secs.max(1))))
    }
}

/// Our resourceVersion cannot be watched from: compacted away (410 Gone,
/// "too old resource version"), or ahead of the server ("Too large resource
/// version", e.g. after an etcd restore). Either way only a relist recovers.
fn is_expired(status: &Status) -> bool {
    status.code == 410
        || status.reason == "Expired"
        || status.reason == "Gone"
        || status.message.contains("too old resource version")
        || status.message.contains("Too large resource version")
}

/// What a reflector is configured to watch and how.
pub struct ReflectorConfig<K> {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Objects per LIST page (client-go's pager uses 500).
    pub page_size: u32,
    /// Applied to every object before it reaches the FIFO.
    pub transform: Option<Transform<K>>,
    /// Drop `metadata.managedFields` (often half an object's size; no
    /// controller reads it; controller-runtime's
    /// `TransformStripManagedFields`). In protobuf they are skipped while
    /// decoding, never built; from JSON they are dropped after it.
    pub strip_managed_fields: bool,
    /// Try a streaming list (`sendInitialEvents=true`) before paginated LIST.
    pub streaming_list: bool,
    /// Each watch asks the server to close it after a random time in this
    /// range (client-go: [5 min, 10 min)).
    pub watch_timeout: (Duration, Duration),
}

impl<K> Clone for ReflectorConfig<K> {
    fn clone(&self) -> Self {
        Self {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            page_size: self.page_size,
            transform: self.transform.clone(),
            strip_managed_fields: self.strip_managed_fields,
            streaming_list: self.streaming_list,
            watch_timeout: self.watch_timeout,
        }
    }
}

impl<K: Object> Default for ReflectorConfig<K> {
    fn default() -> Self {
        Self {
            label_selector: None,
            field_selector: None,
            page_size: 500,
            transform: None,
            strip_managed_fields: true,
            streaming_list: true,
            watch_timeout: (Duration::from_secs(300), Duration::from_secs(600)),
        }
    }
}

/// Counters and the last synced resourceVersion of a running reflector.
#[derive(Default)]
struct Shared {
    last_sync_resource_version: Mutex<Option<String>>,
    decode_failures: AtomicU64,
    lists: AtomicU64,
    watches: AtomicU64,
}

/// A read-only view of a reflector's progress; cheap to clone.
#[derive(Clone, Default)]
pub struct ReflectorStatus {
    shared: Arc<Shared>,
}

impl ReflectorStatus {
    /// The resourceVersion of the newest list, event or bookmark seen
    /// (client-go `LastSyncResourceVersion`); `None` before the first list.
    pub fn last_sync_resource_version(&self) -> Option<String> {
        self.shared
            .last_sync_resource_version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Objects that failed to decode and were skipped.
    pub fn decode_failures(&self) -> u64 {
        self.shared.decode_failures.load(Ordering::Relaxed)
    }

    /// Completed (re)lists, streaming or paginated.
    pub fn lists(&self) -> u64 {
        self.shared.lists.load(Ordering::Relaxed)
    }

    /// Watches opened (including the streaming list's).
    pub fn watches(&self) -> u64 {
        self.shared.watches.load(Ordering::Relaxed)
    }

    fn set_resource_version(&self, rv: &str) {
        if rv.is_empty() {
            return;
        }
        *self
            .shared
            .last_sync_resource_version
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(rv.to_owned());
    }
}

/// How a watch stream ended.
enum WatchEnd {
    /// Closed by the server (timeout) or by our dead-connection deadline.
    Closed,
    Failed(ReflectorError),
}

/// The Reflector (client-go `cache.Reflector`) for kind `K`.
pub struct Reflector<K> {
    list_watch: Arc<dyn ListWatch>,
    fifo: DeltaFifo<K>,
    config: ReflectorConfig<K>,
    status: ReflectorStatus,
    /// Cleared when the server refuses streaming lists; then LIST is used.
    streaming_list: bool,
}

impl<K: Object> Reflector<K> {
    /// A reflector feeding `fifo` from `list_watch`.
    pub fn new(
        list_watch: Arc<dyn ListWatch>,
        fifo: DeltaFifo<K>,
        config: ReflectorConfig<K>,
    ) -> Self {
        let streaming_list = config.streaming_list;
        Self {
            list_watch,
            fifo,
            config,
            status: ReflectorStatus::default(),
            streaming_list,
        }
    }

    /// The reflector's progress, readable while it runs.
    pub fn status(&self) -> ReflectorStatus {
        self.status.clone()
    }

    /// Lists and watches until `shutdown` is cancelled.
    pub async fn run(mut self, shutdown: CancellationToken) {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = self.run_forever() => {}
        }
    }

    async fn run_forever(&mut self) {
        let mut backoff = Backoff::default();
        let mut need_list = true;
        loop {
            let mut stream = None;
            if need_list {
                match self.list().await {
                    Ok(s) => {
                        need_list = false;
                        stream = s;
                    }
                    Err(e) => {
                        self.wait_after(&e, &mut backoff).await;
                        continue;
                    }
                }
            }
            let stream = match stream {
                Some(s) => s,
                None => match self.start_watch().await {
                    Ok(s) => s,
                    Err(e) => {
                        need_list = e.is_expired();
                        self.wait_after(&e, &mut backoff).await;
                        continue;
                    }
                },
            };
            match self.consume(stream).await {
                WatchEnd::Closed => {}
                WatchEnd::Failed(e) => {
                    need_list = e.is_expired();
                    self.wait_after(&e, &mut backoff).await;
                }
            }
        }
    }

    async fn wait_after(&self, error: &ReflectorError, backoff: &mut Backoff) {
        let mut delay = backoff.next_delay();
        if let Some(retry_after) = error.retry_after() {
            delay = delay.max(retry_after);
        }
        if error.is_expired() {
            tracing::info!(%error, "resourceVersion expired, relisting");
        } else {
            tracing::warn!(%error, category = error.category(), ?delay, "list/watch failed, retrying");
        }
        tokio::time::sleep(delay).await;
    }

    fn watch_params(&self) -> (WatchParams, Duration) {
        let (min, max) = self.config.watch_timeout;
        let timeout = if max > min {
            rand::rng().random_range(min..max)
        } else {
            min
        };
        let mut wp = WatchParams::default()
            .timeout(u32::try_from(timeout.as_secs().max(1)).unwrap_or(u32::MAX));
        wp.label_selector = self.config.label_selector.clone();
        wp.field_selector = self.config.field_selector.clone();
        (wp, timeout)
    }

    /// Decodes one raw object and applies the transform; a failure is
    /// logged and counted, never fatal.
    fn decode(&self, raw: RawObject) -> Option<Arc<K>> {
        match raw.decode::<K>(self.config.strip_managed_fields) {
            Ok(mut obj) => {
                if self.config.strip_managed_fields {
                    obj.meta_mut().managed_fields = None;
                }
                if let Some(transform) = &self.config.transform {
                    transform(&mut obj);
                }
                match raw {
                    // Decoding from text, serde grows every `Vec` by doubling
                    // (JSON gives no length up front), so a cached object would
                    // keep up to twice the capacity it needs: 4.3 KB per
                    // stripped Pod, 45 % on top of its 9.6 KB
                    // (`benches/memory.rs`). A clone allocates exact
                    // capacities, and costs a fraction of the decode.
                    RawObject::Json(_) => Some(Arc::new(obj.clone())),
                    // Protobuf says how many elements follow: already exact.
                    RawObject::Protobuf { .. } => Some(Arc::new(obj)),
                }
            }
            Err(error) => {
                self.status
                    .shared
                    .decode_failures
                    .fetch_add(1, Ordering::Relaxed);
                let name = raw.name();
                tracing::error!(%error, name, "failed to decode an object, skipping it");
                None
            }
        }
    }

    /// Decodes one object of a (re)list. When the cache already holds it at
    /// this resourceVersion — most objects, on a relist — the cached `Arc` is
    /// handed on and the text is never decoded: only its identity is read
    /// (a scan that allocates nothing). Otherwise the decoded object, or the
    /// cached one if they turn out equal after all.
    fn decode_listed(&self, raw: RawObject) -> Option<Arc<K>> {
        if !self.fifo.knows_nothing()
            && let Some(id) = raw.identity()
            && let (Some(name), Some(rv)) = (id.name.as_deref(), id.resource_version.as_deref())
        {
            let key = super::ObjectKey::new(id.namespace.as_deref(), name);
            if let Some(cached) = self.fifo.cached_unchanged(&key, id.uid.as_deref(), rv) {
                return Some(cached);
            }
        }
        self.decode(raw).map(|obj| self.fifo.reuse_unchanged(obj))
    }

    /// A full (re)list into the FIFO. A streaming list returns its watch,
    /// which continues with live events.
    async fn list(&mut self) -> Result<Option<WatchStreamState>, ReflectorError> {
        if self.streaming_list {
            match self.streaming_list().await {
                Ok(stream) => return Ok(Some(stream)),
                // Throttled: honour Retry-After rather than list at once.
                Err(e) if e.retry_after().is_some() => return Err(e),
                Err(e) => {
                    // A server without WatchList (every supported version
                    // knows the parameter) refuses it with a 4xx: stop asking.
                    // Anything else, e.g. a stream cut by a restart before its
                    // end bookmark: fall back just this time.
                    let refused =
                        e.status().is_some_and(|s| (400..500).contains(&s.code)) && !e.is_expired();
                    if refused {
                        self.streaming_list = false;
                    }
                    tracing::info!(error = %e, "streaming list failed, falling back to paginated LIST");
                }
            }
        }
        self.paginated_list().await?;
        Ok(None)
    }

    async fn paginated_list(&self) -> Result<(), ReflectorError> {
        let mut params = ListParams::default().limit(self.config.page_size);
        params.label_selector = self.config.label_selector.clone();
        params.field_selector = self.config.field_selector.clone();
        let mut objects = Vec::new();
        let resource_version = loop {
            let page = self
                .list_watch
                .list(&params)
                .await
                .map_err(ReflectorError::List)?;
            objects.extend(
                page.items
                    .into_iter()
                    .filter_map(|raw| self.decode_listed(raw)),
            );
            match page.continue_token {
                Some(token) => params.continue_token = Some(token),
                None => break page.resource_version,
            }
        };
        tracing::debug!(target: "pipeline", stage = "1 reflector", kind = %K::kind(&()), objects = objects.len(), rv = %resource_version, "LIST done: replacing the FIFO's contents");
        self.fifo.replace(objects);
        self.status.set_resource_version(&resource_version);
        self.status.shared.lists.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// WatchList (KEP-3157): one watch that first replays the current state
    /// and marks its end with an annotated bookmark.
    async fn streaming_list(&self) -> Result<WatchStreamState, ReflectorError> {
        let (mut wp, timeout) = self.watch_params();
        wp = wp.initial_events();
        let stream = self
            .list_watch
            .watch(&wp, "")
            .await
            .map_err(ReflectorError::StartWatch)?;
        self.status.shared.watches.fetch_add(1, Ordering::Relaxed);
        let mut state = WatchStreamState::new(stream, timeout);
        let mut objects = Vec::new();
        loop {
            match state.next().await {
                None => return Err(ReflectorError::StreamingListIncomplete),
                Some(Err(e)) if is_decode_error(&e) => self.count_bad_line(&e),
                Some(Err(e)) => return Err(ReflectorError::Watch(e)),
                Some(Ok(WatchEvent::Added(v) | WatchEvent::Modified(v))) => {
                    objects.extend(self.decode_listed(v));
                }
                Some(Ok(WatchEvent::Deleted(_))) => {
                    // Initial events are the state at one resourceVersion:
                    // no deletes are expected before the end bookmark.
                }
                Some(Ok(WatchEvent::Error(status))) => {
                    return Err(ReflectorError::WatchEvent(status));
                }
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    let ends = b
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END_ANNOTATION)
                        .is_some_and(|v| v == "true");
                    if ends {
                        tracing::debug!(target: "pipeline", stage = "1 reflector", kind = %K::kind(&()), objects = objects.len(), rv = %b.metadata.resource_version, "streaming LIST (WatchList) done: replacing the FIFO's contents");
                        self.fifo.replace(std::mem::take(&mut objects));
                        self.status
                            .set_resource_version(&b.metadata.resource_version);
                        self.status.shared.lists.fetch_add(1, Ordering::Relaxed);
                        return Ok(state);
                    }
                }
            }
        }
    }

    async fn start_watch(&self) -> Result<WatchStreamState, ReflectorError> {
        let (wp, timeout) = self.watch_params();
        let rv = self.status.last_sync_resource_version().unwrap_or_default();
        let stream = self
            .list_watch
            .watch(&wp, &rv)
            .await
            .map_err(ReflectorError::StartWatch)?;
        self.status.shared.watches.fetch_add(1, Ordering::Relaxed);
        Ok(WatchStreamState::new(stream, timeout))
    }

    fn count_bad_line(&self, error: &kube::Error) {
        self.status
            .shared
            .decode_failures
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(%error, "failed to decode a watch event, skipping it");
    }

    /// Pushes watch events into the FIFO until the stream ends.
    async fn consume(&self, mut state: WatchStreamState) -> WatchEnd {
        loop {
            let event = match state.next().await {
                None if state.ended_suspiciously_early() => {
                    return WatchEnd::Failed(ReflectorError::VeryShortWatch);
                }
                None => return WatchEnd::Closed,
                Some(Err(e)) if is_decode_error(&e) => {
                    self.count_bad_line(&e);
                    continue;
                }
                Some(Err(e)) => return WatchEnd::Failed(ReflectorError::Watch(e)),
                Some(Ok(event)) => event,
            };
            match event {
                WatchEvent::Added(v) => self.push(v, DeltaFifo::add),
                WatchEvent::Modified(v) => self.push(v, DeltaFifo::update),
                WatchEvent::Deleted(v) => self.push(v, DeltaFifo::delete),
                WatchEvent::Bookmark(b) => {
                    self.status
                        .set_resource_version(&b.metadata.resource_version);
                }
                WatchEvent::Error(status) => {
                    return WatchEnd::Failed(ReflectorError::WatchEvent(status));
                }
            }
        }
    }

    fn push(&self, raw: RawObject, op: fn(&DeltaFifo<K>, Arc<K>)) {
        if let Some(obj) = self.decode(raw) {
            let rv = obj.meta().resource_version.clone();
            tracing::debug!(target: "pipeline", stage = "1 reflector", kind = %K::kind(&()), key = %super::ObjectKey::of(obj.as_ref()).map(|k| k.to_string()).unwrap_or_default(), rv = rv.as_deref().unwrap_or(""), "WATCH event received");
            op(&self.fifo, obj);
            if let Some(rv) = rv {
                self.status.set_resource_version(&rv);
            }
        }
    }
}

/// A line that is not a watch event (as opposed to a broken connection).
fn is_decode_error(error: &kube::Error) -> bool {
    matches!(error, kube::Error::SerdeError(_))
}

/// An open watch with a client-side deadline: the server should close it at
/// the requested timeout; if it has not 30 s later, the connection is
/// presumed dead (a half-open TCP connection sends nothing, forever).
struct WatchStreamState {
    stream: RawWatchStream,
    opened: tokio::time::Instant,
    deadline: tokio::time::Instant,
    events: u64,
}

impl WatchStreamState {
    fn new(stream: RawWatchStream, timeout: Duration) -> Self {
        let opened = tokio::time::Instant::now();
        Self {
            stream,
            opened,
            deadline: opened + timeout + Duration::from_secs(30),
            events: 0,
        }
    }

    async fn next(&mut self) -> Option<Result<WatchEvent<RawObject>, kube::Error>> {
        let next = tokio::time::timeout_at(self.deadline, self.stream.next())
            .await
            .ok()
            .flatten();
        self.events += u64::from(next.is_some());
        next
    }

    /// Closed within a second without a single event: not a normal server
    /// timeout but a server or proxy refusing to hold the watch. Re-opening
    /// at once would spin (client-go's "very short watch" check).
    fn ended_suspiciously_early(&self) -> bool {
        self.events == 0 && self.opened.elapsed() < Duration::from_secs(1)
    }
}

#[cfg(test)]
mod tests {
    use super::script::*;
    use super::*;
    use crate::runtime::store::Indexer;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::WatchEvent;

    struct Running {
        lw: Arc<ScriptedListWatch>,
        fifo: DeltaFifo<ConfigMap>,
        status: ReflectorStatus,
        _shutdown: tokio_util::sync::DropGuard,
    }

    fn paginated() -> ReflectorConfig<ConfigMap> {
        ReflectorConfig {
            streaming_list: false,
            ..ReflectorConfig::default()
        }
    }

    fn start(lw: ScriptedListWatch, config: ReflectorConfig<ConfigMap>) -> Running {
        start_with_cache(lw, config, Indexer::new())
    }

    /// Like [`start`], with an informer cache that already holds objects.
    fn start_with_cache(
        lw: ScriptedListWatch,
        config: ReflectorConfig<ConfigMap>,
        cache: Indexer<ConfigMap>,
    ) -> Running {
        let lw = Arc::new(lw);
        let fifo = DeltaFifo::new(cache);
        let reflector = Reflector::new(lw.clone(), fifo.clone(), config);
        let status = reflector.status();
        let shutdown = CancellationToken::new();
        tokio::spawn(reflector.run(shutdown.clone()));
        Running {
            lw,
            fifo,
            status,
            _shutdown: shutdown.drop_guard(),
        }
    }

    /// Every queued key as `name: kinds`, in queue order.
    fn drain(fifo: &DeltaFifo<ConfigMap>) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(line) = fifo.try_pop_with(|d| {
            let kinds: Vec<&str> = d.deltas.iter().map(Delta::kind).collect();
            format!("{}: {}", d.key.name(), kinds.join(","))
        }) {
            out.push(line);
        }
        out
    }

    use crate::runtime::delta_fifo::Delta;

    fn added(name: &str, rv: &str) -> Event {
        Ok(WatchEvent::Added(cm_json(name, rv)))
    }

    fn open(events: Vec<Event>) -> ScriptedWatch {
        ScriptedWatch::Events {
            events,
            stay_open: true,
        }
    }

    fn closing(events: Vec<Event>) -> ScriptedWatch {
        ScriptedWatch::Events {
            events,
            stay_open: false,
        }
    }

    async fn settle(secs: f64) {
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn paginated_list_follows_continue_tokens_then_watches_from_the_list_resource_version() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![cm_json("a", "1")], "", Some("c1"))))
            .list(Ok(page(vec![cm_json("b", "2")], "10", None)))
            .watch(open(vec![]));
        let config = ReflectorConfig {
            label_selector: Some("app=x".into()),
            field_selector: Some("metadata.name!=z".into()),
            ..paginated()
        };
        let r = start(lw, config);
        settle(1.0).await;

        let lists = r.lw.list_calls();
        assert_eq!(lists.len(), 2);
        assert_eq!(lists[0].limit, Some(500));
        assert_eq!(lists[0].continue_token, None);
        assert_eq!(lists[1].continue_token.as_deref(), Some("c1"));
        assert_eq!(lists[1].label_selector.as_deref(), Some("app=x"));
        assert_eq!(lists[1].field_selector.as_deref(), Some("metadata.name!=z"));
        assert_eq!(drain(&r.fifo), ["a: Replaced", "b: Replaced"]);

        let watches = r.lw.watch_calls();
        assert_eq!(watches.len(), 1);
        let (wp, rv) = &watches[0];
        assert_eq!(rv, "10");
        assert!(wp.bookmarks);
        assert!(!wp.send_initial_events);
        assert_eq!(wp.label_selector.as_deref(), Some("app=x"));
        let timeout = wp.timeout.unwrap_or(0);
        assert!((300..600).contains(&timeout), "timeout {timeout}");
        assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("10"));
        assert_eq!(r.status.lists(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn watch_events_become_deltas_and_bookmarks_only_advance_the_resource_version() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![], "1", None)))
            .watch(open(vec![
                added("a", "2"),
                Ok(WatchEvent::Modified(cm_json("a", "3"))),
                Ok(WatchEvent::Deleted(cm_json("a", "4"))),
                bookmark("7", false),
            ]));
        let r = start(lw, paginated());
        settle(1.0).await;
        assert_eq!(drain(&r.fifo), ["a: Added,Updated,Deleted"]);
        assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("7"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_expired_watch_relists_and_tombstones_what_vanished() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(
                vec![cm_json("a", "1"), cm_json("b", "2")],
                "5",
                None,
            )))
            .watch(closing(vec![expired_event()]))
            .list(Ok(page(vec![cm_json("a", "8")], "9", None)))
            .watch(open(vec![]));
        let r = start(lw, paginated());
        settle(5.0).await;
        assert_eq!(
            drain(&r.fifo),
            [
                "a: Replaced,Replaced",
                "b: Replaced,DeletedFinalStateUnknown"
            ]
        );
        let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
        assert_eq!(rvs, ["5", "9"]);
        assert_eq!(r.status.lists(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_relisted_object_the_cache_holds_at_that_version_is_not_decoded_again() {
        // The cache holds "a" at resourceVersion 1. The relist sends "a" at 1
        // with a body that cannot decode: if it were decoded, it would be
        // counted as a failure and dropped (then tombstoned). It is handed on
        // as the cached object instead. "b" is new and broken: decoded, failed.
        let cache = Indexer::new();
        let cached: ConfigMap = cm_json("a", "1").decode(false).unwrap();
        cache.insert(Arc::new(cached));
        let lw = ScriptedListWatch::new()
            .list(Ok(page(
                vec![broken_cm_json("a"), broken_cm_json("b"), cm_json("c", "3")],
                "5",
                None,
            )))
            .watch(open(vec![]));
        let r = start_with_cache(lw, paginated(), cache.clone());
        settle(1.0).await;
        assert_eq!(r.status.decode_failures(), 1);
        let listed = r
            .fifo
            .try_pop_with(|d| d.deltas.last().map(|delta| Arc::clone(delta.object())))
            .flatten()
            .expect("a was listed");
        let in_cache = cache
            .get(&crate::runtime::ObjectKey::new(Some("ns"), "a"))
            .unwrap();
        assert!(Arc::ptr_eq(&listed, &in_cache));
        assert_eq!(drain(&r.fifo), ["c: Replaced"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_410_when_opening_the_watch_relists() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![], "5", None)))
            .watch(ScriptedWatch::Fail(api_error(410, "Gone")))
            .list(Ok(page(vec![], "8", None)))
            .watch(open(vec![]));
        let r = start(lw, paginated());
        settle(5.0).await;
        let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
        assert_eq!(rvs, ["5", "8"]);
        assert_eq!(r.lw.list_calls().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resource_version_ahead_of_the_server_relists() {
        let too_large = kube::Error::Api(status(
            504,
            "Timeout",
            "Too large resource version: 900, current: 20",
        ));
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![], "900", None)))
            .watch(ScriptedWatch::Fail(too_large))
            .list(Ok(page(vec![], "20", None)))
            .watch(open(vec![]));
        let r = start(lw, paginated());
        settle(5.0).await;
        let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
        assert_eq!(rvs, ["900", "20"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_closed_by_the_server_is_reopened_at_once_without_a_relist() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![], "5", None)))
            .watch(closing(vec![added("a", "6")]))
            .watch(open(vec![]));
        let r = start(lw, paginated());
        settle(0.001).await;
        let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
        assert_eq!(rvs, ["5", "6"]);
        assert_eq!(r.lw.list_calls().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_closed_at_once_without_events_is_retried_after_a_backoff() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![], "5", None)))
            .watch(closing(vec![]))
            .watch(open(vec![]));
        let r = start(lw, paginated());
        settle(0.7).await;
        assert_eq!(r.lw.watch_calls().len(), 1);
        settle(1.0).await;
        assert_eq!(r.lw.watch_calls().len(), 2);
        assert_eq!(r.lw.list_calls().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_error_rewatches_from_the_last_resource_version_after_a_backoff() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![], "5", None)))
            .watch(ScriptedWatch::Fail(api_error(503, "ServiceUnavailable")))
            .watch(open(vec![]));
        let r = start(lw, paginated());
        settle(0.7).await;
        assert_eq!(r.lw.watch_calls().len(), 1);
        settle(1.0).await;
        let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
        assert_eq!(rvs, ["5", "5"]);
        assert_eq!(r.lw.list_calls().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_undecodable_object_is_skipped_and_counted_and_the_rest_arrives() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(
                vec![cm_json("a", "1"), broken_cm_json("x"), cm_json("b", "2")],
                "5",
                None,
            )))
            .watch(open(vec![
                Ok(WatchEvent::Added(broken_cm_json("y"))),
                added("c", "6"),
            ]));
        let r = start(lw, paginated());
        settle(1.0).await;
        assert_eq!(drain(&r.fifo), ["a: Replaced", "b: Replaced", "c: Added"]);
        assert_eq!(r.status.decode_failures(), 2);
        assert_eq!(r.lw.watch_calls().len(), 1, "the watch survived");
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_before_retrying() {
        let lw = ScriptedListWatch::new()
            .list(Err(api_error(500, "InternalError")))
            .list(Err(api_error(500, "InternalError")))
            .list(Err(api_error(500, "InternalError")));
        let r = start(lw, paginated());
        // Delays: [0.8, 1.6) then [1.6, 3.2) seconds.
        settle(0.7).await;
        assert_eq!(r.lw.list_calls().len(), 1);
        settle(1.0).await; // t = 1.7
        assert_eq!(r.lw.list_calls().len(), 2);
        settle(0.65).await; // t = 2.35 < 0.8 + 1.6
        assert_eq!(r.lw.list_calls().len(), 2);
        settle(2.5).await; // t = 4.85 > 1.6 + 3.2
        assert_eq!(r.lw.list_calls().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_waits_at_least_the_servers_retry_after() {
        let mut throttled = status(429, "TooManyRequests", "slow down");
        throttled.details =
            serde_json::from_value(serde_json::json!({"retryAfterSeconds": 20})).ok();
        let lw = ScriptedListWatch::new()
            .list(Err(kube::Error::Api(throttled)))
            .list(Ok(page(vec![], "5", None)));
        let r = start(lw, paginated());
        settle(19.0).await;
        assert_eq!(r.lw.list_calls().len(), 1);
        settle(2.0).await;
        assert_eq!(r.lw.list_calls().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_streaming_list_replaces_at_the_end_bookmark_and_keeps_watching() {
        let lw = ScriptedListWatch::new().watch(open(vec![
            added("a", "3"),
            added("b", "4"),
            bookmark("5", true),
            added("c", "6"),
        ]));
        let r = start(lw, ReflectorConfig::default());
        settle(1.0).await;
        assert!(r.lw.list_calls().is_empty());
        let watches = r.lw.watch_calls();
        assert_eq!(watches.len(), 1);
        assert!(watches[0].0.send_initial_events);
        assert!(watches[0].0.bookmarks);
        assert_eq!(watches[0].1, "");
        assert_eq!(drain(&r.fifo), ["a: Replaced", "b: Replaced", "c: Added"]);
        assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("6"));
        assert_eq!(r.status.lists(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_refusing_streaming_lists_gets_paginated_lists_from_then_on() {
        let lw = ScriptedListWatch::new()
            .watch(ScriptedWatch::Fail(api_error(422, "Invalid")))
            .list(Ok(page(vec![cm_json("a", "1")], "5", None)))
            .watch(closing(vec![expired_event()]))
            .list(Ok(page(vec![], "7", None)))
            .watch(open(vec![]));
        let r = start(lw, ReflectorConfig::default());
        settle(5.0).await;
        let watches: Vec<(bool, String)> =
            r.lw.watch_calls()
                .into_iter()
                .map(|(wp, rv)| (wp.send_initial_events, rv))
                .collect();
        assert_eq!(
            watches,
            [
                (true, String::new()),
                (false, "5".into()),
                (false, "7".into())
            ]
        );
        assert_eq!(r.lw.list_calls().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_streaming_list_cut_before_its_end_bookmark_falls_back_to_list_once() {
        let lw = ScriptedListWatch::new()
            .watch(closing(vec![added("a", "3")]))
            .list(Ok(page(vec![cm_json("a", "4")], "5", None)))
            .watch(closing(vec![expired_event()]))
            .watch(open(vec![added("b", "8"), bookmark("9", true)]));
        let r = start(lw, ReflectorConfig::default());
        settle(0.5).await;
        assert_eq!(drain(&r.fifo), ["a: Replaced"]);
        assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("5"));
        // The next relist (after the 410) tries the streaming list again.
        settle(5.0).await;
        let initial: Vec<bool> =
            r.lw.watch_calls()
                .into_iter()
                .map(|(wp, _)| wp.send_initial_events)
                .collect();
        assert_eq!(initial, [true, false, true]);
        assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("9"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_transform_strips_managed_fields() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![cm_json("a", "1")], "5", None)))
            .watch(open(vec![]));
        let r = start(lw, paginated());
        settle(1.0).await;
        let popped = r.fifo.try_pop_with(|d| d.deltas[0].object().clone());
        let obj = popped.expect("a is queued");
        assert!(obj.metadata.managed_fields.is_none());
        assert_eq!(obj.metadata.name.as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_watch_is_abandoned_after_its_timeout_plus_grace() {
        let lw = ScriptedListWatch::new()
            .list(Ok(page(vec![], "5", None)))
            .watch(open(vec![]))
            .watch(open(vec![]));
        let config = ReflectorConfig {
            watch_timeout: (Duration::from_secs(60), Duration::from_secs(60)),
            ..paginated()
        };
        let r = start(lw, config);
        settle(89.0).await;
        assert_eq!(r.lw.watch_calls().len(), 1);
        settle(2.0).await;
        assert_eq!(r.lw.watch_calls().len(), 2);
    }
}
