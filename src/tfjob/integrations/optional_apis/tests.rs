//! The decisions on paused time, against a scripted transport: an error is
//! never an answer, and an API that appears later is found. What a real
//! server answers, and the informers switched on, are shown on the local
//! control plane (tests/e2e/kueue_discovery.rs).
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::runtime::client::discovery::tests::{api_group, resources, scripted_client, status};
use crate::tfjob::integrations::gang::{self, GangMode, GangScheduling};
use crate::tfjob::integrations::kueue::api::{GROUP, VERSION, WORKLOADS};
use crate::tfjob::integrations::kueue::{self, Kueue, KueueMode};

use super::OptionalApis;
use super::discovery::until_served;

/// A server whose discovery of `group` (serving `plural` in `version`)
/// first answers `before` for `times` requests of the group.
fn server(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    before: (u16, String),
    times: usize,
) -> (kube::Client, Arc<AtomicUsize>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&asked);
    let group_path = format!("/apis/{group}");
    let version_path = format!("/apis/{group}/{version}");
    let client = scripted_client(move |path| {
        if path == group_path {
            if count.fetch_add(1, Ordering::SeqCst) < times {
                return before.clone();
            }
            return api_group(group, &[version]);
        }
        if path == version_path {
            return resources(&format!("{group}/{version}"), plural);
        }
        status(404)
    });
    (client, asked)
}

