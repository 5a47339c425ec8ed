//! Who manages a job is fixed when it is created: a `managedBy` change
//! afterwards is refused. Our CRD refuses it at the API server (CEL,
//! `self == oldSelf`), Kubeflow's training-operator in its webhook
//! (`ValidateRunPolicyUpdate`: "field is immutable"). Kubeflow's CRD has no
//! such rule, so under it a change is stored; the chart then installs a
//! ValidatingAdmissionPolicy that refuses it as the webhook would
//! (`crd.managedByPolicy`), and this module is the operator's own guard
//! for clusters without that policy: it remembers the manager each job had
//! when this operator first saw it, acts on that one, and warns once.
//!
//! Why not act on the change: a job that was ours and now names another
//! manager would be left with its Pods running and nobody counting their
//! failures; one that named MultiKueue and now names us would get a second
//! set of Pods beside the worker cluster's. Both are what the immutable
//! field exists to prevent.
//!
//! The memory is this process's (one entry per job, dropped with the job):
//! a change made while no operator ran, or before a newly elected leader's
//! first pass over the job, is taken as the job's manager. The admission
//! policy has no such gap; docs/operating.md says so.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::types::TFJob;
use crate::runtime::cache::key::ObjectKey;
use crate::tfjob::observe::integration::{AsPlanned, ObserveHooks};
use crate::tfjob::plan::integration::PlanHooks;

/// The event reason of the Warning (ours; Kubeflow refuses in its webhook
/// and so has none).
pub const REASON_MANAGED_BY_CHANGE_IGNORED: &str = "ManagedByChangeIgnored";

/// A job's two `managedBy` fields: `spec.runPolicy.managedBy` (Kubeflow's)
/// and `spec.managedBy` (ours, where MultiKueue's generic adapter looks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Managers {
    pub run_policy: Option<String>,
    pub top_level: Option<String>,
}

impl Managers {
    pub fn of(job: &TFJob) -> Self {
        Self {
            run_policy: job.spec.run_policy.managed_by.clone(),
            top_level: job.spec.managed_by.clone(),
        }
    }

    /// Whether `job` names these managers (compared in place).
    fn are_those_of(&self, job: &TFJob) -> bool {
        self.run_policy.as_deref() == job.spec.run_policy.managed_by.as_deref()
            && self.top_level.as_deref() == job.spec.managed_by.as_deref()
    }

    /// `job` with these managers in place of its own.
    fn put_into(&self, job: &TFJob) -> TFJob {
        let mut job = job.clone();
        job.spec.run_policy.managed_by = self.run_policy.clone();
        job.spec.managed_by = self.top_level.clone();
        job
    }
}

/// What a pass does about the job's managers.
#[derive(Debug)]
pub enum Verdict {
    /// As first seen: plan from the job as it is.
    Unchanged,
    /// Changed since first seen: plan from `job` (the job with its first
    /// managers put back); `warning` is the Warning's message, the first
    /// time this change is seen.
    Changed {
        job: Box<TFJob>,
        warning: Option<String>,
    },
}

struct Remembered {
    uid: String,
    first: Managers,
    /// The change already warned about (so it is warned about once).
    warned: Option<Managers>,
}

/// The managers each job had when this operator first saw it, by key (see
/// the module docs).
#[derive(Clone, Default)]
pub struct ManagerMemory {
    by_key: Arc<Mutex<HashMap<ObjectKey, Remembered>>>,
}

impl ManagerMemory {
    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, Remembered>> {
        // A panic elsewhere while holding the lock leaves a map that is
        // still whole (every update is one insert or field store).
        self.by_key.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers `job`'s managers if it is new (or a namesake replaced it),
    /// and says whether they changed since.
    pub fn check(&self, key: &ObjectKey, job: &TFJob) -> Verdict {
        let Some(uid) = job.metadata.uid.as_deref() else {
            return Verdict::Unchanged;
        };
        // Every reconcile passes here: the usual case (known job, same
        // managers) compares in place and allocates nothing.
        let mut map = self.lock();
        let entry = match map.get_mut(key) {
            Some(r) if r.uid == uid => r,
            _ => {
                map.insert(key.clone(), Remembered::new(uid, Managers::of(job)));
                return Verdict::Unchanged;
            }
        };
        if entry.first.are_those_of(job) {
            entry.warned = None;
            return Verdict::Unchanged;
        }
        let now = Managers::of(job);
        let warning =
            (entry.warned.as_ref() != Some(&now)).then(|| change_refused(&entry.first, &now));
        entry.warned = Some(now);
        Verdict::Changed {
            job: Box::new(entry.first.put_into(job)),
            warning,
        }
    }

    /// Forgets a deleted job.
    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }

    /// How many jobs are remembered (for tests).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Remembered {
    fn new(uid: &str, first: Managers) -> Self {
        Self {
            uid: uid.to_owned(),
            first,
            warned: None,
        }
    }
}

/// The Warning: which field changed, from what to what, what the operator
/// does instead, and the fix.
fn change_refused(first: &Managers, now: &Managers) -> String {
    let shown = |v: &Option<String>| {
        v.as_deref()
            .map_or("unset".to_owned(), |v| format!("{v:?}"))
    };
    let mut changed = Vec::new();
    if first.run_policy != now.run_policy {
        changed.push(format!(
            "spec.runPolicy.managedBy from {} to {}",
            shown(&first.run_policy),
            shown(&now.run_policy)
        ));
    }
    if first.top_level != now.top_level {
        changed.push(format!(
            "spec.managedBy from {} to {}",
            shown(&first.top_level),
            shown(&now.top_level)
        ));
    }
    format!(
        "{} changed after the TFJob was created; the field is immutable (Kubeflow's webhook \
         and this operator's CRD refuse the change), so the operator goes on as the job was \
         created. To hand the job to another manager, delete it and create it again with the \
         new value.",
        changed.join(" and ")
    )
}

