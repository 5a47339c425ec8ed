//! Traces as users see them, in a real Jaeger (v2, built by `e2e/tools.sh`,
//! in-memory storage, OTLP receivers and the query API on random loopback
//! ports): an operator started with `--otlp-endpoint` runs a TFJob, is
//! stopped with SIGTERM, and the job's reconciles must be in Jaeger as
//! traces whose root is the `reconcile` span (with the job's namespace and
//! name), with the `observe`, `plan`, `apply` and `status` phases under it,
//! and the API writes under those with their kind, object and HTTP status.
//!
//! The operator's batch delay is set far beyond the test, so what Jaeger
//! shows was sent by the flush on SIGTERM (and nothing before it).
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::api::{Api, PostParams};
use serde::Deserialize;
use serde_json::Value;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;

use crate::cluster::{client, cluster_dir, helm, run_ok, test_namespace, wait_until};
use crate::loopback::http_get;
use crate::operator::{Operator, ensure_crd};
use crate::prometheus::url_encode;
use crate::support::shared_cluster;

const SLOW: Duration = Duration::from_secs(90);

/// The service name the operator's traces carry.
const SERVICE: &str = "tfjob-operator";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The Jaeger binary: `TFJOB_JAEGER_BIN`, else the one `e2e/tools.sh` built.
fn jaeger_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("TFJOB_JAEGER_BIN") {
        return PathBuf::from(bin);
    }
    let tools = crate::cluster::repo_dir().join("e2e/tools.sh");
    let out = Command::new("bash")
        .arg(&tools)
        .arg("--jaeger-bin")
        .output()
        .expect("bash e2e/tools.sh --jaeger-bin");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Jaeger all-in-one with in-memory storage. Dropping it kills the process.
struct Jaeger {
    child: Option<Child>,
    otlp_http_port: u16,
    query_port: u16,
    log: PathBuf,
}

impl Jaeger {
    fn start() -> Self {
        Self::start_with(|_| None)
    }

