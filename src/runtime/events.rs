//! Kubernetes Events about any object, written in the background.
//!
//! Mirrors client-go `tools/record`: `event.go` (EventRecorder and
//! EventBroadcaster) and `events_cache.go` (EventCorrelator with its spam
//! filter and aggregation). Writes core/v1 Events, which is what
//! `kubectl describe` shows under "Events:".
//!
//! - [`EventRecorder::publish`] never blocks and never fails for its caller: a
//!   reconcile must not slow down or error because the Events API is slow. It
//!   puts the event on a bounded channel; when the channel is full the event is
//!   dropped and counted (`events_dropped_total{reason="queue_full"}`), as
//!   client-go's `DropIfChannelFull` does.
//! - [`EventBroadcaster::run`] is the background task that writes them. Before
//!   writing, the [`EventCorrelator`] decides:
//!   - spam filter: a token bucket per reporter, involved object and event
//!     type (burst 25, one token back every 300 s); an object out of tokens
//!     gets no more events of that type for now, but Normal events never
//!     use up a Warning's tokens;
//!   - aggregation: a repeat of an event already written (same object, type,
//!     reason and message) patches the existing Event's `count` and
//!     `lastTimestamp` instead of creating another object.
//!
//! Both caches are bounded (4096 entries, oldest-inserted evicted first, a
//! simpler policy than client-go's LRU). Unlike client-go, different messages
//! with the same reason are not folded into one "combined from similar
//! events" Event. This module never panics on API errors: a failed write is
//! logged and counted, then forgotten.
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::runtime::metrics::SharedRegistry;

/// client-go's spam filter burst: events an object may get at once.
pub const SPAM_BURST: u32 = 25;
/// client-go's spam filter refill: one more event per this period.
pub const SPAM_REFILL_EVERY: Duration = Duration::from_secs(300);
/// client-go's `maxLruCacheEntries`.
const CACHE_ENTRIES: usize = 4096;
/// client-go's broadcaster queue length.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1000;
/// Tries per write before an event is given up (client-go: 12, 10 s apart;
/// fewer here because one writer task serves every controller).
const WRITE_ATTEMPTS: u32 = 3;
const WRITE_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Errors writing an Event (logged and counted by the broadcaster, never
/// returned to the code that published the event).
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("failed to create event for {object}")]
    Create {
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to patch event {name}")]
    Patch {
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl EventError {
    /// A stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Create { .. } => "create",
            Self::Patch { .. } => "patch",
        }
    }
}

/// `Normal` or `Warning`, the two types core/v1 Events allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One event on its way to the API server.
#[derive(Clone, Debug)]
pub struct EventRecord {
    pub involved: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    /// Wall-clock time of `publish`, written as first/last timestamp.
    pub at: Timestamp,
    /// Who reported it.
    pub source: Arc<EventSourceInfo>,
}

/// The reporter of an event: `source.component`/`reportingComponent` and
/// `source.host`/`reportingInstance`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventSourceInfo {
    pub component: String,
    pub instance: Option<String>,
}

impl EventRecord {
    fn object_key(&self) -> ObjectIdentity {
        let r = &self.involved;
        ObjectIdentity {
            component: self.source.component.clone(),
            instance: self.source.instance.clone(),
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }

    fn spam_key(&self) -> SpamKey {
        SpamKey {
            object: self.object_key(),
            type_: self.type_,
        }
    }

    fn aggregate_key(&self) -> AggregateKey {
        AggregateKey {
            object: self.object_key(),
            type_: self.type_,
            reason: self.reason.clone(),
            message: self.message.clone(),
        }
    }

    fn display_object(&self) -> String {
        let r = &self.involved;
        format!(
            "{}/{}",
            r.kind.as_deref().unwrap_or("?"),
            match (&r.namespace, &r.name) {
                (Some(ns), Some(n)) => format!("{ns}/{n}"),
                (None, Some(n)) => n.clone(),
                _ => "?".to_owned(),
            }
        )
    }
}

/// The reporter plus the involved object: the fields of client-go's
/// `getSpamKey` (source component and host, the object's kind, namespace,
/// name, UID and apiVersion).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ObjectIdentity {
    component: String,
    instance: Option<String>,
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

/// The spam filter's key: client-go's `getSpamKey` plus the event type, so
/// a burst of Normal events cannot use up the tokens a Warning about the same
/// object needs (client-go's default key has no type, and drops that
/// Warning; Kubernetes' service controller passes its own key with the type
/// and reason for the same reason, kubernetes/kubernetes#124747).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SpamKey {
    object: ObjectIdentity,
    type_: EventType,
}

