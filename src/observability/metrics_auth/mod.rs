//! Who may read `/metrics`: the bearer token is authenticated with a
//! TokenReview and the request authorized with a SubjectAccessReview for the
//! non-resource URL (`/metrics`, verb `get`), both answered by the API server.
//!
//! controller-runtime's counterpart is `pkg/metrics/filters`
//! (`WithAuthenticationAndAuthorization`), which kube-rbac-proxy did before
//! it as a sidecar. Same answers as there:
//!
//! - no `Authorization: Bearer` header, or a token the TokenReview does not
//!   authenticate: 401;
//! - the SubjectAccessReview does not allow it: 403, naming the user;
//! - either review fails to reach the API server, or takes longer than
//!   [`REVIEW_TIMEOUT`] (controller-runtime's `TokenAccessReviewTimeout`):
//!   500 (not cached, so the next scrape asks again);
//! - allowed: the metrics.
//!
//! The reviewer needs `create` on `tokenreviews` (authentication.k8s.io) and
//! `subjectaccessreviews` (authorization.k8s.io); a scraper needs a role with
//! `nonResourceURLs: ["/metrics"], verbs: ["get"]` (the chart's
//! `metrics-reader` ClusterRole). Verdicts are cached per token:
//! [`verdict_cache`] says for how long and why.
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

pub mod verdict_cache;

/// How long one review may take before the request is answered 500 (a
/// scraper's own timeout is typically 10 s too).
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

use verdict_cache::{Key, Verdict, VerdictCache};

/// Who a TokenReview said the token belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// A review the API server could not answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("TokenReview failed")]
    TokenReview(#[source] kube::Error),
    #[error("SubjectAccessReview failed")]
    SubjectAccessReview(#[source] kube::Error),
    #[error("the API server did not answer the review within {0:?}")]
    Timeout(Duration),
}

/// The two questions the filter asks. [`ApiServerReviews`] asks the API
/// server; the seam exists so the cache and the status codes can be unit
/// tested (the e2e tests ask a real API server).
pub trait Reviews: Send + Sync + 'static {
    /// `Ok(None)` when the token is not authenticated.
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Identity>, ReviewError>>;
    /// Whether `who` may `verb` the non-resource URL `path`.
    fn authorize<'a>(
        &'a self,
        who: &'a Identity,
        verb: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<bool, ReviewError>>;
}

/// Reviews answered by the API server.
pub struct ApiServerReviews {
    client: kube::Client,
}

impl ApiServerReviews {
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl Reviews for ApiServerReviews {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> BoxFuture<'a, Result<Option<Identity>, ReviewError>> {
        Box::pin(async move {
            let review = TokenReview {
                spec: TokenReviewSpec {
                    // No audiences: the API server's own, as controller-runtime.
                    audiences: None,
                    token: Some(token.to_owned()),
                },
                ..TokenReview::default()
            };
            let answer = Api::<TokenReview>::all(self.client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::TokenReview)?;
            let Some(status) = answer.status else {
                return Ok(None);
            };
            if status.authenticated != Some(true) {
                return Ok(None);
            }
            let user = status.user.unwrap_or_default();
            Ok(Some(Identity {
                username: user.username.unwrap_or_default(),
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }))
        })
    }

    fn authorize<'a>(
        &'a self,
        who: &'a Identity,
        verb: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<bool, ReviewError>> {
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(who.username.clone()),
                    uid: who.uid.clone(),
                    groups: Some(who.groups.clone()),
                    extra: Some(who.extra.clone()),
                    non_resource_attributes: Some(NonResourceAttributes {
                        path: Some(path.to_owned()),
                        verb: Some(verb.to_owned()),
                    }),
                    resource_attributes: None,
                },
                ..SubjectAccessReview::default()
            };
            let answer = Api::<SubjectAccessReview>::all(self.client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(ReviewError::SubjectAccessReview)?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}

/// The filter in front of `/metrics`. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct MetricsAuth {
    reviews: Arc<dyn Reviews>,
    cache: Arc<Mutex<VerdictCache>>,
}

impl MetricsAuth {
    /// Reviews by the API server `client` talks to.
    pub fn new(client: kube::Client) -> Self {
        Self::with_reviews(ApiServerReviews::new(client))
    }

    pub fn with_reviews(reviews: impl Reviews) -> Self {
        Self {
            reviews: Arc::new(reviews),
            cache: Arc::default(),
        }
    }

    /// `router` behind this filter: every route answers 401/403 itself
    /// unless the token is allowed (what the manager's server is handed as
    /// a secure `/metrics`'s filter).
    pub fn protect(&self, router: axum::Router) -> axum::Router {
        router.route_layer(axum::middleware::from_fn_with_state(self.clone(), require))
    }

