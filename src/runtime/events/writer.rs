//! The EventBroadcaster: the background task that writes events.
//!
//! Mirrors client-go `tools/record/event.go` (`eventBroadcasterImpl`,
//! `recordToSink`, `recordEvent`): each event goes through the
//! [`EventCorrelator`], then is created or patched through an [`EventSink`]
//! (`sink.rs`).
//!
//! Unlike client-go, which writes one Event at a time, up to
//! [`WRITES_IN_FLIGHT`] writes run at once, for different objects: a
//! burst of a thousand jobs finishing drains in a fraction of the time,
//! which matters most at shutdown, when the flush has a budget. Events
//! about one object are written in order, one at a time, so a repeat is
//! decided once the write it repeats has landed, and patches that Event
//! instead of creating a second one.
//!
//! While the work clients have requests out, fewer writes go out at once
//! ([`WorkFirst`], `work_first.rs`): the writes that move jobs forward
//! come first, the Events catch up after, within a bound, none dropped.
//!
//! A failed write is retried only when the server could not be reached
//! (a transport error: connection refused or reset, timeout, TLS, auth
//! refresh), as client-go's `recordEvent` does; an answer with any HTTP
//! status (404 for a deleted namespace, 403, 422, 429, 5xx) drops the event
//! at once: the server has decided, and asking again would only repeat it.
//! Retries never hold up other events: a failed event waits its pause in a
//! retry queue while the events behind it are written, so one namespace's
//! dead events cannot delay the rest of the cluster's. A failed write is
//! logged and counted, then forgotten; it never reaches the code that
//! published the event.
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::correlator::{Decision, EventCorrelator, ObjectIdentity};
use super::sink::{EventSink, Written, write};
use super::work_first::WorkFirst;
use super::{EventMetrics, EventRecord};
use crate::runtime::client::work_gauge::WorkGauge;

/// Tries per event while the server cannot be reached (client-go: 12, 10 s
/// apart; fewer here because one writer task serves every controller).
const WRITE_ATTEMPTS: u32 = 3;
/// The pause before an event is tried again.
const WRITE_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Writes in flight at once (each for a different object) while no work
/// is out ([`WorkFirst`] lowers it while work is).
pub const WRITES_IN_FLIGHT: usize = 8;
/// The most events the writer holds behind a write in flight for their
/// object. Events come in runs about one object (a TFJob gets one Event per
/// child it creates, eight for a 4-replica job, all at once), so the writer
/// must look past a run to find other objects to write: were this bound
/// [`WRITES_IN_FLIGHT`] in all, one job's run would fill it and the writer
/// would write one Event at a time, too slowly for a burst of jobs (the
/// run that showed it is in `docs/benchmarks.md`, "Every Event written").
/// Still bounded, so a full queue means a slow server, and drops, as in
/// client-go.
pub const HELD_BEHIND_MOST: usize = 16 * WRITES_IN_FLIGHT;

/// An event the writer holds: new (its write decided when its turn comes),
/// or to be tried again (decided already: a retry must write what its first
/// attempt was to write).
struct Held {
    event: EventRecord,
    decision: Option<Decision>,
    /// Attempts made so far.
    attempts: u32,
}

impl Held {
    fn new(event: EventRecord) -> Self {
        Self {
            event,
            decision: None,
            attempts: 0,
        }
    }
}

/// An event waiting to be tried again.
struct Retry {
    held: Held,
    due: Instant,
}

/// A write that has landed, with the event it wrote.
struct Landed {
    event: EventRecord,
    decision: Decision,
    attempts: u32,
    written: Written,
    /// How long the write took (the server's pace, [`WorkFirst::landed`]).
    took: Duration,
}

/// The background writer behind an [`EventRecorder`](super::EventRecorder).
pub struct EventBroadcaster {
    rx: mpsc::Receiver<EventRecord>,
    sink: Arc<dyn EventSink>,
    correlator: EventCorrelator,
    metrics: EventMetrics,
    /// Oldest first; every retry waits the same pause, so also soonest due
    /// first.
    retries: VecDeque<Retry>,
    /// The objects with a write in flight or parked, each with the events
    /// about it that wait for that write to land.
    lanes: HashMap<ObjectIdentity, VecDeque<Held>>,
    /// Objects whose next event waits for room (the budget narrowed while
    /// their last write was out), oldest first.
    parked: VecDeque<ObjectIdentity>,
    in_flight: FuturesUnordered<BoxFuture<'static, Landed>>,
    /// How many writes may be out now.
    budget: WorkFirst,
    /// Shutting down: what fails now is not tried again.
    closing: bool,
}

