//! The TFJob controller: observe → plan → apply → status.
//!
//! Mirrors Kubeflow training-operator's `pkg/controller.v1/tensorflow` and the
//! shared engine under `pkg/controller.v1/common`, with its known bugs fixed
//! (see `docs/` and the README).

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
