//! The Prometheus registry shared by every component.
//!
//! controller-runtime keeps one global registry (`metrics.Registry`) that the
//! manager serves on `/metrics`. We pass an explicit handle instead of a
//! global, so tests can read exactly the metrics of the component they built.
use std::sync::{Arc, Mutex};

use prometheus_client::registry::Registry;

pub mod build_info;
pub mod pipeline;
pub mod process;

/// A registry that components register into and the manager serves.
pub type SharedRegistry = Arc<Mutex<Registry>>;

/// A new, empty shared registry.
pub fn new_registry() -> SharedRegistry {
    Arc::new(Mutex::new(Registry::default()))
}

/// Renders the registry in the Prometheus text format.
pub fn encode(registry: &SharedRegistry) -> String {
    let mut out = String::new();
    let guard = registry
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // Encoding into a String cannot fail except on fmt errors, which String never returns.
    let _ = prometheus_client::encoding::text::encode(&mut out, &guard);
    out
}
