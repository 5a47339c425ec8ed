//! The reflector's source of lists and watches, objects still undecoded.
//!
//! Mirrors client-go `tools/cache/listwatch.go` (`ListerWatcher`). The
//! reflector talks to this small trait instead of `kube::Api<K>`, for two
//! reasons: items arrive undecoded so the reflector can decode them one by
//! one (one bad object must not poison a whole page or end a watch), and unit
//! tests can drive the reflector's state machine from an in-memory script.
//!
//! "Undecoded" means [`RawObject`](super::RawObject): the object's JSON text, checked to be
//! well-formed but not parsed, or its protobuf message (built-in kinds with a
//! table, see `protobuf_requests.rs`). The reflector then decodes each one
//! exactly once, straight into its kind. (Going through `serde_json::Value`
//! first, as this module once did, builds a tree of maps and strings for
//! every object only to throw it away: the initial sync of 10,000 Pods spent
//! most of its time there.)
//!
//! It must never decode into the typed kind nor retry: both are the
//! reflector's job.
use futures::future::BoxFuture;
use kube::api::{ListParams, WatchParams};
use kube::core::Request;

use super::framing::{RawList, RawWatchStream, json_events, parse_list_body};
use super::protobuf_requests;
use crate::runtime::cache::object::Object;
use crate::runtime::client::protobuf;
use crate::runtime::client::protobuf::schema::Message;

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
    /// `runtime::client::protobuf::schema`). Where the server answers JSON instead
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
