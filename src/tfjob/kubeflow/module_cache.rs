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
///
/// `go mod download` first, even when the directory is there: it takes the
/// module cache's lock, so a download of the same module running beside it
/// (another test thread, `make test`'s background build of
/// training-operator) is finished before the directory is read. The
/// directory alone can be half extracted: a cold `make test` read a file
/// missing from it (2026-11-29). Cached, the command answers in
/// milliseconds without the network.
pub fn module_dir(version: &str) -> Option<PathBuf> {
    let go = |args: &[&str]| {
        Command::new("go")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let downloaded = go(&["mod", "download", "-json", &format!("{MODULE}@{version}")])
        .and_then(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
        .and_then(|v| v["Dir"].as_str().map(PathBuf::from));
    if downloaded.is_some() {
        return downloaded;
    }
    // No `go` (or offline): a module cache filled by someone else, unless
    // Go is still extracting it (its `.partial` marker).
    let cache = PathBuf::from(std::env::var("GOMODCACHE").ok().filter(|c| !c.is_empty())?);
    let dir = cache.join(format!("{MODULE}@{version}"));
    let partial = cache.join(format!("cache/download/{MODULE}/@v/{version}.partial"));
    (dir.is_dir() && !partial.exists()).then_some(dir)
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
