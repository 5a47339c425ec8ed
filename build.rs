//! Records the compiler version and, when given, the git commit for the
//! binary's `tfjob_operator_build_info` metric (`TFJOB_RUSTC_VERSION`,
//! `TFJOB_GIT_COMMIT`).
//!
//! The commit is taken from the environment (`TFJOB_GIT_COMMIT=$(git
//! rev-parse --short=12 HEAD) cargo build`), not from git: a script that
//! watched `.git` would rebuild the whole crate after every commit, and the
//! container build copies no `.git`. Unset, the label is empty.
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TFJOB_GIT_COMMIT");
    let commit = std::env::var("TFJOB_GIT_COMMIT").unwrap_or_default();
    println!("cargo:rustc-env=TFJOB_GIT_COMMIT={commit}");

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_default();
    println!("cargo:rustc-env=TFJOB_RUSTC_VERSION={version}");
}
