//! Tests of the controller (`mod.rs`), beside it so the controller reads on its own.
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::runtime::cache::informer::InformerConfig;
use crate::runtime::cache::reflector::raw::RawObject;
use crate::runtime::cache::reflector::script::{ScriptedListWatch, cm_json, page, raw};
use crate::runtime::metrics::testing::{encode, new_registry};

#[derive(Debug, thiserror::Error)]
#[error("scripted failure")]
struct TestError {
    terminal: bool,
}

impl ReconcileError for TestError {
    fn is_terminal(&self) -> bool {
        self.terminal
    }
    fn category(&self) -> &'static str {
        if self.terminal { "invalid_spec" } else { "api" }
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Done,
    Requeue(Duration),
    Fail,
    Terminal,
    Panic,
    /// Take this long, then succeed.
    Slow(Duration),
}

/// A reconciler that follows a per-key script (then `Done`) and records
/// every call with its time, and the most runs of one key at once.
#[derive(Clone)]
struct Scripted(Arc<ScriptState>);

struct ScriptState {
    start: Instant,
    plan: Mutex<HashMap<String, VecDeque<Step>>>,
    calls: Mutex<Vec<(String, Duration)>>,
    running: Mutex<HashMap<String, usize>>,
    max_same_key: AtomicU64,
}

impl Scripted {
    fn new(plan: &[(&str, &[Step])]) -> Self {
        Self(Arc::new(ScriptState {
            start: Instant::now(),
            plan: Mutex::new(
                plan.iter()
                    .map(|(k, steps)| ((*k).to_owned(), steps.iter().copied().collect()))
                    .collect(),
            ),
            calls: Mutex::new(Vec::new()),
            running: Mutex::new(HashMap::new()),
            max_same_key: AtomicU64::new(0),
        }))
    }

    fn calls(&self) -> Vec<(String, Duration)> {
        self.0.calls.lock().unwrap().clone()
    }

    fn keys(&self) -> Vec<String> {
        self.calls().into_iter().map(|(k, _)| k).collect()
    }

    fn times_of(&self, key: &str) -> Vec<Duration> {
        self.calls()
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, t)| t)
            .collect()
    }
}

impl Reconciler for Scripted {
    type Error = TestError;

    async fn reconcile(&self, key: ObjectKey) -> Result<Action, TestError> {
        let s = &self.0;
        let name = key.to_string();
        s.calls
            .lock()
            .unwrap()
            .push((name.clone(), s.start.elapsed()));
        let step = s
            .plan
            .lock()
            .unwrap()
            .get_mut(&name)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Step::Done);
        let now_running = {
            let mut running = s.running.lock().unwrap();
            let n = running.entry(name.clone()).or_default();
            *n += 1;
            *n as u64
        };
        s.max_same_key.fetch_max(now_running, Ordering::Relaxed);
        if let Step::Slow(d) = step {
            tokio::time::sleep(d).await;
        }
        *s.running.lock().unwrap().entry(name).or_default() -= 1;
        match step {
            Step::Done | Step::Slow(_) => Ok(Action::Done),
            Step::Requeue(d) => Ok(Action::RequeueAfter(d)),
            Step::Fail => Err(TestError { terminal: false }),
            Step::Terminal => Err(TestError { terminal: true }),
            Step::Panic => panic!("reconcile bug"),
        }
    }
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(Some("ns"), name)
}

struct Running {
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<Result<(), ControllerError>>,
}

