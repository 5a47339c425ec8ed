//! Tests of the basic work queue (`queue.rs`): the two guarantees, the
//! sleepers, the metrics, and shutdown.
use std::time::Duration;

use futures::FutureExt;

use super::*;
use crate::runtime::metrics::testing::{encode, new_registry};
use crate::runtime::workqueue::metrics::WorkqueueMetrics;

fn now_or_never<F: std::future::Future>(f: F) -> Option<F::Output> {
    f.now_or_never()
}

#[tokio::test]
async fn keys_come_out_in_arrival_order() {
    let q = Queue::new();
    for k in ["a", "b", "c"] {
        q.add(k);
    }
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(q.get().await, Some("b"));
    assert_eq!(q.get().await, Some("c"));
}

#[tokio::test]
async fn a_key_added_twice_while_pending_is_handed_out_once() {
    let q = Queue::new();
    q.add("a");
    q.add("a");
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(now_or_never(q.get()), None, "the duplicate add was kept");
}

#[tokio::test]
async fn re_added_key_while_processing_is_processed_again_after_done() {
    let q = Queue::new();
    q.add("a");
    let held = q.get().await;
    q.add("a");
    assert_eq!(q.len(), 0, "must not be handed to a second worker");
    assert_eq!(now_or_never(q.get()), None);
    q.done(&"a");
    assert_eq!(held, Some("a"));
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    assert_eq!(q.processing(), 0);
    assert_eq!(now_or_never(q.get()), None);
}

