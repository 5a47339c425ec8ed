//! The chart rendered by `helm template`, no cluster: what each value turns
//! into (the disruption budget, the spread, the image reference, the
//! NetworkPolicy, the `helm test` Pod), and that Helm 3 and Helm 4 render the
//! same objects. Whether the API server accepts the renders, and how they
//! behave installed, is `super`'s.
//!
//! Mirrors: helm-unittest's template assertions, on parsed YAML.

use std::path::PathBuf;
use std::process::Command;

use serde::Deserialize;

use crate::support::CHART;
use crate::support::{bin_dir, helm, kube_version, run_ok};

/// `helm template` of the chart (release `render` in `tfjob-system`, for the
/// pinned Kubernetes version) with `args`, one YAML value per object. Test
/// hooks are included, as `helm template` renders them.
fn render(args: &[&str]) -> Vec<serde_yaml::Value> {
    render_with(helm(), args)
}

/// [`render`] with another helm binary.
fn render_with(mut helm: Command, args: &[&str]) -> Vec<serde_yaml::Value> {
    let out = run_ok(
        helm.args([
            "template",
            "render",
            CHART.as_str(),
            "--namespace",
            "tfjob-system",
        ])
        .args(["--kube-version", kube_version()])
        .args(args),
    );
    serde_yaml::Deserializer::from_str(&out)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("valid YAML from helm"))
        .filter(|value| !value.is_null())
        .collect()
}

/// The rendered objects of one kind.
fn of_kind<'a>(objects: &'a [serde_yaml::Value], kind: &str) -> Vec<&'a serde_yaml::Value> {
    objects
        .iter()
        .filter(|o| o["kind"].as_str() == Some(kind))
        .collect()
}

/// The one rendered object of a kind.
fn one<'a>(objects: &'a [serde_yaml::Value], kind: &str) -> &'a serde_yaml::Value {
    let found = of_kind(objects, kind);
    assert_eq!(found.len(), 1, "one {kind} rendered, found {}", found.len());
    found[0]
}

/// YAML for a literal in an assertion.
fn yaml(text: &str) -> serde_yaml::Value {
    serde_yaml::from_str(text).expect("valid YAML in the test")
}

