//! tfjob-operator: a Kubernetes operator for Kubeflow-compatible TFJobs.
//!
//! The crate has five parts, with dependency arrows pointing one way
//! (each imports only from the ones listed after it):
//!
//! - [`cli`]: the binary's command line (`main`'s side; nothing in the
//!   library imports it).
//! - [`migrate`]: `migrate --check`, the read-only preflight for moving
//!   from Kubeflow's training-operator (reads the cluster, judges it with
//!   the controller's own rules).
//! - [`tfjob`]: the TFJob controller (observe → plan → apply → status).
//! - [`api`]: the `kubeflow.org/v1` TFJob types, defaults and constants. No I/O.
//! - [`observability`]: what serves and observes the process (metrics and
//!   their auth and TLS, logging, traces, the trace UI); it implements the
//!   runtime's metrics seam for Prometheus.
//! - [`runtime`]: the generic client-go-style controller machinery
//!   (Reflector → DeltaFIFO → Informer → Indexer → Workqueue → workers).
//!   It never knows about TFJobs, and imports nothing of the crate: what
//!   serves and observes it is plugged in from outside.
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod migrate;
pub mod observability;
pub mod runtime;
pub mod tfjob;
