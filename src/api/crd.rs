//! The CustomResourceDefinition: derived from the Rust types, then given the
//! validation the types cannot carry (CEL rules and size bounds), so that a
//! bad manifest is refused by `kubectl apply` with a message naming the field,
//! with no admission webhook (and so no certificates) to run.
//!
//! Kubeflow validates with a webhook (`pkg/webhooks/tensorflow`); we express
//! the same rules, plus the name-length and `replicas ≥ 0` checks it lacks, in
//! the schema. CEL rules over a map or list need bounds on it or the API
//! server refuses the CRD for exceeding its cost budget — hence `maxProperties`
//! on `tfReplicaSpecs`, `maxItems` on containers and `maxLength` on strings.
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::defaults::MAX_CHILD_NAME_LEN;
use super::types::TFJob;

/// Maximum containers per replica template (bounds CEL cost).
pub const MAX_CONTAINERS: u64 = 16;

/// The TFJob CRD with every validation rule in place.
pub fn crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    let mut value = serde_json::to_value(TFJob::crd())?;
    add_validation(&mut value);
    serde_json::from_value(value)
}

/// The CRD as the YAML that is committed under `crds/`.
pub fn crd_yaml() -> Result<String, CrdError> {
    Ok(serde_yaml::to_string(&crd()?)?)
}

/// Failed to render the CRD.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("failed to convert the CRD to JSON")]
    Json(#[from] serde_json::Error),
    #[error("failed to render the CRD as YAML")]
    Yaml(#[from] serde_yaml::Error),
}

fn rule(rule: &str, message: &str) -> Value {
    json!({ "rule": rule, "message": message })
}

fn push_rules(schema: &mut Value, rules: Vec<Value>) {
    let list = schema.as_object_mut().map(|o| {
        o.entry("x-kubernetes-validations")
            .or_insert_with(|| json!([]))
    });
    if let Some(Value::Array(list)) = list {
        list.extend(rules);
    }
}

fn set(schema: &mut Value, key: &str, v: Value) {
    if let Some(o) = schema.as_object_mut() {
        o.insert(key.to_owned(), v);
    }
}

/// Walks `properties` by name; `*` steps into `additionalProperties`, `[]` into `items`.
fn at<'a>(schema: &'a mut Value, path: &[&str]) -> &'a mut Value {
    let mut cur = schema;
    for step in path {
        cur = match *step {
            "*" => &mut cur["additionalProperties"],
            "[]" => &mut cur["items"],
            name => &mut cur["properties"][name],
        };
    }
    cur
}

