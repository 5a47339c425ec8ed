//! Traces over https: Jaeger's OTLP/HTTP receiver serves a certificate
//! signed by a CA the test mints ([`crate::certs`]). An operator given that
//! CA (`--otlp-certificate`) delivers its traces there; one left with the
//! system's roots cannot verify the collector, says so in its log, and goes
//! on reconciling: tracing never stops the controller.
use kube::api::Api;
use tfjob_operator::api::types::TFJob;

use super::{Jaeger, SLOW, chart_deployment, create_job, wait_running};
use crate::certs;
use crate::cluster::{client, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn traces_reach_an_https_collector_with_its_ca_and_without_it_the_operator_logs_tls_and_keeps_reconciling()
 {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let mut ca = None;
    let mut jaeger = Jaeger::start_with(|dir| {
        let minted = certs::mint(&dir.join("certs"), &["localhost", "127.0.0.1"]);
        let pair = (minted.cert.clone(), minted.key.clone());
        ca = Some(minted.ca);
        Some(pair)
    });
    jaeger.wait_ready().await;
    let ca = ca.expect("the test CA").display().to_string();
    let endpoint = format!("https://127.0.0.1:{}", jaeger.otlp_http_port);
    // Spans go out 100 ms after they end, while the operators run: the
    // untrusting one must fail its exports and carry on.
    let env = [("OTEL_BSP_SCHEDULE_DELAY", "100")];
    let trusting_ns = test_namespace(&client, "traces-ca").await;
    let untrusting_ns = test_namespace(&client, "traces-noca").await;
    let mut trusting = Operator::start_with_env(
        &trusting_ns,
        &["--otlp-endpoint", &endpoint, "--otlp-certificate", &ca],
        &env,
    );
    let mut untrusting =
        Operator::start_with_env(&untrusting_ns, &["--otlp-endpoint", &endpoint], &env);
    trusting.wait_ready().await;
    untrusting.wait_ready().await;

    // With the CA: the job's reconciles arrive as traces.
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &trusting_ns);
    create_job(&jobs, &trusting_ns, "over-tls").await;
    wait_running(&jobs, "over-tls").await;
    let log = jaeger.log.display().to_string();
    let traces = wait_until(
        &format!("the trusting operator's traces in Jaeger (log: {log})"),
        SLOW,
        || async {
            let traces = jaeger.traces(&trusting_ns);
            (!traces.is_empty()).then_some(traces)
        },
    )
    .await;
    for trace in &traces {
        let spans = super::spans(trace);
        let root = spans
            .iter()
            .find(|s| s.parent.is_none())
            .expect("a root span");
        assert_eq!(root.name, "reconcile");
        assert_eq!(root.tag("name"), "over-tls");
    }

    // Without it: the export fails on the certificate, and the log says so
    // and names the fix.
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &untrusting_ns);
    create_job(&jobs, &untrusting_ns, "first").await;
    wait_running(&jobs, "first").await;
    let operator_log = untrusting.log.display().to_string();
    wait_until(
        &format!("the untrusting operator to log the TLS failure (log: {operator_log})"),
        SLOW,
        || async {
            let text = untrusting.log_text();
            text.lines()
                .any(|l| {
                    l.contains("TLS certificate was not accepted")
                        && l.contains("invalid peer certificate: UnknownIssuer")
                        && l.contains("--otlp-certificate")
                })
                .then_some(())
        },
    )
    .await;
    // ...and the controller goes on: a job created after the failure runs.
    create_job(&jobs, &untrusting_ns, "second").await;
    wait_running(&jobs, "second").await;
    assert!(!untrusting.exited(), "the operator exited: {operator_log}");
    assert!(
        jaeger.traces(&untrusting_ns).is_empty(),
        "an operator without the CA delivered traces"
    );
}

/// The chart's `tracing.caConfigMap` reaches the binary: the file
/// `OTEL_EXPORTER_OTLP_CERTIFICATE` names is the ConfigMap's key, mounted.
#[test]
#[ignore = "needs the local control plane's tools: make e2e"]
fn the_charts_ca_config_map_is_mounted_where_otel_exporter_otlp_certificate_points() {
    let deployment = chart_deployment(&[
        "tracing.otlpEndpoint=https://collector.observability:4318".to_owned(),
        "tracing.caConfigMap.name=collector-ca".to_owned(),
        "tracing.caConfigMap.key=bundle.pem".to_owned(),
    ]);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let certificate = container["env"]
        .as_sequence()
        .expect("the container's env")
        .iter()
        .find(|var| var["name"] == "OTEL_EXPORTER_OTLP_CERTIFICATE")
        .and_then(|var| var["value"].as_str())
        .expect("OTEL_EXPORTER_OTLP_CERTIFICATE is set");
    let volume = pod["volumes"]
        .as_sequence()
        .expect("the pod's volumes")
        .iter()
        .find(|v| v["configMap"]["name"] == "collector-ca")
        .expect("a volume of the ConfigMap");
    let mount = container["volumeMounts"]
        .as_sequence()
        .expect("the container's volume mounts")
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap's volume is mounted");
    assert_eq!(mount["readOnly"], true);
    let item = &volume["configMap"]["items"][0];
    assert_eq!(item["key"], "bundle.pem");
    let mounted = format!(
        "{}/{}",
        mount["mountPath"].as_str().expect("a mount path"),
        item["path"].as_str().expect("an item path")
    );
    assert_eq!(certificate, mounted);

    // Without an endpoint, nothing of it is rendered.
    let off = chart_deployment(&["tracing.caConfigMap.name=collector-ca".to_owned()]);
    let rendered = serde_yaml::to_string(&off).expect("YAML");
    assert!(!rendered.contains("collector-ca"), "{rendered}");
}
