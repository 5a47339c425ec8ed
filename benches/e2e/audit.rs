//! The peer's API requests, counted from the API server's audit log.

use std::io::{BufRead, Seek, SeekFrom};
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::PEER_USER;
use crate::run::RunResult;

/// Offset of the end of the audit log now, so a run reads only its own lines.
pub(crate) fn audit_offset(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Counts the peer user's requests logged after `from`.
pub(crate) fn count_audit(path: &Path, from: u64, r: &mut RunResult) -> anyhow::Result<()> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    f.seek(SeekFrom::Start(from))?;
    let (mut first, mut last, mut counted) = (None, None, 0u64);
    for line in std::io::BufReader::new(f).lines() {
        let Ok(event) = serde_json::from_str::<Value>(&line?) else {
            continue;
        };
        if event["user"]["username"] != PEER_USER {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?");
        let time = |field: &str| event[field].as_str()?.parse::<jiff::Timestamp>().ok();
        if verb != "watch"
            && let (Some(received), Some(done)) =
                (time("requestReceivedTimestamp"), time("stageTimestamp"))
        {
            counted += 1;
            first = Some(first.map_or(received, |f: jiff::Timestamp| f.min(received)));
            last = Some(last.map_or(done, |l: jiff::Timestamp| l.max(done)));
        }
        let resource = event["objectRef"]["resource"].as_str().unwrap_or("-");
        let sub = event["objectRef"]["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        r.api_requests += 1;
        *r.api_requests_by_verb
            .entry(format!("{verb} {resource}{sub}"))
            .or_default() += 1;
        if code >= 400 {
            *r.api_errors_by_code
                .entry(format!("{code} {verb} {resource}{sub}"))
                .or_default() += 1;
        }
        if code == 409 && verb == "create" {
            r.already_exists += 1;
        }
    }
    if let (Some(first), Some(last)) = (first, last) {
        let window = last.duration_since(first).as_secs_f64();
        if window > 0.0 {
            r.api_rate_per_s = Some(counted as f64 / window);
        }
    }
    Ok(())
}
