use super::*;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::reflector::script::*;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::WatchEvent;

/// Records every notification, and whether the cache already reflected
/// it when the handler was called.
struct Recorder {
    indexer: Indexer<ConfigMap>,
    events: Mutex<Vec<String>>,
    cache_was_ahead: Mutex<Vec<bool>>,
}

impl Recorder {
    fn new(informer: &SharedInformer<ConfigMap>) -> Arc<Self> {
        Arc::new(Self {
            indexer: informer.indexer(),
            events: Mutex::new(Vec::new()),
            cache_was_ahead: Mutex::new(Vec::new()),
        })
    }

    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    fn cache_always_ahead(&self) -> bool {
        self.cache_was_ahead.lock().unwrap().iter().all(|b| *b)
    }

    fn cached(&self, obj: &Arc<ConfigMap>) -> bool {
        ObjectKey::of(obj.as_ref())
            .and_then(|k| self.indexer.get(&k))
            .is_some_and(|c| Arc::ptr_eq(&c, obj))
    }
}

fn name(obj: &ConfigMap) -> String {
    obj.metadata.name.clone().unwrap_or_default()
}

fn rv(obj: &ConfigMap) -> String {
    obj.metadata.resource_version.clone().unwrap_or_default()
}

impl EventHandler<ConfigMap> for Recorder {
    fn on_add(&self, obj: &Arc<ConfigMap>, in_initial_list: bool) {
        let initial = if in_initial_list { " (initial)" } else { "" };
        self.events
            .lock()
            .unwrap()
            .push(format!("add {}@{}{initial}", name(obj), rv(obj)));
        let ahead = self.cached(obj);
        self.cache_was_ahead.lock().unwrap().push(ahead);
    }

    fn on_update(&self, old: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        self.events
            .lock()
            .unwrap()
            .push(format!("update {}@{}->{}", name(new), rv(old), rv(new)));
        let ahead = self.cached(new);
        self.cache_was_ahead.lock().unwrap().push(ahead);
    }

    fn on_delete(&self, obj: &DeletedObject<ConfigMap>) {
        let what = if obj.is_final_state_unknown() {
            "tombstone"
        } else {
            "delete"
        };
        let o = obj.object();
        self.events
            .lock()
            .unwrap()
            .push(format!("{what} {}@{}", name(o), rv(o)));
        let gone = ObjectKey::of(o.as_ref()).is_some_and(|k| self.indexer.get(&k).is_none());
        self.cache_was_ahead.lock().unwrap().push(gone);
    }
}

struct Panicker;
impl EventHandler<ConfigMap> for Panicker {
    fn on_add(&self, _: &Arc<ConfigMap>, _: bool) {
        panic!("handler bug");
    }
    fn on_update(&self, _: &Arc<ConfigMap>, _: &Arc<ConfigMap>) {
        panic!("handler bug");
    }
    fn on_delete(&self, _: &DeletedObject<ConfigMap>) {
        panic!("handler bug");
    }
}

fn informer(lw: ScriptedListWatch, resync: Option<Duration>) -> SharedInformer<ConfigMap> {
    let mut config = InformerConfig::default();
    config.reflector.streaming_list = false;
    config.resync = resync;
    SharedInformer::new(Arc::new(lw), config)
}

fn run(informer: &SharedInformer<ConfigMap>) -> tokio_util::sync::DropGuard {
    let shutdown = CancellationToken::new();
    tokio::spawn(informer.clone().run(shutdown.clone()));
    shutdown.drop_guard()
}

