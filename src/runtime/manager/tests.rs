//! Tests of the manager (`mod.rs`), beside it so the manager reads on its own.
use super::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;
use tokio::time::Instant;

/// A cache whose sync the test controls.
#[derive(Clone)]
struct FakeCache {
    synced: watch::Sender<bool>,
    token: Arc<Mutex<Option<CancellationToken>>>,
}

impl FakeCache {
    fn new() -> Self {
        Self {
            synced: watch::Sender::new(false),
            token: Arc::default(),
        }
    }
    fn sync(&self) {
        self.synced.send_replace(true);
    }
    fn start_token(&self) -> Option<CancellationToken> {
        self.token.lock().unwrap().clone()
    }
}

impl Cache for FakeCache {
    fn start(&self, shutdown: CancellationToken) {
        *self.token.lock().unwrap() = Some(shutdown);
    }
    fn wait_for_sync(&self) -> BoxFuture<'_, ()> {
        let mut rx = self.synced.subscribe();
        Box::pin(async move {
            let _ = rx.wait_for(|s| *s).await;
        })
    }
    fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }
}

fn dummy_client() -> kube::Client {
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn manager() -> Manager {
    Manager::new(
        dummy_client(),
        ManagerConfig {
            probe_addr: None,
            metrics_addr: None,
            leader_election: None,
            graceful_shutdown: Duration::from_secs(30),
            handle_signals: false,
        },
        crate::runtime::metrics::testing::new_registry(),
    )
}

/// Runs the manager, lets it start, asks it to stop: its result, and
/// how long the stop took.
async fn start_then_stop(mgr: Manager) -> (Result<(), ManagerError>, Duration) {
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());
    settle().await;
    let t0 = Instant::now();
    stop.cancel();
    let result = run.await.expect("the manager task panicked");
    (result, t0.elapsed())
}

