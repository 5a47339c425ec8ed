//! The reflector's state machine driven by a scripted list/watch.
use super::script::*;
use super::*;
use crate::runtime::cache::store::Indexer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::WatchEvent;

struct Running {
    lw: Arc<ScriptedListWatch>,
    fifo: DeltaFifo<ConfigMap>,
    status: ReflectorStatus,
    _shutdown: tokio_util::sync::DropGuard,
}

fn paginated() -> ReflectorConfig<ConfigMap> {
    ReflectorConfig {
        streaming_list: false,
        ..ReflectorConfig::default()
    }
}

fn start(lw: ScriptedListWatch, config: ReflectorConfig<ConfigMap>) -> Running {
    start_with_cache(lw, config, Indexer::new())
}

/// Like [`start`], with an informer cache that already holds objects.
fn start_with_cache(
    lw: ScriptedListWatch,
    config: ReflectorConfig<ConfigMap>,
    cache: Indexer<ConfigMap>,
) -> Running {
    let lw = Arc::new(lw);
    let fifo = DeltaFifo::new(cache);
    let reflector = Reflector::new(lw.clone(), fifo.clone(), config);
    let status = reflector.status();
    let shutdown = CancellationToken::new();
    tokio::spawn(reflector.run(shutdown.clone()));
    Running {
        lw,
        fifo,
        status,
        _shutdown: shutdown.drop_guard(),
    }
}

/// Every queued key as `name: kinds`, in queue order.
fn drain(fifo: &DeltaFifo<ConfigMap>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(line) = fifo.try_pop_with(|d| {
        let kinds: Vec<&str> = d.deltas.iter().map(Delta::kind).collect();
        format!("{}: {}", d.key.name(), kinds.join(","))
    }) {
        out.push(line);
    }
    out
}

use crate::runtime::cache::delta_fifo::Delta;

fn added(name: &str, rv: &str) -> Event {
    Ok(WatchEvent::Added(cm_json(name, rv)))
}

fn open(events: Vec<Event>) -> ScriptedWatch {
    ScriptedWatch::Events {
        events,
        stay_open: true,
    }
}

fn closing(events: Vec<Event>) -> ScriptedWatch {
    ScriptedWatch::Events {
        events,
        stay_open: false,
    }
}

async fn settle(secs: f64) {
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
}

#[tokio::test(start_paused = true)]
async fn paginated_list_follows_continue_tokens_then_watches_from_the_list_resource_version() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "", Some("c1"))))
        .list(Ok(page(vec![cm_json("b", "2")], "10", None)))
        .watch(open(vec![]));
    let config = ReflectorConfig {
        label_selector: Some("app=x".into()),
        field_selector: Some("metadata.name!=z".into()),
        ..paginated()
    };
    let r = start(lw, config);
    settle(1.0).await;

    let lists = r.lw.list_calls();
    assert_eq!(lists.len(), 2);
    assert_eq!(lists[0].limit, Some(500));
    assert_eq!(lists[0].continue_token, None);
    assert_eq!(lists[1].continue_token.as_deref(), Some("c1"));
    assert_eq!(lists[1].label_selector.as_deref(), Some("app=x"));
    assert_eq!(lists[1].field_selector.as_deref(), Some("metadata.name!=z"));
    assert_eq!(drain(&r.fifo), ["a: Replaced", "b: Replaced"]);

    let watches = r.lw.watch_calls();
    assert_eq!(watches.len(), 1);
    let (wp, rv) = &watches[0];
    assert_eq!(rv, "10");
    assert!(wp.bookmarks);
    assert!(!wp.send_initial_events);
    assert_eq!(wp.label_selector.as_deref(), Some("app=x"));
    let timeout = wp.timeout.unwrap_or(0);
    assert!((300..600).contains(&timeout), "timeout {timeout}");
    assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("10"));
    assert_eq!(r.status.lists(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_expired_continue_token_falls_back_to_one_unpaginated_list_at_once() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "", Some("c1"))))
        .list(Err(kube::Error::Api(status(
            410,
            "Expired",
            "The provided continue parameter is too old to display a consistent list result.",
        ))))
        .list(Ok(page(
            vec![cm_json("a", "1"), cm_json("b", "11")],
            "12",
            None,
        )))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(0.001).await;

    let lists = r.lw.list_calls();
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert_eq!(lists[1].continue_token.as_deref(), Some("c1"));
    // client-go's pager: everything in one request, no continue, no limit.
    assert_eq!(lists[2].continue_token, None);
    assert_eq!(lists[2].limit, None);
    // Page one's objects are not delivered twice, and no backoff was waited.
    assert_eq!(drain(&r.fifo), ["a: Replaced", "b: Replaced"]);
    assert_eq!(r.status.lists(), 1);
    let watches = r.lw.watch_calls();
    assert_eq!(watches.len(), 1);
    assert_eq!(watches[0].1, "12");
}

