//! Coalescing a job's status writes (see [`DeferredStatus`]).
//!
//! Kubeflow writes a job's status on every reconcile that changes it. A
//! four-replica job starting up changes it five or six times in a few
//! seconds: `Created`, then `active` going 1, 2, 3, 4 as its Pods run, with
//! `Running` somewhere in between. Each is a write to the API server and a
//! watch event to every TFJob watcher. Kubernetes' Job controller batches
//! the same way: it waits a second after a Pod update before syncing its Job
//! (`syncJobBatchPeriod`), so one write carries every Pod change of that
//! second.
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::api::constants::condition;
use crate::api::types::{TFJob, TFJobStatus};
use crate::runtime::cache::key::ObjectKey;

/// How long a status change that nobody waits for may wait for others to
/// join it (the Job controller's batch period).
pub const STATUS_BATCH_PERIOD: Duration = Duration::from_secs(1);

/// When to write a planned status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteStatus {
    /// Nothing visible changed: no write.
    Unchanged,
    /// Write it now.
    Now,
    /// Keep it (it is what the next pass plans from) and write it within
    /// this long, unless a change that cannot wait comes first.
    Within(Duration),
}

/// Status changes planned but not written yet, per job.
///
/// A change is written at once when someone waits for it: a condition other
/// than `Created` turns on or off (`Running` once every replica is up,
/// `Restarting`, `Succeeded`, `Failed`, `Suspended`), or every replica is
/// now running or done, so nothing more is coming. Anything else — the
/// first `Created`, replica counts on the way up, `Running` while some
/// replicas are still starting, a condition's message — waits at most
/// [`STATUS_BATCH_PERIOD`] from the first unwritten change for the changes
/// that follow, and goes out with them in one write.
///
/// The deferred status is what the next pass plans from (its timestamps,
/// e.g. `startTime` and `Created`'s transition time, stay those of the pass
/// that first planned them), as long as the job's stored status is still the
/// one it was planned from: if anyone else wrote the status meanwhile, the
/// deferred one is dropped and the next pass plans afresh. Kept in memory
/// only: after a restart the first pass plans the same change again.
#[derive(Clone, Default)]
pub struct DeferredStatus {
    by_key: Arc<Mutex<HashMap<ObjectKey, Deferred>>>,
}

struct Deferred {
    uid: Option<String>,
    /// The stored status it was planned over.
    base: Option<TFJobStatus>,
    /// The newest planned status, not written yet.
    status: TFJobStatus,
    /// When the first unwritten change was planned.
    since: Instant,
}

