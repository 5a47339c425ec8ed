//! The admission webhook that kills the operator at its N-th write: a
//! validating webhook served by the test over TLS (a CA and certificate the
//! test mints), registered for the writes the operator makes in a job's
//! lifecycle — TFJob updates and patches (bookkeeping) and status updates,
//! Pod and Service creates and deletes, PodGroup creates, updates and
//! deletes, Kueue Workload creates, updates (their status too: a
//! server-side apply is an UPDATE to admission) and deletes — and only for
//! users named [`USER_PREFIX`]… (a `matchCondition`), so no other client of
//! the cluster (Kueue included) waits on it.
//!
//! Once armed ([`KillingWebhook::arm`]) for one operator process (its user
//! and pid) and one job, it counts that process's writes to the job's objects
//! (named after the job: [`concerns`]) in the order the API server asks
//! about them. One request may be asked about more than once: the API
//! server validates a delete on each storage attempt
//! (kubernetes/kubernetes#76346), so a finished Pod's delete (grace period
//! 0) is asked about for the update that sets its `deletionTimestamp`, again
//! for its removal, and again after a conflict (KWOK deleting it meanwhile).
//! Each ask is a position: a kill at a later one lands inside the request. When the N-th arrives it
//! SIGKILLs the process *before* answering, then denies the write, so the
//! write is never stored: the crash lands exactly before write N. Every later
//! write of the dead process (one that was already in flight) is denied too.
//! Unarmed, it allows everything and only records (with `kill_at: None` it
//! counts a pass's writes without killing: how a scenario learns them).
//!
//! Mirrors: Sieve's and Acto's crash injection at controller write points,
//! done from outside the process (the API server's admission chain) instead
//! of instrumenting the controller's client.
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use base64::Engine;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tfjob_operator::observability::tls_listener::TlsListener;

use crate::certs;
use crate::cluster::cluster_dir;
use crate::harness::{apply_yaml, kubectl_stdin};

/// The operator identities this webhook is asked about (`matchConditions`).
pub const USER_PREFIX: &str = "fault-op-wk-";

/// One write the API server asked about: `UPDATE tfjobs/status job-01`.
#[derive(Clone, Debug)]
pub struct Write {
    pub user: String,
    pub at: Instant,
    pub what: String,
}

/// What the webhook counts and kills.
struct Target {
    user: String,
    pid: u32,
    job: String,
    kill_at: Option<usize>,
    /// The target's writes to the job's objects since it was armed.
    seen: Vec<String>,
    killed: bool,
}

#[derive(Default)]
struct Shared {
    target: Option<Target>,
    /// Every write of a [`USER_PREFIX`] user, armed or not.
    log: Vec<Write>,
}

/// The running webhook and its registration; removed on drop.
pub struct KillingWebhook {
    shared: Arc<Mutex<Shared>>,
    server: tokio::task::JoinHandle<()>,
    configuration: String,
}

