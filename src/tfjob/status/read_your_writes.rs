//! Read-your-writes for the job's status (see [`WrittenStatus`]).
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::types::{TFJob, TFJobStatus};
use crate::runtime::cache::key::ObjectKey;

/// Read-your-writes for status: the job as our last status write left it,
/// until the informer cache catches up.
///
/// Right after a status write the cache still holds the version we wrote
/// over; a reconcile in that window (a Pod event arrives first) would plan
/// from the old status and its write would fail with 409 — for a 500-replica
/// job that is dozens of wasted writes. So we keep what our write changed,
/// keyed by the resourceVersion it replaced, and use it while the cache
/// still shows that version. Writes can chain before the cache catches up
/// (10 → 11 → 12 while the cache still shows 10), so every version our
/// writes replaced in a row is kept, not only the last. Any other cached
/// version (ours arriving, or someone else's change) wins. controller-runtime
/// has no such aid (kubernetes-sigs/controller-runtime#1464, #3320).
#[derive(Clone, Default)]
pub struct WrittenStatus {
    by_key: Arc<Mutex<Written>>,
}

/// Per job: our last write, and the versions our writes replaced in a row.
type Written = HashMap<ObjectKey, OurWrite>;

/// A longer chain than this means the watch is far behind; forgetting its
/// oldest link costs at most one 409 and a retry.
const MAX_CHAIN: usize = 8;

struct OurWrite {
    /// Oldest first; resourceVersions are opaque, so only equality is used.
    replaced: Vec<String>,
    left: Left,
}

/// What our last write left on the server, as far as it differs from the
/// versions it replaced: not the server's whole response. Every write in a
/// chain is a compare-and-swap over the one before, and ours change only the
/// status (the status subresource) and the annotations (the bookkeeping
/// merge patch), so a replaced version from the cache plus these is the
/// stored object. The response's spec and `managedFields` (13.5 KB per job
/// of `serde_json` maps, for a field nothing reads) stay out: this entry
/// lives as long as the watch lags behind a job's write, for every job
/// written in a burst at once.
struct Left {
    uid: Option<String>,
    resource_version: Option<String>,
    annotations: Option<BTreeMap<String, String>>,
    status: Option<TFJobStatus>,
}

impl Left {
    /// Takes what `Left` keeps, cloned: decoded from JSON, the response's
    /// `Vec`s have room to spare, a clone has none.
    fn of(stored: &TFJob) -> Self {
        Self {
            uid: stored.metadata.uid.clone(),
            resource_version: stored.metadata.resource_version.clone(),
            annotations: stored.metadata.annotations.clone(),
            status: stored.status.clone(),
        }
    }

    /// `replaced` (a cached version our writes replaced) as our write left it.
    fn over(&self, replaced: &TFJob) -> TFJob {
        let mut job = replaced.clone();
        job.metadata.resource_version = self.resource_version.clone();
        job.metadata.annotations = self.annotations.clone();
        job.metadata.managed_fields = None;
        job.status = self.status.clone();
        job
    }
}

impl WrittenStatus {
    fn lock(&self) -> MutexGuard<'_, Written> {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that our write replaced version `before` with `stored` (the
    /// API server's response).
    pub fn remember(&self, key: &ObjectKey, before: &str, stored: TFJob) {
        let mut map = self.lock();
        let mut replaced = match map.remove(key) {
            // Written over our own previous write: the chain goes on.
            Some(prev)
                if prev.left.resource_version.as_deref() == Some(before)
                    && prev.left.uid == stored.metadata.uid =>
            {
                prev.replaced
            }
            _ => Vec::new(),
        };
        replaced.push(before.to_owned());
        if replaced.len() > MAX_CHAIN {
            replaced.remove(0);
        }
        let left = Left::of(&stored);
        map.insert(key.clone(), OurWrite { replaced, left });
    }

    /// The newer of the cached job and our own last write.
    pub fn newest(&self, key: &ObjectKey, cached: Arc<TFJob>) -> Arc<TFJob> {
        let mut map = self.lock();
        let Some(ours) = map.get(key) else {
            return cached;
        };
        let cached_is_older = cached.metadata.uid == ours.left.uid
            && cached
                .metadata
                .resource_version
                .as_deref()
                .is_some_and(|rv| ours.replaced.iter().any(|r| r == rv));
        if cached_is_older {
            Arc::new(ours.left.over(&cached))
        } else {
            map.remove(key);
            cached
        }
    }

    pub fn forget(&self, key: &ObjectKey) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::api::fixtures::TfJobFixture;
    use crate::api::types::TFJobStatus;

    fn job(rv: &str, uid: &str) -> TFJob {
        let mut j = TfJobFixture::new("j").workers(1).uid(uid).build();
        j.metadata.resource_version = Some(rv.into());
        j
    }

