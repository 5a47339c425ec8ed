//! Reads the API server's audit log (`<cluster dir>/logs/audit.log`, turned on
//! by `e2e/cluster.sh`): who wrote what, when, with which answer. This is the
//! fault suite's second independent witness next to [`crate::observer`]: it
//! sees every create, including a Pod created and deleted while the
//! observer's watch was down, and it tells two operator processes apart by
//! their client certificates.
//!
//! The policy (see `e2e/cluster.sh`) logs, at Metadata level, every request
//! of the `tfjob-faults` group (the operators this suite starts) and every
//! create/delete of Pods, Services, Namespaces and TFJobs by anyone. Lines are
//! `audit.k8s.io/v1` `Event`s, one JSON object per line, written when the
//! request completes (`ResponseComplete`; a watch's line comes when it ends).
#![allow(dead_code)] // Each scenario uses a different subset.

use std::io::{BufRead, Seek, SeekFrom};
use std::path::PathBuf;

use jiff::Timestamp;
use serde_json::Value;

use crate::cluster::cluster_dir;

#[derive(Clone, Debug)]
pub struct AuditEvent {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub code: u16,
    pub stage: String,
    /// When the request completed.
    pub at: Timestamp,
    /// When it was received.
    pub received: Timestamp,
}

impl AuditEvent {
    /// A request that changed stored state (2xx on a write verb).
    pub fn is_successful_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) && (200..300).contains(&self.code)
    }

    fn parse(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let time = |v: &Value| v.as_str()?.parse::<Timestamp>().ok();
        let object = &v["objectRef"];
        Some(Self {
            user: text(&v["user"]["username"])?,
            verb: text(&v["verb"])?,
            resource: text(&object["resource"]).unwrap_or_default(),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            stage: text(&v["stage"]).unwrap_or_default(),
            at: time(&v["stageTimestamp"])?,
            received: time(&v["requestReceivedTimestamp"])?,
        })
    }
}

pub fn path() -> PathBuf {
    cluster_dir().join("logs/audit.log")
}

/// A position in the audit log: a scenario reads only what came after it.
#[derive(Clone, Copy, Debug)]
pub struct Mark(u64);

/// The end of the log now.
pub fn mark() -> Mark {
    Mark(std::fs::metadata(path()).map(|m| m.len()).unwrap_or(0))
}

/// Every event logged since `mark`. Panics when the log is missing: the
/// suite's checks would otherwise pass vacuously.
pub fn since(mark: Mark) -> Vec<AuditEvent> {
    let path = path();
    let mut file = std::fs::File::open(&path).unwrap_or_else(|e| {
        panic!(
            "no audit log at {} ({e}): start the cluster with this branch's e2e/cluster.sh",
            path.display()
        )
    });
    file.seek(SeekFrom::Start(mark.0))
        .expect("seek in the audit log");
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| AuditEvent::parse(&l))
        .filter(|e| e.stage == "ResponseComplete" || e.stage == "Panic")
        .collect()
}

/// Creates of `resource` in `namespace` answered `code`s in `codes`, by anyone.
fn creates_answered(
    events: &[AuditEvent],
    resource: &str,
    namespace: &str,
    codes: impl Fn(u16) -> bool,
) -> Vec<AuditEvent> {
    events
        .iter()
        .filter(|e| {
            e.verb == "create"
                && e.resource == resource
                && e.subresource.is_none()
                && e.namespace.as_deref() == Some(namespace)
                && codes(e.code)
        })
        .cloned()
        .collect()
}

/// Successful (2xx) creates of `resource` in `namespace`, by anyone.
pub fn creates(events: &[AuditEvent], resource: &str, namespace: &str) -> Vec<AuditEvent> {
    creates_answered(events, resource, namespace, |c| (200..300).contains(&c))
}

/// Creates answered 504: the API server logs that when the client went away
/// mid-request ("context canceled", e.g. an operator SIGKILLed while its
/// create was in flight). The object may or may not have been stored.
pub fn cancelled_creates(
    events: &[AuditEvent],
    resource: &str,
    namespace: &str,
) -> Vec<AuditEvent> {
    creates_answered(events, resource, namespace, |c| c == 504)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_create_line_parses_into_who_what_and_when() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"x","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/a/pods","verb":"create","user":{"username":"fault-op-a","groups":["tfjob-faults","system:authenticated"]},"objectRef":{"resource":"pods","namespace":"a","name":"j-worker-0","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-11-25T01:00:00.000000Z","stageTimestamp":"2026-11-25T01:00:00.010000Z"}"#;
        let e = AuditEvent::parse(line).expect("parses");
        assert_eq!(e.user, "fault-op-a");
        assert_eq!(e.verb, "create");
        assert_eq!(e.name.as_deref(), Some("j-worker-0"));
        assert_eq!(e.code, 201);
        assert!(e.is_successful_write());
        assert!(e.at > e.received);
    }
}
