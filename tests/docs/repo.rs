//! Where the repository is and which files the guard reads.
use std::path::{Path, PathBuf};

/// The checkout this runs from: cargo's run-time `CARGO_MANIFEST_DIR`, not
/// the compile-time one (a target directory shared by two checkouts can hold
/// a binary compiled in the other).
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The chapters and reference pages, in order (`docs/*.md`).
pub fn chapters() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs
}

/// `path` relative to the repository's root, for messages.
pub fn rel(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Every file under `dir` (relative to the root) whose name ends in
/// `.{ext}`, sorted; none when `dir` does not exist.
pub fn files_under(dir: &str, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo_root().join(dir), ext, &mut files);
    files.sort();
    files
}

/// The Markdown we write: the top-level pages, `docs/`, the chart's, the
/// harness's and the examples' READMEs (not test fixtures).
pub fn markdown_files() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    for dir in ["docs", "charts", "e2e", "examples"] {
        files.extend(files_under(dir, "md"));
    }
    files
}
