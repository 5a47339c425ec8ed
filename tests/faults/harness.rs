//! What every fault scenario shares: the seed and round count, operator
//! identities (each operator process gets its own client certificate, so the
//! audit log tells them apart and APF can single it out), the operator's
//! metrics and log, and small job helpers.
#![allow(dead_code)] // Each scenario uses a different subset.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tfjob_operator::api::fixtures::TfJobFixture;
use tfjob_operator::api::types::TFJob;
use tokio::sync::OnceCell;

use crate::cluster::{
    cluster_dir, cluster_env, delete_namespace_in_background, kubectl, run_ok, wait_until,
};
use crate::operator::Operator;
use crate::support::{EXIT_CODE_ANNOTATION, EXIT_CONTAINER_ANNOTATION};

/// The group every operator identity of this suite is in: the audit policy
/// logs all of its requests, and one ClusterRoleBinding makes it cluster-admin.
/// Deliberately not `system:masters`, which APF exempts from all limits.
pub const GROUP: &str = "tfjob-faults";

const DEFAULT_SEED: u64 = 20;
const DEFAULT_ROUNDS: usize = 3;

/// `FAULT_SEED` (default 20).
pub fn seed() -> u64 {
    std::env::var("FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED)
}

/// `FAULT_ROUNDS` (default 3: the `make test` subset), at least `min`.
pub fn rounds(min: usize) -> usize {
    std::env::var("FAULT_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS)
        .max(min)
}

/// `FAULT_FULL=1`: `make test-faults`, which adds the long scenarios.
pub fn full() -> bool {
    std::env::var("FAULT_FULL").is_ok_and(|v| v == "1")
}

/// A seeded RNG for `scenario`; prints the seed once so a failure can be re-run.
pub fn rng(scenario: &str) -> StdRng {
    static PRINTED: AtomicBool = AtomicBool::new(false);
    let seed = seed();
    if !PRINTED.swap(true, Ordering::Relaxed) {
        eprintln!("fault suite: FAULT_SEED={seed} FAULT_ROUNDS={}", rounds(1));
    }
    // One stream per scenario, so adding a scenario does not shift the others.
    let salt = scenario.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    StdRng::seed_from_u64(seed ^ salt)
}

/// Prints a result line: `FAULT-RESULT <scenario> key=value ...`, and with
/// `FAULT_RESULTS_DIR` set (`FAULT_RECORD=<name> make test-faults`, see
/// e2e/run-suite.sh) also writes the figures to `<dir>/<scenario>.json`,
/// which the recorder wraps into `benches/results/<name>.json` after a run
/// that passed. Called before a scenario's assertions, so a failing
/// scenario's figures are printed too; the recorder keeps none of a failed run.
pub fn report(scenario: &str, fields: &[(&str, String)]) {
    let line: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    eprintln!("FAULT-RESULT {scenario} seed={} {}", seed(), line.join(" "));
    if let Some(dir) = std::env::var_os("FAULT_RESULTS_DIR").filter(|d| !d.is_empty()) {
        let path = PathBuf::from(dir).join(format!("{scenario}.json"));
        let text = serde_json::to_string_pretty(&result_json(scenario, fields))
            .expect("a JSON object serializes");
        std::fs::write(&path, text + "\n")
            .unwrap_or_else(|e| panic!("FAULT_RESULTS_DIR: writing {}: {e}", path.display()));
    }
}

/// One scenario's figures as JSON: numbers and booleans typed, the rest
/// (lists, `never`, flags) as text, with the run's seed and rounds.
pub fn result_json(scenario: &str, fields: &[(&str, String)]) -> serde_json::Value {
    let mut doc = serde_json::Map::new();
    doc.insert("scenario".into(), scenario.into());
    doc.insert("seed".into(), seed().into());
    doc.insert("rounds_setting".into(), rounds(1).into());
    doc.insert("full".into(), full().into());
    for (k, v) in fields {
        let typed = match v.as_str() {
            "true" => serde_json::Value::Bool(true),
            "false" => serde_json::Value::Bool(false),
            _ => v
                .parse::<u64>()
                .map(serde_json::Value::from)
                .or_else(|_| v.parse::<f64>().map(serde_json::Value::from))
                .ok()
                .filter(|n| !n.is_null())
                .unwrap_or_else(|| v.as_str().into()),
        };
        doc.insert((*k).to_owned(), typed);
    }
    serde_json::Value::Object(doc)
}

/// The API server's address (127.0.0.1:port).
pub fn apiserver_addr() -> SocketAddr {
    let url = cluster_env("KUBE_APISERVER_URL").expect("KUBE_APISERVER_URL in the cluster env");
    url.trim_start_matches("https://")
        .trim_end_matches('/')
        .parse()
        .expect("the API server URL is 127.0.0.1:port")
}

static RBAC: OnceCell<()> = OnceCell::const_new();

/// Binds [`GROUP`] to cluster-admin (once).
async fn ensure_rbac() {
    RBAC.get_or_init(|| async {
        let binding = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: {GROUP}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
             subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: Group, name: {GROUP}}}]\n"
        );
        apply_yaml(&binding);
    })
    .await;
}

