//! Creates whose answer is not read back into an object.
//!
//! client-go's counterpart is `rest.Request.Do(ctx).Error()`: the write is
//! sent and its status checked, and the body the server echoes back (the
//! created object) is never decoded. kube's `Api::create` always decodes it
//! into `K`. A controller that creates a child learns of it from its
//! informer, and an event recorder needs nothing back, so decoding a Pod
//! with its whole spec (its `TF_CONFIG` lists every replica) only to drop it
//! is CPU spent per child: 2 % of the operator's CPU in the 200-job profile
//! in `docs/benchmarks.md` ("CPU and the Succeeded path").
use std::fmt::Debug;

use kube::api::{Api, PostParams};
use kube::core::Request;
use kube::{Client, Resource};
use serde::Serialize;

/// POSTs `obj` to `api`'s collection and returns once the server accepted
/// it; an error answer is `kube::Error::Api` with the server's `Status`
/// (409 AlreadyExists, 429, …) exactly as `Api::create` returns it.
/// `obj` is the body: the object itself, or a wrapper that serializes as
/// one (a Pod with a field our API types lack, `src/tfjob/integrations/gang/mod.rs`).
pub async fn create<K, B>(
    client: &Client,
    api: &Api<K>,
    pp: &PostParams,
    obj: &B,
) -> Result<(), kube::Error>
where
    K: Resource,
    B: Serialize + Debug,
{
    let body = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let mut request = Request::new(api.resource_url())
        .create(pp, body)
        .map_err(kube::Error::BuildRequest)?;
    // The verb kube's own request span is named after, as `Api::create` sets it.
    request.extensions_mut().insert("create");
    // `request_text` maps an error answer to its `Status`; the body of a
    // success is read off the connection and dropped undecoded.
    client.request_text(request).await.map(drop)
}