async fn settle(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

fn live() -> (mpsc::UnboundedSender<Event>, ScriptedWatch) {
    let (tx, rx) = mpsc::unbounded();
    (tx, ScriptedWatch::Live(rx))
}

#[tokio::test(start_paused = true)]
async fn handlers_see_every_change_after_the_cache_has_it() {
    let (tx, watch) = live();
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "1", None)))
        .watch(watch);
    let inf = informer(lw, None);
    let rec = Recorder::new(&inf);
    inf.add_event_handler(rec.clone());
    let _guard = run(&inf);
    settle(1).await;
    tx.unbounded_send(Ok(WatchEvent::Added(cm_json("b", "2"))))
        .unwrap();
    tx.unbounded_send(Ok(WatchEvent::Modified(cm_json("a", "3"))))
        .unwrap();
    tx.unbounded_send(Ok(WatchEvent::Deleted(cm_json("b", "4"))))
        .unwrap();
    settle(1).await;
    // Order is kept per key, not across keys: b's deltas were queued
    // before a's update, so they are delivered together, first.
    assert_eq!(
        rec.events(),
        [
            "add a@1 (initial)",
            "add b@2",
            "delete b@4",
            "update a@1->3"
        ]
    );
    assert!(rec.cache_always_ahead());
    assert_eq!(inf.indexer().len(), 1);
    assert_eq!(inf.last_sync_resource_version().as_deref(), Some("4"));
}

#[tokio::test(start_paused = true)]
async fn has_synced_turns_true_once_the_first_list_is_delivered() {
    let lw = ScriptedListWatch::new().list(Ok(page(
        vec![cm_json("a", "1"), cm_json("b", "1")],
        "1",
        None,
    )));
    let inf = informer(lw, None);
    assert!(!inf.has_synced());
    let _guard = run(&inf);
    tokio::time::timeout(Duration::from_secs(5), inf.wait_for_sync())
        .await
        .expect("synced");
    assert!(inf.has_synced());
    assert_eq!(inf.indexer().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn wait_for_sync_does_not_resolve_while_the_list_keeps_failing() {
    let lw = ScriptedListWatch::new().list(Err(api_error(500, "InternalError")));
    let inf = informer(lw, None);
    let _guard = run(&inf);
    let waited = tokio::time::timeout(Duration::from_secs(60), inf.wait_for_sync()).await;
    assert!(waited.is_err());
    assert!(!inf.has_synced());
}

#[tokio::test(start_paused = true)]
async fn a_delete_missed_while_the_watch_was_down_arrives_as_a_tombstone() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(
            vec![cm_json("a", "1"), cm_json("b", "2")],
            "5",
            None,
        )))
        .watch(ScriptedWatch::Events {
            events: vec![expired_event()],
            stay_open: false,
        })
        .list(Ok(page(vec![cm_json("a", "1")], "9", None)));
    let inf = informer(lw, None);
    let rec = Recorder::new(&inf);
    inf.add_event_handler(rec.clone());
    let _guard = run(&inf);
    settle(5).await;
    let events = rec.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("tombstone b@2"))
            .count(),
        1
    );
    assert!(rec.cache_always_ahead());
    assert!(
        inf.indexer()
            .get(&ObjectKey::new(Some("ns"), "b"))
            .is_none()
    );
    assert_eq!(inf.indexer().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_late_handler_first_gets_the_cached_objects_as_initial_adds() {
    let lw = ScriptedListWatch::new().list(Ok(page(vec![cm_json("a", "1")], "1", None)));
    let inf = informer(lw, None);
    let _guard = run(&inf);
    inf.wait_for_sync().await;
    let rec = Recorder::new(&inf);
    inf.add_event_handler(rec.clone());
    assert_eq!(rec.events(), ["add a@1 (initial)"]);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_does_not_stop_the_informer_or_other_handlers() {
    let (tx, watch) = live();
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "1", None)))
        .watch(watch);
    let inf = informer(lw, None);
    inf.add_event_handler(Arc::new(Panicker));
    let rec = Recorder::new(&inf);
    inf.add_event_handler(rec.clone());
    let _guard = run(&inf);
    settle(1).await;
    tx.unbounded_send(Ok(WatchEvent::Added(cm_json("b", "2"))))
        .unwrap();
    settle(1).await;
    assert_eq!(rec.events(), ["add a@1 (initial)", "add b@2"]);
}

