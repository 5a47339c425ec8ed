//! A deadline on every request to the API server: client-go's
//! `rest.Config.Timeout`, plus a watch deadline derived from the watch's
//! `timeoutSeconds` as client-go's reflector does. The numbers, and why:
//! - reads and writes (everything but a watch): the whole response, headers
//!   and body, must arrive within 30 s ([`DEFAULT_REQUEST_TIMEOUT`],
//!   `--kube-api-timeout-seconds`), client-go's usual `rest.Config.Timeout`
//!   for controllers (which, as Go's `http.Client.Timeout`, covers the body
//!   too); a request that times out fails with a transport error, which
//!   callers retry as for an unreachable server. Its body is also capped
//!   (`client/body.rs`);
//! - a watch: the server closes it after its `timeoutSeconds` (5-10 min);
//!   establishing it must take at most that plus 30 s
//!   ([`WATCH_TIMEOUT_MARGIN`]), and once open the reflector abandons a watch
//!   still open (even silent: no event, no bookmark) 30 s past its
//!   `timeoutSeconds`, or after 90 s without a frame (`reflector/watch.rs`);
//! - a dead connection: HTTP/2 pings after 30 s without a frame, and the
//!   connection fails 15 s later if unanswered (`client/connect.rs`), as
//!   client-go's health check; every request and watch on it then fails and
//!   is retried on a new connection;
//! - connecting, TLS handshake included: 30 s (kube's connect timeout,
//!   `client/connect.rs`).
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::body::{BoundedBody, MAX_RESPONSE_BYTES};

/// How long a read or write may take to answer (client-go controllers'
/// usual `rest.Config.Timeout`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long past its `timeoutSeconds` a watch may take to be established.
pub const WATCH_TIMEOUT_MARGIN: Duration = Duration::from_secs(30);

/// A request that did not get its response in time.
#[derive(Debug, thiserror::Error)]
#[error("failed to get a response within {0:?}: request timed out")]
pub struct RequestTimedOut(pub Duration);

/// Puts a deadline on every request: `timeout` for reads and writes,
/// `timeoutSeconds` + [`WATCH_TIMEOUT_MARGIN`] for a watch (see the module
/// doc). For a read or write the deadline covers the response's head and
/// body, and the body is capped at [`MAX_RESPONSE_BYTES`]; a watch's body is
/// bounded by the reflector.
#[derive(Clone, Copy, Debug)]
pub struct RequestTimeoutLayer {
    timeout: Duration,
}

