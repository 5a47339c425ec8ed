//! Invalid TFJob manifests, one per validation rule of the CRD (schema
//! bounds, enums, types, unknown fields, CEL rules, immutability): each must
//! be refused by `kubectl apply` with a message naming the field path, and the
//! test asserts that path. A valid control manifest must be accepted, so a
//! broken base cannot make every case "refused" for the wrong reason.
//!
//! Cases marked `gap` were accepted when the suite was written (issue #20
//! lists them); they fail here until the CRD refuses them.
use serde_json::{Value, json};

use crate::cluster::{client, test_namespace};
use crate::harness::{kubectl_stdin, report};
use crate::operator::ensure_crd;

struct Case {
    what: &'static str,
    /// The field path the error must name (`a.b[K].c` and `a.b.K.c` are the same).
    path: &'static str,
    /// Accepted by the CRD when the suite was written (issue #20).
    gap: bool,
    edit: fn(&mut Value),
}

fn base(name: &str) -> Value {
    json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": { "name": name },
        "spec": {
            "runPolicy": {},
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "template": { "spec": { "containers": [
                        { "name": "tensorflow", "image": "tensorflow/tensorflow:2.16.1" }
                    ] } }
                }
            }
        }
    })
}

fn worker(v: &mut Value) -> &mut Value {
    &mut v["spec"]["tfReplicaSpecs"]["Worker"]
}
fn container(v: &mut Value) -> &mut Value {
    &mut worker(v)["template"]["spec"]["containers"][0]
}
fn run_policy(v: &mut Value) -> &mut Value {
    &mut v["spec"]["runPolicy"]
}
fn with_chief(v: &mut Value) {
    let chief = worker(v).clone();
    v["spec"]["tfReplicaSpecs"]["Chief"] = chief;
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            what: "negative replicas",
            path: "spec.tfReplicaSpecs.Worker.replicas",
            gap: false,
            edit: |v| worker(v)["replicas"] = json!(-1),
        },
        Case {
            what: "replicas not a number",
            path: "spec.tfReplicaSpecs.Worker.replicas",
            gap: false,
            edit: |v| worker(v)["replicas"] = json!("two"),
        },
        Case {
            what: "unknown restartPolicy",
            path: "spec.tfReplicaSpecs.Worker.restartPolicy",
            gap: false,
            edit: |v| worker(v)["restartPolicy"] = json!("Sometimes"),
        },
        Case {
            what: "unknown replica type",
            path: "spec.tfReplicaSpecs",
            gap: false,
            edit: |v| {
                let w = worker(v).clone();
                v["spec"]["tfReplicaSpecs"]["Launcher"] = w;
            },
        },
        Case {
            what: "Chief and Master together",
            path: "spec.tfReplicaSpecs",
            gap: false,
            edit: |v| {
                with_chief(v);
                let w = worker(v).clone();
                v["spec"]["tfReplicaSpecs"]["Master"] = w;
            },
        },
        Case {
            what: "no tfReplicaSpecs",
            path: "spec.tfReplicaSpecs",
            gap: false,
            edit: |v| {
                v["spec"]
                    .as_object_mut()
                    .map(|s| s.remove("tfReplicaSpecs"));
            },
        },
        Case {
            what: "empty tfReplicaSpecs",
            path: "spec.tfReplicaSpecs",
            gap: false,
            edit: |v| v["spec"]["tfReplicaSpecs"] = json!({}),
        },
        Case {
            what: "six replica types",
            path: "spec.tfReplicaSpecs",
            gap: false,
            edit: |v| {
                let w = worker(v).clone();
                for k in ["Chief", "PS", "Evaluator", "worker", "ps"] {
                    v["spec"]["tfReplicaSpecs"][k] = w.clone();
                }
            },
        },
        Case {
            what: "tfReplicaSpecs a list",
            path: "spec.tfReplicaSpecs",
            gap: false,
            edit: |v| v["spec"]["tfReplicaSpecs"] = json!([1]),
        },
        Case {
            what: "no tensorflow container",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers",
            gap: false,
            edit: |v| container(v)["name"] = json!("main"),
        },
        Case {
            what: "container without image",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers",
            gap: false,
            edit: |v| {
                container(v).as_object_mut().map(|c| c.remove("image"));
            },
        },
        Case {
            what: "container with empty image",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers",
            gap: false,
            edit: |v| container(v)["image"] = json!(""),
        },
        Case {
            what: "no containers",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers",
            gap: false,
            edit: |v| worker(v)["template"]["spec"]["containers"] = json!([]),
        },
        Case {
            what: "17 containers",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers",
            gap: false,
            edit: |v| {
                let mut list: Vec<Value> = (0..16)
                    .map(|i| json!({"name": format!("side-{i}"), "image": "busybox"}))
                    .collect();
                list.push(json!({"name": "tensorflow", "image": "tf"}));
                worker(v)["template"]["spec"]["containers"] = Value::Array(list);
            },
        },
        Case {
            what: "container without name",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers[0].name",
            gap: false,
            edit: |v| {
                container(v).as_object_mut().map(|c| c.remove("name"));
                let tf = json!({"name": "tensorflow", "image": "tf"});
                if let Some(list) = worker(v)["template"]["spec"]["containers"].as_array_mut() {
                    list.push(tf);
                }
            },
        },
        Case {
            what: "container name over 63 characters",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers[0].name",
            gap: false,
            edit: |v| {
                container(v)["name"] = json!("c".repeat(64));
                let tf = json!({"name": "tensorflow", "image": "tf"});
                if let Some(list) = worker(v)["template"]["spec"]["containers"].as_array_mut() {
                    list.push(tf);
                }
            },
        },
        Case {
            what: "image over 512 characters",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image",
            gap: false,
            edit: |v| container(v)["image"] = json!("i".repeat(513)),
        },
        Case {
            what: "unknown field in spec",
            path: "spec.foo",
            gap: false,
            edit: |v| v["spec"]["foo"] = json!(1),
        },
        Case {
            what: "misspelt replica field",
            path: "spec.tfReplicaSpecs.Worker.replica",
            gap: false,
            edit: |v| worker(v)["replica"] = json!(2),
        },
        Case {
            what: "unknown cleanPodPolicy",
            path: "spec.runPolicy.cleanPodPolicy",
            gap: false,
            edit: |v| run_policy(v)["cleanPodPolicy"] = json!("Some"),
        },
        Case {
            what: "negative backoffLimit",
            path: "spec.runPolicy.backoffLimit",
            gap: false,
            edit: |v| run_policy(v)["backoffLimit"] = json!(-1),
        },
        Case {
            what: "backoffLimit not a number",
            path: "spec.runPolicy.backoffLimit",
            gap: false,
            edit: |v| run_policy(v)["backoffLimit"] = json!("x"),
        },
        Case {
            what: "negative activeDeadlineSeconds",
            path: "spec.runPolicy.activeDeadlineSeconds",
            gap: false,
            edit: |v| run_policy(v)["activeDeadlineSeconds"] = json!(-5),
        },
        Case {
            what: "activeDeadlineSeconds 0",
            path: "spec.runPolicy.activeDeadlineSeconds",
            gap: true,
            edit: |v| run_policy(v)["activeDeadlineSeconds"] = json!(0),
        },
        Case {
            what: "negative ttlSecondsAfterFinished",
            path: "spec.runPolicy.ttlSecondsAfterFinished",
            gap: false,
            edit: |v| run_policy(v)["ttlSecondsAfterFinished"] = json!(-1),
        },
        Case {
            what: "suspend not a boolean",
            path: "spec.runPolicy.suspend",
            gap: false,
            edit: |v| run_policy(v)["suspend"] = json!("yes"),
        },
        Case {
            what: "unknown managedBy",
            path: "spec.runPolicy.managedBy",
            gap: false,
            edit: |v| run_policy(v)["managedBy"] = json!("example.com/other"),
        },
        Case {
            what: "managedBy over 63 characters",
            path: "spec.runPolicy.managedBy",
            gap: false,
            edit: |v| run_policy(v)["managedBy"] = json!("m".repeat(64)),
        },
        Case {
            what: "unknown spec.managedBy",
            path: "spec.managedBy",
            gap: false,
            edit: |v| v["spec"]["managedBy"] = json!("example.com/other"),
        },
        Case {
            what: "spec.managedBy disagreeing with runPolicy.managedBy",
            path: "spec.managedBy",
            gap: false,
            edit: |v| {
                v["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
                run_policy(v)["managedBy"] = json!("kubeflow.org/training-operator");
            },
        },
        Case {
            what: "scheduleTimeoutSeconds not a number",
            path: "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
            gap: false,
            edit: |v| run_policy(v)["schedulingPolicy"] = json!({"scheduleTimeoutSeconds": "x"}),
        },
        Case {
            what: "negative minAvailable",
            path: "spec.runPolicy.schedulingPolicy.minAvailable",
            gap: true,
            edit: |v| run_policy(v)["schedulingPolicy"] = json!({"minAvailable": -1}),
        },
        Case {
            what: "unknown successPolicy",
            path: "spec.successPolicy",
            gap: false,
            edit: |v| v["spec"]["successPolicy"] = json!("Some"),
        },
        Case {
            what: "enableDynamicWorker not a boolean",
            path: "spec.enableDynamicWorker",
            gap: false,
            edit: |v| v["spec"]["enableDynamicWorker"] = json!("yes"),
        },
        Case {
            what: "Chief with 2 replicas",
            path: "spec.tfReplicaSpecs.Chief.replicas",
            gap: true,
            edit: |v| {
                with_chief(v);
                v["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = json!(2);
            },
        },
        Case {
            what: "Master with 2 replicas",
            path: "spec.tfReplicaSpecs.Master.replicas",
            gap: true,
            edit: |v| {
                let w = worker(v).clone();
                v["spec"]["tfReplicaSpecs"]["Master"] = w;
                v["spec"]["tfReplicaSpecs"]["Master"]["replicas"] = json!(2);
            },
        },
        Case {
            what: "tfjob-port out of range",
            path: "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports[0].containerPort",
            gap: true,
            edit: |v| {
                container(v)["ports"] = json!([{"name": "tfjob-port", "containerPort": 70000}]);
            },
        },
        Case {
            what: "name not a DNS-1035 label",
            path: "metadata.name",
            gap: false,
            edit: |v| v["metadata"]["name"] = json!("job.with.dots"),
        },
        Case {
            what: "name starting with a digit",
            path: "metadata.name",
            gap: false,
            edit: |v| v["metadata"]["name"] = json!("1job"),
        },
        Case {
            what: "name too long for its child names",
            path: "metadata.name",
            gap: false,
            edit: |v| v["metadata"]["name"] = json!(format!("j{}", "o".repeat(55))),
        },
    ]
}