#[tokio::test(start_paused = true)]
async fn watch_events_become_deltas_and_bookmarks_only_advance_the_resource_version() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "1", None)))
        .watch(open(vec![
            added("a", "2"),
            Ok(WatchEvent::Modified(cm_json("a", "3"))),
            Ok(WatchEvent::Deleted(cm_json("a", "4"))),
            bookmark("7", false),
        ]));
    let r = start(lw, paginated());
    settle(1.0).await;
    assert_eq!(drain(&r.fifo), ["a: Added,Updated,Deleted"]);
    assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("7"));
}

#[tokio::test(start_paused = true)]
async fn an_expired_watch_relists_and_tombstones_what_vanished() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(
            vec![cm_json("a", "1"), cm_json("b", "2")],
            "5",
            None,
        )))
        .watch(closing(vec![expired_event()]))
        .list(Ok(page(vec![cm_json("a", "8")], "9", None)))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(5.0).await;
    assert_eq!(
        drain(&r.fifo),
        [
            "a: Replaced,Replaced",
            "b: Replaced,DeletedFinalStateUnknown"
        ]
    );
    let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
    assert_eq!(rvs, ["5", "9"]);
    assert_eq!(r.status.lists(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_relisted_object_the_cache_holds_at_that_version_is_not_decoded_again() {
    // The cache holds "a" at resourceVersion 1. The relist sends "a" at 1
    // with a body that cannot decode: if it were decoded, it would be
    // counted as a failure and dropped (then tombstoned). It is handed on
    // as the cached object instead. "b" is new and broken: decoded, failed.
    let cache = Indexer::new();
    let cached: ConfigMap = cm_json("a", "1").decode(false).unwrap();
    cache.insert(Arc::new(cached));
    let lw = ScriptedListWatch::new()
        .list(Ok(page(
            vec![broken_cm_json("a"), broken_cm_json("b"), cm_json("c", "3")],
            "5",
            None,
        )))
        .watch(open(vec![]));
    let r = start_with_cache(lw, paginated(), cache.clone());
    settle(1.0).await;
    assert_eq!(r.status.decode_failures(), 1);
    let listed = r
        .fifo
        .try_pop_with(|d| d.deltas.last().map(|delta| Arc::clone(delta.object())))
        .flatten()
        .expect("a was listed");
    let in_cache = cache
        .get(&crate::runtime::cache::key::ObjectKey::new(Some("ns"), "a"))
        .unwrap();
    assert!(Arc::ptr_eq(&listed, &in_cache));
    assert_eq!(drain(&r.fifo), ["c: Replaced"]);
}

fn cached(objects: &[(&str, &str)]) -> Indexer<ConfigMap> {
    let cache = Indexer::new();
    for (name, rv) in objects {
        let obj: ConfigMap = cm_json(name, rv).decode(false).unwrap();
        cache.insert(Arc::new(obj));
    }
    cache
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_relisted_object_keeps_its_cached_copy_and_is_not_tombstoned() {
    let cache = cached(&[("a", "1"), ("b", "1")]);
    let lw = ScriptedListWatch::new()
        .list(Ok(page(
            vec![broken_cm_json_at("a", "2"), cm_json("c", "3")],
            "5",
            None,
        )))
        .watch(open(vec![]));
    let r = start_with_cache(lw, paginated(), cache);
    settle(1.0).await;
    assert_eq!(r.status.decode_failures(), 1);
    // "a" is alive on the server: no tombstone, nothing queued. "b" is gone.
    assert_eq!(
        drain(&r.fifo),
        ["c: Replaced", "b: DeletedFinalStateUnknown"]
    );
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_watch_delete_still_deletes_by_key() {
    let cache = cached(&[("a", "1")]);
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "1", None)))
        .watch(open(vec![Ok(WatchEvent::Deleted(broken_cm_json_at(
            "a", "5",
        )))]));
    let r = start_with_cache(lw, paginated(), cache);
    settle(1.0).await;
    assert_eq!(drain(&r.fifo), ["a: Replaced,DeletedFinalStateUnknown"]);
    assert_eq!(r.status.decode_failures(), 1);
    assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("5"));
    assert_eq!(r.lw.watch_calls().len(), 1, "the watch goes on");
}

