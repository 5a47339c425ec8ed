//! The end-to-end suite: ONE test binary (`cargo test --test e2e`), so the
//! suite links once and its tests share process-wide helpers such as the
//! cluster disruption lock in `support`.
//!
//! Every test is `#[ignore = "needs the local control plane: make e2e"]`:
//! plain `cargo test` lists them as ignored, and `e2e/run-suite.sh` runs them
//! with `--ignored` against a freshly started local control plane. Tests run
//! in parallel, each in its own namespace (`cluster::test_namespace`).
//!
//! Every test should begin with `let _guard = support::shared_cluster().await;`
//! (or `exclusive_cluster()` if it restarts the API server or compacts etcd):
//! otherwise a parallel test's API server restart can fail its requests.
//!
//! What this must never do: start or stop the cluster itself.
//! Add a suite with one `mod xyz;` line below and a `tests/e2e/xyz.rs`.
//!
//! Mirrors: kubernetes/kubernetes `test/e2e/e2e_test.go` (one binary that
//! imports every suite).

#[path = "../support/cluster.rs"]
mod cluster;
#[path = "../support/loopback.rs"]
mod loopback;
mod support;
#[path = "../support/kueue.rs"]
mod test_kueue;
#[path = "../support/training_operator.rs"]
mod training_operator;

mod certs;
mod example_controller;
mod examples;
mod gang;
mod helm;
mod informer;
mod kubeflow_crd;
mod kueue;
mod kueue_discovery;
mod kueue_workload;
mod lost_node;
mod managed_by;
mod manager;
mod metrics_list;
mod migration;
mod multikueue;
mod observability;
mod operator;
mod printer_columns;
mod prometheus;
mod protobuf;
mod restarting;
mod sdk;
mod smoke;
mod tfjob;
mod trace_ui;
