//! What a job may use beyond Kubernetes' core, each in a folder of its
//! own and plugged into the lifecycle's phases through their seams:
//! [`crate::tfjob::observe::integration::ObserveHooks`] (what it reads for
//! a pass), [`crate::tfjob::plan::integration::PlanHooks`] (how it gates
//! or adds to the plan) and [`crate::tfjob::apply::integration::WriteHooks`]
//! (what it writes). The lifecycle calls them without naming any.
//!
//! - [`gang`]: a PodGroup for the job's Pods (Kubernetes 1.37's gang scheduling);
//! - [`kueue`]: the job's Kueue Workload (admission, eviction, MultiKueue);
//! - [`managed_by`]: a `managedBy` changed after creation is not acted on;
//! - [`optional_apis`]: which of their APIs the server serves, found while
//!   the operator runs;
//! - [`rival`]: a job another TFJob controller writes is left to it.
//!
//! Adding one: a folder here, its hooks, and a line in [`register`].
use std::sync::Arc;

use crate::runtime::events::EventRecorder;
use crate::tfjob::apply::integration::WriteHooks;
use crate::tfjob::observe::integration::ObserveHooks;

pub mod gang;
pub mod kueue;
pub mod managed_by;
pub mod optional_apis;
pub mod rival;

/// The integrations, in the order their hooks run: the gang's PodGroup is
/// written before the Kueue Workload's writes, and both before any Pod.
pub struct Registered {
    pub observers: Vec<Arc<dyn ObserveHooks>>,
    pub writers: Vec<Arc<dyn WriteHooks>>,
}

/// Every integration, reading and writing through `client`, `recorder` and
/// the caches `apis` fills as their APIs are found; `rival` remembers the
/// jobs another controller writes (its `/readyz` line is the caller's).
pub fn register(
    client: &kube::Client,
    recorder: &EventRecorder,
    apis: &optional_apis::OptionalApis,
    rival: rival::RivalGuard,
) -> Registered {
    let gang = gang::write::GangWriter {
        client: client.clone(),
        recorder: recorder.clone(),
    };
    let kueue = Arc::new(kueue::observe::KueueWorkloads {
        client: client.clone(),
        recorder: recorder.clone(),
        apis: apis.clone(),
    });
    let gang_observer = gang::observe::GangObserver { apis: apis.clone() };
    Registered {
        observers: vec![
            Arc::new(rival),
            Arc::new(managed_by::ManagerMemory::default()),
            Arc::new(gang_observer),
            kueue.clone(),
        ],
        writers: vec![Arc::new(gang), kueue],
    }
}
