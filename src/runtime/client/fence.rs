//! A write fence for a leader: the client refuses every write unless the
//! process renewed its leader Lease within the renew deadline.
//!
//! client-go and controller-runtime have no such fence: they stop leader-only
//! work when the election loop notices the Lease is lost, and a reconcile in
//! flight finishes its writes. A leader that was frozen (SIGSTOP, a VM pause,
//! a long GC) wakes up with its timers overdue and its workers mid-reconcile;
//! whichever task the runtime polls first wins, and the fault suite saw two
//! writes from such an old leader land after its successor's first write.
//! With the fence, the check happens at the write itself, on the monotonic
//! clock, which keeps counting while a process is frozen — so a woken leader
//! cannot write, whatever order its tasks run in.
//!
//! The check sits last in the client's stack, right above the connection
//! (`connect.rs`), under the retries and the window on requests in flight:
//! an attempt is checked when it is sent, not when it was asked for. In
//! front of them, a write parked in a `Retry-After` (up to 32 s) or queued
//! for room went out after the Lease had lapsed, with no check: exactly
//! what a leader woken from SIGSTOP has in flight.
//!
//! What counts as a write: any method but GET, HEAD and OPTIONS. Requests to
//! `coordination.k8s.io` (the Lease itself) pass: renewing is how a leader
//! stays one. So do TokenReviews and SubjectAccessReviews
//! (`authentication.k8s.io`, `authorization.k8s.io`): POSTs that store
//! nothing, which every replica, leader or not, sends to guard its `/metrics`
//! (the token filter the caller plugs into the manager's server). The elector grants the fence on every successful acquire or
//! renew ([`WriteFence::grant_until`]) and revokes it when it steps down.
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{Layer, Service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A write refused because this process is not (or no longer surely) the leader.
#[derive(Debug, thiserror::Error)]
#[error(
    "refused to write: this process has not renewed its leader lease within the renew deadline"
)]
pub struct NotLeader;

/// Until when this process may write. Cheap to clone; clones share one state.
#[derive(Clone, Debug, Default)]
pub struct WriteFence {
    until: Arc<Mutex<Option<Instant>>>,
    /// Without leader election every write may go out.
    open: bool,
}

impl WriteFence {
    /// A fence that refuses writes until granted.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fence that never refuses (a process without leader election).
    pub fn open() -> Self {
        Self {
            open: true,
            ..Self::default()
        }
    }

    /// Allows writes until `deadline` (the last successful renew's start plus
    /// the renew deadline). Never moves the deadline back.
    pub fn grant_until(&self, deadline: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if until.is_none_or(|u| u < deadline) {
            *until = Some(deadline);
        }
    }

    /// Whether this fence never refuses ([`Self::open`]).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Refuses writes from now on (stepped down or lost the Lease).
    pub fn revoke(&self) {
        *self.until.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Whether a write may go out now.
    pub fn allows_writes(&self) -> bool {
        self.open
            || self
                .until
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|u| Instant::now() < u)
    }
}

/// Whether the fence applies to this request (a write, not to a Lease).
fn fenced(method: &http::Method, uri: &http::Uri) -> bool {
    let read = matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    let unfenced = [
        "/apis/coordination.k8s.io/",
        "/apis/authentication.k8s.io/",
        "/apis/authorization.k8s.io/",
    ];
    !read && !unfenced.iter().any(|prefix| uri.path().starts_with(prefix))
}

/// Puts a [`WriteFence`] in front of the client.
#[derive(Clone, Debug)]
pub struct WriteFenceLayer {
    fence: WriteFence,
}

impl WriteFenceLayer {
    pub fn new(fence: WriteFence) -> Self {
        Self { fence }
    }
}

impl<S> Layer<S> for WriteFenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fenced {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// The service [`WriteFenceLayer`] makes.
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    fence: WriteFence,
}

impl<S, B> Service<http::Request<B>> for Fenced<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if fenced(req.method(), req.uri()) && !self.fence.allows_writes() {
            return Box::pin(async { Err(Box::new(NotLeader) as BoxError) });
        }
        let response = self.inner.call(req);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::ServiceExt;

    fn server() -> impl Service<
        http::Request<()>,
        Response = &'static str,
        Error = std::convert::Infallible,
        Future = futures::future::Ready<Result<&'static str, std::convert::Infallible>>,
    > + Clone {
        tower::service_fn(|_req: http::Request<()>| futures::future::ready(Ok("sent")))
    }

    async fn send(fence: &WriteFence, method: http::Method, path: &str) -> bool {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap();
        WriteFenceLayer::new(fence.clone())
            .layer(server())
            .oneshot(req)
            .await
            .is_ok()
    }

    const POD: &str = "/api/v1/namespaces/a/pods";
    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/a/leases/l";

    #[tokio::test(start_paused = true)]
    async fn writes_pass_only_until_the_granted_deadline_and_reads_always() {
        let fence = WriteFence::new();
        assert!(
            !send(&fence, http::Method::POST, POD).await,
            "never granted"
        );
        assert!(send(&fence, http::Method::GET, POD).await);
        fence.grant_until(Instant::now() + Duration::from_secs(10));
        assert!(send(&fence, http::Method::POST, POD).await);
        assert!(send(&fence, http::Method::DELETE, POD).await);
        // Frozen past the renew deadline: the monotonic clock moved on.
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!send(&fence, http::Method::PATCH, POD).await);
        assert!(send(&fence, http::Method::GET, POD).await);
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_fence_never_refuses() {
        assert!(send(&WriteFence::open(), http::Method::POST, POD).await);
    }

    #[tokio::test(start_paused = true)]
    async fn the_lease_itself_may_always_be_written_and_revoking_stops_writes_at_once() {
        let fence = WriteFence::new();
        assert!(send(&fence, http::Method::PUT, LEASE).await);
        fence.grant_until(Instant::now() + Duration::from_secs(10));
        fence.revoke();
        assert!(!send(&fence, http::Method::POST, POD).await);
    }

    #[tokio::test(start_paused = true)]
    async fn token_and_access_reviews_pass_without_the_lease_as_they_store_nothing() {
        let fence = WriteFence::new();
        for review in [
            "/apis/authentication.k8s.io/v1/tokenreviews",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        ] {
            assert!(send(&fence, http::Method::POST, review).await, "{review}");
        }
        assert!(!send(&fence, http::Method::POST, POD).await);
    }
}