/// `kubectl apply -f -` with `yaml`; panics when it fails.
pub fn apply_yaml(yaml: &str) -> String {
    kubectl_stdin(&["apply", "-f", "-"], yaml).unwrap_or_else(|e| panic!("kubectl apply: {e}"))
}

/// Runs kubectl with `stdin`; Ok(stdout) or Err(stderr).
pub fn kubectl_stdin(args: &[&str], stdin: &str) -> Result<String, String> {
    use std::io::Write;
    let mut child = kubectl()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write to kubectl");
    let out = child.wait_with_output().expect("kubectl finishes");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// An operator identity: user `name` in [`GROUP`], with a kubeconfig that
/// points at `server` (the API server, or a fault proxy in front of it).
pub async fn identity(name: &str, server: SocketAddr) -> PathBuf {
    ensure_rbac().await;
    // Under pki/, which `cluster.sh down` removes: a new cluster has a new CA,
    // and a certificate signed by the old one would be refused (401).
    let dir = cluster_dir().join("pki/faults");
    std::fs::create_dir_all(&dir).expect("the faults dir");
    let pki = cluster_dir().join("pki");
    let key = dir.join(format!("{name}.key"));
    let crt = dir.join(format!("{name}.crt"));
    if !crt.exists() {
        let csr = dir.join(format!("{name}.csr"));
        let ext = dir.join(format!("{name}.ext"));
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
                .args(["-subj", &format!("/O={GROUP}/CN={name}"), "-out"])
                .arg(&csr),
        );
        // An X.509 v3 certificate (an extension file): rustls refuses v1.
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
                .args(["-CAcreateserial", "-days", "2", "-sha256", "-extfile"])
                .arg(&ext)
                .arg("-out")
                .arg(&crt),
        );
    }
    let kubeconfig = dir.join(format!("{name}-{}.kubeconfig", server.port()));
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{server}\n    certificate-authority: {}\n\
         users:\n- name: {name}\n  user:\n    client-certificate: {}\n    client-key: {}\n\
         contexts:\n- name: c\n  context: {{cluster: c, user: {name}}}\ncurrent-context: c\n",
        pki.join("ca.crt").display(),
        crt.display(),
        key.display()
    );
    std::fs::write(&kubeconfig, text).expect("the identity's kubeconfig");
    kubeconfig
}

/// Sum of the samples of metric `name` whose labels contain every `label`
/// (`key="value"`), from Prometheus text.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|want| rest.contains(want)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Lines of an operator log at ERROR level.
pub fn error_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(" ERROR ") || l.contains("\"level\":\"ERROR\""))
        .map(str::to_owned)
        .collect()
}

pub fn jobs(client: &Client, ns: &str) -> Api<TFJob> {
    Api::namespaced(client.clone(), ns)
}

pub fn pods(client: &Client, ns: &str) -> Api<Pod> {
    Api::namespaced(client.clone(), ns)
}

