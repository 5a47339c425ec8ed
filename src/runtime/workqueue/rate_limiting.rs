//! The queue controllers use: delaying queue + rate limiter.
//!
//! Mirrors client-go `util/workqueue/rate_limiting_queue.go`:
//! `add_rate_limited` asks the limiter how long the key must wait and adds it
//! after that delay; `forget` clears the key's failure history once it
//! succeeds. This is the one type the controller and the event handlers share.
//!
//! It must never decide policy itself (that is the limiter's job) nor block:
//! every method but `get` and `shut_down_with_drain` returns at once.
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::delaying::DelayingQueue;
use super::metrics::{QueueMetrics, WorkqueueMetrics};
use super::queue::Get;
use super::rate_limiter::{RateLimiter, default_controller_rate_limiter};
use crate::runtime::metrics::SharedMetrics;

/// A rate-limited, delaying work queue. A cheap `Clone` handle.
pub struct RateLimitingQueue<T> {
    delaying: DelayingQueue<T>,
    limiter: Arc<dyn RateLimiter<T>>,
    metrics: Option<QueueMetrics>,
}

impl<T> Clone for RateLimitingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            delaying: self.delaying.clone(),
            limiter: Arc::clone(&self.limiter),
            metrics: self.metrics.clone(),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync + 'static> RateLimitingQueue<T> {
    /// A queue with `limiter` and no metrics.
    pub fn new(limiter: impl RateLimiter<T>) -> Self {
        Self::build(Arc::new(limiter), None)
    }

    /// A queue with client-go's default controller limiter and no metrics.
    pub fn with_default_limiter() -> Self {
        Self::new(default_controller_rate_limiter())
    }

    /// A queue whose `workqueue_*` metrics, labelled `name=<name>`, are
    /// registered in `registry`.
    pub fn with_metrics(
        name: &str,
        limiter: impl RateLimiter<T>,
        registry: &SharedMetrics,
    ) -> Self {
        let metrics = WorkqueueMetrics::register(registry).queue(name);
        Self::build(Arc::new(limiter), Some(metrics))
    }

    fn build(limiter: Arc<dyn RateLimiter<T>>, metrics: Option<QueueMetrics>) -> Self {
        Self {
            delaying: DelayingQueue::with_metrics(metrics.clone()),
            limiter,
            metrics,
        }
    }

    /// Adds `item` now (a no-op if it is already pending).
    pub fn add(&self, item: T) {
        self.delaying.queue().add(item);
    }

    /// Adds `item` now, cloning it only if it is not already pending.
    pub fn add_ref(&self, item: &T) {
        self.delaying.queue().add_ref(item);
    }

    /// Adds `item` after `delay`; the earlier time wins if it is already waiting.
    pub fn add_after(&self, item: T, delay: Duration) {
        self.delaying.add_after(item, delay);
    }

    /// Adds `item` after the delay the rate limiter chooses (counts a retry).
    pub fn add_rate_limited(&self, item: T) {
        if self.is_shutting_down() {
            return;
        }
        if let Some(m) = &self.metrics {
            m.retry();
        }
        let delay = self.limiter.when(&item);
        self.delaying.add_after(item, delay);
    }

    /// Waits for the next key; `None` once shut down. Call [`done`](Self::done) after.
    pub fn get(&self) -> Get<'_, T> {
        self.delaying.queue().get()
    }

    /// Marks `item` finished; a copy added meanwhile is handed out now.
    pub fn done(&self, item: &T) {
        self.delaying.queue().done(item);
    }

    /// Clears `item`'s failure history (it will not back off any more).
    pub fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }

    /// How many times `item` was rate-limited since it was last forgotten.
    pub fn num_requeues(&self, item: &T) -> u32 {
        self.limiter.num_requeues(item)
    }

    /// Keys ready to hand out (not counting delayed or in-flight ones).
    pub fn len(&self) -> usize {
        self.delaying.queue().len()
    }

    /// True when no key is ready to hand out.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for their delay to pass.
    pub fn waiting(&self) -> usize {
        self.delaying.waiting()
    }

    /// Keys currently held by workers.
    pub fn processing(&self) -> usize {
        self.delaying.queue().processing()
    }

    /// True once shut down.
    pub fn is_shutting_down(&self) -> bool {
        self.delaying.queue().is_shutting_down()
    }

    /// Stops at once: adds are ignored, delayed keys dropped, `get` returns `None`.
    pub fn shut_down(&self) {
        self.delaying.shut_down();
    }

    /// Stops like [`shut_down`](Self::shut_down), then waits for in-flight keys.
    pub async fn shut_down_with_drain(&self) {
        self.delaying.shut_down_with_drain().await;
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::advance;
    use super::*;
    use crate::runtime::metrics::testing::{encode, new_registry};
    use crate::runtime::workqueue::rate_limiter::ItemExponentialFailure;

    #[tokio::test(start_paused = true)]
    async fn rate_limited_adds_back_off_exponentially_until_forgotten() {
        let q = RateLimitingQueue::new(ItemExponentialFailure::new(
            Duration::from_secs(1),
            Duration::from_secs(60),
        ));
        q.add_rate_limited("k");
        advance(Duration::from_millis(999)).await;
        assert_eq!(q.len(), 0);
        advance(Duration::from_millis(1)).await;
        assert_eq!(q.len(), 1, "first retry after 1 s");
        let k = q.get().await.unwrap_or_default();
        q.add_rate_limited(k);
        q.done(&k);
        advance(Duration::from_millis(1_999)).await;
        assert_eq!(q.len(), 0);
        advance(Duration::from_millis(1)).await;
        assert_eq!(q.len(), 1, "second retry after 2 s");
        assert_eq!(q.num_requeues(&"k"), 2);
        q.forget(&"k");
        assert_eq!(q.num_requeues(&"k"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_and_add_rate_limited_share_the_earlier_deadline() {
        let q = RateLimitingQueue::new(ItemExponentialFailure::new(
            Duration::from_secs(10),
            Duration::from_secs(60),
        ));
        q.add_after(1, Duration::from_secs(3));
        q.add_rate_limited(1);
        advance(Duration::from_secs(3)).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test]
    async fn retries_are_counted_under_the_queue_name() {
        let registry = new_registry();
        let q = RateLimitingQueue::with_metrics(
            "tfjob",
            crate::runtime::workqueue::rate_limiter::default_controller_rate_limiter(),
            &registry,
        );
        q.add_rate_limited("a".to_owned());
        q.add_rate_limited("a".to_owned());
        assert!(
            encode(&registry)
                .contains("workqueue_retries_total{controller=\"tfjob\",name=\"tfjob\"} 2\n")
        );
        q.shut_down();
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_drops_delayed_keys_and_waits_for_in_flight() {
        let q = RateLimitingQueue::with_default_limiter();
        q.add("a");
        q.add_after("b", Duration::from_secs(1));
        let a = q.get().await;
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shut_down_with_drain().await }
        });
        // Let the drain start (and shut the queue) before "b" is due.
        tokio::task::yield_now().await;
        advance(Duration::from_secs(2)).await;
        assert!(!drain.is_finished());
        assert_eq!(q.waiting(), 0);
        assert_eq!(q.len(), 0, "a delayed key arrived after shutdown");
        q.done(&"a");
        advance(Duration::from_millis(1)).await;
        assert!(drain.is_finished());
        assert_eq!(a, Some("a"));
    }
}