/// Lets spawned tasks run (paused time auto-advances only when idle).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// A runnable that raises `started`, waits for cancellation, raises `stopped`.
fn until_cancelled(
    started: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
) -> impl FnOnce(CancellationToken) -> BoxFuture<'static, Result<(), BoxError>> + Send + 'static {
    move |token| {
        Box::pin(async move {
            started.store(true, Ordering::SeqCst);
            token.cancelled().await;
            stopped.store(true, Ordering::SeqCst);
            Ok(())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn leader_only_runnables_do_not_start_before_caches_sync() {
    let mut mgr = manager();
    let cache = FakeCache::new();
    mgr.add_cache(cache.clone());
    let (leader_started, other_started) = (flag(), flag());
    mgr.add_runnable(
        "controller",
        true,
        until_cancelled(leader_started.clone(), flag()),
    );
    mgr.add_runnable(
        "helper",
        false,
        until_cancelled(other_started.clone(), flag()),
    );
    let readiness = mgr.readiness();
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());

    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(cache.start_token().is_some(), "caches are started first");
    assert!(!leader_started.load(Ordering::SeqCst));
    assert!(!other_started.load(Ordering::SeqCst));
    assert_eq!(readiness.check(), Err("caches not synced"));

    cache.sync();
    settle().await;
    assert!(leader_started.load(Ordering::SeqCst));
    assert!(other_started.load(Ordering::SeqCst));
    assert_eq!(readiness.check(), Ok(()));

    stop.cancel();
    run.await.unwrap().unwrap();
    assert_eq!(readiness.check(), Err("shutting down"));
    assert!(
        cache.start_token().unwrap().is_cancelled(),
        "caches are stopped at the end"
    );
}

#[tokio::test(start_paused = true)]
async fn an_informer_factory_serves_as_the_managers_cache() {
    let mut mgr = manager();
    // No informers yet: the factory has nothing to wait for.
    mgr.add_cache(InformerFactory::new(dummy_client()));
    let started = flag();
    mgr.add_runnable("controller", true, until_cancelled(started.clone(), flag()));
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());
    settle().await;
    assert!(started.load(Ordering::SeqCst));
    stop.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_before_sync_starts_no_runnable_and_returns_cleanly() {
    let mut mgr = manager();
    mgr.add_cache(FakeCache::new());
    let started = flag();
    mgr.add_runnable("controller", true, until_cancelled(started.clone(), flag()));
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());
    settle().await;
    stop.cancel();
    run.await.unwrap().unwrap();
    assert!(!started.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn cancellation_propagates_to_every_runnable() {
    let mut mgr = manager();
    let (a, b) = (flag(), flag());
    mgr.add_runnable("a", true, until_cancelled(flag(), a.clone()));
    mgr.add_runnable("b", false, until_cancelled(flag(), b.clone()));
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());
    settle().await;
    assert!(!a.load(Ordering::SeqCst));
    stop.cancel();
    run.await.unwrap().unwrap();
    assert!(a.load(Ordering::SeqCst));
    assert!(b.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_in_flight_work_to_drain() {
    let mut mgr = manager();
    let finished = flag();
    let done = finished.clone();
    mgr.add_runnable("slow", true, move |token: CancellationToken| async move {
        token.cancelled().await;
        // In-flight work that takes 5 s to finish after the signal.
        tokio::time::sleep(Duration::from_secs(5)).await;
        done.store(true, Ordering::SeqCst);
        Ok(())
    });
    let (result, took) = start_then_stop(mgr).await;
    result.unwrap();
    assert!(finished.load(Ordering::SeqCst));
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(6),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_event_writer_may_flush_for_the_rest_of_the_graceful_budget() {
    let mut mgr = manager();
    let flushed = flag();
    let done = flushed.clone();
    // A background task (the event writer) with 12 s of queued writes
    // left when shutdown comes.
    mgr.background
        .push(Box::new(move |token: CancellationToken| {
            Box::pin(async move {
                token.cancelled().await;
                tokio::time::sleep(Duration::from_secs(12)).await;
                done.store(true, Ordering::SeqCst);
            })
        }));
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());
    settle().await;
    stop.cancel();
    run.await.unwrap().unwrap();
    assert!(flushed.load(Ordering::SeqCst), "the flush was cut");
}

#[tokio::test(start_paused = true)]
async fn a_stuck_background_task_is_abandoned_when_the_budget_is_spent() {
    let mut mgr = manager();
    mgr.background.push(Box::new(|_token: CancellationToken| {
        Box::pin(std::future::pending::<()>())
    }));
    let (result, took) = start_then_stop(mgr).await;
    result.unwrap();
    // The 30 s budget, nothing spent on runnables.
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(31),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_runnable_that_ignores_shutdown_is_abandoned_after_the_graceful_timeout() {
    let mut mgr = manager();
    mgr.add_runnable("stuck", true, |_token| async move {
        std::future::pending::<()>().await;
        Ok(())
    });
    let (result, took) = start_then_stop(mgr).await;
    assert_eq!(result.unwrap_err().category(), "shutdown_timeout");
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(31),
        "{took:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_runnable_stops_the_manager_and_the_others() {
    let mut mgr = manager();
    let other_stopped = flag();
    mgr.add_runnable(
        "other",
        true,
        until_cancelled(flag(), other_stopped.clone()),
    );
    mgr.add_runnable("broken", false, |_token| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Err::<(), BoxError>("boom".into())
    });
    let err = tokio::spawn(mgr.run()).await.unwrap().unwrap_err();
    match &err {
        ManagerError::Runnable { name, source } => {
            assert_eq!(name, "broken");
            assert_eq!(source.to_string(), "boom");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(other_stopped.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_runnable_stops_the_manager_with_an_error() {
    let mut mgr = manager();
    mgr.add_runnable("panics", true, |_token| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        panic!("deliberate");
    });
    let err = tokio::spawn(mgr.run()).await.unwrap().unwrap_err();
    assert!(
        matches!(&err, ManagerError::Runnable { name, .. } if name == "panics"),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_runnable_that_returns_early_does_not_stop_the_manager() {
    let mut mgr = manager();
    let stopped = flag();
    mgr.add_runnable("one-shot", false, |_token| async { Ok(()) });
    mgr.add_runnable("long", true, until_cancelled(flag(), stopped.clone()));
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!run.is_finished());
    assert!(!stopped.load(Ordering::SeqCst));
    stop.cancel();
    run.await.unwrap().unwrap();
}

/// A runnable that needs `drain_for` to finish once cancelled, then
/// raises `finished`.
fn slow_to_drain(finished: Arc<AtomicBool>, drain_for: Duration) -> Runnable {
    Runnable {
        name: "slow".into(),
        leader_only: true,
        run: Box::new(move |token| {
            Box::pin(async move {
                token.cancelled().await;
                tokio::time::sleep(drain_for).await;
                finished.store(true, Ordering::SeqCst);
                Ok(())
            })
        }),
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_draining_aborts_in_flight_work_at_once() {
    let finished = flag();
    let work = CancellationToken::new();
    let mut tasks = Tasks::default();
    tasks.spawn(
        slow_to_drain(finished.clone(), Duration::from_secs(20)),
        &work,
    );
    settle().await;
    work.cancel();
    let mut election = Some(tokio::spawn(async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        HoldOutcome::Lost
    }));
    let start = Instant::now();
    let drained = drain(&mut tasks, Duration::from_secs(30), &mut election).await;
    assert!(matches!(drained, Drained::LeaderLost), "{drained:?}");
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "cut short at the loss"
    );
    assert!(election.is_none());
    // Aborted, not left running: it never gets to finish its write.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!finished.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_drain_with_the_lease_still_held_waits_for_in_flight_work() {
    let finished = flag();
    let work = CancellationToken::new();
    let mut tasks = Tasks::default();
    tasks.spawn(
        slow_to_drain(finished.clone(), Duration::from_secs(20)),
        &work,
    );
    settle().await;
    work.cancel();
    let mut election = Some(tokio::spawn(std::future::pending::<HoldOutcome>()));
    let drained = drain(&mut tasks, Duration::from_secs(30), &mut election).await;
    assert!(matches!(drained, Drained::Done(None)), "{drained:?}");
    assert!(finished.load(Ordering::SeqCst));
    assert!(election.is_some(), "still held: released after the drain");
}

#[tokio::test(start_paused = true)]
async fn an_invalid_leader_election_config_fails_at_start() {
    let mut le = LeaderElectionConfig::new("ns", "lease");
    le.renew_deadline = le.lease_duration;
    let mut mgr = manager();
    mgr.config.leader_election = Some(le);
    let err = mgr.run().await.unwrap_err();
    assert_eq!(err.category(), "leader_election");
}

#[tokio::test]
async fn probes_are_served_while_running() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut mgr = manager();
    mgr.config.probe_addr = Some(port);
    mgr.config.metrics_addr = Some(port);
    let cache = FakeCache::new();
    mgr.add_cache(cache.clone());
    let stop = mgr.shutdown_token();
    let run = tokio::spawn(mgr.run());
    let get = crate::runtime::manager::server::tests::http_get;
    // The listener is bound shortly after run() starts.
    let mut status = 0;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(port).await.is_ok() {
            status = get(port, "/readyz").await.0;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, 503);
    cache.sync();
    let mut ready = false;
    for _ in 0..100 {
        if get(port, "/readyz").await.0 == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ready);
    assert_eq!(get(port, "/healthz").await.0, 200);
    stop.cancel();
    run.await.unwrap().unwrap();
}

#[tokio::test]
async fn every_event_recorder_shares_one_writer_and_one_set_of_metrics() {
    let mut mgr = manager();
    let _a = mgr.event_recorder("a");
    let _b = mgr.event_recorder("b");
    assert_eq!(mgr.background.len(), 1);
    let text = crate::runtime::metrics::testing::encode(&mgr.registry());
    assert_eq!(
        text.matches("# TYPE tfjob_operator_events_write_failures counter")
            .count(),
        1,
        "{text}"
    );
}
