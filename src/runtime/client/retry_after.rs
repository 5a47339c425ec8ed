//! When the API server says "try again after N seconds", try again after N
//! seconds: client-go's `rest.WithRetry` (`rest/with_retry.go`, `checkWait`).
//!
//! A response is retried when it is a 429 (API Priority and Fairness, or the
//! max-in-flight filter, refusing the request) or any 5xx, **and** carries a
//! `Retry-After` header in whole seconds; the wait is exactly that header, and
//! a request is retried at most [`MAX_RETRIES`] times (client-go's default).
//! Anything else goes back to the caller as it came.
//!
//! This replaces kube's `RetryPolicy::server_retry()`, which retries 429, 503
//! and 504 up to 15 times on an exponential back-off from 5 ms doubling to
//! 1,000 s, and takes the server's `Retry-After` only when it is longer. Under
//! a priority level that keeps refusing, the back-off outgrows every
//! deadline: requests wait far longer than the server asked, and some run
//! into their request deadline. The server's number is the one to follow: APF raises it (1 s up to 32 s) while
//! it keeps dropping requests, and lowers it again once they fit.
//!
//! The deadline of a request (`client/timeout.rs`) covers its retries; how
//! many requests are sent at once while the server refuses is
//! `client/window.rs`'s job.
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use tower::BoxError;
use tower::retry::Policy;

/// client-go's `maxRetries` for a request the server asked to retry later.
pub const MAX_RETRIES: u32 = 10;

/// The [`tower::retry::Policy`] described in the module doc. Each request
/// gets its own copy (tower clones the policy per call), so the count is
/// per request.
#[derive(Clone, Debug)]
pub struct RetryAfterPolicy {
    retries_left: u32,
}

impl Default for RetryAfterPolicy {
    fn default() -> Self {
        Self {
            retries_left: MAX_RETRIES,
        }
    }
}

/// How long the server asked us to wait before sending `response` again,
/// if it is a response client-go would retry (see the module doc).
pub fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    let status = response.status();
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let seconds: u64 = response
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for RetryAfterPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _request: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        let wait = retry_after(result.as_ref().ok()?)?;
        self.retries_left = self.retries_left.checked_sub(1)?;
        Some(tokio::time::sleep(wait))
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        // Only a body held in memory can be sent twice (all of ours are);
        // a streamed one is not retried.
        let body = request.body().try_clone()?;
        let mut copy = Request::new(body);
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, retry_after: Option<&str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(value) = retry_after {
            builder = builder.header("Retry-After", value);
        }
        builder.body(()).expect("a valid response")
    }

    #[test]
    fn a_429_or_5xx_with_retry_after_waits_exactly_that_long() {
        assert_eq!(
            retry_after(&response(429, Some("1"))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            retry_after(&response(429, Some("32"))),
            Some(Duration::from_secs(32))
        );
        assert_eq!(
            retry_after(&response(500, Some("2"))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(retry_after(&response(503, Some("0"))), Some(Duration::ZERO));
    }

    #[test]
    fn nothing_else_is_retried() {
        // No header: the caller decides (client-go does not retry either).
        assert_eq!(retry_after(&response(429, None)), None);
        assert_eq!(retry_after(&response(503, None)), None);
        // A header that is not whole seconds (an HTTP date, garbage).
        assert_eq!(
            retry_after(&response(429, Some("Wed, 21 Oct 2026 07:28:00 GMT"))),
            None
        );
        // Not a status to retry, whatever the header says.
        assert_eq!(retry_after(&response(409, Some("1"))), None);
        assert_eq!(retry_after(&response(200, Some("1"))), None);
    }

    fn request() -> Request<Body> {
        Request::post("/api/v1/namespaces/a/pods")
            .header("content-type", "application/json")
            .body(Body::from(b"{}".to_vec()))
            .expect("a valid request")
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_is_retried_at_most_ten_times_after_the_servers_wait() {
        let mut policy = RetryAfterPolicy::default();
        let mut req = request();
        let mut sleeps = 0;
        loop {
            let mut result: Result<Response<()>, BoxError> = Ok(response(429, Some("3")));
            let Some(sleep) = policy.retry(&mut req, &mut result) else {
                break;
            };
            let before = tokio::time::Instant::now();
            sleep.await;
            assert_eq!(before.elapsed(), Duration::from_secs(3));
            sleeps += 1;
        }
        assert_eq!(sleeps, MAX_RETRIES);
    }

    #[test]
    fn a_transport_error_is_not_retried_here() {
        let mut policy = RetryAfterPolicy::default();
        let mut result: Result<Response<()>, BoxError> = Err("connection reset".into());
        assert!(policy.retry(&mut request(), &mut result).is_none());
    }

    #[test]
    fn the_retried_request_is_the_same_request() {
        let mut policy = RetryAfterPolicy::default();
        let original = request();
        let copy =
            <RetryAfterPolicy as Policy<Request<Body>, Response<()>, BoxError>>::clone_request(
                &mut policy,
                &original,
            )
            .expect("an in-memory body can be sent again");
        assert_eq!(copy.method(), original.method());
        assert_eq!(copy.uri(), original.uri());
        assert_eq!(copy.headers(), original.headers());
    }
}