#[test]
#[ignore = "needs the harness-built helm: make e2e"]
fn the_chart_renders_a_disruption_budget_and_a_spread_over_nodes_by_default() {
    let objects = render(&[]);
    let selector = one(&objects, "Deployment")["spec"]["selector"].clone();
    let budget = one(&objects, "PodDisruptionBudget");
    assert_eq!(budget["spec"]["minAvailable"], yaml("1"));
    assert!(budget["spec"].get("maxUnavailable").is_none());
    assert_eq!(
        budget["spec"]["selector"], selector,
        "the budget covers the Deployment's Pods"
    );
    let pod = &one(&objects, "Deployment")["spec"]["template"];
    let spread = &pod["spec"]["topologySpreadConstraints"];
    assert_eq!(
        spread,
        &yaml(
            "- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  matchLabelKeys: [pod-template-hash]
  labelSelector:
    matchLabels:
      app.kubernetes.io/name: tfjob-operator
      app.kubernetes.io/instance: render"
        ),
        "a soft spread by node, counting this release's Pods"
    );
    assert_eq!(
        spread[0]["labelSelector"], selector,
        "the spread's selector is the Deployment's"
    );

    // One replica: a budget would block every drain, so there is none.
    let single = render(&[
        "--set",
        "replicas=1",
        "--set",
        "leaderElection.enabled=false",
    ]);
    assert!(of_kind(&single, "PodDisruptionBudget").is_empty());
    let off = render(&["--set", "podDisruptionBudget.enabled=false"]);
    assert!(of_kind(&off, "PodDisruptionBudget").is_empty());
    // maxUnavailable replaces minAvailable (a budget may have only one).
    let max = render(&["--set", "podDisruptionBudget.maxUnavailable=50%"]);
    let spec = &one(&max, "PodDisruptionBudget")["spec"];
    assert_eq!(spec["maxUnavailable"], yaml("50%"));
    assert!(spec.get("minAvailable").is_none());

    // A constraint of the user's keeps its own selector; [] turns spreading off.
    let own = render(&[
        "--set-json",
        r#"topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule","labelSelector":{"matchLabels":{"team":"ml"}}}]"#,
    ]);
    let spread = &one(&own, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"];
    assert_eq!(spread[0]["labelSelector"], yaml("matchLabels: {team: ml}"));
    assert_eq!(spread[0]["whenUnsatisfiable"], yaml("DoNotSchedule"));
    let none = render(&["--set-json", "topologySpreadConstraints=[]"]);
    let pod = &one(&none, "Deployment")["spec"]["template"]["spec"];
    assert!(pod.get("topologySpreadConstraints").is_none());
}

#[test]
#[ignore = "needs the harness-built helm: make e2e"]
fn an_image_digest_wins_over_the_tag() {
    let image = |args: &[&str]| {
        let objects = render(args);
        let container = &one(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        container["image"].as_str().expect("an image").to_owned()
    };
    assert_eq!(
        image(&[]),
        "tfjob-operator:0.1.0",
        "the tag defaults to appVersion"
    );
    let digest = format!("sha256:{}", "ab".repeat(32));
    assert_eq!(
        image(&[
            "--set",
            "image.repository=registry.example.com/ml/tfjob-operator",
            "--set",
            "image.tag=0.2.0",
            "--set",
            &format!("image.digest={digest}"),
        ]),
        format!("registry.example.com/ml/tfjob-operator@{digest}")
    );
}

#[test]
#[ignore = "needs the harness-built helm: make e2e"]
fn the_network_policy_admits_only_the_named_peers_and_lets_out_only_api_server_traffic() {
    assert!(
        of_kind(&render(&[]), "NetworkPolicy").is_empty(),
        "off by default"
    );

    // On, nothing named: the metrics port admits the chart's test Pod alone,
    // the probe port no one; egress is the API server's ports, any address.
    let objects = render(&["--set", "networkPolicy.enabled=true"]);
    let policy = &one(&objects, "NetworkPolicy")["spec"];
    let deployment = one(&objects, "Deployment");
    assert_eq!(
        policy["podSelector"], deployment["spec"]["selector"],
        "the policy selects the operator's Pods"
    );
    assert_eq!(policy["policyTypes"], yaml("[Ingress, Egress]"));
    let test_pod = one(&objects, "Pod");
    assert_eq!(
        policy["ingress"],
        yaml(&format!(
            "- ports: [{{port: metrics, protocol: TCP}}]
  from:
  - podSelector:
      matchLabels:
        app.kubernetes.io/name: {}
        app.kubernetes.io/instance: render",
            test_pod["metadata"]["labels"]["app.kubernetes.io/name"]
                .as_str()
                .expect("the test Pod's name label")
        ))
    );
    assert_eq!(
        policy["egress"],
        yaml("- ports: [{port: 443, protocol: TCP}, {port: 6443, protocol: TCP}]")
    );

    // Without the test Pod and without peers, no ingress at all (an empty
    // rule list), never an empty `from`, which would admit everyone.
    let closed = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "test.enabled=false",
    ]);
    assert_eq!(one(&closed, "NetworkPolicy")["spec"]["ingress"], yaml("[]"));
    let probes_only = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "test.enabled=false",
        "--set-json",
        r#"networkPolicy.healthFrom=[{"ipBlock":{"cidr":"10.0.0.0/8"}}]"#,
    ]);
    assert_eq!(
        one(&probes_only, "NetworkPolicy")["spec"]["ingress"],
        yaml("- ports: [{port: health, protocol: TCP}]\n  from: [{ipBlock: {cidr: 10.0.0.0/8}}]"),
        "no rule for the metrics port when no one is named for it"
    );

    // Named peers are admitted to their port only; API server addresses
    // narrow the egress.
    let named = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "test.enabled=false",
        "--set-json",
        r#"networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
        "--set-json",
        r#"networkPolicy.healthFrom=[{"ipBlock":{"cidr":"10.0.0.0/8"}}]"#,
        "--set-json",
        r#"networkPolicy.apiServerCidrs=["10.0.0.10/32"]"#,
        "--set-json",
        "networkPolicy.apiServerPorts=[6443]",
    ]);
    let policy = &one(&named, "NetworkPolicy")["spec"];
    assert_eq!(
        policy["ingress"],
        yaml(
            "- ports: [{port: metrics, protocol: TCP}]
  from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
- ports: [{port: health, protocol: TCP}]
  from: [{ipBlock: {cidr: 10.0.0.0/8}}]"
        )
    );
    assert_eq!(
        policy["egress"],
        yaml(
            "- ports: [{port: 6443, protocol: TCP}]
  to: [{ipBlock: {cidr: 10.0.0.10/32}}]"
        )
    );
}

