//! The `kubeflow.org/v1` TFJob API: types, defaults and constants. No I/O.
//!
//! Mirrors Kubeflow training-operator's `pkg/apis/kubeflow.org/v1`
//! (`tensorflow_types.go`, `common_types.go`, `tensorflow_defaults.go`).

pub mod constants;
pub mod crd;
pub mod defaults;
pub mod fixtures;
pub mod pod_group;
pub mod types;
