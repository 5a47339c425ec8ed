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

use crate::cluster::{bin_dir, helm, run_ok};
use crate::support::CHART;
use crate::support::kube_version;

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
        yaml(
            "- ports: [{port: 443, protocol: TCP}, {port: 6443, protocol: TCP}]
- ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
  to:
  - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}
    podSelector: {matchLabels: {k8s-app: kube-dns}}"
        ),
        "the API server's ports anywhere, DNS to the kube-dns Pods, no OTLP rule without tracing"
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
        "--set",
        "networkPolicy.dns.enabled=false",
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

/// The port `tracing.otlpEndpoint` names: the URL's own, else its scheme's
/// (worked out here, apart from the template's `urlParse`).
fn otlp_port(endpoint: &str) -> u64 {
    let (scheme, rest) = endpoint.split_once("://").expect("an http(s) URL");
    let authority = rest.split('/').next().unwrap_or_default();
    let explicit = authority
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    match explicit {
        Some(port) => port.parse().expect("a port number"),
        None if scheme == "https" => 443,
        None => 80,
    }
}

/// The egress rules the chart should render for `value` (a dotted path's
/// value: the values file's, else values.yaml's): the API server, DNS, the
/// OTLP collector's port when tracing is on, then extraEgress as written.
fn expected_egress(value: impl Fn(&str) -> serde_yaml::Value) -> serde_yaml::Value {
    let ports = |ports: Vec<(u64, &str)>| {
        serde_yaml::Value::Sequence(
            ports
                .into_iter()
                .map(|(port, protocol)| yaml(&format!("{{port: {port}, protocol: {protocol}}}")))
                .collect(),
        )
    };
    let rule = |ports: serde_yaml::Value, to: serde_yaml::Value| {
        let mut rule = serde_yaml::Mapping::new();
        rule.insert("ports".into(), ports);
        if to.as_sequence().is_some_and(|to| !to.is_empty()) {
            rule.insert("to".into(), to);
        }
        serde_yaml::Value::Mapping(rule)
    };
    let seq = |path: &str| value(path).as_sequence().cloned().unwrap_or_default();
    let api_ports = seq("networkPolicy.apiServerPorts")
        .iter()
        .map(|p| (p.as_u64().expect("a port"), "TCP"))
        .collect();
    let api_to = seq("networkPolicy.apiServerCidrs")
        .iter()
        .map(|cidr| {
            let mut block = serde_yaml::Mapping::new();
            block.insert("cidr".into(), cidr.clone());
            let mut peer = serde_yaml::Mapping::new();
            peer.insert("ipBlock".into(), serde_yaml::Value::Mapping(block));
            serde_yaml::Value::Mapping(peer)
        })
        .collect();
    let mut rules = vec![rule(ports(api_ports), serde_yaml::Value::Sequence(api_to))];
    if value("networkPolicy.dns.enabled").as_bool() != Some(false) {
        rules.push(rule(
            ports(vec![(53, "UDP"), (53, "TCP")]),
            value("networkPolicy.dns.to"),
        ));
    }
    if let Some(endpoint) = value("tracing.otlpEndpoint")
        .as_str()
        .filter(|e| !e.is_empty())
    {
        rules.push(rule(
            ports(vec![(otlp_port(endpoint), "TCP")]),
            value("networkPolicy.otlpTo"),
        ));
    }
    rules.extend(seq("networkPolicy.extraEgress"));
    serde_yaml::Value::Sequence(rules)
}

/// The value at a dotted path in a values document, if it is set there.
fn lookup(values: &serde_yaml::Value, path: &str) -> Option<serde_yaml::Value> {
    path.split('.')
        .try_fold(values, |at, key| at.get(key))
        .cloned()
}

