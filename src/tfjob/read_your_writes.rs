//! Read-your-writes for the job's status (see [`WrittenStatus`]).
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::api::TFJob;
use crate::runtime::ObjectKey;

/// Read-your-writes for status: the job as our last status write left it,
/// until the informer cache catches up.
///
/// Right after a status write the cache still holds the version we wrote
/// over; a reconcile in that window (a Pod event arrives first) would plan
/// from the old status and its write would fail with 409 — for a 500-replica
/// job that is dozens of wasted writes. So we keep what the API server
/// returned, keyed by the resourceVersion it replaced, and use it while the
/// cache still shows that version. Writes can chain before the cache catches
/// up (10 → 11 → 12 while the cache still shows 10), so every version our
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
    stored: Arc<TFJob>,
}

impl WrittenStatus {
    fn lock(&self) -> MutexGuard<'_, Written> {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that our write replaced version `before` with `stored`.
    pub fn remember(&self, key: &ObjectKey, before: &str, stored: TFJob) {
        let mut map = self.lock();
        let mut replaced = match map.remove(key) {
            // Written over our own previous write: the chain goes on.
            Some(prev)
                if prev.stored.metadata.resource_version.as_deref() == Some(before)
                    && prev.stored.metadata.uid == stored.metadata.uid =>
            {
                prev.replaced
            }
            _ => Vec::new(),
        };
        replaced.push(before.to_owned());
        if replaced.len() > MAX_CHAIN {
            replaced.remove(0);
        }
        let stored = Arc::new(stored);
        map.insert(key.clone(), OurWrite { replaced, stored });
    }

    /// The newer of the cached job and our own last write.
    pub fn newest(&self, key: &ObjectKey, cached: Arc<TFJob>) -> Arc<TFJob> {
        let mut map = self.lock();
        let Some(ours) = map.get(key) else {
            return cached;
        };
        let cached_is_older = cached.metadata.uid == ours.stored.metadata.uid
            && cached
                .metadata
                .resource_version
                .as_deref()
                .is_some_and(|rv| ours.replaced.iter().any(|r| r == rv));
        if cached_is_older {
            ours.stored.clone()
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
    use super::*;
    use crate::api::fixtures::TfJobFixture;

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
}
