//! The Helm chart against the real API server: it installs and creates every
//! object it renders, its pods pass the `restricted` Pod Security Standard,
//! its values files render objects the server accepts, and its RBAC is both
//! sufficient (the operator binary, running out of the cluster *as the
//! chart's ServiceAccount*, takes an example job to Succeeded) and not
//! excessive (the same identity is refused Secrets and pods/exec).
//!
//! There is no image registry here, so the in-cluster Deployment either runs
//! zero replicas or is "run" by KWOK (fake containers that do nothing); the
//! operator under test is always the freshly built binary.
//!
//! What these tests must never do: leave a release behind when they pass
//! (cluster-scoped RBAC outlives the test namespace; a [`Release`] guard
//! uninstalls it), or install a second owner of the CRD (only
//! `helm_install_creates_every_object_the_chart_renders` lets the chart
//! install it; the others set `crd.install=false`). Each holds
//! `support::shared_cluster` throughout, so no other test restarts the API
//! server under it.
//!
//! Mirrors: helm/chart-testing's `ct install` (install, wait, test,
//! uninstall) and the RBAC checks of kubernetes/kubernetes
//! `test/e2e/auth` (`SubjectAccessReview`s for a ServiceAccount).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::Deserialize;
use tfjob_operator::api::types::TFJob;

use crate::cluster::{client, cluster_dir, helm, kubectl, run_ok, test_namespace, wait_until};
use crate::examples::{apply_example, wait_pods_running};
use crate::operator::{Operator, ensure_crd};
use crate::support::{
    CHART, EXIT_CODE_ANNOTATION, client_with_token, drive_pod_exit, kube_version, shared_cluster,
    wait_condition,
};

mod metrics_auth;
mod render;

/// An installed release; uninstalled on drop, so a passing test leaves no
/// cluster-scoped objects behind (and a failing one usually does not either).
struct Release {
    name: String,
    namespace: String,
    uninstalled: bool,
}

impl Release {
    /// `helm install <name> charts/tfjob-operator -n <ns> <args>`.
    fn install(namespace: &str, args: &[&str]) -> Self {
        let name = format!("e2e-{}", crate::cluster::random_suffix());
        run_ok(
            helm()
                .args(["install", &name, CHART.as_str(), "--namespace", namespace])
                .args(args),
        );
        Self {
            name,
            namespace: namespace.to_owned(),
            uninstalled: false,
        }
    }

    /// What the release installed (`helm get manifest`), one YAML document per object.
    fn manifest(&self) -> String {
        run_ok(helm().args([
            "get",
            "manifest",
            &self.name,
            "--namespace",
            &self.namespace,
        ]))
    }

    fn objects(&self) -> Vec<ObjectRef> {
        objects_in(&self.manifest())
    }

    /// The ServiceAccount the chart made for the operator.
    fn service_account(&self) -> String {
        self.objects()
            .into_iter()
            .find(|o| o.kind == "ServiceAccount")
            .map(|o| o.name)
            .expect("the chart renders a ServiceAccount")
    }

