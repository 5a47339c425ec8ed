//! The chart for real (issue #28, point 3): `helm install` of
//! `charts/tfjob-operator` with the operator's own image (imported, never
//! pulled: `image.pullPolicy=Never`), two replicas, into a namespace that
//! enforces the `restricted` Pod Security Standard, on the real node. The
//! operator Pods start from the image, reach the API server with in-cluster
//! config and their projected ServiceAccount token, pass their probes, elect
//! a leader and run TFJobs whose Pods run for real; `helm test` runs its Pod
//! and passes; `/metrics` answers 401 without a token and 200 with an allowed
//! one; deleting the leader hands over; `helm upgrade` rolls the Pods without
//! losing a running job; `helm uninstall` leaves the CRD and the jobs.
//!
//! One test, in steps: each step needs the release the previous one left.
//!
//! Mirrors: helm/chart-testing's `ct install` (install, wait, test, upgrade,
//! uninstall) run against a cluster with real nodes, as kubeflow/training-operator's
//! own e2e does with kind.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tfjob_operator::api::types::TFJob;

use crate::cluster;
use crate::support::{self, NODE_LABEL, NODE_NAME, POD_PREFIX};

const RELEASE: &str = "op";
const CHART: &str = "charts/tfjob-operator";
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// Prints a step with the seconds since the test began (the run's log shows
/// where time goes on a slow machine).
struct Steps(Instant);
impl Steps {
    fn say(&self, what: &str) {
        eprintln!("[chart {:>4} s] {what}", self.0.elapsed().as_secs());
    }
}

fn split_image(reference: &str) -> (String, String) {
    let (repo, tag) = reference
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("image {reference} has no tag"));
    (repo.to_string(), tag.to_string())
}

/// `helm install|upgrade` arguments that put the operator and the test Pod on
/// the real node with the imported images (`jobs_ns`: where the `scraper`
/// ServiceAccount allowed to read `/metrics` lives). Other suites (real
/// training) install the operator with these too.
pub(crate) fn release_args(jobs_ns: &str) -> Vec<String> {
    let (op_repo, op_tag) = split_image(&support::image("operator"));
    let (curl_repo, curl_tag) = split_image(&support::image("curl"));
    let node_selector = serde_json::json!({ NODE_LABEL: "true" }).to_string();
    let tolerations =
        serde_json::json!([{ "key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule" }])
            .to_string();
    let readers =
        serde_json::json!([{ "kind": "ServiceAccount", "name": "scraper", "namespace": jobs_ns }])
            .to_string();
    [
        "--set",
        &format!("image.repository={op_repo}"),
        "--set",
        &format!("image.tag={op_tag}"),
        "--set",
        "image.pullPolicy=Never",
        "--set",
        "replicas=2",
        "--set",
        "metrics.secure.enabled=true",
        "--set-json",
        &format!("metrics.secure.readers={readers}"),
        "--set-json",
        &format!("nodeSelector={node_selector}"),
        "--set-json",
        &format!("tolerations={tolerations}"),
        "--set",
        &format!("test.image.repository={curl_repo}"),
        "--set",
        &format!("test.image.tag={curl_tag}"),
        "--set",
        "test.image.pullPolicy=Never",
        "--set",
        "test.timeoutSeconds=120",
        "--set-json",
        &format!("test.nodeSelector={node_selector}"),
        "--set-json",
        &format!("test.tolerations={tolerations}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A TFJob of two Workers on the real node running `script` in busybox (two:
/// like Kubeflow, the operator gives a job of a single replica no `TF_CONFIG`).
fn tfjob(name: &str, script: &str) -> TFJob {
    let mut spec = support::on_real_node();
    spec["terminationGracePeriodSeconds"] = 1.into();
    spec["containers"] = serde_json::json!([{
        "name": "tensorflow",
        "image": support::image("busybox"),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }]);
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": { "name": name },
        "spec": {
            "runPolicy": { "cleanPodPolicy": "None" },
            "tfReplicaSpecs": { "Worker": { "replicas": 2, "restartPolicy": "Never", "template": { "spec": spec } } }
        }
    }))
    .expect("a valid TFJob")
}

fn condition_true(job: &TFJob, kind: &str) -> bool {
    let status = serde_json::to_value(&job.status).unwrap_or_default();
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

async fn wait_job(jobs: &Api<TFJob>, name: &str, kind: &str) {
    cluster::wait_until(&format!("TFJob {name} {kind}"), STEP_TIMEOUT, || async {
        let job = jobs.get_opt(name).await.ok().flatten()?;
        assert!(
            !condition_true(&job, "Failed"),
            "TFJob {name} failed: {:?}",
            job.status
        );
        condition_true(&job, kind).then_some(())
    })
    .await;
}

/// The operator's Pods, when `want` of them are Ready on the real node.
async fn ready_operator_pods(pods: &Api<Pod>, want: usize) -> Vec<Pod> {
    cluster::wait_until(
        &format!("{want} Ready operator Pods"),
        STEP_TIMEOUT,
        || async {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=tfjob-operator"))
                .await
                .ok()?;
            let ready: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                })
                .collect();
            (ready.len() == want).then_some(ready)
        },
    )
    .await
}