impl ObserveHooks for ManagerMemory {
    fn observe(&self, _key: &ObjectKey, _job: &TFJob) -> Option<Box<dyn PlanHooks>> {
        None
    }

    fn as_planned(&self, key: &ObjectKey, job: &Arc<TFJob>) -> Option<AsPlanned> {
        match self.check(key, job) {
            Verdict::Unchanged => None,
            Verdict::Changed { job, warning } => Some(AsPlanned {
                job: Arc::from(job),
                warning: warning.map(|message| (REASON_MANAGED_BY_CHANGE_IGNORED, message)),
            }),
        }
    }

    fn forget(&self, key: &ObjectKey) {
        ManagerMemory::forget(self, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::constants::{MANAGED_BY_MULTIKUEUE, MANAGED_BY_THIS_OPERATOR};

    fn job(uid: &str, run_policy: Option<&str>) -> TFJob {
        let mut job = TFJob::new("j", Default::default());
        job.metadata.namespace = Some("ns".into());
        job.metadata.uid = Some(uid.into());
        job.spec.run_policy.managed_by = run_policy.map(str::to_owned);
        job
    }

    fn key() -> ObjectKey {
        ObjectKey::new(Some("ns"), "j")
    }

    #[test]
    fn a_job_as_first_seen_is_planned_as_it_is() {
        let memory = ManagerMemory::default();
        assert!(matches!(
            memory.check(&key(), &job("u1", None)),
            Verdict::Unchanged
        ));
        assert!(matches!(
            memory.check(&key(), &job("u1", None)),
            Verdict::Unchanged
        ));
        assert_eq!(memory.len(), 1);
    }

    #[test]
    fn a_change_is_planned_with_the_first_manager_and_warned_about_once() {
        let memory = ManagerMemory::default();
        memory.check(&key(), &job("u1", None));
        let changed = job("u1", Some(MANAGED_BY_MULTIKUEUE));
        let Verdict::Changed {
            job: planned,
            warning,
        } = memory.check(&key(), &changed)
        else {
            panic!("a change must be seen");
        };
        assert_eq!(
            planned.spec.run_policy.managed_by, None,
            "the first manager is put back"
        );
        let warning = warning.expect("a Warning the first time");
        assert!(
            warning
                .contains("spec.runPolicy.managedBy from unset to \"kueue.x-k8s.io/multikueue\"")
                && warning.contains("immutable")
                && warning.contains("delete it and create it again"),
            "{warning}"
        );
        let Verdict::Changed { warning, .. } = memory.check(&key(), &changed) else {
            panic!("still changed");
        };
        assert_eq!(warning, None, "warned once per change");
    }

    #[test]
    fn another_change_warns_again_and_a_change_back_is_as_first_seen() {
        let memory = ManagerMemory::default();
        memory.check(&key(), &job("u1", Some(MANAGED_BY_MULTIKUEUE)));
        let Verdict::Changed {
            job: planned,
            warning,
        } = memory.check(&key(), &job("u1", Some(MANAGED_BY_THIS_OPERATOR)))
        else {
            panic!("a change must be seen");
        };
        assert_eq!(
            planned.spec.run_policy.managed_by.as_deref(),
            Some(MANAGED_BY_MULTIKUEUE),
            "a job first seen as MultiKueue's stays MultiKueue's"
        );
        assert!(warning.is_some());
        let Verdict::Changed { warning, .. } =
            memory.check(&key(), &job("u1", Some("example.com/other")))
        else {
            panic!("a second change must be seen");
        };
        assert!(warning.is_some(), "a different change is warned about too");
        assert!(matches!(
            memory.check(&key(), &job("u1", Some(MANAGED_BY_MULTIKUEUE))),
            Verdict::Unchanged
        ));
        let Verdict::Changed { warning, .. } = memory.check(&key(), &job("u1", None)) else {
            panic!("changed again");
        };
        assert!(
            warning.is_some(),
            "after a change back, a new change warns again"
        );
    }

    #[test]
    fn a_namesake_and_a_deleted_job_start_afresh() {
        let memory = ManagerMemory::default();
        memory.check(&key(), &job("u1", None));
        assert!(matches!(
            memory.check(&key(), &job("u2", Some(MANAGED_BY_MULTIKUEUE))),
            Verdict::Unchanged
        ));
        memory.forget(&key());
        assert!(memory.is_empty());
        assert!(matches!(
            memory.check(&key(), &job("u3", None)),
            Verdict::Unchanged
        ));
    }

    #[test]
    fn the_top_level_field_counts_too() {
        let memory = ManagerMemory::default();
        memory.check(&key(), &job("u1", None));
        let mut changed = job("u1", None);
        changed.spec.managed_by = Some(MANAGED_BY_MULTIKUEUE.into());
        let Verdict::Changed {
            job: planned,
            warning,
        } = memory.check(&key(), &changed)
        else {
            panic!("a change must be seen");
        };
        assert_eq!(planned.spec.managed_by, None);
        assert!(warning.is_some_and(|w| w.starts_with("spec.managedBy from unset")));
    }
}
