//! How many Event writes the server has room for, read from how long they
//! take.
//!
//! The work gauge (`runtime/client/work_gauge.rs`) sees only our own
//! requests. On a busy cluster most of the load the Events would crowd out
//! is someone else's: the kubelets' Pod status writes (KWOK's in the
//! bench), other controllers'. The client sees that load only as time: a
//! write that takes much longer than the fastest recent round trip waited
//! in the server's queue. So the writer narrows to one write out when a
//! write comes back slow, and widens by one for each write that comes back
//! near the baseline — the shape of delay-based congestion control (TCP
//! Vegas). client-go has no counterpart: its recorder's clientset has a
//! fixed QPS.
//!
//! The baseline is the fastest round trip of the last minutes
//! ([`FastestRecent`]) of the Event writes and of the work's requests: the
//! Events of a burst are written late in it, when every write is slow, and
//! the work's first requests saw the server before the burst.
//!
//! Narrowing never stops the Events: one write is always allowed out.
use std::time::Duration;

use super::writer::WRITES_IN_FLIGHT;
use crate::runtime::client::fastest_recent::FastestRecent;

/// A write is slow when it took more than this many times the baseline...
pub const SLOW_TIMES_BASELINE: u32 = 2;
/// ... plus this much: a few milliseconds of jitter on a fast local server
/// are not a queue.
pub const SLOW_SLACK: Duration = Duration::from_millis(5);

/// The Event writes the server has room for (see the module doc).
#[derive(Debug)]
pub(super) struct ServerPace {
    /// The Event writes' fastest recent round trip.
    fastest: FastestRecent,
    /// Writes that may be out.
    width: usize,
}

impl ServerPace {
    /// Full width until a write says otherwise.
    pub(super) fn new() -> Self {
        Self {
            fastest: FastestRecent::default(),
            width: WRITES_IN_FLIGHT,
        }
    }

    /// Writes that may be out now.
    pub(super) fn width(&self) -> usize {
        self.width
    }

    /// A write came back after `took`; `work_fastest` is the work's fastest
    /// recent round trip, if the writer knows the work.
    pub(super) fn landed(&mut self, took: Duration, work_fastest: Option<Duration>) {
        self.fastest.record(took);
        let baseline = self.fastest.get().into_iter().chain(work_fastest).min();
        let slow = baseline.is_some_and(|b| took > b * SLOW_TIMES_BASELINE + SLOW_SLACK);
        self.width = if slow {
            1
        } else {
            (self.width + 1).min(WRITES_IN_FLIGHT)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::client::fastest_recent::WINDOW;

    const FAST: Duration = Duration::from_millis(3);
    const SLOW: Duration = Duration::from_millis(40);

    #[tokio::test(start_paused = true)]
    async fn a_write_much_slower_than_the_fastest_recent_one_narrows_to_one() {
        let mut pace = ServerPace::new();
        assert_eq!(
            pace.width(),
            WRITES_IN_FLIGHT,
            "full width before any write"
        );
        pace.landed(FAST, None);
        pace.landed(FAST * SLOW_TIMES_BASELINE + SLOW_SLACK, None);
        assert_eq!(pace.width(), WRITES_IN_FLIGHT, "at the bound is not slow");
        pace.landed(FAST * SLOW_TIMES_BASELINE + SLOW_SLACK + FAST, None);
        assert_eq!(pace.width(), 1, "over it is");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_back_near_the_baseline_widen_it_one_at_a_time_to_full_width() {
        let mut pace = ServerPace::new();
        pace.landed(FAST, None);
        pace.landed(SLOW, None);
        assert_eq!(pace.width(), 1);
        for want in 2..=WRITES_IN_FLIGHT {
            pace.landed(FAST + Duration::from_millis(2), None);
            assert_eq!(pace.width(), want);
        }
        pace.landed(FAST, None);
        assert_eq!(pace.width(), WRITES_IN_FLIGHT, "never past full width");
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_writes_of_a_burst_are_slow_against_the_work_before_it() {
        let mut pace = ServerPace::new();
        pace.landed(SLOW, None);
        assert_eq!(
            pace.width(),
            WRITES_IN_FLIGHT,
            "alone, the first write is its own baseline"
        );
        pace.landed(SLOW, Some(FAST));
        assert_eq!(pace.width(), 1, "the work saw the server faster");
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_slower_for_good_is_learned_within_the_window() {
        let mut pace = ServerPace::new();
        pace.landed(FAST, None);
        let step = Duration::from_millis(500);
        let mut waited = Duration::ZERO;
        loop {
            tokio::time::advance(step).await;
            waited += step;
            pace.landed(SLOW, None);
            if pace.width() > 1 {
                break;
            }
            assert!(waited <= WINDOW, "still narrow after {waited:?}");
        }
        assert!(waited >= WINDOW * 9 / 10, "learned after only {waited:?}");
    }
}
