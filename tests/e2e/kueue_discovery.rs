//! A leader that cannot ask the API server about Kueue (#38, defect 1):
//! discovery of `kueue.x-k8s.io` refused from outside by API Priority and
//! Fairness (a FlowSchema for the operator's identity only, into a priority
//! level with no seats that rejects: every discovery request answers 429).
//! The operator must stay not ready, say why on `/readyz`, reconcile
//! nothing, and once the server answers, hold the queued job for Kueue: it
//! never gets a Pod unadmitted. The operator before the fix took the error
//! for "no Kueue" and ran the job at once.
//!
//! Runs with Kueue in `workload` mode (`e2e/run-suite.sh`'s Kueue phase);
//! without it the test says so and passes.
//!
//! And Kueue's API installed after the operator started (the main pass,
//! where Kueue is not installed; the cluster held exclusively, since every
//! operator at `--kueue=auto` would find the CRDs): it is found without a
//! restart, the running queued job is stopped and held, and a new one
//! never starts unadmitted. No Kueue runs to admit them: the CRDs alone
//! (no schema) are what the operator discovers.
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;

use crate::kueue::{Env, job_condition_reason, kueue_running, workload_mode};
use crate::operator::{Operator, ensure_crd, http_get};
use crate::support::{
    client, cluster_dir, delete_namespace, exclusive_cluster, kubectl, random_suffix, run_ok,
    test_namespace, wait_until,
};

/// How long discovery is refused.
const REFUSED_FOR: Duration = Duration::from_secs(20);

/// `kubectl <verb> -f -` with `yaml`; Err(stderr) when it fails.
fn kubectl_stdin(verb: &[&str], yaml: &str) -> Result<(), String> {
    let mut child = kubectl()
        .args(verb)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(yaml.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Cluster objects deleted when the test ends, however it ends.
struct Applied(String);

impl Applied {
    fn new(yaml: String) -> Self {
        kubectl_stdin(&["apply"], &yaml).unwrap_or_else(|e| panic!("kubectl apply: {e}"));
        Self(yaml)
    }

    fn delete(&self) {
        kubectl_stdin(&["delete", "--ignore-not-found", "--wait=false"], &self.0)
            .unwrap_or_else(|e| panic!("kubectl delete: {e}"));
    }
}

impl Drop for Applied {
    fn drop(&mut self) {
        let _ = kubectl_stdin(&["delete", "--ignore-not-found", "--wait=false"], &self.0);
    }
}

/// A user of its own (not in `system:masters`, which APF exempts), signed by
/// the cluster's CA, bound to cluster-admin: its kubeconfig.
fn identity(user: &str) -> (PathBuf, Applied) {
    let pki = cluster_dir().join("pki");
    let dir = cluster_dir().join("pki/e2e-discovery");
    std::fs::create_dir_all(&dir).expect("the identity's dir");
    let (key, csr, crt, ext) = (
        dir.join(format!("{user}.key")),
        dir.join(format!("{user}.csr")),
        dir.join(format!("{user}.crt")),
        dir.join(format!("{user}.ext")),
    );
    run_ok(
        Command::new("openssl")
            .args(["genrsa", "-out"])
            .arg(&key)
            .arg("2048"),
    );
    run_ok(
        Command::new("openssl")
            .args(["req", "-new", "-key"])
            .arg(&key)
            .args([
                "-subj",
                &format!("/O=tfjob-e2e-discovery/CN={user}"),
                "-out",
            ])
            .arg(&csr),
    );
    // An X.509 v3 certificate: rustls refuses v1.
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=clientAuth\n",
    )
    .expect("the extension file");
    run_ok(
        Command::new("openssl")
            .args(["x509", "-req", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(pki.join("ca.crt"))
            .arg("-CAkey")
            .arg(pki.join("ca.key"))
            .args(["-CAcreateserial", "-days", "1", "-sha256", "-extfile"])
            .arg(&ext)
            .arg("-out")
            .arg(&crt),
    );
    // The admin kubeconfig's server and CA, this user's certificate.
    let admin = std::fs::read_to_string(cluster_dir().join("kubeconfig")).expect("kubeconfig");
    let text = admin
        .replace(
            &pki.join("admin.crt").display().to_string(),
            &crt.display().to_string(),
        )
        .replace(
            &pki.join("admin.key").display().to_string(),
            &key.display().to_string(),
        );
    assert_ne!(text, admin, "the admin kubeconfig names {}", pki.display());
    let kubeconfig = dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&kubeconfig, text).expect("the identity's kubeconfig");
    let binding = Applied::new(format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {user}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
         subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]\n"
    ));
    (kubeconfig, binding)
}

