//! How lists and watches come off the wire, before any object is decoded:
//! a LIST body split into its items, a JSON watch split into lines, a
//! protobuf watch split into length-prefixed frames.
//!
//! Mirrors apimachinery's `pkg/util/framer` (JSON lines, length-delimited
//! protobuf frames) and `pkg/runtime/serializer/streaming`, which client-go's
//! watch decoder reads through. Both `list_watch.rs` (JSON) and
//! `protobuf_requests.rs` read through this module, so neither imports the
//! other's framing.
//!
//! It must never trust a length from the network: one watch frame (a JSON
//! line, or a protobuf frame whose 32-bit length prefix says so) is capped
//! at [`MAX_FRAME_BYTES`] (16 MiB; the API server's own limit on a request
//! body is 3 MiB and etcd's on a value 1.5 MiB, so no real object comes
//! near it). A longer frame is never buffered: the watch ends with
//! [`FrameTooLarge`] and the reflector re-watches after its backoff, as for
//! any other broken watch.
use std::io;

use futures::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};
use futures::stream::{self, BoxStream, StreamExt};
use kube::core::{ListMeta, Status, WatchEvent};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::raw::RawObject;

/// The largest watch frame we read: 16 MiB.
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// A watch frame longer than [`MAX_FRAME_BYTES`]: the stream is cut there.
#[derive(Debug, thiserror::Error)]
#[error(
    "failed to read a watch event: its frame of {len} bytes exceeds the limit of {limit} bytes"
)]
pub struct FrameTooLarge {
    /// The frame's length, as far as it is known (a JSON line: at least this).
    pub len: usize,
    pub limit: usize,
}