#[tokio::test(start_paused = true)]
async fn under_auto_a_discovery_error_is_asked_again_and_never_taken_for_no_kueue() {
    let (client, asked) = server(GROUP, VERSION, WORKLOADS, status(500), 3);
    let start = tokio::time::Instant::now();
    let detected = kueue::detect(&client, KueueMode::Auto)
        .await
        .expect("auto never refuses");
    assert_eq!(detected.setting, Kueue::Workload, "{}", detected.detail);
    assert_eq!(asked.load(Ordering::SeqCst), 4);
    // Waited 1 + 2 + 4 s for the answer.
    assert_eq!(start.elapsed(), Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn while_the_server_gives_no_answer_the_readyz_line_names_the_api_and_the_error() {
    for code in [403, 500, 503, 504] {
        let (client, _) = server(GROUP, VERSION, WORKLOADS, status(code), 2);
        let lines = Mutex::new(Vec::new());
        let detected = kueue::detect_reporting(&client, KueueMode::Auto, |line| {
            lines.lock().unwrap().push(line.to_owned());
        })
        .await
        .expect("decides");
        assert_eq!(detected.setting, Kueue::Workload);
        let lines = lines.into_inner().unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("kueue: auto, could not ask the API server for kueue.x-k8s.io/v1beta2 Workloads (attempt 1: "),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains(&format!("scripted {code}")),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("(attempt 2: ") && lines[1].contains("asking again in 2 s"));
    }
}

#[tokio::test(start_paused = true)]
async fn only_an_answer_without_workloads_turns_kueue_off() {
    let (client, _) = server(GROUP, VERSION, WORKLOADS, status(500), 2);
    // Errors, then an answer without the group at all.
    let lines = Mutex::new(0);
    let gone = scripted_client({
        let asked = AtomicUsize::new(0);
        move |_| {
            if asked.fetch_add(1, Ordering::SeqCst) < 2 {
                status(500)
            } else {
                status(404)
            }
        }
    });
    let detected = kueue::detect_reporting(&gone, KueueMode::Auto, |_| *lines.lock().unwrap() += 1)
        .await
        .expect("decides");
    assert_eq!(detected.setting, Kueue::Off);
    assert_eq!(*lines.lock().unwrap(), 2);
    assert!(
        detected
            .detail
            .contains("no kueue.x-k8s.io Workloads served"),
        "{}",
        detected.detail
    );
    // `workload` refuses only an answer, never an error.
    let refused = kueue::detect(&gone, KueueMode::Workload).await;
    assert!(refused.is_err_and(|e| e.contains("--kueue=auto")));
    assert_eq!(
        kueue::detect(&client, KueueMode::Workload)
            .await
            .map(|d| d.setting),
        Ok(Kueue::Workload)
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_group_discovery_error_is_asked_again_and_never_taken_for_no_gangs() {
    let (group, version, plural) = (
        crate::api::pod_group::GROUP,
        crate::api::pod_group::VERSION,
        crate::api::pod_group::PLURAL,
    );
    let (client, asked) = server(group, version, plural, status(500), 2);
    let detected = gang::detect(&client, GangMode::Auto)
        .await
        .expect("decides");
    assert_eq!(
        detected.setting,
        GangScheduling::Auto,
        "{}",
        detected.detail
    );
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    let (client, _) = server(group, version, plural, status(503), 2);
    let on = gang::detect(&client, GangMode::On).await;
    assert_eq!(on.map(|d| d.setting), Ok(GangScheduling::On));
}

#[tokio::test(start_paused = true)]
async fn gang_scheduling_off_asks_nothing() {
    let client = scripted_client(|path| panic!("asked {path}"));
    let detected = gang::detect(&client, GangMode::Off).await.expect("decides");
    assert_eq!(detected.setting, GangScheduling::Off);
    assert_eq!(
        detected.detail,
        "gang-scheduling: off, not asked: no job gets a PodGroup"
    );
}

#[tokio::test(start_paused = true)]
async fn kueue_installed_after_the_start_is_found_at_the_next_discovery() {
    // Not served (404) for the first answer and two more rounds, then served.
    let (client, asked) = server(GROUP, VERSION, WORKLOADS, status(404), 3);
    let first = kueue::detect(&client, KueueMode::Auto)
        .await
        .expect("decides");
    assert_eq!(first.setting, Kueue::Off);
    let start = tokio::time::Instant::now();
    until_served(
        &client,
        GROUP,
        WORKLOADS,
        kueue::served,
        super::REDISCOVER_EVERY,
    )
    .await;
    assert_eq!(start.elapsed(), super::REDISCOVER_EVERY * 3);
    assert_eq!(asked.load(Ordering::SeqCst), 4);
}

#[tokio::test(start_paused = true)]
async fn an_error_after_the_start_neither_finds_nor_loses_the_api() {
    // Errors for three rounds, then an answer without Workloads, then one with.
    let asked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&asked);
    let client = scripted_client(move |path| match path {
        "/apis/kueue.x-k8s.io" => match count.fetch_add(1, Ordering::SeqCst) {
            0..3 => status(500),
            3 => status(404),
            _ => api_group(GROUP, &[VERSION]),
        },
        "/apis/kueue.x-k8s.io/v1beta2" => resources("kueue.x-k8s.io/v1beta2", WORKLOADS),
        _ => status(404),
    });
    let every = super::REDISCOVER_EVERY;
    let found = tokio::time::timeout(every * 4 + Duration::from_millis(1), async {
        until_served(&client, GROUP, WORKLOADS, kueue::served, every).await;
    })
    .await;
    assert!(
        found.is_err(),
        "found while the server gave errors or said no"
    );
    until_served(&client, GROUP, WORKLOADS, kueue::served, every).await;
    assert_eq!(asked.load(Ordering::SeqCst), 5);
}

#[test]
fn the_view_switches_on_with_its_caches_and_the_plan_sees_the_gang_of_now() {
    let apis = OptionalApis::default();
    assert!(apis.workloads().is_none() && apis.flavors().is_none() && apis.pod_groups().is_none());
    assert_eq!(apis.gang(), GangScheduling::Unavailable);
    let reader = apis.clone();
    apis.set_gang(GangScheduling::Auto, Some(Default::default()));
    apis.set_kueue(Default::default(), Default::default());
    assert_eq!(reader.gang(), GangScheduling::Auto);
    assert!(reader.pod_groups().is_some());
    assert!(reader.workloads().is_some() && reader.flavors().is_some());
}

/// A discovery of `modes` against `client`, and the `/readyz` it fills.
fn discovery(
    client: kube::Client,
    modes: (GangMode, KueueMode),
) -> (
    super::discovery::Discovery,
    crate::runtime::manager::server::Readiness,
    tokio_util::sync::CancellationToken,
) {
    use crate::runtime::workqueue::rate_limiter::default_controller_rate_limiter;
    use crate::runtime::workqueue::rate_limiting::RateLimitingQueue;
    let readiness = crate::runtime::manager::server::Readiness::new();
    let stop = tokio_util::sync::CancellationToken::new();
    let discovery = super::discovery::Discovery::new(
        modes,
        OptionalApis::default(),
        super::discovery::Wiring {
            client: client.clone(),
            factory: crate::runtime::cache::factory::InformerFactory::new(client),
            namespace: None,
            queue: RateLimitingQueue::new(default_controller_rate_limiter()),
            jobs: Default::default(),
        },
        super::discovery::Lines {
            gang: readiness.add_changing_detail("gang-scheduling: asking"),
            kueue: readiness.add_changing_detail("kueue: asking"),
        },
        stop.clone(),
    );
    (discovery, readiness, stop)
}

#[tokio::test(start_paused = true)]
async fn the_process_is_not_synced_until_the_server_answers_and_readyz_says_why_meanwhile() {
    use crate::runtime::manager::Cache;
    // 500 twice, then no Kueue at all; gangs off (not asked).
    let asked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&asked);
    let client = scripted_client(move |_| {
        if count.fetch_add(1, Ordering::SeqCst) < 2 {
            status(500)
        } else {
            status(404)
        }
    });
    let (discovery, readiness, stop) = discovery(client, (GangMode::Off, KueueMode::Auto));
    let shutdown = tokio_util::sync::CancellationToken::new();
    discovery.start(shutdown.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!discovery.has_synced(), "synced without an answer");
    let why = readiness.body("caches not synced");
    assert!(
        why.contains("kueue: auto, could not ask the API server for kueue.x-k8s.io/v1beta2 Workloads (attempt 2: "),
        "{why}"
    );
    tokio::time::timeout(Duration::from_secs(5), discovery.wait_for_sync())
        .await
        .expect("synced once answered");
    let answered = readiness.body("ok");
    assert!(
        answered.contains("kueue: auto, no kueue.x-k8s.io Workloads served"),
        "{answered}"
    );
    assert!(
        answered.contains("gang-scheduling: off, not asked"),
        "{answered}"
    );
    assert!(!stop.is_cancelled() && discovery.refused().is_none());
    shutdown.cancel();
}

#[tokio::test(start_paused = true)]
async fn kueue_workload_mode_refuses_only_an_answer_and_stops_the_manager() {
    use crate::runtime::manager::Cache;
    let client = scripted_client(|_| status(404));
    let (discovery, _, stop) = discovery(client, (GangMode::Off, KueueMode::Workload));
    discovery.start(tokio_util::sync::CancellationToken::new());
    tokio::time::timeout(Duration::from_secs(5), stop.cancelled())
        .await
        .expect("the manager is stopped");
    assert!(!discovery.has_synced());
    assert!(
        discovery
            .refused()
            .is_some_and(|why| why.contains("--kueue=workload")),
        "{:?}",
        discovery.refused()
    );
}
