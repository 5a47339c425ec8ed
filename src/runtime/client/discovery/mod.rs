//! API discovery: which versions of an API group serve a resource
//! (client-go's `discovery.ServerResourcesForGroupVersion`), and asking it
//! until the server answers.
//!
//! Features that ride on an optional API (gang scheduling on
//! `scheduling.k8s.io` PodGroups, Kueue's Workloads) decide from the
//! answer whether to use it. An error (a 500, a timeout, a 403, a version
//! listed but answering 503) is not an answer: taking it for "not served"
//! would turn the feature off on a flaky control plane.
//! [`versions_serving_answered`] asks again with backoff until the server
//! says yes or no. What a caller does with the answer, and whether it asks
//! again later (an API installed after the start), is the caller's.
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use kube::Client;

/// The first wait after a failed discovery; each failure doubles it.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two attempts (client-go's discovery clients
/// and the garbage collector's re-discovery stay within 30 s too).
pub const MAX_RETRY: Duration = Duration::from_secs(30);

/// The versions of `group` (preferred first, as the server lists them) in
/// which it serves `plural`. Empty when the group or the resource is not
/// served; an error only when the server could not be asked.
pub async fn versions_serving(
    client: &Client,
    group: &str,
    plural: &str,
) -> Result<Vec<String>, kube::Error> {
    let request = http::Request::get(format!("/apis/{group}"))
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let api_group: APIGroup = match client.request(request).await {
        Ok(g) => g,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut served = Vec::new();
    for v in &api_group.versions {
        match client.list_api_group_resources(&v.group_version).await {
            Ok(list) if list.resources.iter().any(|r| r.name == plural) => {
                served.push(v.version.clone());
            }
            Ok(_) => {}
            // A version listed but not found (yet) does not serve the
            // resource; a 503 (an aggregated API that is down, a server
            // starting) is no answer at all, like any other error.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(served)
}

/// A discovery attempt that got no answer, for the caller's log and
/// `/readyz` line.
#[derive(Debug)]
pub struct Unanswered<'a> {
    /// 1 for the first attempt.
    pub attempt: u32,
    pub error: &'a kube::Error,
    /// How long until the next attempt.
    pub retry_in: Duration,
}

/// [`versions_serving`], asked until the server answers: after each error
/// `unanswered` is told, and the next attempt waits [`FIRST_RETRY`],
/// doubling up to [`MAX_RETRY`]. Never returns without an answer (cancel
/// the future to give up).
pub async fn versions_serving_answered(
    client: &Client,
    group: &str,
    plural: &str,
    mut unanswered: impl FnMut(Unanswered<'_>),
) -> Vec<String> {
    let mut retry_in = FIRST_RETRY;
    let mut attempt = 1_u32;
    loop {
        match versions_serving(client, group, plural).await {
            Ok(versions) => return versions,
            Err(error) => unanswered(Unanswered {
                attempt,
                error: &error,
                retry_in,
            }),
        }
        tokio::time::sleep(retry_in).await;
        retry_in = (retry_in * 2).min(MAX_RETRY);
        attempt = attempt.saturating_add(1);
    }
}

#[cfg(test)]
pub(crate) mod tests;
