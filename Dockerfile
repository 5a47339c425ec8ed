# syntax=docker/dockerfile:1
#
# The operator's container image: build with
#
#   docker build -t tfjob-operator:0.1.0 .
#
# Two stages: a Rust toolchain compiles the binary (profile `dist`: release,
# linked as one unit with LTO; see Cargo.toml) from the committed
# Cargo.lock (--locked: the image never resolves other dependency versions
# than CI tested), then only that binary is copied onto distroless "cc"
# (glibc + libgcc + CA certificates, no shell, no package manager), running
# as the image's unprivileged "nonroot" user (65532). TLS is rustls, so no
# OpenSSL is needed at run time. The builder (Debian 12, glibc 2.36) and the
# runtime (distroless Debian 12) share one glibc, so the dynamically linked
# binary runs unchanged.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
# .dockerignore lets in only what the build needs (Cargo.toml, Cargo.lock,
# src/ and any benches/ or tests/ the manifest names), so a change to the
# chart or the docs never invalidates this layer.
COPY . .
# Cache mounts keep the crates.io downloads and the target directory between
# builds (BuildKit); the binary is copied out of the cached target directory
# in the same step, because a cache mount is not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --bin tfjob-operator \
    && install -D -m 0755 target/dist/tfjob-operator /out/tfjob-operator

FROM gcr.io/distroless/cc-debian12:nonroot
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
