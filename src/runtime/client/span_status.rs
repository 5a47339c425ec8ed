//! Each API response's HTTP status, recorded on the span the request was
//! sent from, as a tower layer under kube's client.
//!
//! client-go's counterpart is the `otelhttp` transport that
//! `rest.Config.Wrap(tracing.WrapperFor(tp))` (k8s.io/component-base/tracing)
//! puts under a traced client: it gives every request a span with its status
//! code. Here the caller opens the span (the reconciler's API-write spans,
//! which know the object's kind and name, see [`write_span`]) and this layer
//! fills in its `http.response.status_code`, which the caller cannot see: kube's
//! `Api` returns only the decoded object on success. A span without that
//! field (a read, a request outside any span) is left as it is, so the layer
//! costs one span lookup per request when traces are off.
//!
//! Counted from the final response: the retry layer (`client/retry_after.rs`) sits inside.
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::{Layer, Service};
use tracing::Span;

/// The field of [`write_span`] this layer records.
pub const STATUS_FIELD: &str = "http.response.status_code";

/// The span of one API write: `verb` (`create`, `update`, `patch`,
/// `delete`) of the object of `kind` named `object`. It is named
/// `"<verb> <kind>"` in OpenTelemetry (`otel.name`), is a client span, and
/// gets the response's status from [`SpanStatusLayer`], which also marks it
/// failed on a 4xx or 5xx or no response (OpenTelemetry's rule for client
/// spans, even where the caller takes a 404 or 409 in stride). At debug level: with traces off and the log at info it is never
/// even created.
pub fn write_span(verb: &'static str, kind: &str, object: &str) -> Span {
    tracing::debug_span!(
        "api write",
        otel.name = %format_args!("{verb} {kind}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        verb,
        kind,
        object,
        http.response.status_code = tracing::field::Empty,
    )
}

/// Records each response's status on the span current when the request was
/// sent. Stateless; install it once on the client.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpanStatusLayer;

impl<S> Layer<S> for SpanStatusLayer {
    type Service = SpanStatus<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SpanStatus { inner }
    }
}

/// The recording service.
#[derive(Clone, Debug)]
pub struct SpanStatus<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for SpanStatus<S>
where
    S: Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<ReqBody>) -> Self::Future {
        // `call` runs inside the caller's span (kube's `Client::send` calls
        // it from the awaiting future), the response may arrive elsewhere.
        let span = Span::current();
        let response = self.inner.call(req);
        Box::pin(async move {
            let result = response.await;
            let is_write_span = span
                .metadata()
                .is_some_and(|m| m.fields().field(STATUS_FIELD).is_some());
            if is_write_span {
                let status = result.as_ref().ok().map(|r| r.status().as_u16());
                if let Some(status) = status {
                    span.record(STATUS_FIELD, status);
                }
                if status.is_none_or(|s| s >= 400) {
                    span.record("otel.status_code", "error");
                }
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing::Instrument;
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

    use super::*;

    /// Every `name = value` recorded after a span was created.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<(String, String)>>>);

    impl Visit for Recorded {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0
                .lock()
                .unwrap()
                .push((field.name().to_owned(), format!("{value:?}")));
        }
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorded {
        fn on_record(
            &self,
            _: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _: LayerContext<'_, S>,
        ) {
            values.record(&mut self.clone());
        }
    }

    /// An API server answering every request with `status`.
    fn answering(
        status: u16,
    ) -> SpanStatus<
        impl Service<
            http::Request<()>,
            Response = http::Response<()>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        >,
    > {
        SpanStatusLayer.layer(tower::service_fn(move |_: http::Request<()>| async move {
            Ok(http::Response::builder().status(status).body(()).unwrap())
        }))
    }

    async fn send<S: Service<http::Request<()>>>(svc: &mut S) {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await.ok();
        let _ = svc.call(http::Request::new(())).await;
    }

    #[tokio::test]
    async fn the_write_spans_status_is_the_responses_and_other_spans_are_left_alone() {
        let recorded = Recorded::default();
        let subscriber = tracing_subscriber::registry()
            .with(recorded.clone())
            .with(tracing_subscriber::filter::LevelFilter::DEBUG);
        let _default = tracing::subscriber::set_default(subscriber);
        let mut created = answering(201);
        send(&mut created)
            .instrument(write_span("create", "pod", "job-worker-0"))
            .await;
        send(&mut created)
            .instrument(tracing::info_span!("reconcile", name = "job"))
            .await;
        send(&mut created).await;
        let mut conflict = answering(409);
        send(&mut conflict)
            .instrument(write_span("update", "tfjob/status", "job"))
            .await;
        assert_eq!(
            *recorded.0.lock().unwrap(),
            [
                (STATUS_FIELD.to_owned(), "201".to_owned()),
                (STATUS_FIELD.to_owned(), "409".to_owned()),
                ("otel.status_code".to_owned(), "\"error\"".to_owned()),
            ]
        );
    }
}
