//! A seeded workload of multi-replica jobs that run, restart, fail and finish,
//! driven from outside (KWOK exit annotations), and a summary of where each
//! job ended, so a disturbed run can be compared with an undisturbed one.
//!
//! Every job has a Chief and two Workers (and sometimes a PS). Its script is
//! one of:
//! - (7 in 10) `ExitCode`, one or two Workers killed (137, retryable; the
//!   same Worker twice at times): the operator deletes and re-creates each
//!   such Pod (one more UID at that index and one more restart per kill);
//!   then every replica exits 0, the Chief last: Succeeded. Most jobs are of
//!   this kind, so faults meet the restart bookkeeping often.
//! - `ExitCode`, Worker 0 exits 1 (not retryable): Failed.
//! - `OnFailure`, Worker 1 exits 1 (the kubelet restarts it in place), then
//!   every replica exits 0, the Chief last: Succeeded.
//! - `Never`: every replica exits 0, the Chief last: Succeeded.
//!
//! Each step waits for a Running Pod it has not ended yet, so after a
//! re-creating restart the next step on that index waits for the new Pod:
//! the script means the same thing however slow the operator is.
//!
//! The end state is compared, not predicted: the reference is the same
//! script run in another namespace with an undisturbed operator.
#![allow(dead_code)] // Each scenario uses a different subset.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use rand::Rng;
use rand::rngs::StdRng;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::{RestartPolicy, TFJob};
use tokio::sync::Notify;

use crate::harness::{create_job, end_pod, wait_finished};
use crate::observer::Seen;

#[derive(Clone, Debug)]
pub struct Script {
    pub name: String,
    pub policy: RestartPolicy,
    pub ps: bool,
    /// Seconds to wait before creating the job.
    pub start_after_ms: u64,
    /// (Pod name suffix, exit code), in order.
    pub exits: Vec<(&'static str, i32)>,
}

/// `n` seeded scripts, started over `spread` (so faults hit jobs at every stage).
pub fn scripts(rng: &mut StdRng, n: usize, spread: Duration) -> Vec<Script> {
    (0..n)
        .map(|i| {
            let ps = rng.random_bool(0.5);
            // A job that succeeds ends every other replica first, so what the
            // status says about them does not depend on when the operator
            // last looked (Running replicas of a finished job are cleaned up).
            let finish = |mut steps: Vec<(&'static str, i32)>| {
                steps.extend([("worker-0", 0), ("worker-1", 0)]);
                if ps {
                    steps.push(("ps-0", 0));
                }
                steps.push(("chief-0", 0));
                steps
            };
            let (policy, exits) = match rng.random_range(0..10) {
                0..7 => {
                    let kills = (0..rng.random_range(1..=2))
                        .map(|_| {
                            (
                                if rng.random_bool(0.5) {
                                    "worker-0"
                                } else {
                                    "worker-1"
                                },
                                137,
                            )
                        })
                        .collect();
                    (RestartPolicy::ExitCode, finish(kills))
                }
                7 => (RestartPolicy::ExitCode, vec![("worker-0", 1)]),
                8 => (RestartPolicy::OnFailure, finish(vec![("worker-1", 1)])),
                _ => (RestartPolicy::Never, finish(vec![])),
            };
            Script {
                name: format!("job-{i:02}"),
                policy,
                ps,
                start_after_ms: rng.random_range(0..=spread.as_millis() as u64),
                exits,
            }
        })
        .collect()
}

impl Script {
    /// The restarts the script injects, as the job's status counts them
    /// (`replicaStatuses[*].restarts`: re-creations and in-place restarts):
    /// under `ExitCode` each retryable exit (128 and above, as Kubeflow's
    /// policy reads them) re-creates its Pod once; under `OnFailure` each
    /// failing exit restarts the container in place once.
    pub fn injected_restarts(&self) -> i32 {
        let restarts = |code: i32| match self.policy {
            RestartPolicy::ExitCode => code >= 128,
            RestartPolicy::OnFailure => code != 0,
            _ => false,
        };
        self.exits
            .iter()
            .filter(|(_, code)| restarts(*code))
            .count() as i32
    }

