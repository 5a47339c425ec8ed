//! API discovery: which versions of an API group serve a resource, asked
//! once at startup (client-go's `discovery.ServerResourcesForGroupVersion`).
//!
//! Features that ride on an optional API (gang scheduling on
//! `scheduling.k8s.io` PodGroups, #30) decide at startup whether to use it,
//! and say what they found in the log and the `/readyz` detail. The answer
//! is not re-read: a server that gains the API later needs an operator
//! restart, as a controller-runtime manager's RESTMapper would.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use kube::Client;

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
            // A version listed but not answering (an aggregated API that is
            // down) does not serve the resource for us.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 503 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(served)
}
