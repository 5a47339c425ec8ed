//! The move from training-operator with Kueue's built-in TFJob integration
//! on (issue #40 point 1): a job the built-in admitted stays admitted, one
//! it suspended stays suspended, and switching the built-in off later
//! admits neither twice.
//!
//! Kueue starts for this test only, with its built-in `kubeflow.org/tfjob`
//! integration on ([`Mode::Builtin`]: its controller serves Kubeflow's CRD,
//! installed before Kueue starts in this phase), and a ClusterQueue with
//! quota for one job (2 cpu; each job is a Chief and a Worker of 1 cpu).
//! Under the real training-operator v1.9.2 the built-in admits `admitted`
//! (training-operator creates its Pods, KWOK runs them) and suspends
//! `waiting` (no quota left). Then, as docs/operating.md "Moving from
//! training-operator" says, training-operator stops and ours starts with
//! `--kueue=builtin`: for [`STILL_FOR`] no Pod or Service is created,
//! deleted or rewritten, `waiting` stays suspended with no Pods, each job
//! keeps exactly its one Workload (the built-in's: no
//! [`LABEL_CREATED_BY`]), the admitted Workload keeps its
//! `status.admission`, and the ClusterQueue still counts one admitted
//! Workload. Ending `admitted` hands the quota on through the built-in:
//! ours marks it Succeeded, Kueue finishes its Workload, admits `waiting`
//! and unsuspends it, ours creates its Pods. Last, the built-in is switched
//! off as docs/kueue.md sets Kueue up without it (Kueue restarted with
//! `externalFrameworks`, ours restarted with `--kueue=workload`): for
//! [`STILL_FOR`] neither job gets a second Workload, the ClusterQueue's
//! admitted count does not rise, and `waiting`'s Pods keep their UIDs.
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tfjob_operator::tfjob::integrations::kueue::workload::LABEL_CREATED_BY;
use tokio::time::Instant;

use super::recorder::{Change, Recorder};
use super::{
    SLOW, STILL_FOR, is_true, job_pods, kubeflow_crd_namespace, manifest, replica, tfjobs, wait_job,
};
use crate::cluster::{delete_namespace_in_background, kubectl, wait_until};
use crate::operator::Operator;
use crate::support::{drive_pod_exit, shared_cluster};
use crate::test_kueue::{self, Kueue, Mode, QUEUE, QUEUE_LABEL};
use crate::training_operator::TrainingOperator;

/// Quota for one job: a Chief and a Worker of 1 cpu.
const CPU_QUOTA: &str = "2";
/// Kueue without its built-in, as `make e2e` runs it (`e2e/kueue.sh`
/// workload mode's default `waitForPodsReady` timeout).
const WITHOUT_BUILTIN: Mode = Mode::Workload {
    pods_ready_timeout: "20s",
};

/// A Chief and a Worker of 1 cpu each, in the LocalQueue.
fn queued(name: &str) -> DynamicObject {
    let mut specs =
        json!({ "Chief": replica("Never", json!({})), "Worker": replica("Never", json!({})) });
    for rtype in ["Chief", "Worker"] {
        specs[rtype]["template"]["spec"]["containers"][0]["resources"] =
            json!({ "requests": { "cpu": "1" } });
    }
    let mut job = manifest(name, specs, json!({}));
    job.metadata.labels = Some(BTreeMap::from([(QUEUE_LABEL.into(), QUEUE.into())]));
    job
}

fn suspended(job: &DynamicObject) -> bool {
    job.data["spec"]["runPolicy"]["suspend"] == true
}

fn running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The namespace's Workloads by the job that controls them (`(none)` for
/// one no job of `uids` controls).
async fn workloads_by_job(
    client: &Client,
    ns: &str,
    uids: &BTreeMap<String, String>,
) -> Option<BTreeMap<String, Vec<DynamicObject>>> {
    let list = test_kueue::workloads(client, ns)
        .list(&ListParams::default())
        .await
        .ok()?;
    let mut by_job: BTreeMap<String, Vec<DynamicObject>> = BTreeMap::new();
    for w in list.items {
        let job = uids
            .iter()
            .find(|(_, uid)| test_kueue::controlled_by(&w, uid))
            .map_or("(none)", |(name, _)| name.as_str());
        by_job.entry(job.to_owned()).or_default().push(w);
    }
    Some(by_job)
}

/// What of the Workloads a switch must keep: per job, each Workload's name,
/// UID, whether ours made it, and its admission.
fn workload_view(by_job: &BTreeMap<String, Vec<DynamicObject>>) -> Value {
    let mut out = serde_json::Map::new();
    for (job, workloads) in by_job {
        let seen: Vec<Value> = workloads
            .iter()
            .map(|w| {
                json!({
                    "name": w.name_any(), "uid": w.uid(),
                    "ours": w.labels().contains_key(LABEL_CREATED_BY),
                    "admission": w.data["status"]["admission"],
                })
            })
            .collect();
        out.insert(job.clone(), Value::from(seen));
    }
    Value::Object(out)
}

