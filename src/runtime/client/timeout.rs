//! A deadline on every request to the API server: client-go's
//! `rest.Config.Timeout`, plus a watch deadline derived from the watch's
//! `timeoutSeconds` as client-go's reflector does. The numbers, and why:
//! - reads and writes (everything but a watch): the response must start
//!   within 30 s ([`DEFAULT_REQUEST_TIMEOUT`], `--kube-api-timeout-seconds`),
//!   client-go's usual `rest.Config.Timeout` for controllers; a request that
//!   times out fails with a transport error, which callers retry as for an
//!   unreachable server;
//! - a watch: the server closes it after its `timeoutSeconds` (5-10 min);
//!   establishing it must take at most that plus 30 s
//!   ([`WATCH_TIMEOUT_MARGIN`]), and once open the reflector abandons a watch
//!   still open (even silent: no event, no bookmark) 30 s past its
//!   `timeoutSeconds` (`reflector/watch.rs`);
//! - connecting: kube's 30 s connect timeout; a stalled socket write: kube's
//!   295 s write timeout.
//!
//! Not reached: noticing a half-open connection within ~45 s, as
//! client-go's HTTP/2 health check does (30 s read-idle, then a 15 s ping).
//! kube 5 speaks HTTP/1.1 here, so there is no ping; a dead watch is
//! noticed after 90 s without a frame (the server sends a bookmark about
//! every minute: `reflector/watch.rs`), a dead read or write at its 30 s
//! deadline.
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tower::{Layer, Service};

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
/// doc). The deadline covers the wait for the response's head; a watch's
/// body is bounded by the reflector.
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
    let query = uri.query().unwrap_or_default();
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    };
    let is_watch = matches!(param("watch"), Some("true" | "1"));
    if !is_watch {
        return Some(timeout);
    }
    let seconds: u64 = param("timeoutSeconds")?.parse().ok()?;
    Some(Duration::from_secs(seconds) + WATCH_TIMEOUT_MARGIN)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> Service<http::Request<B>> for RequestTimeout<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let deadline = deadline_for(req.uri(), self.timeout);
        let response = self.inner.call(req);
        Box::pin(async move {
            let Some(deadline) = deadline else {
                return response.await.map_err(Into::into);
            };
            match tokio::time::timeout(deadline, response).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(Box::new(RequestTimedOut(deadline)) as BoxError),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    /// A server that answers after `delay`.
    fn slow_server(
        delay: Duration,
    ) -> impl Service<
        http::Request<()>,
        Response = u32,
        Error = std::convert::Infallible,
        Future = BoxFuture<'static, Result<u32, std::convert::Infallible>>,
    > + Clone {
        tower::service_fn(move |_req: http::Request<()>| -> BoxFuture<'static, Result<u32, std::convert::Infallible>> {
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                Ok(200)
            })
        })
    }

    async fn call(
        svc: &mut RequestTimeout<
            impl Service<
                http::Request<()>,
                Response = u32,
                Error = std::convert::Infallible,
                Future = BoxFuture<'static, Result<u32, std::convert::Infallible>>,
            >,
        >,
        uri: &str,
    ) -> Result<u32, BoxError> {
        std::future::poll_fn(|cx| svc.poll_ready(cx)).await?;
        svc.call(http::Request::get(uri).body(()).unwrap()).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_or_write_that_hangs_fails_after_30_seconds() {
        let mut svc = RequestTimeoutLayer::default().layer(slow_server(Duration::from_secs(3600)));
        let start = Instant::now();
        let err = call(&mut svc, "/api/v1/namespaces/ns/pods/p")
            .await
            .unwrap_err();
        assert_eq!(Instant::now() - start, Duration::from_secs(30));
        assert!(err.downcast_ref::<RequestTimedOut>().is_some(), "{err}");
        let mut fast = RequestTimeoutLayer::default().layer(slow_server(Duration::from_secs(29)));
        assert_eq!(call(&mut fast, "/api/v1/pods").await.unwrap(), 200);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_gets_its_timeout_seconds_plus_the_margin() {
        let uri = "/api/v1/pods?watch=true&timeoutSeconds=300&allowWatchBookmarks=true";
        assert_eq!(
            deadline_for(&uri.parse().unwrap(), DEFAULT_REQUEST_TIMEOUT),
            Some(Duration::from_secs(330))
        );
        let mut svc = RequestTimeoutLayer::default().layer(slow_server(Duration::from_secs(3600)));
        let start = Instant::now();
        assert!(call(&mut svc, uri).await.is_err());
        assert_eq!(Instant::now() - start, Duration::from_secs(330));
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
