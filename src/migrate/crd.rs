//! The installed TFJob CRD judged for this operator: what its schema keeps,
//! and what would stop us running under it. Pure.
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::tfjob::kubeflow::schema::StatusSchema;

use super::report::CrdFinding;
use super::snapshot::Seen;

pub fn judge(crd: &Seen<CustomResourceDefinition>) -> CrdFinding {
    let crd = match crd {
        Seen::Read(crd) => crd,
        Seen::NotVisible(why) => {
            return CrdFinding {
                schema: format!("not visible: {why}"),
                notes: vec![
                    "the operator then assumes Kubeflow's schema, which is safe".to_owned(),
                ],
                blockers: Vec::new(),
            };
        }
    };
    let mut f = CrdFinding::default();
    match StatusSchema::of_crd(crd) {
        StatusSchema::Ours => f.schema = "ours".to_owned(),
        StatusSchema::Kubeflow => {
            f.schema = "kubeflow".to_owned();
            f.notes.push(
                "status.replicaStatuses[*].restarts and succeededIndexes are pruned: the counts live in \
                 the annotation tfjob-operator.kubeflow.org/bookkeeping"
                    .to_owned(),
            );
        }
    }
    let v1 = crd.spec.versions.iter().find(|v| v.name == "v1");
    match v1 {
        None => f.blockers.push(
            "the CRD has no version v1 (kubeflow.org/v1 is what this operator reads)".to_owned(),
        ),
        Some(v) => {
            if !v.served {
                f.blockers.push("version v1 is not served".to_owned());
            }
            if v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_none()
            {
                f.blockers.push(
                    "version v1 has no status subresource: this operator writes status through it"
                        .to_owned(),
                );
            }
            let keeps_conditions = v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|root| root.properties.as_ref()?.get("status"))
                .is_some_and(|status| {
                    status.x_kubernetes_preserve_unknown_fields == Some(true)
                        || status
                            .properties
                            .as_ref()
                            .is_some_and(|p| p.contains_key("conditions"))
                });
            if !keeps_conditions {
                f.blockers.push(
                    "the v1 schema prunes status.conditions: no job could keep its phase"
                        .to_owned(),
                );
            }
        }
    }
    f
}