/// The leader's Pod name, from the election Lease's holder identity.
async fn leader(leases: &Api<Lease>) -> String {
    let lease_name = format!("{RELEASE}-tfjob-operator-leader");
    cluster::wait_until("a leader", STEP_TIMEOUT, || async {
        let lease = leases.get_opt(&lease_name).await.ok().flatten()?;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await
}

/// Runs the curl image as the `scraper` ServiceAccount against the metrics
/// Service and returns its output: the status codes without and with the token.
async fn scrape(client: &Client, jobs_ns: &str, url: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), jobs_ns);
    let name = format!("scrape-{}", cluster::random_suffix());
    let script = format!(
        "token=$(cat /var/run/secrets/kubernetes.io/serviceaccount/token); \
         for i in $(seq 60); do \
           a=$(curl -sk -m 5 -o /dev/null -w '%{{http_code}}' {url}); \
           b=$(curl -sk -m 5 -o /tmp/metrics -w '%{{http_code}}' -H \"Authorization: Bearer $token\" {url}); \
           [ \"$b\" = 200 ] && break; sleep 2; \
         done; \
         echo \"without-token=$a with-token=$b\"; grep -c '^tfjob_operator_build_info' /tmp/metrics"
    );
    let mut spec = support::on_real_node();
    spec["serviceAccountName"] = "scraper".into();
    spec["restartPolicy"] = "Never".into();
    spec["containers"] = serde_json::json!([{
        "name": "curl",
        "image": support::image("curl"),
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }]);
    let pod: Pod =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": name }, "spec": spec }))
            .expect("a valid Pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create the scrape Pod");
    support::wait_pod_ended(&pods, &name, STEP_TIMEOUT).await;
    support::logs(jobs_ns, &name)
}

