//! What a job may use beyond Kubernetes' core: Kueue's Workloads, gang
//! scheduling with PodGroups, and who manages the job (`managedBy`).

pub mod gang;
pub mod kueue;
pub mod managed_by;
pub mod optional_apis;
