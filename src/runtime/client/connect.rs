//! The connection to the API server: HTTP/2 with client-go's health check.
//!
//! Mirrors client-go `rest.HTTPClientFor` / `transport.New` with
//! `http2.ConfigureTransports` and its `ReadIdleTimeout` (30 s) and
//! `PingTimeout` (15 s) (`k8s.io/apimachinery/pkg/util/net/http.go`).
//!
//! kube 5's `ClientBuilder::try_from(config)` speaks HTTP/1.1 only (its TLS
//! connector offers no ALPN `h2`). On HTTP/1.1 there is nothing to ping: a
//! half-open connection (the peer gone without a FIN or RST, e.g. a node or a
//! NAT dropping state) is noticed only when a request's deadline runs out,
//! and a silent watch only after the reflector's idle deadline. So this
//! module builds the same stack (TLS and auth from kube's `Config`, kube's
//! base-URI, auth and extra-header layers) on a connector that offers
//! `h2` and `http/1.1`, with our own retry policy in place of kube's
//! (`client/retry_after.rs`) and a window on requests in flight inside it
//! (`client/window.rs`). The API server picks `h2`, and then:
//!
//! - a PING goes out when nothing was read for [`PING_INTERVAL`] (30 s), and
//!   the connection with every stream on it fails when the PING is not
//!   answered within [`PING_TIMEOUT`] (15 s): a dead connection is noticed
//!   about 45 s after its last frame, as with client-go;
//! - every request shares one connection per server, as client-go does. The
//!   API server allows 100 concurrent streams per connection
//!   (`--http2-max-streams-per-connection`), and unlike Go's transport hyper
//!   does not open a second connection when they are used up: a request
//!   beyond the 100th waits for a stream to end, and the wait counts against
//!   its deadline (`client/timeout.rs`). Tried against the local API server:
//!   with 100 watches open on one client the 101st request got no answer in
//!   10 s, and went through 6 ms after one watch closed. A watch holds a
//!   stream for its whole life, so the operator stays well below: 3 watches
//!   (TFJobs, Pods, Services; a standby also watches its Lease) plus at most
//!   `--workers` × `--write-concurrency` writes (4 × 16 = 64 at the
//!   defaults). Raising those two past ~95 together queues requests here.
//!
//! A server that refuses `h2` (or a TLS-terminating proxy in between), and a
//! plain `http://` server (no TLS, so no ALPN), are spoken to in HTTP/1.1 as
//! before. With a `proxy-url` in the kubeconfig the
//! stack is kube's own (HTTP/1.1): its proxy tunnels are not rebuilt here.
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::retry::RetryLayer;

use super::retry_after::RetryAfterPolicy;
use super::window::{Window, WindowLayer};
use tower::util::BoxService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// client-go's `ReadIdleTimeout`: ping after this long without a frame.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);
/// client-go's `PingTimeout`: a ping unanswered this long kills the connection.
pub const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// kube's boxed service type, which [`ClientBuilder`] layers go around.
pub type ApiService = BoxService<http::Request<Body>, http::Response<Box<DynBody>>, BoxError>;

/// A [`ClientBuilder`] for `config` whose connection speaks HTTP/2 with
/// keep-alive pings when the server agrees (see the module doc), sending
/// through `window` (`client/window.rs`). Give every client of the process
/// the same window: API Priority and Fairness classifies requests by who
/// sends them, so all of one identity's clients share one priority level's
/// seats and queue, and a 429 to one of them is news for all.
pub fn client_builder(
    config: kube::Config,
    window: &Arc<Window>,
) -> Result<ClientBuilder<ApiService>, kube::Error> {
    if config.proxy_url.is_some() {
        tracing::warn!(
            "a proxy-url is configured: using kube's HTTP/1.1 client, so a dead connection is noticed only at a request's deadline"
        );
        return ClientBuilder::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    let tls = config.rustls_client_config()?;
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = config.tls_server_name.as_ref() {
        let name = name
            .clone()
            .try_into()
            .map_err(kube::client::RustlsTlsError::InvalidServerName)
            .map_err(kube::Error::RustlsTls)?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = ConnectTimeout {
        inner: https.enable_http1().enable_http2().wrap_connector(http),
        timeout: config.connect_timeout,
    };
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryAfterPolicy::default())),
        )
        // Inside the retries, so that each attempt waits for room and each
        // 429 narrows the window.
        .layer(WindowLayer::new(Arc::clone(window)))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client)
        .map_response(|response| {
            response.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// Connecting (TCP and the TLS handshake) took longer than kube's connect
/// timeout.
#[derive(Debug, thiserror::Error)]
#[error("failed to connect to the API server within {0:?}")]
pub struct ConnectTimedOut(pub Duration);

/// A deadline on the whole connect, TLS handshake included, as kube's own
/// stack has (`hyper-timeout`'s connect timeout): a server that accepts the
/// TCP connection and then says nothing must not hold a connection attempt
/// for ever. (`HttpConnector`'s own timeout covers the TCP connect only.)
#[derive(Clone, Debug)]
struct ConnectTimeout<C> {
    inner: C,
    timeout: Option<Duration>,
}

impl<C> Service<http::Uri> for ConnectTimeout<C>
where
    C: Service<http::Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<C::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            let Some(timeout) = timeout else {
                return connecting.await.map_err(Into::into);
            };
            match tokio::time::timeout(timeout, connecting).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(Box::new(ConnectTimedOut(timeout)) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test(start_paused = true)]
    async fn a_connect_whose_handshake_never_ends_fails_at_the_connect_timeout() {
        let silent = tower::service_fn(|_uri: http::Uri| async {
            futures::future::pending::<Result<(), std::convert::Infallible>>().await
        });
        let mut connector = ConnectTimeout {
            inner: silent,
            timeout: Some(Duration::from_secs(30)),
        };
        let start = Instant::now();
        let err = connector
            .call("https://127.0.0.1:6443".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(Instant::now() - start, Duration::from_secs(30));
        assert!(err.downcast_ref::<ConnectTimedOut>().is_some(), "{err}");
    }
}