impl RequestTimeoutLayer {
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

impl Default for RequestTimeoutLayer {
    fn default() -> Self {
        Self::new(DEFAULT_REQUEST_TIMEOUT)
    }
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The service [`RequestTimeoutLayer`] makes.
#[derive(Clone, Debug)]
pub struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
}

/// The deadline for a request to `uri`: a watch's from its
/// `timeoutSeconds` (none without one), anything else `timeout`.
pub fn deadline_for(uri: &http::Uri, timeout: Duration) -> Option<Duration> {
    if !is_watch(uri) {
        return Some(timeout);
    }
    let seconds: u64 = query_param(uri, "timeoutSeconds")?.parse().ok()?;
    Some(Duration::from_secs(seconds) + WATCH_TIMEOUT_MARGIN)
}

fn query_param<'a>(uri: &'a http::Uri, name: &str) -> Option<&'a str> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether `uri` asks for a watch (`?watch=true`).
pub fn is_watch(uri: &http::Uri) -> bool {
    matches!(query_param(uri, "watch"), Some("true" | "1"))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B, RB> Service<http::Request<B>> for RequestTimeout<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<BoundedBody<RB>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let is_watch = is_watch(req.uri());
        let deadline = deadline_for(req.uri(), self.timeout);
        let start = Instant::now();
        let response = self.inner.call(req);
        Box::pin(async move {
            let Some(deadline) = deadline else {
                let response = response.await.map_err(Into::into)?;
                return Ok(response.map(BoundedBody::unbounded));
            };
            let response = match tokio::time::timeout(deadline, response).await {
                Ok(result) => result.map_err(Into::into)?,
                Err(_) => return Err(Box::new(RequestTimedOut(deadline)) as BoxError),
            };
            if is_watch {
                return Ok(response.map(BoundedBody::unbounded));
            }
            // The body gets what is left of the same budget.
            Ok(response.map(|body| {
                BoundedBody::new(body, Some((start + deadline, deadline)), MAX_RESPONSE_BYTES)
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::client::body::BodyTimedOut;
    use bytes::Bytes;
    use futures::StreamExt;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody};

    type TestBody = StreamBody<
        futures::stream::BoxStream<'static, Result<Frame<Bytes>, std::convert::Infallible>>,
    >;
    type Answer = BoxFuture<'static, Result<http::Response<TestBody>, std::convert::Infallible>>;

    /// A server that sends the head after `head`, then "a", then "b" after
    /// `body` more, and ends.
    fn slow_server(
        head: Duration,
        body: Duration,
    ) -> impl Service<
        http::Request<()>,
        Response = http::Response<TestBody>,
        Error = std::convert::Infallible,
        Future = Answer,
    > + Clone {
        tower::service_fn(move |_req: http::Request<()>| -> Answer {
            Box::pin(async move {
                tokio::time::sleep(head).await;
                let first = futures::stream::iter([Ok(Frame::data(Bytes::from_static(b"a")))]);
                let second = futures::stream::once(async move {
                    tokio::time::sleep(body).await;
                    Ok(Frame::data(Bytes::from_static(b"b")))
                });
                Ok(http::Response::new(StreamBody::new(
                    first.chain(second).boxed(),
                )))
            })
        })
    }

    async fn call(
        svc: &mut RequestTimeout<
            impl Service<
                http::Request<()>,
                Response = http::Response<TestBody>,
                Error = std::convert::Infallible,
                Future = Answer,
            >,
        >,
        uri: &str,
    ) -> Result<Bytes, BoxError> {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
        let response = svc.call(http::Request::get(uri).body(()).unwrap()).await?;
        Ok(response.into_body().collect().await?.to_bytes())
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[tokio::test(start_paused = true)]
    async fn a_read_or_write_that_hangs_fails_after_30_seconds() {
        let mut svc = RequestTimeoutLayer::default().layer(slow_server(HOUR, Duration::ZERO));
        let start = Instant::now();
        let err = call(&mut svc, "/api/v1/namespaces/ns/pods/p")
            .await
            .unwrap_err();
        assert_eq!(Instant::now() - start, Duration::from_secs(30));
        assert!(err.downcast_ref::<RequestTimedOut>().is_some(), "{err}");
        let mut fast = RequestTimeoutLayer::default()
            .layer(slow_server(Duration::from_secs(29), Duration::ZERO));
        assert_eq!(&call(&mut fast, "/api/v1/pods").await.unwrap()[..], b"ab");
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_whose_body_stalls_after_the_head_fails_at_the_same_30_second_deadline() {
        let mut svc =
            RequestTimeoutLayer::default().layer(slow_server(Duration::from_secs(10), HOUR));
        let start = Instant::now();
        let err = call(&mut svc, "/api/v1/pods?limit=500").await.unwrap_err();
        assert_eq!(Instant::now() - start, Duration::from_secs(30));
        assert!(err.downcast_ref::<BodyTimedOut>().is_some(), "{err}");
        // Head and body within the budget together: whole.
        let mut fine = RequestTimeoutLayer::default().layer(slow_server(
            Duration::from_secs(10),
            Duration::from_secs(19),
        ));
        assert_eq!(&call(&mut fine, "/api/v1/pods").await.unwrap()[..], b"ab");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_gets_its_timeout_seconds_plus_the_margin() {
        let uri = "/api/v1/pods?watch=true&timeoutSeconds=300&allowWatchBookmarks=true";
        assert_eq!(
            deadline_for(&uri.parse().unwrap(), DEFAULT_REQUEST_TIMEOUT),
            Some(Duration::from_secs(330))
        );
        let mut svc = RequestTimeoutLayer::default().layer(slow_server(HOUR, Duration::ZERO));
        let start = Instant::now();
        assert!(call(&mut svc, uri).await.is_err());
        assert_eq!(Instant::now() - start, Duration::from_secs(330));
        // Once open, its body is the reflector's to time: not cut here.
        let mut open = RequestTimeoutLayer::default().layer(slow_server(Duration::ZERO, HOUR));
        assert_eq!(&call(&mut open, uri).await.unwrap()[..], b"ab");
        // A LIST that merely mentions watch in a selector is not a watch.
        assert_eq!(
            deadline_for(
                &"/api/v1/pods?labelSelector=watch%3Dtrue".parse().unwrap(),
                DEFAULT_REQUEST_TIMEOUT
            ),
            Some(DEFAULT_REQUEST_TIMEOUT)
        );
    }
}
