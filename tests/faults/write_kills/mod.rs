//! A SIGKILL at every write position of a multi-write pass (issue #38): the
//! real-process counterpart of the lifecycle model's crashes
//! (`src/tfjob/lifecycle_model/`), which crash the modelled operator
//! between any two of its writes.
//!
//! A pass under test is what the operator writes after one trigger until
//! the job is settled again ([`passes::Pass`]): the finish of a job with
//! `cleanPodPolicy: All` (the finishing pass and the cleanup pass after it),
//! a user's suspend of a gang (its PodGroup, Pods and Services deleted),
//! the resume of a gang (a fresh PodGroup first, then the Pods and
//! Services), and Kueue's eviction of a running gang whose Workload the
//! operator owns (its PodGroup, Pods and Services deleted, the status, then
//! the Workload's quota given back). The writes are counted by an admission
//! webhook the test serves ([`webhook`]), in the order the API server asks
//! about them:
//!
//! 1. **Learn.** One job goes through the pass with no kill; its writes, W
//!    of them, are printed (`FAULT-RESULT write-kills-<pass> writes=…`).
//!    W must be at least 2, or there is nothing between writes to test.
//! 2. **Sweep.** For each N in 1..=W a fresh job is brought to the same
//!    point, the webhook SIGKILLs the operator when its N-th write of the
//!    pass arrives (before answering, so write N is never stored), a new
//!    operator process starts (a new identity, nothing of the old one's
//!    memory), and the pass's invariants are checked on the cluster once the
//!    job has settled ([`passes::Pass::violations`]): a finished job stays
//!    finished and gets no new Pod; no index gets a Pod twice (Pod UIDs as an
//!    independent watch saw them, [`crate::observer`]); the restarts counted
//!    equal the failures injected; a stopped gang leaves no live PodGroup and
//!    resumes in a fresh one; an evicted job is stopped (`Suspended`,
//!    `TFJobEvicted`, then `TFJobQueued` once its quota is given back), and
//!    once its Workload is
//!    reactivated it runs again, one new Pod per index, none created before
//!    the readmission; and the job settles within [`SETTLE`].
//!
//! `make test-faults` (FAULT_FULL=1) sweeps every position of every pass;
//! the `make test` subset kills each pass at one position chosen by
//! `FAULT_SEED` (a learn run and one kill each).
//!
//! The eviction pass alone runs with Kueue ([`crate::test_kueue`], in Workload
//! mode: its built-in TFJob integration off, so the operator owns each
//! queued job's Workload and makes every write of an eviction itself): the
//! test starts it beside the fault cluster for that pass and stops it
//! after, so the other scenarios run as without it.
//!
//! Leader election is off (`--leader-elect=false`), as in `crash.rs`: a
//! restarted process would otherwise wait out the dead one's Lease.
mod passes;
mod webhook;

use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{DeleteParams, PropagationPolicy};
use rand::Rng;

use crate::cluster::{client, test_namespace, wait_until};
use crate::harness::{Cleanup, apiserver_addr, full, identity, report, rng};
use crate::observer::Observer;
use crate::operator::{Operator, ensure_crd};
use crate::test_kueue::{self as kueue, Kueue, Mode};
use passes::Pass;
use webhook::{KillingWebhook, USER_PREFIX};

