//! Kubeflow training-operator's module, for tests that read its source or
//! manifests: the version `e2e/versions.env` pins, found in the Go module
//! cache, or downloaded into it with `go mod download` as
//! `e2e/run-suite.sh` does for Kubeflow's CRD.
use std::path::PathBuf;
use std::process::Command;

pub const MODULE: &str = "github.com/kubeflow/training-operator";

/// The version `e2e/versions.env` pins.
pub fn pinned_version() -> String {
    // The run-time CARGO_MANIFEST_DIR (cargo sets it for tests), not the
    // compile-time one: a shared target directory can hold a test binary
    // compiled in another checkout.
    let repo = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let text = std::fs::read_to_string(repo.join("e2e/versions.env")).expect("e2e/versions.env");
    text.lines()
        .find_map(|l| l.strip_prefix("KUBEFLOW_TRAINING_OPERATOR_VERSION="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .expect("KUBEFLOW_TRAINING_OPERATOR_VERSION in e2e/versions.env")
}

/// The module's directory in the Go module cache, downloaded if missing;
/// `None` without Go or a way to fetch it.
pub fn module_dir(version: &str) -> Option<PathBuf> {
    let go = |args: &[&str]| {
        Command::new("go")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let cache = std::env::var("GOMODCACHE")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| go(&["env", "GOMODCACHE"]))?;
    let dir = PathBuf::from(cache).join(format!("{MODULE}@{version}"));
    if dir.is_dir() {
        return Some(dir);
    }
    let json = go(&["mod", "download", "-json", &format!("{MODULE}@{version}")])?;
    let value: serde_json::Value = serde_json::from_str(&json).ok()?;
    value["Dir"].as_str().map(PathBuf::from)
}

/// The module's directory, or `None` after printing why the caller skips.
pub fn module_or_skip() -> Option<(String, PathBuf)> {
    let version = pinned_version();
    match module_dir(&version) {
        Some(dir) => Some((version, dir)),
        None => {
            eprintln!(
                "SKIPPED: {MODULE}@{version} is not in the Go module cache and could not be \
                 downloaded (no `go`, or offline); run `go mod download {MODULE}@{version}`"
            );
            None
        }
    }
}