/// The aggregation key: object + type + reason + message.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct AggregateKey {
    object: ObjectIdentity,
    type_: EventType,
    reason: String,
    message: String,
}

/// A map that forgets its oldest-inserted entry beyond `capacity`.
#[derive(Debug)]
struct BoundedMap<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    capacity: usize,
}

impl<K: Clone + Eq + Hash, V> BoundedMap<K, V> {
    fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(key) {
            while self.map.len() >= self.capacity {
                match self.order.pop_front() {
                    Some(oldest) => {
                        self.map.remove(&oldest);
                    }
                    None => break,
                }
            }
            self.order.push_back(key.clone());
        }
        self.map.entry(key.clone()).or_insert_with(make)
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    fn remove(&mut self, key: &K) {
        if self.map.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

/// A token bucket measured on tokio's clock (so tests can pause time).
#[derive(Clone, Debug)]
pub struct TokenBucket {
    tokens: f64,
    burst: f64,
    refill_every: Duration,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(burst: u32, refill_every: Duration, now: Instant) -> Self {
        Self {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            refill_every,
            last: now,
        }
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.duration_since(self.last).as_secs_f64();
        let refilled = elapsed / self.refill_every.as_secs_f64();
        self.tokens = (self.tokens + refilled).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What to do with one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// First of its kind: create a new Event.
    Create,
    /// A repeat of the Event `name` in `namespace`: set its count to `count`.
    Patch {
        namespace: String,
        name: String,
        count: i32,
    },
    /// The spam filter ran out of tokens for this object.
    Drop,
}

/// Where an aggregated Event lives and how often it has happened.
#[derive(Clone, Debug)]
struct Written {
    namespace: String,
    name: String,
    count: i32,
}

/// Spam filter plus aggregation; pure (the caller supplies the time).
#[derive(Debug)]
pub struct EventCorrelator {
    buckets: BoundedMap<SpamKey, TokenBucket>,
    written: BoundedMap<AggregateKey, Written>,
    burst: u32,
    refill_every: Duration,
}

impl Default for EventCorrelator {
    fn default() -> Self {
        Self::new(SPAM_BURST, SPAM_REFILL_EVERY)
    }
}

impl EventCorrelator {
    /// A correlator with a custom spam bucket.
    pub fn new(burst: u32, refill_every: Duration) -> Self {
        Self {
            buckets: BoundedMap::new(CACHE_ENTRIES),
            written: BoundedMap::new(CACHE_ENTRIES),
            burst,
            refill_every,
        }
    }

    /// Decides what to do with `event`. The spam filter runs first, on every
    /// event, repeats included: a hot loop must not patch an Event 100 times
    /// a second either.
    pub fn correlate(&mut self, event: &EventRecord, now: Instant) -> Decision {
        let (burst, refill) = (self.burst, self.refill_every);
        let bucket = self
            .buckets
            .get_or_insert_with(&event.spam_key(), || TokenBucket::new(burst, refill, now));
        if !bucket.try_take(now) {
            return Decision::Drop;
        }
        match self.written.get(&event.aggregate_key()) {
            Some(w) => Decision::Patch {
                namespace: w.namespace.clone(),
                name: w.name.clone(),
                count: w.count.saturating_add(1),
            },
            None => Decision::Create,
        }
    }

    /// Records that `event` now exists as the Event `name` with `count`.
    pub fn written(&mut self, event: &EventRecord, namespace: &str, name: &str, count: i32) {
        let entry = self
            .written
            .get_or_insert_with(&event.aggregate_key(), || Written {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                count,
            });
        entry.namespace = namespace.to_owned();
        entry.name = name.to_owned();
        entry.count = count;
    }

    /// Forgets the Event behind `event` (it was deleted or expired on the
    /// server), so the next repeat creates a new one.
    pub fn forget(&mut self, event: &EventRecord) {
        self.written.remove(&event.aggregate_key());
    }
}

/// Who writes the events.
#[derive(Clone, Debug)]
pub struct EventRecorderConfig {
    /// `source.component` and `reportingComponent`, e.g. `tfjob-controller`.
    pub component: String,
    /// `source.host` and `reportingInstance` (e.g. the Pod name).
    pub instance: Option<String>,
    /// Events buffered before new ones are dropped.
    pub queue_capacity: usize,
}

impl EventRecorderConfig {
    /// The given component, this host as instance, a 1000-event queue.
    pub fn new(component: impl Into<String>) -> Self {
        Self {
            component: component.into(),
            instance: std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
        }
    }
}

#[derive(Clone)]
struct EventMetrics {
    dropped: Family<Vec<(String, String)>, Counter>,
    failed: Counter,
}

impl EventMetrics {
    fn register(registry: &SharedRegistry) -> Self {
        let metrics = Self {
            dropped: Family::default(),
            failed: Counter::default(),
        };
        let mut registry = registry.lock().unwrap_or_else(|p| p.into_inner());
        registry.register(
            "events_dropped",
            "Events not written, by reason (queue_full, spam_filtered)",
            metrics.dropped.clone(),
        );
        registry.register(
            "events_write_failures",
            "Events that could not be written to the API server",
            metrics.failed.clone(),
        );
        metrics
    }

    fn drop_for(&self, reason: &str) {
        self.dropped
            .get_or_create(&vec![("reason".to_owned(), reason.to_owned())])
            .inc();
    }
}

/// The handle controllers publish events with. Cheap to clone.
#[derive(Clone)]
pub struct EventRecorder {
    tx: mpsc::Sender<EventRecord>,
    source: Arc<EventSourceInfo>,
    metrics: EventMetrics,
}

/// Makes a recorder and the broadcaster that must run for its events to be
/// written (the manager runs it; see `Manager::event_recorder`).
pub fn event_recorder(
    client: kube::Client,
    config: EventRecorderConfig,
    registry: &SharedRegistry,
) -> (EventRecorder, EventBroadcaster) {
    let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
    let metrics = EventMetrics::register(registry);
    let recorder = EventRecorder {
        tx,
        source: Arc::new(EventSourceInfo {
            component: config.component,
            instance: config.instance,
        }),
        metrics: metrics.clone(),
    };
    let broadcaster = EventBroadcaster {
        rx,
        client,
        correlator: EventCorrelator::default(),
        metrics,
    };
    (recorder, broadcaster)
}

impl EventRecorder {
    /// A recorder sharing this one's queue and writer but reporting as
    /// `component` (client-go: one broadcaster, a recorder per component).
    pub fn for_component(&self, component: impl Into<String>) -> Self {
        Self {
            tx: self.tx.clone(),
            source: Arc::new(EventSourceInfo {
                component: component.into(),
                instance: self.source.instance.clone(),
            }),
            metrics: self.metrics.clone(),
        }
    }

    /// Queues an event about `obj`. Never blocks; drops (and counts) the
    /// event when the queue is full or the writer has stopped.
    pub fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        type_: EventType,
        reason: &str,
        message: impl Into<String>,
    ) {
        let record = EventRecord {
            involved: obj.object_ref(&()),
            type_,
            reason: reason.to_owned(),
            message: message.into(),
            at: Timestamp::now(),
            source: self.source.clone(),
        };
        if self.tx.try_send(record).is_err() {
            self.metrics.drop_for("queue_full");
            tracing::debug!(reason, "event queue full; dropping event");
        }
    }

    /// [`publish`](Self::publish) with [`EventType::Normal`].
    pub fn normal<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.publish(obj, EventType::Normal, reason, message);
    }

    /// [`publish`](Self::publish) with [`EventType::Warning`].
    pub fn warning<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.publish(obj, EventType::Warning, reason, message);
    }
}