pub async fn create_job(client: &Client, ns: &str, fixture: TfJobFixture) -> TFJob {
    let job = fixture.namespace(ns).build();
    jobs(client, ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap_or_else(|e| panic!("failed to create TFJob {ns}/{}: {e}", job.name_any()))
}

/// The job's finished condition (`Succeeded` / `Failed`), if any.
pub fn finished(job: &TFJob) -> Option<String> {
    job.status.as_ref()?.conditions.iter().find_map(|c| {
        ((c.type_ == "Succeeded" || c.type_ == "Failed") && c.status == "True")
            .then(|| c.type_.clone())
    })
}

/// Whether condition `type_` is True.
pub fn has_condition(job: &TFJob, type_: &str) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// Waits until every job in `ns` named in `names` is finished; returns name -> job.
pub async fn wait_finished(
    client: &Client,
    ns: &str,
    names: &[String],
    timeout: Duration,
) -> BTreeMap<String, TFJob> {
    let api = jobs(client, ns);
    wait_until(
        &format!("{} jobs in {ns} to finish", names.len()),
        timeout,
        || async {
            let list = api.list(&ListParams::default()).await.ok()?;
            let done: BTreeMap<String, TFJob> = list
                .items
                .into_iter()
                .filter(|j| finished(j).is_some())
                .map(|j| (j.name_any(), j))
                .collect();
            names.iter().all(|n| done.contains_key(n)).then_some(done)
        },
    )
    .await
}

/// Whether `pod` runs (KWOK made it Running).
pub fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Makes KWOK end the `tensorflow` container of the Pod named `pod` with
/// `code`: waits until a Running Pod of that name exists whose UID is not in
/// `done`, annotates it (with its UID as precondition), and waits until that
/// Pod shows the exit — or is gone or replaced (the operator may delete a
/// failed Pod at once). Returns the UID it ended. Unlike
/// `support::drive_pod_exit` it tolerates the Pod vanishing, which an
/// `ExitCode` restart does on purpose. `annotated` is notified as soon as
/// the annotation is written (KWOK and then the operator act within ms).
pub async fn end_pod(
    client: &Client,
    ns: &str,
    pod: &str,
    code: i32,
    done: &[String],
    timeout: Duration,
    annotated: Option<&tokio::sync::Notify>,
) -> String {
    let api = pods(client, ns);
    let target = wait_until(
        &format!("a new Running Pod {ns}/{pod}"),
        timeout,
        || async {
            let p = api.get_opt(pod).await.ok().flatten()?;
            let uid = p.uid()?;
            (running(&p) && p.metadata.deletion_timestamp.is_none() && !done.contains(&uid))
                .then_some((uid, restart_count(&p)))
        },
    )
    .await;
    let (uid, restarts_before) = target;
    let patch = serde_json::json!({ "metadata": {
        "uid": uid,
        "annotations": {
            EXIT_CODE_ANNOTATION: code.to_string(),
            EXIT_CONTAINER_ANNOTATION: "tensorflow",
        }
    }});
    if let Err(e) = api
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        panic!("failed to annotate {ns}/{pod} ({uid}): {e}");
    }
    if let Some(annotated) = annotated {
        annotated.notify_waiters();
    }
    wait_until(
        &format!("{ns}/{pod} ({uid}) to exit {code}"),
        timeout,
        || async {
            let Ok(p) = api.get_opt(pod).await else {
                return None;
            };
            let Some(p) = p else {
                return Some(());
            };
            if p.uid().as_deref() != Some(uid.as_str()) {
                return Some(());
            }
            let terminated = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .any(|c| {
                    let now = c.state.as_ref().and_then(|s| s.terminated.as_ref());
                    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                    now.is_some_and(|t| t.exit_code == code)
                        || (c.restart_count > restarts_before
                            && last.is_some_and(|t| t.exit_code == code))
                });
            terminated.then_some(())
        },
    )
    .await;
    uid
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .sum()
}

/// p-th percentile (0..=100) of `values`, nearest rank.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

/// An operator process restarted when it exits, as a kubelet would restart
/// its container: a fault may make it give up by design (a lost Lease).
pub struct Supervised {
    ns: String,
    /// Watch every namespace (no `--namespace`), Lease in `ns`.
    all_namespaces: bool,
    kubeconfig: std::path::PathBuf,
    args: Vec<&'static str>,
    pub operator: Operator,
    pub restarts: usize,
    pub logs: Vec<std::path::PathBuf>,
}

impl Supervised {
    /// One namespace, Lease in it.
    pub fn start(ns: &str, kubeconfig: std::path::PathBuf) -> Self {
        Self::launch(ns, false, kubeconfig, Vec::new())
    }

    /// [`Supervised::start`] or [`Supervised::start_all_namespaces`] with extra flags.
    pub fn start_with(
        ns: &str,
        all_namespaces: bool,
        kubeconfig: std::path::PathBuf,
        args: Vec<&'static str>,
    ) -> Self {
        Self::launch(ns, all_namespaces, kubeconfig, args)
    }