/// `a[b].c` -> `a.b.c`, so both spellings of a path compare equal.
fn normalize(text: &str) -> String {
    text.replace('[', ".").replace(']', "")
}

fn apply(manifest: &Value, ns: &str, dry_run: bool) -> Result<String, String> {
    let mut args = vec!["apply", "-n", ns, "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    kubectl_stdin(&args, &manifest.to_string())
}

#[tokio::test]
#[ignore = "needs the local control plane: make test-faults"]
async fn every_invalid_manifest_is_refused_naming_its_field_path() {
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "fault-manifests").await;
    if let Err(e) = apply(&base("valid"), &ns, true) {
        panic!("the valid control manifest was refused: {e}");
    }
    let cases = cases();
    let mut accepted = Vec::new();
    let mut unnamed = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let mut manifest = base(&format!("bad-{i:02}"));
        (case.edit)(&mut manifest);
        let outcome = apply(&manifest, &ns, true);
        let first_line = match &outcome {
            Ok(_) => "ACCEPTED".to_string(),
            Err(e) => e
                .lines()
                .collect::<Vec<_>>()
                .join(" | ")
                .chars()
                .take(400)
                .collect(),
        };
        eprintln!("manifest {i:02} {}: {first_line}", case.what);
        match outcome {
            Ok(_) => accepted.push(format!(
                "{}{}",
                case.what,
                if case.gap { " [known gap]" } else { "" }
            )),
            Err(stderr) if !normalize(&stderr).contains(&normalize(case.path)) => unnamed.push(
                format!("{} (want {}): {}", case.what, case.path, stderr.trim()),
            ),
            Err(_) => {}
        }
    }
    // Immutability needs a stored object: create, then change managedBy.
    let mut before = base("immutable");
    before["spec"]["runPolicy"]["managedBy"] = json!("kubeflow.org/training-operator");
    apply(&before, &ns, false).unwrap_or_else(|e| panic!("create for the immutability case: {e}"));
    let mut after = before.clone();
    after["spec"]["runPolicy"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
    match apply(&after, &ns, true) {
        Ok(_) => accepted.push("managedBy changed".into()),
        Err(e) if !e.contains("spec.runPolicy.managedBy") => {
            unnamed.push(format!("managedBy changed: {e}"))
        }
        Err(_) => {}
    }
    // spec.managedBy (MultiKueue's place for it) cannot be added later either.
    let plain = base("immutable-top");
    apply(&plain, &ns, false).unwrap_or_else(|e| panic!("create for the immutability case: {e}"));
    let mut dispatched = plain.clone();
    dispatched["spec"]["managedBy"] = json!("kueue.x-k8s.io/multikueue");
    match apply(&dispatched, &ns, true) {
        Ok(_) => accepted.push("spec.managedBy added after creation".into()),
        Err(e) if !e.contains("spec.managedBy") => {
            unnamed.push(format!("spec.managedBy added after creation: {e}"))
        }
        Err(_) => {}
    }
    let total = cases.len() + 2;
    report(
        "invalid-manifests",
        &[
            ("cases", total.to_string()),
            (
                "refused_naming_path",
                (total - accepted.len() - unnamed.len()).to_string(),
            ),
            ("accepted", accepted.len().to_string()),
            ("refused_without_path", unnamed.len().to_string()),
        ],
    );
    assert!(total >= 30);
    assert!(
        accepted.is_empty() && unnamed.is_empty(),
        "accepted: {accepted:#?}\nrefused without naming the field: {unnamed:#?}"
    );
}
