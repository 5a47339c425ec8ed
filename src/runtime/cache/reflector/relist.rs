//! The reflector's relist: a paginated LIST, or a streaming one
//! ("WatchList", KEP-3157), handed to the FIFO as one `replace`.
//!
//! Mirrors client-go `tools/cache/reflector.go` (`list`, `watchList`) and
//! `tools/pager`. Part of [`Reflector`]; see the parent module for the loop
//! that decides when to relist.
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kube::api::ListParams;
use kube::core::WatchEvent;

use super::raw::RawObject;
use super::watch::{WatchStreamState, is_decode_error};
use super::{INITIAL_EVENTS_END_ANNOTATION, Reflector, ReflectorError};
use crate::runtime::cache::delta_fifo::Undecodable;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::object::Object;

impl<K: Object> Reflector<K> {
    /// Decodes one object of a (re)list. When the cache already holds it at
    /// this resourceVersion — most objects, on a relist — the cached `Arc` is
    /// handed on and the text is never decoded: only its identity is read
    /// (a scan that allocates nothing). Otherwise the decoded object, or the
    /// cached one if they turn out equal after all. An object that does not
    /// decode is noted in `undecodable`, so the relist keeps its cached copy
    /// instead of tombstoning a live object.
    fn decode_listed(&self, raw: RawObject, undecodable: &mut Undecodable) -> Option<Arc<K>> {
        if !self.fifo.knows_nothing()
            && let Some(id) = raw.identity()
            && let (Some(name), Some(rv)) = (id.name.as_deref(), id.resource_version.as_deref())
        {
            let key = ObjectKey::new(id.namespace.as_deref(), name);
            if let Some(cached) = self.fifo.cached_unchanged(&key, id.uid.as_deref(), rv) {
                return Some(cached);
            }
        }
        let key = raw.key();
        let decoded = self.decode(raw);
        if decoded.is_none() {
            match key {
                Some(key) => {
                    undecodable.keys.insert(key);
                }
                None => undecodable.unknown_keys = true,
            }
        }
        decoded.map(|obj| self.fifo.reuse_unchanged(obj))
    }

    /// A full (re)list into the FIFO. A streaming list returns its watch,
    /// which continues with live events.
    pub(super) async fn list(&mut self) -> Result<Option<WatchStreamState>, ReflectorError> {
        if self.streaming_list {
            match self.streaming_list().await {
                Ok(stream) => return Ok(Some(stream)),
                // Throttled: honour Retry-After rather than list at once.
                Err(e) if e.retry_after().is_some() => return Err(e),
                Err(e) => {
                    // A server without WatchList (every supported version
                    // knows the parameter) refuses it with a 4xx: stop asking.
                    // Anything else, e.g. a stream cut by a restart before its
                    // end bookmark: fall back just this time.
                    let refused =
                        e.status().is_some_and(|s| (400..500).contains(&s.code)) && !e.is_expired();
                    if refused {
                        self.streaming_list = false;
                    }
                    tracing::info!(error = %e, "streaming list failed, falling back to paginated LIST");
                }
            }
        }
        self.paginated_list().await?;
        Ok(None)
    }

    /// A LIST in pages of `page_size` (client-go's pager), from page one
    /// again unpaginated if a continue token expires midway.
    async fn paginated_list(&self) -> Result<(), ReflectorError> {
        let mut params = ListParams::default().limit(self.config.page_size);
        params.label_selector = self.config.label_selector.clone();
        params.field_selector = self.config.field_selector.clone();
        let mut objects = Vec::new();
        let mut undecodable = Undecodable::default();
        let resource_version = loop {
            let page = match self.list_watch.list(&params).await {
                Ok(page) => page,
                // The continue token of a later page expired (etcd compacted
                // the snapshot the first page was read at). client-go's pager
                // (`FullListIfExpired`) then lists everything in one request
                // rather than start paging again, which compaction could
                // outrun again; the body cap still bounds that response
                // (`client/body.rs`), and if it fails the reflector relists
                // page by page after its backoff.
                Err(kube::Error::Api(status))
                    if params.continue_token.is_some() && super::is_expired(&status) =>
                {
                    tracing::info!(kind = %K::kind(&()), message = %status.message, "continue token expired: listing everything in one request");
                    objects.clear();
                    undecodable = Undecodable::default();
                    params.continue_token = None;
                    params.limit = None;
                    continue;
                }
                Err(e) => return Err(ReflectorError::List(e)),
            };
            objects.extend(
                page.items
                    .into_iter()
                    .filter_map(|raw| self.decode_listed(raw, &mut undecodable)),
            );
            match page.continue_token {
                Some(token) => params.continue_token = Some(token),
                None => break page.resource_version,
            }
        };
        tracing::debug!(target: "pipeline", stage = "1 reflector", kind = %K::kind(&()), objects = objects.len(), rv = %resource_version, "LIST done: replacing the FIFO's contents");
        self.fifo.replace_keeping(objects, &undecodable);
        self.status.set_resource_version(&resource_version);
        self.status.shared.lists.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// WatchList (KEP-3157): one watch that first replays the current state
    /// and marks its end with an annotated bookmark.
    async fn streaming_list(&self) -> Result<WatchStreamState, ReflectorError> {
        let (mut wp, timeout) = self.watch_params();
        wp = wp.initial_events();
        let stream = self
            .list_watch
            .watch(&wp, "")
            .await
            .map_err(ReflectorError::StartWatch)?;
        self.status.shared.watches.fetch_add(1, Ordering::Relaxed);
        let mut state = WatchStreamState::new(stream, timeout);
        let mut objects = Vec::new();
        let mut undecodable = Undecodable::default();
        loop {
            match state.next().await {
                None => return Err(ReflectorError::StreamingListIncomplete),
                Some(Err(e)) if is_decode_error(&e) => {
                    // An event we cannot read at all may have been any
                    // object: none missing from this list is called deleted.
                    self.count_bad_line(&e);
                    undecodable.unknown_keys = true;
                }
                Some(Err(e)) => return Err(ReflectorError::Watch(e)),
                Some(Ok(WatchEvent::Added(v) | WatchEvent::Modified(v))) => {
                    objects.extend(self.decode_listed(v, &mut undecodable));
                }
                Some(Ok(WatchEvent::Deleted(_))) => {
                    // Initial events are the state at one resourceVersion:
                    // no deletes are expected before the end bookmark.
                }
                Some(Ok(WatchEvent::Error(status))) => {
                    return Err(ReflectorError::WatchEvent(status));
                }
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    let ends = b
                        .metadata
                        .annotations
                        .get(INITIAL_EVENTS_END_ANNOTATION)
                        .is_some_and(|v| v == "true");
                    if ends {
                        tracing::debug!(target: "pipeline", stage = "1 reflector", kind = %K::kind(&()), objects = objects.len(), rv = %b.metadata.resource_version, "streaming LIST (WatchList) done: replacing the FIFO's contents");
                        self.fifo
                            .replace_keeping(std::mem::take(&mut objects), &undecodable);
                        self.status
                            .set_resource_version(&b.metadata.resource_version);
                        self.status.shared.lists.fetch_add(1, Ordering::Relaxed);
                        return Ok(state);
                    }
                }
            }
        }
    }
}
