//! Kueue's API installed after the operator started (#38, defect 1): it is
//! found without a restart, the running queued job is stopped and held, and
//! a new one never starts unadmitted. No Kueue runs to admit them: the CRDs
//! alone (no schema) are what the operator discovers. Runs in the main pass,
//! where Kueue is not installed (it skips where Kueue's CRDs exist), holding
//! the cluster exclusively: every operator at `--kueue=auto` would find the
//! CRDs.
//!
//! A discovery error from outside (the other half of the defect): Kueue's
//! group version is made to answer 503 by taking over the API server's own
//! APIService for it (`v1beta2.kueue.x-k8s.io`, which the aggregator
//! manages for a CRD group) and pointing it at a Service that does not
//! exist, as an aggregated API that is down (metrics-server gone) answers.
//! The operator at `auto` must not take that for "no Kueue".
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;

use crate::cluster::{client, delete_namespace, kubectl, test_namespace, wait_until};
use crate::kueue::job_condition_reason;
use crate::loopback::http_get;
use crate::operator::{Operator, ensure_crd};
use crate::support::exclusive_cluster;

/// `kubectl <verb> -f -` with `yaml`; Err(stderr) when it fails.
fn kubectl_stdin(verb: &[&str], yaml: &str) -> Result<(), String> {
    let mut child = kubectl()
        .args(verb)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(yaml.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Cluster objects deleted when the test ends, however it ends.
struct Applied(String);

impl Applied {
    fn new(yaml: String) -> Self {
        kubectl_stdin(&["apply"], &yaml).unwrap_or_else(|e| panic!("kubectl apply: {e}"));
        Self(yaml)
    }

    fn delete(&self) {
        kubectl_stdin(&["delete", "--ignore-not-found", "--wait=false"], &self.0)
            .unwrap_or_else(|e| panic!("kubectl delete: {e}"));
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        let _ = kubectl_stdin(&["delete", "--ignore-not-found", "--wait=false"], &self.0);
    }
}

/// Kueue's two kinds the operator reads, without a schema: served is all
/// discovery asks.
fn kueue_crds() -> String {
    let crd = |plural: &str, kind: &str, scope: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata: {{name: {plural}.kueue.x-k8s.io}}\nspec:\n  group: kueue.x-k8s.io\n\
             \x20 names: {{plural: {plural}, kind: {kind}}}\n  scope: {scope}\n  versions:\n\
             \x20 - name: v1beta2\n    served: true\n    storage: true\n    subresources: {{status: {{}}}}\n\
             \x20   schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n"
        )
    };
    format!(
        "{}---\n{}",
        crd("workloads", "Workload", "Namespaced"),
        crd("resourceflavors", "ResourceFlavor", "Cluster")
    )
}

/// A one-worker job labelled with a queue.
fn queued_job(name: &str, ns: &str) -> TFJob {
    let mut job = TfJobFixture::new(name).workers(1).namespace(ns).build();
    job.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("kueue.x-k8s.io/queue-name".into(), "queue".into());
    job
}

