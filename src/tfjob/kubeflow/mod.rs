//! Kubeflow's training-operator as the reference: its CRD (whose schema
//! prunes fields of ours), its condition and Event messages word for word,
//! objects its CRD stores that our types cannot decode, and a
//! training-operator still running beside this one.

pub mod messages;
#[cfg(test)]
mod module_cache;
pub mod rival;
pub mod schema;
#[cfg(test)]
mod tests;
pub mod undecodable;