/// The background writer behind an [`EventRecorder`].
pub struct EventBroadcaster {
    rx: mpsc::Receiver<EventRecord>,
    client: kube::Client,
    correlator: EventCorrelator,
    metrics: EventMetrics,
}

impl EventBroadcaster {
    /// Writes events until `shutdown`, then writes what is already queued
    /// (one attempt each) and returns.
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                next = self.rx.recv() => match next {
                    Some(event) => self.handle(event, WRITE_ATTEMPTS).await,
                    // Every recorder was dropped: nothing more can arrive.
                    None => return,
                },
            }
        }
        while let Ok(event) = self.rx.try_recv() {
            self.handle(event, 1).await;
        }
    }

    async fn handle(&mut self, event: EventRecord, attempts: u32) {
        // Decide once: a retried write must not take a second spam token.
        let decision = self.correlator.correlate(&event, Instant::now());
        if decision == Decision::Drop {
            self.metrics.drop_for("spam_filtered");
            return;
        }
        for attempt in 1..=attempts {
            match self.write_once(&event, &decision).await {
                Ok(()) => return,
                Err(error) if attempt == attempts => {
                    self.metrics.failed.inc();
                    tracing::warn!(error = %error, cause = %std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default(), object = %event.display_object(), reason = %event.reason, "failed to write event; giving up");
                }
                Err(error) => {
                    tracing::debug!(error = %error, cause = %std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default(), attempt, "failed to write event; retrying");
                    tokio::time::sleep(WRITE_RETRY_PAUSE).await;
                }
            }
        }
    }

    async fn write_once(
        &mut self,
        event: &EventRecord,
        decision: &Decision,
    ) -> Result<(), EventError> {
        match decision {
            Decision::Drop => Ok(()),
            Decision::Create => self.create(event).await,
            Decision::Patch {
                namespace,
                name,
                count,
            } => {
                let (namespace, name, count) = (namespace.as_str(), name.as_str(), *count);
                let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
                let patch = serde_json::json!({
                    "count": count,
                    "lastTimestamp": Time(event.at),
                });
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        self.correlator.written(event, namespace, name, count);
                        Ok(())
                    }
                    // The Event expired on the server (default TTL 1 h): start a new one.
                    Err(kube::Error::Api(status)) if status.is_not_found() => {
                        self.correlator.forget(event);
                        self.create(event).await
                    }
                    Err(source) => Err(EventError::Patch {
                        name: name.to_owned(),
                        source,
                    }),
                }
            }
        }
    }

    async fn create(&mut self, event: &EventRecord) -> Result<(), EventError> {
        // Events of cluster-scoped objects go to `default`, as client-go does.
        let namespace = event
            .involved
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let object_name = event.involved.name.clone().unwrap_or_default();
        // client-go's naming: `<object>.<unix nanos in hex>`.
        let name = format!("{object_name}.{:x}", event.at.as_nanosecond());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let body = build_event(event, &namespace, &name);
        api.create(&PostParams::default(), &body)
            .await
            .map_err(|source| EventError::Create {
                object: event.display_object(),
                source,
            })?;
        self.correlator.written(event, &namespace, &name, 1);
        Ok(())
    }
}

