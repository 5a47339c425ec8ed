//! The basic work queue: a FIFO of keys with client-go's two guarantees.
//!
//! Mirrors client-go `util/workqueue/queue.go`. The two guarantees are what make
//! a controller correct with many workers:
//!
//! - a key is **pending at most once**: adding a key that is already waiting
//!   does nothing, so a burst of events for one object costs one reconcile;
//! - a key is **never processed by two workers at once**: a key re-added while
//!   a worker holds it is only marked dirty, and handed out again after `done`.
//!
//! client-go keeps a `queue`, a `dirty` set and a `processing` set. We keep
//! one slot per known key (its state: dirty / processing) in a slab, a hash
//! index from key to slot, and a FIFO of slot numbers. A full add → get → done
//! cycle then hashes the key twice (add, done), clones it once (get returns
//! it), and allocates nothing once the slab and FIFO have grown.
//!
//! client-go's `Get` waits on a `sync.Cond`. Ours is a future: a `get` that
//! finds nothing lists its task's waker in `State::sleepers`, under the same
//! lock, and each key made ready takes one sleeper off that list and wakes
//! it (`cond.Signal`). Keeping the list ourselves, rather than in a
//! `tokio::sync::Notify`, means a wake-up touches no lock but ours, and only
//! workers that are really asleep are woken (1.2x the hot-key throughput).
//!
//! One mutex guards the state. When it is contended, a thread backs off
//! (spins on its own core, without touching the lock, for doubling spells)
//! instead of taking turns with the holder call by call: on two cores that
//! turn-taking, not the work, is what a hot queue spends its time on. See
//! `Shared::lock`.
//!
//! Deliberate difference from client-go: after shutdown `get()` returns `None`
//! at once, even if keys are still queued (client-go keeps handing them out).
//! A shutting-down controller should finish what is in flight and start nothing
//! new; the next leader rebuilds the queue from its initial list anyway.
//!
//! This module must never sleep or spawn: delays live in `delaying.rs`.
use std::collections::VecDeque;
use std::future::Future;
use std::hash::{BuildHasher, Hash};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use hashbrown::{DefaultHashBuilder, HashTable};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics::{QueueMetrics, UnfinishedWork};

/// What the queue knows about one key that is pending, processing, or both.
struct Slot<T> {
    item: T,
    /// Kept so growing the index never re-hashes keys.
    hash: u64,
    /// Waiting to be handed out (in `State::queue`, or due there after `done`).
    dirty: bool,
    /// Held by a worker between `get` and `done`.
    processing: bool,
}

/// A slot's timestamps, kept beside the slots only when metrics are on: a
/// slot without them is 24 bytes instead of 56, which matters when a queue
/// holds a million keys.
#[derive(Default)]
struct Times {
    /// When the pending copy was added.
    added_at: Option<Instant>,
    /// When the current worker took it.
    started_at: Option<Instant>,
}

struct State<T> {
    /// Slots ready to hand out, in arrival order; each is dirty, not processing.
    queue: VecDeque<usize>,
    /// Every key the queue knows; `None` marks a free slot (listed in `free`).
    slots: Vec<Option<Slot<T>>>,
    /// `times[i]` belongs to `slots[i]`; empty when metrics are off.
    times: Vec<Times>,
    free: Vec<usize>,
    /// Key → slot number.
    index: HashTable<usize>,
    processing: usize,
    /// Workers asleep in `get`, oldest first. A key made ready takes one out
    /// and wakes it (client-go's `cond.Signal`); a worker woken but not yet
    /// running is no longer listed, so the next key wakes another.
    sleepers: VecDeque<Sleeper>,
    next_sleeper: u64,
    shutting_down: bool,
    /// `shut_down_with_drain` is waiting for `processing` to reach zero.
    draining: bool,
}

/// A worker asleep in `get`: the waker of its task, and the id its `Get`
/// future knows it by (to leave the list when it is dropped).
struct Sleeper {
    id: u64,
    waker: Waker,
}

