//! The EventCorrelator: spam filter plus aggregation, pure (the caller
//! supplies the time).
//!
//! Mirrors client-go `tools/record/events_cache.go`
//! (`EventSourceObjectSpamFilter`, `EventAggregator`, `eventLogger`):
//! - spam filter: a token bucket per reporter, involved object and event
//!   type (burst 25, one token back every 300 s);
//! - aggregation: a repeat of an event already written (same object, type,
//!   reason and message) patches the existing Event's `count` and
//!   `lastTimestamp` instead of creating another object;
//! - similar events (`EventAggregator`): once an object has had
//!   [`SIMILAR_THRESHOLD`] different messages with the same type and reason
//!   within [`SIMILAR_INTERVAL`], the next ones become one Event whose
//!   message is the latest prefixed with [`COMBINED_PREFIX`], patched on
//!   every occurrence. The first nine are written as they are, so a user
//!   sees a controller's own messages first.
//!
//! Both caches are bounded (4096 entries, oldest-inserted evicted first, a
//! simpler policy than client-go's LRU). It never talks to the API server.
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::{EventRecord, EventType};

/// client-go's spam filter burst: events an object may get at once.
pub const SPAM_BURST: u32 = 25;
/// client-go's spam filter refill: one more event per this period.
pub const SPAM_REFILL_EVERY: Duration = Duration::from_secs(300);
/// client-go's `defaultAggregateMaxEvents`: different messages with one
/// reason before they are combined.
pub const SIMILAR_THRESHOLD: usize = 10;
/// client-go's `defaultAggregateIntervalInSeconds`: a quiet spell this long
/// starts the count of similar events again.
pub const SIMILAR_INTERVAL: Duration = Duration::from_secs(600);
/// client-go's `EventAggregatorByReasonMessageFunc` prefix.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";
/// client-go's `maxLruCacheEntries`.
const CACHE_ENTRIES: usize = 4096;

impl EventRecord {
    /// The reporter and the involved object (the writer writes one object's
    /// events in order).
    pub(super) fn object_key(&self) -> ObjectIdentity {
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

    fn similar_key(&self) -> SimilarKey {
        SimilarKey {
            object: self.object_key(),
            type_: self.type_,
            reason: self.reason.clone(),
        }
    }

    /// Which Event this one repeats: the same message, or for a combined
    /// event the one combined Event of its reason, whatever its message.
    fn aggregate_key(&self) -> AggregateKey {
        AggregateKey {
            object: self.object_key(),
            type_: self.type_,
            reason: self.reason.clone(),
            message: (!self.combined).then(|| self.message.clone()),
        }
    }
}

/// The reporter plus the involved object: the fields of client-go's
/// `getSpamKey` (source component and host, the object's kind, namespace,
/// name, UID and apiVersion).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ObjectIdentity {
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

/// The aggregation key: object + type + reason + message (`None` for the
/// combined Event of similar events, client-go's `aggregateKey`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct AggregateKey {
    object: ObjectIdentity,
    type_: EventType,
    reason: String,
    message: Option<String>,
}

/// Similar events: client-go's `EventAggregatorByReasonFunc` key (the
/// reporter, the object, the type and the reason).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SimilarKey {
    object: ObjectIdentity,
    type_: EventType,
    reason: String,
}