#[tokio::test(start_paused = true)]
async fn resync_redelivers_cached_objects_as_updates_to_handlers_that_asked() {
    let lw = ScriptedListWatch::new().list(Ok(page(vec![cm_json("a", "1")], "1", None)));
    let inf = informer(lw, Some(Duration::from_secs(60)));
    let resyncing = Recorder::new(&inf);
    inf.add_event_handler_with_resync(resyncing.clone());
    let plain = Recorder::new(&inf);
    inf.add_event_handler(plain.clone());
    let _guard = run(&inf);
    settle(59).await;
    assert_eq!(resyncing.events(), ["add a@1 (initial)"]);
    settle(2).await;
    assert_eq!(resyncing.events(), ["add a@1 (initial)", "update a@1->1"]);
    assert_eq!(plain.events(), ["add a@1 (initial)"]);
}

#[tokio::test(start_paused = true)]
async fn a_relist_delivers_only_what_changed_except_to_handlers_that_asked_for_syncs() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(
            vec![cm_json("a", "1"), cm_json("b", "1")],
            "1",
            None,
        )))
        .watch(ScriptedWatch::Events {
            events: vec![expired_event()],
            stay_open: false,
        })
        .list(Ok(page(
            vec![cm_json("a", "1"), cm_json("b", "2")],
            "5",
            None,
        )));
    let inf = informer(lw, None);
    let plain = Recorder::new(&inf);
    inf.add_event_handler(plain.clone());
    let resyncing = Recorder::new(&inf);
    inf.add_event_handler_with_resync(resyncing.clone());
    let _guard = run(&inf);
    settle(5).await;
    let updates = |r: &Recorder| -> Vec<String> {
        let mut u: Vec<String> = r
            .events()
            .into_iter()
            .filter(|e| e.starts_with("update"))
            .collect();
        u.sort();
        u
    };
    assert_eq!(updates(&plain), ["update b@1->2"]);
    assert_eq!(updates(&resyncing), ["update a@1->1", "update b@1->2"]);
}

#[tokio::test(start_paused = true)]
async fn a_second_run_returns_at_once() {
    let inf = informer(ScriptedListWatch::new(), None);
    let _guard = run(&inf);
    settle(1).await;
    let second = tokio::time::timeout(
        Duration::from_secs(1),
        inf.clone().run(CancellationToken::new()),
    )
    .await;
    assert!(second.is_ok());
}

#[tokio::test(start_paused = true)]
async fn run_returns_when_shutdown_is_cancelled() {
    let inf = informer(ScriptedListWatch::new(), None);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(inf.clone().run(shutdown.clone()));
    settle(1).await;
    assert!(!task.is_finished());
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .expect("run returned")
        .unwrap();
}

/// Reads the informer from inside a handler, as a controller might.
struct SyncProbe {
    informer: SharedInformer<ConfigMap>,
    seen: Mutex<Vec<(bool, usize)>>,
}

impl EventHandler<ConfigMap> for SyncProbe {
    fn on_add(&self, _: &Arc<ConfigMap>, _: bool) {
        let seen = (self.informer.has_synced(), self.informer.indexer().len());
        self.seen.lock().unwrap().push(seen);
    }
    fn on_update(&self, _: &Arc<ConfigMap>, _: &Arc<ConfigMap>) {}
    fn on_delete(&self, _: &DeletedObject<ConfigMap>) {}
}

#[tokio::test(start_paused = true)]
async fn a_handler_may_read_the_informer_without_deadlocking() {
    let lw = ScriptedListWatch::new().list(Ok(page(vec![cm_json("a", "1")], "1", None)));
    let inf = informer(lw, None);
    let probe = Arc::new(SyncProbe {
        informer: inf.clone(),
        seen: Mutex::new(Vec::new()),
    });
    inf.add_event_handler(probe.clone());
    let _guard = run(&inf);
    tokio::time::timeout(Duration::from_secs(5), inf.wait_for_sync())
        .await
        .expect("synced, no deadlock");
    // Not yet synced while the last initial object is being delivered.
    assert_eq!(*probe.seen.lock().unwrap(), [(false, 1)]);
}

#[test]
fn every_informer_has_the_namespace_and_controller_uid_indexes() {
    let inf = informer(ScriptedListWatch::new(), None);
    assert!(inf.indexer().has_index(NAMESPACE_INDEX));
    assert!(inf.indexer().has_index(CONTROLLER_UID_INDEX));
}

mod model;
