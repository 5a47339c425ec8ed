//! Expectations: the creates and deletes a controller has asked for but not
//! yet seen come back through its informer.
//!
//! Mirrors `ControllerExpectations` and `UIDTrackingControllerExpectations` in
//! kubernetes/kubernetes `pkg/controller/controller_utils.go`. The informer
//! cache lags the API server: right after a controller creates a Pod, its
//! cache may still show the old set of children, and a naive reconcile would
//! create the Pod again. So before writing, the controller *raises*
//! expectations for its owner key; the event handlers *lower* them as the
//! children appear in (or vanish from) the cache; and reconcile does not act
//! on children until the owner's expectations are [`satisfied`](Expectations::satisfied).
//!
//! Two deliberate differences from Kubeflow's training-operator:
//! - One entry per owner covers every child kind and replica type, so
//!   "satisfied" is the AND of all pending work (training-operator keeps one
//!   entry per replica type and ORs them, so one satisfied type lets a
//!   reconcile act on the others too early).
//! - Nothing here resets expectations to "satisfied" at the start of a
//!   reconcile; only observations, failures, the TTL and [`forget`](Expectations::forget) do.
//!
//! Deletions are tracked by the child's UID (or any stable child key), not by
//! a count, so a duplicate delete notification (a watch `DELETED` followed by
//! a relist tombstone for the same Pod) is not counted twice.
//!
//! This module never talks to the API server and never blocks: it is a map
//! behind a mutex, called from event handlers and reconcilers alike.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::runtime::cache::key::ObjectKey;

/// How long expectations may stay unmet before they are treated as met.
///
/// The same 5 minutes as k/k's `ExpectationsTimeout`: if a watch event was
/// lost for good, the controller must not wait forever; after the TTL the next
/// reconcile acts on whatever the cache shows.
pub const EXPECTATIONS_TTL: Duration = Duration::from_secs(5 * 60);

/// What one owner is still waiting for.
#[derive(Clone, Debug)]
struct Pending {
    /// Creates requested but not yet observed.
    creates: usize,
    /// UIDs (or keys) of children whose deletion was requested but not yet observed.
    deletes: HashSet<String>,
    /// When these expectations were last raised; the TTL counts from here.
    raised_at: Instant,
}

impl Pending {
    fn fulfilled(&self) -> bool {
        self.creates == 0 && self.deletes.is_empty()
    }
}

/// Pending creates and deletes per owner key. Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct Expectations {
    inner: Arc<Mutex<HashMap<ObjectKey, Pending>>>,
    ttl: Duration,
}

impl Default for Expectations {
    fn default() -> Self {
        Self::new()
    }
}

/// A snapshot of one owner's pending work, for logs and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCounts {
    pub creates: usize,
    pub deletes: usize,
    pub expired: bool,
}

impl Expectations {
    /// Expectations with the standard 5-minute TTL.
    pub fn new() -> Self {
        Self::with_ttl(EXPECTATIONS_TTL)
    }

