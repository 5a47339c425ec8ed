//! Model-based property tests for the whole queue stack.
//!
//! Random interleavings of add / add_after / get / done / time passing /
//! shutdown across simulated workers are run against the real
//! [`RateLimitingQueue`] and against a few lines of obviously-correct model
//! (client-go's `queue` + `dirty` + `processing`, plus a waiting map). Every
//! step must agree, which checks: no key is held by two workers, a pending key
//! is delivered once, no add is lost, delays fire exactly when due (earliest
//! wins), and drain waits for exactly the in-flight keys.
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Duration;

use futures::FutureExt;
use proptest::prelude::*;

use super::rate_limiting::RateLimitingQueue;

const WORKERS: usize = 4;

#[derive(Clone, Debug)]
enum Op {
    Add(u8),
    AddAfter(u8, u64),
    Get(usize),
    Done(usize),
    Advance(u64),
    ShutDown,
    ShutDownWithDrain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6).prop_map(Op::Add),
        3 => (0u8..6, 0u64..5).prop_map(|(k, d)| Op::AddAfter(k, d)),
        4 => (0..WORKERS).prop_map(Op::Get),
        4 => (0..WORKERS).prop_map(Op::Done),
        2 => (0u64..4).prop_map(Op::Advance),
        1 => Just(Op::ShutDown),
        1 => Just(Op::ShutDownWithDrain),
    ]
}

#[derive(Default)]
struct Model {
    queue: VecDeque<u8>,
    dirty: HashSet<u8>,
    processing: HashSet<u8>,
    /// key → (due second, sequence): the heap's order.
    waiting: BTreeMap<u8, (u64, u64)>,
    seq: u64,
    now: u64,
    shut: bool,
}

impl Model {
    fn add(&mut self, k: u8) {
        if self.shut || self.dirty.contains(&k) {
            return;
        }
        self.dirty.insert(k);
        if !self.processing.contains(&k) {
            self.queue.push_back(k);
        }
    }

    fn add_after(&mut self, k: u8, d: u64) {
        if d == 0 {
            return self.add(k);
        }
        if self.shut {
            return;
        }
        let due = self.now + d;
        if self.waiting.get(&k).is_some_and(|&(at, _)| at <= due) {
            return;
        }
        self.seq += 1;
        self.waiting.insert(k, (due, self.seq));
    }

    fn advance(&mut self, d: u64) {
        self.now += d;
        let mut due: Vec<_> = self
            .waiting
            .iter()
            .filter(|(_, (at, _))| *at <= self.now)
            .map(|(k, order)| (*order, *k))
            .collect();
        due.sort();
        for (_, k) in due {
            self.waiting.remove(&k);
            self.add(k);
        }
    }

    fn get(&mut self) -> Option<Option<u8>> {
        if self.shut {
            return Some(None);
        }
        let k = self.queue.pop_front()?;
        self.dirty.remove(&k);
        self.processing.insert(k);
        Some(Some(k))
    }

    fn done(&mut self, k: u8) {
        self.processing.remove(&k);
        if self.dirty.contains(&k) {
            self.queue.push_back(k);
        }
    }

    fn shut_down(&mut self) {
        self.shut = true;
        self.waiting.clear();
    }
}

async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let q: RateLimitingQueue<u8> = RateLimitingQueue::with_default_limiter();
    let mut m = Model::default();
    let mut held: [Option<u8>; WORKERS] = [None; WORKERS];
    let mut drains = Vec::new();
    for op in ops {
        match op {
            Op::Add(k) => {
                q.add(k);
                m.add(k);
            }
            Op::AddAfter(k, d) => {
                q.add_after(k, Duration::from_secs(d));
                m.add_after(k, d);
            }
            Op::Get(w) if held[w].is_none() => {
                let got = q.get().now_or_never();
                prop_assert_eq!(got, m.get(), "get by worker {}", w);
                if let Some(Some(k)) = got {
                    prop_assert!(!held.contains(&Some(k)), "key {} handed to two workers", k);
                    held[w] = Some(k);
                }
            }
            Op::Get(_) => {}
            Op::Done(w) => {
                if let Some(k) = held[w].take() {
                    q.done(&k);
                    m.done(k);
                }
            }
            Op::Advance(d) => {
                tokio::time::advance(Duration::from_secs(d)).await;
                m.advance(d);
            }
            Op::ShutDown => {
                q.shut_down();
                m.shut_down();
                // Every drain waiting now is released by it.
                for (_, released) in &mut drains {
                    *released = true;
                }
            }
            Op::ShutDownWithDrain => {
                let q2 = q.clone();
                let drain = tokio::spawn(async move { q2.shut_down_with_drain().await });
                drains.push((drain, false));
                m.shut_down();
            }
        }
        settle().await;
        prop_assert_eq!(q.len(), m.queue.len());
        prop_assert_eq!(q.waiting(), m.waiting.len());
        prop_assert_eq!(q.processing(), m.processing.len());
        // A drain may finish only once nothing is in flight, or when a
        // plain shutdown after it started released it.
        if !m.processing.is_empty() {
            for (i, (drain, released)) in drains.iter().enumerate() {
                prop_assert!(
                    !drain.is_finished() || *released,
                    "drain {} returned with keys {:?} in flight",
                    i,
                    m.processing
                );
            }
        }
    }
    // Finish every worker: each drain must now complete.
    for slot in &mut held {
        if let Some(k) = slot.take() {
            q.done(&k);
            m.done(k);
        }
    }
    settle().await;
    for (d, _) in &drains {
        prop_assert!(
            d.is_finished(),
            "drain still waiting with nothing in flight"
        );
    }
    // Nothing lost: without shutdown, every pending or waiting key comes out.
    if !m.shut {
        tokio::time::advance(Duration::from_secs(10)).await;
        m.advance(10);
        settle().await;
        let mut expected: Vec<u8> = m.queue.iter().copied().collect();
        let mut got = Vec::new();
        while let Some(Some(k)) = q.get().now_or_never() {
            q.done(&k);
            got.push(k);
        }
        expected.sort_unstable();
        got.sort_unstable();
        prop_assert_eq!(got, expected);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_interleavings_agree_with_the_client_go_model(ops in proptest::collection::vec(op(), 1..80)) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("test runtime");
        rt.block_on(run(ops))?;
    }
}
