//! The reflector's retry delay: jittered exponential backoff with a reset.
//!
//! Mirrors client-go's `wait.NewExponentialBackoffManager(800ms, 30s, 2m,
//! 2.0, 1.0)` used by `reflector.go`: the delay doubles from 0.8 s up to 30 s,
//! each wait is stretched by a random factor in [1, 2) so many reflectors
//! failing together do not retry in lockstep, and after 2 minutes without a
//! failure the next failure starts again from 0.8 s.
//!
//! It never sleeps itself; the reflector decides when to wait.
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// Jittered exponential backoff with a reset after a healthy period.
#[derive(Debug)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    reset_after: Duration,
    /// Un-jittered delay of the last failure, if the backoff is "hot".
    current: Option<Duration>,
    last_failure: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration, reset_after: Duration) -> Self {
        Self {
            initial,
            max,
            reset_after,
            current: None,
            last_failure: None,
        }
    }

    /// The delay before retrying after a failure happening now.
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last_failure
            .is_some_and(|last| now.duration_since(last) > self.reset_after)
        {
            self.current = None;
        }
        let base = match self.current {
            None => self.initial,
            Some(d) => (d * 2).min(self.max),
        };
        self.current = Some(base);
        self.last_failure = Some(now);
        base.mul_f64(1.0 + rand::rng().random::<f64>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base_of(delay: Duration, base_ms: u64) -> bool {
        let base = Duration::from_millis(base_ms);
        delay >= base && delay < base * 2
    }

    #[tokio::test(start_paused = true)]
    async fn delay_doubles_from_800ms_and_caps_at_30s() {
        let mut b = Backoff::default();
        for expected_ms in [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000] {
            let d = b.next_delay();
            assert!(
                base_of(d, expected_ms),
                "{d:?} not in [{expected_ms}ms, 2x)"
            );
            tokio::time::advance(Duration::from_secs(1)).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn two_healthy_minutes_reset_the_delay() {
        let mut b = Backoff::default();
        for _ in 0..5 {
            b.next_delay();
        }
        tokio::time::advance(Duration::from_secs(121)).await;
        assert!(base_of(b.next_delay(), 800));
    }
}
