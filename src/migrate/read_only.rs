//! A client layer that lets only reads out: `migrate --check` promises to
//! change nothing, and this makes the promise hold whatever the code above
//! it asks for. Every method but GET is refused before it leaves the
//! process (HEAD and OPTIONS too: the check never needs them, and "GET
//! only" is the rule that is easy to state and to audit).
//!
//! Same shape as the write fence (`runtime::client::fence`), without its
//! exceptions: no Lease renewals, no TokenReviews — nothing.
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tower::{Layer, Service};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request that is not a GET, refused.
#[derive(Debug, thiserror::Error)]
#[error("refused {method} {path}: `migrate --check` sends only GET requests")]
pub struct NotARead {
    pub method: http::Method,
    pub path: String,
}

/// Puts the GET-only rule in front of a client.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOnlyLayer;

impl<S> Layer<S> for ReadOnlyLayer {
    type Service = ReadOnly<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ReadOnly { inner }
    }
}

/// The service [`ReadOnlyLayer`] makes.
#[derive(Clone, Debug)]
pub struct ReadOnly<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for ReadOnly<S>
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
        if req.method() != http::Method::GET {
            let refused = NotARead {
                method: req.method().clone(),
                path: req.uri().path().to_owned(),
            };
            return Box::pin(async move { Err(Box::new(refused) as BoxError) });
        }
        let response = self.inner.call(req);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tower::ServiceExt;

    use super::*;

    /// Sends one request through the layer to a server that records what
    /// reached it; returns whether it was answered.
    async fn send(method: http::Method, reached: &Arc<Mutex<Vec<String>>>) -> bool {
        let seen = reached.clone();
        let server = tower::service_fn(move |req: http::Request<()>| {
            seen.lock().unwrap().push(req.method().to_string());
            futures::future::ready(Ok::<_, std::convert::Infallible>("answered"))
        });
        let req = http::Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/a/pods/p")
            .body(())
            .unwrap();
        ReadOnlyLayer.layer(server).oneshot(req).await.is_ok()
    }

    #[tokio::test]
    async fn only_get_requests_reach_the_api_server() {
        let reached = Arc::new(Mutex::new(Vec::new()));
        assert!(send(http::Method::GET, &reached).await);
        for method in [
            http::Method::POST,
            http::Method::PUT,
            http::Method::PATCH,
            http::Method::DELETE,
            http::Method::HEAD,
            http::Method::OPTIONS,
        ] {
            assert!(!send(method.clone(), &reached).await, "{method} passed");
        }
        assert_eq!(*reached.lock().unwrap(), ["GET"]);
    }

    #[tokio::test]
    async fn a_refused_write_names_the_request_and_the_rule() {
        let server = tower::service_fn(|_req: http::Request<()>| {
            futures::future::ready(Ok::<_, std::convert::Infallible>(()))
        });
        let req = http::Request::builder()
            .method(http::Method::PATCH)
            .uri("/apis/kubeflow.org/v1/namespaces/a/tfjobs/j/status")
            .body(())
            .unwrap();
        let error = ReadOnlyLayer.layer(server).oneshot(req).await.unwrap_err();
        assert_eq!(
            error.to_string(),
            "refused PATCH /apis/kubeflow.org/v1/namespaces/a/tfjobs/j/status: \
             `migrate --check` sends only GET requests"
        );
    }

    #[tokio::test]
    async fn a_kube_client_behind_the_layer_lists_but_cannot_delete_or_patch() {
        use k8s_openapi::api::core::v1::Pod;
        use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};

        let reached = Arc::new(Mutex::new(Vec::new()));
        let seen = reached.clone();
        let server = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            seen.lock()
                .unwrap()
                .push(format!("{} {}", req.method(), req.uri().path()));
            let list = r#"{"apiVersion":"v1","kind":"PodList","metadata":{},"items":[]}"#;
            futures::future::ready(Ok::<_, std::convert::Infallible>(http::Response::new(
                kube::client::Body::from(list.as_bytes().to_vec()),
            )))
        });
        let client = kube::Client::new(ReadOnlyLayer.layer(server), "default");
        let pods: Api<Pod> = Api::namespaced(client, "a");
        assert!(pods.list(&ListParams::default()).await.is_ok());
        assert!(pods.delete("p", &DeleteParams::default()).await.is_err());
        let patch = Patch::Merge(serde_json::json!({"metadata": {"labels": {"x": "y"}}}));
        assert!(
            pods.patch("p", &PatchParams::default(), &patch)
                .await
                .is_err()
        );
        assert_eq!(*reached.lock().unwrap(), ["GET /api/v1/namespaces/a/pods"]);
    }
}
