//! How a pass ends when a write fails: [`SyncError`], which the controller
//! retries with backoff, and the answers a write may get that are not
//! errors (throttled: wait as long as the server asked).
use std::time::Duration;

use kube::Resource;

use crate::runtime::cache::key::ObjectKey;

/// A reconcile that did not complete; the controller retries it with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("failed to {verb} {kind} {name}")]
    Write {
        verb: &'static str,
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write the status of {key}")]
    Status {
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
    #[error("failed to write the bookkeeping annotation of {key}")]
    Bookkeeping {
        key: ObjectKey,
        #[source]
        source: kube::Error,
    },
}

/// The least a throttled reconcile waits, whatever the server's Retry-After
/// says (client-go's `checkWait` waits at least a second, too).
const MIN_THROTTLED_WAIT: Duration = Duration::from_secs(1);

impl SyncError {
    /// How long to wait if the API server throttled this write (429 Too Many
    /// Requests): its Retry-After, at least [`MIN_THROTTLED_WAIT`].
    pub fn throttled(&self) -> Option<Duration> {
        let (SyncError::Write { source, .. }
        | SyncError::Status { source, .. }
        | SyncError::Bookkeeping { source, .. }) = self;
        match source {
            kube::Error::Api(status) if status.code == 429 => {
                let secs = status.details.as_ref().map_or(0, |d| d.retry_after_seconds);
                Some(Duration::from_secs(u64::from(secs)).max(MIN_THROTTLED_WAIT))
            }
            _ => None,
        }
    }

    /// A stable label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            SyncError::Write { .. } => "write",
            SyncError::Status { source, .. } if is_conflict(source) => "conflict",
            SyncError::Status { .. } => "status",
            SyncError::Bookkeeping { source, .. } if is_conflict(source) => "conflict",
            SyncError::Bookkeeping { .. } => "bookkeeping",
        }
    }
}

pub fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

pub fn is_conflict(err: &kube::Error) -> bool {
    is_status(err, 409)
}

pub fn child_name<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

pub fn write_error(
    verb: &'static str,
    kind: &'static str,
    name: String,
    source: kube::Error,
) -> SyncError {
    SyncError::Write {
        verb,
        kind,
        name,
        source,
    }
}

pub fn event_type(warning: bool) -> crate::runtime::events::EventType {
    if warning {
        crate::runtime::events::EventType::Warning
    } else {
        crate::runtime::events::EventType::Normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn write_error_with(code: u16, retry_after_seconds: Option<u32>) -> SyncError {
        let mut status = Status::failure("slow down", "TooManyRequests").with_code(code);
        if let Some(secs) = retry_after_seconds {
            let details = serde_json::json!({ "retryAfterSeconds": secs });
            status.details = Some(serde_json::from_value(details).unwrap());
        }
        write_error(
            "create",
            "pod",
            "p".into(),
            kube::Error::Api(status.boxed()),
        )
    }

    #[test]
    fn a_throttled_write_waits_the_servers_retry_after_and_at_least_a_second() {
        assert_eq!(
            write_error_with(429, Some(3)).throttled(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            write_error_with(429, None).throttled(),
            Some(MIN_THROTTLED_WAIT)
        );
        assert_eq!(write_error_with(500, Some(3)).throttled(), None);
        assert_eq!(write_error_with(409, None).throttled(), None);
    }
}
