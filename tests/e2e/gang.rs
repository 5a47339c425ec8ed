//! Gang scheduling (#30) end to end: the operator's PodGroups and the real
//! kube-scheduler's GangScheduling plugin, on KWOK nodes of declared
//! capacity that only the test's Pods may use (a taint and a label per
//! test), so the scheduler's arithmetic is the test's.
//!
//! Each placement scenario also runs with `--gang-scheduling=off`, where the
//! same job is placed in part: the feature, not the capacity, makes the
//! difference. On a server without the Workload API (Kubernetes 1.34, `make
//! e2e-other-version`) the placement scenarios have nothing to test and say
//! so; [`without_the_api_jobs_run_as_before_with_the_warning`] checks that
//! the operator behaves as it always did there.
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::pod_group::PodGroup;
use tfjob_operator::api::types::{RestartPolicy, SchedulingPolicy, TFJob};

use crate::cluster::{client, random_suffix, test_namespace, wait_until};
use crate::loopback::http_get;
use crate::operator::{Operator, ensure_crd};
use crate::support::{drive_pod_exit, kube_minor, shared_cluster};

const SLOW: Duration = Duration::from_secs(90);
/// The label and taint of a test's own nodes (value: the test's namespace).
const GANG_NODE: &str = "e2e.tfjob-operator.local/gang-test";

/// Whether the cluster serves the Workload API (1.37 with the harness's gates).
fn workload_api() -> bool {
    kube_minor() >= 37
}

macro_rules! needs_workload_api {
    () => {
        if !workload_api() {
            eprintln!(
                "Kubernetes {}: no scheduling.k8s.io/v1beta1 PodGroups, nothing to place as a gang",
                crate::support::kube_version()
            );
            return;
        }
    };
}

/// A namespace, its operator, and `nodes` fake nodes of 2 CPUs each that only
/// this test's Pods tolerate. Every replica asks for 1 CPU: each node holds
/// two Pods.
struct GangEnv {
    _cluster: tokio::sync::OwnedRwLockReadGuard<()>,
    client: Client,
    ns: String,
    operator: Operator,
    jobs: Api<TFJob>,
    pods: Api<Pod>,
    groups: Api<PodGroup>,
    nodes: Vec<String>,
}

impl GangEnv {
    async fn new(prefix: &str, nodes: usize, operator_args: &[&str]) -> Self {
        let cluster = shared_cluster().await;
        let client = client().await;
        ensure_crd(&client).await;
        let ns = test_namespace(&client, prefix).await;
        let node_api: Api<Node> = Api::all(client.clone());
        let mut names = Vec::new();
        for _ in 0..nodes {
            let name = format!("gang-{}", random_suffix());
            let node: Node = serde_json::from_value(serde_json::json!({
                "metadata": {
                    "name": name,
                    "annotations": { "kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0" },
                    // Not `type: kwok`: the harness counts those as its own four.
                    "labels": { "kubernetes.io/hostname": name, GANG_NODE: ns },
                },
                "spec": { "taints": [{ "key": GANG_NODE, "value": ns, "effect": "NoSchedule" }] },
                "status": {
                    "capacity": { "cpu": "2", "memory": "8Gi", "pods": "110" },
                    "allocatable": { "cpu": "2", "memory": "8Gi", "pods": "110" },
                },
            }))
            .expect("a valid Node");
            node_api
                .create(&PostParams::default(), &node)
                .await
                .expect("a gang test node");
            names.push(name);
        }
        wait_until("the test's nodes to be Ready", SLOW, || async {
            let mut ready = 0;
            for n in &names {
                let node = node_api.get_opt(n).await.ok().flatten()?;
                let is_ready = node
                    .status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                ready += usize::from(is_ready);
            }
            (ready == names.len()).then_some(())
        })
        .await;
        let mut operator = Operator::start_with(&ns, operator_args, None);
        operator.wait_ready().await;
        Self {
            _cluster: cluster,
            jobs: Api::namespaced(client.clone(), &ns),
            pods: Api::namespaced(client.clone(), &ns),
            groups: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            operator,
            nodes: names,
        }
    }

