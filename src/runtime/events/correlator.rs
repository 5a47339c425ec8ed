//! The EventCorrelator: aggregation, pure (the caller supplies the time).
//!
//! Mirrors client-go `tools/record/events_cache.go` (`EventAggregator`,
//! `eventLogger`; its spam filter is `spam.rs` here, run before the queue):
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
//! Both caches are bounded (`bounded_map.rs`). It never talks to the API
//! server.
use std::collections::HashSet;
use std::time::Duration;

use tokio::time::Instant;

use super::bounded_map::{BoundedMap, CACHE_ENTRIES};
use super::{EventRecord, EventType};

/// client-go's `defaultAggregateMaxEvents`: different messages with one
/// reason before they are combined.
pub const SIMILAR_THRESHOLD: usize = 10;
/// client-go's `defaultAggregateIntervalInSeconds`: a quiet spell this long
/// starts the count of similar events again.
pub const SIMILAR_INTERVAL: Duration = Duration::from_secs(600);
/// client-go's `EventAggregatorByReasonMessageFunc` prefix.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

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
}

/// Where an aggregated Event lives and how often it has happened.
#[derive(Clone, Debug)]
struct Written {
    namespace: String,
    name: String,
    count: i32,
}

/// Aggregation; pure (the caller supplies the time).
#[derive(Debug)]
pub struct EventCorrelator {
    written: BoundedMap<AggregateKey, Written>,
    similar: BoundedMap<SimilarKey, SimilarRecord>,
}

impl Default for EventCorrelator {
    fn default() -> Self {
        Self {
            written: BoundedMap::new(CACHE_ENTRIES),
            similar: BoundedMap::new(CACHE_ENTRIES),
        }
    }
}

impl EventCorrelator {
    /// Decides what to do with `event`, first combining it with similar
    /// ones if its reason has had [`SIMILAR_THRESHOLD`] different messages
    /// lately (which rewrites its message, as client-go's `EventAggregate`
    /// does). The writer runs the two halves apart: [`combine_similar`]
    /// as it takes an event off the queue, [`write_for`] when its turn to be
    /// written comes.
    ///
    /// [`combine_similar`]: Self::combine_similar
    /// [`write_for`]: Self::write_for
    pub fn correlate(&mut self, event: &mut EventRecord, now: Instant) -> Decision {
        self.combine_similar(event, now);
        self.write_for(event)
    }

    /// A create, or a patch of the Event an earlier write of the same event
    /// stored (so it must run once that write landed).
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
    /// next). It needs no earlier write to have landed.
    pub fn combine_similar(&mut self, event: &mut EventRecord, now: Instant) {
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
    use crate::runtime::events::tests::event_about;

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
}
