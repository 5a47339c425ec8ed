//! The reflector's source of lists and watches, objects still undecoded.
//!
//! Mirrors client-go `tools/cache/listwatch.go` (`ListerWatcher`). The
//! reflector talks to this small trait instead of `kube::Api<K>`, for two
//! reasons: items arrive undecoded so the reflector can decode them one by
//! one (one bad object must not poison a whole page or end a watch), and unit
//! tests can drive the reflector's state machine from an in-memory script.
//!
//! "Undecoded" means [`RawObject`]: the object's JSON text, checked to be
//! well-formed but not parsed, or its protobuf message (built-in kinds with a
//! table, see `protobuf_requests.rs`). The reflector then decodes each one
//! exactly once, straight into its kind. (Going through `serde_json::Value`
//! first, as this module once did, builds a tree of maps and strings for
//! every object only to throw it away: the initial sync of 10,000 Pods spent
//! most of its time there.)
//!
//! It must never decode into the typed kind nor retry: both are the
//! reflector's job.
use std::io;

use futures::future::BoxFuture;
use futures::io::AsyncBufReadExt;
use futures::stream::{BoxStream, StreamExt};
use kube::api::{ListParams, WatchParams};
use kube::core::{ListMeta, Request, Status, WatchEvent};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{RawObject, protobuf_requests};
use crate::runtime::Object;
use crate::runtime::protobuf::{self, Message};

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

/// A source of lists and watches for one kind (client-go `ListerWatcher`).
pub trait ListWatch: Send + Sync + 'static {
    /// One LIST call (one page when `params.limit` is set).
    fn list<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<RawList, kube::Error>>;

    /// Opens a WATCH from `resource_version` ("" = the server's choice).
    fn watch<'a>(
        &'a self,
        params: &'a WatchParams,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<RawWatchStream, kube::Error>>;
}

/// [`ListWatch`] against the API server, for kind `K` in one namespace or all.
#[derive(Clone)]
pub struct ApiListWatch {
    client: kube::Client,
    request: Request,
    /// Set for built-in kinds with a protobuf table: lists and watches then
    /// ask for protobuf, as client-go's typed clients do.
    protobuf: Option<&'static Message>,
}

impl ApiListWatch {
    /// Lists and watches `K` in `namespace` (`None`: every namespace, or a
    /// cluster-scoped kind), in protobuf if `K` has a table, else in JSON.
    pub fn new<K: Object>(client: kube::Client, namespace: Option<&str>) -> Self {
        Self {
            client,
            request: Request::new(K::url_path(&(), namespace)),
            protobuf: protobuf::message_for::<K>(),
        }
    }

    /// The same, always in JSON.
    pub fn json(self) -> Self {
        Self {
            protobuf: None,
            ..self
        }
    }

    /// The same, asking for protobuf and decoding it with `message`: for a
    /// kind without a generated table, with one built by hand (see
    /// `runtime::protobuf::schema`). Where the server answers JSON instead
    /// (custom resources, servers or proxies without protobuf), JSON is read.
    pub fn with_protobuf_table(self, message: &'static Message) -> Self {
        Self {
            protobuf: Some(message),
            ..self
        }
    }

    /// Whether lists and watches ask for protobuf.
    pub fn uses_protobuf(&self) -> bool {
        self.protobuf.is_some()
    }
}

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

impl ListWatch for ApiListWatch {
    fn list<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<RawList, kube::Error>> {
        Box::pin(async move {
            let mut req = self
                .request
                .list(params)
                .map_err(kube::Error::BuildRequest)?;
            req.extensions_mut().insert("list");
            if let Some(message) = self.protobuf {
                return protobuf_requests::list(&self.client, req, message).await;
            }
            let text = self.client.request_text(req).await?;
            parse_list_body(&text).map_err(kube::Error::SerdeError)
        })
    }

    fn watch<'a>(
        &'a self,
        params: &'a WatchParams,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<RawWatchStream, kube::Error>> {
        Box::pin(async move {
            let mut req = self
                .request
                .watch(params, resource_version)
                .map_err(kube::Error::BuildRequest)?;
            req.extensions_mut().insert("watch");
            if let Some(message) = self.protobuf {
                return protobuf_requests::watch(&self.client, req, message).await;
            }
            let body = self.client.request_stream(req).await?;
            Ok(json_events(body))
        })
    }
}

/// A JSON watch body as events. Each event is one line; see
/// `kube::Client::request_events`, whose framing and end-of-stream rules
/// this follows.
pub(super) fn json_events(body: impl futures::io::AsyncBufRead + Send + 'static) -> RawWatchStream {
    let events = body.lines().filter_map(|line| async move {
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
}