    fn uninstall(&mut self) {
        run_ok(helm().args([
            "uninstall",
            &self.name,
            "--namespace",
            &self.namespace,
            "--wait",
        ]));
        self.uninstalled = true;
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if !self.uninstalled {
            let _ = helm()
                .args(["uninstall", &self.name, "--namespace", &self.namespace])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Kind, name and namespace of one rendered object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ObjectRef {
    kind: String,
    name: String,
    namespace: Option<String>,
}

#[derive(Deserialize)]
struct Head {
    kind: String,
    metadata: HeadMeta,
}

#[derive(Deserialize)]
struct HeadMeta {
    name: String,
    namespace: Option<String>,
}

/// The objects in a multi-document manifest (empty documents skipped).
fn objects_in(manifest: &str) -> Vec<ObjectRef> {
    let mut objects: Vec<ObjectRef> = serde_yaml::Deserializer::from_str(manifest)
        .filter_map(|doc| {
            let value = serde_yaml::Value::deserialize(doc).expect("valid YAML from helm");
            if value.is_null() {
                return None;
            }
            let head: Head = serde_yaml::from_value(value).expect("an object with kind and name");
            Some(ObjectRef {
                kind: head.kind,
                name: head.metadata.name,
                namespace: head.metadata.namespace,
            })
        })
        .collect();
    objects.sort();
    objects
}

fn kinds(objects: &[ObjectRef]) -> Vec<&str> {
    let mut kinds: Vec<&str> = objects.iter().map(|o| o.kind.as_str()).collect();
    kinds.dedup();
    kinds
}

/// Writes a kubeconfig for the local API server that authenticates with
/// `token` (and nothing else), as a user would for a ServiceAccount.
fn token_kubeconfig(namespace: &str, token: &str) -> PathBuf {
    let admin = run_ok(kubectl().args(["config", "view", "--minify", "--raw", "--flatten"]));
    let mut config: serde_yaml::Value = serde_yaml::from_str(&admin).expect("a kubeconfig");
    let user = serde_yaml::to_value(serde_json::json!({ "token": token })).expect("a user");
    let users = config["users"].as_sequence_mut().expect("kubeconfig users");
    assert_eq!(users.len(), 1, "--minify leaves one user");
    users[0]["name"] = "service-account".into();
    users[0]["user"] = user;
    let contexts = config["contexts"]
        .as_sequence_mut()
        .expect("kubeconfig contexts");
    contexts[0]["context"]["user"] = "service-account".into();
    let path = cluster_dir().join(format!("kubeconfig-{namespace}-serviceaccount"));
    std::fs::write(&path, serde_yaml::to_string(&config).expect("YAML"))
        .expect("failed to write the token kubeconfig");
    path
}

/// A short-lived token for the ServiceAccount (TokenRequest API, via kubectl).
fn service_account_token(namespace: &str, account: &str) -> String {
    run_ok(kubectl().args(["create", "token", account, "-n", namespace, "--duration=1h"]))
        .trim()
        .to_owned()
}

/// Enforces the restricted Pod Security Standard in `namespace`: the API
/// server refuses Pods unless they run as non-root with every capability
/// dropped, no privilege escalation and the RuntimeDefault seccomp profile.
async fn enforce_restricted(client: &Client, namespace: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let restricted = serde_json::json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    } } });
    namespaces
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(&restricted),
        )
        .await
        .expect("failed to label the namespace");
}

/// Every container of `pod` runs as the `restricted` Pod Security Standard
/// asks, with a read-only root filesystem besides: non-root, seccomp
/// `RuntimeDefault`, no privilege escalation, every capability dropped.
fn assert_hardened(pod: &Pod) {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let spec = pod.spec.as_ref().expect("a Pod spec");
    let pod_context = spec.security_context.clone().unwrap_or_default();
    assert_eq!(
        pod_context.run_as_non_root,
        Some(true),
        "{name}: runAsNonRoot"
    );
    assert!(
        pod_context.run_as_user.is_some_and(|uid| uid != 0),
        "{name}: a non-zero runAsUser"
    );
    assert_eq!(
        pod_context.seccomp_profile.map(|p| p.type_).as_deref(),
        Some("RuntimeDefault"),
        "{name}: seccomp profile"
    );
    for container in &spec.containers {
        let what = format!("{name}/{}", container.name);
        let context = container.security_context.clone().unwrap_or_default();
        assert_eq!(
            context.read_only_root_filesystem,
            Some(true),
            "{what}: readOnlyRootFilesystem"
        );
        assert_eq!(
            context.allow_privilege_escalation,
            Some(false),
            "{what}: allowPrivilegeEscalation"
        );
        assert_ne!(context.privileged, Some(true), "{what}: privileged");
        let drop = context.capabilities.and_then(|c| c.drop);
        assert_eq!(
            drop,
            Some(vec!["ALL".to_owned()]),
            "{what}: capabilities.drop"
        );
    }
}