/// How long a job may take to settle after the trigger (and after a kill,
/// with the operator's restart).
const SETTLE: Duration = Duration::from_secs(90);
/// No write of the operator for this long, with the job in its end state:
/// the pass is over (the operator's status writes are coalesced for up to a
/// second).
const QUIET: Duration = Duration::from_secs(2);
/// Kueue for the eviction pass: `waitForPodsReady` long enough never to
/// evict a job of the pass, and quota for every job of it.
const KUEUE: Mode = Mode::Workload {
    pods_ready_timeout: "120s",
};
const KUEUE_CPU: &str = "64";

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn a_job_finishing_with_clean_pod_policy_all_stays_finished_when_the_operator_is_killed_at_any_of_its_writes()
 {
    sweep(Pass::Finish).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn a_suspended_gang_leaves_no_pod_and_no_live_pod_group_when_the_operator_is_killed_at_any_of_its_writes()
 {
    sweep(Pass::Suspend).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn a_resumed_gang_runs_once_per_index_in_a_fresh_pod_group_when_the_operator_is_killed_at_any_of_its_writes()
 {
    sweep(Pass::Resume).await;
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn an_evicted_gang_gives_its_quota_back_and_runs_again_once_per_index_when_the_operator_is_killed_at_any_of_its_writes()
 {
    sweep(Pass::Evict).await;
}

/// One namespace, its webhook and observer, and the operator process of
/// the moment (each kill starts the next generation).
pub struct Env {
    pub client: Client,
    pub ns: String,
    pub observer: Observer,
    webhook: KillingWebhook,
    operator: Operator,
    user: String,
    generation: usize,
    flags: Vec<&'static str>,
    /// Kueue, for the passes that need it; stopped when the pass ends
    /// (dropped after the operator).
    _kueue: Option<Kueue>,
}

impl Env {
    async fn new(pass: Pass) -> Self {
        let client = client().await;
        ensure_crd(&client).await;
        let ns = test_namespace(&client, &format!("fault-wk-{}", pass.name())).await;
        let kueue = if pass.needs_kueue() {
            Some(Kueue::start(&client, &ns, KUEUE, KUEUE_CPU).await)
        } else {
            None
        };
        let webhook = KillingWebhook::start(&ns).await;
        let observer = Observer::start(&client, Some(&ns));
        let mut flags = vec!["--leader-elect=false"];
        flags.extend(pass.flags());
        let (user, operator) = Self::spawn(&ns, pass, 0, &flags).await;
        Self {
            client,
            ns,
            observer,
            webhook,
            operator,
            user,
            generation: 0,
            flags,
            _kueue: kueue,
        }
    }

    /// Operator generation `generation`, as its own user, ready.
    async fn spawn(ns: &str, pass: Pass, generation: usize, flags: &[&str]) -> (String, Operator) {
        let user = format!("{USER_PREFIX}{}-{generation}", pass.name());
        let kubeconfig = identity(&user, apiserver_addr()).await;
        let mut operator = Operator::start_with(ns, flags, Some(kubeconfig));
        operator.wait_ready().await;
        (user, operator)
    }

    /// Waits until `user` has not written for [`QUIET`].
    async fn quiet(&self, what: &str) {
        let user = self.user.clone();
        wait_until(
            &format!("{what}: no write for {QUIET:?}"),
            SETTLE,
            || async { (self.webhook.quiet_for(&user) >= QUIET).then_some(()) },
        )
        .await;
    }

    /// Waits until `pass` has settled for `job` and the operator is quiet.
    async fn settle(&self, pass: Pass, job: &str, before: &passes::Before) {
        let what = format!(
            "{}/{job} to settle after the {} pass (operator log: {})",
            self.ns,
            pass.name(),
            self.operator.log.display()
        );
        wait_until(&what, SETTLE, || async {
            pass.settled(self, job, before).await.then_some(())
        })
        .await;
        self.quiet(&what).await;
        // Settled and quiet, and still settled: nothing undid it meanwhile.
        wait_until(&what, SETTLE, || async {
            pass.settled(self, job, before).await.then_some(())
        })
        .await;
    }
}

impl Env {
    /// Deletes every job of the namespace and waits until their Workloads
    /// are gone (the operator releases Kueue's finalizer), while the
    /// operator and Kueue still run: nothing is left holding the namespace.
    async fn delete_jobs_and_workloads(&self) {
        let _ = passes::jobs(self)
            .delete_collection(
                &DeleteParams {
                    propagation_policy: Some(PropagationPolicy::Background),
                    ..DeleteParams::default()
                },
                &Default::default(),
            )
            .await;
        let workloads = kueue::workloads(&self.client, &self.ns);
        wait_until(
            &format!("the Workloads in {} to be gone", self.ns),
            SETTLE,
            || async {
                let list = workloads.list(&Default::default()).await.ok()?;
                list.items.is_empty().then_some(())
            },
        )
        .await;
    }
}

/// What one kill at one position found.
struct Killed {
    position: usize,
    write: String,
    violations: Vec<String>,
    settled_s: f64,
}

async fn sweep(pass: Pass) {
    if pass.needs_pod_groups() && crate::support::kube_minor() < 37 {
        eprintln!(
            "Kubernetes {}: no scheduling.k8s.io/v1beta1 PodGroups, no gang to {}",
            crate::support::kube_version(),
            pass.name()
        );
        return;
    }
    let started = Instant::now();
    let mut env = Env::new(pass).await;
    let _cleanup = Cleanup(vec![env.ns.clone()]);

    // 1. Learn the pass's writes.
    let job = "job-00";
    let before = pass.setup(&env, job).await;
    env.webhook.arm(
        &env.user,
        env.operator.pid().expect("the operator runs"),
        job,
        None,
    );
    pass.trigger(&env, job, &before).await;
    env.settle(pass, job, &before).await;
    let writes = env.webhook.disarm();
    let learned = pass.violations(&env, job, &before).await;
    assert!(
        learned.is_empty(),
        "the {} pass broke its invariants with no kill at all: {learned:?}",
        pass.name()
    );
    eprintln!(
        "the {} pass writes {} times: {writes:?}",
        pass.name(),
        writes.len()
    );
    assert!(
        writes.len() >= 2,
        "the {} pass made {} writes: nothing to kill between ({writes:?})",
        pass.name(),
        writes.len()
    );

    // 2. Kill at every position (a seeded one outside `make test-faults`).
    let positions: Vec<usize> = if full() {
        (1..=writes.len()).collect()
    } else {
        vec![rng(&format!("write-kills-{}", pass.name())).random_range(1..=writes.len())]
    };
    let (mut results, mut unreached) = (Vec::new(), Vec::new());
    for &n in &positions {
        match kill_at(&mut env, pass, n, &writes).await {
            Some(killed) => results.push(killed),
            None => unreached.push(n),
        }
    }
    let elapsed = started.elapsed();
    let distinct = writes
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let failed: Vec<&Killed> = results
        .iter()
        .filter(|k| !k.violations.is_empty())
        .collect();
    let kinds: Vec<String> = results
        .iter()
        .map(|k| format!("{}:{}", k.position, k.write.replace(' ', "_")))
        .collect();
    let slowest = results.iter().map(|k| k.settled_s).fold(0.0, f64::max);
    report(
        &format!("write-kills-{}", pass.name()),
        &[
            ("writes", writes.len().to_string()),
            ("distinct_writes", distinct.to_string()),
            (
                "learned",
                writes
                    .iter()
                    .map(|w| w.replace(' ', "_"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("kills", results.len().to_string()),
            (
                "unreached",
                unreached
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("killed_at", kinds.join(",")),
            ("violations", failed.len().to_string()),
            ("slowest_settle_s", format!("{}", slowest.ceil() as u64)),
            ("elapsed_s", elapsed.as_secs().to_string()),
        ],
    );
    if !failed.is_empty() {
        for w in env.webhook.log() {
            eprintln!(
                "{:>8.3}s ago {} {}",
                w.at.elapsed().as_secs_f64(),
                w.user,
                w.what
            );
        }
    }
    for k in &failed {
        eprintln!(
            "killed at write {} ({}): {:?}",
            k.position, k.write, k.violations
        );
    }
    // A run may repeat a write (a delete sent twice, a second status
    // write) or not: only positions past the pass's distinct writes may go
    // unreached.
    assert!(
        unreached.iter().all(|&n| n > distinct) && !results.is_empty(),
        "the {} pass did not reach write {unreached:?} of its {distinct} distinct ones \
         in its kill runs",
        pass.name()
    );
    assert!(
        failed.is_empty(),
        "{} of {} kills in the {} pass broke its invariants (operator logs in {})",
        failed.len(),
        results.len(),
        pass.name(),
        crate::cluster::cluster_dir().join("logs").display()
    );
    if pass.needs_kueue() {
        env.delete_jobs_and_workloads().await;
    }
}

/// A fresh job brought to the pass, the operator killed at write `n`, a new
/// operator, and the invariants once the job settled. `None` when the pass
/// settled with fewer than `n` writes this time (see the module docs).
async fn kill_at(env: &mut Env, pass: Pass, n: usize, learned: &[String]) -> Option<Killed> {
    let job = format!("job-{n:02}");
    let before = pass.setup(env, &job).await;
    let pid = env.operator.pid().expect("the operator runs");
    env.webhook.arm(&env.user, pid, &job, Some(n));
    pass.trigger(env, &job, &before).await;
    let what = format!(
        "the operator's write {n} of the {} pass for {}/{job}, or the pass to settle \
         without it (learned: {learned:?})",
        pass.name(),
        env.ns
    );
    let killed = wait_until(&what, SETTLE, || async {
        if env.webhook.killed() {
            return Some(true);
        }
        let done = env.webhook.quiet_for(&env.user) >= QUIET
            && pass.settled(env, &job, &before).await
            && !env.webhook.killed();
        done.then_some(false)
    })
    .await;
    let seen = env.webhook.disarm();
    if !killed {
        eprintln!(
            "{} pass: {job} settled after {} writes, write {n} never came: {seen:?}",
            pass.name(),
            seen.len()
        );
        return None;
    }
    let killed_at = Instant::now();
    let write = seen.last().cloned().unwrap_or_default();
    eprintln!(
        "{} pass: killed {} at write {n} ({write})",
        pass.name(),
        env.user
    );
    // Reaps the SIGKILLed process.
    env.operator.kill();
    env.generation += 1;
    let (user, operator) = Env::spawn(&env.ns, pass, env.generation, &env.flags).await;
    env.user = user;
    env.operator = operator;
    env.settle(pass, &job, &before).await;
    let settled_s = killed_at.elapsed().as_secs_f64();
    let violations = pass.violations(env, &job, &before).await;
    if !violations.is_empty() {
        eprintln!("{} pass, killed at write {n}: {violations:?}", pass.name());
    }
    // Gone before the next job: fewer objects for the next operator to sync.
    let _ = passes::jobs(env)
        .delete(
            &job,
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            },
        )
        .await;
    Some(Killed {
        position: n,
        write,
        violations,
        settled_s,
    })
}
