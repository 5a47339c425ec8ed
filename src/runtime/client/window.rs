//! How many requests the client sends at once while the API server refuses
//! some with 429: an additive-increase, multiplicative-decrease window that
//! remembers where it was refused, as TCP's congestion window with its
//! slow-start threshold. client-go has no counterpart (its answer is a
//! fixed client-side QPS, `rate_limit.rs` here, off by default as in
//! controller-runtime); this is what lets us rely on API Priority and
//! Fairness instead without collapsing under it.
//!
//! Why: a priority level has a few seats and a short queue; what does not
//! fit is refused with 429, and every refusal makes APF raise the
//! `Retry-After` it asks for (1 s doubling to 32 s). The operator can have
//! dozens of writes in flight (4 workers × `--write-concurrency` 16, plus
//! Events and status writes). Retried as they come (`client/retry_after.rs`),
//! they keep overflowing the queue, and the refused wait out ever longer
//! `Retry-After`s while the level sits idle. The window keeps the number in
//! flight just under what the level accepts:
//!
//! - it starts (and is capped) at [`MAX_IN_FLIGHT`], so it costs nothing
//!   until a 429 arrives;
//! - a 429 halves it, down to what was in flight (at least 1), once per
//!   round: a 429 for a request sent before the last cut does not cut again;
//! - the 429 that cuts also sets the *ceiling*: how many were in flight,
//!   counting it, when the refused request was sent;
//! - every other answer widens it by 1/window, i.e. by one per window's
//!   worth of answers, up to one below the ceiling;
//! - only a probe goes to the ceiling: one request, when the window is full
//!   and [`PROBE_EVERY`] has passed since the last 429 and the last probe.
//!   Answered, it raises the ceiling by one (a level that got more room is
//!   found again, slowly); refused, it cuts as any 429 and the ceiling stays;
//! - after [`FORGET_AFTER`] without a 429 the ceiling is forgotten.
//!
//! Without the ceiling, the window climbs back above the level's room
//! within a fraction of a second of each cut, and each refused request
//! waits out its `Retry-After`. With it, a level that keeps its room
//! refuses about one probe per [`PROBE_EVERY`] (the simulated level in the
//! tests: 12 429s in 60 s, against 160 without the ceiling).
//!
//! One window serves every client of the process (`main.rs` hands the same
//! one to each, `connect::client_builder`): APF gives one identity one
//! priority level, so the clients share its room. With a window each, the
//! three clients (manager, Pod and Service control, Events) narrow apart
//! and together keep overflowing the level's queue. The bench runs that
//! showed each of these are told in `docs/benchmarks.md`, "How this was
//! behind before".
//!
//! A request waits for room before it is sent; its room is given back when
//! the response head arrives (or the request is dropped). Watches (open for
//! minutes) and Lease requests (leader election must not queue behind a
//! burst of creates) do not count and never wait.
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::StatusCode;
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::timeout::is_watch;

/// The window's start and cap: far above what one operator sends at once, so
/// it never limits anything until the server refuses.
pub const MAX_IN_FLIGHT: usize = 1024;

/// How often a full window may send one request to the ceiling. APF moves a
/// level's room when it shares seats out among levels again, every 10 s
/// (`borrowingAdjustmentPeriod` in `apf_controller.go`), and when other
/// flows of the level come and go: probing twice a period finds seats lent
/// to us within one. A refused probe costs one request its `Retry-After`
/// and halves the window for about a dozen answers; once per 5 s of a seat
/// answering ~50 a second, that is a few percent.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// How long without a 429 before the ceiling is forgotten. While demand
/// stays above the ceiling a probe is refused every [`PROBE_EVERY`], so a
/// quiet minute means the demand went away or a dozen probes in a row were
/// answered: the old refusal point says little either way. Forgetting it
/// costs one cut if the room is where it was; keeping it for ever would
/// throttle a cluster that was busy once.
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    /// Bumped on every cut; a request remembers the round it was sent in.
    round: u64,
    /// How many were in flight, counting it, when the request whose 429
    /// made the last cut was sent: the server had no room for that many.
    /// `None` before the first 429 and once forgotten.
    ceiling: Option<usize>,
    last_refused: Instant,
    /// No probe goes out before this.
    next_probe: Instant,
}