impl<T> State<T> {
    /// Takes the longest-sleeping worker off the list, to wake once the lock
    /// is released.
    fn wake_one(&mut self) -> Option<Waker> {
        self.sleepers.pop_front().map(|s| s.waker)
    }

    /// Takes `id` off the list; false if it was already taken (woken).
    fn unlist(&mut self, id: u64) -> bool {
        let at = self.sleepers.iter().position(|s| s.id == id);
        at.and_then(|at| self.sleepers.remove(at)).is_some()
    }
}

impl<T: Eq + Hash> State<T> {
    /// Slot `i`'s timestamps (metrics on only), growing the list as needed.
    fn times(&mut self, i: usize) -> &mut Times {
        if self.times.len() <= i {
            self.times.resize_with(i + 1, Times::default);
        }
        &mut self.times[i]
    }

    /// The slot holding `item`, if the queue knows it.
    fn find(&self, hash: u64, item: &T) -> Option<usize> {
        let slots = &self.slots;
        self.index.find(hash, |&i| slot_is(slots, i, item)).copied()
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut Slot<T>> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }
}

fn slot_is<T: Eq>(slots: &[Option<Slot<T>>], i: usize, item: &T) -> bool {
    matches!(slots.get(i), Some(Some(s)) if s.item == *item)
}

/// How a thread that finds the queue's lock taken waits before trying
/// again, in `spin_loop` hints (the CPU's PAUSE), doubling each time: first
/// a few short spins, for a holder about to unlock (the sections under the
/// lock are tens of nanoseconds); then a real back-off. One hint is 25 ns on
/// the project's machine (an AMD EPYC), so a contended call spins at most
/// ~100 µs there before it waits in the mutex itself.
const BACKOFF_PAUSES: [u32; 7] = [2, 4, 8, 256, 512, 1024, 2048];

impl<T> Shared<T> {
    /// Takes the queue's lock: parking_lot's mutex, which does not poison (a
    /// panic under this lock cannot leave the state half-updated in a way
    /// that matters more than stopping the controller would).
    ///
    /// Uncontended, that is one atomic operation. Contended, this is a
    /// classic exponential back-off lock: between tries the thread spins on
    /// its own core *without reading the lock*. The sections under this
    /// lock are tens of nanoseconds, but every one of them moves the queue's
    /// cache lines to the core that runs it, and on two cores two threads
    /// taking turns spend most of their time moving lines (one core alone
    /// runs the hot-key benchmark faster than two). Backing off lets the
    /// holder's core run a batch of calls with the lines in its cache.
    /// Polling the lock word instead (`is_locked`) pulls its line back on
    /// every read; parking at once (parking_lot's own spin-then-park) costs
    /// the holder a futex wake on unlock. The variants measured against
    /// each other are in `docs/benchmarks.md`, "Hot keys: where the bound
    /// is, and the back-off lock". After the last back-off the thread queues in the mutex, which parks
    /// it and is fair after 0.5 ms. Never sleeps, and never blocks the
    /// thread in a system call while the lock is free.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        if let Some(st) = self.state.try_lock() {
            return st;
        }
        for pauses in BACKOFF_PAUSES {
            (0..pauses).for_each(|_| std::hint::spin_loop());
            if let Some(st) = self.state.try_lock() {
                return st;
            }
        }
        self.state.lock()
    }
}

/// A value alone on its 64-byte cache line: written or read by one core, it
/// does not pull its neighbours' lines back and forth between cores.
#[repr(align(64))]
struct CacheLine<T>(T);

pub(super) struct Shared<T> {
    state: Mutex<State<T>>,
    /// Outside the lock: keys are hashed before taking it, to keep the
    /// critical section short when many producers add hot keys. On a cache
    /// line of its own, so reading it never waits for the lock's line.
    hasher: CacheLine<DefaultHashBuilder>,
    /// Wakes `shut_down_with_drain` when the last in-flight key is done.
    drained: Notify,
    metrics: Option<QueueMetrics>,
}