/// The core/v1 Event written for a first occurrence.
fn build_event(event: &EventRecord, namespace: &str, name: &str) -> Event {
    let source = &event.source;
    Event {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        involved_object: event.involved.clone(),
        reason: Some(event.reason.clone()),
        message: Some(event.message.clone()),
        type_: Some(event.type_.as_str().to_owned()),
        count: Some(1),
        first_timestamp: Some(Time(event.at)),
        last_timestamp: Some(Time(event.at)),
        source: Some(EventSource {
            component: Some(source.component.clone()),
            host: source.instance.clone(),
        }),
        reporting_component: Some(source.component.clone()),
        reporting_instance: source.instance.clone(),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event_about(name: &str, reason: &str, message: &str) -> EventRecord {
        EventRecord {
            involved: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some("ns".into()),
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..ObjectReference::default()
            },
            type_: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            at: Timestamp::UNIX_EPOCH,
            source: Arc::new(EventSourceInfo {
                component: "tfjob-controller".into(),
                instance: Some("pod-1".into()),
            }),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_event_is_created_and_its_repeat_patches_it() {
        let mut c = EventCorrelator::default();
        let e = event_about("a", "Created", "created pod");
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Create);
        c.written(&e, "ns", "a.1", 1);
        assert_eq!(
            c.correlate(&e, Instant::now()),
            Decision::Patch {
                namespace: "ns".into(),
                name: "a.1".into(),
                count: 2
            }
        );
        c.written(&e, "ns", "a.1", 2);
        assert_eq!(
            c.correlate(&e, Instant::now()),
            Decision::Patch {
                namespace: "ns".into(),
                name: "a.1".into(),
                count: 3
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_different_message_or_object_is_a_different_event() {
        let mut c = EventCorrelator::default();
        let e = event_about("a", "Created", "one");
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Create);
        c.written(&e, "ns", "a.1", 1);
        assert_eq!(
            c.correlate(&event_about("a", "Created", "two"), Instant::now()),
            Decision::Create
        );
        assert_eq!(
            c.correlate(&event_about("b", "Created", "one"), Instant::now()),
            Decision::Create
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_forgotten_event_is_created_again() {
        let mut c = EventCorrelator::default();
        let e = event_about("a", "Created", "one");
        c.written(&e, "ns", "a.1", 4);
        c.forget(&e);
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Create);
    }

    #[tokio::test(start_paused = true)]
    async fn the_spam_filter_allows_a_burst_of_25_per_object_then_one_per_300_seconds() {
        let mut c = EventCorrelator::default();
        for i in 0..25 {
            let e = event_about("a", "R", &format!("m{i}"));
            assert_ne!(c.correlate(&e, Instant::now()), Decision::Drop, "event {i}");
        }
        let e = event_about("a", "R", "one too many");
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Drop);
        // Another object has its own bucket.
        assert_eq!(
            c.correlate(&event_about("b", "R", "m"), Instant::now()),
            Decision::Create
        );

        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Drop);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Create);
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Drop);
    }

    #[tokio::test(start_paused = true)]
    async fn a_warning_still_gets_through_after_the_normal_events_used_up_their_burst() {
        let mut c = EventCorrelator::default();
        for i in 0..25 {
            let e = event_about("a", "Progress", &format!("step {i}"));
            assert_ne!(c.correlate(&e, Instant::now()), Decision::Drop, "event {i}");
        }
        let normal = event_about("a", "Progress", "one too many");
        assert_eq!(c.correlate(&normal, Instant::now()), Decision::Drop);
        let mut warning = event_about("a", "Failed", "the job failed");
        warning.type_ = EventType::Warning;
        assert_eq!(c.correlate(&warning, Instant::now()), Decision::Create);
    }

    #[tokio::test(start_paused = true)]
    async fn each_reporting_component_has_its_own_spam_bucket() {
        let mut c = EventCorrelator::new(1, SPAM_REFILL_EVERY);
        let e = event_about("a", "R", "m");
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Create);
        assert_eq!(c.correlate(&e, Instant::now()), Decision::Drop);
        let mut other = e.clone();
        other.source = Arc::new(EventSourceInfo {
            component: "other-controller".into(),
            instance: None,
        });
        assert_eq!(c.correlate(&other, Instant::now()), Decision::Create);
    }

    #[tokio::test(start_paused = true)]
    async fn the_spam_bucket_never_refills_beyond_its_burst() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(2, Duration::from_secs(10), start);
        tokio::time::advance(Duration::from_secs(1_000)).await;
        let now = Instant::now();
        assert!(bucket.try_take(now));
        assert!(bucket.try_take(now));
        assert!(!bucket.try_take(now));
    }

    #[test]
    fn the_bounded_map_evicts_the_oldest_entry() {
        let mut m = BoundedMap::new(2);
        *m.get_or_insert_with(&1, || 0) = 10;
        *m.get_or_insert_with(&2, || 0) = 20;
        *m.get_or_insert_with(&3, || 0) = 30;
        assert!(m.get(&1).is_none());
        assert_eq!(m.get(&2), Some(&20));
        assert_eq!(m.get(&3), Some(&30));
    }

    #[test]
    fn a_new_event_carries_the_component_and_a_count_of_one() {
        let e = event_about("a", "Created", "created pod");
        let ev = build_event(&e, "ns", "a.1");
        assert_eq!(ev.count, Some(1));
        assert_eq!(ev.type_.as_deref(), Some("Normal"));
        assert_eq!(
            ev.source.and_then(|s| s.component).as_deref(),
            Some("tfjob-controller")
        );
        assert_eq!(ev.reporting_component.as_deref(), Some("tfjob-controller"));
        assert_eq!(ev.reporting_instance.as_deref(), Some("pod-1"));
        assert_eq!(ev.involved_object.name.as_deref(), Some("a"));
    }

    fn dummy_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[tokio::test]
    async fn publishing_to_a_full_queue_drops_and_counts_without_blocking() {
        let registry = crate::runtime::metrics::new_registry();
        let mut config = EventRecorderConfig::new("test");
        config.queue_capacity = 1;
        let (recorder, _broadcaster) = event_recorder(dummy_client(), config, &registry);
        let pod = k8s_openapi::api::core::v1::Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..Default::default()
        };
        recorder.normal(&pod, "A", "first fits");
        recorder.normal(&pod, "A", "second is dropped");
        recorder.warning(&pod, "A", "third is dropped");
        let text = crate::runtime::metrics::encode(&registry);
        assert!(
            text.contains("events_dropped_total{reason=\"queue_full\"} 2"),
            "{text}"
        );
    }
}
