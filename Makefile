# One entry point for humans and CI alike. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Everything built or downloaded is cached outside the repo, keyed by version.
CACHE_DIR ?= $(HOME)/.cache/tfjob-operator
export TFJOB_CACHE_DIR := $(CACHE_DIR)
export CARGO_TARGET_DIR ?= $(CACHE_DIR)/target
# The local control plane's state (kubeconfig, logs, pid files, data dirs).
export TFJOB_CLUSTER_DIR ?= $(CURDIR)/.cluster

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: test
test: lint unit crd-check e2e ## Everything CI runs: lint, unit tests, CRD drift check, e2e on a fresh local cluster

.PHONY: lint
lint: fmt-check clippy ## cargo fmt --check and clippy -D warnings

.PHONY: fmt-check
fmt-check:
	cargo fmt --all -- --check

.PHONY: clippy
clippy:
	cargo clippy --all-targets -- -D warnings

.PHONY: unit
unit: ## Unit, property and doc tests (no cluster needed)
	cargo test --lib --bins

.PHONY: crd
crd: ## Regenerate crds/ from the Rust types
	cargo run --quiet -- crd > crds/kubeflow.org_tfjobs.yaml

.PHONY: crd-check
crd-check: ## Fail if the committed CRD drifted from the Rust types
	cargo run --quiet -- crd | diff -u crds/kubeflow.org_tfjobs.yaml - \
	  || { echo "crds/ is stale: run 'make crd' and commit"; exit 1; }

.PHONY: cluster-tools
cluster-tools: ## Build (or reuse from the cache) etcd, kube-*, kubectl, helm, kwok
	bash e2e/tools.sh

.PHONY: cluster-up
cluster-up: cluster-tools ## Start the local control plane (kubeconfig: .cluster/kubeconfig)
	bash e2e/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local control plane and remove its data
	bash e2e/cluster.sh down

.PHONY: e2e
e2e: cluster-tools ## The end-to-end suite on a freshly started local control plane (torn down even on failure)
	bash e2e/run-suite.sh

.PHONY: demo
demo: ## Build, start the local control plane, run the operator and examples/, watch them live (stays up)
	bash e2e/demo.sh

.PHONY: demo-down
demo-down: ## Stop the demo's operator and the local control plane
	bash e2e/demo.sh down

.PHONY: bench
bench: ## Benchmarks against their Go/kube-rs peers, same run; results in target/bench/
	bash benches/run.sh

.PHONY: bench-e2e
bench-e2e: cluster-tools ## Side by side with Kubeflow's training-operator and the raw limit (fresh cluster; BENCH_JOBS=50 for a quick run)
	bash e2e/peers.sh
	bash e2e/bench.sh