#[tokio::test(start_paused = true)]
async fn a_watch_delete_without_a_readable_key_relists() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "1", None)))
        .watch(closing(vec![Ok(WatchEvent::Deleted(
            nameless_broken_cm_json(),
        ))]))
        .list(Ok(page(vec![], "9", None)))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(5.0).await;
    assert_eq!(r.lw.list_calls().len(), 2, "relisted to find what is gone");
    assert_eq!(
        drain(&r.fifo),
        ["a: Replaced,DeletedFinalStateUnknown"],
        "the relist tombstones the deleted object"
    );
}

#[tokio::test(start_paused = true)]
async fn a_410_when_opening_the_watch_relists() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "5", None)))
        .watch(ScriptedWatch::Fail(api_error(410, "Gone")))
        .list(Ok(page(vec![], "8", None)))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(5.0).await;
    let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
    assert_eq!(rvs, ["5", "8"]);
    assert_eq!(r.lw.list_calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_resource_version_ahead_of_the_server_relists() {
    let too_large = kube::Error::Api(status(
        504,
        "Timeout",
        "Too large resource version: 900, current: 20",
    ));
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "900", None)))
        .watch(ScriptedWatch::Fail(too_large))
        .list(Ok(page(vec![], "20", None)))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(5.0).await;
    let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
    assert_eq!(rvs, ["900", "20"]);
}

#[tokio::test(start_paused = true)]
async fn a_watch_closed_by_the_server_is_reopened_at_once_without_a_relist() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "5", None)))
        .watch(closing(vec![added("a", "6")]))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(0.001).await;
    let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
    assert_eq!(rvs, ["5", "6"]);
    assert_eq!(r.lw.list_calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_watch_closed_at_once_without_events_is_retried_after_a_backoff() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "5", None)))
        .watch(closing(vec![]))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(0.7).await;
    assert_eq!(r.lw.watch_calls().len(), 1);
    settle(1.0).await;
    assert_eq!(r.lw.watch_calls().len(), 2);
    assert_eq!(r.lw.list_calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_connection_error_rewatches_from_the_last_resource_version_after_a_backoff() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "5", None)))
        .watch(ScriptedWatch::Fail(api_error(503, "ServiceUnavailable")))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(0.7).await;
    assert_eq!(r.lw.watch_calls().len(), 1);
    settle(1.0).await;
    let rvs: Vec<String> = r.lw.watch_calls().into_iter().map(|(_, rv)| rv).collect();
    assert_eq!(rvs, ["5", "5"]);
    assert_eq!(r.lw.list_calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_object_is_skipped_and_counted_and_the_rest_arrives() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(
            vec![cm_json("a", "1"), broken_cm_json("x"), cm_json("b", "2")],
            "5",
            None,
        )))
        .watch(open(vec![
            Ok(WatchEvent::Added(broken_cm_json("y"))),
            added("c", "6"),
        ]));
    let r = start(lw, paginated());
    settle(1.0).await;
    assert_eq!(drain(&r.fifo), ["a: Replaced", "b: Replaced", "c: Added"]);
    assert_eq!(r.status.decode_failures(), 2);
    assert_eq!(r.lw.watch_calls().len(), 1, "the watch survived");
}

