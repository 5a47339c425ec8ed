//! Work queues in the shape of client-go's `util/workqueue`. Chapter:
//! `docs/06-workqueue.md`.
//!
//! Layered like client-go: [`Queue`](queue::Queue) (dedup, no concurrent
//! processing) → [`DelayingQueue`](delaying::DelayingQueue) (`add_after`) →
//! [`RateLimitingQueue`](rate_limiting::RateLimitingQueue)
//! (`add_rate_limited`, `forget`), with the per-key backoff in
//! [`rate_limiter`]. Controllers use the last one, keyed by
//! [`ObjectKey`](crate::runtime::cache::key::ObjectKey).
//!
//! Queues carry keys, never objects, and never know what a key means.

pub mod delaying;
pub mod metrics;
pub mod queue;
pub mod rate_limiter;
pub mod rate_limiting;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod test_support {
    use std::time::Duration;

    /// Advances paused time and lets the delaying queue's timer task run.
    pub(super) async fn advance(d: Duration) {
        tokio::time::advance(d).await;
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }
}
