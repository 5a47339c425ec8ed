//! The work in flight that Events yield to: a count of the requests the
//! work clients (the manager's, Pod and Service control) have out, and when
//! the last one came back.
//!
//! client-go has no counterpart: its event broadcaster writes on a clientset
//! of its own under a client-side QPS, and that QPS is what keeps its Events
//! from crowding the API server. Ours has no client-side limit by default,
//! so on a saturated server every Event write takes a request's worth of the
//! server from a create or a status write. The event writer
//! (`events/writer.rs`) reads this gauge to write its Events after the work,
//! not in front of it.
//!
//! Work counts as busy while a request is out and for [`LINGER`] after the
//! last one came back: a reconcile's writes come in runs with short gaps
//! (the next worker's pass, the next round of creates), and a gap must not
//! let a full round of Events in ahead of the next run. Watches (open for
//! minutes) and Lease requests (leader election's, which move no job) do
//! not count. The gauge never delays a request. It also keeps the fastest
//! work round trip of the last minutes ([`FastestRecent`]): the server's
//! time without a queue, which the writer compares its own writes with.
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::fastest_recent::FastestRecent;
use super::timeout::is_watch;

/// How long work counts as busy after its last request came back.
pub const LINGER: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct State {
    in_flight: usize,
    /// When the last request came back (the gauge's start before any).
    last_back: Instant,
    /// The fastest work round trip of the last minutes.
    fastest: FastestRecent,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Told when the last request in flight comes back.
    idle: Notify,
}

/// Work requests in flight, shared by the clients that count into it and
/// the event writer that reads it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WorkGauge {
    shared: Arc<Shared>,
}

impl Default for WorkGauge {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkGauge {
    /// A gauge with nothing in flight, quiet from the start.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    in_flight: 0,
                    last_back: Instant::now() - LINGER,
                    fastest: FastestRecent::default(),
                }),
                idle: Notify::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one request out until the guard is dropped.
    pub fn enter(&self) -> WorkGuard {
        self.lock().in_flight += 1;
        WorkGuard {
            gauge: self.clone(),
            since: Instant::now(),
        }
    }

    /// The fastest work round trip of the last
    /// [`WINDOW`](super::fastest_recent::WINDOW), if any came back.
    pub fn fastest_recent(&self) -> Option<Duration> {
        self.lock().fastest.get()
    }

    /// Whether work is out now, or came back less than [`LINGER`] ago.
    pub fn busy(&self) -> bool {
        let state = self.lock();
        state.in_flight > 0 || Instant::now() < state.last_back + LINGER
    }

    /// Returns once no work has been out for [`LINGER`].
    pub async fn quiet(&self) {
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            // Registered before looking, so a return in between is not missed.
            idle.as_mut().enable();
            let (in_flight, quiet_at) = {
                let state = self.lock();
                (state.in_flight, state.last_back + LINGER)
            };
            if in_flight > 0 {
                idle.await;
            } else if Instant::now() < quiet_at {
                tokio::time::sleep_until(quiet_at).await;
            } else {
                return;
            }
        }
    }

    fn back(&self, since: Instant) {
        let last = {
            let mut state = self.lock();
            state.fastest.record(since.elapsed());
            state.in_flight = state.in_flight.saturating_sub(1);
            state.last_back = Instant::now();
            state.in_flight == 0
        };
        if last {
            self.shared.idle.notify_waiters();
        }
    }
}

/// One work request out; counted back when dropped.
#[derive(Debug)]
pub struct WorkGuard {
    gauge: WorkGauge,
    since: Instant,
}

impl Drop for WorkGuard {
    fn drop(&mut self) {
        self.gauge.back(self.since);
    }
}

/// Whether a request to `uri` is work (see the module doc).
fn counts(uri: &http::Uri) -> bool {
    !is_watch(uri) && !uri.path().starts_with("/apis/coordination.k8s.io/")
}

/// Counts every request of a work client (but watches and Leases) into a
/// [`WorkGauge`] until its response head arrives.
#[derive(Clone, Debug)]
pub struct WorkGaugeLayer {
    gauge: WorkGauge,
}

impl WorkGaugeLayer {
    pub fn new(gauge: WorkGauge) -> Self {
        Self { gauge }
    }
}

impl<S> Layer<S> for WorkGaugeLayer {
    type Service = Gauged<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Gauged {
            inner,
            gauge: self.gauge.clone(),
        }
    }
}

/// The service [`WorkGaugeLayer`] makes.
#[derive(Clone, Debug)]
pub struct Gauged<S> {
    inner: S,
    gauge: WorkGauge,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> Service<http::Request<B>> for Gauged<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // Counted from the call, not the first poll: work is out (or
        // waiting to go out) as soon as a client was asked to send it.
        let guard = counts(request.uri()).then(|| self.gauge.enter());
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            drop(guard);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test(start_paused = true)]
    async fn work_is_busy_while_out_and_for_the_linger_after() {
        let gauge = WorkGauge::new();
        assert!(!gauge.busy(), "quiet from the start");
        let first = gauge.enter();
        let second = gauge.enter();
        drop(first);
        assert!(gauge.busy(), "one still out");
        drop(second);
        assert!(gauge.busy(), "just came back");
        tokio::time::advance(LINGER).await;
        assert!(!gauge.busy());
    }

    #[tokio::test(start_paused = true)]
    async fn quiet_waits_for_the_last_request_and_the_linger() {
        let gauge = WorkGauge::new();
        assert!(gauge.quiet().now_or_never().is_some(), "quiet already");
        let out = gauge.enter();
        let start = Instant::now();
        let waiter = tokio::spawn({
            let gauge = gauge.clone();
            async move {
                gauge.quiet().await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(out);
        let quiet_at = waiter.await.unwrap();
        assert_eq!(quiet_at - start, Duration::from_secs(1) + LINGER);
    }

    #[tokio::test(start_paused = true)]
    async fn a_work_clients_request_counts_from_its_call_until_its_answer() {
        let gauge = WorkGauge::new();
        let (answer, answered) = tokio::sync::oneshot::channel::<()>();
        let answered = std::sync::Mutex::new(Some(answered));
        let server = tower::service_fn(move |request: http::Request<()>| {
            // The create waits for `answer`; anything else is answered at once.
            let wait = (!is_watch(request.uri()))
                .then(|| answered.lock().unwrap().take())
                .flatten();
            async move {
                if let Some(wait) = wait {
                    let _ = wait.await;
                }
                Ok::<_, std::convert::Infallible>(http::Response::new(()))
            }
        });
        let mut client = WorkGaugeLayer::new(gauge.clone()).layer(server);
        let request = |uri: &str| http::Request::get(uri).body(()).unwrap();

        let watch = client.call(request("/api/v1/pods?watch=true"));
        tokio::time::advance(LINGER).await;
        assert!(!gauge.busy(), "a watch is not work");
        drop(watch);
        let create = client.call(request("/api/v1/namespaces/a/pods"));
        assert!(gauge.busy(), "counted before it is sent");
        let pending = tokio::spawn(create);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(gauge.busy(), "out until answered");
        answer.send(()).unwrap();
        pending.await.unwrap().unwrap();
        tokio::time::advance(LINGER).await;
        assert!(!gauge.busy());
    }

    #[test]
    fn watches_and_leases_are_not_work() {
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        assert!(counts(&uri("/api/v1/namespaces/a/pods")));
        assert!(counts(&uri(
            "/apis/kubeflow.org/v1/namespaces/a/tfjobs/j/status"
        )));
        assert!(!counts(&uri("/api/v1/pods?watch=true")));
        assert!(!counts(&uri(
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"
        )));
    }
}