/// A FIFO work queue with client-go's dedup and no-concurrent-processing rules.
///
/// A cheap `Clone` handle: all clones share one queue.
pub struct Queue<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone + Eq + Hash + Send + 'static> Queue<T> {
    /// A queue without metrics.
    pub fn new() -> Self {
        Self::with_metrics(None)
    }

    pub(super) fn with_metrics(metrics: Option<QueueMetrics>) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                slots: Vec::new(),
                times: Vec::new(),
                free: Vec::new(),
                index: HashTable::new(),
                processing: 0,
                sleepers: VecDeque::new(),
                next_sleeper: 0,
                shutting_down: false,
                draining: false,
            }),
            hasher: CacheLine(DefaultHashBuilder::default()),
            drained: Notify::new(),
            metrics,
        });
        if let Some(m) = &shared.metrics {
            // The collector holds a Weak, so a dropped queue simply vanishes from /metrics.
            let weak = Arc::downgrade(&shared);
            m.track_unfinished(weak);
        }
        Self { shared }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.shared.lock()
    }

    /// Marks `item` as needing processing. Ignored after shutdown, and a no-op
    /// if the key is already pending.
    pub fn add(&self, item: T) {
        self.add_item(Item::Owned(item));
    }

    /// Like [`add`](Self::add), but clones the key only if the queue does not
    /// already hold it: a burst of events for a pending key allocates nothing.
    pub fn add_ref(&self, item: &T) {
        self.add_item(Item::Borrowed(item));
    }

    fn add_item(&self, item: Item<'_, T>) {
        let now = self.shared.metrics.as_ref().map(|_| Instant::now());
        let hash = self.shared.hasher.0.hash_one(item.get());
        let mut st = self.lock();
        if st.shutting_down {
            return;
        }
        let added = add_locked(&mut st, item, hash, now);
        let wake = if added == Added::Ready {
            st.wake_one()
        } else {
            None
        };
        drop(st);
        if added != Added::No
            && let Some(m) = &self.shared.metrics
        {
            m.added();
        }
        if let Some(w) = wake {
            w.wake();
        }
    }

    /// Adds many items under one lock (used by the delaying queue's timer).
    pub(super) fn add_all(&self, items: impl Iterator<Item = T>) {
        let now = self.shared.metrics.as_ref().map(|_| Instant::now());
        let mut st = self.lock();
        if st.shutting_down {
            return;
        }
        let (mut counted, mut wake) = (0, Vec::new());
        for item in items {
            // Rare path (the delaying queue's timer): hashing under the lock is fine.
            let hash = self.shared.hasher.0.hash_one(&item);
            match add_locked(&mut st, Item::Owned(item), hash, now) {
                Added::No => {}
                Added::Dirty => counted += 1,
                Added::Ready => {
                    counted += 1;
                    wake.extend(st.wake_one());
                }
            }
        }
        drop(st);
        if let Some(m) = &self.shared.metrics {
            (0..counted).for_each(|_| m.added());
        }
        wake.into_iter().for_each(Waker::wake);
    }

    /// Waits for the next key and marks it as processing. The caller must call
    /// [`done`](Self::done) with it. Returns `None` once the queue is shut down.
    ///
    /// Cancel-safe: dropping the future before it resolves loses no key.
    pub fn get(&self) -> Get<'_, T> {
        Get {
            shared: &self.shared,
            asleep: None,
        }
    }

    /// Marks `item` as finished. If it was added again meanwhile, it is queued
    /// now (and only now), so no two workers ever hold the same key.
    pub fn done(&self, item: &T) {
        let track = self.shared.metrics.is_some();
        let now = track.then(Instant::now);
        let hash = self.shared.hasher.0.hash_one(item);
        let mut guard = self.lock();
        let st = &mut *guard;
        let slots = &mut st.slots;
        let Ok(entry) = st.index.find_entry(hash, |&i| slot_is(slots, i, item)) else {
            return;
        };
        let i = *entry.get();
        let Some(slot) = slots.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        if !slot.processing {
            return;
        }
        slot.processing = false;
        let requeue = slot.dirty;
        // A freed key is dropped after unlocking: its reference count is
        // another cache line, and the lock is held by nobody meanwhile.
        let mut freed = None;
        if requeue {
            st.queue.push_back(i);
        } else {
            entry.remove();
            freed = slots[i].take();
            st.free.push(i);
        }
        st.processing -= 1;
        let worked_for = match now {
            Some(now) => st.times(i).started_at.take().map(|start| now - start),
            None => None,
        };
        let drained = st.draining && st.processing == 0;
        let wake = if requeue { st.wake_one() } else { None };
        drop(guard);
        drop(freed);
        if let (Some(m), Some(d)) = (&self.shared.metrics, worked_for) {
            m.done(d);
        }
        if let Some(w) = wake {
            w.wake();
        }
        if drained {
            self.shared.drained.notify_waiters();
        }
    }

    /// Number of keys waiting to be handed out (not counting those in flight).
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// True when no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of keys currently held by workers.
    pub fn processing(&self) -> usize {
        self.lock().processing
    }

    /// True once `shut_down` or `shut_down_with_drain` was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().shutting_down
    }

    /// Stops the queue: new adds are ignored and every `get` returns `None`.
    /// Also releases anyone waiting in `shut_down_with_drain`.
    pub fn shut_down(&self) {
        let mut st = self.lock();
        st.shutting_down = true;
        st.draining = false;
        let sleepers = std::mem::take(&mut st.sleepers);
        drop(st);
        sleepers.into_iter().for_each(|s| s.waker.wake());
        self.shared.drained.notify_waiters();
    }

    /// Like [`shut_down`](Self::shut_down), then waits until every key handed
    /// out has been marked `done`: in-flight work finishes, nothing new starts.
    pub async fn shut_down_with_drain(&self) {
        let sleepers = {
            let mut st = self.lock();
            st.shutting_down = true;
            st.draining = true;
            std::mem::take(&mut st.sleepers)
        };
        sleepers.into_iter().for_each(|s| s.waker.wake());
        loop {
            let notified = pin!(self.shared.drained.notified());
            let mut notified = notified;
            notified.as_mut().enable();
            {
                let st = self.lock();
                if st.processing == 0 || !st.draining {
                    return;
                }
            }
            notified.await;
        }
    }
}