#[test]
#[ignore = "needs the harness-built helm: make e2e"]
fn the_network_policy_lets_out_dns_the_collector_and_extra_egress_for_every_values_file() {
    let read = |path: &std::path::Path| -> serde_yaml::Value {
        let text = std::fs::read_to_string(path).expect("a values file");
        serde_yaml::from_str(&text).expect("valid YAML values")
    };
    let defaults = read(&std::path::Path::new(CHART.as_str()).join("values.yaml"));
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(std::path::Path::new(CHART.as_str()).join("ci"))
            .expect("the chart's ci/ directory")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
            .collect();
    files.sort();
    let mut runs: Vec<Option<PathBuf>> = vec![None];
    runs.extend(files.into_iter().map(Some));
    let mut traced = 0;
    for file in runs {
        let values = file.as_deref().map(read).unwrap_or_default();
        let value = |path: &str| {
            lookup(&values, path)
                .or_else(|| lookup(&defaults, path))
                .unwrap_or_default()
        };
        // Every file's policy, whether or not the file turns it on.
        let mut args = vec!["--set".to_owned(), "networkPolicy.enabled=true".to_owned()];
        if let Some(file) = &file {
            args.extend(["--values".to_owned(), file.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let objects = render(&args);
        let policy = &one(&objects, "NetworkPolicy")["spec"];
        let expected = expected_egress(value);
        assert_eq!(
            policy["egress"],
            expected,
            "the egress rendered with {file:?}:\n{}",
            serde_yaml::to_string(&policy["egress"]).unwrap_or_default()
        );
        if value("tracing.otlpEndpoint")
            .as_str()
            .is_some_and(|e| !e.is_empty())
        {
            traced += 1;
        }
    }
    assert!(
        traced >= 2,
        "the ci/ files trace to a collector in at least two of them"
    );

    // The port of each form of endpoint, as literals.
    for (endpoint, port) in [
        ("http://otel-collector.observability:4318", 4318),
        ("https://otel-collector.observability:4318/", 4318),
        ("http://collector.example", 80),
        ("https://collector.example/otlp", 443),
        ("http://[fd00::1]:4318", 4318),
        ("https://[fd00::1]", 443),
    ] {
        assert_eq!(otlp_port(endpoint), port, "{endpoint}");
        let objects = render(&[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            &format!("tracing.otlpEndpoint={endpoint}"),
        ]);
        let egress = &one(&objects, "NetworkPolicy")["spec"]["egress"];
        assert_eq!(
            egress[2],
            yaml(&format!("ports: [{{port: {port}, protocol: TCP}}]")),
            "{endpoint}: the collector's port, to any address"
        );
    }
    // DNS: [] opens port 53 to any address; off removes the rule.
    let open = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set-json",
        "networkPolicy.dns.to=[]",
    ]);
    assert_eq!(
        one(&open, "NetworkPolicy")["spec"]["egress"][1],
        yaml("ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]")
    );
    let off = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.dns.enabled=false",
    ]);
    let egress = &one(&off, "NetworkPolicy")["spec"]["egress"];
    assert_eq!(
        egress.as_sequence().map(Vec::len),
        Some(1),
        "the API server only"
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
#[ignore = "needs the harness-built helm and helm4: make chart-lint-helm4"]
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
        // Both without `cluster::helm`'s kubeconfig: `make chart-lint-helm4`
        // runs this with the tools alone (TFJOB_BIN_DIR), no cluster.
        let helm3 = render_with(Command::new(bin_dir().join("helm")), &args);
        let helm4 = render_with(Command::new(bin_dir().join("helm4")), &args);
        assert!(!helm3.is_empty());
        // Parsed, not compared as text: Helm 4 keeps blank lines Helm 3 trims.
        assert_eq!(helm3, helm4, "Helm 3 and Helm 4 disagree with {args:?}");
    }
}

#[test]
#[ignore = "needs the harness-built helm: make e2e"]
fn the_managed_by_policy_comes_only_with_another_installations_crd() {
    let policies = |args: &[&str]| {
        let objects = render(args);
        (
            of_kind(&objects, "ValidatingAdmissionPolicy").len(),
            of_kind(&objects, "ValidatingAdmissionPolicyBinding")
                .into_iter()
                .cloned()
                .collect::<Vec<_>>(),
        )
    };
    // Our CRD refuses the change itself (CEL): no policy.
    assert_eq!(policies(&[]).0, 0);
    let (n, bindings) = policies(&["--set", "crd.install=false"]);
    assert_eq!(
        (n, bindings.len()),
        (1, 1),
        "policy and binding with crd.install=false"
    );
    assert_eq!(bindings[0]["spec"]["validationActions"], yaml("[Deny]"));
    assert!(
        bindings[0]["spec"].get("matchResources").is_none(),
        "every namespace when all are watched"
    );
    let (_, bindings) = policies(&[
        "--set",
        "crd.install=false",
        "--set",
        "watchNamespace=team-a",
    ]);
    assert_eq!(
        bindings[0]["spec"]["matchResources"]["namespaceSelector"]["matchLabels"],
        yaml("kubernetes.io/metadata.name: team-a"),
        "only the watched namespace"
    );
    let (n, bindings) = policies(&[
        "--set",
        "crd.install=false",
        "--set",
        "crd.managedByPolicy=false",
    ]);
    assert_eq!(
        (n, bindings.len()),
        (0, 0),
        "crd.managedByPolicy=false leaves it out"
    );
}