    /// Every namespace, as the chart runs it; the Lease in `lease_ns`.
    pub fn start_all_namespaces(lease_ns: &str, kubeconfig: std::path::PathBuf) -> Self {
        Self::launch(lease_ns, true, kubeconfig, Vec::new())
    }

    fn launch(
        ns: &str,
        all_namespaces: bool,
        kubeconfig: std::path::PathBuf,
        args: Vec<&'static str>,
    ) -> Self {
        let operator = Self::spawn(ns, all_namespaces, &kubeconfig, &args);
        Self {
            ns: ns.to_owned(),
            all_namespaces,
            args,
            logs: vec![operator.log.clone()],
            kubeconfig,
            operator,
            restarts: 0,
        }
    }

    fn spawn(
        ns: &str,
        all_namespaces: bool,
        kubeconfig: &std::path::Path,
        args: &[&str],
    ) -> Operator {
        if all_namespaces {
            Operator::start_all_namespaces(ns, args, Some(kubeconfig.to_owned()))
        } else {
            Operator::start_with(ns, args, Some(kubeconfig.to_owned()))
        }
    }

    pub fn keep_alive(&mut self) {
        if self.operator.exited() {
            self.operator =
                Self::spawn(&self.ns, self.all_namespaces, &self.kubeconfig, &self.args);
            self.logs.push(self.operator.log.clone());
            self.restarts += 1;
        }
    }

    /// Where the supervised operators' logs are now: later text of this
    /// process and the whole log of every process started after it.
    pub fn log_mark(&self) -> LogMark {
        LogMark {
            process: self.logs.len() - 1,
            offset: self.operator.log_text().len(),
        }
    }

    /// What every process of this operator logged since `mark`, in order: a
    /// restart (e.g. after a lost lease) does not hide what came before it.
    pub fn log_since(&self, mark: &LogMark) -> String {
        let mut text = String::new();
        for (i, path) in self.logs.iter().enumerate().skip(mark.process) {
            let log = std::fs::read_to_string(path).unwrap_or_default();
            let from = if i == mark.process { mark.offset } else { 0 };
            text.push_str(log.get(from..).unwrap_or_default());
        }
        text
    }

    pub fn reconciles(&self) -> f64 {
        metric(
            &self.operator.metrics(),
            "controller_runtime_reconcile_total",
            &[],
        )
    }
}

/// A place in a [`Supervised`] operator's logs.
pub struct LogMark {
    process: usize,
    offset: usize,
}

/// Deletes the scenario's namespaces when it ends, unless it failed: a failed
/// scenario's objects stay for the post-mortem (with its operator logs in
/// `<cluster dir>/logs`). Also keeps an all-namespaces operator of a later
/// scenario from adopting an earlier scenario's jobs.
pub struct Cleanup(pub Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept namespaces {:?} for the post-mortem", self.0);
            return;
        }
        for ns in &self.0 {
            delete_namespace_in_background(ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_the_nearest_rank() {
        let v = [15.4, 18.8, 16.0, 17.1, 15.9];
        assert_eq!(percentile(&v, 50.0), 16.0);
        assert_eq!(percentile(&v, 95.0), 18.8);
    }

    #[test]
    fn metric_sums_the_matching_series() {
        let text = "# HELP x\nreconcile_total{controller=\"tfjob\",result=\"success\"} 3\n\
                    reconcile_total{controller=\"tfjob\",result=\"error\"} 2\nother_total 9\n";
        assert_eq!(metric(text, "reconcile_total", &[]), 5.0);
        assert_eq!(metric(text, "reconcile_total", &["result=\"error\""]), 2.0);
        assert_eq!(metric(text, "other_total", &[]), 9.0);
    }

    #[test]
    fn a_scenarios_figures_are_typed_json_numbers_where_they_are_numbers() {
        let doc = result_json(
            "x",
            &[
                ("count", "3".to_owned()),
                ("p95_s", "15.2".to_owned()),
                ("kept", "true".to_owned()),
                ("noticed_s", "never".to_owned()),
                ("per_second", "[1,2]".to_owned()),
            ],
        );
        assert_eq!(doc["scenario"], "x");
        assert_eq!(doc["count"], 3);
        assert_eq!(doc["p95_s"], 15.2);
        assert_eq!(doc["kept"], true);
        assert_eq!(doc["noticed_s"], "never");
        assert_eq!(doc["per_second"], "[1,2]");
        assert_eq!(doc["seed"], seed());
    }
}
