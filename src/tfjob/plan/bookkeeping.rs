//! What the controller must remember about a job that its Pods cannot tell
//! it again: restarts so far (counted against `backoffLimit`), the indexes
//! that already succeeded (never run again after their Pod is gone), which
//! failed Pods are already counted, the kubelet's in-place restarts seen so
//! far (a Pod's `restartCount` is lost with the Pod), whether unfinished
//! Pods must still be stopped after a deadline or backoff failure, and
//! whether the user was told the job's Pods cannot join the gang it asks for.
//!
//! It lives in one annotation on the TFJob, [`ANNOTATION`], not in
//! `.status`: Kubeflow's own CRD (which users who migrate keep installed)
//! prunes every status field it does not know, and our backoff and
//! succeeded-index fixes would silently revert under it. Metadata is never
//! pruned, so the same bookkeeping works under both CRDs. Under our CRD the
//! same numbers are also shown in `.status.replicaStatuses[*].restarts` and
//! `succeededIndexes`, for people.
//!
//! Crash safety: a restart is written here *before* its Pod is deleted,
//! keyed by the failed Pod's UID. If the operator dies between the two
//! writes, the next run finds the UID already counted and only deletes; a
//! UID is forgotten once its Pod is gone from the cache. So every restart
//! is counted exactly once, whatever is killed when (Kubernetes Jobs keep
//! `uncountedTerminatedPods` in status for the same reason).
//!
//! Adopting a job Kubeflow's training-operator ran (it has no annotation of
//! ours): its in-place restarts are on its live Pods (`restartCount`), which
//! the backoff limit reads every pass, and the first pass records them here.
//! Its re-creations leave almost nothing: training-operator v1.9 keeps no
//! count (its status has no `restarts`, its backoff check ignores them,
//! kubeflow/training-operator#2045), a re-created Pod has the old name, and
//! its `TFJobRestarting` Events expire after an hour and are not watched. The
//! one durable trace is its `Restarting` condition while a restart is under
//! way, naming the replica type ("job j is restarting because Worker
//! replica(s) failed."): that counts as one re-creation of that type
//! ([`Bookkeeping::of`]), and is written here on the first pass so it
//! survives the condition. Older re-creations are not guessed (a Pod created
//! late can also be a slow first create); `tfjob-operator migrate --check`
//! shows those its Events still tell, with the annotation that counts them.
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::api::constants::{ReplicaType, condition};
use crate::api::types::TFJob;

use crate::tfjob::children::index_set;

/// The annotation that holds a job's bookkeeping, as JSON.
pub const ANNOTATION: &str = "tfjob-operator.kubeflow.org/bookkeeping";

/// A job's bookkeeping (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bookkeeping {
    /// Restarts by re-creating a failed Pod, by replica type (`Worker`,
    /// `PS`, …). In-place restarts are kept apart (below): the backoff
    /// limit counts those from the live Pods, as Kubeflow does.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub restarts: BTreeMap<String, i32>,
    /// The kubelet's in-place restarts (`restartCount`, OnFailure/Always)
    /// of Pods still present, by Pod UID: the most seen.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub in_place_pods: BTreeMap<String, InPlaceRestarts>,
    /// In-place restarts of Pods that are gone, by replica type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub in_place_gone: BTreeMap<String, i32>,
    /// Indexes whose Pod succeeded, by replica type, as ranges (`"0,2-4"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub succeeded_indexes: BTreeMap<String, String>,
    /// UIDs of failed Pods whose restart is counted in `restarts` and whose
    /// deletion has not been seen yet.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub counted_pods: BTreeSet<String>,
    /// The job failed on its deadline or backoff limit: its running and
    /// pending Pods are stopped on every pass until they are gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stop_unfinished: bool,
    /// The job asks for a gang but its Pods were created without one
    /// (`schedulingPolicy` added later, [`crate::tfjob::integrations::gang::outside_a_gang`]): the
    /// Warning was given, once; forgotten when the job has no Pods left.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside_a_gang: bool,
    /// Read from another operator's trace, not from our annotation (see the
    /// module docs): worth writing down on the next pass. Never stored.
    #[serde(skip)]
    pub adopted: bool,
}