#[tokio::test(start_paused = true)]
async fn failures_back_off_exponentially_before_retrying() {
    let lw = ScriptedListWatch::new()
        .list(Err(api_error(500, "InternalError")))
        .list(Err(api_error(500, "InternalError")))
        .list(Err(api_error(500, "InternalError")));
    let r = start(lw, paginated());
    // Delays: [0.8, 1.6) then [1.6, 3.2) seconds.
    settle(0.7).await;
    assert_eq!(r.lw.list_calls().len(), 1);
    settle(1.0).await; // t = 1.7
    assert_eq!(r.lw.list_calls().len(), 2);
    settle(0.65).await; // t = 2.35 < 0.8 + 1.6
    assert_eq!(r.lw.list_calls().len(), 2);
    settle(2.5).await; // t = 4.85 > 1.6 + 3.2
    assert_eq!(r.lw.list_calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_429_waits_at_least_the_servers_retry_after() {
    let mut throttled = status(429, "TooManyRequests", "slow down");
    throttled.details = serde_json::from_value(serde_json::json!({"retryAfterSeconds": 20})).ok();
    let lw = ScriptedListWatch::new()
        .list(Err(kube::Error::Api(throttled)))
        .list(Ok(page(vec![], "5", None)));
    let r = start(lw, paginated());
    settle(19.0).await;
    assert_eq!(r.lw.list_calls().len(), 1);
    settle(2.0).await;
    assert_eq!(r.lw.list_calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_replaces_at_the_end_bookmark_and_keeps_watching() {
    let lw = ScriptedListWatch::new().watch(open(vec![
        added("a", "3"),
        added("b", "4"),
        bookmark("5", true),
        added("c", "6"),
    ]));
    let r = start(lw, ReflectorConfig::default());
    settle(1.0).await;
    assert!(r.lw.list_calls().is_empty());
    let watches = r.lw.watch_calls();
    assert_eq!(watches.len(), 1);
    assert!(watches[0].0.send_initial_events);
    assert!(watches[0].0.bookmarks);
    assert_eq!(watches[0].1, "");
    assert_eq!(drain(&r.fifo), ["a: Replaced", "b: Replaced", "c: Added"]);
    assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("6"));
    assert_eq!(r.status.lists(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_server_refusing_streaming_lists_gets_paginated_lists_from_then_on() {
    let lw = ScriptedListWatch::new()
        .watch(ScriptedWatch::Fail(api_error(422, "Invalid")))
        .list(Ok(page(vec![cm_json("a", "1")], "5", None)))
        .watch(closing(vec![expired_event()]))
        .list(Ok(page(vec![], "7", None)))
        .watch(open(vec![]));
    let r = start(lw, ReflectorConfig::default());
    settle(5.0).await;
    let watches: Vec<(bool, String)> =
        r.lw.watch_calls()
            .into_iter()
            .map(|(wp, rv)| (wp.send_initial_events, rv))
            .collect();
    assert_eq!(
        watches,
        [
            (true, String::new()),
            (false, "5".into()),
            (false, "7".into())
        ]
    );
    assert_eq!(r.lw.list_calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_cut_before_its_end_bookmark_falls_back_to_list_once() {
    let lw = ScriptedListWatch::new()
        .watch(closing(vec![added("a", "3")]))
        .list(Ok(page(vec![cm_json("a", "4")], "5", None)))
        .watch(closing(vec![expired_event()]))
        .watch(open(vec![added("b", "8"), bookmark("9", true)]));
    let r = start(lw, ReflectorConfig::default());
    settle(0.5).await;
    assert_eq!(drain(&r.fifo), ["a: Replaced"]);
    assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("5"));
    // The next relist (after the 410) tries the streaming list again.
    settle(5.0).await;
    let initial: Vec<bool> =
        r.lw.watch_calls()
            .into_iter()
            .map(|(wp, _)| wp.send_initial_events)
            .collect();
    assert_eq!(initial, [true, false, true]);
    assert_eq!(r.status.last_sync_resource_version().as_deref(), Some("9"));
}

#[tokio::test(start_paused = true)]
async fn the_default_transform_strips_managed_fields() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "5", None)))
        .watch(open(vec![]));
    let r = start(lw, paginated());
    settle(1.0).await;
    let popped = r.fifo.try_pop_with(|d| d.deltas[0].object().clone());
    let obj = popped.expect("a is queued");
    assert!(obj.metadata.managed_fields.is_none());
    assert_eq!(obj.metadata.name.as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_transform_that_reads_managed_fields_sees_them_and_caches_what_it_keeps() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "5", None)))
        .watch(open(vec![]));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_transform = seen.clone();
    let transform: Transform<ConfigMap> = Arc::new(move |cm: &mut ConfigMap| {
        let managers = cm.metadata.managed_fields.iter().flatten();
        seen_by_transform
            .lock()
            .unwrap()
            .extend(managers.filter_map(|m| m.manager.clone()));
        if let Some(entries) = cm.metadata.managed_fields.as_mut() {
            entries.retain(|m| m.operation.as_deref() == Some("Update"));
        }
    });
    let config = ReflectorConfig {
        strip_managed_fields: false,
        transform: Some(transform),
        ..paginated()
    };
    let r = start(lw, config);
    settle(1.0).await;
    let popped = r.fifo.try_pop_with(|d| d.deltas[0].object().clone());
    let obj = popped.expect("a is queued");
    assert_eq!(*seen.lock().unwrap(), ["kubectl"]);
    assert_eq!(
        obj.metadata.managed_fields,
        Some(vec![]),
        "what the transform dropped is not cached"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_watch_is_abandoned_after_its_timeout_plus_grace() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "5", None)))
        .watch(open(vec![]))
        .watch(open(vec![]));
    let config = ReflectorConfig {
        watch_timeout: (Duration::from_secs(60), Duration::from_secs(60)),
        ..paginated()
    };
    let r = start(lw, config);
    settle(89.0).await;
    assert_eq!(r.lw.watch_calls().len(), 1);
    settle(2.0).await;
    assert_eq!(r.lw.watch_calls().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_watch_silent_for_90_seconds_is_abandoned_long_before_its_deadline() {
    // The server promises a bookmark about every minute: 90 s of nothing on
    // a 10-minute watch means a dead connection.
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![], "5", None)))
        .watch(open(vec![]))
        .watch(open(vec![]));
    let config = ReflectorConfig {
        watch_timeout: (Duration::from_secs(600), Duration::from_secs(600)),
        ..paginated()
    };
    let r = start(lw, config);
    settle(89.0).await;
    assert_eq!(r.lw.watch_calls().len(), 1);
    settle(2.0).await;
    assert_eq!(
        r.lw.watch_calls().len(),
        2,
        "re-watched after 90 s of silence"
    );
}

