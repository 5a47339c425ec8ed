//! `<prefix>_build_info{version,git_commit,rust_version} 1`: the usual
//! constant gauge (as `go_build_info` and kube-state-metrics' `*_build_info`)
//! that lets a dashboard show which build runs and an alert join on it.
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::SharedRegistry;

/// What a binary knows about its own build.
#[derive(Clone, Debug, Default)]
pub struct BuildInfo {
    pub version: String,
    /// Empty when built outside a git checkout.
    pub git_commit: String,
    pub rust_version: String,
}

/// Registers `{prefix}_build_info` with `info`'s labels and the value 1.
pub fn register(registry: &SharedRegistry, prefix: &str, info: &BuildInfo) {
    let family = Family::<Vec<(String, String)>, Gauge>::default();
    family
        .get_or_create(&vec![
            ("version".to_owned(), info.version.clone()),
            ("git_commit".to_owned(), info.git_commit.clone()),
            ("rust_version".to_owned(), info.rust_version.clone()),
        ])
        .set(1);
    registry.lock().unwrap_or_else(|p| p.into_inner()).register(
        format!("{prefix}_build_info"),
        "A metric with a constant '1' value labelled by the build's version, git commit and Rust version",
        family,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::{encode, new_registry};

    #[test]
    fn build_info_is_one_with_the_builds_labels() {
        let registry = new_registry();
        let info = BuildInfo {
            version: "0.1.0".into(),
            git_commit: "abc123".into(),
            rust_version: "1.89.0".into(),
        };
        register(&registry, "tfjob_operator", &info);
        let text = encode(&registry);
        assert!(
            text.contains(
                r#"tfjob_operator_build_info{version="0.1.0",git_commit="abc123",rust_version="1.89.0"} 1"#
            ),
            "{text}"
        );
    }
}
