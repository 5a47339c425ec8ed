//! Generic controller machinery in the shape of client-go and controller-runtime.
//!
//! The folders are the boxes of client-go's controller diagram, in the order
//! an event travels through them:
//!
//! ```text
//!             client/ (rest: rate limits, timeouts, protobuf)
//!                │ ▲
//!     LIST/WATCH │ │ create / delete / write status
//!                ▼ │
//!  ┌─ cache/ ──────┼────────────────────────────────────────┐
//!  │ Reflector ─► DeltaFIFO ─► Informer ─► Indexer (store)  │
//!  │               (factory: one informer per kind)         │
//!  └──────────────────────┬─────────────────────────────────┘
//!                         │ notifications
//!  ┌─ controller/ ────────▼─────────────────────────────────┐
//!  │ handler (event → key) ─► workqueue/ ─► workers ─► reconcile
//!  │ expectations, ownership (a lagging cache stays safe)   │
//!  └────────────────────────────────────────────────────────┘
//!  manager/: starts and stops all of it (/healthz, /readyz, /metrics)
//!     │ campaigns; started / stopped / new leader
//!     ▼
//!  leader_election/: elector ─► lock (the Lease), callbacks
//!  events/:  Kubernetes Events written in the background
//!  metrics:  the seam every box counts through; the registry behind it
//!            is plugged in from outside
//! ```
//!
//! | folder | mirrors | chapter |
//! |---|---|---|
//! | [`cache`] | client-go `tools/cache` | `docs/01-reflector.md` – `docs/04-indexer.md` |
//! | [`workqueue`] | client-go `util/workqueue` | `docs/06-workqueue.md` |
//! | [`controller`] | controller-runtime `pkg/controller`, `pkg/builder`, `pkg/handler` | `docs/05-event-handlers.md`, `docs/07-workers.md`, `docs/09-builder.md`, `docs/12-expectations.md`, `docs/13-ownership-and-gc.md` |
//! | [`manager`] | controller-runtime `pkg/manager` | `docs/10-manager.md` |
//! | [`leader_election`] | client-go `tools/leaderelection`, controller-runtime `pkg/leaderelection` | `docs/10-manager.md` |
//! | [`events`] | client-go `tools/record` | `docs/11-client-cache-recorder.md` |
//! | [`client`] | client-go `rest` | `docs/11-client-cache-recorder.md` |
//! | [`metrics`] (a file) | client-go `util/workqueue` `MetricsProvider`, `tools/metrics` | `docs/metrics.md` |
//!
//! Everything here is generic over any `kube::Resource` and stands on its
//! own: nothing here imports another module of the crate. What serves and
//! observes the process (the Prometheus registry, `/metrics` auth and TLS,
//! logging, traces, the trace UI) plugs in from outside: the pipeline
//! counts through the [`metrics`] seam and the manager's server takes a
//! filter, a TLS listener and extra routes from its caller. Nothing is
//! re-exported here: import each type from the module that defines it.

pub mod cache;
pub mod client;
pub mod controller;
pub mod events;
pub mod leader_election;
pub mod manager;
pub mod metrics;
pub mod workqueue;
