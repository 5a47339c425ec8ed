//! The API server failing the operator's requests for a while:
//! - 429: an APF FlowSchema + PriorityLevel with one seat and `Reject`, for
//!   the operator's user only (it is not in `system:masters`, which APF
//!   exempts);
//! - 500: a validating admission webhook on Pod creates, served by the test
//!   on a loopback port that resets every call (`failurePolicy: Fail`, so the
//!   API server answers 500 InternalError);
//! - etcd SIGSTOPped (every API request that needs storage hangs).
//!
//! What must hold: the operator backs off (its request rate, read from the
//! audit log, stays bounded: no hot loop), and once the fault ends every job
//! converges with no Pod created twice.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::ListParams;
use tfjob_operator::api::fixtures::TfJobFixture;

use crate::audit::{self, AuditEvent};
use crate::cluster::{client, cluster_dir, test_namespace, wait_until};
use crate::harness::{
    Cleanup, Supervised, apiserver_addr, apply_yaml, create_job, full, identity, jobs,
    kubectl_stdin, pods, report, running,
};
use crate::observer::Observer;
use crate::operator::ensure_crd;

/// Five jobs of three Pods: a backing-off operator retries each a few times a
/// second at most once its per-item backoff has grown; a hot loop would keep
/// going at its first-retry pace (hundreds a second).
const MAX_LATE_REQUESTS_PER_SECOND: f64 = 20.0;

/// Jobs in the 429 scenario, all there when the operator starts: its 4
/// workers' concurrent writes put dozens of requests in flight, many times
/// the seats of the one-share priority level, so APF refuses some even where
/// requests are quick (issue #29: 5 jobs sometimes met no 429 at all).
const JOBS_UNDER_429: usize = 20;

/// The late request rate a backing-off operator stays under, per job
/// (the 5-job scenarios' 20/s).
const MAX_LATE_REQUESTS_PER_SECOND_PER_JOB: f64 = 4.0;

fn fault_duration() -> Duration {
    if full() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(15)
    }
}

/// Creates `n` jobs of one Chief and two Workers.
async fn create_jobs(client: &Client, ns: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("job-{i:02}");
        create_job(client, ns, TfJobFixture::new(&name).chief(1).workers(2)).await;
        names.push(name);
    }
    names
}

/// Waits until every job has its 3 Pods Running; returns how long that took.
async fn converged(client: &Client, ns: &str, op: &mut Supervised, n: usize) -> Duration {
    let start = Instant::now();
    let pods = pods(client, ns);
    let jobs = jobs(client, ns);
    let what = format!(
        "{n} jobs in {ns} to run 3 Pods each (operator logs: {:?})",
        op.logs
    );
    wait_until(&what, Duration::from_secs(180), || {
        op.keep_alive();
        let pods = pods.clone();
        let jobs = jobs.clone();
        async move {
            let listed = pods.list(&ListParams::default()).await.ok()?;
            let running_now = listed.items.iter().filter(|p| running(p)).count();
            let with_status = jobs
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|j| {
                    j.status.as_ref().is_some_and(|s| {
                        s.replica_statuses.values().map(|r| r.active).sum::<i32>() == 3
                    })
                })
                .count();
            (running_now == 3 * n && with_status == n).then_some(())
        }
    })
    .await;
    start.elapsed()
}

/// What the audit log says about `user`'s requests during a fault.
struct Rate {
    requests: usize,
    /// Answered with the fault's status code.
    answered: usize,
    /// The busiest whole second.
    peak: usize,
    /// Requests per second over the second half of the fault: after the
    /// workqueue's first fast retries (5 ms doubling, as client-go's), a
    /// backing-off operator slows down; a hot loop does not.
    late_per_second: f64,
    /// Requests per whole second, in order (for the report).
    series: Vec<usize>,
}

fn rate(
    events: &[AuditEvent],
    user: &str,
    code: u16,
    from: jiff::Timestamp,
    fault: Duration,
) -> Rate {
    let mine: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| e.user == user && e.received >= from)
        .collect();
    let mut per_second: BTreeMap<i64, usize> = BTreeMap::new();
    for e in &mine {
        *per_second.entry(e.received.as_second()).or_default() += 1;
    }
    let start = from.as_second();
    let secs = fault.as_secs() as i64;
    let series: Vec<usize> = (start..start + secs)
        .map(|s| per_second.get(&s).copied().unwrap_or(0))
        .collect();
    let late = &series[series.len() / 2..];
    Rate {
        requests: mine.len(),
        answered: mine.iter().filter(|e| e.code == code).count(),
        peak: per_second.values().copied().max().unwrap_or(0),
        late_per_second: late.iter().sum::<usize>() as f64 / late.len().max(1) as f64,
        series,
    }
}

