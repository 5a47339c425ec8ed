//! A response body with a deadline and a size cap, for every response but a
//! watch's (whose frames are capped and idle-timed by the reflector).
//!
//! client-go gets the same from `http.Client.Timeout`, which covers reading
//! the body too (`rest.Config.Timeout`); it caps no size. Without this, a
//! server (or a proxy) that sends the headers and then stalls the body would
//! hang a reconcile or a LIST for ever, and one that sends an endless body
//! would grow our memory until the kernel kills us.
//!
//! [`MAX_RESPONSE_BYTES`] is 64 MiB, below the chart's 256 MiB memory limit
//! with room for the text, the decoded objects and the rest of the process
//! (the 1,000-job fault scenario's peak RSS is in `docs/reliability.md`).
//! What it allows:
//! a LIST page of 500 objects (the reflector's page size) averaging 128 KiB
//! each (a Pod is 5-20 KiB; etcd stores nothing over 1.5 MiB), or an
//! unpaginated LIST of some 5,000 Pods (the reflector's fallback after an
//! expired continue token, `reflector/relist.rs`; bigger, it fails and the
//! reflector relists page by page again).
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The most bytes a non-watch response body may have (see the module doc).
pub const MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// The body did not end before the request's deadline.
#[derive(Debug, thiserror::Error)]
#[error("failed to read the response body within {0:?}: request timed out")]
pub struct BodyTimedOut(pub Duration);

/// The body grew past its cap.
#[derive(Debug, thiserror::Error)]
#[error("response body larger than {0} bytes: refusing the rest")]
pub struct BodyTooLarge(pub u64);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `inner` ending by `deadline` (when given) and no longer than `max_bytes`.
pub struct BoundedBody<B> {
    inner: B,
    deadline: Option<(Pin<Box<Sleep>>, Duration)>,
    max_bytes: u64,
    read: u64,
    failed: bool,
}

impl<B> BoundedBody<B> {
    /// `budget` is what the whole request was given (for the error message);
    /// `deadline` when it runs out.
    pub fn new(inner: B, deadline: Option<(Instant, Duration)>, max_bytes: u64) -> Self {
        Self {
            inner,
            deadline: deadline.map(|(at, budget)| (Box::pin(tokio::time::sleep_until(at)), budget)),
            max_bytes,
            read: 0,
            failed: false,
        }
    }

    /// Passes `inner` through untouched (a watch).
    pub fn unbounded(inner: B) -> Self {
        Self::new(inner, None, u64::MAX)
    }
}

impl<B> Body for BoundedBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.read = this.read.saturating_add(data.remaining() as u64);
                    if this.read > this.max_bytes {
                        this.failed = true;
                        return Poll::Ready(Some(Err(Box::new(BodyTooLarge(this.max_bytes)))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other.map(|r| r.map_err(Into::into))),
            Poll::Pending => {
                if let Some((sleep, budget)) = this.deadline.as_mut()
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    this.failed = true;
                    return Poll::Ready(Some(Err(Box::new(BodyTimedOut(*budget)))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::StreamExt;
    use http_body_util::{BodyExt, StreamBody};

    type Chunks = StreamBody<
        futures::stream::BoxStream<'static, Result<Frame<Bytes>, std::convert::Infallible>>,
    >;

    /// A body sending `chunks` then stalling for ever.
    fn stalling(chunks: Vec<&'static [u8]>) -> Chunks {
        let sent = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok(Frame::data(Bytes::from_static(c)))),
        );
        StreamBody::new(sent.chain(futures::stream::pending()).boxed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_after_the_headers_fails_at_the_request_deadline() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(30);
        let body = BoundedBody::new(
            stalling(vec![b"{\"items\":[", b"{}"]),
            Some((deadline, Duration::from_secs(30))),
            MAX_RESPONSE_BYTES,
        );
        let err = body.collect().await.map(|_| ()).unwrap_err();
        assert!(err.downcast_ref::<BodyTimedOut>().is_some(), "{err}");
        assert_eq!(Instant::now(), deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_ends_in_time_is_passed_through_whole() {
        let chunks = futures::stream::iter([b"ab".as_slice(), b"cd"])
            .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(c))));
        let body = BoundedBody::new(
            StreamBody::new(chunks),
            Some((
                Instant::now() + Duration::from_secs(30),
                Duration::from_secs(30),
            )),
            4,
        );
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"abcd");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_past_the_cap_fails_instead_of_growing() {
        let body = BoundedBody::new(stalling(vec![b"abc", b"def"]), None, 5);
        let err = body.collect().await.map(|_| ()).unwrap_err();
        assert!(err.downcast_ref::<BodyTooLarge>().is_some(), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_unbounded_body_waits_as_long_as_its_server() {
        let mut body = BoundedBody::unbounded(stalling(vec![b"a"]));
        assert!(body.frame().await.is_some());
        let more = tokio::time::timeout(Duration::from_secs(3600), body.frame()).await;
        assert!(more.is_err(), "a watch's body has no deadline here");
    }
}