    /// The condition the job must end with: Failed when a replica exits with
    /// a permanent code under `ExitCode`, Succeeded otherwise.
    pub fn expected_end(&self) -> &'static str {
        let permanent = self.policy == RestartPolicy::ExitCode
            && self.exits.iter().any(|(_, code)| (1..128).contains(code));
        if permanent { "Failed" } else { "Succeeded" }
    }

    /// Pod UIDs expected at `pod` (a name suffix, `worker-1`): one, plus one
    /// per injected restart there.
    pub fn expected_pods_at(&self, pod: &str) -> usize {
        let restarts = if self.policy == RestartPolicy::ExitCode {
            self.exits
                .iter()
                .filter(|(p, code)| *p == pod && *code >= 128)
                .count()
        } else {
            0
        };
        1 + restarts
    }
}

fn fixture(s: &Script) -> TfJobFixture {
    let f = TfJobFixture::new(&s.name).chief(1).workers(2);
    let f = if s.ps { f.ps(1) } else { f };
    f.restart_policy(s.policy)
}

/// Creates and drives every script in `ns` concurrently; returns when all
/// jobs finished, with their final objects.
/// `exits`, when given, is notified each time the script has asked KWOK to
/// end a Pod: within milliseconds the operator acts on the exit.
pub async fn run(
    client: &Client,
    ns: &str,
    scripts: &[Script],
    timeout: Duration,
    exits: Option<Arc<Notify>>,
) -> BTreeMap<String, TFJob> {
    let drivers = scripts.iter().map(|s| {
        let client = client.clone();
        let ns = ns.to_owned();
        let s = s.clone();
        let exits = exits.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(s.start_after_ms)).await;
            create_job(&client, &ns, fixture(&s)).await;
            let mut ended = Vec::new();
            for (suffix, code) in &s.exits {
                let pod = format!("{}-{suffix}", s.name);
                let uid =
                    end_pod(&client, &ns, &pod, *code, &ended, timeout, exits.as_deref()).await;
                // OnFailure with a non-zero code restarts in place: same Pod.
                if !(s.policy == RestartPolicy::OnFailure && *code != 0) {
                    ended.push(uid);
                }
            }
        }
    });
    futures::future::join_all(drivers).await;
    let names: Vec<String> = scripts.iter().map(|s| s.name.clone()).collect();
    wait_finished(client, ns, &names, timeout).await
}

/// What must match between two runs of one script: the finished condition,
/// per replica type (restarts, succeeded, failed), and Pod UIDs per index.
#[derive(Debug, PartialEq, Eq)]
pub struct EndState {
    pub condition: Option<String>,
    pub replicas: BTreeMap<String, (i32, i32, i32)>,
    pub pods_per_index: BTreeMap<(String, String), usize>,
}

pub fn end_states(
    jobs: &BTreeMap<String, TFJob>,
    seen: &Seen,
    ns: &str,
) -> BTreeMap<String, EndState> {
    jobs.iter()
        .map(|(name, job)| {
            let replicas = job
                .status
                .as_ref()
                .map(|s| {
                    s.replica_statuses
                        .iter()
                        .map(|(t, r)| (t.clone(), (r.restarts, r.succeeded, r.failed)))
                        .collect()
                })
                .unwrap_or_default();
            let pods_per_index = seen
                .pods
                .iter()
                .filter(|(slot, _)| slot.0 == ns && &slot.1 == name)
                .map(|(slot, uids)| ((slot.2.clone(), slot.3.clone()), uids.len()))
                .collect();
            (
                name.clone(),
                EndState {
                    condition: crate::harness::finished(job),
                    replicas,
                    pods_per_index,
                },
            )
        })
        .collect()
}