    /// A job of `workers` Workers (1 CPU each) on this test's nodes; with a
    /// `schedulingPolicy` when `gang` (auto mode gangs it).
    async fn create(&self, name: &str, workers: i32, gang: bool) -> TFJob {
        self.create_with(name, workers, gang, |_| {}).await
    }

    /// [`Self::create`], after `edit` changed the job.
    async fn create_with(
        &self,
        name: &str,
        workers: i32,
        gang: bool,
        edit: impl FnOnce(&mut TFJob),
    ) -> TFJob {
        let mut job = TfJobFixture::new(name)
            .namespace(&self.ns)
            .workers(workers)
            .build();
        edit(&mut job);
        if gang {
            job.spec.run_policy.scheduling_policy = Some(SchedulingPolicy::default());
        }
        for rs in job.spec.tf_replica_specs.values_mut() {
            let spec = rs.template.spec.as_mut().expect("a pod spec");
            spec.node_selector = Some(BTreeMap::from([(GANG_NODE.to_owned(), self.ns.clone())]));
            spec.tolerations = Some(vec![Toleration {
                key: Some(GANG_NODE.into()),
                operator: Some("Equal".into()),
                value: Some(self.ns.clone()),
                effect: Some("NoSchedule".into()),
                ..Toleration::default()
            }]);
            for c in &mut spec.containers {
                c.resources = Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([("cpu".to_owned(), Quantity("1".into()))])),
                    ..ResourceRequirements::default()
                });
            }
        }
        self.jobs
            .create(&PostParams::default(), &job)
            .await
            .unwrap_or_else(|e| panic!("failed to create TFJob {name}: {e}"))
    }

    async fn job_pods(&self, name: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"));
        self.pods
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// (Pods of the job, how many of them are bound to a node).
    async fn placed(&self, name: &str) -> (usize, usize) {
        let pods = self.job_pods(name).await;
        let bound = pods.iter().filter(|p| node_of(p).is_some()).count();
        (pods.len(), bound)
    }

    async fn wait_running(&self, name: &str, n: usize) -> Vec<Pod> {
        let what = format!("{n} running pods of {}/{name}", self.ns);
        wait_until(&what, SLOW, || async {
            let pods = self.job_pods(name).await;
            let running = pods.iter().filter(|p| running(p)).count();
            (pods.len() == n && running == n).then_some(pods)
        })
        .await
    }

    /// Waits until the job's status says its gang cannot be placed, and
    /// returns that condition's message.
    async fn wait_gang_unplaced(&self, name: &str) -> String {
        let what = format!(
            "TFJob {}/{name} to report its unplaced gang (operator log: {})",
            self.ns,
            self.operator.log.display()
        );
        wait_until(&what, SLOW, || async {
            let job = self.jobs.get_opt(name).await.ok().flatten()?;
            let c = job
                .status?
                .conditions
                .into_iter()
                .find(|c| c.reason.as_deref() == Some("GangUnschedulable"))?;
            c.message
        })
        .await
    }

    /// Each Pod's `spec.schedulingGroup.podGroupName`, read from the raw
    /// object (our k8s-openapi types are 1.33's, without the field).
    async fn pod_groups_of_pods(&self, name: &str) -> Vec<String> {
        let resource = ApiResource::erase::<Pod>(&());
        let raw: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.ns, &resource);
        let lp = ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"));
        raw.list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .iter()
            .map(|p| {
                p.data["spec"]["schedulingGroup"]["podGroupName"]
                    .as_str()
                    .unwrap_or("<none>")
                    .to_owned()
            })
            .collect()
    }

    async fn warnings(&self, reason: &str) -> Vec<String> {
        crate::support::warnings(&self.client, &self.ns, reason).await
    }

    async fn delete_job(&self, name: &str) {
        self.jobs
            .delete(name, &DeleteParams::foreground())
            .await
            .unwrap_or_else(|e| panic!("failed to delete TFJob {name}: {e}"));
        wait_until(
            &format!("TFJob {name} and its Pods to go"),
            SLOW,
            || async {
                (self.jobs.get_opt(name).await.ok().flatten().is_none()
                    && self.job_pods(name).await.is_empty())
                .then_some(())
            },
        )
        .await;
    }

    async fn remove_nodes(self) {
        let api: Api<Node> = Api::all(self.client.clone());
        for n in &self.nodes {
            let _ = api.delete(n, &DeleteParams::default()).await;
        }
    }
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The job's Pods are all created and none is bound, over `window` (the
/// gang is checked after the scheduler has already said it does not fit, so
/// this guards against a late partial bind, not a slow scheduler).
async fn assert_none_bound_for(env: &GangEnv, name: &str, pods: usize, window: Duration) {
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        let (n, bound) = env.placed(name).await;
        assert_eq!(n, pods, "{name} should have all {pods} Pods created");
        assert_eq!(
            bound, 0,
            "{name}: {bound} of {pods} Pods bound, a gang binds all or none"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_gang_that_does_not_fit_binds_nothing_beside_a_running_job_then_binds_at_once() {
    needs_workload_api!();
    // 2 nodes x 2 CPUs: the small job takes 1, the gang of 4 needs 4.
    let env = GangEnv::new("gang-fit", 2, &[]).await;
    env.create("small", 1, false).await;
    env.wait_running("small", 1).await;
    env.create("big", 4, true).await;

    let message = env.wait_gang_unplaced("big").await;
    assert!(message.contains("3 of 4 Pods fit"), "{message}");
    assert_none_bound_for(&env, "big", 4, Duration::from_secs(3)).await;
    let warnings = env.warnings("GangUnschedulable").await;
    assert!(
        warnings.iter().any(|w| w.contains("3 of 4 Pods fit")),
        "a Warning naming how many fit: {warnings:?}"
    );
    // The group: named like the job, owned by it, every replica needed.
    let group = env.groups.get("big").await.expect("the PodGroup");
    assert_eq!(group.min_count(), Some(4));
    let owner = &group.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("TFJob", "big"));
    assert_eq!(env.pod_groups_of_pods("big").await, vec!["big"; 4]);

    // Free the small job's CPU: the whole gang binds.
    env.delete_job("small").await;
    let pods = env.wait_running("big", 4).await;
    let times: Vec<_> = pods
        .iter()
        .filter_map(|p| {
            p.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "True")?
                .last_transition_time
                .clone()
        })
        .map(|t| t.0)
        .collect();
    assert_eq!(times.len(), 4);
    let spread = times
        .iter()
        .max()
        .expect("4")
        .duration_since(*times.iter().min().expect("4"));
    assert!(
        spread.as_secs_f64() <= 2.0,
        "the gang's Pods were bound {spread:?} apart: not at once"
    );
    env.remove_nodes().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn two_gangs_that_each_fit_alone_but_not_together_never_end_half_placed() {
    needs_workload_api!();
    // 2 nodes x 2 CPUs = 4; each gang needs 3.
    let env = GangEnv::new("gang-two", 2, &[]).await;
    env.create("a", 3, true).await;
    env.create("b", 3, true).await;
    let what = "one gang placed whole and the other not at all";
    let (winner, loser) = wait_until(what, SLOW, || async {
        let (a, b) = (env.placed("a").await, env.placed("b").await);
        match (a, b) {
            ((3, 3), (3, 0)) => Some(("a", "b")),
            ((3, 0), (3, 3)) => Some(("b", "a")),
            _ => None,
        }
    })
    .await;
    env.wait_running(winner, 3).await;
    env.wait_gang_unplaced(loser).await;
    assert_none_bound_for(&env, loser, 3, Duration::from_secs(3)).await;
    let (_, bound) = env.placed(winner).await;
    assert_eq!(bound, 3, "the winner stays whole");
    // The winner goes: the other binds, whole.
    env.delete_job(winner).await;
    env.wait_running(loser, 3).await;
    env.remove_nodes().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn with_gangs_off_the_same_job_is_placed_in_part() {
    needs_workload_api!();
    // The first scenario without the feature: 3 of the 4 Pods bind, one
    // waits, and the job holds 3 CPUs doing nothing.
    let env = GangEnv::new("gang-off", 2, &["--gang-scheduling=off"]).await;
    env.create("small", 1, false).await;
    env.wait_running("small", 1).await;
    env.create("big", 4, true).await;
    wait_until("3 of big's 4 Pods to be bound", SLOW, || async {
        (env.placed("big").await == (4, 3)).then_some(())
    })
    .await;
    assert!(
        env.groups.get_opt("big").await.expect("a get").is_none(),
        "no PodGroup when off"
    );
    assert_eq!(env.pod_groups_of_pods("big").await, vec!["<none>"; 4]);
    let warned = env.warnings("SchedulingPolicyIgnored").await;
    assert!(
        warned.iter().any(|w| w.contains("--gang-scheduling=off")),
        "{warned:?}"
    );
    let (_, body) = http_get(env.operator.probe_port, "/readyz").expect("/readyz answers");
    assert!(body.contains("gang-scheduling: off"), "{body}");
    env.remove_nodes().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_group_follows_scaling_suspend_resume_restarts_and_deletion() {
    needs_workload_api!();
    let mut env = GangEnv::new("gang-life", 2, &[]).await;
    env.create("g", 2, true).await;
    env.wait_running("g", 2).await;
    let first = env.groups.get("g").await.expect("the PodGroup");
    assert_eq!(first.min_count(), Some(2));

    // An operator restart, then a scale-up: the new operator sets minCount
    // (so it has reconciled the job) on the same group (same UID), and no
    // second group appears; the new Pod joins it.
    env.operator.kill();
    let mut operator = Operator::start_with(&env.ns, &[], None);
    operator.wait_ready().await;
    env.operator = operator;
    let scale = |n: i32| serde_json::json!({ "spec": { "tfReplicaSpecs": { "Worker": { "replicas": n } } } });
    env.jobs
        .patch("g", &PatchParams::default(), &Patch::Merge(scale(3)))
        .await
        .expect("scale up");
    env.wait_running("g", 3).await;
    wait_until("minCount 3", SLOW, || async {
        let g = env.groups.get_opt("g").await.ok().flatten()?;
        (g.min_count() == Some(3)).then_some(())
    })
    .await;
    assert_eq!(env.pod_groups_of_pods("g").await, vec!["g"; 3]);
    let list = env
        .groups
        .list(&ListParams::default())
        .await
        .expect("a list");
    assert_eq!(list.items.len(), 1, "one group after the restart");
    assert_eq!(
        list.items[0].metadata.uid, first.metadata.uid,
        "the same group"
    );

    // Suspend: Pods and group go. Resume: a fresh group (a new UID).
    let suspend = |on: bool| serde_json::json!({ "spec": { "runPolicy": { "suspend": on } } });
    env.jobs
        .patch("g", &PatchParams::default(), &Patch::Merge(suspend(true)))
        .await
        .expect("suspend");
    wait_until("the Pods and the group to go", SLOW, || async {
        (env.job_pods("g").await.is_empty()
            && env.groups.get_opt("g").await.ok().flatten().is_none())
        .then_some(())
    })
    .await;
    env.jobs
        .patch("g", &PatchParams::default(), &Patch::Merge(suspend(false)))
        .await
        .expect("resume");
    env.wait_running("g", 3).await;
    let fresh = env.groups.get("g").await.expect("a fresh group");
    assert_ne!(fresh.metadata.uid, first.metadata.uid);
    assert_eq!(env.pod_groups_of_pods("g").await, vec!["g"; 3]);

    // Deleted: garbage collection takes the group with the job.
    env.delete_job("g").await;
    wait_until("the group to be garbage-collected", SLOW, || async {
        env.groups
            .get_opt("g")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    env.remove_nodes().await;
}

/// The scheduler's verdict on the group: `PodGroupInitiallyScheduled`'s status.
async fn initially_scheduled(env: &GangEnv, group: &str) -> Option<String> {
    let g = env.groups.get_opt(group).await.ok().flatten()?;
    Some(g.initially_scheduled()?.status.clone())
}

/// The UID of the job's Pod `name` once it runs on a node.
async fn running_uid(env: &GangEnv, name: &str) -> String {
    wait_until(&format!("{name} to run on a node"), SLOW, || async {
        let pod = env.pods.get_opt(name).await.ok().flatten()?;
        (running(&pod) && node_of(&pod).is_some()).then_some(())?;
        pod.metadata.uid
    })
    .await
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_restarted_worker_joins_its_placed_gang_and_is_bound_alone() {
    needs_workload_api!();
    // kube-scheduler 1.37's GangScheduling counts a group's bound Pods
    // (`ScheduledPodsCount`: assumed or assigned) toward minCount, at
    // PreEnqueue, PlacementFeasible and Permit alike: a replacement whose
    // siblings still run completes the gang by itself and is bound at once,
    // with no second placement of the whole group.
    let env = GangEnv::new("gang-restart", 2, &[]).await;
    env.create_with("g", 3, true, |job| {
        for rs in job.spec.tf_replica_specs.values_mut() {
            rs.restart_policy = Some(RestartPolicy::ExitCode);
        }
    })
    .await;
    env.wait_running("g", 3).await;
    let group = env.groups.get("g").await.expect("the PodGroup");
    wait_until("the gang to be placed", SLOW, || async {
        (initially_scheduled(&env, "g").await.as_deref() == Some("True")).then_some(())
    })
    .await;
    let before = running_uid(&env, "g-worker-1").await;

    // 137 (SIGKILL) is retryable under ExitCode: the Pod is re-created.
    drive_pod_exit(&env.client, &env.ns, "g-worker-1", None, 137).await;
    let after = wait_until("a replacement g-worker-1 to run", SLOW, || async {
        let uid = env
            .pods
            .get_opt("g-worker-1")
            .await
            .ok()
            .flatten()?
            .metadata
            .uid?;
        (uid != before).then_some(())?;
        Some(running_uid(&env, "g-worker-1").await)
    })
    .await;
    assert_ne!(after, before);
    // It joined the same group (same UID: not re-created), which stays placed.
    assert_eq!(env.pod_groups_of_pods("g").await, vec!["g"; 3]);
    let now = env.groups.get("g").await.expect("the PodGroup");
    assert_eq!(now.metadata.uid, group.metadata.uid);
    assert_eq!(now.min_count(), Some(3));
    assert_eq!(
        initially_scheduled(&env, "g").await.as_deref(),
        Some("True")
    );
    let job = env.jobs.get("g").await.expect("the job");
    let status = job.status.expect("a status");
    assert!(
        !status
            .conditions
            .iter()
            .any(|c| c.reason.as_deref() == Some("GangUnschedulable")),
        "{:?}",
        status.conditions
    );
    assert_eq!(status.replica_statuses["Worker"].restarts, 1);
    env.remove_nodes().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_scheduling_policy_added_later_warns_and_gangs_only_after_suspend_and_resume() {
    needs_workload_api!();
    let env = GangEnv::new("gang-late", 2, &[]).await;
    env.create_with("late", 2, false, |job| {
        for rs in job.spec.tf_replica_specs.values_mut() {
            rs.restart_policy = Some(RestartPolicy::ExitCode);
        }
    })
    .await;
    env.wait_running("late", 2).await;

    // Added to the running job: its Pods cannot join a group.
    let policy = serde_json::json!({ "spec": { "runPolicy": { "schedulingPolicy": {} } } });
    env.jobs
        .patch("late", &PatchParams::default(), &Patch::Merge(policy))
        .await
        .expect("add schedulingPolicy");
    let warning = wait_until("the Warning on the late schedulingPolicy", SLOW, || async {
        env.warnings("SchedulingPolicyIgnored")
            .await
            .into_iter()
            .find(|w| w.contains("were created without one"))
    })
    .await;
    assert!(
        warning.contains("spec.schedulingGroup is immutable"),
        "{warning}"
    );
    assert!(
        env.groups.get_opt("late").await.expect("a get").is_none(),
        "no group for Pods that cannot join it"
    );

    // A replacement joins no group either (one it alone joined would wait
    // for minCount Pods that never come): it runs.
    let before = running_uid(&env, "late-worker-0").await;
    drive_pod_exit(&env.client, &env.ns, "late-worker-0", None, 137).await;
    wait_until("a replacement late-worker-0 to run", SLOW, || async {
        let pod = env.pods.get_opt("late-worker-0").await.ok().flatten()?;
        (pod.metadata.uid.as_deref() != Some(before.as_str()) && running(&pod)).then_some(())
    })
    .await;
    assert_eq!(env.pod_groups_of_pods("late").await, vec!["<none>"; 2]);
    assert!(env.groups.get_opt("late").await.expect("a get").is_none());
    assert_eq!(
        env.warnings("SchedulingPolicyIgnored").await.len(),
        1,
        "warned once"
    );

    // Suspend and resume: the Pods are re-created, in a fresh group.
    let suspend = |on: bool| serde_json::json!({ "spec": { "runPolicy": { "suspend": on } } });
    env.jobs
        .patch(
            "late",
            &PatchParams::default(),
            &Patch::Merge(suspend(true)),
        )
        .await
        .expect("suspend");
    wait_until("the Pods to go", SLOW, || async {
        env.job_pods("late").await.is_empty().then_some(())
    })
    .await;
    env.jobs
        .patch(
            "late",
            &PatchParams::default(),
            &Patch::Merge(suspend(false)),
        )
        .await
        .expect("resume");
    env.wait_running("late", 2).await;
    assert_eq!(env.pod_groups_of_pods("late").await, vec!["late"; 2]);
    assert_eq!(
        env.groups.get("late").await.expect("the group").min_count(),
        Some(2)
    );
    env.remove_nodes().await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn readyz_names_what_gang_scheduling_found() {
    let env = GangEnv::new("gang-readyz", 0, &[]).await;
    let (_, body) = http_get(env.operator.probe_port, "/readyz").expect("/readyz answers");
    let line = body
        .lines()
        .find(|l| l.starts_with("gang-scheduling: "))
        .unwrap_or_else(|| panic!("no gang-scheduling line in /readyz:\n{body}"));
    if workload_api() {
        assert!(line.contains("using v1beta1"), "{line}");
    } else {
        assert!(
            line.contains("no scheduling.k8s.io PodGroups served"),
            "{line}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn without_the_api_jobs_run_as_before_with_the_warning() {
    if workload_api() {
        eprintln!(
            "the server has the Workload API: see the other gang tests (make e2e-other-version runs this one)"
        );
        return;
    }
    let env = GangEnv::new("gang-none", 2, &[]).await;
    env.create("j", 3, true).await;
    env.wait_running("j", 3).await;
    let warned = env.warnings("SchedulingPolicyIgnored").await;
    assert!(
        warned.iter().any(|w| w.contains("does not serve")),
        "{warned:?}"
    );
    // `on` needs the API: the operator refuses to start, saying so.
    let mut on = Operator::start_with(&env.ns, &["--gang-scheduling=on"], None);
    let log = wait_until(
        "the operator with --gang-scheduling=on to exit",
        SLOW,
        || {
            let exited = on.exited();
            let log = exited.then(|| on.log_text());
            async move { log }
        },
    )
    .await;
    assert!(
        log.contains("--gang-scheduling=on, but the API server does not serve"),
        "{log}"
    );
    env.remove_nodes().await;
}
