//! Which TFJob CRD is installed: ours, or Kubeflow's own (training-operator
//! v1.9's `kubeflow.org_tfjobs.yaml`, which teams moving from Kubeflow keep).
//!
//! It matters for status: the API server prunes every status field a CRD's
//! schema does not list, and Kubeflow's lists only `conditions`,
//! `replicaStatuses` (`active`, `failed`, `succeeded`, selectors),
//! `startTime`, `completionTime` and `lastReconcileTime`. Writing our extra
//! fields there would be silently dropped, so the stored status would never
//! equal the planned one and every reconcile would rewrite it. Under such a
//! schema the plan's status is [`StatusSchema::prune`]d first, exactly as the
//! server would, and what must survive lives in an annotation instead
//! ([`crate::tfjob::plan::bookkeeping`]).
//!
//! Detected once at startup from the CRD object (reading it needs `get` on
//! `customresourcedefinitions/tfjobs.kubeflow.org`); logged, and shown on
//! `/readyz`. When the CRD cannot be read the operator assumes Kubeflow's
//! schema: that is correct under both (only the extra display fields are
//! missing), where the opposite guess would rewrite status forever.
//!
//! The same read tells whether the CRD keeps `spec.managedBy`, where Kueue's
//! MultiKueue looks for it: Kubeflow's prunes it, and the log and `/readyz`
//! say that MultiKueue cannot dispatch TFJobs then ([`Detected::multikueue_note`]).
use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::{Api, Client};

use crate::api::types::TFJobStatus;

/// The TFJob CRD's name.
pub const CRD_NAME: &str = "tfjobs.kubeflow.org";

/// The status schema of the installed TFJob CRD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatusSchema {
    /// Ours: keeps `restarts`, `succeededIndexes` and `observedGeneration`.
    #[default]
    Ours,
    /// Kubeflow's (or any that lacks our fields): they are pruned.
    Kubeflow,
}

impl fmt::Display for StatusSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StatusSchema::Ours => "tfjob-operator's (status keeps restarts and succeededIndexes)",
            StatusSchema::Kubeflow => {
                "Kubeflow's (status fields it lacks are pruned; bookkeeping lives in an annotation)"
            }
        })
    }
}

impl StatusSchema {
    /// Reads the schema from the served version of a CRD object.
    pub fn of_crd(crd: &CustomResourceDefinition) -> Self {
        let status = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == "v1")
            .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
            .and_then(|root| root.properties.as_ref()?.get("status"));
        match status {
            Some(status) if keeps_our_fields(status) => StatusSchema::Ours,
            _ => StatusSchema::Kubeflow,
        }
    }

    /// Reads the installed CRD; on any error, assumes Kubeflow's schema
    /// (see the module docs) and says why.
    pub async fn detect(client: &Client) -> Detected {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        match crds.get(CRD_NAME).await {
            Ok(crd) => Detected {
                schema: Self::of_crd(&crd),
                unreadable: None,
                spec_managed_by: has_spec_managed_by(&crd),
            },
            Err(e) => Detected {
                schema: StatusSchema::Kubeflow,
                unreadable: Some(format!("could not read the CRD {CRD_NAME} ({e})")),
                spec_managed_by: false,
            },
        }
    }

    /// Drops what this schema would prune, so the planned status compares
    /// equal to the stored one when nothing real changed.
    pub fn prune(self, status: &mut TFJobStatus) {
        if self == StatusSchema::Ours {
            return;
        }
        status.observed_generation = None;
        for rs in status.replica_statuses.values_mut() {
            rs.restarts = 0;
            rs.succeeded_indexes = None;
        }
    }
}

/// What the startup detection found in the installed TFJob CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detected {
    pub schema: StatusSchema,
    /// Why the CRD could not be read (the schema is then assumed).
    pub unreadable: Option<String>,
    /// Whether the CRD keeps `spec.managedBy`, where Kueue's MultiKueue
    /// reads it (ours does; Kubeflow's prunes it: docs/kueue.md).
    pub spec_managed_by: bool,
}

impl Detected {
    /// A line for the log and `/readyz` when MultiKueue's generic adapter
    /// cannot dispatch TFJobs under this CRD; `None` when it can, or when
    /// the CRD could not be read (nothing is known then).
    pub fn multikueue_note(&self) -> Option<String> {
        (self.unreadable.is_none() && !self.spec_managed_by).then(|| {
            format!(
                "multikueue: the CRD {CRD_NAME} has no spec.managedBy (Kubeflow's): the API server \
                 prunes it, so Kueue's MultiKueue cannot dispatch TFJobs from this cluster; \
                 install tfjob-operator's CRD for that (docs/kueue.md)"
            )
        })
    }
}