#[tokio::test(start_paused = true)]
async fn decode_failure_handlers_hear_of_each_undecodable_object_by_its_metadata() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(
            vec![broken_cm_json_at("a", "2"), cm_json("c", "3")],
            "5",
            None,
        )))
        .watch(open(vec![Ok(WatchEvent::Modified(broken_cm_json_at(
            "c", "6",
        )))]));
    let r = start(lw, paginated());
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = heard.clone();
    r.status
        .add_decode_failure_handler(Arc::new(move |f: &DecodeFailure| {
            sink.lock().unwrap().push(f.clone());
        }));
    settle(1.0).await;
    let heard = heard.lock().unwrap().clone();
    let names: Vec<(Option<&str>, Option<&str>, Option<&str>)> = heard
        .iter()
        .map(|f| {
            (
                f.namespace.as_deref(),
                f.name.as_deref(),
                f.resource_version.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            (Some("ns"), Some("a"), Some("2")),
            (Some("ns"), Some("c"), Some("6"))
        ]
    );
    assert!(
        heard.iter().all(|f| f.error.contains("invalid type")),
        "{heard:?}"
    );
    assert_eq!(r.status.decode_failures(), 2);
}

/// A reflector stepped by hand, not run.
fn stepped(lw: ScriptedListWatch) -> Reflector<ConfigMap> {
    Reflector::new(Arc::new(lw), DeltaFifo::new(Indexer::new()), paginated())
}

#[tokio::test(start_paused = true)]
async fn the_loop_goes_from_empty_to_listed_to_watching_and_back_to_listed_when_a_watch_closes() {
    let lw = ScriptedListWatch::new()
        .list(Ok(page(vec![cm_json("a", "1")], "5", None)))
        .watch(closing(vec![added("b", "6")]));
    let mut r = stepped(lw);
    let mut backoff = Backoff::default();
    let state = r.step(State::Empty, &mut backoff).await;
    assert_eq!(state.name(), "Listed");
    let state = r.step(state, &mut backoff).await;
    assert_eq!(state.name(), "Watching");
    let state = r.step(state, &mut backoff).await;
    assert_eq!(
        state.name(),
        "Listed",
        "a clean close re-watches, no relist"
    );
    assert_eq!(
        r.status().last_sync_resource_version().as_deref(),
        Some("6")
    );
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_goes_from_empty_straight_to_watching() {
    let lw = ScriptedListWatch::new().watch(open(vec![added("a", "4"), bookmark("5", true)]));
    let mut r = Reflector::new(
        Arc::new(lw),
        DeltaFifo::<ConfigMap>::new(Indexer::new()),
        ReflectorConfig::default(),
    );
    let state = r.step(State::Empty, &mut Backoff::default()).await;
    assert_eq!(state.name(), "Watching", "its watch goes on");
}

#[tokio::test(start_paused = true)]
async fn a_failed_list_stays_empty_and_a_failed_watch_goes_back_to_empty_only_when_expired() {
    let lw = ScriptedListWatch::new().list(Err(api_error(503, "ServiceUnavailable")));
    let mut r = stepped(lw);
    let state = r.step(State::Empty, &mut Backoff::default()).await;
    assert_eq!(state.name(), "Empty");

    let expired = ReflectorError::WatchEvent(status(410, "Expired", "too old resource version"));
    assert_eq!(State::after(&expired).name(), "Empty");
    assert_eq!(
        State::after(&ReflectorError::UnreadableDelete).name(),
        "Empty"
    );
    assert_eq!(
        State::after(&ReflectorError::VeryShortWatch).name(),
        "Listed"
    );
    let refused = ReflectorError::StartWatch(api_error(503, "ServiceUnavailable"));
    assert_eq!(State::after(&refused).name(), "Listed");
}