    /// The verdict for `token` on `verb path`, from the cache or the reviews.
    pub async fn verdict(
        &self,
        token: &str,
        verb: &str,
        path: &str,
    ) -> Result<Verdict, ReviewError> {
        let key = Key::new(token, verb, path);
        if let Some(verdict) = self.cache().get(&key) {
            return Ok(verdict);
        }
        let timed_out = |_| ReviewError::Timeout(REVIEW_TIMEOUT);
        let authenticated = tokio::time::timeout(REVIEW_TIMEOUT, self.reviews.authenticate(token))
            .await
            .map_err(timed_out)??;
        let verdict = match authenticated {
            None => Verdict::Unauthenticated,
            Some(who) => {
                let review = self.reviews.authorize(&who, verb, path);
                match tokio::time::timeout(REVIEW_TIMEOUT, review)
                    .await
                    .map_err(timed_out)??
                {
                    true => Verdict::Allowed,
                    false => Verdict::Denied { user: who.username },
                }
            }
        };
        self.cache().insert(key, verdict.clone());
        Ok(verdict)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, VerdictCache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme is
/// case-insensitive, as the API server reads it).
fn bearer_token(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// axum middleware: answers 401/403/500 itself, or runs the handler.
pub async fn require(State(auth): State<MetricsAuth>, request: Request, next: Next) -> Response {
    let Some(token) = bearer_token(&request) else {
        return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    };
    let verb = request.method().as_str().to_ascii_lowercase();
    let path = request.uri().path().to_owned();
    match auth.verdict(token, &verb, &path).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => {
            tracing::debug!(%path, "metrics request with a token the TokenReview did not authenticate");
            (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response()
        }
        Ok(Verdict::Denied { user }) => {
            tracing::debug!(%user, %verb, %path, "metrics request denied by the SubjectAccessReview");
            let msg = format!("Authorization denied for user {user}\n");
            (StatusCode::FORBIDDEN, msg).into_response()
        }
        Err(error) => {
            tracing::error!(error = %error, source = ?std::error::Error::source(&error), "failed to review a metrics request");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tokens "reader" (allowed), "stranger" (denied), anything else
    /// unauthenticated; "broken" fails as an unreachable API server would.
    #[derive(Clone, Default)]
    struct Counted {
        authentications: Arc<AtomicUsize>,
        authorizations: Arc<AtomicUsize>,
    }

    impl Reviews for Counted {
        fn authenticate<'a>(
            &'a self,
            token: &'a str,
        ) -> BoxFuture<'a, Result<Option<Identity>, ReviewError>> {
            self.authentications.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match token {
                    "reader" | "stranger" => Ok(Some(Identity {
                        username: format!("system:serviceaccount:ns:{token}"),
                        ..Identity::default()
                    })),
                    "hangs" => std::future::pending().await,
                    "broken" => Err(ReviewError::TokenReview(kube::Error::Service(
                        "connection refused".into(),
                    ))),
                    _ => Ok(None),
                }
            })
        }

        fn authorize<'a>(
            &'a self,
            who: &'a Identity,
            verb: &'a str,
            path: &'a str,
        ) -> BoxFuture<'a, Result<bool, ReviewError>> {
            self.authorizations.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                Ok(who.username.ends_with(":reader") && verb == "get" && path == "/metrics")
            })
        }
    }

    fn calls(c: &Counted) -> (usize, usize) {
        (
            c.authentications.load(Ordering::SeqCst),
            c.authorizations.load(Ordering::SeqCst),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn each_verdict_is_reviewed_once_until_its_ttl_ends() {
        let reviews = Counted::default();
        let auth = MetricsAuth::with_reviews(reviews.clone());
        for _ in 0..3 {
            assert_eq!(
                auth.verdict("reader", "get", "/metrics").await.unwrap(),
                Verdict::Allowed
            );
        }
        assert_eq!(
            calls(&reviews),
            (1, 1),
            "three scrapes, one pair of reviews"
        );
        let denied = auth.verdict("stranger", "get", "/metrics").await.unwrap();
        assert_eq!(
            denied,
            Verdict::Denied {
                user: "system:serviceaccount:ns:stranger".into()
            }
        );
        assert_eq!(
            auth.verdict("junk", "get", "/metrics").await.unwrap(),
            Verdict::Unauthenticated
        );
        assert_eq!(
            auth.verdict("junk", "get", "/metrics").await.unwrap(),
            Verdict::Unauthenticated
        );
        assert_eq!(
            calls(&reviews),
            (3, 2),
            "a bad token is not authorized at all"
        );

        tokio::time::advance(verdict_cache::ALLOW_TTL).await;
        auth.verdict("reader", "get", "/metrics").await.unwrap();
        assert_eq!(calls(&reviews), (4, 3), "reviewed again after its TTL");
    }

    #[tokio::test]
    async fn a_failed_review_is_an_error_and_is_asked_again_next_time() {
        let reviews = Counted::default();
        let auth = MetricsAuth::with_reviews(reviews.clone());
        assert!(auth.verdict("broken", "get", "/metrics").await.is_err());
        assert!(auth.verdict("broken", "get", "/metrics").await.is_err());
        assert_eq!(calls(&reviews), (2, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_the_api_server_does_not_answer_times_out_uncached() {
        let reviews = Counted::default();
        let auth = MetricsAuth::with_reviews(reviews.clone());
        let err = auth.verdict("hangs", "get", "/metrics").await.unwrap_err();
        assert!(
            matches!(err, ReviewError::Timeout(t) if t == REVIEW_TIMEOUT),
            "{err}"
        );
        assert!(auth.verdict("hangs", "get", "/metrics").await.is_err());
        assert_eq!(calls(&reviews), (2, 0), "asked again: not cached");
    }

    fn request(authorization: Option<&str>) -> Request {
        let mut builder = axum::http::Request::builder().uri("/metrics");
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn only_a_non_empty_bearer_token_is_taken() {
        assert_eq!(bearer_token(&request(Some("Bearer abc"))), Some("abc"));
        assert_eq!(bearer_token(&request(Some("bearer  abc "))), Some("abc"));
        assert_eq!(bearer_token(&request(Some("Basic abc"))), None);
        assert_eq!(bearer_token(&request(Some("Bearer "))), None);
        assert_eq!(bearer_token(&request(Some("Bearer"))), None);
        assert_eq!(bearer_token(&request(None)), None);
    }
}
