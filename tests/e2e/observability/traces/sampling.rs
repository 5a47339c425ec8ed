//! Sampling as the chart configures it: `tracing.samplingRatio` renders
//! the standard `OTEL_TRACES_SAMPLER=parentbased_traceidratio` and
//! `OTEL_TRACES_SAMPLER_ARG`, and the operator, run with exactly the
//! environment the chart renders (endpoint included), traces no reconcile
//! at ratio 0 and every one at ratio 1, while both reconcile the same kind
//! of job. A ratio the specification does not allow stops the operator at
//! startup instead of silently tracing everything.
use std::time::Duration;

use kube::api::Api;
use tfjob_operator::api::types::TFJob;

use super::{Jaeger, SLOW, chart_deployment, create_job, wait_running};
use crate::cluster::{client, test_namespace, wait_until};
use crate::operator::{Operator, ensure_crd};
use crate::support::shared_cluster;

/// The operator container's plain environment (not the downward API's) as
/// the chart renders it with `--set` `values`.
fn chart_env(values: &[String]) -> Vec<(String, String)> {
    let deployment = chart_deployment(values);
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .expect("the container's env");
    env.iter()
        .filter_map(|var| {
            let value = var["value"].as_str()?;
            Some((var["name"].as_str()?.to_owned(), value.to_owned()))
        })
        .collect()
}

fn var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_charts_sampling_ratio_0_sends_no_reconcile_trace_and_1_sends_them_all() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let mut jaeger = Jaeger::start();
    jaeger.wait_ready().await;
    let endpoint = format!("http://127.0.0.1:{}", jaeger.otlp_http_port);

    let rendered = |ratio: &str| {
        let env = chart_env(&[
            format!("tracing.otlpEndpoint={endpoint}"),
            format!("tracing.samplingRatio={ratio}"),
        ]);
        assert_eq!(
            var(&env, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            Some(endpoint.as_str())
        );
        assert_eq!(
            var(&env, "OTEL_TRACES_SAMPLER"),
            Some("parentbased_traceidratio")
        );
        assert_eq!(var(&env, "OTEL_TRACES_SAMPLER_ARG"), Some(ratio), "{env:?}");
        env
    };
    let start = |ns: &str, ratio: &str| {
        let mut env = rendered(ratio);
        // Nothing is sent on a timer: only SIGTERM's flush, so each operator
        // has sent all it ever will once it has exited.
        env.push(("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "3600000".to_owned()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        // No --otlp-endpoint: the chart's environment alone turns traces on.
        Operator::start_with_env(ns, &[], &env)
    };
    let none_ns = test_namespace(&client, "sampled-none").await;
    let all_ns = test_namespace(&client, "sampled-all").await;
    let mut none = start(&none_ns, "0");
    let mut all = start(&all_ns, "1");
    none.wait_ready().await;
    all.wait_ready().await;

    for ns in [&none_ns, &all_ns] {
        let jobs: Api<TFJob> = Api::namespaced(client.clone(), ns);
        create_job(&jobs, ns, "sampled").await;
        wait_running(&jobs, "sampled").await;
    }
    // The ratio-0 operator flushes first: once the ratio-1 operator's
    // traces, sent after it, are in Jaeger, anything it sent would be too.
    assert!(
        none.terminate(Duration::from_secs(30)),
        "ratio 0: no SIGTERM exit"
    );
    assert!(
        all.terminate(Duration::from_secs(30)),
        "ratio 1: no SIGTERM exit"
    );

    let log = jaeger.log.display().to_string();
    let traced = wait_until(
        &format!("the ratio-1 operator's traces in Jaeger (log: {log})"),
        SLOW,
        || async {
            let traces = jaeger.traces(&all_ns);
            (!traces.is_empty()).then_some(traces)
        },
    )
    .await;
    // Every reconcile is a trace of its own: from creation to Running takes
    // more than one (create the children, then see them run).
    assert!(
        traced.len() >= 2,
        "ratio 1 traced {} reconciles",
        traced.len()
    );
    assert_eq!(
        jaeger.traces(&none_ns).len(),
        0,
        "ratio 0 traced reconciles (operator log: {})",
        none.log.display()
    );

    // A ratio outside the specification is refused at startup, naming the
    // variable; the SDK alone would trace every reconcile instead.
    let bad_ns = test_namespace(&client, "sampled-bad").await;
    let mut bad = Operator::start_with_env(
        &bad_ns,
        &["--otlp-endpoint", &endpoint],
        &[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0,1"),
        ],
    );
    wait_until("the operator to refuse the ratio 0,1", SLOW, || {
        let exited = bad.exited();
        async move { exited.then_some(()) }
    })
    .await;
    let text = bad.log_text();
    assert!(
        text.contains("OTEL_TRACES_SAMPLER_ARG=\"0,1\" is not a ratio"),
        "{text}"
    );
}