    /// One job `default/j` (uid `u`) and what our writes left of it.
    struct Job {
        written: WrittenStatus,
        key: ObjectKey,
    }

    impl Job {
        fn new() -> Self {
            let key = ObjectKey::new(Some("default"), "j");
            Self {
                written: WrittenStatus::default(),
                key,
            }
        }

        /// Our status write replaced version `before` with `after`.
        fn wrote(&self, before: &str, after: &str) {
            self.written.remember(&self.key, before, job(after, "u"));
        }

        /// The version a reconcile plans from while the cache shows `cached`.
        fn plans_from(&self, cached: &str) -> String {
            let seen = self.written.newest(&self.key, Arc::new(job(cached, "u")));
            seen.metadata.resource_version.clone().unwrap_or_default()
        }
    }

    #[test]
    fn our_write_is_used_while_the_cache_still_shows_the_version_it_replaced() {
        let j = Job::new();
        j.wrote("10", "11");
        assert_eq!(j.plans_from("10"), "11");
    }

    #[test]
    fn chained_writes_are_used_while_the_cache_shows_any_version_they_replaced() {
        let j = Job::new();
        j.wrote("10", "11");
        j.wrote("11", "12");
        // The watch has delivered neither write yet: the cache shows 10.
        assert_eq!(j.plans_from("10"), "12");
        // The first write arrives: still older than our last.
        assert_eq!(j.plans_from("11"), "12");
    }

    #[test]
    fn a_write_over_someone_elses_version_starts_a_new_chain() {
        let j = Job::new();
        j.wrote("10", "11");
        // Someone else wrote 12; our next write replaced their version.
        j.wrote("12", "13");
        assert_eq!(j.plans_from("10"), "10");
    }

    #[test]
    fn a_long_chain_forgets_its_oldest_link() {
        let j = Job::new();
        let last = 10 + MAX_CHAIN as u32;
        for rv in 10..=last {
            j.wrote(&rv.to_string(), &(rv + 1).to_string());
        }
        assert_eq!(j.plans_from("11"), (last + 1).to_string());
        assert_eq!(j.plans_from("10"), "10");
    }

    #[test]
    fn any_other_cached_version_wins_and_ends_the_override() {
        let j = Job::new();
        j.wrote("10", "11");
        assert_eq!(j.plans_from("12"), "12");
        // Forgotten: even the old version now comes from the cache.
        assert_eq!(j.plans_from("10"), "10");
    }

    #[test]
    fn a_recreated_job_with_the_same_name_is_never_overridden() {
        let j = Job::new();
        j.written.remember(&j.key, "10", job("11", "old-uid"));
        let seen = j.written.newest(&j.key, Arc::new(job("10", "new-uid")));
        assert_eq!(seen.metadata.uid.as_deref(), Some("new-uid"));
    }

    /// The API server's response to our write over `cached`: a new
    /// version with our status and annotation, and the `managedFields` the
    /// server adds (decoded from JSON, as the client does).
    fn response(cached: &TFJob, rv: &str) -> TFJob {
        let mut stored = cached.clone();
        stored.metadata.resource_version = Some(rv.into());
        stored.metadata.annotations = Some(BTreeMap::from([("ours".into(), "1".into())]));
        stored.metadata.managed_fields = Some(
            serde_json::from_value(serde_json::json!([{
                "manager": "tfjob-operator",
                "operation": "Update",
                "subresource": "status",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {".": {}, "f:conditions": {}}},
            }]))
            .expect("managedFields"),
        );
        stored.status = Some(TFJobStatus {
            observed_generation: Some(1),
            ..TFJobStatus::default()
        });
        stored
    }

    #[test]
    fn while_the_cache_lags_the_job_is_the_servers_response_without_its_managed_fields() {
        let j = Job::new();
        let cached = job("10", "u");
        let stored = response(&cached, "11");
        assert!(stored.metadata.managed_fields.is_some());
        j.written.remember(&j.key, "10", stored.clone());
        let seen = j.written.newest(&j.key, Arc::new(cached));
        let metadata = ObjectMeta {
            managed_fields: None,
            ..stored.metadata
        };
        assert_eq!(seen.metadata, metadata);
        assert_eq!(seen.spec, stored.spec);
        assert_eq!(seen.status, stored.status);
    }

    #[test]
    fn the_responses_spec_is_not_kept_but_read_from_the_cached_version() {
        // Our writes are compare-and-swaps that change only the status and
        // annotations, so the cached version's spec is the response's: the
        // entry need not hold a copy. Told apart here by a spec that, on a
        // real server, could not differ.
        let j = Job::new();
        let cached = job("10", "u");
        let mut stored = response(&cached, "11");
        stored.spec.tf_replica_specs.clear();
        j.written.remember(&j.key, "10", stored);
        let seen = j.written.newest(&j.key, Arc::new(cached.clone()));
        assert_eq!(seen.spec, cached.spec);
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("11"));
    }
}