    /// Expectations with a custom TTL (tests, or very slow clusters).
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            inner: Arc::new(Mutex::new(HashMap::new())),
            ttl,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ObjectKey, Pending>> {
        // A panic while holding this lock cannot leave the map half-updated
        // (every mutation is a single statement), so a poisoned lock is safe to reuse.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry for `key`, ready to be raised. An expired entry is started
    /// afresh: stale counts from a lost event must not pile onto new ones.
    fn raise<'a>(
        &self,
        map: &'a mut HashMap<ObjectKey, Pending>,
        key: &ObjectKey,
        now: Instant,
    ) -> &'a mut Pending {
        let entry = map.entry(key.clone()).or_insert_with(|| Pending {
            creates: 0,
            deletes: HashSet::new(),
            raised_at: now,
        });
        if now.duration_since(entry.raised_at) >= self.ttl {
            entry.creates = 0;
            entry.deletes.clear();
        }
        entry.raised_at = now;
        entry
    }

    /// Records that `n` creates for `owner` are about to be sent. Call this
    /// *before* the API calls, so an informer event that arrives before the
    /// call returns still finds the expectation to lower.
    pub fn expect_creations(&self, owner: &ObjectKey, n: usize) {
        if n == 0 {
            return;
        }
        let mut map = self.lock();
        let entry = self.raise(&mut map, owner, Instant::now());
        entry.creates += n;
    }

    /// A child created for `owner` appeared in the cache.
    pub fn creation_observed(&self, owner: &ObjectKey) {
        self.lower_creates(owner);
    }

    /// A create for `owner` failed, so it will never be observed: lower the
    /// expectation now instead of waiting out the TTL.
    pub fn creation_failed(&self, owner: &ObjectKey) {
        self.lower_creates(owner);
    }

    fn lower_creates(&self, owner: &ObjectKey) {
        let mut map = self.lock();
        if let Some(entry) = map.get_mut(owner) {
            // Saturating: an observation with nothing pending (a child created
            // by an earlier incarnation of the controller) must not bank a
            // credit that would make a future expectation look met.
            entry.creates = entry.creates.saturating_sub(1);
        }
    }

    /// Records that the children with these UIDs are about to be deleted.
    pub fn expect_deletions<S: AsRef<str>>(&self, owner: &ObjectKey, uids: &[S]) {
        if uids.is_empty() {
            return;
        }
        let mut map = self.lock();
        let entry = self.raise(&mut map, owner, Instant::now());
        entry
            .deletes
            .extend(uids.iter().map(|u| u.as_ref().to_owned()));
    }

    /// The child with this UID vanished from the cache. Observing the same UID
    /// twice (watch event, then a relist tombstone) lowers the count once.
    pub fn deletion_observed(&self, owner: &ObjectKey, uid: &str) {
        let mut map = self.lock();
        if let Some(entry) = map.get_mut(owner) {
            entry.deletes.remove(uid);
        }
    }

    /// A delete failed (and not with 404), so it will never be observed.
    pub fn deletion_failed(&self, owner: &ObjectKey, uid: &str) {
        self.deletion_observed(owner, uid);
    }

    /// True when `owner` may act on what its cache shows: every create and
    /// every delete it asked for has been observed (or failed), or the
    /// expectations are older than the TTL, or none were ever raised.
    pub fn satisfied(&self, owner: &ObjectKey) -> bool {
        let map = self.lock();
        match map.get(owner) {
            None => true,
            Some(entry) => {
                entry.fulfilled() || Instant::now().duration_since(entry.raised_at) >= self.ttl
            }
        }
    }

    /// What `owner` is still waiting for, or `None` if nothing was ever raised.
    pub fn pending(&self, owner: &ObjectKey) -> Option<PendingCounts> {
        let map = self.lock();
        map.get(owner).map(|entry| PendingCounts {
            creates: entry.creates,
            deletes: entry.deletes.len(),
            expired: Instant::now().duration_since(entry.raised_at) >= self.ttl,
        })
    }

    /// Drops everything known about `owner`: call it when the owner itself is
    /// deleted, so the map does not grow without bound.
    pub fn forget(&self, owner: &ObjectKey) {
        self.lock().remove(owner);
    }

    /// How many owners have entries (for tests and a debug gauge).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no owner has an entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn job(name: &str) -> ObjectKey {
        ObjectKey::new(Some("ns"), name)
    }

    #[test]
    fn an_owner_with_no_expectations_is_satisfied() {
        let exp = Expectations::new();
        assert!(exp.satisfied(&job("a")));
        assert_eq!(exp.pending(&job("a")), None);
    }

    #[tokio::test(start_paused = true)]
    async fn creations_are_satisfied_only_after_every_one_is_observed() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 2);
        assert!(!exp.satisfied(&job("a")));
        exp.creation_observed(&job("a"));
        assert!(!exp.satisfied(&job("a")));
        exp.creation_observed(&job("a"));
        assert!(exp.satisfied(&job("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_create_lowers_the_expectation() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 2);
        exp.creation_observed(&job("a"));
        exp.creation_failed(&job("a"));
        assert!(exp.satisfied(&job("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn raising_twice_adds_up_rather_than_replacing() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 1);
        exp.expect_creations(&job("a"), 1);
        exp.creation_observed(&job("a"));
        assert!(!exp.satisfied(&job("a")));
        assert_eq!(exp.pending(&job("a")).map(|p| p.creates), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_duplicate_delete_notification_is_not_counted_twice() {
        let exp = Expectations::new();
        exp.expect_deletions(&job("a"), &["uid-1", "uid-2"]);
        exp.deletion_observed(&job("a"), "uid-1");
        exp.deletion_observed(&job("a"), "uid-1");
        assert!(!exp.satisfied(&job("a")), "uid-2 is still pending");
        exp.deletion_observed(&job("a"), "uid-2");
        assert!(exp.satisfied(&job("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn satisfied_requires_both_creates_and_deletes_to_be_observed() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 1);
        exp.expect_deletions(&job("a"), &["uid-1"]);
        exp.creation_observed(&job("a"));
        assert!(
            !exp.satisfied(&job("a")),
            "a pending delete keeps it unsatisfied"
        );
        exp.deletion_observed(&job("a"), "uid-1");
        assert!(exp.satisfied(&job("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn owners_do_not_share_expectations() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 1);
        exp.creation_observed(&job("b"));
        assert!(!exp.satisfied(&job("a")));
        assert!(exp.satisfied(&job("b")));
    }

    #[tokio::test(start_paused = true)]
    async fn unmet_expectations_count_as_satisfied_after_the_ttl() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 1);
        tokio::time::advance(EXPECTATIONS_TTL - Duration::from_secs(1)).await;
        assert!(!exp.satisfied(&job("a")));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(exp.satisfied(&job("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn raising_again_after_expiry_starts_from_zero() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 3);
        tokio::time::advance(EXPECTATIONS_TTL).await;
        exp.expect_creations(&job("a"), 1);
        assert!(!exp.satisfied(&job("a")), "the new expectation is fresh");
        exp.creation_observed(&job("a"));
        assert!(exp.satisfied(&job("a")), "the stale 3 were dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn raising_again_restarts_the_ttl() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 1);
        tokio::time::advance(Duration::from_secs(200)).await;
        exp.expect_creations(&job("a"), 1);
        tokio::time::advance(Duration::from_secs(200)).await;
        assert!(
            !exp.satisfied(&job("a")),
            "400 s since the first raise, 200 s since the last"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_observation_with_nothing_pending_does_not_bank_a_credit() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 1);
        exp.creation_observed(&job("a"));
        exp.creation_observed(&job("a"));
        exp.expect_creations(&job("a"), 1);
        assert!(!exp.satisfied(&job("a")));
    }

    #[tokio::test(start_paused = true)]
    async fn forget_drops_the_owner_entirely() {
        let exp = Expectations::new();
        exp.expect_creations(&job("a"), 1);
        assert_eq!(exp.len(), 1);
        exp.forget(&job("a"));
        assert!(exp.is_empty());
        assert!(exp.satisfied(&job("a")));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Expect(usize),
        Observe,
        ExpectDelete(u8),
        ObserveDelete(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..4).prop_map(Op::Expect),
            Just(Op::Observe),
            (0u8..6).prop_map(Op::ExpectDelete),
            (0u8..6).prop_map(Op::ObserveDelete),
        ]
    }

    proptest! {
        /// A simple model: satisfied exactly when the creates raised minus
        /// observed (floored at zero at each step) is zero and every UID asked
        /// to be deleted has been observed.
        #[test]
        fn satisfied_matches_a_simple_model(ops in proptest::collection::vec(op(), 0..40)) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            rt.block_on(async {
                let exp = Expectations::new();
                let owner = job("model");
                let mut creates = 0usize;
                let mut deletes = HashSet::new();
                for op in ops {
                    match op {
                        Op::Expect(n) => { exp.expect_creations(&owner, n); creates += n; }
                        Op::Observe => { exp.creation_observed(&owner); creates = creates.saturating_sub(1); }
                        Op::ExpectDelete(u) => { exp.expect_deletions(&owner, &[u.to_string()]); deletes.insert(u.to_string()); }
                        Op::ObserveDelete(u) => { exp.deletion_observed(&owner, &u.to_string()); deletes.remove(&u.to_string()); }
                    }
                    prop_assert_eq!(exp.satisfied(&owner), creates == 0 && deletes.is_empty());
                }
                Ok(())
            })?;
        }
    }
}