fn add_validation(crd: &mut Value) {
    let root = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let max = MAX_CHILD_NAME_LEN;
    push_rules(
        root,
        vec![
            rule(
                "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
                "metadata.name: must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter), because it names the job's Pods and Services",
            ),
            json!({
                "rule": format!(
                    "!has(self.spec) || self.spec.tfReplicaSpecs.all(k, size(self.metadata.name) + size(k) + 2 + size(string(has(self.spec.tfReplicaSpecs[k].replicas) && self.spec.tfReplicaSpecs[k].replicas > 1 ? self.spec.tfReplicaSpecs[k].replicas - 1 : 0)) <= {max})"
                ),
                "messageExpression": format!(
                    "'metadata.name: ' + self.metadata.name + ' is too long: every child name {{name}}-{{replica type}}-{{index}} must fit in {max} characters; shorten the TFJob name'"
                ),
            }),
        ],
    );
    let spec = at(root, &["spec"]);
    let specs = at(spec, &["tfReplicaSpecs"]);
    set(specs, "minProperties", json!(1));
    set(specs, "maxProperties", json!(5));
    push_rules(
        specs,
        vec![
            rule(
                "self.all(k, k.lowerAscii() in ['chief', 'master', 'worker', 'ps', 'evaluator'])",
                "spec.tfReplicaSpecs: keys must be Chief, Master, Worker, PS or Evaluator",
            ),
            rule(
                "self.filter(k, k.lowerAscii() in ['chief', 'master']).size() <= 1",
                "spec.tfReplicaSpecs: at most one Chief or Master (Master is the legacy name of Chief); keep one",
            ),
            // The message names the offending key's path: a rule on the
            // map cannot set a per-key fieldPath.
            json!({
                "rule": "self.all(k, !(k.lowerAscii() in ['chief', 'master']) || !has(self[k].replicas) || self[k].replicas <= 1)",
                "messageExpression": "'spec.tfReplicaSpecs.' + self.filter(k, k.lowerAscii() in ['chief', 'master'] && has(self[k].replicas) && self[k].replicas > 1)[0] + '.replicas: a Chief or Master has at most 1 replica (replicas: 0 or 1); use Workers for more'",
            }),
        ],
    );
    let replica = at(specs, &["*"]);
    set(at(replica, &["replicas"]), "minimum", json!(0));
    let template = at(replica, &["template"]);
    set(template, "required", json!(["spec"]));
    let containers = at(template, &["spec", "containers"]);
    set(containers, "minItems", json!(1));
    set(containers, "maxItems", json!(MAX_CONTAINERS));
    set(at(containers, &["[]", "name"]), "maxLength", json!(63));
    set(at(containers, &["[]", "image"]), "maxLength", json!(512));
    let port = at(containers, &["[]", "ports", "[]", "containerPort"]);
    set(port, "minimum", json!(1));
    set(port, "maximum", json!(65535));
    push_rules(
        containers,
        vec![
            rule(
                "self.exists(c, c.name == 'tensorflow')",
                "template.spec.containers: one container must be named 'tensorflow' (it receives TF_CONFIG and its exit code decides restarts)",
            ),
            rule(
                "self.all(c, has(c.image) && size(c.image) > 0)",
                "template.spec.containers: every container needs a non-empty image",
            ),
        ],
    );
    let run_policy = at(spec, &["runPolicy"]);
    push_rules(
        at(run_policy, &["managedBy"]),
        vec![
            rule(
                "self in ['kubeflow.org/training-operator', 'kueue.x-k8s.io/multikueue']",
                "spec.runPolicy.managedBy: must be kubeflow.org/training-operator or kueue.x-k8s.io/multikueue",
            ),
            rule("self == oldSelf", "spec.runPolicy.managedBy: is immutable"),
        ],
    );
    set(at(run_policy, &["managedBy"]), "maxLength", json!(63));
    push_rules(
        at(run_policy, &["schedulingPolicy", "queue"]),
        vec![rule(
            "self == oldSelf",
            "spec.runPolicy.schedulingPolicy.queue: is immutable",
        )],
    );
    for field in ["ttlSecondsAfterFinished", "backoffLimit"] {
        set(at(run_policy, &[field]), "minimum", json!(0));
    }
    // 0 would fail every job on its first reconcile (Kubernetes Jobs refuse it too).
    set(
        at(run_policy, &["activeDeadlineSeconds"]),
        "minimum",
        json!(1),
    );
    set(
        at(run_policy, &["schedulingPolicy", "minAvailable"]),
        "minimum",
        json!(0),
    );
    // `self == oldSelf` on managedBy itself cannot see it being set or
    // unset (the rule runs only when both sides have it), so presence is
    // compared one level up, where spec always exists on both sides.
    push_rules(
        spec,
        vec![rule(
            "(has(self.runPolicy) && has(self.runPolicy.managedBy)) == (has(oldSelf.runPolicy) && has(oldSelf.runPolicy.managedBy))",
            "spec.runPolicy.managedBy: is immutable: it cannot be set or removed after the TFJob is created",
        )],
    );
    add_top_level_managed_by(spec);
}