/// Whether the served v1 schema lists `spec.managedBy`.
fn has_spec_managed_by(crd: &CustomResourceDefinition) -> bool {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == "v1")
        .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref())
        .and_then(|root| root.properties.as_ref()?.get("spec"))
        .is_some_and(|spec| {
            spec.x_kubernetes_preserve_unknown_fields == Some(true)
                || spec
                    .properties
                    .as_ref()
                    .is_some_and(|p| p.contains_key("managedBy"))
        })
}

fn keeps_our_fields(status: &JSONSchemaProps) -> bool {
    if status.x_kubernetes_preserve_unknown_fields == Some(true) {
        return true;
    }
    let props = status.properties.as_ref();
    let replica = props
        .and_then(|p| p.get("replicaStatuses"))
        .and_then(|r| r.additional_properties.as_ref())
        .and_then(|a| match a {
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Schema(s) => {
                s.properties.as_ref()
            }
            _ => None,
        });
    let has = |name: &str| replica.is_some_and(|r| r.contains_key(name));
    props.is_some_and(|p| p.contains_key("observedGeneration"))
        && has("restarts")
        && has("succeededIndexes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::ReplicaStatus;

    #[test]
    fn our_crd_is_recognised_as_ours() {
        let crd = crate::api::crd::crd().unwrap();
        assert_eq!(StatusSchema::of_crd(&crd), StatusSchema::Ours);
        assert!(has_spec_managed_by(&crd));
    }

    #[test]
    fn only_a_readable_crd_without_spec_managed_by_gets_the_multikueue_note() {
        let detected = |unreadable: Option<&str>, spec_managed_by| Detected {
            schema: StatusSchema::Kubeflow,
            unreadable: unreadable.map(str::to_owned),
            spec_managed_by,
        };
        let note = detected(None, false).multikueue_note().expect("a note");
        assert!(
            note.contains("spec.managedBy") && note.contains("docs/kueue.md"),
            "{note}"
        );
        assert_eq!(detected(None, true).multikueue_note(), None);
        assert_eq!(detected(Some("forbidden"), false).multikueue_note(), None);
    }

    #[test]
    fn kubeflows_own_crd_from_its_release_is_recognised_as_kubeflows() {
        let Some((version, dir)) = crate::tfjob::kubeflow::module_cache::module_or_skip() else {
            return;
        };
        let path = dir.join("manifests/base/crds/kubeflow.org_tfjobs.yaml");
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let crd: CustomResourceDefinition = serde_yaml::from_str(&text)
            .unwrap_or_else(|e| panic!("training-operator {version}'s TFJob CRD: {e}"));
        assert_eq!(crd.metadata.name.as_deref(), Some(CRD_NAME));
        assert_eq!(StatusSchema::of_crd(&crd), StatusSchema::Kubeflow);
        // Where MultiKueue's generic adapter reads managedBy: pruned there.
        assert!(!has_spec_managed_by(&crd));
    }

    #[test]
    fn a_crd_without_our_status_fields_is_kubeflows() {
        let mut crd = crate::api::crd::crd().unwrap();
        let status = crd.spec.versions[0]
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|r| r.properties.as_mut())
            .and_then(|p| p.get_mut("status"))
            .unwrap();
        status
            .properties
            .as_mut()
            .unwrap()
            .remove("observedGeneration");
        assert_eq!(StatusSchema::of_crd(&crd), StatusSchema::Kubeflow);
    }

    #[test]
    fn pruning_for_kubeflow_drops_exactly_our_fields() {
        let mut status = TFJobStatus {
            observed_generation: Some(3),
            ..TFJobStatus::default()
        };
        status.replica_statuses.insert(
            "Worker".into(),
            ReplicaStatus {
                active: 1,
                restarts: 2,
                succeeded_indexes: Some("0".into()),
                ..ReplicaStatus::default()
            },
        );
        let mut ours = status.clone();
        StatusSchema::Ours.prune(&mut ours);
        assert_eq!(ours, status);
        StatusSchema::Kubeflow.prune(&mut status);
        assert_eq!(status.observed_generation, None);
        assert_eq!(
            status.replica_statuses["Worker"],
            ReplicaStatus {
                active: 1,
                ..ReplicaStatus::default()
            }
        );
    }
}
