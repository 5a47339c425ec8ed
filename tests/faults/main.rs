//! The fault-injection suite (issue #20): the operator binary runs as its own
//! process against the local control plane, as users run it, and faults come
//! from outside only: signals to the operator and to etcd, a TCP proxy between
//! the operator and the API server (`proxy`), API Priority and Fairness, a
//! failing admission webhook, an admission webhook that SIGKILLs the
//! operator at its N-th write of a pass (`write_kills`), users deleting
//! things. The cluster is observed independently of the operator: a separate
//! watch counting Pod and Service creations by UID (`observer`) and the API
//! server's audit log (`audit`).
//!
//! Repeatable: every random choice comes from `FAULT_SEED` (printed at the
//! start); `FAULT_ROUNDS` sets the rounds; `FAULT_FULL=1` adds the long
//! scenarios (`make test-faults`). Scenarios disturb the whole cluster, so the
//! suite runs one test at a time (`--test-threads=1`, see e2e/run-suite.sh).
//! Each scenario prints a `FAULT-RESULT` line with its figures.
//!
//! What this must never do: patch the operator's code or mock the API server
//! to inject a fault.
//!
//! Mirrors: kubernetes/kubernetes `test/e2e/apimachinery` chaos tests and
//! etcd's functional tester, in miniature.

#[path = "../support/cluster.rs"]
mod cluster;

#[path = "../support/loopback.rs"]
mod loopback;

#[path = "../e2e/support.rs"]
mod support;

#[path = "../e2e/operator.rs"]
mod operator;

#[path = "../e2e/certs.rs"]
mod certs;

#[path = "../support/kueue.rs"]
mod test_kueue;

mod audit;
mod harness;
mod observer;
mod proxy;
mod workload;

mod crash;
mod failover;
mod manifests;
mod overload;
mod partition;
mod partition_defaults;
mod requests;
mod scale;
mod undecodable;
mod user_deletes;
mod write_kills;
