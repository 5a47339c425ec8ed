//! Generic controller machinery in the shape of client-go and controller-runtime.
//!
//! Everything here is generic over any `kube::Resource`; nothing here may import
//! `crate::api` or `crate::tfjob`.

pub mod key;
pub mod metrics;
pub mod object;
pub mod workqueue;

pub use key::ObjectKey;
pub use object::Object;
