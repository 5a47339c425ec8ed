//! The fastest round trip of the last few minutes: what a request's time is
//! compared with to tell that it waited in a queue at the server (the Event
//! writer's pace, `events/server_pace.rs`).
//!
//! A minimum, because the fastest request is the one that found no queue; of
//! the last [`WINDOW`] only, so a server that became slower for good (a
//! bigger cluster, a farther network) is learned within minutes, while a
//! burst shorter than that is measured against the server before it.
use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// How far back the fastest round trip is remembered.
pub const WINDOW: Duration = Duration::from_secs(300);
/// The window is kept as this many minima, each over a tenth of it.
const SLICES: u32 = 10;

/// The fastest round trip of the last [`WINDOW`].
#[derive(Debug, Default)]
pub struct FastestRecent {
    /// (when the slice began, its fastest), oldest first.
    slices: VecDeque<(Instant, Duration)>,
}

impl FastestRecent {
    /// A round trip of `took` came back now.
    pub fn record(&mut self, took: Duration) {
        let now = Instant::now();
        match self.slices.back_mut() {
            Some((began, fastest)) if now < *began + WINDOW / SLICES => {
                *fastest = (*fastest).min(took);
            }
            _ => self.slices.push_back((now, took)),
        }
        while self
            .slices
            .front()
            .is_some_and(|(began, _)| now >= *began + WINDOW)
        {
            self.slices.pop_front();
        }
    }

    /// The fastest round trip of the last [`WINDOW`], if any came back.
    pub fn get(&self) -> Option<Duration> {
        let now = Instant::now();
        self.slices
            .iter()
            .filter(|(began, _)| now < *began + WINDOW)
            .map(|(_, fastest)| *fastest)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn the_fastest_of_the_window_is_kept_through_slower_ones() {
        let mut fastest = FastestRecent::default();
        assert_eq!(fastest.get(), None, "nothing before the first");
        fastest.record(3 * MS);
        for _ in 0..1000 {
            tokio::time::advance(100 * MS).await;
            fastest.record(40 * MS);
        }
        assert_eq!(fastest.get(), Some(3 * MS), "100 s of slow ones later");
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_trip_older_than_the_window_is_forgotten() {
        let mut fastest = FastestRecent::default();
        fastest.record(3 * MS);
        tokio::time::advance(WINDOW / 2).await;
        fastest.record(40 * MS);
        tokio::time::advance(WINDOW / 2 + MS).await;
        assert_eq!(fastest.get(), Some(40 * MS), "the fast one left the window");
        tokio::time::advance(WINDOW).await;
        assert_eq!(fastest.get(), None, "and then the slow one");
    }
}