async fn job_pods(pods: &Api<Pod>, name: &str) -> usize {
    let lp = ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"));
    pods.list(&lp)
        .await
        .map(|l| l.items.len())
        .unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kueue_installed_after_the_operator_started_is_found_and_queued_jobs_are_held() {
    let _cluster = exclusive_cluster().await;
    let client = client().await;
    let installed = kubectl()
        .args(["get", "crd", "workloads.kueue.x-k8s.io"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        eprintln!("skipping: Kueue's CRDs are installed already");
        return;
    }
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "kueue-later").await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;
    let port = operator.probe_port;
    let (_, body) = http_get(port, "/readyz").expect("/readyz");
    assert!(
        body.contains("kueue: auto, no kueue.x-k8s.io Workloads served"),
        "{body}"
    );
    // Without Kueue the queue label is ignored: the job runs.
    jobs.create(&PostParams::default(), &queued_job("early", &ns))
        .await
        .expect("create early");
    wait_until("early's Pod", Duration::from_secs(60), || async {
        (job_pods(&pods, "early").await > 0).then_some(())
    })
    .await;

    let crds = Applied::new(kueue_crds());
    let log = operator.log.display().to_string();
    wait_until(
        &format!("Kueue to be found after the start (log: {log})"),
        Duration::from_secs(60),
        || async move {
            http_get(port, "/readyz").filter(|(code, body)| {
                *code == 200
                    && body.contains("Workloads served")
                    && body.contains("(found after the start)")
            })
        },
    )
    .await;
    // The running queued job gets its Workload and is stopped, as Kueue
    // stops a job that runs without an admitted Workload.
    let workloads = crate::test_kueue::kueue_api(&client, "Workload", "workloads", Some(&ns));
    wait_until(
        &format!("early to be stopped and held with a Workload (log: {log})"),
        Duration::from_secs(60),
        || async {
            let job = jobs.get_opt("early").await.ok().flatten()?;
            let reason = job_condition_reason(&job, "Suspended")?;
            let has_workload = !workloads
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty();
            (reason == "TFJobQueued" && has_workload && job_pods(&pods, "early").await == 0)
                .then_some(())
        },
    )
    .await;
    // A job queued now never starts: nothing admits it.
    jobs.create(&PostParams::default(), &queued_job("late", &ns))
        .await
        .expect("create late");
    wait_until("late to be held", Duration::from_secs(60), || async {
        let job = jobs.get_opt("late").await.ok().flatten()?;
        (job_condition_reason(&job, "Suspended").as_deref() == Some("TFJobQueued")).then_some(())
    })
    .await;
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(10) {
        assert_eq!(
            job_pods(&pods, "late").await,
            0,
            "late ran unadmitted (log: {log})"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let late = jobs.get("late").await.expect("late");
    assert_ne!(
        late.spec.run_policy.suspend,
        Some(true),
        "held without writing its spec"
    );

    delete_jobs_and_their_workloads(&jobs, &workloads).await;
    drop(operator);
    crds.delete();
    delete_namespace(&client, &ns).await;
}

/// Deletes the test's jobs and waits until their Workloads are gone: the
/// operator takes Kueue's finalizer off a deleted job's Workloads, and only
/// then can Kueue's CRDs be deleted.
async fn delete_jobs_and_their_workloads(
    jobs: &Api<TFJob>,
    workloads: &Api<kube::api::DynamicObject>,
) {
    jobs.delete_collection(&Default::default(), &ListParams::default())
        .await
        .expect("delete the jobs");
    wait_until(
        "the Workloads to be gone",
        Duration::from_secs(60),
        || async {
            workloads
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

/// The APIService through which the API server serves Kueue's CRD group
/// version (created and kept by the aggregator's autoregister controller).
const KUEUE_API_SERVICE: &str = "v1beta2.kueue.x-k8s.io";
/// Autoregister keeps an APIService's spec only while it carries this label.
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

fn patch_kueue_api_service(patch: &str) -> Result<(), String> {
    let out = kubectl()
        .args([
            "patch",
            "apiservice",
            KUEUE_API_SERVICE,
            "--type=merge",
            "-p",
            patch,
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Kueue's APIService taken over from outside: no longer managed by
/// autoregister, and proxied to a Service that does not exist, so the
/// aggregator answers 503 for `/apis/kueue.x-k8s.io/v1beta2` (the group
/// itself is still listed). Given back when dropped, however the test ends:
/// later tests of the pass use Kueue's API.
struct BrokenKueueApi;

impl BrokenKueueApi {
    fn take_over() -> Self {
        // One write: with the label still on, autoregister would put the
        // spec back.
        let patch = format!(
            r#"{{"metadata":{{"labels":{{"{AUTOMANAGED}":null}}}},"spec":{{"service":{{"namespace":"default","name":"no-such-kueue","port":443}},"insecureSkipTLSVerify":true}}}}"#
        );
        patch_kueue_api_service(&patch).unwrap_or_else(|e| panic!("take the APIService over: {e}"));
        Self
    }

    /// Served by the API server itself again, and managed by autoregister.
    /// Then deleted, for autoregister to create it afresh: the aggregated
    /// discovery (`/apis`, which the garbage collector reads) keeps the
    /// version `Stale` after the patch alone, so the Workloads of deleted
    /// jobs would never be collected.
    fn restore(&self) -> Result<(), String> {
        patch_kueue_api_service(&format!(
            r#"{{"metadata":{{"labels":{{"{AUTOMANAGED}":"true"}}}},"spec":{{"service":null,"insecureSkipTLSVerify":null}}}}"#
        ))?;
        let out = kubectl()
            .args([
                "delete",
                "apiservice",
                KUEUE_API_SERVICE,
                "--ignore-not-found",
            ])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for BrokenKueueApi {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("could not give {KUEUE_API_SERVICE} back: {e}");
        }
    }
}

/// What `kubectl get --raw /apis/kueue.x-k8s.io/v1beta2` answers: the body,
/// or the error kubectl printed.
fn kueue_group_version() -> Result<String, String> {
    let out = kubectl()
        .args(["get", "--raw", "/apis/kueue.x-k8s.io/v1beta2"])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_discovery_error_is_not_taken_for_no_kueue_and_a_queued_job_waits_until_kueue_answers() {
    let _cluster = exclusive_cluster().await;
    let client = client().await;
    let installed = kubectl()
        .args(["get", "crd", "workloads.kueue.x-k8s.io"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        eprintln!("skipping: Kueue's CRDs are installed already");
        return;
    }
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "kueue-error").await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let crds = Applied::new(kueue_crds());
    wait_until(
        "the API server to serve Kueue's Workloads",
        Duration::from_secs(60),
        || async {
            kueue_group_version()
                .ok()?
                .contains("\"workloads\"")
                .then_some(())
        },
    )
    .await;
    let broken = BrokenKueueApi::take_over();
    let error = wait_until(
        "Kueue's group version to answer 503",
        Duration::from_secs(60),
        || async {
            kueue_group_version()
                .err()
                .filter(|e| e.contains("ServiceUnavailable"))
        },
    )
    .await;
    eprintln!(
        "kubectl get --raw /apis/kueue.x-k8s.io/v1beta2: {}",
        error.trim()
    );

    // Queued before the operator starts: nothing must run it while the
    // server cannot say whether Kueue is there.
    jobs.create(&PostParams::default(), &queued_job("queued", &ns))
        .await
        .expect("create queued");
    let started = Instant::now();
    let operator = Operator::start(&ns);
    let port = operator.probe_port;
    let log = operator.log.display().to_string();
    let (code, body) = wait_until(
        &format!("/readyz to answer about Kueue (log: {log})"),
        Duration::from_secs(60),
        || async move {
            http_get(port, "/readyz").filter(|(code, body)| {
                *code == 200 || body.contains("could not ask the API server for kueue.x-k8s.io")
            })
        },
    )
    .await;
    assert_ne!(code, 200, "ready while discovery answered 503: {body}");
    assert!(
        body.contains("503") || body.contains("unable to handle the request"),
        "/readyz does not name the error: {body}"
    );
    eprintln!(
        "{:.1} s after the start, /readyz ({code}):\n{body}",
        started.elapsed().as_secs_f64()
    );
    // The error window: the job gets no Pod and the operator stays unready.
    let window = Duration::from_secs(15);
    let since = Instant::now();
    while since.elapsed() < window {
        assert_eq!(
            job_pods(&pods, "queued").await,
            0,
            "queued ran while discovery answered 503 (log: {log})"
        );
        let (code, body) = http_get(port, "/readyz").expect("/readyz");
        assert_ne!(code, 200, "ready while discovery answered 503: {body}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // The error goes away: Kueue is found and the job is held.
    broken
        .restore()
        .unwrap_or_else(|e| panic!("give {KUEUE_API_SERVICE} back: {e}"));
    let restored = Instant::now();
    let (_, body) = wait_until(
        &format!("Kueue to be found once discovery answers (log: {log})"),
        Duration::from_secs(60),
        || async move {
            http_get(port, "/readyz").filter(|(code, body)| {
                *code == 200 && body.contains("kueue.x-k8s.io/v1beta2 Workloads served")
            })
        },
    )
    .await;
    eprintln!(
        "ready {:.1} s after the APIService was given back:\n{body}",
        restored.elapsed().as_secs_f64()
    );
    let workloads = crate::test_kueue::kueue_api(&client, "Workload", "workloads", Some(&ns));
    wait_until(
        &format!("queued to be held with a Workload (log: {log})"),
        Duration::from_secs(60),
        || async {
            let job = jobs.get_opt("queued").await.ok().flatten()?;
            let reason = job_condition_reason(&job, "Suspended")?;
            let has_workload = !workloads
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty();
            (reason == "TFJobQueued" && has_workload).then_some(())
        },
    )
    .await;
    eprintln!(
        "held as queued {:.1} s after the APIService was given back",
        restored.elapsed().as_secs_f64()
    );
    assert_eq!(
        job_pods(&pods, "queued").await,
        0,
        "queued ran unadmitted (log: {log})"
    );
    let queued = jobs.get("queued").await.expect("queued");
    assert_ne!(
        queued.spec.run_policy.suspend,
        Some(true),
        "held without writing its spec"
    );

    delete_jobs_and_their_workloads(&jobs, &workloads).await;
    drop(operator);
    drop(broken);
    crds.delete();
    // Gone before the next test asks whether Kueue's CRDs are installed.
    wait_until(
        "Kueue's CRDs to be gone",
        Duration::from_secs(60),
        || async {
            let listed = kubectl()
                .args([
                    "get",
                    "crd",
                    "workloads.kueue.x-k8s.io",
                    "resourceflavors.kueue.x-k8s.io",
                ])
                .args(["--ignore-not-found", "-o", "name"])
                .output()
                .ok()?;
            (listed.status.success() && listed.stdout.is_empty()).then_some(())
        },
    )
    .await;
    delete_namespace(&client, &ns).await;
}