/// Watches for `window` from now and fails at the first thing that moved
/// since `since`: a Pod or Service change (the recorder), or a non-empty
/// answer of `check` (asked twice a second).
async fn hold_still<F, Fut>(
    recorder: &Recorder,
    since: Instant,
    window: Duration,
    what: &str,
    check: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Vec<String>>,
{
    let deadline = Instant::now() + window;
    loop {
        let changes: Vec<String> = recorder
            .changes_since(since)
            .into_iter()
            .map(|c: Change| c.what)
            .collect();
        assert!(
            changes.is_empty(),
            "{what}: Pods or Services changed: {changes:#?}"
        );
        let wrong = check().await;
        assert!(wrong.is_empty(), "{what}: {wrong:#?}");
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Deletes the namespace even when the test panics. Kueue's finalizer is
/// taken off the Workloads first: after the switch no Kueue controller
/// removes it from the built-in's Workloads, and it would keep the
/// namespace terminating.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let ns = &self.0;
        let names = kubectl()
            .args(["-n", ns, "get", "workloads.kueue.x-k8s.io", "-o", "name"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for name in names.lines() {
            let _ = kubectl()
                .args(["-n", ns, "patch", name, "--type=merge"])
                .args(["-p", r#"{"metadata":{"finalizers":null}}"#])
                .output();
        }
        delete_namespace_in_background(ns);
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kueues_built_in_keeps_its_admitted_job_admitted_and_its_waiting_job_suspended_across_the_switch_and_switching_it_off_later_admits_nothing_twice()
 {
    let _cluster = shared_cluster().await;
    let (client, ns) = kubeflow_crd_namespace("kueue-switch").await;
    let jobs = tfjobs(&client, &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    // 1. Kueue with its built-in; training-operator runs the jobs.
    let kueue = Kueue::start(&client, &ns, Mode::Builtin, CPU_QUOTA).await;
    let _cleanup = Cleanup(ns.clone());
    let mut kubeflow = TrainingOperator::start(&client, &ns).await;
    let workload_of = |job: &'static str| {
        let (client, ns, jobs) = (client.clone(), ns.clone(), jobs.clone());
        async move {
            let uid = jobs.get_opt(job).await.ok().flatten()?.uid()?;
            test_kueue::workload_of(&client, &ns, &uid).await
        }
    };

    // 2. `admitted` runs; `waiting`, created after it, finds no quota.
    let mut uids = BTreeMap::new();
    for name in ["admitted", "waiting"] {
        let job = jobs
            .create(&PostParams::default(), &queued(name))
            .await
            .unwrap_or_else(|e| panic!("failed to create TFJob {name}: {e}"));
        uids.insert(name.to_owned(), job.uid().expect("a created job has a UID"));
        if name == "admitted" {
            wait_until(
                "the built-in to admit `admitted` and training-operator to run its Pods",
                SLOW,
                || async {
                    let w = workload_of("admitted").await?;
                    let job = jobs.get_opt("admitted").await.ok().flatten()?;
                    let pods = job_pods(&pods, "admitted").await;
                    (test_kueue::condition_true(&w, "Admitted")
                        && !suspended(&job)
                        && is_true(&job, "Running")
                        && pods.len() == 2
                        && pods.iter().all(running))
                    .then_some(())
                },
            )
            .await;
        }
    }
    wait_until(
        "the built-in to hold `waiting`: suspended, its Workload without quota",
        SLOW,
        || async {
            let w = workload_of("waiting").await?;
            let job = jobs.get_opt("waiting").await.ok().flatten()?;
            let pending =
                test_kueue::condition(&w, "QuotaReserved").is_some_and(|c| c["status"] == "False");
            (pending && suspended(&job) && is_true(&job, "Suspended")).then_some(())
        },
    )
    .await;
    assert!(
        job_pods(&pods, "waiting").await.is_empty(),
        "`waiting` got Pods before Kueue admitted it"
    );

    // 3. The switch. `--kueue=builtin`: the mode docs/kueue.md gives for
    // Kueue's built-in on (the built-in makes and drives every Workload; ours
    // honours `spec.runPolicy.suspend` as training-operator did), so nothing
    // of the queue changes hands with the controller.
    kubeflow.stop();
    let before = workloads_by_job(&client, &ns, &uids)
        .await
        .expect("list the Workloads");
    wait_until(
        "the ClusterQueue to count one admitted Workload",
        SLOW,
        || async { (kueue.admitted_workloads(&client).await == Some(1)).then_some(()) },
    )
    .await;
    let recorder = Recorder::start(&client, &ns).await;
    let switched = Instant::now();
    let mut ours = Operator::start_with(&ns, &["--kueue=builtin"], None);
    ours.wait_ready().await;
    let log = ours.log.display().to_string();
    hold_still(
        &recorder,
        switched,
        STILL_FOR,
        &format!("ours taking over from training-operator under Kueue's built-in (log: {log})"),
        || async {
            let mut wrong = Vec::new();
            match workloads_by_job(&client, &ns, &uids).await {
                Some(now) if workload_view(&now) != workload_view(&before) => wrong.push(format!(
                    "the Workloads changed: {:#} -> {:#}",
                    workload_view(&before),
                    workload_view(&now)
                )),
                _ => {}
            }
            if let Ok(Some(job)) = jobs.get_opt("waiting").await
                && !suspended(&job)
            {
                wrong.push("`waiting` is no longer suspended".to_owned());
            }
            if let Some(n) = kueue.admitted_workloads(&client).await
                && n != 1
            {
                wrong.push(format!("the ClusterQueue counts {n} admitted Workloads"));
            }
            wrong
        },
    )
    .await;
    for (job, workloads) in &before {
        assert_eq!(workloads.len(), 1, "{job}: {:#}", workload_view(&before));
        assert!(
            !workloads[0].labels().contains_key(LABEL_CREATED_BY),
            "{job}'s Workload is not the built-in's"
        );
    }

    // 4. `admitted` ends: the quota goes to `waiting` through the built-in.
    drive_pod_exit(&client, &ns, "admitted-chief-0", None, 0).await;
    let handing_on = Instant::now();
    wait_job(&jobs, "admitted", "Succeeded under ours", |j| {
        is_true(j, "Succeeded")
    })
    .await;
    wait_until(
        "the built-in to finish `admitted`'s Workload",
        SLOW,
        || async {
            let w = workload_of("admitted").await?;
            test_kueue::condition_true(&w, "Finished").then_some(())
        },
    )
    .await;
    let waiting_pods = wait_until(
        &format!("the built-in to admit `waiting` and ours to run its Pods (log: {log})"),
        SLOW,
        || async {
            let w = workload_of("waiting").await?;
            let job = jobs.get_opt("waiting").await.ok().flatten()?;
            let pods = job_pods(&pods, "waiting").await;
            (test_kueue::condition_true(&w, "Admitted")
                && !suspended(&job)
                && is_true(&job, "Running")
                && pods.len() == 2
                && pods.iter().all(running))
            .then_some(pods)
        },
    )
    .await;
    let moved: Vec<String> = recorder
        .changes_since(handing_on)
        .into_iter()
        .filter(|c| !c.what.contains(" rewritten: "))
        .filter(|c| !(c.job == "waiting" && c.what.ends_with(" created")))
        .map(|c| c.what)
        .collect();
    assert!(
        moved.is_empty(),
        "only `waiting`'s Pods and Services were to be created: {moved:#?}"
    );

    // 5. The built-in switched off later, as docs/kueue.md sets Kueue up
    // without it: Kueue restarted with `externalFrameworks`, ours restarted
    // with `--kueue=workload`.
    let pod_uids: BTreeMap<String, Option<String>> = waiting_pods
        .iter()
        .map(|p| (p.name_any(), p.uid()))
        .collect();
    wait_until(
        "the ClusterQueue to count `waiting` alone",
        SLOW,
        || async { (kueue.admitted_workloads(&client).await == Some(1)).then_some(()) },
    )
    .await;
    let handed_over = workloads_by_job(&client, &ns, &uids)
        .await
        .expect("list the Workloads");
    let switching = Instant::now();
    assert!(
        ours.terminate(Duration::from_secs(10)),
        "ours stops on SIGTERM"
    );
    kueue.switch(&client, WITHOUT_BUILTIN).await;
    let mut ours = Operator::start_with(&ns, &["--kueue=workload"], None);
    ours.wait_ready().await;
    let log = ours.log.display().to_string();
    hold_still(
        &recorder,
        switching,
        STILL_FOR,
        &format!("Kueue's built-in switched off, ours at --kueue=workload (log: {log})"),
        || async {
            let mut wrong = Vec::new();
            match workloads_by_job(&client, &ns, &uids).await {
                Some(now) if workload_view(&now) != workload_view(&handed_over) => {
                    wrong.push(format!(
                        "the Workloads changed: {:#} -> {:#}",
                        workload_view(&handed_over),
                        workload_view(&now)
                    ))
                }
                _ => {}
            }
            if let Some(n) = kueue.admitted_workloads(&client).await
                && n > 1
            {
                wrong.push(format!("the ClusterQueue counts {n} admitted Workloads"));
            }
            wrong
        },
    )
    .await;
    let now: BTreeMap<String, Option<String>> = job_pods(&pods, "waiting")
        .await
        .iter()
        .map(|p| (p.name_any(), p.uid()))
        .collect();
    assert_eq!(now, pod_uids, "`waiting`'s Pods were replaced");
}