impl From<FrameTooLarge> for io::Error {
    fn from(e: FrameTooLarge) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// One page of a LIST, items still undecoded.
#[derive(Clone, Debug, Default)]
pub struct RawList {
    pub items: Vec<RawObject>,
    /// The list's resourceVersion: where a watch continues from.
    pub resource_version: String,
    /// The token for the next page, if any.
    pub continue_token: Option<String>,
}

/// A watch: events with undecoded objects, ending when the server closes it.
pub type RawWatchStream = BoxStream<'static, Result<WatchEvent<RawObject>, kube::Error>>;

/// A LIST response with its items split but not decoded.
#[derive(Deserialize)]
struct RawListBody {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

/// Splits a LIST response body into its undecoded items.
pub fn parse_list_body(text: &str) -> Result<RawList, serde_json::Error> {
    let body: RawListBody = serde_json::from_str(text)?;
    Ok(RawList {
        items: body.items.into_iter().map(RawObject::Json).collect(),
        resource_version: body.metadata.resource_version.unwrap_or_default(),
        continue_token: body.metadata.continue_.filter(|c| !c.is_empty()),
    })
}

/// A JSON watch body as events. Each event is one line; see
/// `kube::Client::request_events`, whose framing and end-of-stream rules
/// this follows.
pub(super) fn json_events(body: impl AsyncBufRead + Send + 'static) -> RawWatchStream {
    json_events_limited(body, MAX_FRAME_BYTES)
}

/// [`json_events`] with a line limit of `limit` bytes. A longer line ends
/// the stream with an error (after which nothing more is read).
fn json_events_limited(body: impl AsyncBufRead + Send + 'static, limit: usize) -> RawWatchStream {
    let lines = stream::unfold(Some(Box::pin(body)), move |reader| async move {
        let mut reader = reader?;
        match read_line(&mut reader, limit).await {
            Ok(Some(line)) => Some((Ok(line), Some(reader))),
            Ok(None) => None,
            // Nothing after a broken or oversized line can be trusted.
            Err(e) => Some((Err(e), None)),
        }
    });
    let events = lines.filter_map(|line| async move {
        match line {
            Ok(line) if line.is_empty() => None,
            Ok(line) => match parse_watch_line(&line) {
                // The last line of a cut connection, incomplete: the
                // stream ends and the reflector re-watches.
                Err(kube::Error::SerdeError(e)) if e.is_eof() => None,
                parsed => Some(parsed),
            },
            // A connection cut mid-stream (typical after minutes of
            // watching, or when the server restarts) ends the watch
            // like a close: the reflector re-watches from its last
            // resourceVersion.
            Err(e) if is_unexpected_eof(&e) => {
                tracing::debug!(error = %e, "watch connection ended mid-stream");
                None
            }
            Err(e) => Some(Err(kube::Error::ReadEvents(e))),
        }
    });
    events.boxed()
}

/// The next line without its `\n` (and `\r`), or `None` at the end of the
/// body. Never holds more than `limit` bytes: a longer line is an error.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            if line.is_empty() {
                return Ok(None);
            }
            break;
        }
        let (chunk, ends) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        if line.len() + chunk.len() > limit {
            return Err(FrameTooLarge {
                len: line.len() + chunk.len(),
                limit,
            }
            .into());
        }
        line.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(ends);
        reader.consume_unpin(used);
        if ends {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The next length-prefixed protobuf frame (a 4-byte big-endian length,
/// then that many bytes), or `None` at a clean end of the stream. A length
/// above `limit` is refused before anything is allocated for it.
pub(super) async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> io::Result<Option<bytes::Bytes>> {
    let mut len = [0u8; 4];
    match reader.read(&mut len[..1]).await? {
        0 => return Ok(None),
        _ => reader.read_exact(&mut len[1..]).await?,
    }
    let len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if len > limit {
        return Err(FrameTooLarge { len, limit }.into());
    }
    let mut frame = vec![0; len];
    reader.read_exact(&mut frame).await?;
    Ok(Some(bytes::Bytes::from(frame)))
}

/// One watch line as the server writes it (`metav1.WatchEvent`).
#[derive(Deserialize)]
struct RawEventLine<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// Splits one watch line into its event type and undecoded object. A line
/// that is not an event may be an error `Status`; anything else is a decode
/// error (the reflector counts it and reads on).
pub fn parse_watch_line(line: &str) -> Result<WatchEvent<RawObject>, kube::Error> {
    let event: RawEventLine<'_> = match serde_json::from_str(line) {
        Ok(event) => event,
        Err(e) => {
            return Err(match serde_json::from_str::<Status>(line) {
                Ok(status) if status.code != 0 => kube::Error::Api(status.boxed()),
                _ => kube::Error::SerdeError(e),
            });
        }
    };
    let object = event.object;
    Ok(match event.kind.as_ref() {
        "ADDED" => WatchEvent::Added(RawObject::Json(object.to_owned())),
        "MODIFIED" => WatchEvent::Modified(RawObject::Json(object.to_owned())),
        "DELETED" => WatchEvent::Deleted(RawObject::Json(object.to_owned())),
        "BOOKMARK" => WatchEvent::Bookmark(
            serde_json::from_str(object.get()).map_err(kube::Error::SerdeError)?,
        ),
        "ERROR" => WatchEvent::Error(Box::new(
            serde_json::from_str(object.get()).map_err(kube::Error::SerdeError)?,
        )),
        other => {
            return Err(kube::Error::SerdeError(serde::de::Error::custom(
                format_args!("unknown watch event type {other:?}"),
            )));
        }
    })
}

/// Whether a body read failed because the connection closed before the
/// chunked body ended (somewhere down the error's source chain).
fn is_unexpected_eof(error: &io::Error) -> bool {
    if error.kind() == io::ErrorKind::UnexpectedEof {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = error.get_ref().map(|e| e as _);
    while let Some(e) = source {
        if e.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::UnexpectedEof)
            || e.to_string().contains("unexpected EOF")
        {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    #[test]
    fn a_watch_line_keeps_its_object_as_raw_text() {
        let line = r#"{"type":"ADDED","object":{"metadata":{"name":"a"},"data":{"k":"v"}}}"#;
        match parse_watch_line(line) {
            Ok(WatchEvent::Added(obj)) => {
                assert_eq!(
                    obj.json().unwrap(),
                    r#"{"metadata":{"name":"a"},"data":{"k":"v"}}"#
                )
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn the_object_may_come_before_the_type() {
        let line = r#"{"object":{"metadata":{"name":"a"}},"type":"DELETED"}"#;
        assert!(matches!(parse_watch_line(line), Ok(WatchEvent::Deleted(_))));
    }

    #[test]
    fn bookmarks_and_errors_are_decoded() {
        let line = r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        match parse_watch_line(line) {
            Ok(WatchEvent::Bookmark(b)) => assert_eq!(b.metadata.resource_version, "12"),
            other => panic!("unexpected {other:?}"),
        }
        let line = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#;
        match parse_watch_line(line) {
            Ok(WatchEvent::Error(s)) => assert_eq!(s.code, 410),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_bare_status_line_is_an_api_error_and_garbage_a_decode_error() {
        let line = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"gone","reason":"Gone","code":410}"#;
        assert!(matches!(parse_watch_line(line), Err(kube::Error::Api(s)) if s.code == 410));
        assert!(matches!(
            parse_watch_line("{not json"),
            Err(kube::Error::SerdeError(e)) if !e.is_eof()
        ));
        // A line cut short is an end-of-input error, which the stream drops.
        assert!(matches!(
            parse_watch_line(r#"{"type":"ADDED","object":{"metadata":"#),
            Err(kube::Error::SerdeError(e)) if e.is_eof()
        ));
        assert!(matches!(
            parse_watch_line(r#"{"type":"SURPRISE","object":{}}"#),
            Err(kube::Error::SerdeError(_))
        ));
    }

    #[test]
    fn a_list_body_splits_into_raw_items() {
        let body = r#"{"kind":"PodList","metadata":{"resourceVersion":"7","continue":"c"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        let list = parse_list_body(body).unwrap();
        assert_eq!(list.items.len(), 2);
        assert_eq!(
            list.items[1].json().unwrap(),
            r#"{"metadata":{"name":"b"}}"#
        );
        assert_eq!(list.resource_version, "7");
        assert_eq!(list.continue_token.as_deref(), Some("c"));
        let last = parse_list_body(r#"{"metadata":{"continue":""},"items":[]}"#).unwrap();
        assert_eq!(last.continue_token, None);
    }

    #[test]
    fn a_cut_connection_is_recognised_through_the_error_chain() {
        let inner = io::Error::new(io::ErrorKind::UnexpectedEof, "tls: close_notify missing");
        assert!(is_unexpected_eof(&io::Error::other(inner)));
        assert!(is_unexpected_eof(&io::Error::other(
            "unexpected EOF during chunk size line"
        )));
        assert!(!is_unexpected_eof(&io::Error::other(
            "connection reset by peer"
        )));
    }

    fn body(bytes: Vec<u8>) -> impl AsyncBufRead + Send + 'static {
        futures::io::Cursor::new(bytes)
    }

    #[tokio::test]
    async fn a_protobuf_frame_claiming_4_gib_is_refused_before_anything_is_allocated() {
        // A 32-bit length of ~4 GiB followed by a few bytes: the old reader
        // allocated the whole frame, then ended the watch like a close.
        let mut bytes = 0xFFFF_FFF0u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(b"tiny");
        let mut reader = body(bytes);
        let err = read_frame(&mut reader, MAX_FRAME_BYTES)
            .await
            .expect_err("an oversized frame is an error, not a clean end");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let too_large = err
            .get_ref()
            .and_then(|e| e.downcast_ref::<FrameTooLarge>())
            .expect("the error says why");
        assert_eq!(too_large.len, 0xFFFF_FFF0);
        assert_eq!(too_large.limit, 16 * 1024 * 1024);
    }

    #[tokio::test]
    async fn a_protobuf_frame_up_to_the_limit_is_read() {
        let mut bytes = 3u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let mut reader = body(bytes);
        let frame = read_frame(&mut reader, 3).await.unwrap();
        assert_eq!(frame.as_deref(), Some(&b"abc"[..]));
        assert!(read_frame(&mut reader, 3).await.unwrap().is_none());
    }

    fn added_line(data_len: usize) -> String {
        let data = "x".repeat(data_len);
        format!(
            r#"{{"type":"ADDED","object":{{"metadata":{{"name":"a"}},"data":{{"k":"{data}"}}}}}}"#
        )
    }

    #[tokio::test]
    async fn a_json_watch_line_over_16_mib_ends_the_watch_with_an_error() {
        let mut text = added_line(10);
        text.push('\n');
        text.push_str(&added_line(MAX_FRAME_BYTES));
        text.push('\n');
        text.push_str(&added_line(10));
        text.push('\n');
        let events: Vec<_> = json_events(body(text.into_bytes())).collect().await;
        assert_eq!(
            events.len(),
            2,
            "the event before, then the error, then nothing"
        );
        assert!(matches!(events[0], Ok(WatchEvent::Added(_))));
        match &events[1] {
            Err(kube::Error::ReadEvents(e)) => {
                assert!(e.to_string().contains("exceeds the limit"), "{e}");
            }
            other => panic!("expected a read error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn json_watch_lines_are_split_on_newlines_and_a_cut_last_line_is_dropped() {
        let text = format!("{}\r\n\n{}\n{{\"type\":\"ADD", added_line(1), added_line(2));
        let events: Vec<_> = json_events_limited(body(text.into_bytes()), 200)
            .try_collect::<Vec<_>>()
            .await
            .expect("no error");
        assert_eq!(events.len(), 2);
    }
}
