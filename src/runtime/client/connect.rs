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
//! (`client/retry_after.rs`), a window on requests in flight inside it
//! (`client/window.rs`), and the leader's write fence (`client/fence.rs`)
//! last, right above the connection, so that every attempt is checked when it
//! is sent: a write parked in a `Retry-After` (up to 32 s) or queued for room
//! in the window is refused if our Lease lapsed meanwhile, as it does for a
//! leader frozen by SIGSTOP. The API server picks `h2`, and then:
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
//! Its retries cannot be reached from outside, so under leader election
//! they are turned off and the fence goes around it: with nothing queued
//! inside, the check at the edge is the check at send time.
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::retry::RetryLayer;

use super::fence::{WriteFence, WriteFenceLayer};
use super::retry_after::RetryAfterPolicy;
use super::window::{Window, WindowLayer};
use tower::util::BoxService;
use tower::{BoxError, Layer, Service, ServiceBuilder, ServiceExt};

/// client-go's `ReadIdleTimeout`: ping after this long without a frame.
pub const PING_INTERVAL: Duration = Duration::from_secs(30);
/// client-go's `PingTimeout`: a ping unanswered this long kills the connection.
pub const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// kube's boxed service type, which [`ClientBuilder`] layers go around.
pub type ApiService = BoxService<http::Request<Body>, http::Response<Box<DynBody>>, BoxError>;

/// A [`ClientBuilder`] for `config` whose connection speaks HTTP/2 with
/// keep-alive pings when the server agrees (see the module doc), sending
/// through `window` (`client/window.rs`) and, at each attempt, past `fence`
/// (`client/fence.rs`). Give every client of the process the same window:
/// API Priority and Fairness classifies requests by who sends them, so all
/// of one identity's clients share one priority level's seats and queue,
/// and a 429 to one of them is news for all.
pub fn client_builder(
    mut config: kube::Config,
    window: &Arc<Window>,
    fence: &WriteFence,
) -> Result<ClientBuilder<ApiService>, kube::Error> {
    name_ourselves(&mut config);
    if config.proxy_url.is_some() {
        tracing::warn!(
            "a proxy-url is configured: using kube's HTTP/1.1 client, so a dead connection is noticed only at a request's deadline"
        );
        if fence.is_open() {
            return ClientBuilder::try_from(config);
        }
        tracing::warn!(
            "a proxy-url is configured with leader election: requests the API server asks to retry later are not retried, so that no write goes out after our Lease lapsed"
        );
        config.default_retry = false;
        let fence = WriteFenceLayer::new(fence.clone());
        return Ok(ClientBuilder::try_from(config)?
            .with_layer(&tower::layer::layer_fn(|inner| fence.layer(inner).boxed())));
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
    let service = over_connection(&config, window, fence, client)?;
    Ok(ClientBuilder::new(service, config.default_namespace))
}

/// Our User-Agent, as client-go sends its binary's name and version: the
/// API server names a write's field manager after it (`managedFields`), so
/// without one our writes are owned by "unknown", and the audit log tells
/// who sent a request by it. A header the kubeconfig sets is kept.
pub const USER_AGENT: &str = concat!("tfjob-operator/", env!("CARGO_PKG_VERSION"));

fn name_ourselves(config: &mut kube::Config) {
    if !config
        .headers
        .iter()
        .any(|(name, _)| name == http::header::USER_AGENT)
    {
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(USER_AGENT),
        ));
    }
}

