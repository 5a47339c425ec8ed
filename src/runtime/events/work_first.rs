//! Work before words: how many Event writes the writer may have out while
//! the work clients (creates, deletes, status writes) have requests out,
//! and while the server is slow for everyone's.
//!
//! client-go's recorder is asynchronous with a budget of its own (its
//! clientset's QPS, the correlator's spam filter) so that Events never hold
//! up the writes that move objects forward. Ours writes on a client without
//! a client-side limit, so the budget is this: while work is busy
//! ([`WorkGauge`]), the writer keeps at most [`WRITES_WHILE_WORKING`] Event
//! write out instead of [`WRITES_IN_FLIGHT`](super::writer::WRITES_IN_FLIGHT),
//! so once the Events already sent have landed, a work request finds at
//! most that one Event ahead of it at the server, and the queue still
//! moves. When work goes quiet the writer catches up as wide as the server
//! keeps pace ([`ServerPace`]: one write while writes come back slow, so
//! Events do not crowd out others' writes either — the kubelets' Pod
//! status, which the next pass of the work waits for). The yield to work is
//! bounded: once an Event about to be written has waited [`MAX_DEFER`]
//! since it was published, the writer stops yielding to work (it still
//! follows the server's pace) until it has caught up (nothing left queued
//! or held back); and once the recorder's queue is half full it writes at
//! full width until caught up, so nothing is dropped for the yield. Events
//! about one object stay in order throughout: the budget only decides how
//! many objects' writes are out at once.
//!
//! Never talks to the API server; the writer (`writer.rs`) asks it and
//! tells it how long each write took.
use std::time::Duration;

use tokio::time::Instant;

use crate::runtime::client::work_gauge::WorkGauge;

use super::server_pace::ServerPace;
use super::writer::WRITES_IN_FLIGHT;

/// Event writes out at once while work is busy: one, so Events still move.
pub const WRITES_WHILE_WORKING: usize = 1;

/// The longest an Event waits for work before the writer stops yielding to
/// it. Long enough for a burst of creates to go first (the Events of a
/// thousand jobs applied at once are written after their Pods, not between
/// them), short enough that `kubectl describe` shows what happened within a
/// minute of the server answering again. Past it the writer still follows
/// the server's pace: a server slow for everyone gets one Event at a time.
pub const MAX_DEFER: Duration = Duration::from_secs(60);

/// The writer's budget (see the module doc).
pub(super) struct WorkFirst {
    /// None: the writer never yields (no work clients told us about theirs).
    work: Option<WorkGauge>,
    /// How wide the server lets the writer go.
    pace: ServerPace,
    /// An Event waited [`MAX_DEFER`]: no yield to work until nothing waits.
    overdue: bool,
    /// The queue filled to half: full width until nothing waits.
    filling: bool,
}

impl WorkFirst {
    pub(super) fn new(work: Option<WorkGauge>) -> Self {
        Self {
            work,
            pace: ServerPace::new(),
            overdue: false,
            filling: false,
        }
    }

    /// Event writes that may be out now, with `queued` Events in a queue of
    /// `capacity`.
    pub(super) fn writes_now(&mut self, queued: usize, capacity: usize) -> usize {
        if queued.saturating_mul(2) >= capacity {
            self.filling = true;
        }
        if self.filling {
            WRITES_IN_FLIGHT
        } else if self.yielding() {
            WRITES_WHILE_WORKING
        } else {
            self.pace.width()
        }
    }

    /// Whether the writer holds back for work now.
    pub(super) fn yielding(&self) -> bool {
        !self.overdue && !self.filling && self.work.as_ref().is_some_and(WorkGauge::busy)
    }

    /// An Event published at `published` is about to be written.
    pub(super) fn starting(&mut self, published: Instant) {
        if Instant::now().saturating_duration_since(published) >= MAX_DEFER {
            self.overdue = true;
        }
    }

    /// An Event write came back after `took`.
    pub(super) fn landed(&mut self, took: Duration) {
        let work_fastest = self.work.as_ref().and_then(WorkGauge::fastest_recent);
        self.pace.landed(took, work_fastest);
    }

