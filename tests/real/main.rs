//! Tests on the real node (issue #28): ONE test binary (`cargo test --test real`)
//! against a local control plane started with `e2e/cluster.sh up --real-node`,
//! where a real kubelet, containerd and runc run the Pods that land on
//! `real-node-0` (KWOK still plays the other nodes).
//!
//! Every test is `#[ignore = "needs a real node: make test-real"]`:
//! `e2e/run-real.sh` (`make test-real`) starts a fresh cluster with the real
//! node, imports the images, and runs them with `--ignored --test-threads 1`
//! (one machine-sized node: the tests take turns on it). Each test uses its
//! own namespace.
//!
//! What this must never do: start or stop the cluster or the node, pull an
//! image (every Pod uses an imported image with `imagePullPolicy: Never`), or
//! send traffic off the machine.
//!
//! Add a suite with one `mod xyz;` line below and a `tests/real/xyz.rs`.

#[path = "../support/cluster.rs"]
mod cluster;
#[path = "../support/loopback.rs"]
mod loopback;
mod support;
#[path = "../support/training_operator.rs"]
mod training_operator;

mod chart;
mod gang;
mod node;
mod switch;
mod training;