/// The future [`Queue::get`] returns.
///
/// Takes a key if one is ready; otherwise lists its task's waker in
/// `State::sleepers`, under the same lock, so an add either comes before the
/// check (and its key is taken) or after the listing (and wakes this task).
pub struct Get<'a, T> {
    shared: &'a Shared<T>,
    /// Our id in `State::sleepers` while we sleep (or were woken and have
    /// not run yet).
    asleep: Option<u64>,
}

impl<T: Clone + Eq + Hash> Future for Get<'_, T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let this = self.get_mut();
        let mut st = this.shared.lock();
        let listed_at = this
            .asleep
            .and_then(|id| st.sleepers.iter().position(|s| s.id == id));
        if st.shutting_down {
            this.asleep = None;
            return Poll::Ready(None);
        }
        let Some(i) = st.queue.pop_front() else {
            match listed_at {
                // Polled again while still asleep: keep our place.
                Some(at) => {
                    let listed = &mut st.sleepers[at].waker;
                    if !listed.will_wake(cx.waker()) {
                        listed.clone_from(cx.waker());
                    }
                }
                // First time, or woken for a key another worker took first.
                None => {
                    st.next_sleeper += 1;
                    let id = st.next_sleeper;
                    let waker = cx.waker().clone();
                    st.sleepers.push_back(Sleeper { id, waker });
                    this.asleep = Some(id);
                }
            }
            return Poll::Pending;
        };
        if let Some(at) = listed_at {
            st.sleepers.remove(at);
        }
        this.asleep = None;
        let track = this.shared.metrics.is_some();
        let now = track.then(Instant::now);
        // Every queued slot is occupied; an empty one would be a bug.
        let Some(slot) = st.slot_mut(i) else {
            return Poll::Ready(None);
        };
        slot.dirty = false;
        slot.processing = true;
        let item = slot.item.clone();
        st.processing += 1;
        let mut queued_for = None;
        if let Some(now) = now {
            let times = st.times(i);
            queued_for = times.added_at.take().map(|added| now - added);
            times.started_at = Some(now);
        }
        drop(st);
        if let Some(m) = &this.shared.metrics {
            m.got(queued_for);
        }
        Poll::Ready(Some(item))
    }
}