/// The layers between kube's `Client` and `connection`, outermost first.
fn over_connection<C, B>(
    config: &kube::Config,
    window: &Arc<Window>,
    fence: &WriteFence,
    connection: C,
) -> Result<ApiService, kube::Error>
where
    C: Service<http::Request<Body>, Response = http::Response<B>> + Clone + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
    B: http_body::Body<Data = bytes::Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    Ok(ServiceBuilder::new()
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
        // Last before the connection, inside the retries and the window:
        // an attempt that waited there is checked when it is sent.
        .layer(WriteFenceLayer::new(fence.clone()))
        .service(connection)
        .map_response(|response| {
            response
                .map(|body| Box::new(body.map_err(|e| -> BoxError { e.into() })) as Box<DynBody>)
        })
        .boxed())
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
    use crate::runtime::client::fence::NotLeader;
    use crate::runtime::client::window::MAX_IN_FLIGHT;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::time::Instant;

    type Answer = http::Response<http_body_util::Full<bytes::Bytes>>;

    fn answer(status: u16, retry_after: Option<u64>, body: serde_json::Value) -> Answer {
        let mut answer = http::Response::builder()
            .status(status)
            .header("content-type", "application/json");
        if let Some(seconds) = retry_after {
            answer = answer.header("Retry-After", seconds.to_string());
        }
        answer
            .body(body.to_string().into())
            .expect("a valid response")
    }

    fn created(name: &str) -> Answer {
        answer(
            201,
            None,
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
        )
    }

    fn too_many_requests(retry_after: u64) -> Answer {
        answer(
            429,
            Some(retry_after),
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "TooManyRequests", "code": 429}),
        )
    }

    /// A client over our stack whose connection is `server`, writing
    /// ConfigMaps into namespace `a`.
    fn configmaps<S>(server: S, window: &Arc<Window>, fence: &WriteFence) -> Api<ConfigMap>
    where
        S: Service<http::Request<Body>, Response = Answer, Error = std::convert::Infallible>
            + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        let config = kube::Config::new("http://127.0.0.1:6443".parse().expect("a URL"));
        let service = over_connection(&config, window, fence, server).expect("the stack");
        Api::namespaced(ClientBuilder::new(service, "a").build(), "a")
    }

    fn configmap(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A server that answers its first request 429 with this `Retry-After`
    /// and every later one 201, counting what it was sent.
    fn throttles_once(
        retry_after: u64,
    ) -> (
        impl Service<
            http::Request<Body>,
            Response = Answer,
            Error = std::convert::Infallible,
            Future = impl Send + 'static,
        > + Clone
        + Send
        + 'static,
        Arc<AtomicUsize>,
    ) {
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&sent);
        let server = tower::service_fn(move |_request: http::Request<Body>| {
            let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                Ok::<_, std::convert::Infallible>(if first {
                    too_many_requests(retry_after)
                } else {
                    created("c")
                })
            }
        });
        (server, sent)
    }

    fn refused_by_the_fence(err: &kube::Error) -> bool {
        matches!(err, kube::Error::Service(e) if e.downcast_ref::<NotLeader>().is_some())
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_parked_in_a_retry_after_is_not_sent_again_once_the_lease_lapsed() {
        // The server asks to retry in 5 s; the Lease lapses 2 s in.
        let (server, sent) = throttles_once(5);
        let fence = WriteFence::new();
        fence.grant_until(Instant::now() + Duration::from_secs(2));
        let api = configmaps(server, &Window::new(MAX_IN_FLIGHT), &fence);
        let start = Instant::now();
        let err = api
            .create(&PostParams::default(), &configmap("c"))
            .await
            .expect_err("the retry comes after the Lease lapsed");
        assert!(refused_by_the_fence(&err), "{err}");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "the retry must not reach the server"
        );
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "refused at the retry"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_queued_for_room_in_the_window_is_not_sent_once_the_lease_lapsed() {
        // One request at a time; the first is answered after 5 s, the
        // Lease lapses 2 s in, while the second waits for room.
        let sent = Arc::new(AtomicUsize::new(0));
        let server = {
            let sent = Arc::clone(&sent);
            tower::service_fn(move |_request: http::Request<Body>| {
                sent.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok::<_, std::convert::Infallible>(created("c"))
                }
            })
        };
        let fence = WriteFence::new();
        fence.grant_until(Instant::now() + Duration::from_secs(2));
        let api = configmaps(server, &Window::new(1), &fence);
        let params = PostParams::default();
        let (one, two) = (configmap("first"), configmap("second"));
        let (first, second) = tokio::join!(api.create(&params, &one), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            api.create(&params, &two).await
        });
        assert!(first.is_ok(), "sent while the Lease was fresh: {first:?}");
        let err = second.expect_err("room came after the Lease lapsed");
        assert!(refused_by_the_fence(&err), "{err}");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "the queued write must not reach the server"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_request_says_it_is_ours_so_the_server_names_our_field_manager_after_us() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        let server = tower::service_fn(move |request: http::Request<Body>| {
            let agent = request
                .headers()
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            record.lock().expect("not poisoned").push(agent);
            async { Ok::<_, std::convert::Infallible>(created("c")) }
        });
        let mut config = kube::Config::new("http://127.0.0.1:6443".parse().expect("a URL"));
        name_ourselves(&mut config);
        let fence = WriteFence::new();
        fence.grant_until(Instant::now() + Duration::from_secs(10));
        let service = over_connection(&config, &Window::new(MAX_IN_FLIGHT), &fence, server)
            .expect("the stack");
        let api: Api<ConfigMap> = Api::namespaced(ClientBuilder::new(service, "a").build(), "a");
        api.create(&PostParams::default(), &configmap("c"))
            .await
            .expect("created");
        let seen = seen.lock().expect("not poisoned").clone();
        assert_eq!(seen, [Some(USER_AGENT.to_owned())]);
        assert!(USER_AGENT.starts_with("tfjob-operator/"));

        let mut theirs = kube::Config::new("http://127.0.0.1:6443".parse().expect("a URL"));
        theirs.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static("kubectl-like/1"),
        ));
        name_ourselves(&mut theirs);
        assert_eq!(
            theirs.headers.len(),
            1,
            "a User-Agent the kubeconfig sets is kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reads_and_writes_under_a_fresh_lease_go_through_the_stack_and_its_retries() {
        let (server, sent) = throttles_once(1);
        let fence = WriteFence::new();
        fence.grant_until(Instant::now() + Duration::from_secs(10));
        let api = configmaps(server, &Window::new(MAX_IN_FLIGHT), &fence);
        api.create(&PostParams::default(), &configmap("c"))
            .await
            .expect("retried after 1 s, well within the Lease");
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

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
