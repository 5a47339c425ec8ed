//! Client-side request rate limiting: client-go's `rest.Config{QPS, Burst}`
//! (`flowcontrol.NewTokenBucketRateLimiter`), as a tower layer under kube's
//! client.
//!
//! Off by default: since controller-runtime v0.21 Go controllers rely on the
//! API server's priority and fairness instead. It exists so a platform team
//! can cap the operator's API traffic, and so benchmarks can match a peer's
//! settings (Kubeflow's training-operator runs at QPS 20 / burst 30).
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

/// Limits every request through the client to `qps` with `burst`.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(TokenBucket::new(qps, burst))),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            reserved: false,
        }
    }
}

/// The rate-limited service: `poll_ready` waits for a token.
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    sleep: Option<Pin<Box<Sleep>>>,
    reserved: bool,
}

impl<S, Req> Service<Req> for RateLimit<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.reserved {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_take(Instant::now());
            match taken {
                Ok(()) => self.reserved = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.reserved = false;
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
}