impl<T> Drop for Get<'_, T> {
    /// A `get` cancelled while asleep leaves the list. One that was woken
    /// and dropped before running passes the wake-up on, so the key it was
    /// woken for is not left waiting for the next add.
    fn drop(&mut self) {
        let Some(id) = self.asleep else {
            return;
        };
        let mut st = self.shared.lock();
        let pass_on = if !st.unlist(id) && !st.queue.is_empty() {
            st.wake_one()
        } else {
            None
        };
        drop(st);
        if let Some(w) = pass_on {
            w.wake();
        }
    }
}

/// What an add did, which decides what is counted and who is woken.
#[derive(Debug, PartialEq, Eq)]
enum Added {
    /// Already pending: nothing changes.
    No,
    /// Being processed: marked dirty, handed out again after `done`.
    Dirty,
    /// Queued now: wake a worker.
    Ready,
}

/// A key to add: owned, or borrowed and cloned only if it is new.
enum Item<'a, T> {
    Owned(T),
    Borrowed(&'a T),
}

impl<T: Clone> Item<'_, T> {
    fn get(&self) -> &T {
        match self {
            Item::Owned(t) => t,
            Item::Borrowed(t) => t,
        }
    }

    fn into_owned(self) -> T {
        match self {
            Item::Owned(t) => t,
            Item::Borrowed(t) => t.clone(),
        }
    }
}

fn add_locked<T: Clone + Eq + Hash>(
    st: &mut State<T>,
    item: Item<'_, T>,
    hash: u64,
    now: Option<Instant>,
) -> Added {
    if let Some(i) = st.find(hash, item.get())
        && let Some(slot) = st.slot_mut(i)
    {
        if slot.dirty {
            return Added::No;
        }
        // Processing and not yet re-added: remember to hand it out after `done`.
        slot.dirty = true;
        if now.is_some() {
            st.times(i).added_at = now;
        }
        return Added::Dirty;
    }
    let slot = Slot {
        item: item.into_owned(),
        hash,
        dirty: true,
        processing: false,
    };
    let i = match st.free.pop() {
        Some(i) => {
            st.slots[i] = Some(slot);
            i
        }
        None => {
            st.slots.push(Some(slot));
            st.slots.len() - 1
        }
    };
    let State { index, slots, .. } = st;
    index.insert_unique(hash, i, |&j| match slots.get(j) {
        Some(Some(s)) => s.hash,
        _ => 0,
    });
    if now.is_some() {
        *st.times(i) = Times {
            added_at: now,
            started_at: None,
        };
    }
    st.queue.push_back(i);
    Added::Ready
}

impl<T: Eq + Hash + Send + 'static> UnfinishedWork for Shared<T> {
    fn unfinished(&self, now: Instant) -> (f64, f64) {
        let st = self.state.lock();
        let mut total = 0.0;
        let mut longest = 0.0f64;
        let started = st.slots.iter().zip(&st.times).filter_map(|(slot, times)| {
            slot.as_ref().filter(|s| s.processing).and(times.started_at)
        });
        for start in started {
            let secs = (now - start).as_secs_f64();
            total += secs;
            longest = longest.max(secs);
        }
        (total, longest)
    }
}

#[cfg(test)]
mod tests;