fn assert_no_duplicates(observer: &Observer) -> usize {
    let extra = observer.snapshot().extra_pods(|_| 1);
    assert!(extra.is_empty(), "Pods created twice: {extra:?}");
    extra.len()
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn under_apf_429s_the_operator_backs_off_and_converges_after() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "fault-429").await;
    let user = "fault-op-429";
    let observer = Observer::start(&client, Some(&ns));
    let apf = format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n\
         metadata: {{name: {user}}}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 1\n\
         \x20   lendablePercent: 0\n    limitResponse: {{type: Reject}}\n---\n\
         apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {{name: {user}}}\nspec:\n\
         \x20 priorityLevelConfiguration: {{name: {user}}}\n  matchingPrecedence: 100\n\
         \x20 distinguisherMethod: {{type: ByUser}}\n  rules:\n  - subjects: [{{kind: User, user: {{name: {user}}}}}]\n\
         \x20   resourceRules: [{{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*'], clusterScope: true}}]\n\
         \x20   nonResourceRules: [{{verbs: ['*'], nonResourceURLs: ['*']}}]\n"
    );
    apply_yaml(&apf);
    let kubeconfig = identity(user, apiserver_addr()).await;
    // The jobs are there before the operator starts, so its first pass
    // meets all of them at once: its workers' concurrent creates are many
    // times the level's seats, and APF must refuse some. (Created while it
    // ran, they came one at a time, each quickly served, and one run in
    // two of 2026-11-27 met no 429 at all.)
    let n = JOBS_UNDER_429;
    create_jobs(&client, &ns, n).await;
    let mark = audit::mark();
    let fault = Instant::now();
    let fault_from = jiff::Timestamp::now();
    let mut op = Supervised::start(&ns, kubeconfig);
    while fault.elapsed() < fault_duration() {
        op.keep_alive();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    kubectl_stdin(&["delete", "-f", "-", "--ignore-not-found"], &apf)
        .expect("delete the APF objects");
    let during = audit::since(mark);
    let took = converged(&client, &ns, &mut op, n).await;
    let r = rate(&during, user, 429, fault_from, fault_duration());
    let duplicates = assert_no_duplicates(&observer);
    report(
        "apf-429",
        &[
            ("fault_s", fault_duration().as_secs().to_string()),
            ("requests_during_fault", r.requests.to_string()),
            ("answered_429", r.answered.to_string()),
            ("peak_requests_per_s", r.peak.to_string()),
            ("late_requests_per_s", format!("{:.1}", r.late_per_second)),
            (
                "late_requests_per_s_bound",
                format!("{:.0}", MAX_LATE_REQUESTS_PER_SECOND_PER_JOB * n as f64),
            ),
            ("jobs", n.to_string()),
            ("per_second", format!("{:?}", r.series).replace(' ', "")),
            (
                "converged_after_fault_s",
                format!("{:.1}", took.as_secs_f64()),
            ),
            ("operator_restarts", op.restarts.to_string()),
            ("duplicate_pods", duplicates.to_string()),
        ],
    );
    // The fault must have happened, in every run (never "inconclusive").
    assert!(
        r.answered > 0,
        "APF never answered 429 to {n} jobs' writes: the fault did not happen"
    );
    let max_late = MAX_LATE_REQUESTS_PER_SECOND_PER_JOB * n as f64;
    assert!(
        r.late_per_second <= max_late,
        "{:.1} requests a second late in the 429 fault (bound {max_late:.0} for {n} jobs): a hot loop (logs: {:?})",
        r.late_per_second,
        op.logs
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn under_a_failing_webhook_the_operator_backs_off_and_converges_after() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "fault-500").await;
    let user = "fault-op-500";
    let observer = Observer::start(&client, Some(&ns));
    // The webhook the test serves: every call is reset.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a webhook port");
    let port = listener.local_addr().expect("its address").port();
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            #[allow(deprecated)] // linger 0 resets without blocking
            let _ = stream.set_linger(Some(Duration::ZERO));
            drop(stream);
        }
    });
    let ca = std::fs::read(cluster_dir().join("pki/ca.crt")).expect("the cluster CA");
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    let name = format!("{ns}-fails");
    let webhook = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata: {{name: {name}}}\nwebhooks:\n- name: fails.tfjob-faults.local\n\
         \x20 clientConfig: {{url: 'https://127.0.0.1:{port}/validate', caBundle: {ca}}}\n\
         \x20 rules: [{{operations: [CREATE], apiGroups: [''], apiVersions: [v1], resources: [pods]}}]\n\
         \x20 namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n\
         \x20 failurePolicy: Fail\n  sideEffects: None\n  admissionReviewVersions: [v1]\n  timeoutSeconds: 2\n"
    );
    apply_yaml(&webhook);
    let kubeconfig = identity(user, apiserver_addr()).await;
    let mark = audit::mark();
    let mut op = Supervised::start(&ns, kubeconfig);
    let n = 5;
    create_jobs(&client, &ns, n).await;
    let fault = Instant::now();
    let fault_from = jiff::Timestamp::now();
    while fault.elapsed() < fault_duration() {
        op.keep_alive();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    kubectl_stdin(&["delete", "-f", "-", "--ignore-not-found"], &webhook)
        .expect("delete the webhook");
    server.abort();
    let during = audit::since(mark);
    let took = converged(&client, &ns, &mut op, n).await;
    let r = rate(&during, user, 500, fault_from, fault_duration());
    let pod_create_500s = during
        .iter()
        .filter(|e| e.user == user && e.verb == "create" && e.resource == "pods" && e.code == 500)
        .count();
    let duplicates = assert_no_duplicates(&observer);
    report(
        "webhook-500",
        &[
            ("fault_s", fault_duration().as_secs().to_string()),
            ("requests_during_fault", r.requests.to_string()),
            ("answered_500", r.answered.to_string()),
            ("pod_creates_500", pod_create_500s.to_string()),
            ("peak_requests_per_s", r.peak.to_string()),
            ("late_requests_per_s", format!("{:.1}", r.late_per_second)),
            (
                "late_requests_per_s_bound",
                format!("{MAX_LATE_REQUESTS_PER_SECOND:.0}"),
            ),
            ("per_second", format!("{:?}", r.series).replace(' ', "")),
            (
                "converged_after_fault_s",
                format!("{:.1}", took.as_secs_f64()),
            ),
            ("duplicate_pods", duplicates.to_string()),
        ],
    );
    assert!(
        pod_create_500s > 0,
        "no Pod create was answered 500: the fault did not happen"
    );
    assert!(
        r.late_per_second <= MAX_LATE_REQUESTS_PER_SECOND,
        "{:.1} requests a second late in the 500 fault: a hot loop (logs: {:?})",
        r.late_per_second,
        op.logs
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn after_etcd_is_sigstopped_the_operator_recovers_with_nothing_duplicated() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "fault-etcd").await;
    let _cleanup_ns = Cleanup(vec![ns.clone()]);
    let observer = Observer::start(&client, Some(&ns));
    let kubeconfig = identity("fault-op-etcd", apiserver_addr()).await;
    let mut op = Supervised::start(&ns, kubeconfig);
    op.operator.wait_ready().await;
    let n = 4;
    create_jobs(&client, &ns, n).await;
    converged(&client, &ns, &mut op, n).await;

    let pid = std::fs::read_to_string(cluster_dir().join("pids/etcd.pid"))
        .expect("etcd's pid file")
        .trim()
        .to_owned();
    let stop = if full() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(10)
    };
    crate::cluster::run_ok(std::process::Command::new("kill").args(["-STOP", &pid]));
    let stopped = Instant::now();
    // A user acts during the outage; the request hangs until etcd is back.
    let creating = {
        let client = client.clone();
        let ns = ns.clone();
        tokio::spawn(async move {
            let job = TfJobFixture::new("during-outage")
                .chief(1)
                .workers(2)
                .namespace(&ns)
                .build();
            jobs(&client, &ns)
                .create(&Default::default(), &job)
                .await
                .is_ok()
        })
    };
    while stopped.elapsed() < stop {
        op.keep_alive();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    crate::cluster::run_ok(std::process::Command::new("kill").args(["-CONT", &pid]));
    let created = creating.await.unwrap_or(false);
    if !created {
        // Timed out against the stopped etcd: the user retries.
        create_job(
            &client,
            &ns,
            TfJobFixture::new("during-outage").chief(1).workers(2),
        )
        .await;
    }
    let took = converged(&client, &ns, &mut op, n + 1).await;
    let duplicates = assert_no_duplicates(&observer);
    report(
        "etcd-sigstop",
        &[
            ("stopped_s", stop.as_secs().to_string()),
            ("converged_after_s", format!("{:.1}", took.as_secs_f64())),
            ("operator_restarts", op.restarts.to_string()),
            ("duplicate_pods", duplicates.to_string()),
        ],
    );
    drop(op);
}