/// Every discovery request of `user` for `kueue.x-k8s.io` answers 429: a
/// priority level without seats that rejects what it cannot seat.
fn refuse_kueue_discovery(user: &str) -> Applied {
    Applied::new(format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\n\
         metadata: {{name: {user}}}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 0\n\
         \x20   lendablePercent: 0\n    borrowingLimitPercent: 0\n    limitResponse: {{type: Reject}}\n---\n\
         apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {{name: {user}}}\nspec:\n\
         \x20 priorityLevelConfiguration: {{name: {user}}}\n  matchingPrecedence: 100\n\
         \x20 distinguisherMethod: {{type: ByUser}}\n  rules:\n  - subjects: [{{kind: User, user: {{name: {user}}}}}]\n\
         \x20   nonResourceRules: [{{verbs: ['*'], nonResourceURLs: ['/apis/kueue.x-k8s.io', '/apis/kueue.x-k8s.io/*']}}]\n"
    ))
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_leader_that_cannot_ask_for_kueue_waits_not_ready_and_never_runs_a_queued_job_unadmitted()
{
    if !kueue_running() || !workload_mode() {
        eprintln!("skipping: Kueue is not running in workload mode (TFJOB_KUEUE_MODE=workload)");
        return;
    }
    let Some(mut env) = Env::new("kueue-discovery", "2", json!({})).await else {
        return;
    };
    let user = format!("e2e-discovery-{}", random_suffix());
    let (kubeconfig, _binding) = identity(&user);
    let refused = refuse_kueue_discovery(&user);
    // APF reads its configuration in the background: refused once this
    // user's own discovery request is.
    let raw = kubeconfig.clone();
    wait_until(
        "APF to refuse the user's discovery of Kueue",
        Duration::from_secs(30),
        || {
            let raw = raw.clone();
            async move {
                let out = kubectl()
                    .env("KUBECONFIG", &raw)
                    .args(["get", "--raw", "/apis/kueue.x-k8s.io"])
                    .output()
                    .ok()?;
                let said = String::from_utf8_lossy(&out.stderr).to_lowercase();
                (!out.status.success() && said.contains("too many")).then_some(())
            }
        },
    )
    .await;
    // The leader goes; a new one starts into a server that refuses it
    // Kueue's discovery. The queued job is there before it.
    env.operator.kill();
    // 3 workers of 1 cpu on a 2-cpu queue: Kueue never admits it, so it
    // must stay held for good.
    env.submit("queued", 3, None).await;
    let mut operator = Operator::start_with(&env.ns, &[], Some(kubeconfig));
    let port = operator.probe_port;
    let why = wait_until(
        &format!(
            "/readyz to say why it is not ready (log: {})",
            operator.log.display()
        ),
        Duration::from_secs(60),
        || async move {
            http_get(port, "/readyz").filter(|(code, body)| {
                *code == 503
                    && body.contains(
                        "kueue: auto, could not ask the API server for kueue.x-k8s.io/v1beta2 Workloads",
                    )
            })
        },
    )
    .await;
    // The error itself: APF's 429, or the request's deadline when the
    // client kept following APF's Retry-After.
    assert!(why.1.contains("(attempt "), "{}", why.1);
    let refused_since = Instant::now();
    while refused_since.elapsed() < REFUSED_FOR {
        assert!(
            env.job_pods("queued").await.is_empty(),
            "a Pod while Kueue's API could not be asked (log: {})",
            operator.log.display()
        );
        let (code, body) = http_get(port, "/readyz").unwrap_or_default();
        assert_ne!(code, 200, "ready without an answer: {body}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    refused.delete();
    operator.wait_ready().await;
    let (_, body) = http_get(port, "/readyz").expect("/readyz");
    assert!(
        body.contains("kueue: auto, kueue.x-k8s.io/v1beta2 Workloads served"),
        "{body}"
    );
    env.operator = operator;
    env.wait_held("queued").await;
    env.assert_never_started("queued").await;
}

/// Kueue's two kinds the operator reads, without a schema: served is all
/// discovery asks.
fn kueue_crds() -> String {
    let crd = |plural: &str, kind: &str, scope: &str| {
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata: {{name: {plural}.kueue.x-k8s.io}}\nspec:\n  group: kueue.x-k8s.io\n\
             \x20 names: {{plural: {plural}, kind: {kind}}}\n  scope: {scope}\n  versions:\n\
             \x20 - name: v1beta2\n    served: true\n    storage: true\n    subresources: {{status: {{}}}}\n\
             \x20   schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n"
        )
    };
    format!(
        "{}---\n{}",
        crd("workloads", "Workload", "Namespaced"),
        crd("resourceflavors", "ResourceFlavor", "Cluster")
    )
}

/// A one-worker job labelled with a queue.
fn queued_job(name: &str, ns: &str) -> TFJob {
    let mut job = TfJobFixture::new(name).workers(1).namespace(ns).build();
    job.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("kueue.x-k8s.io/queue-name".into(), "queue".into());
    job
}

async fn job_pods(pods: &Api<Pod>, name: &str) -> usize {
    let lp = ListParams::default().labels(&format!("training.kubeflow.org/job-name={name}"));
    pods.list(&lp)
        .await
        .map(|l| l.items.len())
        .unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn kueue_installed_after_the_operator_started_is_found_and_queued_jobs_are_held() {
    let _cluster = exclusive_cluster().await;
    let client = client().await;
    let installed = kubectl()
        .args(["get", "crd", "workloads.kueue.x-k8s.io"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        eprintln!("skipping: Kueue's CRDs are installed already");
        return;
    }
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "kueue-later").await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut operator = Operator::start(&ns);
    operator.wait_ready().await;
    let port = operator.probe_port;
    let (_, body) = http_get(port, "/readyz").expect("/readyz");
    assert!(
        body.contains("kueue: auto, no kueue.x-k8s.io Workloads served"),
        "{body}"
    );
    // Without Kueue the queue label is ignored: the job runs.
    jobs.create(&PostParams::default(), &queued_job("early", &ns))
        .await
        .expect("create early");
    wait_until("early's Pod", Duration::from_secs(60), || async {
        (job_pods(&pods, "early").await > 0).then_some(())
    })
    .await;

    let crds = Applied::new(kueue_crds());
    let log = operator.log.display().to_string();
    wait_until(
        &format!("Kueue to be found after the start (log: {log})"),
        Duration::from_secs(60),
        || async move {
            http_get(port, "/readyz").filter(|(code, body)| {
                *code == 200
                    && body.contains("Workloads served")
                    && body.contains("(found after the start)")
            })
        },
    )
    .await;
    // The running queued job gets its Workload and is stopped, as Kueue
    // stops a job that runs without an admitted Workload.
    let workloads = crate::kueue::kueue_api(&client, "Workload", "workloads", Some(&ns));
    wait_until(
        &format!("early to be stopped and held with a Workload (log: {log})"),
        Duration::from_secs(60),
        || async {
            let job = jobs.get_opt("early").await.ok().flatten()?;
            let reason = job_condition_reason(&job, "Suspended")?;
            let has_workload = !workloads
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty();
            (reason == "TFJobQueued" && has_workload && job_pods(&pods, "early").await == 0)
                .then_some(())
        },
    )
    .await;
    // A job queued now never starts: nothing admits it.
    jobs.create(&PostParams::default(), &queued_job("late", &ns))
        .await
        .expect("create late");
    wait_until("late to be held", Duration::from_secs(60), || async {
        let job = jobs.get_opt("late").await.ok().flatten()?;
        (job_condition_reason(&job, "Suspended").as_deref() == Some("TFJobQueued")).then_some(())
    })
    .await;
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(10) {
        assert_eq!(
            job_pods(&pods, "late").await,
            0,
            "late ran unadmitted (log: {log})"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let late = jobs.get("late").await.expect("late");
    assert_ne!(
        late.spec.run_policy.suspend,
        Some(true),
        "held without writing its spec"
    );

    // The operator removes Kueue's finalizer from the Workloads of deleted
    // jobs; then the CRDs can go.
    jobs.delete_collection(&Default::default(), &ListParams::default())
        .await
        .expect("delete the jobs");
    wait_until(
        "the Workloads to be gone",
        Duration::from_secs(60),
        || async {
            workloads
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    drop(operator);
    crds.delete();
    delete_namespace(&client, &ns).await;
}