#[test]
#[ignore = "needs the harness-built helm: make e2e"]
fn the_helm_test_pod_asks_the_metrics_service_and_no_operator_selector_matches_it() {
    let objects = render(&[]);
    let pod = one(&objects, "Pod");
    assert_eq!(
        pod["metadata"]["annotations"]["helm.sh/hook"],
        yaml("test"),
        "a `helm test` hook"
    );
    assert_eq!(pod["spec"]["restartPolicy"], yaml("Never"));
    let script = pod["spec"]["containers"][0]["args"][0]
        .as_str()
        .expect("the test script");
    let service = one(&objects, "Service")["metadata"]["name"]
        .as_str()
        .expect("the metrics Service's name")
        .to_owned();
    assert!(
        script.contains(&format!("http://{service}.tfjob-system.svc:8080/metrics")),
        "the test asks the metrics Service:\n{script}"
    );
    assert!(script.contains("tfjob_operator_build_info"), "{script}");
    // Neither the Deployment (whose ReplicaSet would adopt it), the Service
    // (which would send scrapes to it) nor the budget selects the test Pod.
    let labels = pod["metadata"]["labels"]
        .as_mapping()
        .expect("the test Pod's labels");
    let selected_by = |selector: &serde_yaml::Value| {
        selector
            .as_mapping()
            .expect("matchLabels")
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    };
    let deployment = one(&objects, "Deployment");
    assert!(!selected_by(&deployment["spec"]["selector"]["matchLabels"]));
    assert!(!selected_by(&one(&objects, "Service")["spec"]["selector"]));
    assert!(!selected_by(
        &one(&objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    ));
    // No metrics Service, nothing to ask: no test Pod.
    let without = render(&["--set", "metrics.service.enabled=false"]);
    assert!(of_kind(&without, "Pod").is_empty());
    let off = render(&["--set", "test.enabled=false"]);
    assert!(of_kind(&off, "Pod").is_empty());
}

#[test]
#[ignore = "needs the harness-built helm and helm4: make e2e"]
fn helm_3_and_helm_4_render_the_same_objects_from_every_values_file() {
    let ci = std::path::Path::new(CHART.as_str()).join("ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ci)
        .expect("the chart's ci/ directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no ci/*-values.yaml files");
    let mut runs: Vec<Vec<String>> = vec![Vec::new()];
    runs.extend(
        files
            .iter()
            .map(|f| vec!["--values".to_owned(), f.display().to_string()]),
    );
    for args in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let helm3 = render(&args);
        let helm4 = render_with(Command::new(bin_dir().join("helm4")), &args);
        assert!(!helm3.is_empty());
        // Parsed, not compared as text: Helm 4 keeps blank lines Helm 3 trims.
        assert_eq!(helm3, helm4, "Helm 3 and Helm 4 disagree with {args:?}");
    }
}
