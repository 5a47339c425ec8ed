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
/// cache still shows exactly that version. Any other cached version (ours
/// arriving, or someone else's change) wins. controller-runtime has no such
/// aid (kubernetes-sigs/controller-runtime#1464, #3320).
#[derive(Clone, Default)]
pub struct WrittenStatus {
    by_key: Arc<Mutex<Written>>,
}

/// Per job: the resourceVersion our write replaced, and what it stored.
type Written = HashMap<ObjectKey, (String, Arc<TFJob>)>;

impl WrittenStatus {
    fn lock(&self) -> MutexGuard<'_, Written> {
        self.by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that our write replaced version `before` with `stored`.
    pub fn remember(&self, key: &ObjectKey, before: &str, stored: TFJob) {
        self.lock()
            .insert(key.clone(), (before.to_owned(), Arc::new(stored)));
    }

    /// The newer of the cached job and our own last write.
    pub fn newest(&self, key: &ObjectKey, cached: Arc<TFJob>) -> Arc<TFJob> {
        let mut map = self.lock();
        match map.get(key) {
            Some((before, ours))
                if cached.metadata.resource_version.as_deref() == Some(before.as_str())
                    && cached.metadata.uid == ours.metadata.uid =>
            {
                ours.clone()
            }
            Some(_) => {
                map.remove(key);
                cached
            }
            None => cached,
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

    #[test]
    fn our_write_is_used_while_the_cache_still_shows_the_version_it_replaced() {
        let w = WrittenStatus::default();
        let key = ObjectKey::new(Some("default"), "j");
        w.remember(&key, "10", job("11", "u"));
        let seen = w.newest(&key, Arc::new(job("10", "u")));
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("11"));
    }

    #[test]
    fn any_other_cached_version_wins_and_ends_the_override() {
        let w = WrittenStatus::default();
        let key = ObjectKey::new(Some("default"), "j");
        w.remember(&key, "10", job("11", "u"));
        let seen = w.newest(&key, Arc::new(job("12", "u")));
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("12"));
        // Forgotten: even the old version now comes from the cache.
        let seen = w.newest(&key, Arc::new(job("10", "u")));
        assert_eq!(seen.metadata.resource_version.as_deref(), Some("10"));
    }

    #[test]
    fn a_recreated_job_with_the_same_name_is_never_overridden() {
        let w = WrittenStatus::default();
        let key = ObjectKey::new(Some("default"), "j");
        w.remember(&key, "10", job("11", "old-uid"));
        let seen = w.newest(&key, Arc::new(job("10", "new-uid")));
        assert_eq!(seen.metadata.uid.as_deref(), Some("new-uid"));
    }
}