impl EventBroadcaster {
    pub(super) fn new(
        rx: mpsc::Receiver<EventRecord>,
        sink: Arc<dyn EventSink>,
        metrics: EventMetrics,
    ) -> Self {
        Self {
            rx,
            sink,
            correlator: EventCorrelator::default(),
            metrics,
            retries: VecDeque::new(),
            lanes: HashMap::new(),
            parked: VecDeque::new(),
            in_flight: FuturesUnordered::new(),
            budget: WorkFirst::new(None),
            closing: false,
        }
    }

    /// Has the writer yield to the requests `work` counts ([`WorkFirst`]).
    pub(super) fn yield_to(mut self, work: WorkGauge) -> Self {
        self.budget = WorkFirst::new(Some(work));
        self
    }

    /// Writes events until `shutdown`, then writes what is already queued
    /// or waiting for a retry (one attempt each) and returns. Also returns
    /// once every recorder is dropped and nothing is in flight or waits for
    /// a retry.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut open = true;
        loop {
            self.unpark();
            let next_retry = self.retries.front().map(|r| r.due);
            if !open && next_retry.is_none() && self.in_flight.is_empty() {
                return;
            }
            let room = self.has_room();
            // Held back for work: look again once it is quiet.
            let held_back = !self.parked.is_empty() || (!room && !self.rx.is_empty());
            let yielding = held_back && self.budget.yielding();
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(landed) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    self.landed(landed);
                }
                _ = self.budget.quiet(), if yielding => {}
                next = self.rx.recv(), if open && room => match next {
                    Some(event) => self.hold(Held::new(event)),
                    // Every recorder was dropped: nothing more can arrive.
                    None => open = false,
                },
                _ = sleep_until(next_retry), if next_retry.is_some() && room => {
                    if let Some(retry) = self.retries.pop_front() {
                        self.hold(retry.held);
                    }
                }
            }
        }
        // The flush: everything queued or waiting for a retry gets one
        // attempt, still several objects at a time.
        self.closing = true;
        let mut waiting: VecDeque<Held> = std::iter::from_fn(|| self.rx.try_recv().ok())
            .map(Held::new)
            .chain(self.retries.drain(..).map(|r| r.held))
            .collect();
        loop {
            self.unpark();
            if self.has_room()
                && let Some(held) = waiting.pop_front()
            {
                self.hold(held);
            } else if let Some(landed) = self.in_flight.next().await {
                self.landed(landed);
            } else {
                return;
            }
        }
    }

    /// How many writes may be out now: all of [`WRITES_IN_FLIGHT`] when
    /// closing, else as the budget says.
    fn writes_now(&mut self) -> usize {
        if self.closing {
            return WRITES_IN_FLIGHT;
        }
        if self.rx.is_empty() && self.parked.is_empty() {
            self.budget.caught_up();
        }
        self.budget
            .writes_now(self.rx.len(), self.rx.max_capacity())
    }

    /// Starts the next write of parked objects while there is room.
    fn unpark(&mut self) {
        while !self.parked.is_empty() && self.in_flight.len() < self.writes_now() {
            let next = self
                .parked
                .pop_front()
                .and_then(|object| self.lanes.get_mut(&object).and_then(VecDeque::pop_front));
            if let Some(next) = next {
                self.start(next);
            }
        }
    }

    /// Whether the writer may take one more event: it may start a write
    /// (fewer in flight than the budget allows, no object parked ahead of
    /// it) and hold it behind its object's write if it must (fewer than
    /// [`HELD_BEHIND_MOST`] held).
    fn has_room(&mut self) -> bool {
        let waiting: usize = self.lanes.values().map(VecDeque::len).sum();
        self.parked.is_empty()
            && self.in_flight.len() < self.writes_now()
            && waiting < HELD_BEHIND_MOST
    }

    /// Starts `held`'s write, or queues it behind the write in flight for
    /// the same object. A new event is combined with similar ones here, as
    /// it comes off the queue (its message must be final before it is
    /// written); the spam filter has admitted it already, before the queue
    /// (`spam.rs`).
    fn hold(&mut self, mut held: Held) {
        if held.decision.is_none() {
            self.correlator
                .combine_similar(&mut held.event, Instant::now());
        }
        let object = held.event.object_key();
        if let Some(lane) = self.lanes.get_mut(&object) {
            lane.push_back(held);
            return;
        }
        self.lanes.insert(object, VecDeque::new());
        self.start(held);
    }

    /// Starts the write of `held`, the next event about its object. What is
    /// left to decide
    /// (create, or patch the Event an earlier write stored) needs that
    /// object's earlier writes to have landed, which they have.
    fn start(&mut self, mut held: Held) {
        self.budget.starting(held.event.published);
        let decision = held
            .decision
            .take()
            .unwrap_or_else(|| self.correlator.write_for(&held.event));
        let sink = Arc::clone(&self.sink);
        let Held {
            event, attempts, ..
        } = held;
        self.in_flight.push(Box::pin(async move {
            let sent = Instant::now();
            let written = write(sink.as_ref(), &event, &decision).await;
            Landed {
                event,
                decision,
                attempts: attempts + 1,
                written,
                took: sent.elapsed(),
            }
        }));
    }

    /// Records where a landed write put its event (or sends it to the back
    /// of the retry queue, or gives up on it), then starts the next write
    /// for the same object.
    fn landed(&mut self, landed: Landed) {
        let Landed {
            event,
            decision,
            attempts,
            written,
            took,
        } = landed;
        self.budget.landed(took);
        let object = event.object_key();
        if written.expired {
            self.correlator.forget(&event);
        }
        match written.result {
            Ok(Some(stored)) => {
                self.correlator
                    .written(&event, &stored.namespace, &stored.name, stored.count);
            }
            Ok(None) => {}
            Err(error) => {
                let cause = std::error::Error::source(&error)
                    .map(ToString::to_string)
                    .unwrap_or_default();
                if !self.closing && attempts < WRITE_ATTEMPTS && error.is_retryable() {
                    tracing::debug!(error = %error, %cause, attempts, "failed to write event; will retry");
                    self.retries.push_back(Retry {
                        held: Held {
                            event,
                            decision: Some(decision),
                            attempts,
                        },
                        due: Instant::now() + WRITE_RETRY_PAUSE,
                    });
                } else if error.is_namespace_gone() {
                    // client-go's recorder drops these quietly too: the
                    // object and its Events go with the namespace.
                    self.metrics.failed.inc();
                    tracing::debug!(error = %error, object = %event.display_object(), reason = %event.reason, "event not written: its namespace is being deleted");
                } else {
                    self.metrics.failed.inc();
                    let why = if error.is_retryable() {
                        "server unreachable; giving up"
                    } else {
                        "the server refused it; not retrying"
                    };
                    tracing::warn!(error = %error, %cause, object = %event.display_object(), reason = %event.reason, attempts, "failed to write event: {why}");
                }
            }
        }
        let more = self.lanes.get(&object).is_some_and(|lane| !lane.is_empty());
        if !more {
            self.lanes.remove(&object);
        } else if self.in_flight.len() < self.writes_now() {
            if let Some(next) = self.lanes.get_mut(&object).and_then(VecDeque::pop_front) {
                self.start(next);
            }
        } else {
            // The budget narrowed while this write was out.
            self.parked.push_back(object);
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::events::tests::event_about;

    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use jiff::Timestamp;
    use k8s_openapi::api::core::v1::Event;
    use kube::core::Status;

    /// An in-memory API server: namespace "dead" is gone (404, as after a
    /// namespace deletion), "flaky" is unreachable for its first
    /// `unreachable` writes; every other write succeeds, after `delay`.
    #[derive(Default)]
    struct MemorySink {
        unreachable: Mutex<u32>,
        delay: Duration,
        /// (namespace, object, when) of every create attempted.
        attempts: Mutex<Vec<(String, String, Instant)>>,
        /// (namespace, object, when) of every create that succeeded.
        written: Mutex<Vec<(String, String, Instant)>>,
        /// (Event, count) of every patch.
        patched: Mutex<Vec<(String, i64)>>,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
    }

    impl MemorySink {
        fn slow(delay: Duration) -> Self {
            Self {
                delay,
                ..Self::default()
            }
        }

        /// Counts a write in flight for `delay`.
        async fn take_time(&self) {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl EventSink for MemorySink {
        fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), kube::Error>> {
            Box::pin(async move {
                let ns = event.metadata.namespace.clone().unwrap_or_default();
                let object = event.involved_object.name.clone().unwrap_or_default();
                let now = Instant::now();
                self.attempts
                    .lock()
                    .unwrap()
                    .push((ns.clone(), object.clone(), now));
                if ns == "dead" {
                    let status = Status::failure(r#"namespaces "dead" not found"#, "NotFound")
                        .with_code(404);
                    return Err(kube::Error::Api(status.boxed()));
                }
                if ns == "flaky" {
                    let mut left = self.unreachable.lock().unwrap();
                    if *left > 0 {
                        *left -= 1;
                        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
                        return Err(kube::Error::Service(Box::new(refused)));
                    }
                }
                self.take_time().await;
                self.written
                    .lock()
                    .unwrap()
                    .push((ns, object, Instant::now()));
                Ok(())
            })
        }

        fn patch<'a>(
            &'a self,
            _: &'a str,
            name: &'a str,
            patch: &'a serde_json::Value,
        ) -> BoxFuture<'a, Result<(), kube::Error>> {
            Box::pin(async move {
                self.take_time().await;
                let count = patch["count"].as_i64().unwrap_or_default();
                self.patched.lock().unwrap().push((name.to_owned(), count));
                Ok(())
            })
        }
    }

    fn event_in(namespace: &str, name: &str) -> EventRecord {
        let mut e = event_about(name, "Created", "created pod");
        e.involved.namespace = Some(namespace.to_owned());
        e.at = Timestamp::UNIX_EPOCH;
        e
    }

    /// Starts a broadcaster over `sink` with `events` already queued.
    fn start(
        sink: Arc<MemorySink>,
        events: Vec<EventRecord>,
    ) -> (
        crate::runtime::metrics::SharedMetrics,
        mpsc::Sender<EventRecord>,
        tokio_util::sync::DropGuard,
    ) {
        let registry = crate::runtime::metrics::testing::new_registry();
        let metrics = EventMetrics::register(&registry);
        let (tx, rx) = mpsc::channel(1000);
        for e in events {
            tx.try_send(e).unwrap();
        }
        let broadcaster = EventBroadcaster::new(rx, sink, metrics);
        let shutdown = CancellationToken::new();
        tokio::spawn(broadcaster.run(shutdown.clone()));
        (registry, tx, shutdown.drop_guard())
    }

    #[tokio::test(start_paused = true)]
    async fn events_of_a_deleted_namespace_are_dropped_at_once_and_never_delay_the_others() {
        let sink = Arc::new(MemorySink::default());
        let events = (0..20)
            .map(|i| event_in(if i % 2 == 0 { "dead" } else { "live" }, &format!("p{i}")))
            .collect();
        let start_at = Instant::now();
        let (registry, _tx, _guard) = start(sink.clone(), events);
        tokio::time::sleep(Duration::from_secs(60)).await;

        let written = sink.written.lock().unwrap().clone();
        assert_eq!(written.len(), 10, "every live event is written");
        for (ns, object, at) in &written {
            assert_eq!(ns, "live");
            assert_eq!(*at, start_at, "{object} waited behind the dead namespace");
        }
        let dead_attempts = sink
            .attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|(ns, ..)| ns == "dead")
            .count();
        assert_eq!(dead_attempts, 10, "a 404 is final: one attempt per event");
        let text = crate::runtime::metrics::testing::encode(&registry);
        assert!(text.contains("events_write_failures_total 10"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_server_is_retried_without_holding_up_the_events_behind() {
        let sink = Arc::new(MemorySink {
            unreachable: Mutex::new(2),
            ..MemorySink::default()
        });
        let events = vec![
            event_in("flaky", "f"),
            event_in("live", "a"),
            event_in("live", "b"),
        ];
        let start_at = Instant::now();
        let (registry, _tx, _guard) = start(sink.clone(), events);
        tokio::time::sleep(Duration::from_secs(60)).await;

        let written = sink.written.lock().unwrap().clone();
        let when = |object: &str| {
            written
                .iter()
                .find(|(_, o, _)| o == object)
                .map(|(.., at)| *at - start_at)
        };
        assert_eq!(when("a"), Some(Duration::ZERO));
        assert_eq!(when("b"), Some(Duration::ZERO));
        // Third attempt, after two pauses.
        assert_eq!(when("f"), Some(2 * WRITE_RETRY_PAUSE));
        let text = crate::runtime::metrics::testing::encode(&registry);
        assert!(text.contains("events_write_failures_total 0"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn events_about_different_objects_are_written_several_at_a_time() {
        let write_takes = Duration::from_millis(100);
        let sink = Arc::new(MemorySink::slow(write_takes));
        let events = (0..20)
            .map(|i| event_in("live", &format!("job{i}")))
            .collect();
        let start_at = Instant::now();
        let (_registry, _tx, _guard) = start(sink.clone(), events);
        tokio::time::sleep(Duration::from_secs(60)).await;

        let written = sink.written.lock().unwrap().clone();
        assert_eq!(written.len(), 20);
        assert_eq!(
            sink.most_in_flight.load(Ordering::SeqCst),
            WRITES_IN_FLIGHT,
            "no more, and no fewer, writes at once than the limit"
        );
        // 20 writes, 8 at a time: three rounds, not twenty.
        let last = written.iter().map(|(.., at)| *at - start_at).max();
        assert_eq!(last, Some(3 * write_takes));
    }

    #[tokio::test(start_paused = true)]
    async fn runs_of_events_about_one_object_still_let_other_objects_be_written_at_once() {
        // Eight jobs, each with the eight creation Events a 4-replica job
        // gets, queued job after job as a burst of creates queues them.
        let write_takes = Duration::from_millis(100);
        let sink = Arc::new(MemorySink::slow(write_takes));
        let events = (0..8)
            .flat_map(|job| {
                (0..8).map(move |child| {
                    let mut e = event_about(
                        &format!("job{job}"),
                        "SuccessfulCreatePod",
                        &format!("Created pod: job{job}-worker-{child}"),
                    );
                    e.involved.namespace = Some("live".to_owned());
                    e
                })
            })
            .collect();
        let start_at = Instant::now();
        let (_registry, _tx, _guard) = start(sink.clone(), events);
        tokio::time::sleep(Duration::from_secs(60)).await;

        let written = sink.written.lock().unwrap().clone();
        assert_eq!(written.len(), 64);
        assert_eq!(
            sink.most_in_flight.load(Ordering::SeqCst),
            WRITES_IN_FLIGHT,
            "one job's run of Events must not leave the other jobs waiting"
        );
        // Each job's eight in order, the eight jobs at once: eight rounds
        // (one write at a time would take 64).
        let last = written.iter().map(|(.., at)| *at - start_at).max();
        assert_eq!(last, Some(8 * write_takes));
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeat_waits_for_the_write_it_repeats_and_patches_that_event() {
        let sink = Arc::new(MemorySink::slow(Duration::from_millis(100)));
        let repeats = vec![event_in("live", "job"); 3];
        let (_registry, _tx, _guard) = start(sink.clone(), repeats);
        tokio::time::sleep(Duration::from_secs(60)).await;

        assert_eq!(
            sink.written.lock().unwrap().len(),
            1,
            "one Event, created once"
        );
        let counts: Vec<i64> = sink
            .patched
            .lock()
            .unwrap()
            .iter()
            .map(|(_, c)| *c)
            .collect();
        assert_eq!(counts, [2, 3], "then patched, in order");
        assert_eq!(sink.most_in_flight.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_flush_at_shutdown_also_writes_several_objects_at_a_time() {
        let write_takes = Duration::from_millis(100);
        let sink = Arc::new(MemorySink::slow(write_takes));
        let registry = crate::runtime::metrics::testing::new_registry();
        let (tx, rx) = mpsc::channel(1000);
        for i in 0..16 {
            tx.try_send(event_in("live", &format!("job{i}"))).unwrap();
        }
        let broadcaster =
            EventBroadcaster::new(rx, sink.clone(), EventMetrics::register(&registry));
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let start_at = Instant::now();
        broadcaster.run(shutdown).await;

        assert_eq!(sink.written.lock().unwrap().len(), 16, "every queued event");
        assert_eq!(
            start_at.elapsed(),
            2 * write_takes,
            "16 writes, 8 at a time"
        );
    }
}