impl DeferredStatus {
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, Deferred>> {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The job to plan from: `job` (as stored) with our deferred status over
    /// it, if that was planned over the status `job` has now.
    pub fn overlay(&self, key: &ObjectKey, job: Arc<TFJob>) -> Arc<TFJob> {
        let mut map = self.lock();
        let Some(d) = map.get(key) else {
            return job;
        };
        if d.uid != job.metadata.uid || d.base != job.status {
            map.remove(key);
            return job;
        }
        let mut planned = TFJob::clone(&job);
        planned.status = Some(d.status.clone());
        Arc::new(planned)
    }

    /// Decides when to write `planned` over `stored` (the job as stored, not
    /// overlaid) and remembers it if it waits.
    pub fn decide(
        &self,
        key: &ObjectKey,
        stored: &TFJob,
        planned: &TFJobStatus,
        now: Instant,
    ) -> WriteStatus {
        let mut map = self.lock();
        if stored.status.as_ref() == Some(planned) {
            map.remove(key);
            return WriteStatus::Unchanged;
        }
        if cannot_wait(stored, planned) {
            return WriteStatus::Now;
        }
        let since = match map.get(key) {
            Some(d) if d.uid == stored.metadata.uid && d.base == stored.status => d.since,
            _ => now,
        };
        let due = since + STATUS_BATCH_PERIOD;
        if now >= due {
            return WriteStatus::Now;
        }
        map.insert(
            key.clone(),
            Deferred {
                uid: stored.metadata.uid.clone(),
                base: stored.status.clone(),
                status: planned.clone(),
                since,
            },
        );
        WriteStatus::Within(due - now)
    }

    /// The status of `key` was written (or the job is gone): nothing waits.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }
}

/// Whether a change from `stored` to `planned` is one somebody waits for.
fn cannot_wait(stored: &TFJob, planned: &TFJobStatus) -> bool {
    let states = |s: Option<&TFJobStatus>| -> BTreeSet<(String, String)> {
        s.into_iter()
            .flat_map(|s| &s.conditions)
            .filter(|c| c.type_ != condition::CREATED)
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect()
    };
    let before = states(stored.status.as_ref());
    let after = states(Some(planned));
    let all_up = all_replicas_up(stored, planned);
    if before != after {
        // Only `Running` turning on may wait, and only for replicas still starting.
        let running = (condition::RUNNING.to_owned(), "True".to_owned());
        let only_running_on = after.difference(&before).eq([&running])
            && before
                .difference(&after)
                .all(|(t, _)| t == condition::RUNNING);
        return !only_running_on || all_up;
    }
    all_up
}

/// Every replica the spec asks for is running or done.
fn all_replicas_up(job: &TFJob, status: &TFJobStatus) -> bool {
    let wanted: i32 = job
        .spec
        .tf_replica_specs
        .values()
        .map(|r| r.replicas.unwrap_or(1).max(0))
        .sum();
    let up: i32 = status
        .replica_statuses
        .values()
        .map(|r| r.active + r.succeeded)
        .sum();
    wanted > 0 && up >= wanted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::TfJobFixture;
    use crate::api::types::{JobCondition, ReplicaStatus};

    /// A job of 1 Chief, 1 PS and 2 Workers, stored with `status`.
    fn stored(status: Option<TFJobStatus>) -> TFJob {
        let mut job = TfJobFixture::new("j")
            .chief(1)
            .ps(1)
            .workers(2)
            .uid("u")
            .build();
        job.status = status;
        job
    }

    /// Conditions `types` (all True) and `active` replicas of each type.
    fn status(types: &[&str], active: [i32; 3]) -> TFJobStatus {
        let mut s = TFJobStatus::default();
        for t in types {
            s.conditions.push(JobCondition {
                type_: (*t).to_owned(),
                status: "True".into(),
                ..JobCondition::default()
            });
        }
        for (rtype, n) in ["Chief", "PS", "Worker"].into_iter().zip(active) {
            s.replica_statuses.insert(
                rtype.into(),
                ReplicaStatus {
                    active: n,
                    ..ReplicaStatus::default()
                },
            );
        }
        s
    }

    fn key() -> ObjectKey {
        ObjectKey::new(Some("default"), "j")
    }

    #[tokio::test(start_paused = true)]
    async fn a_job_whose_replicas_all_start_within_the_period_gets_one_write_for_created_and_running()
     {
        let batch = DeferredStatus::default();
        let job = Arc::new(stored(None));
        let created = status(&[condition::CREATED], [0, 0, 0]);
        assert_eq!(
            batch.decide(&key(), &job, &created, Instant::now()),
            WriteStatus::Within(STATUS_BATCH_PERIOD)
        );
        // The next pass plans over the deferred status.
        let planned_over = batch.overlay(&key(), job.clone());
        assert_eq!(planned_over.status.as_ref(), Some(&created));

        tokio::time::advance(Duration::from_millis(300)).await;
        let chief_up = status(&[condition::CREATED, condition::RUNNING], [1, 0, 0]);
        assert_eq!(
            batch.decide(&key(), &job, &chief_up, Instant::now()),
            WriteStatus::Within(Duration::from_millis(700)),
            "Running may wait while replicas are still starting"
        );
        tokio::time::advance(Duration::from_millis(300)).await;
        let all_up = status(&[condition::CREATED, condition::RUNNING], [1, 1, 2]);
        assert_eq!(
            batch.decide(&key(), &job, &all_up, Instant::now()),
            WriteStatus::Now,
            "every replica is up: nothing more is coming"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_waits_no_longer_than_the_batch_period_from_the_first_unwritten_change() {
        let batch = DeferredStatus::default();
        let job = stored(Some(status(&[condition::CREATED], [0, 0, 0])));
        let one = status(&[condition::CREATED], [0, 1, 0]);
        assert_eq!(
            batch.decide(&key(), &job, &one, Instant::now()),
            WriteStatus::Within(STATUS_BATCH_PERIOD)
        );
        tokio::time::advance(STATUS_BATCH_PERIOD / 2).await;
        let two = status(&[condition::CREATED], [0, 1, 1]);
        assert_eq!(
            batch.decide(&key(), &job, &two, Instant::now()),
            WriteStatus::Within(STATUS_BATCH_PERIOD / 2)
        );
        tokio::time::advance(STATUS_BATCH_PERIOD / 2).await;
        assert_eq!(
            batch.decide(&key(), &job, &two, Instant::now()),
            WriteStatus::Now
        );
    }

    #[tokio::test(start_paused = true)]
    async fn finishing_restarting_and_running_with_every_replica_up_are_written_at_once() {
        let batch = DeferredStatus::default();
        let running = stored(Some(status(
            &[condition::CREATED, condition::RUNNING],
            [1, 1, 2],
        )));
        let now = Instant::now();
        for planned in [
            status(&[condition::CREATED, condition::SUCCEEDED], [0, 1, 2]),
            status(&[condition::CREATED, condition::FAILED], [0, 1, 2]),
            status(&[condition::CREATED, condition::RESTARTING], [1, 1, 1]),
        ] {
            assert_eq!(
                batch.decide(&key(), &running, &planned, now),
                WriteStatus::Now
            );
        }
        let created = stored(Some(status(&[condition::CREATED], [0, 0, 0])));
        let all_up = status(&[condition::CREATED, condition::RUNNING], [1, 1, 2]);
        assert_eq!(
            batch.decide(&key(), &created, &all_up, now),
            WriteStatus::Now
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unchanged_status_is_not_written_and_clears_what_waited() {
        let batch = DeferredStatus::default();
        let current = status(&[condition::CREATED], [0, 0, 0]);
        let job = Arc::new(stored(Some(current.clone())));
        let now = Instant::now();
        batch.decide(&key(), &job, &status(&[condition::CREATED], [0, 1, 0]), now);
        assert_eq!(
            batch.decide(&key(), &job, &current, now),
            WriteStatus::Unchanged
        );
        assert_eq!(batch.overlay(&key(), job.clone()).status, Some(current));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deferred_status_is_dropped_once_the_stored_status_changed_under_it() {
        let batch = DeferredStatus::default();
        let job = Arc::new(stored(Some(status(&[condition::CREATED], [0, 0, 0]))));
        let now = Instant::now();
        let ours = status(&[condition::CREATED], [0, 1, 0]);
        batch.decide(&key(), &job, &ours, now);
        let theirs = status(&[condition::CREATED], [1, 0, 0]);
        let changed = Arc::new(stored(Some(theirs.clone())));
        assert_eq!(batch.overlay(&key(), changed.clone()).status, Some(theirs));
        // And the period starts again from the next change.
        let next = status(&[condition::CREATED], [1, 1, 0]);
        assert_eq!(
            batch.decide(&key(), &changed, &next, now),
            WriteStatus::Within(STATUS_BATCH_PERIOD)
        );
    }
}
