//! The spam filter: client-go's `EventSourceObjectSpamFilter`
//! (`tools/record/events_cache.go`), a token bucket per reporter, involved
//! object and event type (burst 25, one token back every 300 s). An object
//! out of tokens gets no more events of that type for now.
//!
//! It runs in [`EventRecorder::publish`](super::EventRecorder::publish),
//! before the event takes a place on the recorder's queue (client-go runs it
//! in the broadcaster, after the queue). Why: one reconcile pass of a big
//! job publishes an Event per child it created, all about the TFJob, at
//! once: 4,002 for a 2,000-worker job. client-go's controllers create
//! children one request at a time, so their events trickle in and the
//! broadcaster filters them as fast as they come; ours creates them
//! concurrently, and the burst would overflow a client-go-sized queue before
//! the filter behind it could drop what it was going to drop anyway (the
//! scale bench's 2,000-worker job did: chapter 11). Filtered here, only the
//! 25 that will be written are queued. The filter is pure (the caller supplies the time).
use std::time::Duration;

use tokio::time::Instant;

use super::bounded_map::{BoundedMap, CACHE_ENTRIES};
use super::correlator::ObjectIdentity;
use super::{EventRecord, EventType};

/// client-go's spam filter burst: events an object may get at once.
pub const SPAM_BURST: u32 = 25;
/// client-go's spam filter refill: one more event per this period.
pub const SPAM_REFILL_EVERY: Duration = Duration::from_secs(300);

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

/// A bucket per reporter, object and type (see the module doc), bounded
/// to 4096 of them.
#[derive(Debug)]
pub struct SpamFilter {
    buckets: BoundedMap<SpamKey, TokenBucket>,
    burst: u32,
    refill_every: Duration,
}

impl Default for SpamFilter {
    fn default() -> Self {
        Self::new(SPAM_BURST, SPAM_REFILL_EVERY)
    }
}

impl SpamFilter {
    /// A filter with a custom bucket.
    pub fn new(burst: u32, refill_every: Duration) -> Self {
        Self {
            buckets: BoundedMap::new(CACHE_ENTRIES),
            burst,
            refill_every,
        }
    }

    /// Takes a token for `event`; `false` when its bucket is empty (the
    /// event is to be dropped). Every event takes one, repeats included: a
    /// hot loop must not patch an Event 100 times a second either.
    pub fn allow(&mut self, event: &EventRecord, now: Instant) -> bool {
        let key = SpamKey {
            object: event.object_key(),
            type_: event.type_,
        };
        let (burst, refill) = (self.burst, self.refill_every);
        self.buckets
            .get_or_insert_with(&key, || TokenBucket::new(burst, refill, now))
            .try_take(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::events::EventSourceInfo;
    use crate::runtime::events::tests::event_about;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn the_spam_filter_allows_a_burst_of_25_per_object_then_one_per_300_seconds() {
        let mut f = SpamFilter::default();
        for i in 0..25 {
            let e = event_about("a", "R", &format!("m{i}"));
            assert!(f.allow(&e, Instant::now()), "event {i}");
        }
        let e = event_about("a", "R", "one too many");
        assert!(!f.allow(&e, Instant::now()));
        // Another object has its own bucket.
        assert!(f.allow(&event_about("b", "R", "m"), Instant::now()));

        tokio::time::advance(Duration::from_secs(299)).await;
        assert!(!f.allow(&e, Instant::now()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(f.allow(&e, Instant::now()));
        assert!(!f.allow(&e, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_warning_still_gets_through_after_the_normal_events_used_up_their_burst() {
        let mut f = SpamFilter::default();
        for i in 0..25 {
            let e = event_about("a", "Progress", &format!("step {i}"));
            assert!(f.allow(&e, Instant::now()), "event {i}");
        }
        assert!(!f.allow(
            &event_about("a", "Progress", "one too many"),
            Instant::now()
        ));
        let mut warning = event_about("a", "Failed", "the job failed");
        warning.type_ = EventType::Warning;
        assert!(f.allow(&warning, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn each_reporting_component_has_its_own_spam_bucket() {
        let mut f = SpamFilter::new(1, SPAM_REFILL_EVERY);
        let e = event_about("a", "R", "m");
        assert!(f.allow(&e, Instant::now()));
        assert!(!f.allow(&e, Instant::now()));
        let mut other = e.clone();
        other.source = Arc::new(EventSourceInfo {
            component: "other-controller".into(),
            instance: None,
        });
        assert!(f.allow(&other, Instant::now()));
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
}
