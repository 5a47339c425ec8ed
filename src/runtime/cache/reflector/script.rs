//! A scripted [`ListWatch`] for unit tests: it plays back a queue of list
//! pages and watches and records every call, so the reflector's state machine
//! can be driven without a server. (The real behaviour against a real API
//! server is shown by `tests/e2e/informer.rs`.)
use std::collections::VecDeque;
use std::sync::Mutex;

use futures::channel::mpsc;
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use kube::api::{ListParams, WatchParams};
use kube::core::{Status, WatchEvent};
use serde_json::{Value, json};

use super::framing::{RawList, RawWatchStream};
use super::list_watch::ListWatch;
use super::raw::RawObject;

pub type Event = Result<WatchEvent<RawObject>, kube::Error>;

/// One scripted answer to a watch call.
pub enum ScriptedWatch {
    /// The watch call itself fails.
    Fail(kube::Error),
    /// These events, then the server closes the watch (or keeps it open).
    Events { events: Vec<Event>, stay_open: bool },
    /// Events pushed live by the test; closed when the sender is dropped.
    Live(mpsc::UnboundedReceiver<Event>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    List(ListParams),
    Watch(WatchParams, String),
}

/// Plays back scripted lists and watches; once a script runs out, the next
/// call of that kind never returns (a quiet server).
#[derive(Default)]
pub struct ScriptedListWatch {
    lists: Mutex<VecDeque<Result<RawList, kube::Error>>>,
    watches: Mutex<VecDeque<ScriptedWatch>>,
    calls: Mutex<Vec<Call>>,
}

impl ScriptedListWatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn list(self, page: Result<RawList, kube::Error>) -> Self {
        self.lists.lock().unwrap().push_back(page);
        self
    }

    pub fn watch(self, watch: ScriptedWatch) -> Self {
        self.watches.lock().unwrap().push_back(watch);
        self
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn list_calls(&self) -> Vec<ListParams> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::List(p) => Some(p),
                Call::Watch(..) => None,
            })
            .collect()
    }

    pub fn watch_calls(&self) -> Vec<(WatchParams, String)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Watch(p, rv) => Some((p, rv)),
                Call::List(_) => None,
            })
            .collect()
    }
}

impl ListWatch for ScriptedListWatch {
    fn list<'a>(&'a self, params: &'a ListParams) -> BoxFuture<'a, Result<RawList, kube::Error>> {
        self.calls.lock().unwrap().push(Call::List(params.clone()));
        let next = self.lists.lock().unwrap().pop_front();
        Box::pin(async move {
            match next {
                Some(answer) => answer,
                None => futures::future::pending().await,
            }
        })
    }

    fn watch<'a>(
        &'a self,
        params: &'a WatchParams,
        resource_version: &'a str,
    ) -> BoxFuture<'a, Result<RawWatchStream, kube::Error>> {
        self.calls
            .lock()
            .unwrap()
            .push(Call::Watch(params.clone(), resource_version.to_owned()));
        let next = self.watches.lock().unwrap().pop_front();
        Box::pin(async move {
            match next {
                Some(ScriptedWatch::Fail(e)) => Err(e),
                Some(ScriptedWatch::Events { events, stay_open }) => {
                    let s = stream::iter(events);
                    Ok(if stay_open {
                        s.chain(stream::pending()).boxed()
                    } else {
                        s.boxed()
                    })
                }
                Some(ScriptedWatch::Live(rx)) => Ok(rx.boxed()),
                None => futures::future::pending().await,
            }
        })
    }
}

/// A JSON value as raw text, the way [`ListWatch`] hands objects over.
pub fn raw(value: &Value) -> RawObject {
    RawObject::Json(serde_json::value::to_raw_value(value).expect("a JSON value serializes"))
}

/// A ConfigMap as the server would send it.
pub fn cm_json(name: &str, rv: &str) -> RawObject {
    raw(&json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "data": {"rv": rv},
    }))
}

/// A JSON object that is not a valid ConfigMap (`data` must be a map).
pub fn broken_cm_json(name: &str) -> RawObject {
    raw(&json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        "data": 42,
    }))
}

/// Like [`broken_cm_json`], at resourceVersion `rv`.
pub fn broken_cm_json_at(name: &str, rv: &str) -> RawObject {
    raw(&json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "data": 42,
    }))
}

/// A ConfigMap whose metadata itself does not decode: no key can be read.
pub fn nameless_broken_cm_json() -> RawObject {
    raw(&json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": 7, "namespace": "ns", "resourceVersion": "9"},
    }))
}

pub fn page(items: Vec<RawObject>, rv: &str, continue_token: Option<&str>) -> RawList {
    RawList {
        items,
        resource_version: rv.to_owned(),
        continue_token: continue_token.map(str::to_owned),
    }
}

pub fn bookmark(rv: &str, initial_events_end: bool) -> Event {
    let annotations = if initial_events_end {
        json!({"k8s.io/initial-events-end": "true"})
    } else {
        json!({})
    };
    Ok(WatchEvent::Bookmark(
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"resourceVersion": rv, "annotations": annotations},
        }))
        .unwrap(),
    ))
}

pub fn status(code: u16, reason: &str, message: &str) -> Box<Status> {
    let mut s: Status = serde_json::from_value(json!({
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }))
    .unwrap();
    s.code = code;
    Box::new(s)
}

/// An HTTP error answer from the API server.
pub fn api_error(code: u16, reason: &str) -> kube::Error {
    kube::Error::Api(status(code, reason, reason))
}

/// The ERROR event a watch sends when its resourceVersion was compacted.
pub fn expired_event() -> Event {
    Ok(WatchEvent::Error(status(
        410,
        "Expired",
        "too old resource version: 5 (100)",
    )))
}