/// `spec.managedBy` (ours, not Kubeflow's: where MultiKueue's generic
/// adapter reads it) takes `runPolicy.managedBy`'s values and rules, and the
/// two may not disagree.
fn add_top_level_managed_by(spec: &mut Value) {
    let managed_by = at(spec, &["managedBy"]);
    push_rules(
        managed_by,
        vec![
            rule(
                "self in ['kubeflow.org/training-operator', 'kueue.x-k8s.io/multikueue']",
                "spec.managedBy: must be kubeflow.org/training-operator or kueue.x-k8s.io/multikueue",
            ),
            rule("self == oldSelf", "spec.managedBy: is immutable"),
        ],
    );
    set(managed_by, "maxLength", json!(63));
    push_rules(
        spec,
        vec![
            rule(
                "has(self.managedBy) == has(oldSelf.managedBy)",
                "spec.managedBy: is immutable: it cannot be set or removed after the TFJob is created",
            ),
            rule(
                "!has(self.managedBy) || !has(self.runPolicy) || !has(self.runPolicy.managedBy) || self.managedBy == self.runPolicy.managedBy",
                "spec.managedBy: must equal spec.runPolicy.managedBy when both are set (for MultiKueue, set only spec.managedBy)",
            ),
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        let crd = serde_json::to_value(crd().unwrap()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    #[test]
    fn crd_names_match_kubeflow() {
        let crd = crd().unwrap();
        assert_eq!(crd.metadata.name.as_deref(), Some("tfjobs.kubeflow.org"));
        assert_eq!(crd.spec.names.kind, "TFJob");
        assert_eq!(crd.spec.names.plural, "tfjobs");
        assert_eq!(crd.spec.scope, "Namespaced");
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1");
        assert!(v.subresources.as_ref().unwrap().status.is_some());
    }

    #[test]
    fn replica_map_is_bounded_so_cel_fits_the_cost_budget() {
        let s = schema();
        let specs = &s["properties"]["spec"]["properties"]["tfReplicaSpecs"];
        assert_eq!(specs["maxProperties"], 5);
        assert_eq!(
            specs["x-kubernetes-validations"].as_array().unwrap().len(),
            3
        );
        let containers = &specs["additionalProperties"]["properties"]["template"]["properties"]["spec"]
            ["properties"]["containers"];
        assert_eq!(containers["maxItems"], 16);
        assert_eq!(containers["items"]["properties"]["image"]["maxLength"], 512);
    }

    #[test]
    fn default_columns_are_kubeflows_and_wide_ones_name_the_type_they_read() {
        let crd = crd().unwrap();
        let columns = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        let default: Vec<&str> = columns
            .iter()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            default,
            ["State", "Age"],
            "scripts parse Kubeflow's columns"
        );
        for c in columns
            .iter()
            .filter(|c| c.json_path.contains("replicaStatuses."))
        {
            let rtype = c.json_path.split('.').nth(3).unwrap_or_default();
            assert!(
                c.name.starts_with(rtype),
                "{} reads {} only: its name must say so",
                c.name,
                c.json_path
            );
        }
    }

    #[test]
    fn every_replica_type_has_a_wide_column_of_its_running_replicas() {
        let crd = crd().unwrap();
        let columns = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        for rtype in crate::api::constants::ReplicaType::ALL {
            let path = format!(".status.replicaStatuses.{}.active", rtype.as_str());
            assert!(
                columns
                    .iter()
                    .any(|c| c.json_path == path && c.priority == Some(1)),
                "a Chief-only, Master, PS/Worker or Evaluator job shows its {} count with -o wide: no column reads {path}",
                rtype.as_str()
            );
        }
    }

    #[test]
    fn restart_policy_is_an_enum() {
        let s = schema();
        let rp = &s["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]["properties"]
            ["restartPolicy"];
        let values: Vec<&str> = rp["enum"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(values, ["Always", "OnFailure", "Never", "ExitCode"]);
    }

    #[test]
    fn every_added_rule_landed_on_an_existing_schema_node() {
        // `at` creates nodes on a typo'd path; a node without "type" is one.
        let s = schema();
        let rp = &s["properties"]["spec"]["properties"]["runPolicy"]["properties"];
        for f in [
            "managedBy",
            "ttlSecondsAfterFinished",
            "activeDeadlineSeconds",
            "backoffLimit",
        ] {
            assert!(rp[f].get("type").is_some(), "{f} has no type: {}", rp[f]);
        }
        assert!(
            rp["schedulingPolicy"]["properties"]["queue"]
                .get("type")
                .is_some()
        );
        assert!(
            rp["schedulingPolicy"]["properties"]["minAvailable"]
                .get("type")
                .is_some()
        );
        let containers = &s["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
            ["properties"]["template"]["properties"]["spec"]["properties"]["containers"];
        let port =
            &containers["items"]["properties"]["ports"]["items"]["properties"]["containerPort"];
        assert!(port.get("type").is_some(), "{port}");
        assert_eq!(port["maximum"].as_f64(), Some(65535.0));
    }

    #[test]
    fn spec_managed_by_has_run_policys_values_and_may_not_contradict_it() {
        let s = schema();
        let spec = &s["properties"]["spec"];
        let top = &spec["properties"]["managedBy"];
        assert_eq!(top["type"], "string", "{top}");
        assert_eq!(top["maxLength"], 63);
        let rules = |v: &Value| -> Vec<String> {
            v["x-kubernetes-validations"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r["rule"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let rp = &spec["properties"]["runPolicy"]["properties"]["managedBy"];
        assert_eq!(rules(top), rules(rp), "the same values, immutable");
        let on_spec = rules(spec);
        assert!(
            on_spec
                .iter()
                .any(|r| r == "has(self.managedBy) == has(oldSelf.managedBy)")
        );
        assert!(
            on_spec
                .iter()
                .any(|r| r.contains("self.managedBy == self.runPolicy.managedBy"))
        );
    }
}