/// One `SelfSubjectAccessReview`: may the client's identity do this?
async fn can(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource: subresource.map(str::to_owned),
                namespace: namespace.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("failed to create a SelfSubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

/// The HTTP status the API server answers `client` for `POST pods/<pod>/exec`.
/// Authorization comes before everything else (even the missing WebSocket
/// upgrade and whether the Pod exists), so a 403 here is RBAC speaking.
async fn exec_status(client: &Client, namespace: &str, pod: &str) -> u16 {
    let request = kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/pods"))
        .create_subresource("exec", pod, &PostParams::default(), Vec::new())
        .expect("an exec request");
    match client.request_text(request).await {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("POST pods/{pod}/exec failed without an API status: {e}"),
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn helm_install_creates_every_object_the_chart_renders() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let client = client().await;
    let ns = test_namespace(&client, "helm-install").await;
    enforce_restricted(&client, &ns).await;

    // The CRD may already be there (other tests apply crds/ with kubectl):
    // --take-ownership lets this release adopt it, as a user replacing a
    // kubectl-installed CRD would. The chart's copy is identical to crds/.
    let mut release = Release::install(&ns, &["--take-ownership"]);
    let objects = release.objects();
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ],
        "the default values render every kind the issue lists"
    );

    // Every rendered object exists (kubectl get fails on the first missing one).
    let manifest = cluster_dir().join(format!("manifest-{ns}.yaml"));
    std::fs::write(&manifest, release.manifest()).expect("failed to write the manifest");
    let found = run_ok(
        kubectl()
            .args(["get", "-n", &ns, "-o", "name", "-f"])
            .arg(&manifest),
    );
    assert_eq!(
        found.lines().count(),
        objects.len(),
        "kubectl get found:\n{found}"
    );

    // KWOK "runs" both replicas (no real container): the Pods were admitted
    // under `restricted` and became Ready on the probes' schedule.
    let deployment_name = objects
        .iter()
        .find(|o| o.kind == "Deployment")
        .map(|o| o.name.clone())
        .expect("a Deployment");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    wait_until(
        "the operator Deployment to have 2 available replicas",
        Duration::from_secs(90),
        || async {
            let d = deployments.get(&deployment_name).await.ok()?;
            let available = d.status?.available_replicas.unwrap_or(0);
            (available == 2).then_some(())
        },
    )
    .await;

    // What admission let through is what the chart renders: every hardening
    // field, checked on the live Pods (restricted does not require a
    // read-only root filesystem, so that one is ours alone to keep).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = format!("app.kubernetes.io/instance={}", release.name);
    let operator_pods = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("failed to list the operator's Pods");
    assert_eq!(operator_pods.items.len(), 2, "{selector}");
    for pod in &operator_pods.items {
        assert_hardened(pod);
    }

    // The disruption controller counts both replicas under the budget (its
    // selector matches the Deployment's Pods), so a drain may evict one.
    let budget_name = objects
        .iter()
        .find(|o| o.kind == "PodDisruptionBudget")
        .map(|o| o.name.clone())
        .expect("a PodDisruptionBudget");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    wait_until(
        "the PodDisruptionBudget to count 2 healthy replicas and allow 1 disruption",
        Duration::from_secs(60),
        || async {
            let status = budgets.get(&budget_name).await.ok()?.status?;
            (status.current_healthy == 2 && status.disruptions_allowed == 1).then_some(())
        },
    )
    .await;

    // Uninstall removes the release's objects, cluster-scoped ones included,
    // but keeps the CRD (deleting it would delete every TFJob in the cluster).
    release.uninstall();
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let role = objects
        .iter()
        .find(|o| o.kind == "ClusterRole")
        .map(|o| o.name.clone())
        .expect("a ClusterRole");
    assert!(cluster_roles.get_opt(&role).await.expect("get").is_none());
    assert!(
        deployments
            .get_opt(&deployment_name)
            .await
            .expect("get")
            .is_none()
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.get_opt("tfjobs.kubeflow.org")
            .await
            .expect("get")
            .is_some(),
        "helm.sh/resource-policy: keep leaves the CRD installed"
    );
}

/// `helm test <release>` with a deadline; its output, or its failure.
fn helm_test(release: &Release) -> Result<String, String> {
    let out = helm()
        .args(["test", &release.name, "--namespace", &release.namespace])
        .args(["--timeout", "60s"])
        .output()
        .expect("failed to run helm test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn helm_test_creates_its_pod_under_restricted_and_reports_the_pods_outcome() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "helm-test").await;
    enforce_restricted(&client, &ns).await;
    // KWOK runs nothing: the annotation its stages act on (e2e/kwok/stages.yaml)
    // makes it end the test Pod with exit code 0 once it is Running.
    let exit_0 = format!(r#"test.podAnnotations={{"{EXIT_CODE_ANNOTATION}":"0"}}"#);
    let mut release = Release::install(
        &ns,
        &[
            "--set",
            "crd.install=false",
            "--set-json",
            &exit_0,
            "--wait",
        ],
    );
    let passed = helm_test(&release).unwrap_or_else(|out| panic!("helm test failed:\n{out}"));
    assert!(passed.contains("Succeeded"), "{passed}");

    // The Pod was created in the restricted namespace (so admitted), hardened,
    // ended Succeeded, and stays for `helm test --logs`. No ReplicaSet adopted it.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let selector = format!(
        "app.kubernetes.io/instance={},app.kubernetes.io/component=test",
        release.name
    );
    let test_pods = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .expect("failed to list the test Pods");
    assert_eq!(test_pods.items.len(), 1, "{selector}");
    let pod = &test_pods.items[0];
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
    assert_hardened(pod);
    assert!(
        pod.metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty),
        "the test Pod was adopted: {:?}",
        pod.metadata.owner_references
    );

    // The same test with a Pod that fails: helm test fails. So it is the
    // Pod's outcome, which on a real cluster is the probe's, that it reports.
    let exit_1 = format!(r#"test.podAnnotations={{"{EXIT_CODE_ANNOTATION}":"1"}}"#);
    run_ok(helm().args([
        "upgrade",
        &release.name,
        CHART.as_str(),
        "--namespace",
        &ns,
        "--reuse-values",
        "--set-json",
        &exit_1,
    ]));
    let failed = helm_test(&release).expect_err("helm test passed with a failing test Pod");
    assert!(failed.contains("failed"), "{failed}");
    let pod = pods
        .get(pod.metadata.name.as_deref().expect("a name"))
        .await
        .expect("the re-created test Pod");
    assert_eq!(pod.status.and_then(|s| s.phase).as_deref(), Some("Failed"));
    release.uninstall();
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn chart_values_files_render_objects_the_api_server_accepts() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "helm-values").await;

    let ci = Path::new(CHART.as_str()).join("ci");
    let mut values: Vec<Option<PathBuf>> = vec![None];
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ci)
        .expect("the chart's ci/ directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with("-values.yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no ci/*-values.yaml files");
    values.extend(files.into_iter().map(Some));

    for file in values {
        let mut template = helm();
        template
            .args(["template", "e2e-values", CHART.as_str(), "--namespace", &ns])
            .args(["--kube-version", kube_version()])
            // The watched namespace must exist for the server to accept a Role in it.
            .args(["--set", &format!("watchNamespace={ns}")]);
        if let Some(file) = &file {
            template.arg("--values").arg(file);
        }
        let rendered = run_ok(&mut template);
        // No Prometheus Operator here: its CRDs (ServiceMonitor,
        // PrometheusRule) are unknown. `make rules-check` checks the rendered rules.
        let docs: Vec<&str> = rendered
            .split("\n---")
            .filter(|d| {
                !d.contains("\nkind: ServiceMonitor") && !d.contains("\nkind: PrometheusRule")
            })
            .collect();
        let out_file = cluster_dir().join(format!("rendered-{ns}.yaml"));
        std::fs::write(&out_file, docs.join("\n---")).expect("failed to write the render");
        // Server-side apply, dry run, strict field validation: unknown or
        // misplaced fields, bad enum values and schema errors all fail here.
        // (Client-side apply would choke on the CRD: its last-applied
        // annotation exceeds the 256 KiB annotation limit.)
        let what = file
            .as_ref()
            .map_or("default values".into(), |f| f.display().to_string());
        let out = kubectl()
            .args([
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
            ])
            .args([
                "--field-manager=e2e-dry-run",
                "--validate=strict",
                "-n",
                &ns,
                "-f",
            ])
            .arg(&out_file)
            .output()
            .expect("failed to run kubectl");
        assert!(
            out.status.success(),
            "{what}: the API server refused the rendered chart:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_operator_running_as_the_chart_service_account_completes_an_example_job() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let client = client().await;
    ensure_crd(&client).await;
    let ns = test_namespace(&client, "helm-sa-run").await;
    // replicas=0: the in-cluster Deployment stays empty; the operator under
    // test is the binary, with the chart's identity. The release namespace
    // is the test namespace, so the chart's leader-election Role covers the
    // Lease the binary takes there.
    let release = Release::install(&ns, &["--set", "replicas=0", "--set", "crd.install=false"]);
    let account = release.service_account();
    let token = service_account_token(&ns, &account);
    let kubeconfig = token_kubeconfig(&ns, &token);

    let mut operator = Operator::start_with(&ns, &[], Some(kubeconfig));
    operator.wait_ready().await;
    // Two examples between them use every verb the operator has: list/watch
    // and status updates, Pod and Service creates, Events, the Lease, and
    // (the TTL) deleting a TFJob.
    apply_example(&ns, "tfjob-simple.yaml");
    apply_example(&ns, "ttl.yaml");
    let workers = ["tfjob-simple-worker-0", "tfjob-simple-worker-1"];
    wait_pods_running(&client, &ns, "tfjob-simple", &workers).await;
    wait_pods_running(&client, &ns, "ttl", &["ttl-worker-0"]).await;
    wait_condition(&client, &ns, "tfjob-simple", "Running", "True").await;
    drive_pod_exit(&client, &ns, workers[0], Some("tensorflow"), 0).await;
    drive_pod_exit(&client, &ns, "ttl-worker-0", Some("tensorflow"), 0).await;
    wait_condition(&client, &ns, "tfjob-simple", "Succeeded", "True").await;
    let jobs: Api<TFJob> = Api::namespaced(client.clone(), &ns);
    wait_until(
        "the TTL job to be deleted by the operator",
        Duration::from_secs(90),
        || async { jobs.get_opt("ttl").await.ok()?.is_none().then_some(()) },
    )
    .await;

    // The operator's Events were written (the recorder retries quietly, so
    // look for them rather than for errors in the log).
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let params = ListParams::default().fields("involvedObject.name=tfjob-simple");
    wait_until(
        "a SuccessfulCreatePod event for tfjob-simple",
        Duration::from_secs(30),
        || async {
            let list = events.list(&params).await.ok()?;
            let created = list
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("SuccessfulCreatePod"));
            created.then_some(())
        },
    )
    .await;
    // Leader election ran on the chart's Role.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let held = leases
        .list(&ListParams::default())
        .await
        .expect("failed to list Leases");
    assert!(!held.items.is_empty(), "the operator took a Lease in {ns}");
    // And nothing was refused along the way.
    let log = operator.log_text().to_lowercase();
    assert!(
        !log.contains("forbidden") && !log.contains("failed to write event"),
        "the chart's RBAC refused the operator something:\n{}",
        operator.log_text()
    );
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn the_chart_service_account_may_do_what_the_operator_needs_and_nothing_more() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let admin = client().await;
    ensure_crd(&admin).await;
    let ns = test_namespace(&admin, "helm-sa-rbac").await;
    let release = Release::install(&ns, &["--set", "replicas=0", "--set", "crd.install=false"]);
    let account = release.service_account();
    let token = service_account_token(&ns, &account);
    let sa = client_with_token(&token).await;

    // Refused for real, not just on paper: listing Secrets (here and
    // cluster-wide) and exec into a Pod answer 403.
    for secrets in [
        Api::<Secret>::namespaced(sa.clone(), &ns),
        Api::<Secret>::all(sa.clone()),
    ] {
        match secrets.list(&ListParams::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
            other => panic!("listing Secrets as the operator must be refused: {other:?}"),
        }
    }
    assert_eq!(
        exec_status(&sa, &ns, "any").await,
        403,
        "pods/exec as the operator"
    );
    // Control: the admin gets past authorization with the same request.
    assert_ne!(
        exec_status(&admin, &ns, "any").await,
        403,
        "pods/exec as admin"
    );

    // Everything the operator does is allowed in any namespace it may watch…
    let other = "some-team";
    let needed: &[(&str, &str, &str, Option<&str>)] = &[
        ("get", "kubeflow.org", "tfjobs", None),
        ("list", "kubeflow.org", "tfjobs", None),
        ("watch", "kubeflow.org", "tfjobs", None),
        ("delete", "kubeflow.org", "tfjobs", None),
        ("patch", "kubeflow.org", "tfjobs", None),
        ("update", "kubeflow.org", "tfjobs", Some("status")),
        ("update", "kubeflow.org", "tfjobs", Some("finalizers")),
        ("create", "", "pods", None),
        ("delete", "", "pods", None),
        ("patch", "", "pods", None),
        ("list", "", "pods", None),
        ("watch", "", "pods", None),
        ("create", "", "services", None),
        ("delete", "", "services", None),
        ("patch", "", "services", None),
        ("list", "", "services", None),
        ("watch", "", "services", None),
        ("create", "", "events", None),
        ("patch", "", "events", None),
    ];
    for &(verb, group, resource, sub) in needed {
        assert!(
            can(&sa, verb, group, resource, sub, Some(other)).await,
            "the operator needs {verb} {resource}/{sub:?} in {other}"
        );
    }
    // …the Lease only in its own namespace…
    // (watch: a standby takes over as soon as the leader releases it.)
    for verb in ["get", "create", "update", "watch"] {
        assert!(can(&sa, verb, "coordination.k8s.io", "leases", None, Some(&ns)).await);
        assert!(
            !can(
                &sa,
                verb,
                "coordination.k8s.io",
                "leases",
                None,
                Some(other)
            )
            .await
        );
    }
    // …and nothing else.
    let refused: &[(&str, &str, &str, Option<&str>)] = &[
        ("get", "", "secrets", None),
        ("list", "", "secrets", None),
        ("watch", "", "secrets", None),
        ("create", "", "pods", Some("exec")),
        ("create", "", "pods", Some("attach")),
        ("get", "", "pods", Some("log")),
        ("update", "", "pods", None),
        ("get", "", "configmaps", None),
        ("create", "", "serviceaccounts", Some("token")),
        ("create", "kubeflow.org", "tfjobs", None),
        ("update", "kubeflow.org", "tfjobs", None),
        ("create", "apps", "deployments", None),
        ("create", "batch", "jobs", None),
        ("create", "rbac.authorization.k8s.io", "rolebindings", None),
        ("list", "", "nodes", None),
        ("delete", "", "namespaces", None),
    ];
    for &(verb, group, resource, sub) in refused {
        assert!(
            !can(&sa, verb, group, resource, sub, Some(other)).await,
            "the operator must not {verb} {group}/{resource}/{sub:?}"
        );
    }
    drop(release);
}

#[tokio::test]
#[ignore = "needs the local control plane: make e2e"]
async fn a_single_namespace_install_grants_nothing_outside_the_watched_namespace() {
    // No API server restarts or etcd compactions from other tests meanwhile.
    let _cluster = shared_cluster().await;
    let admin = client().await;
    ensure_crd(&admin).await;
    let operator_ns = test_namespace(&admin, "helm-ns-op").await;
    let watched = test_namespace(&admin, "helm-ns-watched").await;
    let release = Release::install(
        &operator_ns,
        &[
            "--set",
            "replicas=0",
            "--set",
            "crd.install=false",
            "--set",
            &format!("watchNamespace={watched}"),
        ],
    );
    // The one cluster-wide grant is the read-only one for Kueue's
    // cluster-scoped kinds (kueue.mode auto, the default: the operator may
    // own queued jobs' Workloads; templates/kueue-rbac.yaml). Nothing else.
    let cluster_wide: Vec<String> = release
        .objects()
        .iter()
        .filter(|o| o.kind.starts_with("ClusterRole"))
        .map(|o| o.name.clone())
        .collect();
    assert!(
        cluster_wide.iter().all(|name| name.ends_with("-kueue")),
        "a one-namespace install needs no cluster-wide RBAC but Kueue's reads: {cluster_wide:?}"
    );
    let account = release.service_account();
    let sa = client_with_token(&service_account_token(&operator_ns, &account)).await;

    assert!(can(&sa, "create", "", "pods", None, Some(&watched)).await);
    assert!(can(&sa, "list", "kueue.x-k8s.io", "resourceflavors", None, None).await);
    assert!(
        !can(
            &sa,
            "create",
            "kueue.x-k8s.io",
            "resourceflavors",
            None,
            None
        )
        .await
    );
    assert!(
        !can(
            &sa,
            "create",
            "kueue.x-k8s.io",
            "workloads",
            None,
            Some(&operator_ns)
        )
        .await
    );
    assert!(can(&sa, "watch", "kubeflow.org", "tfjobs", None, Some(&watched)).await);
    assert!(!can(&sa, "create", "", "pods", None, Some(&operator_ns)).await);
    assert!(!can(&sa, "list", "kubeflow.org", "tfjobs", None, None).await);
    assert!(!can(&sa, "list", "", "pods", None, Some("default")).await);
    drop(release);
}
