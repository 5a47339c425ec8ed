//! Client-side request rate limiting: client-go's `rest.Config{QPS, Burst}`
//! (`flowcontrol.NewTokenBucketRateLimiter`), as a tower layer under kube's
//! client.
//!
//! Off by default: since controller-runtime v0.21 Go controllers rely on the
//! API server's priority and fairness instead. It exists so a platform team
//! can cap the operator's API traffic, and so benchmarks can match a peer's
//! settings (Kubeflow's training-operator runs at QPS 20 / burst 30).
//!
//! Like client-go, the limit is per client ([`ClientRateLimits`]): the
//! operator has three (the manager's, Pod and Service control, the event
//! recorder), each with its own bucket, as training-operator's manager
//! client, its PodControl/ServiceControl clientset and its event
//! broadcaster's clientset each have one. A total cap shared by all three
//! is a separate, optional bucket.
//!
//! It never drops or fails a request: a request without a token waits.
//!
//! The client's other layers are listed in [`super`].
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: qps.max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes a token, or says how long until one is available.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// Limits every request through the client to `qps` with `burst`; or, built
/// with [`Self::and`], to several buckets at once (a request waits for a
/// token of each); or to nothing ([`Self::unlimited`]).
#[derive(Clone, Debug, Default)]
pub struct RateLimitLayer {
    buckets: Vec<Arc<Mutex<TokenBucket>>>,
}

impl RateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            buckets: vec![Arc::new(Mutex::new(TokenBucket::new(qps, burst)))],
        }
    }

    /// Lets every request through at once.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// Limited by this layer's buckets and by `other`'s, which stay shared
    /// with every client `other` limits (a client's own limit under a total).
    pub fn and(mut self, other: &RateLimitLayer) -> Self {
        self.buckets.extend(other.buckets.iter().cloned());
        self
    }
}

/// What `--kube-api-qps`/`--kube-api-burst` and the optional total cap
/// (`--kube-api-qps-total`/`--kube-api-burst-total`) mean: client-go gives
/// each REST client its own token bucket, so the flags limit each of the
/// operator's clients (the manager's, Pod and Service control, the event
/// recorder), not their sum; the total, when set, is one bucket all of them
/// share.
#[derive(Clone, Debug)]
pub struct ClientRateLimits {
    per_client: Option<(f64, u32)>,
    total: RateLimitLayer,
}

impl ClientRateLimits {
    /// `qps` 0 turns a limit off.
    pub fn new(qps: f64, burst: u32, total_qps: f64, total_burst: u32) -> Self {
        Self {
            per_client: (qps > 0.0).then_some((qps, burst)),
            total: if total_qps > 0.0 {
                RateLimitLayer::new(total_qps, total_burst)
            } else {
                RateLimitLayer::unlimited()
            },
        }
    }

    /// The layer for one more client: a bucket of its own (new on every
    /// call) under the shared total.
    pub fn for_client(&self) -> RateLimitLayer {
        let own = match self.per_client {
            Some((qps, burst)) => RateLimitLayer::new(qps, burst),
            None => RateLimitLayer::unlimited(),
        };
        own.and(&self.total)
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            buckets: self.buckets.clone(),
            sleep: None,
            reserved: 0,
        }
    }
}

/// The rate-limited service: `poll_ready` waits for a token of each bucket,
/// in order, keeping those it has while it waits for the next.
pub struct RateLimit<S> {
    inner: S,
    buckets: Vec<Arc<Mutex<TokenBucket>>>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// How many buckets (from the first) have given this request a token.
    reserved: usize,
}

impl<S, Req> Service<Req> for RateLimit<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while let Some(bucket) = self.buckets.get(self.reserved) {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let taken = bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_take(Instant::now());
            match taken {
                Ok(()) => self.reserved += 1,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.reserved = 0;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_is_free_then_requests_are_paced_at_qps() {
        let mut b = TokenBucket::new(10.0, 3);
        let now = Instant::now();
        for _ in 0..3 {
            assert!(b.try_take(now).is_ok());
        }
        let wait = b.try_take(now).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        assert!(b.try_take(now + Duration::from_millis(100)).is_ok());
        assert!(b.try_take(now + Duration::from_millis(150)).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn the_service_waits_for_a_token_instead_of_failing() {
        let layer = RateLimitLayer::new(2.0, 1);
        let mut svc = layer.layer(tower::service_fn(|x: u32| async move { Ok::<_, ()>(x) }));
        let start = Instant::now();
        for i in 0..3 {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            assert_eq!(svc.call(i).await, Ok(i));
        }
        // One token at once, then two more at 2 per second.
        assert_eq!(Instant::now() - start, Duration::from_secs(1));
    }

    /// Sends `n` requests one after another through `layer`; the time they took.
    async fn send(layer: &RateLimitLayer, n: u32) -> Duration {
        let mut svc = layer.layer(tower::service_fn(|x: u32| async move { Ok::<_, ()>(x) }));
        let start = Instant::now();
        for i in 0..n {
            std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
            assert_eq!(svc.call(i).await, Ok(i));
        }
        Instant::now() - start
    }

    #[tokio::test(start_paused = true)]
    async fn each_client_has_a_bucket_of_its_own_as_in_client_go() {
        let limits = ClientRateLimits::new(2.0, 1, 0.0, 0);
        let (manager, children, events) = (
            limits.for_client(),
            limits.for_client(),
            limits.for_client(),
        );
        // 3 requests each, at once: 1 s each (1 at once, 2 at 2/s), not
        // the 4 s one shared bucket would take for 9.
        let (a, b, c) = tokio::join!(send(&manager, 3), send(&children, 3), send(&events, 3));
        assert_eq!([a, b, c], [Duration::from_secs(1); 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_total_cap_is_one_bucket_all_clients_share() {
        let limits = ClientRateLimits::new(2.0, 1, 2.0, 1);
        let (a, b) = (limits.for_client(), limits.for_client());
        // 6 requests through a 2/s total with burst 1: the last at 2.5 s,
        // however they are spread over the clients.
        let (ta, tb) = tokio::join!(send(&a, 3), send(&b, 3));
        let last = ta.max(tb);
        // (Timers round up to the millisecond.)
        assert!(
            last >= Duration::from_millis(2500) && last <= Duration::from_millis(2510),
            "{last:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_lets_everything_through_at_once() {
        let limits = ClientRateLimits::new(0.0, 30, 0.0, 30);
        assert_eq!(send(&limits.for_client(), 100).await, Duration::ZERO);
    }
}
