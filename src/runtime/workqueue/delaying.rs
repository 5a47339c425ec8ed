//! A work queue that can also add a key after a delay.
//!
//! Mirrors client-go `util/workqueue/delaying_queue.go`: waiting keys sit in a
//! min-heap ordered by ready time, and one timer task moves them into the
//! queue when they are due. A key waiting twice keeps the **earlier** time
//! (client-go's `waitingEntryByData`), so a requeue-after never postpones a
//! sooner retry.
//!
//! Instead of client-go's channel plus heartbeat, `add_after` pushes onto the
//! heap under a short lock and wakes the timer only when the new key became
//! the earliest. The timer task is spawned on the first delayed add, so a
//! queue can be built outside a runtime, and it stops on shutdown or when the
//! last handle is dropped.
//!
//! This module must never hand a key out early, nor keep a dropped queue's
//! task alive.
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hashbrown::HashMap;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics::QueueMetrics;
use super::queue::Queue;

/// A key waiting for its time. Ordered by (time, arrival) only.
struct Waiting<T> {
    at: Instant,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Waiting<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<T> Eq for Waiting<T> {}
impl<T> PartialOrd for Waiting<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Waiting<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

struct TimerState<T> {
    /// May hold stale entries (a key later moved to an earlier time); an entry
    /// counts only if it matches `ready_at`. Cheaper than re-heapifying.
    heap: BinaryHeap<Reverse<Waiting<T>>>,
    /// The one time each waiting key is due.
    ready_at: HashMap<T, Instant>,
    seq: u64,
    spawned: bool,
    stopped: bool,
}

struct Timer<T> {
    state: Mutex<TimerState<T>>,
    /// Wakes the timer task: an earlier deadline arrived, or stop.
    wake: Notify,
}

impl<T> Timer<T> {
    fn lock(&self) -> MutexGuard<'_, TimerState<T>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn stop(&self) {
        let mut st = self.lock();
        st.stopped = true;
        st.heap.clear();
        st.ready_at.clear();
        drop(st);
        self.wake.notify_one();
    }
}

/// Dropped with the last [`DelayingQueue`] handle: stops the timer task.
struct TimerOwner<T>(Arc<Timer<T>>);

impl<T> Drop for TimerOwner<T> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// A [`Queue`] plus `add_after`. A cheap `Clone` handle.
pub struct DelayingQueue<T> {
    queue: Queue<T>,
    timer: Arc<TimerOwner<T>>,
}

impl<T> Clone for DelayingQueue<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            timer: Arc::clone(&self.timer),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> Default for DelayingQueue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> DelayingQueue<T> {
    /// A delaying queue without metrics.
    pub fn new() -> Self {
        Self::with_metrics(None)
    }

    pub(super) fn with_metrics(metrics: Option<QueueMetrics>) -> Self {
        Self {
            queue: Queue::with_metrics(metrics),
            timer: Arc::new(TimerOwner(Arc::new(Timer {
                state: Mutex::new(TimerState {
                    heap: BinaryHeap::new(),
                    ready_at: HashMap::new(),
                    seq: 0,
                    spawned: false,
                    stopped: false,
                }),
                wake: Notify::new(),
            }))),
        }
    }

    /// The underlying queue (add / get / done / shutdown).
    pub fn queue(&self) -> &Queue<T> {
        &self.queue
    }

    /// Adds `item` once `delay` has passed (at once if `delay` is zero). If the
    /// key is already waiting, the earlier of the two times wins.
    ///
    /// The first delayed add spawns the timer task, so it must run inside a
    /// tokio runtime.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            self.queue.add(item);
            return;
        }
        let timer = &self.timer.0;
        let at = Instant::now() + delay;
        let mut st = timer.lock();
        if st.stopped {
            return;
        }
        match st.ready_at.get_mut(&item) {
            Some(due) if *due <= at => return,
            Some(due) => *due = at,
            None => {
                st.ready_at.insert(item.clone(), at);
            }
        }
        let earliest = st.heap.peek().is_none_or(|Reverse(w)| at < w.at);
        st.seq += 1;
        let seq = st.seq;
        st.heap.push(Reverse(Waiting { at, seq, item }));
        let spawn = !st.spawned;
        st.spawned = true;
        drop(st);
        if spawn {
            tokio::spawn(run_timer(Arc::clone(timer), self.queue.clone()));
        } else if earliest {
            timer.wake.notify_one();
        }
    }

    /// Number of keys waiting for their time (not yet in the queue).
    pub fn waiting(&self) -> usize {
        self.timer.0.lock().ready_at.len()
    }

    /// Stops the timer (waiting keys are dropped) and shuts the queue down.
    pub fn shut_down(&self) {
        self.timer.0.stop();
        self.queue.shut_down();
    }

    /// Stops the timer and shuts the queue down, waiting for in-flight keys.
    pub async fn shut_down_with_drain(&self) {
        self.timer.0.stop();
        self.queue.shut_down_with_drain().await;
    }
}

