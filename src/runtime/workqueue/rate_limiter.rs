//! Rate limiters: how long a failed key waits before its next try.
//!
//! Mirrors client-go `util/workqueue/default_rate_limiters.go`. The default
//! controller limiter is the larger of two answers: a per-key exponential
//! backoff (5 ms · 2ⁿ, capped at 1000 s), so one broken object backs off on
//! its own, and an overall token bucket (10 qps, burst 100), so a mass failure
//! cannot hammer the API server.
//!
//! Limiters are pluggable through [`RateLimiter`]. They must never sleep: they
//! only say how long to wait, and the delaying queue does the waiting.
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Decides the delay before a failed key is retried.
pub trait RateLimiter<T>: Send + Sync + 'static {
    /// The delay before `item` may be retried; records one more failure.
    fn when(&self, item: &T) -> Duration;
    /// Forgets `item`'s failures (it succeeded, or is given up on).
    fn forget(&self, item: &T);
    /// How many times `item` has failed since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

/// A boxed limiter is a limiter (so builders can store any choice).
impl<T: 'static> RateLimiter<T> for Box<dyn RateLimiter<T>> {
    fn when(&self, item: &T) -> Duration {
        (**self).when(item)
    }
    fn forget(&self, item: &T) {
        (**self).forget(item);
    }
    fn num_requeues(&self, item: &T) -> u32 {
        (**self).num_requeues(item)
    }
}

fn lock<S>(m: &Mutex<S>) -> MutexGuard<'_, S> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Per-key exponential backoff: `base · 2ⁿ` after n failures, capped at `max`.
pub struct ItemExponentialFailure<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T> ItemExponentialFailure<T> {
    /// Backoff starting at `base` and never longer than `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> RateLimiter<T> for ItemExponentialFailure<T> {
    fn when(&self, item: &T) -> Duration {
        let exp = {
            let mut failures = lock(&self.failures);
            match failures.get_mut(item) {
                Some(n) => {
                    let exp = *n;
                    *n = n.saturating_add(1);
                    exp
                }
                None => {
                    failures.insert(item.clone(), 1);
                    0
                }
            }
        };
        // 2^exp overflows long before it matters; anything that large is the cap.
        2u32.checked_pow(exp)
            .and_then(|factor| self.base.checked_mul(factor))
            .map_or(self.max, |d| d.min(self.max))
    }

    fn forget(&self, item: &T) {
        lock(&self.failures).remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        lock(&self.failures).get(item).copied().unwrap_or(0)
    }
}

/// An overall token bucket: `qps` tokens a second, at most `burst` saved up.
///
/// Like `golang.org/x/time/rate`'s `Reserve().Delay()`: every call takes a
/// token, going into debt if needed, and the debt is the delay. Keys are not
/// tracked, so `forget` and `num_requeues` do nothing.
pub struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

struct BucketState {
    tokens: f64,
    last: Option<Instant>,
}

impl Bucket {
    /// A full bucket of `burst` tokens refilled at `qps`.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst),
            state: Mutex::new(BucketState {
                tokens: f64::from(burst),
                last: None,
            }),
        }
    }
}

impl<T> RateLimiter<T> for Bucket {
    fn when(&self, _item: &T) -> Duration {
        let now = Instant::now();
        let mut st = lock(&self.state);
        if let Some(last) = st.last {
            let refill = (now - last).as_secs_f64() * self.qps;
            st.tokens = (st.tokens + refill).min(self.burst);
        }
        st.last = Some(now);
        st.tokens -= 1.0;
        if st.tokens >= 0.0 || self.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-st.tokens / self.qps)
        }
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// The strictest of several limiters: the longest delay, the most requeues.
pub struct MaxOf<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOf<T> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        Self { limiters }
    }
}

impl<T: 'static> RateLimiter<T> for MaxOf<T> {
    fn when(&self, item: &T) -> Duration {
        // Every limiter must see the failure, so no short-circuiting.
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, item: &T) {
        self.limiters.iter().for_each(|l| l.forget(item));
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// client-go's `DefaultControllerRateLimiter`: the larger of per-key
/// exponential backoff (5 ms → 1000 s) and an overall 10 qps / burst 100 bucket.
pub fn default_controller_rate_limiter<T: Clone + Eq + Hash + Send + Sync + 'static>() -> MaxOf<T> {
    MaxOf::new(vec![
        Box::new(ItemExponentialFailure::new(
            Duration::from_millis(5),
            Duration::from_secs(1000),
        )),
        Box::new(Bucket::new(10.0, 100)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_failure_doubles_from_base_and_stops_at_the_cap() {
        let l = ItemExponentialFailure::new(Duration::from_millis(5), Duration::from_secs(1000));
        let delays: Vec<_> = (0..4).map(|_| l.when(&"a")).collect();
        assert_eq!(delays, [5, 10, 20, 40].map(Duration::from_millis).to_vec());
        for _ in 0..100 {
            l.when(&"a");
        }
        assert_eq!(l.when(&"a"), Duration::from_secs(1000));
        assert_eq!(l.num_requeues(&"a"), 105);
    }

    #[test]
    fn exponential_failure_counts_each_key_separately_and_forgets() {
        let l = ItemExponentialFailure::new(Duration::from_millis(1), Duration::from_secs(1));
        l.when(&"a");
        l.when(&"a");
        assert_eq!(l.when(&"b"), Duration::from_millis(1));
        assert_eq!(l.num_requeues(&"a"), 2);
        l.forget(&"a");
        assert_eq!(l.num_requeues(&"a"), 0);
        assert_eq!(l.when(&"a"), Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_the_burst_then_spaces_calls_at_its_rate() {
        let b = Bucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(RateLimiter::<&str>::when(&b, &"x"), Duration::ZERO);
        }
        assert_eq!(
            RateLimiter::<&str>::when(&b, &"x"),
            Duration::from_millis(100)
        );
        assert_eq!(
            RateLimiter::<&str>::when(&b, &"x"),
            Duration::from_millis(200)
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        // 10 tokens refilled, capped at the burst of 3, minus the debt of 2.
        assert_eq!(RateLimiter::<&str>::when(&b, &"x"), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn default_limiter_is_per_key_until_the_bucket_runs_dry() {
        let l = default_controller_rate_limiter::<u32>();
        assert_eq!(l.when(&1), Duration::from_millis(5));
        assert_eq!(l.when(&1), Duration::from_millis(10));
        assert_eq!(l.num_requeues(&1), 2);
        // 98 more tokens, then the bucket adds 100 ms per call.
        for k in 2..100 {
            l.when(&k);
        }
        assert_eq!(l.when(&500), Duration::from_millis(100));
        l.forget(&1);
        assert_eq!(l.num_requeues(&1), 0);
    }
}