impl KillingWebhook {
    /// Serves on a loopback port and registers for namespace `ns`.
    pub async fn start(ns: &str) -> Self {
        let dir = cluster_dir().join(format!("pki/faults/write-kills-{ns}"));
        let files = certs::mint(&dir, &["127.0.0.1"]);
        let chain = CertificateDer::pem_file_iter(&files.cert)
            .expect("the serving certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("PEM certificates");
        let key = PrivateKeyDer::from_pem_file(&files.key).expect("the serving key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("a TLS configuration");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a webhook port");
        let port = tcp
            .local_addr()
            .map(|a: SocketAddr| a.port())
            .expect("its port");
        let listener = TlsListener::new(tcp, Arc::new(config));
        let shared = Arc::new(Mutex::new(Shared::default()));
        let app = Router::new()
            .route("/validate", post(review))
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let ca = std::fs::read(&files.ca).expect("the webhook CA");
        let ca = base64::engine::general_purpose::STANDARD.encode(ca);
        let configuration = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
             metadata: {{name: {ns}-write-kills}}\nwebhooks:\n- name: write-kills.tfjob-faults.local\n\
             \x20 clientConfig: {{url: 'https://127.0.0.1:{port}/validate', caBundle: {ca}}}\n\
             \x20 rules:\n\
             \x20 - {{operations: [UPDATE], apiGroups: [kubeflow.org], apiVersions: ['*'], resources: [tfjobs, tfjobs/status]}}\n\
             \x20 - {{operations: [CREATE, DELETE], apiGroups: [''], apiVersions: [v1], resources: [pods, services]}}\n\
             \x20 - {{operations: [CREATE, UPDATE, DELETE], apiGroups: [scheduling.k8s.io], apiVersions: ['*'], resources: [podgroups]}}\n\
             \x20 - {{operations: [CREATE, UPDATE, DELETE], apiGroups: [kueue.x-k8s.io], apiVersions: ['*'], resources: [workloads, workloads/status]}}\n\
             \x20 namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n\
             \x20 matchConditions: [{{name: operator, expression: \"request.userInfo.username.startsWith('{USER_PREFIX}')\"}}]\n\
             \x20 failurePolicy: Fail\n  sideEffects: None\n  admissionReviewVersions: [v1]\n  timeoutSeconds: 10\n"
        );
        apply_yaml(&configuration);
        Self {
            shared,
            server,
            configuration,
        }
    }

    /// Counts the writes of process `pid` (user `user`) to job `job`'s
    /// objects from now on, and kills it at write `kill_at` (1-based).
    pub fn arm(&self, user: &str, pid: u32, job: &str, kill_at: Option<usize>) {
        self.lock().target = Some(Target {
            user: user.to_owned(),
            pid,
            job: job.to_owned(),
            kill_at,
            seen: Vec::new(),
            killed: false,
        });
    }

    /// Stops counting; returns the target's writes since it was armed.
    pub fn disarm(&self) -> Vec<String> {
        self.lock()
            .target
            .take()
            .map(|t| t.seen)
            .unwrap_or_default()
    }

    /// Whether the armed target has been killed.
    pub fn killed(&self) -> bool {
        self.lock().target.as_ref().is_some_and(|t| t.killed)
    }

    /// How long since `user` last wrote to anything the webhook sees.
    pub fn quiet_for(&self, user: &str) -> Duration {
        self.lock()
            .log
            .iter()
            .rev()
            .find(|w| w.user == user)
            .map_or(Duration::MAX, |w| w.at.elapsed())
    }

    /// Every write recorded, for a failure message.
    pub fn log(&self) -> Vec<Write> {
        self.lock().log.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for KillingWebhook {
    fn drop(&mut self) {
        let _ = kubectl_stdin(
            &["delete", "-f", "-", "--ignore-not-found"],
            &self.configuration,
        );
        self.server.abort();
    }
}

/// Whether an object named `name` is one of job `job`'s: the job, its
/// Pods, Services and PodGroup (`{job}`, `{job}-…`), and the Workload the
/// operator makes for it (`tfjob-{job}-{hash}`, Kueue's naming).
fn concerns(job: &str, name: &str) -> bool {
    name == job
        || name.starts_with(&format!("{job}-"))
        || name.starts_with(&format!("tfjob-{job}-"))
}

/// One AdmissionReview: record, maybe kill, answer.
async fn review(
    State(shared): State<Arc<Mutex<Shared>>>,
    body: Bytes,
) -> impl axum::response::IntoResponse {
    let review: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let request = &review["request"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let user = text(&request["userInfo"]["username"]);
    let name = text(&request["name"]);
    let resource = match request["subResource"].as_str() {
        Some(sub) if !sub.is_empty() => format!("{}/{sub}", text(&request["resource"]["resource"])),
        _ => text(&request["resource"]["resource"]),
    };
    let what = format!("{} {resource} {name}", text(&request["operation"]));
    let denial = {
        let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
        shared.log.push(Write {
            user: user.clone(),
            at: Instant::now(),
            what: what.clone(),
        });
        match shared.target.as_mut() {
            Some(t) if t.user == user && t.killed => {
                Some("the operator was killed before this write")
            }
            Some(t) if t.user == user && concerns(&t.job, &name) => {
                t.seen.push(what);
                if t.kill_at == Some(t.seen.len()) {
                    // Before the answer: the write is never stored.
                    let _ = Command::new("kill")
                        .args(["-KILL", &t.pid.to_string()])
                        .status();
                    t.killed = true;
                    Some("the operator was killed at this write")
                } else {
                    None
                }
            }
            _ => None,
        }
    };
    let mut response = serde_json::json!({
        "uid": request["uid"].clone(),
        "allowed": denial.is_none(),
    });
    if let Some(message) = denial {
        response["status"] = serde_json::json!({ "code": 403, "message": message });
    }
    let answer = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
}
