//! The bound every cached kind satisfies.
//!
//! client-go works on `runtime.Object`; here a kind is anything kube can
//! list, watch and decode, with no dynamic type information (all our kinds are
//! compiled in). One trait keeps the long bound list out of every signature.
use std::fmt::Debug;

use kube::Resource;
use serde::de::DeserializeOwned;

/// A Kubernetes kind the runtime can list, watch, cache and queue.
pub trait Object:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}

impl<K> Object for K where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}
