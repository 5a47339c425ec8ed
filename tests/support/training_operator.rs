//! Kubeflow's training-operator (the real one, v1.9.2 as `e2e/peers.sh`
//! builds it) run out of cluster against the local control plane, for one
//! namespace: its TFJob controller only (`--enable-scheme=tfjob`), its cache
//! and its webhook certificate's Secret in that namespace, so tests beside it
//! with their own operators never meet it. Dropping it kills the process.
//!
//! Out of cluster it needs what its Deployment would have (as `benches/e2e`
//! starts it): the Secret its cert rotator fills, a
//! ValidatingWebhookConfiguration of the name the rotator patches (ours
//! matches no resource, so no TFJob write waits on a webhook the API server
//! cannot reach), and the certificates in the directory its webhook server
//! reads, which v1.9.2 hard-codes (`/tmp/k8s-webhook-server/serving-certs`;
//! a volume mount in a cluster): the rotator writes them to the Secret only,
//! so they are copied from there until it is ready.
//!
//! The binary: `TFJOB_E2E_TRAINING_OPERATOR` (set by `e2e/run-suite.sh` from
//! `e2e/peers.sh --dir`).
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, PostParams};

use crate::cluster::{cluster_dir, kubeconfig_path, wait_until};
use crate::loopback::{free_port, http_get};

/// Names v1.9.2 hard-codes (`cmd/training-operator.v1/main.go`, `pkg/cert`).
const SECRET: &str = "training-operator-webhook-cert";
const WEBHOOK_CONFIGURATION: &str = "validator.training-operator.kubeflow.org";
const CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
/// Cert rotation, cache sync and the controller's workers on a busy machine.
const READY_WITHIN: Duration = Duration::from_secs(120);

/// The training-operator binary the harness built.
fn binary() -> PathBuf {
    std::env::var_os("TFJOB_E2E_TRAINING_OPERATOR")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "TFJOB_E2E_TRAINING_OPERATOR must name Kubeflow's training-operator binary \
                 (`make e2e-kubeflow-crd` builds it with e2e/peers.sh)"
            )
        })
}

/// A training-operator process watching one namespace.
pub struct TrainingOperator {
    child: Option<Child>,
    probe_port: u16,
    pub log: PathBuf,
}

impl TrainingOperator {
    /// Starts training-operator for `namespace` and waits until its TFJob
    /// controller runs (certificates in place, `/readyz` 200, workers started).
    pub async fn start(client: &Client, namespace: &str) -> Self {
        prepare(client, namespace).await;
        let (metrics, probe, webhook) = (free_port(), free_port(), free_port());
        let logs = cluster_dir().join("logs");
        std::fs::create_dir_all(&logs).expect("the cluster logs dir");
        let log = logs.join(format!("training-operator-{namespace}-{probe}.log"));
        let file = std::fs::File::create(&log).expect("the training-operator log file");
        let child = Command::new(binary())
            .env("KUBECONFIG", kubeconfig_path())
            .env("MY_POD_NAMESPACE", namespace)
            .arg("--enable-scheme=tfjob")
            .arg(format!("--namespace={namespace}"))
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{probe}"))
            .arg(format!("--webhook-server-port={webhook}"))
            .stdout(Stdio::from(file.try_clone().expect("a log file handle")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("failed to start training-operator");
        let mut this = Self {
            child: Some(child),
            probe_port: probe,
            log,
        };
        this.wait_ready(client, namespace).await;
        this
    }

    async fn wait_ready(&mut self, client: &Client, namespace: &str) {
        let what = format!("training-operator to run (log: {})", self.log.display());
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let (probe, log) = (self.probe_port, self.log.clone());
        wait_until(&what, READY_WITHIN, || async {
            let certs = copy_certs(&secrets).await;
            let ready = http_get(probe, "/readyz").is_some_and(|(code, _)| code == 200);
            let workers =
                std::fs::read_to_string(&log).is_ok_and(|text| text.contains("Starting workers"));
            (certs && ready && workers).then_some(())
        })
        .await;
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops it as `kubectl scale --replicas=0` would: SIGTERM, then SIGKILL
    /// after 10 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for TrainingOperator {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        eprintln!("training-operator log: {}", self.log.display());
    }
}

/// The Secret and the webhook configuration its cert rotator needs; both
/// may be there from an earlier start.
async fn prepare(client: &Client, namespace: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret: Secret =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": SECRET } }))
            .expect("a valid Secret");
    create_unless_there(&secrets, &secret).await;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": { "name": WEBHOOK_CONFIGURATION },
        "webhooks": [{
            "name": "validator.tfjob.training-operator.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "clientConfig": { "url": "https://127.0.0.1:1/validate-e2e-none" },
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 1,
            "rules": [{ "apiGroups": ["e2e.invalid"], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["none"] }]
        }]
    }))
    .expect("a valid ValidatingWebhookConfiguration");
    create_unless_there(&configurations, &configuration).await;
}

async fn create_unless_there<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("failed to create {:?}: {e}", object.meta().name),
    }
}

/// Copies the rotator's certificates from its Secret to [`CERT_DIR`];
/// whether they are there.
async fn copy_certs(secrets: &Api<Secret>) -> bool {
    let Some(secret) = secrets.get_opt(SECRET).await.ok().flatten() else {
        return false;
    };
    let data = secret.data.unwrap_or_default();
    let keys = ["tls.crt", "tls.key", "ca.crt"];
    if !keys
        .iter()
        .all(|k| data.get(*k).is_some_and(|v| !v.0.is_empty()))
    {
        return false;
    }
    if std::fs::create_dir_all(CERT_DIR).is_err() {
        return false;
    }
    keys.iter().all(|k| {
        let path = Path::new(CERT_DIR).join(k);
        let bytes = &data[*k].0;
        std::fs::read(&path).ok().as_ref() == Some(bytes) || std::fs::write(&path, bytes).is_ok()
    })
}
