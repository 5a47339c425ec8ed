//! How many requests the client sends at once while the API server refuses
//! some with 429: an additive-increase, multiplicative-decrease window, as
//! TCP's congestion window. client-go has no counterpart (its answer is a
//! fixed client-side QPS, `rate_limit.rs` here, off by default as in
//! controller-runtime); this is what lets us rely on API Priority and
//! Fairness instead without collapsing under it.
//!
//! Why: a priority level has a few seats and a short queue; what does not
//! fit is refused with 429, and every refusal makes APF raise the
//! `Retry-After` it asks for (1 s doubling to 32 s). The operator can have
//! dozens of writes in flight (4 workers × `--write-concurrency` 16, plus
//! Events and status writes). Retried as they come (`client/retry_after.rs`),
//! they keep overflowing the queue: measured on the bench with one seat and a
//! queue of 5, ours managed ~6 requests/s against training-operator's 41.
//! The window keeps the number in flight near what the level accepts:
//!
//! - it starts (and is capped) at [`MAX_IN_FLIGHT`], so it costs nothing
//!   until a 429 arrives;
//! - a 429 halves it, down to what was in flight (at least 1), once per
//!   round: a 429 for a request sent before the last cut does not cut again;
//! - every other answer widens it by 1/window, i.e. by one per window's
//!   worth of answers.
//!
//! One window serves every client of the process (`main.rs` hands the same
//! one to each, `connect::client_builder`): APF gives one identity one
//! priority level, so the clients share its room. With a window each, the
//! three clients (manager, Pod and Service control, Events) narrowed apart
//! and together kept overflowing the level's queue: on 2026-11-27, at
//! per-client QPS 20 under one seat and a queue of 5, ours drew 277 429s in
//! its first bench run, where training-operator drew none.
//!
//! A request waits for room before it is sent; its room is given back when
//! the response head arrives (or the request is dropped). Watches (open for
//! minutes) and Lease requests (leader election must not queue behind a
//! burst of creates) do not count and never wait.
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::StatusCode;
use tokio::sync::Notify;
use tower::{Layer, Service};

use super::timeout::is_watch;

/// The window's start and cap: far above what one operator sends at once, so
/// it never limits anything until the server refuses.
pub const MAX_IN_FLIGHT: usize = 1024;

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    /// Bumped on every cut; a request remembers the round it was sent in.
    round: u64,
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
        Arc::new(Self {
            state: Mutex::new(State {
                limit: max,
                in_flight: 0,
                round: 0,
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
                if (state.in_flight as f64) < state.limit.floor().max(1.0) {
                    state.in_flight += 1;
                    return Slot {
                        window: self.clone(),
                        round: state.round,
                        done: false,
                    };
                }
            }
            freed.await;
        }
    }

    fn leave(&self, round: u64, outcome: Outcome) {
        {
            let mut state = self.lock();
            let in_flight = state.in_flight;
            state.in_flight = in_flight.saturating_sub(1);
            match outcome {
                Outcome::Refused if round == state.round => {
                    state.limit = (state.limit.min(in_flight as f64) / 2.0).max(1.0);
                    state.round += 1;
                }
                Outcome::Refused | Outcome::Lost => {}
                Outcome::Answered => {
                    state.limit = (state.limit + 1.0 / state.limit).min(self.max);
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
    done: bool,
}

impl Slot {
    pub fn leave(mut self, outcome: Outcome) {
        self.done = true;
        self.window.leave(self.round, outcome);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.done {
            self.window.leave(self.round, Outcome::Lost);
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

    #[tokio::test]
    async fn the_window_starts_wide_and_a_429_halves_what_was_in_flight() {
        let window = Window::new(64);
        assert_eq!(window.limit(), 64);
        let slots: Vec<Slot> = futures::future::join_all((0..20).map(|_| window.enter())).await;
        let mut slots = slots.into_iter();
        slots.next().expect("20 slots").leave(Outcome::Refused);
        // 20 were in flight: the window is now 10.
        assert_eq!(window.limit(), 10);
        // Others sent in the same round, refused too, do not cut again.
        for slot in slots.by_ref().take(5) {
            slot.leave(Outcome::Refused);
        }
        assert_eq!(window.limit(), 10);
        drop(slots);
    }

    #[tokio::test]
    async fn a_429_in_a_later_round_cuts_again_but_never_below_one() {
        let window = Window::new(8);
        for _ in 0..10 {
            let slot = window.enter().await;
            slot.leave(Outcome::Refused);
        }
        assert_eq!(window.limit(), 1);
        // With a window of 1 a request still gets through.
        let slot = window.enter().await;
        slot.leave(Outcome::Answered);
    }

    #[tokio::test]
    async fn answers_widen_it_by_one_per_window_of_answers_up_to_the_cap() {
        let window = Window::new(8);
        let first = window.enter().await;
        first.leave(Outcome::Refused); // 1 in flight: down to 1
        assert_eq!(window.limit(), 1);
        let slot = window.enter().await;
        slot.leave(Outcome::Answered);
        assert_eq!(window.limit(), 2);
        // 2 + 1/2 + 1/2.5 + 1/2.9: three answers to the next whole one.
        for _ in 0..3 {
            window.enter().await.leave(Outcome::Answered);
        }
        assert_eq!(window.limit(), 3);
        for _ in 0..200 {
            window.enter().await.leave(Outcome::Answered);
        }
        assert_eq!(window.limit(), 8);
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
}
