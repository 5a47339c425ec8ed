//! tfjob-operator: a Kubernetes operator for Kubeflow-compatible TFJobs.
//!
//! The crate has three layers, with dependency arrows pointing one way:
//!
//! - [`runtime`]: the generic client-go-style controller machinery
//!   (Reflector → DeltaFIFO → Informer → Indexer → Workqueue → workers).
//!   It never knows about TFJobs.
//! - [`api`]: the `kubeflow.org/v1` TFJob types, defaults and constants. No I/O.
//! - [`tfjob`]: the TFJob controller (observe → plan → apply → status).
#![forbid(unsafe_code)]

pub mod api;
pub mod runtime;
pub mod tfjob;