impl State {
    /// The most the window may grow to: one below the ceiling (at least 1,
    /// so a request always gets through).
    fn cap(&self, max: f64) -> f64 {
        self.ceiling
            .map_or(max, |c| (c.saturating_sub(1).max(1) as f64).min(max))
    }

    fn forget(&mut self, now: Instant) {
        if now.duration_since(self.last_refused) >= FORGET_AFTER {
            self.ceiling = None;
        }
    }
}

/// The shared window (see the module doc).
#[derive(Debug)]
pub struct Window {
    state: Mutex<State>,
    max: f64,
    freed: Notify,
}

/// How a request through the window ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 429: the server had no room.
    Refused,
    /// Any other response.
    Answered,
    /// No response (a transport error, a deadline, a dropped request).
    Lost,
}

impl Window {
    pub fn new(max: usize) -> Arc<Self> {
        let max = max.max(1) as f64;
        let now = Instant::now();
        Arc::new(Self {
            state: Mutex::new(State {
                limit: max,
                in_flight: 0,
                round: 0,
                ceiling: None,
                last_refused: now,
                next_probe: now,
            }),
            max,
            freed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current window, rounded down (at least 1).
    pub fn limit(&self) -> usize {
        self.lock().limit as usize
    }

    /// Waits for room, then takes it.
    pub async fn enter(self: &Arc<Self>) -> Slot {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a release in between is not missed.
            freed.as_mut().enable();
            {
                let mut state = self.lock();
                let now = Instant::now();
                state.forget(now);
                let room = (state.in_flight as f64) < state.limit.floor().max(1.0);
                // A probe: the window grown to one below the ceiling and
                // full. It is noticed at the next release, which under load
                // comes within a request's time.
                let probe = !room
                    && now >= state.next_probe
                    && state.limit >= state.cap(self.max)
                    && state.ceiling == Some(state.in_flight + 1);
                if room || probe {
                    if probe {
                        state.next_probe = now + PROBE_EVERY;
                    }
                    state.in_flight += 1;
                    return Slot {
                        window: self.clone(),
                        round: state.round,
                        sent_with: state.in_flight,
                        done: false,
                    };
                }
            }
            freed.await;
        }
    }

    fn leave(&self, slot: &Slot, outcome: Outcome) {
        {
            let mut state = self.lock();
            let now = Instant::now();
            state.forget(now);
            let in_flight = state.in_flight;
            state.in_flight = in_flight.saturating_sub(1);
            let this_round = slot.round == state.round;
            match outcome {
                Outcome::Refused => {
                    state.last_refused = now;
                    state.next_probe = now + PROBE_EVERY;
                    if this_round {
                        // A refused probe was sent with the ceiling in
                        // flight: the ceiling stays.
                        state.ceiling = Some(slot.sent_with);
                        let cut = (state.limit.min(in_flight as f64) / 2.0).max(1.0);
                        state.limit = cut.min(state.cap(self.max));
                        state.round += 1;
                    }
                }
                Outcome::Lost => {}
                Outcome::Answered => {
                    // Sent with the ceiling in flight (a probe) and answered:
                    // the level has room for one more than we thought.
                    if this_round && state.ceiling.is_some_and(|c| slot.sent_with >= c) {
                        state.ceiling = Some(slot.sent_with + 1);
                    }
                    let cap = state.cap(self.max);
                    state.limit = (state.limit + 1.0 / state.limit).min(cap);
                }
            }
        }
        self.freed.notify_waiters();
    }
}

/// Room in the window for one request; given back on [`Slot::leave`] or drop.
#[derive(Debug)]
pub struct Slot {
    window: Arc<Window>,
    round: u64,
    /// How many were in flight, counting this one, when it was sent.
    sent_with: usize,
    done: bool,
}

impl Slot {
    pub fn leave(mut self, outcome: Outcome) {
        self.done = true;
        self.window.leave(&self, outcome);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.done {
            self.window.leave(self, Outcome::Lost);
        }
    }
}

/// Whether a request to `uri` goes through the window (see the module doc).
fn counts(uri: &http::Uri) -> bool {
    !is_watch(uri) && !uri.path().starts_with("/apis/coordination.k8s.io/")
}

/// Puts every request (but watches and Leases) through one [`Window`].
#[derive(Clone, Debug)]
pub struct WindowLayer {
    window: Arc<Window>,
}

impl WindowLayer {
    pub fn new(window: Arc<Window>) -> Self {
        Self { window }
    }
}

impl<S> Layer<S> for WindowLayer {
    type Service = Windowed<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Windowed {
            inner,
            window: self.window.clone(),
        }
    }
}

/// The service [`WindowLayer`] makes.
#[derive(Clone, Debug)]
pub struct Windowed<S> {
    inner: S,
    window: Arc<Window>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<http::Request<B>> for Windowed<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if !counts(request.uri()) {
            return Box::pin(self.inner.call(request));
        }
        // The clone that was made ready goes with the request, as tower's
        // buffer-less services do when the call waits before sending.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let window = self.window.clone();
        Box::pin(async move {
            let slot = window.enter().await;
            let result = inner.call(request).await;
            slot.leave(match &result {
                Ok(r) if r.status() == StatusCode::TOO_MANY_REQUESTS => Outcome::Refused,
                Ok(_) => Outcome::Answered,
                Err(_) => Outcome::Lost,
            });
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// Takes room for a request, which must be there now.
    fn enter_now(window: &Arc<Window>) -> Slot {
        window.enter().now_or_never().expect("room in the window")
    }

    /// Sends `n` at once and has the `n`th refused (the others are lost):
    /// the ceiling is `n`, the window `n / 2`.
    fn refused_at(window: &Arc<Window>, n: usize) {
        let mut slots: Vec<Slot> = (0..n).map(|_| enter_now(window)).collect();
        slots.pop().expect("n > 0").leave(Outcome::Refused);
    }

    fn answer(window: &Arc<Window>, times: usize) {
        for _ in 0..times {
            enter_now(window).leave(Outcome::Answered);
        }
    }

    fn ceiling(window: &Window) -> Option<usize> {
        window.lock().ceiling
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_starts_wide_and_a_429_halves_what_was_in_flight() {
        let window = Window::new(64);
        assert_eq!(window.limit(), 64);
        let mut slots: Vec<Slot> = (0..20).map(|_| enter_now(&window)).collect();
        slots.pop().expect("20 slots").leave(Outcome::Refused);
        // 20 were in flight: the window is now 10, and 20 is the ceiling.
        assert_eq!(window.limit(), 10);
        assert_eq!(ceiling(&window), Some(20));
        // Others sent in the same round, refused too, do not cut again.
        for slot in slots.drain(..5) {
            slot.leave(Outcome::Refused);
        }
        assert_eq!(window.limit(), 10);
        assert_eq!(ceiling(&window), Some(20));
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_in_a_later_round_cuts_again_but_never_below_one() {
        let window = Window::new(8);
        for _ in 0..10 {
            enter_now(&window).leave(Outcome::Refused);
        }
        assert_eq!(window.limit(), 1);
        // With a window of 1 a request still gets through.
        answer(&window, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn answers_widen_it_by_one_per_window_of_answers_to_just_under_the_ceiling() {
        let window = Window::new(64);
        refused_at(&window, 16);
        assert_eq!(window.limit(), 8);
        // 8 + 1/8 + 1/8.125 + ...: nine answers to the next whole one.
        answer(&window, 8);
        assert_eq!(window.limit(), 8);
        answer(&window, 1);
        assert_eq!(window.limit(), 9);
        answer(&window, 1_000);
        assert_eq!(window.limit(), 15, "the window reached the ceiling");
        // Full at 15, a 16th waits: no probe before PROBE_EVERY.
        let held: Vec<Slot> = (0..15).map(|_| enter_now(&window)).collect();
        assert!(window.enter().now_or_never().is_none());
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_per_probe_every_and_an_answered_probe_raises_the_ceiling() {
        let window = Window::new(64);
        refused_at(&window, 16);
        answer(&window, 1_000);
        let held: Vec<Slot> = (0..15).map(|_| enter_now(&window)).collect();
        tokio::time::advance(PROBE_EVERY - Duration::from_millis(1)).await;
        assert!(window.enter().now_or_never().is_none(), "a probe too early");
        tokio::time::advance(Duration::from_millis(1)).await;
        let probe = window.enter().now_or_never().expect("a probe is due");
        assert!(window.enter().now_or_never().is_none(), "a second probe");
        probe.leave(Outcome::Answered);
        assert_eq!(ceiling(&window), Some(17));
        drop(held);
        // The window may now grow to 16, not to 17.
        answer(&window, 1_000);
        assert_eq!(window.limit(), 16);
    }

    #[tokio::test(start_paused = true)]
    async fn no_probe_while_the_window_is_still_cut() {
        let window = Window::new(64);
        let mut slots: Vec<Slot> = (0..16).map(|_| enter_now(&window)).collect();
        slots.pop().expect("16 slots").leave(Outcome::Refused);
        // 15 still in flight (slow answers), the window 8, the ceiling 16.
        tokio::time::advance(PROBE_EVERY).await;
        assert!(window.enter().now_or_never().is_none(), "a probe at 16");
        drop(slots);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_probe_cuts_and_keeps_the_ceiling() {
        let window = Window::new(64);
        refused_at(&window, 16);
        answer(&window, 1_000);
        let held: Vec<Slot> = (0..15).map(|_| enter_now(&window)).collect();
        tokio::time::advance(PROBE_EVERY).await;
        enter_now(&window).leave(Outcome::Refused);
        assert_eq!(ceiling(&window), Some(16));
        // 16 were in flight and the window was 15: half of 15.
        assert_eq!(window.limit(), 7);
        drop(held);
        // The next probe is PROBE_EVERY after the refusal, not sooner.
        answer(&window, 1_000);
        let held: Vec<Slot> = (0..15).map(|_| enter_now(&window)).collect();
        tokio::time::advance(PROBE_EVERY - Duration::from_millis(1)).await;
        assert!(window.enter().now_or_never().is_none(), "a probe too early");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(window.enter().now_or_never().is_some(), "no probe when due");
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_quiet_minute_the_ceiling_is_forgotten() {
        let window = Window::new(64);
        refused_at(&window, 16);
        tokio::time::advance(FORGET_AFTER - Duration::from_secs(1)).await;
        answer(&window, 1_000);
        assert_eq!(window.limit(), 15);
        tokio::time::advance(Duration::from_secs(1)).await;
        // From 15 to 64 at one per window of answers: about 2,000.
        answer(&window, 2_500);
        assert_eq!(ceiling(&window), None);
        assert_eq!(window.limit(), 64, "the window grows to its cap again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_window_holds_a_request_until_one_leaves() {
        let window = Window::new(4);
        let first = window.enter().await;
        first.leave(Outcome::Refused); // 1 was in flight: the window is 1
        let held = window.enter().await;
        let waiting = tokio::spawn({
            let window = window.clone();
            async move { window.enter().await }
        });
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(
            !waiting.is_finished(),
            "a second request got in past a window of 1"
        );
        drop(held); // lost: gives the room back without widening
        let next = tokio::time::timeout(std::time::Duration::from_secs(1), waiting)
            .await
            .expect("the waiting request got in once the room was given back")
            .expect("the task");
        next.leave(Outcome::Answered);
    }

    #[test]
    fn watches_and_leases_do_not_wait() {
        let uri = |s: &str| s.parse::<http::Uri>().expect("a URI");
        assert!(counts(&uri("/api/v1/namespaces/a/pods")));
        assert!(counts(&uri(
            "/apis/kubeflow.org/v1/namespaces/a/tfjobs/j/status"
        )));
        assert!(!counts(&uri("/api/v1/pods?watch=true&resourceVersion=1")));
        assert!(!counts(&uri(
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/tfjob-operator-leader"
        )));
    }

    /// A priority level as APF runs one: `room` requests at once (its seats
    /// and its queue), served one at a time by a single seat; a request that
    /// finds no room is refused at once.
    struct Level {
        room: usize,
        admitted: Mutex<usize>,
        seat: tokio::sync::Mutex<()>,
    }

    impl Level {
        async fn send(&self) -> Outcome {
            {
                let mut admitted = self.admitted.lock().expect("not poisoned");
                if *admitted >= self.room {
                    return Outcome::Refused;
                }
                *admitted += 1;
            }
            {
                let _seat = self.seat.lock().await;
                tokio::time::sleep(SERVICE).await;
            }
            *self.admitted.lock().expect("not poisoned") -= 1;
            Outcome::Answered
        }
    }

    /// How long the seat takes per request: 50 a second at most.
    const SERVICE: Duration = Duration::from_millis(20);

    /// Drives `senders` loops of requests through `window` into a level of
    /// `room` for `run` of tokio time; a refused request waits APF's
    /// shortest `Retry-After` (1 s) before it is sent again, as
    /// `retry_after.rs` does. Returns (429s, answers), counted after the first
    /// `warm_up` (the first burst is refused whatever the window does: it
    /// starts wide).
    async fn simulate(
        window: &Arc<Window>,
        room: usize,
        senders: usize,
        warm_up: Duration,
        run: Duration,
    ) -> (usize, usize) {
        let level = Arc::new(Level {
            room,
            admitted: Mutex::new(0),
            seat: tokio::sync::Mutex::new(()),
        });
        let start = Instant::now();
        let counted = Arc::new(Mutex::new((0, 0)));
        let loops = (0..senders).map(|_| {
            let (window, level, counted) = (window.clone(), level.clone(), counted.clone());
            tokio::spawn(async move {
                while start.elapsed() < warm_up + run {
                    let slot = window.enter().await;
                    let outcome = level.send().await;
                    slot.leave(outcome);
                    if start.elapsed() >= warm_up {
                        let mut counted = counted.lock().expect("not poisoned");
                        match outcome {
                            Outcome::Refused => counted.0 += 1,
                            _ => counted.1 += 1,
                        }
                    }
                    if outcome == Outcome::Refused {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            })
        });
        for done in futures::future::join_all(loops).await {
            done.expect("a sender");
        }
        let (refused, answered) = *counted.lock().expect("not poisoned");
        (refused, answered)
    }

    #[tokio::test(start_paused = true)]
    async fn against_a_level_of_fixed_room_429s_are_rare_and_the_seat_stays_busy() {
        let window = Window::new(MAX_IN_FLIGHT);
        let run = Duration::from_secs(60);
        // One seat and a queue of 5, as the bench's APF peers get, and 64
        // writers, as 4 workers × `--write-concurrency` 16.
        let (refused, answered) = simulate(&window, 6, 64, Duration::from_secs(2), run).await;
        println!("{refused} 429s and {answered} answers in {run:?}");
        // A refused probe per PROBE_EVERY, and a few more. Without the
        // ceiling this level refused 160 in the minute.
        let bound = (run.as_secs() / PROBE_EVERY.as_secs()) as usize + 3;
        assert!(refused <= bound, "{refused} 429s in {run:?}");
        // And the seat stays busy: 97% of its 50 a second.
        assert!(answered >= 2_900, "{answered} answers in {run:?}");
    }
}
