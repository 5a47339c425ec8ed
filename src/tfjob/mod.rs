//! The TFJob controller: observe → plan → apply → status.
//!
//! Mirrors Kubeflow training-operator's `pkg/controller.v1/tensorflow` and the
//! shared engine under `pkg/controller.v1/common`, with its known bugs fixed
//! (see `docs/` and the README).

pub mod abnormal;
#[cfg(test)]
mod adoption_tests;
pub mod bookkeeping;
pub mod cached;
pub mod children;
pub mod conditions;
pub mod controller;
pub mod creation_events;
pub mod gang;
pub mod index_set;
#[cfg(test)]
mod kubeflow_module;
pub mod kueue;
#[cfg(test)]
mod lifecycle_model;
pub mod lost_node;
pub mod managed_by;
pub mod messages;
#[cfg(test)]
mod messages_tests;
pub mod metrics;
pub mod observer;
pub mod optional_apis;
pub mod plan;
#[cfg(test)]
mod plan_gang_tests;
#[cfg(test)]
mod plan_tests;
pub mod read_your_writes;
pub mod reconcile;
pub mod rival;
pub mod schema;
pub mod status_batch;
pub mod tf_config;
pub mod undecodable;
