//! The reflector's watch loop: events from an open watch into the FIFO,
//! until the server closes it, it fails, or it goes silent.
//!
//! Mirrors client-go `tools/cache/reflector.go` (`watch`,
//! `handleWatch`). Part of [`Reflector`]; see the parent module for the
//! loop that re-opens watches and relists.
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use kube::core::WatchEvent;

use super::framing::RawWatchStream;
use super::raw::RawObject;
use super::{Reflector, ReflectorError};
use crate::runtime::cache::delta_fifo::DeltaFifo;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::object::Object;

/// How a watch stream ended.
pub(super) enum WatchEnd {
    /// Closed by the server (timeout) or by our dead-connection deadline.
    Closed,
    Failed(ReflectorError),
}

impl<K: Object> Reflector<K> {
    pub(super) async fn start_watch(&self) -> Result<WatchStreamState, ReflectorError> {
        let (wp, timeout) = self.watch_params();
        let rv = self.status.last_sync_resource_version().unwrap_or_default();
        let stream = self
            .list_watch
            .watch(&wp, &rv)
            .await
            .map_err(ReflectorError::StartWatch)?;
        self.status.shared.watches.fetch_add(1, Ordering::Relaxed);
        Ok(WatchStreamState::new(stream, timeout))
    }

    pub(super) fn count_bad_line(&self, error: &kube::Error) {
        self.status
            .shared
            .decode_failures
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(%error, "failed to decode a watch event, skipping it");
    }

    /// Pushes watch events into the FIFO until the stream ends.
    pub(super) async fn consume(&self, mut state: WatchStreamState) -> WatchEnd {
        loop {
            let event = match state.next().await {
                None if state.ended_suspiciously_early() => {
                    return WatchEnd::Failed(ReflectorError::VeryShortWatch);
                }
                None => return WatchEnd::Closed,
                Some(Err(e)) if is_decode_error(&e) => {
                    self.count_bad_line(&e);
                    continue;
                }
                Some(Err(e)) => return WatchEnd::Failed(ReflectorError::Watch(e)),
                Some(Ok(event)) => event,
            };
            match event {
                WatchEvent::Added(v) => self.push(v, DeltaFifo::add),
                WatchEvent::Modified(v) => self.push(v, DeltaFifo::update),
                WatchEvent::Deleted(v) => {
                    if let Err(e) = self.push_delete(v) {
                        return WatchEnd::Failed(e);
                    }
                }
                WatchEvent::Bookmark(b) => {
                    self.status
                        .set_resource_version(&b.metadata.resource_version);
                }
                WatchEvent::Error(status) => {
                    return WatchEnd::Failed(ReflectorError::WatchEvent(status));
                }
            }
        }
    }

    /// Queues an ADDED or MODIFIED event. One that does not decode is
    /// counted and logged and changes nothing: the cache keeps its last good
    /// copy (for an ADDED, there is none).
    fn push(&self, raw: RawObject, op: fn(&DeltaFifo<K>, Arc<K>)) {
        if let Some(obj) = self.decode_event(raw) {
            self.queue(obj, op);
        }
    }

    fn queue(&self, obj: Arc<K>, op: fn(&DeltaFifo<K>, Arc<K>)) {
        let rv = obj.meta().resource_version.clone();
        tracing::debug!(target: "pipeline", stage = "1 reflector", kind = %K::kind(&()), key = %ObjectKey::of(obj.as_ref()).map(|k| k.to_string()).unwrap_or_default(), rv = rv.as_deref().unwrap_or(""), "WATCH event received");
        op(&self.fifo, obj);
        if let Some(rv) = rv {
            self.status.set_resource_version(&rv);
        }
    }

    /// Queues a DELETED event. One whose final state does not decode still
    /// deletes, by the key its metadata gives; without even that, the watch
    /// ends and a relist finds what is gone.
    fn push_delete(&self, raw: RawObject) -> Result<(), ReflectorError> {
        let key = raw.key();
        if let Some(obj) = self.decode_event(raw) {
            self.queue(obj, DeltaFifo::delete);
            return Ok(());
        }
        let Some(key) = key else {
            return Err(ReflectorError::UnreadableDelete);
        };
        tracing::warn!(kind = %K::kind(&()), object = %key, "deleting by key an object whose final state did not decode");
        self.fifo.delete_key(key);
        Ok(())
    }

    /// Decodes a watched object; on failure, moves the resourceVersion on
    /// past the event all the same (it was read, and re-reading it would
    /// not decode either).
    fn decode_event(&self, raw: RawObject) -> Option<Arc<K>> {
        let rv = raw.resource_version();
        let decoded = self.decode(raw);
        if decoded.is_none()
            && let Some(rv) = rv
        {
            self.status.set_resource_version(&rv);
        }
        decoded
    }
}

/// A line that is not a watch event (as opposed to a broken connection).
pub(super) fn is_decode_error(error: &kube::Error) -> bool {
    matches!(error, kube::Error::SerdeError(_))
}

/// How long an open watch may stay silent. The API server's watch cache
/// sends every watcher that asked for bookmarks (we always do) a bookmark
/// roughly every minute (`defaultBookmarkFrequency` in k8s.io/apiserver's
/// cacher), events or not; nothing for 90 s means the connection is dead or
/// half-open, so the watch is abandoned and re-opened instead of waiting for
/// its 5-10 minute deadline. (client-go notices within ~45 s with HTTP/2
/// pings; over HTTP/1.1 the bookmark is the only heartbeat there is.)
pub(super) const WATCH_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// An open watch with a client-side deadline: the server should close it at
/// the requested timeout; if it has not 30 s later, the connection is
/// presumed dead (a half-open TCP connection sends nothing, forever). A
/// watch silent for [`WATCH_IDLE_TIMEOUT`] is presumed dead sooner.
pub(super) struct WatchStreamState {
    stream: RawWatchStream,
    opened: tokio::time::Instant,
    deadline: tokio::time::Instant,
    events: u64,
}

impl WatchStreamState {
    pub(super) fn new(stream: RawWatchStream, timeout: Duration) -> Self {
        let opened = tokio::time::Instant::now();
        Self {
            stream,
            opened,
            deadline: opened + timeout + Duration::from_secs(30),
            events: 0,
        }
    }

    pub(super) async fn next(&mut self) -> Option<Result<WatchEvent<RawObject>, kube::Error>> {
        let until = self
            .deadline
            .min(tokio::time::Instant::now() + WATCH_IDLE_TIMEOUT);
        let next = tokio::time::timeout_at(until, self.stream.next())
            .await
            .ok()
            .flatten();
        self.events += u64::from(next.is_some());
        next
    }

    /// Closed within a second without a single event: not a normal server
    /// timeout but a server or proxy refusing to hold the watch. Re-opening
    /// at once would spin (client-go's "very short watch" check).
    fn ended_suspiciously_early(&self) -> bool {
        self.events == 0 && self.opened.elapsed() < Duration::from_secs(1)
    }
}
