//! Generic controller machinery in the shape of client-go and controller-runtime.
//!
//! Everything here is generic over any `kube::Resource`; nothing here may import
//! `crate::api` or `crate::tfjob`.

pub mod client;
pub mod controller;
pub mod delta_fifo;
pub mod events;
pub mod expectations;
pub mod factory;
pub mod flags;
pub mod handler;
pub mod informer;
pub mod key;
pub mod leader_election;
pub mod logging;
pub mod manager;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_tls;
pub mod object;
pub mod otlp;
pub mod ownership;
pub mod protobuf;
pub mod reflector;
pub mod server;
pub mod store;
pub mod tls_listener;
pub mod trace_ui;
pub mod workqueue;

pub use delta_fifo::{Delta, DeltaFifo, Deltas};
pub use factory::{FactoryError, InformerFactory, WatchConfig};
pub use informer::{DeletedObject, EventHandler, InformerConfig, SharedInformer};
pub use key::ObjectKey;
pub use object::Object;
pub use reflector::{ListWatch, Reflector, ReflectorConfig, Transform};
pub use store::{CONTROLLER_UID_INDEX, IndexFn, Indexer, NAMESPACE_INDEX};