/// The single timer task: moves due keys into the queue, sleeps until the next.
async fn run_timer<T: Clone + Eq + Hash + Send + 'static>(timer: Arc<Timer<T>>, queue: Queue<T>) {
    let mut due = Vec::new();
    loop {
        let notified = pin!(timer.wake.notified());
        let mut notified = notified;
        // Registered before reading the heap, so a new earliest key added
        // after the read still wakes us.
        notified.as_mut().enable();
        let next = {
            let mut st = timer.lock();
            if st.stopped {
                return;
            }
            let now = Instant::now();
            while let Some(Reverse(top)) = st.heap.peek() {
                if top.at > now {
                    break;
                }
                let Some(Reverse(w)) = st.heap.pop() else {
                    break;
                };
                // Skip stale entries: the key was moved to an earlier time.
                if st.ready_at.get(&w.item) == Some(&w.at) {
                    st.ready_at.remove(&w.item);
                    due.push(w.item);
                }
            }
            st.heap.peek().map(|Reverse(w)| w.at)
        };
        if !due.is_empty() {
            queue.add_all(due.drain(..));
        }
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = &mut notified => {}
                }
            }
            None => notified.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::advance;
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_arrives_exactly_when_due() {
        let q = DelayingQueue::new();
        q.add_after("a", Duration::from_secs(10));
        advance(Duration::from_millis(9_999)).await;
        assert_eq!(q.queue().len(), 0, "handed out early");
        assert_eq!(q.waiting(), 1);
        advance(Duration::from_millis(1)).await;
        assert_eq!(q.queue().len(), 1);
        assert_eq!(q.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_earlier_of_two_waits_wins_in_either_order() {
        let q = DelayingQueue::new();
        q.add_after("late-then-early", Duration::from_secs(10));
        q.add_after("late-then-early", Duration::from_secs(1));
        q.add_after("early-then-late", Duration::from_secs(1));
        q.add_after("early-then-late", Duration::from_secs(10));
        advance(Duration::from_secs(1)).await;
        assert_eq!(q.queue().len(), 2);
        assert_eq!(q.waiting(), 0, "the later wait must be forgotten");
        for _ in 0..2 {
            let k = q.queue().get().await;
            q.queue().done(&k.unwrap_or_default());
        }
        advance(Duration::from_secs(20)).await;
        assert_eq!(q.queue().len(), 0, "a stale wait fired a second time");
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_earliest_key_wakes_the_sleeping_timer() {
        let q = DelayingQueue::new();
        q.add_after(1, Duration::from_secs(100));
        advance(Duration::from_millis(1)).await;
        q.add_after(2, Duration::from_secs(1));
        advance(Duration::from_secs(1)).await;
        assert_eq!(q.queue().get().await, Some(2));
        assert_eq!(q.waiting(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_due_together_keep_their_order() {
        let q = DelayingQueue::new();
        q.add_after("b", Duration::from_secs(2));
        q.add_after("a", Duration::from_secs(1));
        q.add_after("c", Duration::from_secs(2));
        advance(Duration::from_secs(2)).await;
        assert_eq!(q.queue().get().await, Some("a"));
        assert_eq!(q.queue().get().await, Some("b"));
        assert_eq!(q.queue().get().await, Some("c"));
    }

    #[tokio::test]
    async fn zero_delay_adds_at_once_without_a_timer() {
        let q = DelayingQueue::new();
        q.add_after("now", Duration::ZERO);
        assert_eq!(q.queue().len(), 1);
        assert!(!q.timer.0.lock().spawned);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_drops_waiting_keys_and_ignores_new_ones() {
        let q = DelayingQueue::new();
        q.add_after("a", Duration::from_secs(1));
        q.shut_down();
        q.add_after("b", Duration::from_secs(1));
        advance(Duration::from_secs(5)).await;
        assert_eq!(q.waiting(), 0);
        assert_eq!(q.queue().len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_last_handle_stops_the_timer_task() {
        let metrics = tokio::runtime::Handle::current().metrics();
        let before = metrics.num_alive_tasks();
        let q = DelayingQueue::new();
        q.add_after("a", Duration::from_secs(60));
        tokio::task::yield_now().await;
        assert_eq!(metrics.num_alive_tasks(), before + 1);
        let clone = q.clone();
        drop(q);
        advance(Duration::from_millis(1)).await;
        assert_eq!(metrics.num_alive_tasks(), before + 1, "a clone still lives");
        drop(clone);
        advance(Duration::from_millis(1)).await;
        assert_eq!(metrics.num_alive_tasks(), before);
    }
}