    /// Jaeger whose OTLP/HTTP receiver serves https with the certificate
    /// `tls` writes into Jaeger's dir (returning the certificate and key).
    fn start_with(tls: impl FnOnce(&Path) -> Option<(PathBuf, PathBuf)>) -> Self {
        let [otlp_grpc, otlp_http, query_http, query_grpc] = [(); 4].map(|()| free_port());
        let dir = cluster_dir().join(format!("jaeger-{query_http}"));
        std::fs::create_dir_all(&dir).expect("the Jaeger dir");
        // The OTLP receiver's `tls` block is the collector's
        // `configtls.ServerConfig` (confighttp's ServerConfig.TLS).
        let tls = tls(&dir)
            .map(|(cert, key)| {
                format!(
                    "
        tls:
          cert_file: {}
          key_file: {}",
                    cert.display(),
                    key.display()
                )
            })
            .unwrap_or_default();
        // The all-in-one configuration cut to what the test needs, on our
        // ports (its built-in one listens on fixed ports: 4317, 16686, ...).
        let config = format!(
            "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memory_store
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}{tls}
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
"
        );
        let config_file = dir.join("jaeger.yaml");
        std::fs::write(&config_file, config).expect("the Jaeger config");
        let log = dir.join("jaeger.log");
        let file = std::fs::File::create(&log).expect("the Jaeger log file");
        let child = Command::new(jaeger_bin())
            .arg(format!("--config={}", config_file.display()))
            .stdout(Stdio::from(file.try_clone().expect("a log file handle")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("failed to start jaeger (built by `bash e2e/tools.sh`)");
        Self {
            child: Some(child),
            otlp_http_port: otlp_http,
            query_port: query_http,
            log,
        }
    }

    /// `GET /api/<path>` of the query service: the `data` field, or `None`
    /// while Jaeger is not answering.
    fn api(&self, path: &str) -> Option<Value> {
        let (code, body) = http_get(self.query_port, &format!("/api/{path}"))?;
        let mut reply: Value = serde_json::from_str(&body).ok()?;
        (code == 200).then(|| reply["data"].take())
    }

    async fn wait_ready(&mut self) {
        let log = self.log.display().to_string();
        let child = self.child.as_mut().expect("a running Jaeger");
        let exited = wait_until(
            &format!("Jaeger's query API (log: {log})"),
            Duration::from_secs(60),
            || {
                let exited = child.try_wait().ok().flatten();
                let up = http_get(self.query_port, "/api/services").is_some_and(|(c, _)| c == 200);
                async move { exited.map(Some).or(up.then_some(None)) }
            },
        )
        .await;
        if let Some(status) = exited {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("jaeger exited with {status}:\n{text}");
        }
    }

    /// The traces of [`SERVICE`] whose reconcile span has `namespace` = `ns`.
    fn traces(&self, ns: &str) -> Vec<Value> {
        let tags = url_encode(&serde_json::json!({ "namespace": ns }).to_string());
        let path = format!("traces?service={SERVICE}&operation=reconcile&tags={tags}&limit=1000");
        match self.api(&path) {
            Some(Value::Array(traces)) => traces,
            _ => Vec::new(),
        }
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One span of a Jaeger trace, with its tags as text.
#[derive(Debug)]
struct Span {
    id: String,
    parent: Option<String>,
    name: String,
    tags: BTreeMap<String, String>,
}

impl Span {
    fn tag(&self, key: &str) -> &str {
        self.tags.get(key).map(String::as_str).unwrap_or_default()
    }
}

fn spans(trace: &Value) -> Vec<Span> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    trace["spans"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| Span {
            id: text(&s["spanID"]),
            parent: s["references"].as_array().and_then(|refs| {
                refs.iter()
                    .find(|r| r["refType"] == "CHILD_OF")
                    .map(|r| text(&r["spanID"]))
            }),
            name: text(&s["operationName"]),
            tags: s["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| (text(&t["key"]), text(&t["value"])))
                .collect(),
        })
        .collect()
}

use crate::support::CHART;

/// The operator's Deployment as the chart renders it with `--set` `values`.
fn chart_deployment(values: &[String]) -> serde_yaml::Value {
    let mut template = helm();
    template.args([
        "template",
        "traces",
        CHART.as_str(),
        "--namespace",
        "tfjob-system",
        "--show-only",
        "templates/deployment.yaml",
    ]);
    for value in values {
        template.args(["--set", value]);
    }
    let rendered = run_ok(&mut template);
    serde_yaml::Deserializer::from_str(&rendered)
        .map(|doc| serde_yaml::Value::deserialize(doc).expect("valid YAML from helm"))
        .find(|doc| doc["kind"] == "Deployment")
        .expect("the chart renders a Deployment")
}

/// Creates a one-worker TFJob `name` in `ns`.
async fn create_job(jobs: &Api<TFJob>, ns: &str, name: &str) {
    let job = TfJobFixture::new(name).namespace(ns).workers(1).build();
    jobs.create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("failed to create TFJob {name}: {e}"));
}

/// Waits until TFJob `name` has the Running condition: it was reconciled
/// from creation to its Pods running.
async fn wait_running(jobs: &Api<TFJob>, name: &str) {
    wait_until(&format!("TFJob {name} to be Running"), SLOW, || async {
        let job = jobs.get_opt(name).await.ok().flatten()?;
        let running = job
            .status?
            .conditions
            .iter()
            .any(|c| c.type_ == "Running" && c.status == "True");
        running.then_some(())
    })
    .await;
}

/// The spans of `trace` named `name` whose parent is `parent`.
fn children<'a>(all: &'a [Span], parent: &Span, name: &str) -> Vec<&'a Span> {
    all.iter()
        .filter(|s| s.name == name && s.parent.as_deref() == Some(parent.id.as_str()))
        .collect()
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn each_reconcile_reaches_jaeger_as_a_trace_of_its_phases_and_api_writes() {
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "traces").await;
    let mut jaeger = Jaeger::start();
    jaeger.wait_ready().await;
    let endpoint = format!("http://127.0.0.1:{}", jaeger.otlp_http_port);
    let mut operator = Operator::start_with_env(
        &ns,
        &["--otlp-endpoint", &endpoint],
        // Nothing is sent on a timer during the test: only SIGTERM's flush.
        &[("OTEL_BSP_SCHEDULE_DELAY", "3600000")],
    );
    operator.wait_ready().await;

