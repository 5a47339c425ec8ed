# syntax=docker/dockerfile:1
#
# The operator's container image: build with
#
#   docker build -t tfjob-operator:0.1.0 .
#
# Two stages: a Rust toolchain compiles the binary (profile `dist`: release,
# linked as one unit with LTO; see Cargo.toml) from the committed
# Cargo.lock (--locked: the image never resolves other dependency versions
# than CI tested), statically linked against glibc (crt-static), then only
# that binary is copied into an empty image: no shell, no libc, no package
# manager, running as the unprivileged user 65532. TLS is rustls with the
# cluster's CA (the service account's ca.crt), so neither OpenSSL nor a CA
# bundle is needed. This is the image `make image` assembles without Docker
# (hack/image/, checked by `make image-test`); both embed the dependency
# list (cargo auditable), so a scanner can audit the binary in either; that
# one is also reproducible to the digest.

ARG RUST_VERSION=1.95
# Keep equal to hack/image/versions.env.
ARG CARGO_AUDITABLE_VERSION=0.7.7

FROM rust:${RUST_VERSION}-slim-bookworm AS build
ARG CARGO_AUDITABLE_VERSION
# Its own layer, before the sources: rebuilt only when the version changes.
RUN cargo install --locked "cargo-auditable@${CARGO_AUDITABLE_VERSION}"
WORKDIR /src
# .dockerignore lets in only what the build needs (Cargo.toml, Cargo.lock,
# src/ and any benches/ or tests/ the manifest names), so a change to the
# chart or the docs never invalidates this layer.
COPY . .
# Cache mounts keep the crates.io downloads and the target directory between
# builds (BuildKit); the binary is copied out of the cached target directory
# in the same step, because a cache mount is not part of the image. The
# explicit --target (the builder's own) keeps crt-static off build scripts
# and proc macros, which cannot be static. The DWARF is stripped (80 -> 20
# MB); the symbol table stays, so backtraces still name functions.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    target="$(rustc -vV | sed -n 's/^host: //p')" \
    && RUSTFLAGS='-C target-feature=+crt-static' \
       cargo auditable build --profile dist --locked --target "$target" --bin tfjob-operator \
    && mkdir -p /out \
    && objcopy --strip-debug "target/$target/dist/tfjob-operator" /out/tfjob-operator

FROM scratch
LABEL org.opencontainers.image.title="tfjob-operator" \
      org.opencontainers.image.description="Runs Kubeflow-compatible TFJobs (kubeflow.org/v1)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/tfjob-operator /usr/local/bin/tfjob-operator
# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
# /metrics and /healthz, /readyz (see `tfjob-operator run --help`).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/tfjob-operator"]
CMD ["run"]
