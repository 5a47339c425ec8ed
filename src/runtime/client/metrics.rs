//! API request metrics with client-go's names: `rest_client_requests_total`
//! and `rest_client_request_duration_seconds`, as a tower layer under kube's
//! client.
//!
//! client-go counts every request in `rest.Request` through the hooks in
//! `tools/metrics`; controller-runtime registers `rest_client_requests_total
//! {code,method,host}` with them, Kubernetes' components (component-base)
//! also `rest_client_request_duration_seconds{verb,host}`. Dashboards for Go
//! controllers chart both, so we keep their names, labels and buckets.
//!
//! kube adds its own layers inside ours (base URI, retries, auth), so the
//! request seen here carries only a path: the host label comes from the
//! client's config. The duration runs from `call` until the response head
//! arrives, as in client-go (a watch counts until its stream opens).
//! The retry layer (`client/retry_after.rs`: a 429 or 5xx with Retry-After)
//! sits inside this one, so a retried request counts once, with its final
//! code, where client-go would count each attempt.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tower::{Layer, Service};

use crate::runtime::metrics::{Buckets, CounterFamily, Family, HistogramFamily, SharedMetrics};

/// component-base's buckets for rest_client_request_duration_seconds.
const LATENCY_BUCKETS: Buckets = Buckets::Explicit(&[
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
]);

/// Counts and times every request through a kube client. Cheap to clone.
#[derive(Clone)]
pub struct RestClientMetricsLayer {
    host: String,
    requests: Arc<dyn CounterFamily>,
    latency: Arc<dyn HistogramFamily>,
}

impl RestClientMetricsLayer {
    /// Metrics for a client of the API server at `host` (`host:port`, the
    /// authority of the cluster URL, like client-go's `url.Host`), exposed
    /// in `registry` (client-go's `tools/metrics.Register`: the caller
    /// plugs the registry in before the first request).
    pub fn new(host: impl Into<String>, registry: &SharedMetrics) -> Self {
        Self {
            host: host.into(),
            // The registry appends `_total` to counters.
            requests: registry.counter(Family {
                name: "rest_client_requests",
                help: "Number of HTTP requests, partitioned by status code, method, and host",
                labels: &["code", "method", "host"],
            }),
            latency: registry.histogram(
                Family {
                    name: "rest_client_request_duration_seconds",
                    help: "Request latency in seconds, by verb and host",
                    labels: &["verb", "host"],
                },
                LATENCY_BUCKETS,
            ),
        }
    }
}

impl<S> Layer<S> for RestClientMetricsLayer {
    type Service = RestClientMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RestClientMetrics {
            inner,
            metrics: self.clone(),
        }
    }
}

/// The measuring service.
#[derive(Clone)]
pub struct RestClientMetrics<S> {
    inner: S,
    metrics: RestClientMetricsLayer,
}

impl<S, ReqBody, ResBody> Service<http::Request<ReqBody>> for RestClientMetrics<S>
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
        let method = req.method().as_str().to_owned();
        let metrics = self.metrics.clone();
        let start = Instant::now();
        let response = self.inner.call(req);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(response) => response.status().as_u16().to_string(),
                // client-go's label when no response came back.
                Err(_) => "<error>".to_owned(),
            };
            metrics
                .latency
                .with(&[&method, &metrics.host])
                .observe(start.elapsed().as_secs_f64());
            metrics
                .requests
                .with(&[&code, &method, &metrics.host])
                .inc();
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runtime::metrics::testing::{encode, new_registry};

    #[tokio::test(start_paused = true)]
    async fn requests_are_counted_by_code_and_method_and_timed_by_verb() {
        let registry = new_registry();
        let layer = RestClientMetricsLayer::new("10.0.0.1:6443", &registry);
        let mut svc = layer.layer(tower::service_fn(|req: http::Request<()>| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let status = if req.method() == http::Method::DELETE {
                404
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder().status(status).body(()).unwrap(),
            )
        }));
        for method in [http::Method::GET, http::Method::GET, http::Method::DELETE] {
            let req = http::Request::builder()
                .method(method)
                .uri("/api/v1/pods")
                .body(())
                .unwrap();
            svc.call(req).await.unwrap();
        }
        let text = encode(&registry);
        for line in [
            r#"rest_client_requests_total{code="200",method="GET",host="10.0.0.1:6443"} 2"#,
            r#"rest_client_requests_total{code="404",method="DELETE",host="10.0.0.1:6443"} 1"#,
            r#"rest_client_request_duration_seconds_count{verb="GET",host="10.0.0.1:6443"} 2"#,
            r#"rest_client_request_duration_seconds_sum{verb="GET",host="10.0.0.1:6443"} 0.6"#,
            r#"rest_client_request_duration_seconds_bucket{le="0.25",verb="GET",host="10.0.0.1:6443"} 0"#,
            r#"rest_client_request_duration_seconds_bucket{le="0.5",verb="GET",host="10.0.0.1:6443"} 2"#,
        ] {
            assert!(text.contains(line), "missing {line} in:\n{text}");
        }
    }

    #[tokio::test]
    async fn a_request_without_a_response_is_counted_as_an_error() {
        let registry = new_registry();
        let layer = RestClientMetricsLayer::new("api:443", &registry);
        let mut svc = layer.layer(tower::service_fn(|_: http::Request<()>| async {
            Err::<http::Response<()>, _>("connection refused")
        }));
        let req = http::Request::builder()
            .method(http::Method::POST)
            .body(())
            .unwrap();
        assert!(svc.call(req).await.is_err());
        assert!(encode(&registry).contains(
            r#"rest_client_requests_total{code="<error>",method="POST",host="api:443"} 1"#
        ));
    }
}