#[tokio::test]
async fn done_for_a_key_not_in_flight_is_ignored() {
    let q = Queue::new();
    q.add("a");
    q.done(&"a");
    q.done(&"zzz");
    assert_eq!(q.len(), 1);
    assert_eq!(q.processing(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_get_wakes_when_a_key_is_added() {
    let q = Queue::new();
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!getter.is_finished());
    q.add(7);
    assert_eq!(getter.await.ok().flatten(), Some(7));
}

#[tokio::test(start_paused = true)]
async fn every_waiting_worker_is_woken_when_as_many_keys_arrive() {
    let q = Queue::new();
    let getters: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    for k in 0..4 {
        q.add(k);
    }
    let mut got = Vec::new();
    for g in getters {
        got.push(tokio::time::timeout(Duration::from_secs(1), g).await);
    }
    let mut keys: Vec<_> = got
        .into_iter()
        .map(|r| r.ok().and_then(Result::ok).flatten())
        .collect();
    keys.sort();
    assert_eq!(keys, vec![Some(0), Some(1), Some(2), Some(3)]);
}

/// Real threads, real races: every key added is processed, none by two
/// workers at once, and no worker sleeps through a key (the test would
/// hang and hit the timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_real_contention_every_key_is_processed_and_never_twice_at_once() {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let q: Queue<u32> = Queue::new();
    let in_flight = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let seen = Arc::new(std::sync::Mutex::new(HashSet::new()));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (q, in_flight, seen, overlaps) =
                (q.clone(), in_flight.clone(), seen.clone(), overlaps.clone());
            tokio::spawn(async move {
                while let Some(k) = q.get().await {
                    if !in_flight.lock().unwrap().insert(k) {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    seen.lock().unwrap().insert(k);
                    tokio::task::yield_now().await;
                    in_flight.lock().unwrap().remove(&k);
                    q.done(&k);
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..2u32)
        .map(|p| {
            let q = q.clone();
            tokio::spawn(async move {
                for i in 0..20_000u32 {
                    // Half the adds hit 8 hot keys, the rest are unique.
                    q.add(if i % 2 == 0 {
                        (i / 2) % 8
                    } else {
                        1_000 + p * 100_000 + i
                    });
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        for p in producers {
            p.await.unwrap();
        }
        while !(q.is_empty() && q.processing() == 0) {
            tokio::task::yield_now().await;
        }
        q.shut_down_with_drain().await;
        for w in workers {
            w.await.unwrap();
        }
    })
    .await;
    assert!(finished.is_ok(), "a key was never handed out");
    assert_eq!(overlaps.load(Ordering::Relaxed), 0);
    assert_eq!(seen.lock().unwrap().len(), 8 + 2 * 10_000);
}

#[tokio::test]
async fn a_cancelled_get_loses_no_key() {
    let q = Queue::new();
    {
        let mut get = Box::pin(q.get());
        assert!((&mut get).now_or_never().is_none());
        // Dropped while registered as a waiter.
    }
    q.add("a");
    assert_eq!(q.get().await, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_woken_get_that_is_dropped_before_running_passes_the_wake_up_on() {
    let q = Queue::new();
    let first = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    let second = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::task::yield_now().await;
    // Wakes `first`, the longest asleep, which is dropped before it runs.
    q.add("a");
    first.abort();
    let got = tokio::time::timeout(Duration::from_secs(1), second).await;
    assert_eq!(got.ok().and_then(Result::ok).flatten(), Some("a"));
    assert!(first.await.is_err_and(|e| e.is_cancelled()));
}

#[tokio::test]
async fn a_get_polled_again_while_asleep_is_listed_once() {
    let q = Queue::new();
    let mut get = Box::pin(q.get());
    assert!(now_or_never(&mut get).is_none());
    assert!(now_or_never(&mut get).is_none());
    assert_eq!(q.lock().sleepers.len(), 1);
    q.add(1);
    assert_eq!(q.lock().sleepers.len(), 0, "the add woke it");
    assert_eq!(get.await, Some(1));
    let mut get = Box::pin(q.get());
    assert!(now_or_never(&mut get).is_none());
    drop(get);
    assert_eq!(q.lock().sleepers.len(), 0, "a cancelled get left the list");
}

#[tokio::test]
async fn after_shutdown_get_returns_none_and_adds_are_ignored() {
    let q = Queue::new();
    q.add("queued");
    q.shut_down();
    q.add("late");
    assert!(q.is_shutting_down());
    assert_eq!(q.get().await, None);
    assert_eq!(q.len(), 1, "the late add was ignored");
}

#[tokio::test(start_paused = true)]
async fn shutdown_wakes_every_waiting_worker_with_none() {
    let q: Queue<u8> = Queue::new();
    let getters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::task::yield_now().await;
    q.shut_down();
    for g in getters {
        assert_eq!(g.await.ok(), Some(None));
    }
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_in_flight_keys_only() {
    let q = Queue::new();
    q.add("a");
    q.add("b");
    let held = q.get().await;
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!drain.is_finished(), "returned with a key still in flight");
    assert_eq!(
        q.get().await,
        None,
        "a queued key was handed out during drain"
    );
    q.done(&"a");
    tokio::time::timeout(Duration::from_secs(1), drain)
        .await
        .expect("drain did not finish after done")
        .expect("drain task panicked");
    assert_eq!(held, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn shut_down_releases_a_drain_that_is_still_waiting() {
    let q = Queue::new();
    q.add(1);
    let _held = q.get().await;
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shut_down_with_drain().await }
    });
    tokio::task::yield_now().await;
    q.shut_down();
    assert!(
        tokio::time::timeout(Duration::from_secs(1), drain)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn drain_with_nothing_in_flight_returns_at_once() {
    let q: Queue<u8> = Queue::new();
    assert!(now_or_never(q.shut_down_with_drain()).is_some());
}

#[tokio::test(start_paused = true)]
async fn metrics_track_depth_adds_and_durations_with_client_go_names() {
    let registry = new_registry();
    let q = Queue::with_metrics(Some(WorkqueueMetrics::register(&registry).queue("test")));
    q.add("a");
    q.add("a");
    q.add("b");
    tokio::time::advance(Duration::from_millis(2)).await;
    let a = q.get().await;
    tokio::time::advance(Duration::from_secs(3)).await;
    let text = encode(&registry);
    assert!(
        text.contains("workqueue_depth{controller=\"test\",name=\"test\",priority=\"\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_adds_total{controller=\"test\",name=\"test\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "workqueue_queue_duration_seconds_count{controller=\"test\",name=\"test\"} 1\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("workqueue_unfinished_work_seconds{controller=\"test\",name=\"test\"} 3.0"),
        "{text}"
    );
    assert!(
        text.contains(
            "workqueue_longest_running_processor_seconds{controller=\"test\",name=\"test\"} 3.0"
        ),
        "{text}"
    );
    q.done(&"a");
    let text = encode(&registry);
    assert!(
        text.contains("workqueue_work_duration_seconds_sum{controller=\"test\",name=\"test\"} 3.0"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_unfinished_work_seconds{controller=\"test\",name=\"test\"} 0.0"),
        "{text}"
    );
    assert_eq!(a, Some("a"));
}

#[tokio::test]
async fn re_adding_a_key_in_flight_counts_as_an_add_and_keeps_depth_right() {
    let registry = new_registry();
    let q = Queue::with_metrics(Some(WorkqueueMetrics::register(&registry).queue("d")));
    q.add(1);
    let _ = q.get().await;
    q.add(1);
    q.done(&1);
    let _ = q.get().await;
    q.done(&1);
    let text = encode(&registry);
    assert!(
        text.contains("workqueue_depth{controller=\"d\",name=\"d\",priority=\"\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("workqueue_adds_total{controller=\"d\",name=\"d\"} 2\n"),
        "{text}"
    );
}