    /// Nothing is queued or held back: the next wait starts afresh.
    pub(super) fn caught_up(&mut self) {
        self.overdue = false;
        self.filling = false;
    }

    /// Returns once work is quiet (never, without a gauge).
    pub(super) async fn quiet(&self) {
        match &self.work {
            Some(work) => work.quiet().await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::events::EventMetrics;
    use crate::runtime::events::sink::EventSink;
    use crate::runtime::events::tests::event_about;
    use crate::runtime::events::writer::EventBroadcaster;

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;
    use k8s_openapi::api::core::v1::Event;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    /// One request the server served: what it was, when it was sent, when
    /// the server started on it, and how many Event writes were out then.
    #[derive(Clone, Debug)]
    struct Served {
        label: String,
        event: bool,
        sent: Instant,
        started: Instant,
        events_out: usize,
    }

    /// An API server that serves one request at a time, first come first
    /// served, each taking `takes`: the saturated server of the bench,
    /// where every Event write ahead of a create delays it.
    struct Server {
        one_at_a_time: Option<tokio::sync::Mutex<()>>,
        takes: Duration,
        /// Between these every request takes `loaded_takes`: the server's
        /// queue while others (the kubelets) load it.
        loaded: Option<(Instant, Instant)>,
        loaded_takes: Duration,
        served: Mutex<Vec<Served>>,
        events_out: AtomicUsize,
    }

    impl Server {
        fn fifo(takes: Duration) -> Arc<Self> {
            Arc::new(Self {
                one_at_a_time: Some(tokio::sync::Mutex::new(())),
                takes,
                loaded: None,
                loaded_takes: takes,
                served: Mutex::default(),
                events_out: AtomicUsize::new(0),
            })
        }

        /// Serves every request at once, each in `takes`.
        fn parallel(takes: Duration) -> Arc<Self> {
            Arc::new(Self {
                one_at_a_time: None,
                ..Arc::into_inner(Self::fifo(takes)).unwrap()
            })
        }

        /// Serves every request at once, each in `takes`, or in
        /// `loaded_takes` while others load it: from `from` after now, for
        /// `lasting`.
        fn loaded_by_others(
            takes: Duration,
            loaded_takes: Duration,
            from: Duration,
            lasting: Duration,
        ) -> Arc<Self> {
            let from = Instant::now() + from;
            Arc::new(Self {
                loaded: Some((from, from + lasting)),
                loaded_takes,
                ..Arc::into_inner(Self::parallel(takes)).unwrap()
            })
        }

        async fn serve(&self, label: String, event: bool) {
            let sent = Instant::now();
            let events_out = if event {
                self.events_out.fetch_add(1, Ordering::SeqCst) + 1
            } else {
                self.events_out.load(Ordering::SeqCst)
            };
            let _turn = match &self.one_at_a_time {
                Some(turn) => Some(turn.lock().await),
                None => None,
            };
            let started = Instant::now();
            let loaded = self
                .loaded
                .is_some_and(|(from, until)| from <= started && started < until);
            tokio::time::sleep(if loaded {
                self.loaded_takes
            } else {
                self.takes
            })
            .await;
            if event {
                self.events_out.fetch_sub(1, Ordering::SeqCst);
            }
            self.served.lock().unwrap().push(Served {
                label,
                event,
                sent,
                started,
                events_out,
            });
        }

        fn served(&self) -> Vec<Served> {
            self.served.lock().unwrap().clone()
        }
    }

    impl EventSink for Server {
        fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), kube::Error>> {
            let object = event.involved_object.name.clone().unwrap_or_default();
            let message = event.message.clone().unwrap_or_default();
            Box::pin(async move {
                self.serve(format!("{object} {message}"), true).await;
                Ok(())
            })
        }

        fn patch<'a>(
            &'a self,
            _: &'a str,
            name: &'a str,
            _: &'a serde_json::Value,
        ) -> BoxFuture<'a, Result<(), kube::Error>> {
            Box::pin(async move {
                self.serve(format!("patch {name}"), true).await;
                Ok(())
            })
        }
    }

    /// `jobs` objects with `each` Events apiece, published one object after
    /// another as a burst of creates publishes them; messages `m0`, `m1`, ...
    fn burst(jobs: usize, each: usize) -> Vec<crate::runtime::events::EventRecord> {
        (0..jobs)
            .flat_map(|job| {
                (0..each)
                    .map(move |m| event_about(&format!("job{job}"), "Created", &format!("m{m}")))
            })
            .collect()
    }

    type Publisher = mpsc::Sender<crate::runtime::events::EventRecord>;

    /// Starts a writer yielding to `work` over `server`, `events` queued;
    /// returns the queue to publish more on, and the writer's stop.
    fn start_writer(
        server: Arc<Server>,
        work: WorkGauge,
        events: Vec<crate::runtime::events::EventRecord>,
    ) -> (Publisher, tokio_util::sync::DropGuard) {
        let registry = crate::runtime::metrics::testing::new_registry();
        let (tx, rx) = mpsc::channel(1000);
        for e in events {
            tx.try_send(e).unwrap();
        }
        let writer =
            EventBroadcaster::new(rx, server, EventMetrics::register(&registry)).yield_to(work);
        let shutdown = CancellationToken::new();
        tokio::spawn(writer.run(shutdown.clone()));
        (tx, shutdown.drop_guard())
    }

    /// Every Event arrived once, and each object's in the order published.
    fn assert_all_in_order(served: &[Served], jobs: usize, each: usize) {
        let events: Vec<&str> = served
            .iter()
            .filter(|s| s.event)
            .map(|s| s.label.as_str())
            .collect();
        assert_eq!(events.len(), jobs * each, "every Event written, once");
        for job in 0..jobs {
            let mine: Vec<&str> = events
                .iter()
                .copied()
                .filter(|l| l.starts_with(&format!("job{job} ")))
                .collect();
            let published: Vec<String> = (0..each).map(|m| format!("job{job} m{m}")).collect();
            assert_eq!(mine, published, "job{job}'s Events in the order published");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn under_a_burst_of_work_a_work_request_is_not_queued_behind_the_events() {
        let takes = Duration::from_millis(10);
        let server = Server::fifo(takes);
        let work = WorkGauge::new();
        // 25 jobs' Events queued, 4 each, before the work comes: the writer
        // starts at full width.
        let (_tx, _writer) = start_writer(server.clone(), work.clone(), burst(25, 4));
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Four workers, ten writes each, back to back.
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let (server, work) = (server.clone(), work.clone());
                tokio::spawn(async move {
                    for i in 0..10 {
                        let _out = work.enter();
                        server.serve(format!("work {w}.{i}"), false).await;
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        let work_done = Instant::now();
        tokio::time::sleep(Duration::from_secs(10)).await;

        let served = server.served();
        for w in served.iter().filter(|s| !s.event) {
            let ahead = served
                .iter()
                .filter(|e| e.event && e.started >= w.sent && e.started < w.started)
                .count();
            let limit = if w.label.ends_with(".0") {
                // The first write of each worker finds the Events already out.
                WRITES_IN_FLIGHT
            } else {
                WRITES_WHILE_WORKING
            };
            assert!(
                ahead <= limit,
                "{} waited behind {ahead} Event writes (at most {limit})",
                w.label
            );
        }
        // The work took its own time and little more: 40 writes, the
        // first Events out, and one Event per round of the four workers.
        let first_sent = served.iter().map(|s| s.sent).min().unwrap();
        assert!(
            work_done - first_sent <= takes * (40 + WRITES_IN_FLIGHT as u32 + 10 + 1),
            "the work took {:?}",
            work_done - first_sent
        );
        // Then the writer caught up, wider than while the work was out (as
        // wide as this one-at-a-time server kept pace), and nothing was lost.
        let after: Vec<&Served> = served.iter().filter(|s| s.sent > work_done).collect();
        assert!(!after.is_empty(), "Events were left for after the work");
        assert!(
            after.iter().map(|s| s.events_out).max() > Some(WRITES_WHILE_WORKING),
            "caught up wider once the work was quiet"
        );
        assert_all_in_order(&served, 25, 4);
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_never_stops_delays_no_event_much_past_the_bound() {
        // Each write takes a second; work is out all along. One Event at a
        // time until one has waited the bound, then all at full width.
        let takes = Duration::from_secs(1);
        let server = Server::parallel(takes);
        let work = WorkGauge::new();
        let _busy = work.enter();
        let start = Instant::now();
        let (_tx, _writer) = start_writer(server.clone(), work.clone(), burst(50, 2));
        tokio::time::sleep(MAX_DEFER + Duration::from_secs(60)).await;

        let served = server.served();
        let before_bound = served.iter().filter(|s| s.sent - start < MAX_DEFER);
        assert_eq!(
            before_bound.map(|s| s.events_out).max(),
            Some(WRITES_WHILE_WORKING),
            "one at a time while no Event had waited the bound"
        );
        let last = served.iter().map(|s| s.started + takes - start).max();
        // 100 writes: 60 one at a time, the other 40 eight at a time.
        assert!(
            last <= Some(MAX_DEFER + takes * (40 / WRITES_IN_FLIGHT as u32 + 1)),
            "the last Event was written {last:?} after it was published"
        );
        assert_all_in_order(&served, 50, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn while_others_load_the_server_one_event_at_a_time_then_full_width_once_it_is_fast_again()
     {
        // The work's first request found the server quiet; then the server
        // is slow for everyone (the kubelets' writes) for two seconds, 60 ms
        // a write instead of 10, and the Events come, with no work of ours
        // out.
        let (takes, loaded) = (Duration::from_millis(10), Duration::from_millis(60));
        let (quiet_for, loaded_for) = (Duration::from_millis(100), Duration::from_secs(2));
        let server = Server::loaded_by_others(takes, loaded, quiet_for, loaded_for);
        let work = WorkGauge::new();
        {
            let _out = work.enter();
            server
                .serve("work before the load".to_string(), false)
                .await;
        }
        tokio::time::sleep_until(Instant::now() + quiet_for).await;
        let start = Instant::now();
        // 400 Events: the queue (of 1,000) stays under half full, so the
        // writer is not catching up for fear of dropping.
        let (_tx, _writer) = start_writer(server.clone(), work, burst(200, 2));
        tokio::time::sleep(Duration::from_secs(10)).await;

        let served = server.served();
        // The first writes go out at full width; once they came back slow,
        // one at a time until the load ends.
        let under_load = served
            .iter()
            .filter(|s| s.sent >= start + loaded && s.sent < start + loaded_for);
        assert_eq!(
            under_load.map(|s| s.events_out).max(),
            Some(1),
            "one Event at a time while writes came back slow"
        );
        let fast_again = served
            .iter()
            .filter(|s| s.sent >= start + loaded_for + loaded);
        assert_eq!(
            fast_again.map(|s| s.events_out).max(),
            Some(WRITES_IN_FLIGHT),
            "full width once writes came back fast"
        );
        assert_all_in_order(&served, 200, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_past_its_bound_ends_the_yield_to_work_but_not_to_a_slow_server() {
        let work = WorkGauge::new();
        let mut budget = WorkFirst::new(Some(work.clone()));
        let _out = work.enter();
        budget.landed(Duration::from_millis(3));
        budget.landed(Duration::from_millis(100));
        let published = Instant::now();
        tokio::time::advance(MAX_DEFER).await;
        budget.starting(published);
        assert!(!budget.yielding(), "no longer yielding to work");
        assert_eq!(budget.writes_now(10, 100), 1, "the server is still slow");
        budget.landed(Duration::from_millis(3));
        assert_eq!(budget.writes_now(10, 100), 2, "widening as it speeds up");
        assert_eq!(
            budget.writes_now(50, 100),
            WRITES_IN_FLIGHT,
            "a half-full queue: full width, so nothing is dropped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_work_out_the_writer_writes_at_full_width() {
        let mut budget = WorkFirst::new(Some(WorkGauge::new()));
        assert_eq!(budget.writes_now(0, 100), WRITES_IN_FLIGHT);
        let mut never_told = WorkFirst::new(None);
        assert_eq!(never_told.writes_now(0, 100), WRITES_IN_FLIGHT);
    }

    #[tokio::test(start_paused = true)]
    async fn while_work_is_out_one_event_write_at_a_time() {
        let work = WorkGauge::new();
        let mut budget = WorkFirst::new(Some(work.clone()));
        let _out = work.enter();
        assert_eq!(budget.writes_now(10, 100), WRITES_WHILE_WORKING);
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_that_waited_its_bound_ends_the_yield_until_caught_up() {
        let work = WorkGauge::new();
        let mut budget = WorkFirst::new(Some(work.clone()));
        let _out = work.enter();
        let published = Instant::now();
        tokio::time::advance(MAX_DEFER - Duration::from_millis(1)).await;
        budget.starting(published);
        assert_eq!(budget.writes_now(10, 100), WRITES_WHILE_WORKING);
        tokio::time::advance(Duration::from_millis(1)).await;
        budget.starting(published);
        assert_eq!(budget.writes_now(10, 100), WRITES_IN_FLIGHT);
        // Still busy, but a younger Event does not end the catch-up.
        budget.starting(Instant::now());
        assert_eq!(budget.writes_now(10, 100), WRITES_IN_FLIGHT);
        budget.caught_up();
        assert_eq!(budget.writes_now(0, 100), WRITES_WHILE_WORKING);
    }

    #[tokio::test(start_paused = true)]
    async fn a_half_full_queue_ends_the_yield_so_nothing_is_dropped_for_it() {
        let work = WorkGauge::new();
        let mut budget = WorkFirst::new(Some(work.clone()));
        let _out = work.enter();
        assert_eq!(budget.writes_now(49, 100), WRITES_WHILE_WORKING);
        assert_eq!(budget.writes_now(50, 100), WRITES_IN_FLIGHT);
        assert_eq!(
            budget.writes_now(10, 100),
            WRITES_IN_FLIGHT,
            "until caught up"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_finishing_jobs_status_write_is_not_queued_behind_the_finish_events() {
        // The chief's exit, 100 jobs, four workers: each pass publishes the
        // job's Succeeded Event and writes its status at once, as `sync`
        // does. The status writes go first; the Events follow.
        let takes = Duration::from_millis(10);
        let server = Server::fifo(takes);
        let work = WorkGauge::new();
        let (tx, _writer) = start_writer(server.clone(), work.clone(), Vec::new());
        let start = Instant::now();
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let (server, work, tx) = (server.clone(), work.clone(), tx.clone());
                tokio::spawn(async move {
                    for j in (w..100).step_by(4) {
                        let job = format!("job{j}");
                        tx.try_send(event_about(&job, "TFJobSucceeded", "m0"))
                            .unwrap();
                        let _out = work.enter();
                        server.serve(format!("status {job}"), false).await;
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        let statuses_done = Instant::now() - start;
        tokio::time::sleep(Duration::from_secs(10)).await;

        let served = server.served();
        for w in served.iter().filter(|s| !s.event) {
            let ahead = served
                .iter()
                .filter(|e| e.event && e.started >= w.sent && e.started < w.started)
                .count();
            assert!(
                ahead <= WRITES_WHILE_WORKING,
                "{} waited behind {ahead} Event writes",
                w.label
            );
        }
        // 100 status writes and about one Event per round of four (eight
        // at once would have put two Events before each status write).
        assert!(
            statuses_done <= takes * (100 + 100 / 4 + 4),
            "the status writes took {statuses_done:?}"
        );
        assert_all_in_order(&served, 100, 1);
    }
}
