//! The TFJob controller: observe → plan → apply → status.
//!
//! Mirrors Kubeflow training-operator's `pkg/controller.v1/tensorflow` and the
//! shared engine under `pkg/controller.v1/common`, with its known bugs fixed
//! (see `docs/` and the README).
//!
//! The rooms, lowest first (each imports only the rooms before it in this
//! list; `tests/docs/shape.rs` checks it):
//!
//! - [`kubeflow`]: the reference: Kubeflow's CRD schema and messages;
//! - [`children`]: a job's Pods and Services, `TF_CONFIG`, the cached view;
//! - [`plan`]: the lifecycle, pure: one rule per file;
//! - [`status`], [`apply`], [`observe`]: the phases that touch the API
//!   server, each with its seam for the integrations;
//! - [`integrations`]: Kueue, gangs, `managedBy`, another TFJob controller
//!   (training-operator left running), each in its own folder;
//! - [`controller`]: the wiring, and `sync()`, the phases in order.
//!
//! The lifecycle a job goes through (`docs/08-reconcile.md` draws it):
//!
//! ```text
//!   Created ──► Running ◄──► Restarting
//!      │           │  ▲          │
//!      ▼           ▼  │          ▼
//!   Suspended ◄─ (suspended, held, evicted; resumed or admitted)
//!                  │
//!                  ▼
//!        Succeeded / Failed ──► cleanPodPolicy, TTL
//! ```

pub mod apply;
pub mod children;
pub mod controller;
pub mod integrations;
pub mod kubeflow;
#[cfg(test)]
mod lifecycle_model;
pub mod observe;
pub mod plan;
pub mod status;
