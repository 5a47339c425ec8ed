//! The operator binary: `run`, `crd`, `version`.
fn main() {
    println!("tfjob-operator {}", env!("CARGO_PKG_VERSION"));
}
