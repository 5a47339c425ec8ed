//! The cluster around a run: clients, namespaces, the TFJob CRD, and the
//! unrelated Pods some workloads start with.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde::Deserialize as _;
use serde_json::json;
use tfjob_operator::api::fixtures::TfJobFixture;

use crate::{CRD_NAME, HARNESS_CONCURRENCY, NOISE_NS_COUNT, POLL};

pub(crate) async fn client_from(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("failed to read {}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

pub(crate) fn tfjob_resource() -> ApiResource {
    ApiResource {
        group: "kubeflow.org".into(),
        version: "v1".into(),
        api_version: "kubeflow.org/v1".into(),
        kind: "TFJob".into(),
        plural: "tfjobs".into(),
    }
}

pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

pub(crate) async fn wait_until<F, Fut>(
    what: &str,
    timeout: Duration,
    mut done: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if done().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

pub(crate) async fn delete_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    match nss.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    wait_until(
        &format!("namespace {name} to be gone"),
        Duration::from_secs(600),
        || {
            let nss = nss.clone();
            async move { Ok(nss.get_opt(name).await?.is_none()) }
        },
    )
    .await
}

pub(crate) async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match nss.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    // The ServiceAccount admission plugin refuses every Pod of a namespace
    // (403, "error looking up service account") until the controller-manager
    // has made its `default` ServiceAccount: a peer started before that
    // would be charged for 403s and retries that are the harness's doing.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_until(
        &format!("the default ServiceAccount of namespace {name}"),
        Duration::from_secs(60),
        || {
            let accounts = accounts.clone();
            async move { Ok(accounts.get_opt("default").await?.is_some()) }
        },
    )
    .await
}

/// Deletes the TFJob CRD (whoever's it is) and installs the one from `file`.
pub(crate) async fn reinstall_crd(client: &Client, file: &Path) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.delete(CRD_NAME, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    wait_until(
        "the old TFJob CRD to be gone",
        Duration::from_secs(300),
        || {
            let crds = crds.clone();
            async move { Ok(crds.get_opt(CRD_NAME).await?.is_none()) }
        },
    )
    .await?;
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("failed to read {}", file.display()))?;
    let crd = serde_yaml::Deserializer::from_str(&text)
        .map(serde_yaml::Value::deserialize)
        .find_map(|doc| doc.ok().filter(|d| !d.is_null()))
        .context("no YAML document in the CRD file")?;
    let crd: CustomResourceDefinition = serde_yaml::from_value(crd)?;
    crds.create(&PostParams::default(), &crd).await?;
    wait_until(
        "the TFJob CRD to be Established",
        Duration::from_secs(60),
        || {
            let crds = crds.clone();
            async move {
                let crd = crds.get(CRD_NAME).await?;
                Ok(crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                }))
            }
        },
    )
    .await?;
    // Established can come a moment before the resource is served.
    let jobs: Api<DynamicObject> = Api::all_with(client.clone(), &tfjob_resource());
    wait_until("tfjobs to be served", Duration::from_secs(30), || {
        let jobs = jobs.clone();
        async move { Ok(jobs.list(&ListParams::default().limit(1)).await.is_ok()) }
    })
    .await?;
    warm_up_tfjob_writes(client).await
}

/// Waits out the API server's readiness for writes to a new CRD: the first
/// create sent within a second of `Established` waits about two seconds in
/// the API server, for our CRD and Kubeflow's alike, even after a LIST has
/// answered; the next creates, and a first one sent later, take
/// milliseconds (measured with curl: `docs/benchmarks.md`, "What one run
/// does"). A cluster pays this once per CRD install, long before any job; a run must not
/// charge it to whichever peer writes first (ours is ready within a second
/// of the reset, training-operator later, and the raw peer writes no TFJob).
/// A server-side dry-run create goes through the same wait and stores
/// nothing.
pub(crate) async fn warm_up_tfjob_writes(client: &Client) -> anyhow::Result<()> {
    let jobs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &tfjob_resource());
    let probe = TfJobFixture::new("bench-warm-up")
        .namespace("default")
        .workers(1)
        .build();
    let probe: DynamicObject = serde_json::from_value(serde_json::to_value(&probe)?)?;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    jobs.create(&dry_run, &probe)
        .await
        .context("a dry-run create of a TFJob after installing the CRD")?;
    eprintln!(
        "  (first TFJob write after the CRD install: {:.2} s, waited out before the run)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Creates `count` unrelated Pods in `NOISE_NS_COUNT` other namespaces and
/// waits until KWOK has them all Running, so no run pays for their start-up.
pub(crate) async fn create_noise(
    admin: &Client,
    count: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    for i in 0..NOISE_NS_COUNT {
        ensure_namespace(admin, &format!("bench-noise-{i}")).await?;
    }
    let started = Instant::now();
    let results: Vec<Result<(), kube::Error>> = stream::iter((0..count).map(|i| {
        let admin = admin.clone();
        async move {
            let ns = format!("bench-noise-{}", i % NOISE_NS_COUNT);
            let pods: Api<Pod> = Api::namespaced(admin, &ns);
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("noise-{i:05}"), "labels": {"app": "bench-noise"}},
                "spec": {"restartPolicy": "Never",
                         "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
            }))
            .map_err(kube::Error::SerdeError)?;
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => Ok(()),
                Err(e) if is_conflict(&e) => Ok(()),
                Err(e) => Err(e),
            }
        }
    }))
    .buffer_unordered(HARNESS_CONCURRENCY)
    .collect()
    .await;
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        bail!("failed to create a noise pod: {e}");
    }
    eprintln!(
        "noise: {count} pods created in {:.1} s; waiting for Running",
        started.elapsed().as_secs_f64()
    );
    let pods: Api<Pod> = Api::all(admin.clone());
    wait_until("the noise pods to be Running", timeout, || {
        let pods = pods.clone();
        async move {
            let lp = ListParams::default()
                .labels("app=bench-noise")
                .fields("status.phase!=Running");
            Ok(pods.list_metadata(&lp).await?.items.is_empty())
        }
    })
    .await?;
    eprintln!(
        "noise: {count} pods Running after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