/// client-go's `aggregateRecord`: the different messages seen lately.
#[derive(Clone, Debug)]
struct SimilarRecord {
    messages: HashSet<String>,
    last: Instant,
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
    /// A repeat of the Event `name` in `namespace`: set its count to `count`
    /// (the written count plus the repeat's own).
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
    similar: BoundedMap<SimilarKey, SimilarRecord>,
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
            similar: BoundedMap::new(CACHE_ENTRIES),
            burst,
            refill_every,
        }
    }

    /// Decides what to do with `event`, first combining it with similar
    /// ones if its reason has had [`SIMILAR_THRESHOLD`] different messages
    /// lately (which rewrites its message, as client-go's `EventAggregate`
    /// does). The spam filter then runs on every event, repeats included: a
    /// hot loop must not patch an Event 100 times a second either.
    pub fn correlate(&mut self, event: &mut EventRecord, now: Instant) -> Decision {
        if !self.admit(event, now) {
            return Decision::Drop;
        }
        self.write_for(event)
    }

    /// The half of [`correlate`](Self::correlate) that needs no earlier
    /// write to have landed: combines `event` with similar ones and takes
    /// its spam token; `false` when the spam filter drops it. The writer
    /// runs it as it takes an event off the queue, so a burst about one
    /// object is filtered at once instead of waiting its turn behind that
    /// object's writes (and filling the queue meanwhile).
    pub fn admit(&mut self, event: &mut EventRecord, now: Instant) -> bool {
        self.combine_similar(event, now);
        let (burst, refill) = (self.burst, self.refill_every);
        let bucket = self
            .buckets
            .get_or_insert_with(&event.spam_key(), || TokenBucket::new(burst, refill, now));
        bucket.try_take(now)
    }

    /// The other half: a create, or a patch of the Event an earlier write
    /// of the same event stored (so it must run once that write landed).
    pub fn write_for(&self, event: &EventRecord) -> Decision {
        match self.written.get(&event.aggregate_key()) {
            Some(w) => Decision::Patch {
                namespace: w.namespace.clone(),
                name: w.name.clone(),
                count: w.count.saturating_add(event.count.max(1)),
            },
            None => Decision::Create,
        }
    }

    /// client-go's `EventAggregate`: counts the different messages of
    /// `event`'s reason; from the [`SIMILAR_THRESHOLD`]th on, `event` becomes
    /// the combined Event (its message prefixed). The set never grows past
    /// the threshold (client-go pops one message each time, then adds the
    /// next).
    fn combine_similar(&mut self, event: &mut EventRecord, now: Instant) {
        if event.combined {
            return;
        }
        let record = self
            .similar
            .get_or_insert_with(&event.similar_key(), || SimilarRecord {
                messages: HashSet::new(),
                last: now,
            });
        if now.duration_since(record.last) > SIMILAR_INTERVAL {
            record.messages.clear();
        }
        record.last = now;
        record.messages.insert(event.message.clone());
        if record.messages.len() < SIMILAR_THRESHOLD {
            return;
        }
        if let Some(any) = record.messages.iter().next().cloned() {
            record.messages.remove(&any);
        }
        event.message = format!("{COMBINED_PREFIX}{}", event.message);
        event.combined = true;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::events::EventSourceInfo;
    use crate::runtime::events::tests::event_about;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn a_first_event_is_created_and_its_repeat_patches_it() {
        let mut c = EventCorrelator::default();
        let mut e = event_about("a", "Created", "created pod");
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Create);
        c.written(&e, "ns", "a.1", 1);
        assert_eq!(
            c.correlate(&mut e, Instant::now()),
            Decision::Patch {
                namespace: "ns".into(),
                name: "a.1".into(),
                count: 2
            }
        );
        c.written(&e, "ns", "a.1", 2);
        assert_eq!(
            c.correlate(&mut e, Instant::now()),
            Decision::Patch {
                namespace: "ns".into(),
                name: "a.1".into(),
                count: 3
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeat_standing_for_several_occurrences_adds_them_all_to_the_count() {
        let mut c = EventCorrelator::default();
        let mut e = event_about("a", "SuccessfulCreatePod", "Created 4 pods");
        e.count = 4;
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Create);
        c.written(&e, "ns", "a.1", 4);
        assert_eq!(
            c.correlate(&mut e, Instant::now()),
            Decision::Patch {
                namespace: "ns".into(),
                name: "a.1".into(),
                count: 8
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_different_message_or_object_is_a_different_event() {
        let mut c = EventCorrelator::default();
        let mut e = event_about("a", "Created", "one");
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Create);
        c.written(&e, "ns", "a.1", 1);
        assert_eq!(
            c.correlate(&mut event_about("a", "Created", "two"), Instant::now()),
            Decision::Create
        );
        assert_eq!(
            c.correlate(&mut event_about("b", "Created", "one"), Instant::now()),
            Decision::Create
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_forgotten_event_is_created_again() {
        let mut c = EventCorrelator::default();
        let mut e = event_about("a", "Created", "one");
        c.written(&e, "ns", "a.1", 4);
        c.forget(&e);
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Create);
    }

    #[tokio::test(start_paused = true)]
    async fn the_spam_filter_allows_a_burst_of_25_per_object_then_one_per_300_seconds() {
        let mut c = EventCorrelator::default();
        for i in 0..25 {
            let mut e = event_about("a", "R", &format!("m{i}"));
            assert_ne!(
                c.correlate(&mut e, Instant::now()),
                Decision::Drop,
                "event {i}"
            );
        }
        let mut e = event_about("a", "R", "one too many");
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Drop);
        // Another object has its own bucket.
        assert_eq!(
            c.correlate(&mut event_about("b", "R", "m"), Instant::now()),
            Decision::Create
        );

        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Drop);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Create);
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Drop);
    }

    #[tokio::test(start_paused = true)]
    async fn a_warning_still_gets_through_after_the_normal_events_used_up_their_burst() {
        let mut c = EventCorrelator::default();
        for i in 0..25 {
            let mut e = event_about("a", "Progress", &format!("step {i}"));
            assert_ne!(
                c.correlate(&mut e, Instant::now()),
                Decision::Drop,
                "event {i}"
            );
        }
        let mut normal = event_about("a", "Progress", "one too many");
        assert_eq!(c.correlate(&mut normal, Instant::now()), Decision::Drop);
        let mut warning = event_about("a", "Failed", "the job failed");
        warning.type_ = EventType::Warning;
        assert_eq!(c.correlate(&mut warning, Instant::now()), Decision::Create);
    }

    #[tokio::test(start_paused = true)]
    async fn each_reporting_component_has_its_own_spam_bucket() {
        let mut c = EventCorrelator::new(1, SPAM_REFILL_EVERY);
        let mut e = event_about("a", "R", "m");
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Create);
        assert_eq!(c.correlate(&mut e, Instant::now()), Decision::Drop);
        let mut other = e.clone();
        other.source = Arc::new(EventSourceInfo {
            component: "other-controller".into(),
            instance: None,
        });
        assert_eq!(c.correlate(&mut other, Instant::now()), Decision::Create);
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

    /// Publishes "Created pod: j-worker-<i>" for each `i`, writing what is
    /// created or patched, and returns each event's message and decision.
    fn create_pods(
        c: &mut EventCorrelator,
        indexes: std::ops::Range<usize>,
    ) -> Vec<(String, Decision)> {
        indexes
            .map(|i| {
                let mut e = event_about(
                    "j",
                    "SuccessfulCreatePod",
                    &format!("Created pod: j-worker-{i}"),
                );
                let decision = c.correlate(&mut e, Instant::now());
                match &decision {
                    Decision::Create => c.written(&e, "ns", &format!("j.{i}"), 1),
                    Decision::Patch {
                        namespace,
                        name,
                        count,
                    } => c.written(&e, &namespace.clone(), &name.clone(), *count),
                    Decision::Drop => {}
                }
                (e.message, decision)
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn nine_different_messages_of_one_reason_are_written_as_they_are() {
        let mut c = EventCorrelator::default();
        for (i, (message, decision)) in create_pods(&mut c, 0..9).into_iter().enumerate() {
            assert_eq!(message, format!("Created pod: j-worker-{i}"));
            assert_eq!(decision, Decision::Create);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_tenth_different_message_and_the_ones_after_it_are_one_combined_event() {
        let mut c = EventCorrelator::default();
        let written = create_pods(&mut c, 0..12);
        assert_eq!(
            written[9],
            (
                "(combined from similar events): Created pod: j-worker-9".to_owned(),
                Decision::Create
            )
        );
        for (i, count) in [(10, 2), (11, 3)] {
            assert_eq!(
                written[i],
                (
                    format!("(combined from similar events): Created pod: j-worker-{i}"),
                    Decision::Patch {
                        namespace: "ns".into(),
                        name: "j.9".into(),
                        count
                    }
                ),
                "event {i}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn another_reason_has_its_own_count_of_similar_messages() {
        let mut c = EventCorrelator::default();
        create_pods(&mut c, 0..9);
        let mut service = event_about("j", "SuccessfulCreateService", "Created service: j-0");
        assert_eq!(c.correlate(&mut service, Instant::now()), Decision::Create);
        assert_eq!(service.message, "Created service: j-0");
    }

    #[tokio::test(start_paused = true)]
    async fn ten_quiet_minutes_start_the_count_of_similar_messages_again() {
        let mut c = EventCorrelator::default();
        create_pods(&mut c, 0..9);
        tokio::time::advance(SIMILAR_INTERVAL + Duration::from_secs(1)).await;
        let written = create_pods(&mut c, 9..18);
        assert!(
            written
                .iter()
                .all(|(m, d)| !m.starts_with(COMBINED_PREFIX) && *d == Decision::Create),
            "{written:?}"
        );
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
}
