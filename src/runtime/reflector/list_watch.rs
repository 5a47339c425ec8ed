//! The reflector's source of lists and watches, as raw JSON.
//!
//! Mirrors client-go `tools/cache/listwatch.go` (`ListerWatcher`). The
//! reflector talks to this small trait instead of `kube::Api<K>`, for two
//! reasons: items arrive as raw JSON so the reflector can decode them one by
//! one (one bad object must not poison a whole page or end a watch), and unit
//! tests can drive the reflector's state machine from an in-memory script.
//!
//! It must never decode into the typed kind nor retry: both are the
//! reflector's job.
use futures::future::BoxFuture;
use futures::stream::{BoxStream, StreamExt};
use kube::api::{ListParams, WatchParams};
use kube::core::{ObjectList, Request, WatchEvent};
use serde_json::Value;

use crate::runtime::Object;

/// One page of a LIST, items still undecoded.
#[derive(Clone, Debug, Default)]
pub struct RawList {
    pub items: Vec<Value>,
    /// The list's resourceVersion: where a watch continues from.
    pub resource_version: String,
    /// The token for the next page, if any.
    pub continue_token: Option<String>,
}

/// A watch: events with undecoded objects, ending when the server closes it.
pub type RawWatchStream = BoxStream<'static, Result<WatchEvent<Value>, kube::Error>>;

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
}

impl ApiListWatch {
    /// Lists and watches `K` in `namespace` (`None`: every namespace, or a
    /// cluster-scoped kind).
    pub fn new<K: Object>(client: kube::Client, namespace: Option<&str>) -> Self {
        Self {
            client,
            request: Request::new(K::url_path(&(), namespace)),
        }
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
            let list: ObjectList<Value> = self.client.request(req).await?;
            Ok(RawList {
                items: list.items,
                resource_version: list.metadata.resource_version.unwrap_or_default(),
                continue_token: list.metadata.continue_.filter(|c| !c.is_empty()),
            })
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
            let events = self.client.request_events::<Value>(req).await?;
            Ok(events.boxed())
        })
    }
}
