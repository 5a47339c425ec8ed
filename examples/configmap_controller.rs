//! A complete small controller on tfjob-operator's runtime: the tutorial's
//! chapter 14 (`docs/14-your-controller.md`) walks through it.
//!
//! For every ConfigMap labelled `example.tfjob-operator.local/summarize=true`
//! it keeps a second ConfigMap, `<name>-summary`, that lists the source's keys
//! and counts its bytes, owned by the source (delete the source and the
//! garbage collector deletes the summary), and writes the summary's name back
//! onto the source as an annotation.
//!
//! ```sh
//! make cluster-up && source .cluster/env
//! cargo run --example configmap_controller
//! ```
//!
//! It is controller-runtime's
//! `ctrl.NewControllerManagedBy(mgr).For(&ConfigMap{}).Owns(&ConfigMap{})`.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource, ResourceExt};
use tfjob_operator::observability::metrics::new_registry;
use tfjob_operator::observability::metrics::pipeline::pipeline_metrics;
use tfjob_operator::runtime::cache::factory::{InformerFactory, WatchConfig};
use tfjob_operator::runtime::cache::key::ObjectKey;
use tfjob_operator::runtime::cache::store::Indexer;
use tfjob_operator::runtime::controller::{
    Action, Controller, ControllerError, ReconcileError, Reconciler,
};
use tfjob_operator::runtime::manager::{Manager, ManagerConfig};

/// Sources carry this label; only they are watched (a server-side selector).
pub const SOURCE_LABEL: &str = "example.tfjob-operator.local/summarize";
/// Summaries carry this label, so the child informer caches only them.
pub const SUMMARY_LABEL: &str = "example.tfjob-operator.local/summary-of";
/// Written back onto the source: the name of its summary.
pub const SUMMARY_ANNOTATION: &str = "example.tfjob-operator.local/summary";
/// The field manager of our server-side applies and patches.
const MANAGER: &str = "configmap-summarizer";

/// Everything a reconcile reads from (two caches) and writes through (a client).
pub struct Summarizer {
    client: Client,
    sources: Indexer<ConfigMap>,
    summaries: Indexer<ConfigMap>,
}

#[derive(Debug, thiserror::Error)]
#[error("failed to write {what} for {key}")]
pub struct SummarizeError {
    what: &'static str,
    key: ObjectKey,
    #[source]
    source: kube::Error,
}

impl ReconcileError for SummarizeError {
    fn category(&self) -> &'static str {
        self.what
    }
}

impl Reconciler for Summarizer {
    type Error = SummarizeError;

    async fn reconcile(&self, key: ObjectKey) -> Result<Action, SummarizeError> {
        // Observe: the source from the cache. Gone means deleted, and its
        // summary goes with it: the garbage collector follows the ownerReference.
        let Some(source) = self.sources.get(&key) else {
            return Ok(Action::Done);
        };
        let name = format!("{}-summary", key.name());
        let ns = key.namespace().unwrap_or("default");
        // Plan: what the summary should hold.
        let data = source.data.clone().unwrap_or_default();
        let keys: Vec<&str> = data.keys().map(String::as_str).collect();
        let bytes: usize = data.values().map(String::len).sum();
        let want = BTreeMap::from([
            ("keys".to_owned(), keys.join(",")),
            ("bytes".to_owned(), bytes.to_string()),
        ]);
        // Apply, only if the cached summary differs: a reconcile that finds
        // the world as it should be writes nothing.
        let cached = self.summaries.get(&ObjectKey::new(Some(ns), &name));
        if cached.and_then(|c| c.data.clone()) != Some(want.clone()) {
            let summary = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(ns.to_owned()),
                    labels: Some(BTreeMap::from([(SUMMARY_LABEL.into(), key.name().into())])),
                    owner_references: source.controller_owner_ref(&()).map(|r| vec![r]),
                    ..ObjectMeta::default()
                },
                data: Some(want),
                ..ConfigMap::default()
            };
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
            let params = PatchParams::apply(MANAGER).force();
            api.patch(&name, &params, &Patch::Apply(&summary))
                .await
                .map_err(|source| fail("summary", &key, source))?;
        }
        // Write back: the summary's name on the source, once.
        let noted = source.annotations().get(SUMMARY_ANNOTATION) == Some(&name);
        if !noted {
            let patch =
                serde_json::json!({"metadata": {"annotations": {SUMMARY_ANNOTATION: name}}});
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
            api.patch(key.name(), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| fail("annotation", &key, source))?;
        }
        Ok(Action::Done)
    }
}

fn fail(what: &'static str, key: &ObjectKey, source: kube::Error) -> SummarizeError {
    let key = key.clone();
    SummarizeError { what, key, source }
}

/// The wiring: two informers from one factory, a controller that is `For`
/// the sources and `Owns` the summaries, a manager that starts both.
pub fn manager(
    client: Client,
    namespace: Option<String>,
    config: ManagerConfig,
) -> Result<Manager, ControllerError> {
    let factory = InformerFactory::new(client.clone());
    let watch = |label: &str| WatchConfig {
        namespace: namespace.clone(),
        label_selector: Some(label.to_owned()),
        ..WatchConfig::default()
    };
    let sources = factory.informer::<ConfigMap>(watch(&format!("{SOURCE_LABEL}=true")));
    let summaries = factory.informer::<ConfigMap>(watch(SUMMARY_LABEL));
    let reconciler = Summarizer {
        client: client.clone(),
        sources: sources.indexer(),
        summaries: summaries.indexer(),
    };
    // `/metrics` serves a Prometheus registry of its own.
    let mut manager = Manager::new(client, config, pipeline_metrics(&new_registry()));
    let controller = Controller::builder("configmap-summarizer")
        .for_informer(&sources)
        .owns(&summaries)
        .registry(&manager.registry())
        .build(reconciler)?;
    manager.add_cache(factory);
    manager.add_runnable("configmap-summarizer", true, move |token| async move {
        controller.run(token).await.map_err(Into::into)
    });
    Ok(manager)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // `RUST_LOG=info,pipeline=debug` shows every stage of every event.
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let client = Client::try_default().await?;
    let config = ManagerConfig {
        // Loopback and any free port: the example needs no fixed ports.
        probe_addr: Some(([127, 0, 0, 1], 0).into()),
        metrics_addr: Some(([127, 0, 0, 1], 0).into()),
        ..ManagerConfig::default()
    };
    manager(client, std::env::var("NAMESPACE").ok(), config)?
        .run()
        .await?;
    Ok(())
}
