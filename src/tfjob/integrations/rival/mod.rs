//! "Both at once, by mistake": Kubeflow's training-operator still runs its
//! TFJob controller beside this one (the chart installed before it was
//! stopped). Two controllers acting on one job delete its failed Pods
//! twice, count its restarts each by its own rule and overwrite each other's
//! status; this one can tell from the job (see
//! [`crate::tfjob::kubeflow::rival`]) and steps back.
//!
//! The rule, per job ([`writes_it`]): the job is held while another
//! controller's newest status write is later than this process's start (in
//! a later second: the times have no more) and less than [`QUIET`] old. A held job gets no write at all (not even an
//! adoption; the observe phase asks before anything else), one Warning per
//! job and manager ([`REASON_RIVAL_CONTROLLER`]), and a line in `/readyz`;
//! its pass looks again when the hold would end.
//!
//! Why both bounds:
//! - a write from before this process started is history (training-operator
//!   ran the job until the switch): a proper move is never held;
//! - field ownership moves only on a write, and training-operator writes
//!   status only when it changes, so a stopped training-operator leaves its
//!   last time behind for ever. Without [`QUIET`] a job it wrote just
//!   before it was stopped (after this process started) would be held until
//!   this process restarts. With it, the job comes back [`QUIET`] after that
//!   last write. The price: a job a still-running training-operator keeps
//!   without status changes for [`QUIET`] comes back too, and the two act
//!   together again until training-operator's next status write holds it
//!   again (no second Warning). Only stopping one of them ends that.
//!
//! Readiness stays OK: this process runs every other job as it should, and
//! a failing `/readyz` would stop a rollout or `helm --wait` without
//! stopping training-operator. The `/readyz` line and the Warning say what
//! to do. docs/operating.md, "Moving from training-operator".
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use jiff::{SignedDuration, Timestamp};

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::manager::server::DetailLine;
use crate::tfjob::kubeflow::rival::last_rival_status_write;
use crate::tfjob::observe::integration::{Hold, ObserveHooks};
use crate::tfjob::plan::integration::PlanHooks;

/// The Warning's reason (ours: training-operator has no such rule).
pub const REASON_RIVAL_CONTROLLER: &str = "AnotherControllerWritesStatus";

/// How long after another controller's last status write its job stays held.
pub const QUIET: SignedDuration = SignedDuration::from_secs(60);

/// How many held jobs `/readyz` names (then "and N more").
const NAMED_IN_READYZ: usize = 10;

/// Another controller's status write that holds a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RivalWrite {
    pub manager: String,
    pub at: Timestamp,
}

impl RivalWrite {
    /// When the hold ends unless the controller writes again.
    pub fn until(&self) -> Timestamp {
        self.at.checked_add(QUIET).unwrap_or(Timestamp::MAX)
    }
}

/// Whether another controller writes `job` at `now`, for a process started
/// at `started` (the rule in the module docs). Pure.
///
/// `managedFields` times have whole seconds (truncated), so a write in the
/// second this process started is taken for history: a move made as the
/// docs say (training-operator stopped, then this operator started) is
/// never held, even when the two come within a second. The price: a write
/// training-operator makes in that first second is missed (its next one
/// is not).
pub fn writes_it(job: &TFJob, started: Timestamp, now: Timestamp) -> Option<RivalWrite> {
    let (manager, at) = last_rival_status_write(job)?;
    let write = RivalWrite {
        manager: manager.to_owned(),
        at,
    };
    (at.as_second() > started.as_second() && now < write.until()).then_some(write)
}

/// What a pass does about another controller.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody else writes the job: reconcile it.
    Alone,
    /// `write` holds the job: no writes. `warning`: the Warning's message,
    /// the first time this job is seen held by this manager.
    Held {
        write: RivalWrite,
        warning: Option<String>,
    },
}

/// What is remembered of a job another controller wrote (no entry for the
/// others).
#[derive(Debug, Default)]
struct Remembered {
    uid: Option<String>,
    /// Managers already warned about.
    warned: BTreeSet<String>,
    held: Option<RivalWrite>,
}

/// The jobs another controller writes, for this process's life; cheap to
/// clone (clones share it).
#[derive(Clone)]
pub struct RivalGuard {
    started: Timestamp,
    jobs: Arc<Mutex<BTreeMap<ObjectKey, Remembered>>>,
    readyz: Option<DetailLine>,
}

