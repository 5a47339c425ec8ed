//! The raw limit: a bare client that creates exactly the Pods and Services
//! the jobs need, with no controller logic (with `"status": true` in its
//! plan, `raw-status`: also each job's status, [`crate::raw_status`]).

use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::RAW_CONCURRENCY;

/// `e2e raw-peer <plan.json>`: waits for "go" on stdin, then creates every
/// Pod and headless Service of the plan, `RAW_CONCURRENCY` at a time, and
/// idles until stopped (so its CPU and RSS are read like any other peer's).
pub(crate) async fn raw_peer(plan: &Path) -> anyhow::Result<()> {
    let plan: Value = serde_json::from_slice(&std::fs::read(plan)?)?;
    let ns = plan["namespace"]
        .as_str()
        .context("plan without namespace")?
        .to_owned();
    let client = Client::try_default().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let svcs: Api<Service> = Api::namespaced(client.clone(), &ns);
    if plan["status"].as_bool() == Some(true) {
        crate::raw_status::start(client.clone(), &ns, crate::raw_status::jobs_of(&plan)?).await?;
    }
    let mut objects: Vec<(Pod, Service)> = Vec::new();
    for job in plan["jobs"].as_array().context("plan without jobs")? {
        let name = job["name"].as_str().context("job without name")?;
        let replicas: Vec<(String, i64)> = serde_json::from_value(job["replicas"].clone())?;
        let cluster: serde_json::Map<String, Value> = replicas
            .iter()
            .map(|(t, n)| {
                let addrs = (0..*n)
                    .map(|i| json!(format!("{name}-{t}-{i}.{ns}.svc:2222")))
                    .collect();
                (t.clone(), Value::Array(addrs))
            })
            .collect();
        for (t, n) in &replicas {
            for i in 0..*n {
                objects.push(raw_objects(&ns, name, t, i, &cluster)?);
            }
        }
    }
    eprintln!("raw-peer: ready ({} replicas)", objects.len());
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let started = Instant::now();
    let writes = objects.into_iter().flat_map(|(pod, svc)| {
        let (pods, svcs) = (pods.clone(), svcs.clone());
        [
            futures::future::Either::Left(async move {
                pods.create(&PostParams::default(), &pod).await.map(|_| ())
            }),
            futures::future::Either::Right(async move {
                svcs.create(&PostParams::default(), &svc).await.map(|_| ())
            }),
        ]
    });
    let results: Vec<Result<(), kube::Error>> = stream::iter(writes)
        .buffer_unordered(RAW_CONCURRENCY)
        .collect()
        .await;
    let errors = results.iter().filter(|r| r.is_err()).count();
    eprintln!(
        "raw-peer: {} creates, {errors} errors, in {:.2} s",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    // Idle until stopped.
    let _ = std::io::stdin().lock().read_line(&mut line);
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// The Pod and headless Service an operator would make for one replica: the
/// same labels, port and a TF_CONFIG of the same size.
pub(crate) fn raw_objects(
    ns: &str,
    job: &str,
    rtype: &str,
    index: i64,
    cluster: &serde_json::Map<String, Value>,
) -> anyhow::Result<(Pod, Service)> {
    let name = format!("{job}-{rtype}-{index}");
    let labels = json!({
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": index.to_string(),
    });
    let tf_config = json!({"cluster": cluster, "task": {"type": rtype, "index": index}, "environment": "cloud"});
    let pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "tensorflow",
                "image": "tensorflow/tensorflow:2.16.1",
                "ports": [{"name": "tfjob-port", "containerPort": 2222}],
                "env": [{"name": "TF_CONFIG", "value": tf_config.to_string()}]
            }]
        }
    }))?;
    let svc = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}]
        }
    }))?;
    Ok((pod, svc))
}
