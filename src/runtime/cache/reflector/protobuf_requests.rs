//! LIST and WATCH in protobuf, for `ApiListWatch` on kinds with a protobuf
//! table (client-go's default for built-in kinds; see `runtime::client::protobuf`).
//!
//! Same contract as the JSON path: items come out undecoded (as slices of the
//! response), an error answer becomes `kube::Error::Api`, a watch connection
//! cut mid-frame ends the stream like a close, and a frame longer than
//! `framing::MAX_FRAME_BYTES` ends it with an error.
use std::io;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use http::header::{ACCEPT, HeaderValue};
use http_body_util::BodyExt;
use kube::core::{Status, WatchEvent};

use super::framing::{
    MAX_FRAME_BYTES, RawList, RawWatchStream, json_events, parse_list_body, read_frame,
};
use super::raw::RawObject;
use crate::runtime::client::protobuf;
use crate::runtime::client::protobuf::schema::Message;

/// What a LIST asks for: protobuf, else JSON.
const LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";
/// What a WATCH asks for: a protobuf stream, else JSON lines.
const WATCH_ACCEPT: &str = "application/vnd.kubernetes.protobuf;stream=watch, application/json";

/// Sends `req` asking for protobuf (JSON accepted too: a server or proxy that
/// cannot encode protobuf answers JSON), and fails with the server's
/// `Status` on an error answer.
async fn send(
    client: &kube::Client,
    mut req: http::Request<Vec<u8>>,
    accept: &'static str,
) -> Result<http::Response<kube::client::Body>, kube::Error> {
    req.headers_mut()
        .insert(ACCEPT, HeaderValue::from_static(accept));
    let res = client.send(req.map(kube::client::Body::from)).await?;
    let code = res.status();
    if code.is_client_error() || code.is_server_error() {
        let body = res.into_body().collect_bytes().await?;
        return Err(kube::Error::Api(Box::new(error_status(
            &body,
            code.as_u16(),
        ))));
    }
    Ok(res)
}

/// The `Status` in an error answer, protobuf or JSON, or one made up from
/// the HTTP code when the body is neither.
fn error_status(body: &[u8], code: u16) -> Status {
    let decoded = match protobuf::open_envelope(body) {
        Ok(envelope) => protobuf::decode::<Status>(protobuf::status_message(), envelope.raw).ok(),
        Err(_) => serde_json::from_slice::<Status>(body).ok(),
    };
    decoded.filter(|s| s.code != 0).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        Status::failure(text.trim(), "Failed to parse error data").with_code(code)
    })
}

fn serde_error(e: protobuf::Error) -> kube::Error {
    kube::Error::SerdeError(serde::de::Error::custom(e))
}

/// One LIST page in protobuf.
pub async fn list(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
    message: &'static Message,
) -> Result<RawList, kube::Error> {
    let res = send(client, req, LIST_ACCEPT).await?;
    let body: Bytes = res.into_body().collect_bytes().await?;
    if !body.starts_with(protobuf::MAGIC) {
        let text = std::str::from_utf8(&body).map_err(|e| {
            kube::Error::SerdeError(serde::de::Error::custom(format!("list body: {e}")))
        })?;
        return parse_list_body(text).map_err(kube::Error::SerdeError);
    }
    let envelope = protobuf::open_envelope(&body).map_err(serde_error)?;
    let list = protobuf::split_list(envelope.raw).map_err(serde_error)?;
    Ok(RawList {
        items: list
            .items
            .iter()
            .map(|item| RawObject::Protobuf {
                message,
                bytes: body.slice_ref(item),
            })
            .collect(),
        resource_version: list.resource_version.to_owned(),
        continue_token: Some(list.continue_token.to_owned()).filter(|c| !c.is_empty()),
    })
}

/// A WATCH in protobuf: length-prefixed frames, one event each.
pub async fn watch(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
    message: &'static Message,
) -> Result<RawWatchStream, kube::Error> {
    let res = send(client, req, WATCH_ACCEPT).await?;
    let is_json = res
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let reader = res
        .into_body()
        .into_data_stream()
        .map_err(io::Error::other)
        .into_async_read();
    if is_json {
        // A server or proxy that cannot stream protobuf answers JSON lines.
        return Ok(json_events(reader));
    }
    let frames = stream::unfold(Some(Box::pin(reader)), |reader| async move {
        let mut reader = reader?;
        match read_frame(&mut reader, MAX_FRAME_BYTES).await {
            Ok(Some(frame)) => Some((Ok(frame), Some(reader))),
            Ok(None) => None,
            // Out of step with the framing (or cut): nothing after can be read.
            Err(e) => Some((Err(e), None)),
        }
    });
    Ok(frames
        .filter_map(move |frame| async move {
            match frame {
                Ok(frame) => Some(parse_frame(&frame, message)),
                // A connection cut mid-stream ends the watch like a close;
                // the reflector re-watches from its last resourceVersion.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => None,
                Err(e) => Some(Err(kube::Error::ReadEvents(e))),
            }
        })
        .boxed())
}

/// The object of a bookmark, as much as a bookmark carries.
#[derive(serde::Deserialize)]
struct BookmarkObject {
    metadata: kube::core::watch::BookmarkMeta,
}

/// One frame (`metav1.WatchEvent`) into an event with its object undecoded.
pub fn parse_frame(
    frame: &Bytes,
    message: &'static Message,
) -> Result<WatchEvent<RawObject>, kube::Error> {
    let (kind, object) = protobuf::split_watch_event(frame).map_err(serde_error)?;
    let envelope = protobuf::open_envelope(object).map_err(serde_error)?;
    let raw = || RawObject::Protobuf {
        message,
        bytes: frame.slice_ref(envelope.raw),
    };
    Ok(match kind {
        "ADDED" => WatchEvent::Added(raw()),
        "MODIFIED" => WatchEvent::Modified(raw()),
        "DELETED" => WatchEvent::Deleted(raw()),
        "BOOKMARK" => {
            let object: BookmarkObject =
                protobuf::decode(message, envelope.raw).map_err(serde_error)?;
            WatchEvent::Bookmark(kube::core::watch::Bookmark {
                types: kube::core::TypeMeta {
                    api_version: envelope.api_version.to_owned(),
                    kind: envelope.kind.to_owned(),
                },
                metadata: object.metadata,
            })
        }
        "ERROR" => WatchEvent::Error(Box::new(
            protobuf::decode::<Status>(protobuf::status_message(), envelope.raw)
                .map_err(serde_error)?,
        )),
        other => {
            return Err(kube::Error::SerdeError(serde::de::Error::custom(
                format_args!("unknown watch event type {other:?}"),
            )));
        }
    })
}