fn start<R: Reconciler>(c: Controller<R>) -> Running {
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(c.run(shutdown.clone()));
    Running { shutdown, handle }
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn a_successful_reconcile_forgets_the_key_and_counts_a_success() {
    let registry = new_registry();
    let rec = Scripted::new(&[]);
    let c = Controller::builder("test")
        .registry(&registry)
        .build(rec.clone())
        .unwrap();
    let q = c.queue();
    let _run = start(c);
    q.add(key("a"));
    sleep_ms(1).await;
    assert_eq!(rec.keys(), ["ns/a"]);
    assert_eq!(q.num_requeues(&key("a")), 0);
    let text = encode(&registry);
    assert!(
        text.contains(
            "controller_runtime_reconcile_total{controller=\"test\",result=\"success\"} 1\n"
        ),
        "{text}"
    );
    assert!(text.contains("controller_runtime_max_concurrent_reconciles{controller=\"test\"} 1\n"));
    assert!(
        text.contains("workqueue_adds_total{controller=\"test\",name=\"test\"} 1\n"),
        "{text}"
    );
}

#[test]
fn every_controller_runtime_name_is_exposed_exactly() {
    let registry = new_registry();
    let _c = Controller::builder("named")
        .registry(&registry)
        .build(Scripted::new(&[]))
        .unwrap();
    let text = encode(&registry);
    for series in [
        "controller_runtime_reconcile_total{controller=\"named\",result=\"success\"} 0",
        "controller_runtime_reconcile_total{controller=\"named\",result=\"error\"} 0",
        "controller_runtime_reconcile_total{controller=\"named\",result=\"requeue_after\"} 0",
        "controller_runtime_reconcile_errors_total{controller=\"named\"} 0",
        "controller_runtime_terminal_reconcile_errors_total{controller=\"named\"} 0",
        "controller_runtime_reconcile_panics_total{controller=\"named\"} 0",
        "controller_runtime_reconcile_time_seconds_count{controller=\"named\"} 0",
        "controller_runtime_active_workers{controller=\"named\"} 0",
        "controller_runtime_max_concurrent_reconciles{controller=\"named\"} 0",
    ] {
        assert!(text.contains(series), "missing {series}: {text}");
    }
}

#[tokio::test(start_paused = true)]
async fn requeue_after_fires_at_exactly_the_requested_time() {
    let rec = Scripted::new(&[("ns/a", &[Step::Requeue(Duration::from_secs(30))])]);
    let c = Controller::builder("test").build(rec.clone()).unwrap();
    let q = c.queue();
    let _run = start(c);
    q.add(key("a"));
    sleep_ms(29_999).await;
    assert_eq!(rec.keys().len(), 1);
    sleep_ms(2).await;
    assert_eq!(
        rec.times_of("ns/a"),
        [Duration::ZERO, Duration::from_secs(30)]
    );
}

#[tokio::test(start_paused = true)]
async fn errors_back_off_exponentially_and_success_resets_the_backoff() {
    let registry = new_registry();
    let rec = Scripted::new(&[("ns/a", &[Step::Fail, Step::Fail, Step::Fail, Step::Fail])]);
    let c = Controller::builder("test")
        .registry(&registry)
        .build(rec.clone())
        .unwrap();
    let q = c.queue();
    let _run = start(c);
    q.add(key("a"));
    sleep_ms(1_000).await;
    let times = rec.times_of("ns/a");
    let gaps: Vec<_> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, [5, 10, 20, 40].map(Duration::from_millis));
    assert_eq!(q.num_requeues(&key("a")), 0, "the final success forgets");
    let text = encode(&registry);
    assert!(text.contains("controller_runtime_reconcile_errors_total{controller=\"test\"} 4\n"));
    assert!(text.contains(
        "tfjob_operator_reconcile_errors_by_category_total{controller=\"test\",category=\"api\"} 4\n"
    ));
    assert!(
        text.contains("workqueue_retries_total{controller=\"test\",name=\"test\"} 4\n"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn terminal_errors_are_counted_and_never_retried() {
    let registry = new_registry();
    let rec = Scripted::new(&[("ns/bad", &[Step::Terminal])]);
    let c = Controller::builder("test")
        .registry(&registry)
        .build(rec.clone())
        .unwrap();
    let q = c.queue();
    let _run = start(c);
    q.add(key("bad"));
    sleep_ms(3_600_000).await;
    assert_eq!(rec.keys(), ["ns/bad"]);
    assert_eq!(q.num_requeues(&key("bad")), 0);
    let text = encode(&registry);
    assert!(
        text.contains(
            "controller_runtime_terminal_reconcile_errors_total{controller=\"test\"} 1\n"
        )
    );
    assert!(
        text.contains(
            "controller_runtime_reconcile_total{controller=\"test\",result=\"error\"} 1\n"
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_reconcile_is_counted_retried_and_the_worker_lives_on() {
    let registry = new_registry();
    let rec = Scripted::new(&[("ns/a", &[Step::Panic])]);
    let c = Controller::builder("test")
        .registry(&registry)
        .build(rec.clone())
        .unwrap();
    let q = c.queue();
    let _run = start(c);
    q.add(key("a"));
    q.add(key("b"));
    sleep_ms(100).await;
    assert_eq!(rec.keys(), ["ns/a", "ns/b", "ns/a"]);
    assert_eq!(rec.times_of("ns/a")[1], Duration::from_millis(5));
    let text = encode(&registry);
    assert!(text.contains("controller_runtime_reconcile_panics_total{controller=\"test\"} 1\n"));
}

#[tokio::test(start_paused = true)]
async fn the_same_key_never_runs_twice_at_once_even_with_many_workers() {
    let rec = Scripted::new(&[("ns/hot", &[Step::Slow(Duration::from_secs(1)); 3])]);
    let c = Controller::builder("test")
        .workers(4)
        .build(rec.clone())
        .unwrap();
    let q = c.queue();
    let _run = start(c);
    q.add(key("hot"));
    for _ in 0..10 {
        sleep_ms(100).await;
        q.add(key("hot"));
        q.add(key("other"));
    }
    sleep_ms(5_000).await;
    assert_eq!(rec.0.max_same_key.load(Ordering::Relaxed), 1);
    // The adds during the first run collapse into one more run.
    assert_eq!(
        rec.times_of("ns/hot"),
        [Duration::ZERO, Duration::from_secs(1)]
    );
    assert!(rec.keys().contains(&"ns/other".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_reconciles_in_flight_and_starts_nothing_new() {
    let registry = new_registry();
    let rec = Scripted::new(&[("ns/slow", &[Step::Slow(Duration::from_secs(10))])]);
    let c = Controller::builder("test")
        .registry(&registry)
        .build(rec.clone())
        .unwrap();
    let q = c.queue();
    let run = start(c);
    q.add(key("slow"));
    q.add(key("next"));
    sleep_ms(1_000).await;
    assert!(
        encode(&registry).contains("controller_runtime_active_workers{controller=\"test\"} 1\n")
    );
    run.shutdown.cancel();
    sleep_ms(8_000).await;
    assert!(
        !run.handle.is_finished(),
        "returned before the reconcile finished"
    );
    let done = tokio::time::timeout(Duration::from_secs(2), run.handle).await;
    assert!(matches!(done, Ok(Ok(Ok(())))));
    assert_eq!(rec.keys(), ["ns/slow"]);
    assert!(
        encode(&registry).contains("controller_runtime_active_workers{controller=\"test\"} 0\n")
    );
}

#[tokio::test(start_paused = true)]
async fn keys_from_a_channel_source_are_reconciled() {
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let rec = Scripted::new(&[]);
    let c = Controller::builder("test")
        .watches_channel(rx)
        .build(rec.clone())
        .unwrap();
    let run = start(c);
    tx.unbounded_send(key("external")).unwrap();
    sleep_ms(1).await;
    assert_eq!(rec.keys(), ["ns/external"]);
    run.shutdown.cancel();
    assert!(matches!(run.handle.await, Ok(Ok(()))));
}

#[test]
fn builder_refuses_owns_without_a_primary_and_zero_workers() {
    let inf = configmaps(ScriptedListWatch::new());
    let no_primary = Controller::builder("x")
        .owns(&inf)
        .build(Scripted::new(&[]));
    assert!(matches!(
        no_primary,
        Err(ControllerError::OwnsWithoutFor(_))
    ));
    let no_workers = Controller::builder("x")
        .workers(0)
        .build(Scripted::new(&[]));
    assert!(matches!(no_workers, Err(ControllerError::NoWorkers(_))));
}

fn configmaps(lw: ScriptedListWatch) -> SharedInformer<ConfigMap> {
    let mut config = InformerConfig::default();
    config.reflector.streaming_list = false;
    SharedInformer::new(Arc::new(lw), config)
}

/// Drops events for objects named `skip`.
struct SkipNamed(&'static str);

impl Predicate for SkipNamed {
    fn create(&self, meta: &ObjectMeta) -> bool {
        meta.name.as_deref() != Some(self.0)
    }
}

#[tokio::test(start_paused = true)]
async fn for_informer_reconciles_every_listed_object_that_passes_the_filter() {
    let inf = configmaps(ScriptedListWatch::new().list(Ok(page(
        vec![cm_json("a", "1"), cm_json("skip", "1"), cm_json("b", "1")],
        "1",
        None,
    ))));
    let shutdown = CancellationToken::new();
    tokio::spawn(inf.clone().run(shutdown.clone()));
    let rec = Scripted::new(&[]);
    let c = Controller::builder("cm")
        .for_informer(&inf)
        .with_event_filter(SkipNamed("skip"))
        .build(rec.clone())
        .unwrap();
    let run = start(c);
    sleep_ms(1_000).await;
    let mut keys = rec.keys();
    keys.sort();
    assert_eq!(keys, ["ns/a", "ns/b"]);
    run.shutdown.cancel();
    assert!(matches!(run.handle.await, Ok(Ok(()))));
    shutdown.cancel();
}

fn child_json(name: &str, owner: &str) -> RawObject {
    let mut cm: serde_json::Value = cm_json(name, "1").decode(false).expect("cm_json decodes");
    cm["metadata"]["ownerReferences"] = serde_json::json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner,
        "uid": "u-1", "controller": true,
    }]);
    raw(&cm)
}

#[tokio::test(start_paused = true)]
async fn owns_enqueues_the_owner_and_watches_enqueues_the_mapped_keys() {
    let parents = configmaps(ScriptedListWatch::new().list(Ok(page(vec![], "1", None))));
    let children = configmaps(ScriptedListWatch::new().list(Ok(page(
        vec![child_json("c1", "p1"), child_json("c2", "p2")],
        "1",
        None,
    ))));
    let others =
        configmaps(ScriptedListWatch::new().list(Ok(page(vec![cm_json("x", "1")], "1", None))));
    let shutdown = CancellationToken::new();
    for inf in [&parents, &children, &others] {
        tokio::spawn(inf.clone().run(shutdown.clone()));
    }
    let rec = Scripted::new(&[]);
    let c = Controller::builder("cm")
        .for_informer(&parents)
        .owns(&children)
        .watches(&others, |cm: &ConfigMap| {
            vec![ObjectKey::new(
                Some("elsewhere"),
                cm.metadata.name.as_deref().unwrap_or(""),
            )]
        })
        .build(rec.clone())
        .unwrap();
    let _run = start(c);
    sleep_ms(1_000).await;
    let mut keys = rec.keys();
    keys.sort();
    assert_eq!(keys, ["elsewhere/x", "ns/p1", "ns/p2"]);
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn run_fails_when_caches_do_not_sync_in_time() {
    // No scripted list: the first list never returns.
    let inf = configmaps(ScriptedListWatch::new());
    let shutdown = CancellationToken::new();
    tokio::spawn(inf.clone().run(shutdown.clone()));
    let c = Controller::builder("cm")
        .for_informer(&inf)
        .cache_sync_timeout(Duration::from_secs(10))
        .build(Scripted::new(&[]))
        .unwrap();
    let result = c.run(CancellationToken::new()).await;
    assert!(matches!(
        result,
        Err(ControllerError::CacheSyncTimeout(_, _))
    ));
    shutdown.cancel();
}
