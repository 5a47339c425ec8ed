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
//! - an object that fails to decode is logged (with its namespace/name, read
//!   from its metadata alone), counted, handed to the decode-failure
//!   handlers (a controller reports it on the object: client-go has no such
//!   hook, its reflector only logs), and never taken for a deletion: the
//!   page or watch it came in goes on, a relist keeps the cache's last good
//!   copy of it (no tombstone), an undecodable MODIFIED leaves that copy in
//!   place, and an undecodable DELETED still deletes by key. A DELETED whose
//!   key cannot be read either ends the watch with a relist, which finds
//!   what is gone.
//!
//! It must never write the cache directly (only the informer does, via the
//! FIFO) and never give up: it runs until shut down.
//!
//! The loop deciding when to list and when to watch is here, an explicit
//! state (`Empty` → `Listed` → `Watching`, back to `Listed` when a watch
//! ends and to `Empty` when only a relist recovers) moved by one step
//! function, as kube-runtime's `watcher` does; the relist itself is in
//! `relist.rs`, the watch loop in `watch.rs`, and the wire formats below
//! both in `framing.rs`.
pub mod backoff;
pub mod framing;
pub mod list_watch;
mod protobuf_requests;
pub mod raw;
mod relist;
#[cfg(test)]
pub(crate) mod script;
mod watch;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::WatchParams;
use kube::core::Status;
use rand::Rng;
use tokio_util::sync::CancellationToken;

use backoff::Backoff;
use list_watch::ListWatch;
use raw::{DecodeError, RawObject};

use super::delta_fifo::DeltaFifo;
use super::object::Object;
use watch::{WatchEnd, WatchStreamState};

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
    #[error(
        "failed to decode a watch DELETED event, not even its name: relisting to find what was deleted"
    )]
    UnreadableDelete,
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
            Self::UnreadableDelete => "unreadable_delete",
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

    /// Whether the next attempt must relist rather than re-watch.
    fn needs_relist(&self) -> bool {
        self.is_expired() || matches!(self, Self::UnreadableDelete)
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

/// An object that failed to decode, as its metadata alone names it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodeFailure {
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// Why it did not decode (serde's or the protobuf decoder's message).
    pub error: String,
}

/// Called with every object that fails to decode (from the reflector's
/// task: it must not block).
pub type DecodeFailureHandler = Arc<dyn Fn(&DecodeFailure) + Send + Sync>;

/// Counters and the last synced resourceVersion of a running reflector.
#[derive(Default)]
struct Shared {
    last_sync_resource_version: Mutex<Option<String>>,
    decode_failures: AtomicU64,
    lists: AtomicU64,
    watches: AtomicU64,
    decode_failure_handlers: Mutex<Vec<DecodeFailureHandler>>,
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

    /// Adds a handler for objects that fail to decode (see
    /// [`DecodeFailureHandler`]); it sees only failures after it is added.
    pub(crate) fn add_decode_failure_handler(&self, handler: DecodeFailureHandler) {
        self.shared
            .decode_failure_handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handler);
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

/// Where the list/watch loop stands; [`Reflector::step`] moves it on
/// (kube-runtime's `watcher::State`: `Empty`, `InitListed`, `Watching`).
enum State {
    /// Nothing usable is listed: the next step (re)lists. At the start, and
    /// after an expired resourceVersion or an unreadable DELETED.
    Empty,
    /// The FIFO holds everything up to the last resourceVersion (a list, or
    /// a watch that ended cleanly): the next step opens a watch from it.
    Listed,
    /// A watch is open (a streaming list's stays open after its initial
    /// events): the next step follows it until it ends.
    Watching(WatchStreamState),
}

impl State {
    /// Where a failed watch leaves the loop: only a relist recovers from an
    /// expired resourceVersion; anything else re-watches from the last one.
    fn after(error: &ReflectorError) -> Self {
        if error.needs_relist() {
            Self::Empty
        } else {
            Self::Listed
        }
    }

    /// The state's name (tests assert transitions by it).
    #[cfg(test)]
    fn name(&self) -> &'static str {
        match self {
            Self::Empty => "Empty",
            Self::Listed => "Listed",
            Self::Watching(_) => "Watching",
        }
    }
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
        let mut state = State::Empty;
        loop {
            state = self.step(state, &mut backoff).await;
        }
    }

    /// One move of the list/watch loop: list, open a watch, or follow one,
    /// and the state that leaves the loop in.
    async fn step(&mut self, state: State, backoff: &mut Backoff) -> State {
        match state {
            State::Empty => match self.list().await {
                // A streaming list's watch goes on after its initial events.
                Ok(Some(watch)) => State::Watching(watch),
                Ok(None) => State::Listed,
                Err(e) => {
                    self.wait_after(&e, backoff).await;
                    State::Empty
                }
            },
            State::Listed => match self.start_watch().await {
                Ok(watch) => State::Watching(watch),
                Err(e) => {
                    self.wait_after(&e, backoff).await;
                    State::after(&e)
                }
            },
            State::Watching(watch) => match self.consume(watch).await {
                WatchEnd::Closed => State::Listed,
                WatchEnd::Failed(e) => {
                    self.wait_after(&e, backoff).await;
                    State::after(&e)
                }
            },
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
    /// logged and counted (see [`Self::decode_failed`]), never fatal.
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
                self.decode_failed(&raw, &error);
                None
            }
        }
    }

    /// Counts and logs an object that did not decode, naming it by the key
    /// its metadata gives (`tfjob_operator_informer_decode_failures_total`).
    fn decode_failed(&self, raw: &RawObject, error: &DecodeError) {
        self.status
            .shared
            .decode_failures
            .fetch_add(1, Ordering::Relaxed);
        let key = raw
            .key()
            .map_or_else(|| "<unreadable metadata>".to_owned(), |k| k.to_string());
        tracing::error!(%error, kind = %K::kind(&()), object = %key, "failed to decode an object; the cache keeps its last good copy");
        let handlers = self
            .status
            .shared
            .decode_failure_handlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if handlers.is_empty() {
            return;
        }
        let owned = |s: Option<std::borrow::Cow<'_, str>>| s.map(|s| s.into_owned());
        let identity = raw.identity().unwrap_or_default();
        let failure = DecodeFailure {
            namespace: owned(identity.namespace),
            name: owned(identity.name),
            uid: owned(identity.uid),
            resource_version: owned(identity.resource_version),
            error: error.to_string(),
        };
        for handler in handlers {
            handler(&failure);
        }
    }
}

#[cfg(test)]
mod tests;