/// One Pod's in-place restarts, and its replica type (to add them to the
/// type's total once the Pod is gone).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceRestarts {
    pub replica_type: String,
    pub count: i32,
}

impl Bookkeeping {
    /// Reads a job's bookkeeping: the annotation, merged with the status
    /// fields that older versions of this operator kept it in (so upgrading
    /// never forgets a restart). A malformed annotation reads as empty
    /// rather than failing the job; the status fields still count.
    pub fn of(job: &TFJob) -> Self {
        let annotation = job
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION));
        let mut b: Bookkeeping = annotation
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        if annotation.is_none()
            && let Some(rtype) = restart_under_way(job)
        {
            b.restarts.insert(rtype.as_str().to_owned(), 1);
            b.adopted = true;
        }
        for (rtype, rs) in job.status.iter().flat_map(|s| &s.replica_statuses) {
            // The status shows re-creations plus in-place restarts; only
            // the re-creations are ours to remember here.
            let recreations = rs.restarts - b.in_place_of(rtype);
            if recreations > 0 {
                let n = b.restarts.entry(rtype.clone()).or_default();
                *n = (*n).max(recreations);
            }
            if let Some(from_status) = rs.succeeded_indexes.as_deref() {
                let mut set = b.succeeded(rtype);
                set.extend(index_set::parse(Some(from_status)));
                b.set_succeeded(rtype, &set);
            }
        }
        b
    }

    /// Restarts of one replica type.
    pub fn restarts_of(&self, rtype: ReplicaType) -> i32 {
        self.restarts.get(rtype.as_str()).copied().unwrap_or(0)
    }

    /// In-place restarts of one replica type (by its status key): those of
    /// the Pods that are gone and the most seen of those present.
    pub fn in_place_of(&self, rtype: &str) -> i32 {
        self.in_place_gone.get(rtype).copied().unwrap_or(0)
            + self
                .in_place_pods
                .values()
                .filter(|p| p.replica_type == rtype)
                .map(|p| p.count)
                .sum::<i32>()
    }

    /// What `replicaStatuses[rtype].restarts` shows: every restart, in place
    /// or by re-creating the Pod.
    pub fn shown_restarts(&self, rtype: &str) -> i32 {
        self.restarts.get(rtype).copied().unwrap_or(0) + self.in_place_of(rtype)
    }

    /// Records a live Pod's in-place restarts (its `restartCount`); the
    /// count only grows while the Pod lives.
    pub fn see_in_place(&mut self, rtype: ReplicaType, uid: &str, count: i32) {
        if count <= 0 {
            return;
        }
        let seen = self
            .in_place_pods
            .entry(uid.to_owned())
            .or_insert_with(|| InPlaceRestarts {
                replica_type: rtype.as_str().to_owned(),
                count: 0,
            });
        seen.count = seen.count.max(count);
    }

    /// Restarts over every type.
    pub fn total_restarts(&self) -> i32 {
        self.restarts.values().sum()
    }

    /// The succeeded indexes of one replica type (by its status key).
    pub fn succeeded(&self, rtype: &str) -> BTreeSet<i32> {
        index_set::parse(self.succeeded_indexes.get(rtype).map(String::as_str))
    }

    /// Replaces the succeeded indexes of one replica type.
    pub fn set_succeeded(&mut self, rtype: &str, set: &BTreeSet<i32>) {
        match index_set::format(set) {
            Some(ranges) => {
                self.succeeded_indexes.insert(rtype.to_owned(), ranges);
            }
            None => {
                self.succeeded_indexes.remove(rtype);
            }
        }
    }

    /// Counts a restart of the failed Pod `uid` unless it is counted
    /// already; returns whether it was new.
    pub fn count_restart(&mut self, rtype: ReplicaType, uid: &str) -> bool {
        if !self.counted_pods.insert(uid.to_owned()) {
            return false;
        }
        *self.restarts.entry(rtype.as_str().to_owned()).or_default() += 1;
        true
    }

    /// Forgets counted UIDs whose Pods are no longer in the cache: their
    /// deletion was seen, so they can never be counted again.
    pub fn forget_gone_pods<'a>(&mut self, present: impl IntoIterator<Item = &'a str>) {
        let present: BTreeSet<&str> = present.into_iter().collect();
        self.counted_pods
            .retain(|uid| present.contains(uid.as_str()));
        // A gone Pod's in-place restarts move to its type's total.
        let gone: Vec<String> = self
            .in_place_pods
            .keys()
            .filter(|uid| !present.contains(uid.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(p) = self.in_place_pods.remove(&uid) {
                *self.in_place_gone.entry(p.replica_type).or_default() += p.count;
            }
        }
    }

    /// Whether writing `self` over `stored` would tell a future pass
    /// anything new. Forgetting gone Pods alone is not worth a write: it is
    /// carried along with the next change.
    pub fn differs_from(&self, stored: &Bookkeeping) -> bool {
        stored.adopted
            || self.restarts != stored.restarts
            || self.succeeded_indexes != stored.succeeded_indexes
            || self.stop_unfinished != stored.stop_unfinished
            || self.outside_a_gang != stored.outside_a_gang
            || !self.counted_pods.is_subset(&stored.counted_pods)
            || self.in_place_pods.iter().any(|(uid, p)| {
                stored
                    .in_place_pods
                    .get(uid)
                    .is_none_or(|s| s.count < p.count)
            })
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        // Serialising plain maps and sets of strings and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The replica type a job's true `Restarting` condition names (see the
/// module docs), if any.
fn restart_under_way(job: &TFJob) -> Option<ReplicaType> {
    let restarting = job
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == condition::RESTARTING && c.status == "True")?;
    replica_type_named(restarting.message.as_deref())
}

/// The replica type a restart message names: training-operator's and ours
/// end "… restarting because Worker replica(s) failed.".
pub fn replica_type_named(message: Option<&str>) -> Option<ReplicaType> {
    let (_, after) = message?.rsplit_once(" because ")?;
    let (rtype, rest) = after.split_once(' ')?;
    rest.starts_with("replica(s) failed")
        .then(|| ReplicaType::parse(rtype))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fixtures::TfJobFixture;
    use crate::api::types::ReplicaStatus;

    fn job_with_annotation(value: &str) -> TFJob {
        let mut job = TfJobFixture::new("j").workers(2).build();
        job.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION.into(), value.into());
        job
    }

    #[test]
    fn a_restart_of_the_same_pod_is_counted_once() {
        let mut b = Bookkeeping::default();
        assert!(b.count_restart(ReplicaType::Worker, "uid-1"));
        assert!(!b.count_restart(ReplicaType::Worker, "uid-1"));
        assert!(b.count_restart(ReplicaType::Worker, "uid-2"));
        assert_eq!(b.restarts_of(ReplicaType::Worker), 2);
    }

    #[test]
    fn the_annotation_round_trips() {
        let mut b = Bookkeeping::default();
        b.count_restart(ReplicaType::PS, "u");
        b.set_succeeded("Worker", &[0, 2, 3].into());
        b.stop_unfinished = true;
        let job = job_with_annotation(&b.to_annotation());
        assert_eq!(Bookkeeping::of(&job), b);
    }

    #[test]
    fn status_fields_of_older_versions_are_merged_in() {
        let mut job = job_with_annotation(r#"{"restarts":{"Worker":1}}"#);
        job.status
            .get_or_insert_with(Default::default)
            .replica_statuses
            .insert(
                "Worker".into(),
                ReplicaStatus {
                    restarts: 3,
                    succeeded_indexes: Some("1".into()),
                    ..ReplicaStatus::default()
                },
            );
        let b = Bookkeeping::of(&job);
        assert_eq!(b.restarts_of(ReplicaType::Worker), 3);
        assert_eq!(b.succeeded("Worker"), [1].into());
    }

    #[test]
    fn a_malformed_annotation_reads_as_empty() {
        let job = job_with_annotation("{not json");
        assert_eq!(Bookkeeping::of(&job), Bookkeeping::default());
    }

    #[test]
    fn forgetting_gone_pods_alone_is_not_a_change_worth_writing() {
        let mut stored = Bookkeeping::default();
        stored.count_restart(ReplicaType::Worker, "gone");
        let mut next = stored.clone();
        next.forget_gone_pods(["other"]);
        assert!(next.counted_pods.is_empty());
        assert!(!next.differs_from(&stored));
        next.count_restart(ReplicaType::Worker, "new");
        assert!(next.differs_from(&stored));
    }

    fn restarting(job: &mut TFJob, status: &str, message: &str) {
        job.status
            .get_or_insert_with(Default::default)
            .conditions
            .push(crate::api::types::JobCondition {
                type_: condition::RESTARTING.into(),
                status: status.into(),
                reason: Some("TFJobRestarting".into()),
                message: Some(message.into()),
                ..Default::default()
            });
    }

    const TRAINING_OPERATOR_RESTARTING: &str =
        "job j is restarting because Worker replica(s) failed.";

    #[test]
    fn a_job_training_operator_is_restarting_counts_one_re_creation_of_the_named_type() {
        let mut job = TfJobFixture::new("j").workers(2).build();
        restarting(&mut job, "True", TRAINING_OPERATOR_RESTARTING);
        let b = Bookkeeping::of(&job);
        assert_eq!(b.restarts_of(ReplicaType::Worker), 1);
        assert_eq!(b.total_restarts(), 1);
        assert!(b.adopted);
    }

    #[test]
    fn with_our_annotation_the_restarting_condition_adds_nothing() {
        let mut job = job_with_annotation(r#"{"restarts":{"Worker":2}}"#);
        restarting(&mut job, "True", TRAINING_OPERATOR_RESTARTING);
        let b = Bookkeeping::of(&job);
        assert_eq!(b.restarts_of(ReplicaType::Worker), 2);
        assert!(!b.adopted);
    }

    #[test]
    fn a_restarting_condition_that_is_over_counts_nothing() {
        let mut job = TfJobFixture::new("j").workers(2).build();
        restarting(&mut job, "False", TRAINING_OPERATOR_RESTARTING);
        assert_eq!(Bookkeeping::of(&job), Bookkeeping::default());
    }

    #[test]
    fn the_count_read_from_the_condition_is_worth_writing_once_and_then_kept() {
        let mut job = TfJobFixture::new("j").workers(2).build();
        restarting(&mut job, "True", TRAINING_OPERATOR_RESTARTING);
        let stored = Bookkeeping::of(&job);
        assert!(stored.clone().differs_from(&stored), "never written yet");
        // Written: from then on the annotation holds it, whatever the
        // conditions say (Running replaces Restarting).
        let mut written = job_with_annotation(&stored.to_annotation());
        written.status = None;
        let again = Bookkeeping::of(&written);
        assert_eq!(again.restarts_of(ReplicaType::Worker), 1);
        assert!(!again.adopted);
        assert!(!again.clone().differs_from(&again));
    }

    #[test]
    fn restart_messages_name_their_replica_type_for_both_operators() {
        let ours = crate::tfjob::kubeflow::messages::restarting("because-ps", "PS");
        assert_eq!(replica_type_named(Some(&ours)), Some(ReplicaType::PS));
        assert_eq!(
            replica_type_named(Some(TRAINING_OPERATOR_RESTARTING)),
            Some(ReplicaType::Worker)
        );
        for other in [
            "TFJob j is running.",
            "job j is restarting because Gardener replica(s) failed.",
            "because Worker",
        ] {
            assert_eq!(replica_type_named(Some(other)), None, "{other}");
        }
        assert_eq!(replica_type_named(None), None);
    }
}