#[tokio::test]
#[ignore = "needs a real node: make test-real"]
async fn the_chart_runs_the_operator_from_its_image_on_the_real_node() {
    let steps = Steps(Instant::now());
    let client = cluster::client().await;
    let op_ns = cluster::namespace_with_labels(
        &client,
        "real-chart",
        serde_json::json!({ "pod-security.kubernetes.io/enforce": "restricted" }),
    )
    .await;
    let jobs_ns = cluster::test_namespace(&client, "real-jobs").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &jobs_ns);
    let scraper: ServiceAccount =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "scraper" } }))
            .expect("a valid ServiceAccount");
    accounts
        .create(&PostParams::default(), &scraper)
        .await
        .expect("create the scraper account");

    steps.say(&format!(
        "helm install {RELEASE} into {op_ns} (restricted), two replicas, image {}",
        support::image("operator")
    ));
    let mut install = cluster::helm();
    install
        .current_dir(cluster::repo_dir())
        .args([
            "install",
            RELEASE,
            CHART,
            "--namespace",
            &op_ns,
            "--take-ownership",
            "--wait",
            "--timeout",
            "5m",
        ])
        .args(release_args(&jobs_ns));
    cluster::run_ok(&mut install);

    let pods: Api<Pod> = Api::namespaced(client.clone(), &op_ns);
    let operators = ready_operator_pods(&pods, 2).await;
    for pod in &operators {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(
            spec.node_name.as_deref(),
            Some(NODE_NAME),
            "{name} is not on the real node"
        );
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        assert!(ip.starts_with(POD_PREFIX), "{name} has IP {ip}");
        // The projected ServiceAccount token (in-cluster config reads it).
        let projected = spec.volumes.iter().flatten().any(|v| {
            v.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.service_account_token.is_some())
            })
        });
        assert!(projected, "{name} has no projected ServiceAccount token");
        let status = &pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.clone())
            .expect("statuses")[0];
        assert!(
            status.image.contains("tfjob-operator"),
            "{name} runs {}",
            status.image
        );
    }
    steps.say("both operator Pods Ready on the real node (probes pass)");

    let leases: Api<Lease> = Api::namespaced(client.clone(), &op_ns);
    let first_leader = leader(&leases).await;
    let operator_names: Vec<String> = operators
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(
        operator_names
            .iter()
            .any(|n| first_leader.starts_with(n.as_str())),
        "the Lease holder {first_leader} is none of {operator_names:?}"
    );
    steps.say(&format!("leader elected: {first_leader}"));

    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &jobs_ns);
    jobs.create(
        &PostParams::default(),
        &tfjob("first", "echo TF_CONFIG=$TF_CONFIG"),
    )
    .await
    .expect("create TFJob first");
    wait_job(&jobs, "first", "Succeeded").await;
    let log = support::logs(&jobs_ns, "first-worker-0");
    assert!(
        log.contains("TF_CONFIG={") && log.contains("\"worker\""),
        "no TF_CONFIG in the Worker's log: {log}"
    );
    steps.say("TFJob first Succeeded, its Worker ran for real with our TF_CONFIG");

    let mut test = cluster::helm();
    test.args([
        "test",
        RELEASE,
        "--namespace",
        &op_ns,
        "--logs",
        "--timeout",
        "5m",
    ]);
    let out = cluster::run_ok(&mut test);
    assert!(
        out.contains("refuses a request without a token"),
        "helm test: {out}"
    );
    steps.say("helm test passed (its Pod ran on the real node)");

    let services: Api<Service> = Api::namespaced(client.clone(), &op_ns);
    let metrics_service = format!("{RELEASE}-tfjob-operator-metrics");
    services
        .get(&metrics_service)
        .await
        .expect("the metrics Service");
    let url = format!("https://{metrics_service}.{op_ns}.svc:8080/metrics");
    let out = scrape(&client, &jobs_ns, &url).await;
    assert!(
        out.contains("without-token=401 with-token=200"),
        "/metrics: {out}"
    );
    assert!(
        out.trim_end().ends_with('1'),
        "no tfjob_operator_build_info in the scrape: {out}"
    );
    steps.say("/metrics: 401 without a token, 200 with the scraper's");

    // The holder identity is `<pod name>_<random>`.
    let leader_pod = first_leader
        .split('_')
        .next()
        .unwrap_or_default()
        .to_string();
    pods.delete(&leader_pod, &DeleteParams::default())
        .await
        .expect("delete the leader Pod");
    let second_leader = cluster::wait_until(
        "another replica to take the Lease",
        STEP_TIMEOUT,
        || async {
            let holder = leader(&leases).await;
            (!holder.starts_with(&format!("{leader_pod}_"))).then_some(holder)
        },
    )
    .await;
    steps.say(&format!("leader Pod deleted; {second_leader} leads"));
    jobs.create(
        &PostParams::default(),
        &tfjob("after-handover", "echo handed over"),
    )
    .await
    .expect("create TFJob after-handover");
    wait_job(&jobs, "after-handover", "Succeeded").await;
    steps.say("TFJob after-handover Succeeded under the new leader");

    // A job running through the upgrade: it must finish, not be lost.
    jobs.create(
        &PostParams::default(),
        &tfjob("through-upgrade", "sleep 45; echo survived"),
    )
    .await
    .expect("create TFJob through-upgrade");
    wait_job(&jobs, "through-upgrade", "Running").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &op_ns);
    let before = ready_operator_pods(&pods, 2).await;
    let mut upgrade = cluster::helm();
    upgrade
        .current_dir(cluster::repo_dir())
        .args([
            "upgrade",
            RELEASE,
            CHART,
            "--namespace",
            &op_ns,
            "--wait",
            "--timeout",
            "5m",
        ])
        .args(release_args(&jobs_ns))
        .args(["--set", "workers=2"]);
    cluster::run_ok(&mut upgrade);
    let deployment = deployments
        .get(&format!("{RELEASE}-tfjob-operator"))
        .await
        .expect("the Deployment");
    let args = deployment
        .spec
        .and_then(|s| s.template.spec)
        .map(|s| s.containers[0].args.clone().unwrap_or_default());
    assert!(
        args.unwrap_or_default().iter().any(|a| a == "--workers=2"),
        "the upgrade did not change the flags"
    );
    let before_names: Vec<String> = before
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let after = cluster::wait_until("the rollout to replace both Pods", STEP_TIMEOUT, || async {
        let now = ready_operator_pods(&pods, 2).await;
        now.iter()
            .all(|p| !before_names.contains(&p.metadata.name.clone().unwrap_or_default()))
            .then_some(now)
    })
    .await;
    steps.say(&format!(
        "helm upgrade rolled the Pods: {:?}",
        after
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    ));
    wait_job(&jobs, "through-upgrade", "Succeeded").await;
    assert!(support::logs(&jobs_ns, "through-upgrade-worker-0").contains("survived"));
    steps.say("TFJob through-upgrade Succeeded across the upgrade");

    let mut uninstall = cluster::helm();
    uninstall.args([
        "uninstall",
        RELEASE,
        "--namespace",
        &op_ns,
        "--wait",
        "--timeout",
        "3m",
    ]);
    cluster::run_ok(&mut uninstall);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.get("tfjobs.kubeflow.org")
        .await
        .expect("helm uninstall kept the CRD");
    for name in ["first", "after-handover", "through-upgrade"] {
        let job = jobs
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("TFJob {name} is gone after uninstall: {e}"));
        assert!(
            condition_true(&job, "Succeeded"),
            "TFJob {name}: {:?}",
            job.status
        );
    }
    steps.say("helm uninstall kept the CRD and the jobs");
    cluster::delete_namespace(&client, &op_ns).await;
    cluster::delete_namespace(&client, &jobs_ns).await;
}
