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
//! The pipeline ([`crate::runtime`]) knows none of this: it counts through
//! its metrics seam, which [`metrics::pipeline`] implements over the
//! Prometheus registry (the one place here that names the runtime), and
//! the manager's server is handed the `/metrics` filter
//! ([`metrics_auth::MetricsAuth::protect`]), the TLS listener
//! ([`metrics_tls::MetricsTls::serve`]) and the trace UI's routes
//! ([`trace_ui::router`]) by `main`.

pub mod logging;
pub mod metrics;
pub mod metrics_auth;
pub mod metrics_tls;
pub mod otlp;
pub mod tls_listener;
pub mod trace_ui;