impl RivalGuard {
    /// A guard for a process started at `started`, keeping `readyz` (its
    /// `/readyz` line) up to date.
    pub fn new(started: Timestamp, readyz: Option<DetailLine>) -> Self {
        let guard = Self {
            started,
            jobs: Arc::default(),
            readyz,
        };
        guard.show(&guard.lock());
        guard
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<ObjectKey, Remembered>> {
        // Every update is one field store: a panic elsewhere leaves it whole.
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The verdict on `job` at `now`, remembered for the Warning and `/readyz`.
    pub fn check(&self, key: &ObjectKey, job: &TFJob, now: Timestamp) -> Verdict {
        let write = writes_it(job, self.started, now);
        let mut jobs = self.lock();
        if write.is_none() && !jobs.contains_key(key) {
            // The usual case: nobody else writes it, nothing to remember.
            return Verdict::Alone;
        }
        let remembered = jobs.entry(key.clone()).or_default();
        if remembered.uid != job.metadata.uid {
            // A namesake: what was remembered was another job's.
            *remembered = Remembered {
                uid: job.metadata.uid.clone(),
                ..Remembered::default()
            };
        }
        let was_held = remembered.held.is_some();
        remembered.held = write.clone();
        let verdict = match write {
            None => Verdict::Alone,
            Some(write) => {
                let first = remembered.warned.insert(write.manager.clone());
                let warning = first.then(|| warning(&write, self.started));
                Verdict::Held { write, warning }
            }
        };
        if was_held != remembered.held.is_some() || matches!(verdict, Verdict::Held { .. }) {
            self.show(&jobs);
        }
        verdict
    }

    /// Forgets a deleted job.
    pub fn forget(&self, key: &ObjectKey) {
        let mut jobs = self.lock();
        if jobs.remove(key).is_some() {
            self.show(&jobs);
        }
    }

    /// The `/readyz` line for `jobs`, shown when there is a line to show.
    fn show(&self, jobs: &BTreeMap<ObjectKey, Remembered>) {
        if let Some(line) = &self.readyz {
            line.set(readyz_line(jobs));
        }
    }

    /// The `/readyz` line as it stands.
    pub fn readyz_line(&self) -> String {
        readyz_line(&self.lock())
    }
}

fn readyz_line(jobs: &BTreeMap<ObjectKey, Remembered>) -> String {
    let held: Vec<(&ObjectKey, &RivalWrite)> = jobs
        .iter()
        .filter_map(|(key, r)| Some((key, r.held.as_ref()?)))
        .collect();
    if held.is_empty() {
        return "another TFJob controller: none seen writing a job's status".into();
    }
    let managers: BTreeSet<&str> = held.iter().map(|(_, w)| w.manager.as_str()).collect();
    let mut named: Vec<String> = held
        .iter()
        .take(NAMED_IN_READYZ)
        .map(|(key, w)| format!("{key} (until {} unless it writes again)", w.until()))
        .collect();
    if held.len() > NAMED_IN_READYZ {
        named.push(format!("and {} more", held.len() - NAMED_IN_READYZ));
    }
    format!(
        "another TFJob controller: {} writes the status of {} job(s), which this operator \
         leaves alone: {}; stop its TFJob controller (docs/operating.md, \
         \"Moving from training-operator\")",
        managers.into_iter().collect::<Vec<_>>().join(", "),
        held.len(),
        named.join(", ")
    )
}

/// The Warning: who, since when, what this operator does, and the fix.
fn warning(write: &RivalWrite, started: Timestamp) -> String {
    format!(
        "{manager} wrote this job's status at {at}, after this operator started ({started}): \
         two controllers run this job. This operator makes no writes to it while {manager} \
         does, and takes it over {quiet} s after {manager}'s last status write. Stop \
         {manager}'s TFJob controller (--enable-scheme without tfjob, or scale it to 0): \
         docs/operating.md, \"Moving from training-operator\".",
        manager = write.manager,
        at = write.at,
        quiet = QUIET.as_secs(),
    )
}

impl ObserveHooks for RivalGuard {
    fn observe(&self, _key: &ObjectKey, _job: &TFJob) -> Option<Box<dyn PlanHooks>> {
        None
    }

    fn hold(&self, key: &ObjectKey, job: &TFJob) -> Option<Hold> {
        let now = Timestamp::now();
        let Verdict::Held { write, warning } = self.check(key, job, now) else {
            return None;
        };
        // A second past the end, so the next pass finds the hold over
        // (its own write, seen by then, would hold it again).
        let left = now.duration_until(write.until()) + SignedDuration::from_secs(1);
        Some(Hold {
            recheck_after: left.unsigned_abs(),
            warning: warning.map(|message| (REASON_RIVAL_CONTROLLER, message)),
        })
    }

    fn forget(&self, key: &ObjectKey) {
        RivalGuard::forget(self, key);
    }
}

#[cfg(test)]
mod tests;
