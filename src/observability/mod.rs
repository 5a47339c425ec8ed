//! What serves and observes the process, beside the pipeline rather than in
//! it: the Prometheus [`metrics`] registry (with the build-info and process
//! collectors), who may read `/metrics` ([`metrics_auth`]) and the
//! certificate it is served with ([`metrics_tls`], over [`tls_listener`]),
//! traces to an OpenTelemetry collector ([`otlp`]), the log's format
//! ([`logging`]) and the live pipeline page ([`trace_ui`]).
//!
//! Mirrors controller-runtime's `pkg/metrics` (the registry),
//! `pkg/metrics/filters` and `pkg/metrics/server` (`/metrics` auth and TLS),
//! `pkg/log/zap` (logging) and `k8s.io/component-base/tracing` (OTLP).
//! Chapters: `docs/metrics.md`, `docs/tracing.md`; the trace UI in
//! `docs/00-one-event.md`.
//!
//! Nothing here imports [`crate::runtime`]: the pipeline registers its
//! metrics into this registry and the manager's server serves these pages,
//! not the other way round. (The trace UI's page is *routed* by the
//! manager's server, `runtime::manager::server`, so the test that fetches it
//! over HTTP lives there.)

pub mod logging;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_tls;
pub mod otlp;
pub mod tls_listener;
pub mod trace_ui;