    let name = "traced";
    let job = TfJobFixture::new(name).namespace(&ns).workers(2).build();
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create the TFJob");
    wait_running(&jobs, name).await;
    assert!(
        jaeger.traces(&ns).is_empty(),
        "traces arrived before SIGTERM: the batch delay was not honoured"
    );
    assert!(
        operator.terminate(Duration::from_secs(30)),
        "the operator did not stop on SIGTERM"
    );

    let log = jaeger.log.display().to_string();
    let traces = wait_until(
        &format!("the job's traces in Jaeger (log: {log})"),
        SLOW,
        || async {
            let traces = jaeger.traces(&ns);
            (!traces.is_empty()).then_some(traces)
        },
    )
    .await;
    let operator_log = operator.log_text();
    let mut creates = BTreeMap::<String, String>::new();
    let mut status_writes = 0;
    for trace in &traces {
        let all = spans(trace);
        let process = trace["processes"]
            .as_object()
            .and_then(|p| p.values().next())
            .expect("a trace names its process");
        assert_eq!(process["serviceName"], SERVICE);
        // One trace per reconcile: exactly one root, the reconcile.
        let roots: Vec<&Span> = all.iter().filter(|s| s.parent.is_none()).collect();
        assert_eq!(roots.len(), 1, "one root per trace: {roots:?}");
        let root = roots[0];
        assert_eq!(root.name, "reconcile");
        assert_eq!(root.tag("namespace"), ns);
        assert_eq!(root.tag("name"), name);
        assert_eq!(root.tag("controller"), "tfjob");
        assert!(!root.tag("reconcileID").is_empty(), "{root:?}");
        // The job exists all along: each reconcile observes, and each that
        // got past the expectations check plans, applies and writes status.
        assert_eq!(children(&all, root, "observe").len(), 1, "{all:#?}");
        let Some(apply) = children(&all, root, "apply").first().copied() else {
            continue;
        };
        assert_eq!(children(&all, root, "plan").len(), 1, "{all:#?}");
        let status = children(&all, root, "status");
        assert_eq!(status.len(), 1, "{all:#?}");
        for write in all
            .iter()
            .filter(|s| s.parent.as_deref() == Some(&apply.id))
        {
            assert_eq!(write.tag("verb"), "create", "{write:?}");
            assert_eq!(write.name, format!("create {}", write.tag("kind")));
            creates.insert(
                format!("{} {}", write.tag("kind"), write.tag("object")),
                write.tag("http.response.status_code").to_owned(),
            );
        }
        for write in children(&all, status[0], "update tfjob") {
            assert_eq!(write.tag("object"), name);
            assert_eq!(write.tag("http.response.status_code"), "200", "{write:?}");
            status_writes += 1;
        }
    }
    let expected: BTreeMap<String, String> = ["pod", "service"]
        .iter()
        .flat_map(|kind| (0..2).map(move |i| format!("{kind} {name}-worker-{i}")))
        .map(|write| (write, "201".to_owned()))
        .collect();
    assert_eq!(
        creates, expected,
        "every create, with its status (operator log:\n{operator_log})"
    );
    // Created and Running may share one write: a status change nobody
    // waits for is batched for up to 1 s (src/tfjob/status/batch.rs).
    assert!(
        status_writes >= 1,
        "the status reaching Running was written: {status_writes}"
    );
}

// The same Jaeger over https, and sampling: `make test-observability` too.
mod sampling;
mod tls;
