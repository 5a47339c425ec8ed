//! Work queues in the shape of client-go's `util/workqueue`.
//!
//! Layered like client-go: [`Queue`] (dedup, no concurrent processing) →
//! [`DelayingQueue`] (`add_after`) → [`RateLimitingQueue`] (`add_rate_limited`,
//! `forget`). Controllers use the last one, keyed by
//! [`ObjectKey`](crate::runtime::ObjectKey).
//!
//! Queues carry keys, never objects, and never know what a key means.

pub mod delaying;
pub mod metrics;
#[cfg(test)]
mod model_tests;
pub mod queue;
pub mod rate_limiter;
pub mod rate_limiting;

pub use delaying::DelayingQueue;
pub use metrics::WorkqueueMetrics;
pub use queue::{Get, Queue};
pub use rate_limiter::{
    Bucket, ItemExponentialFailure, MaxOf, RateLimiter, default_controller_rate_limiter,
};
pub use rate_limiting::RateLimitingQueue;

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
