//! What `migrate --check` reads from the cluster, read once (LISTs and one
//! GET, through [`super::read_only`]) and then judged as plain data
//! ([`super::classify`]), so the judging is tested without a cluster.
//!
//! Only the TFJob list must succeed. Everything else is read if this
//! identity may: a 403 or 404 becomes [`Seen::NotVisible`] with the reason,
//! shown to the reader, because "could not look" is not "nothing there".
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::api::constants::LABEL_JOB_NAME;
use crate::api::types::TFJob;
use crate::tfjob::kubeflow::schema::CRD_NAME;

/// Something read, or why it could not be.
#[derive(Clone, Debug)]
pub enum Seen<T> {
    Read(T),
    NotVisible(String),
}

impl<T> Seen<T> {
    pub fn read(&self) -> Option<&T> {
        match self {
            Seen::Read(t) => Some(t),
            Seen::NotVisible(_) => None,
        }
    }
}

/// The cluster as `migrate --check` saw it.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub now: Timestamp,
    pub crd: Seen<CustomResourceDefinition>,
    pub jobs: Vec<TFJob>,
    /// Pods and Services that carry Kubeflow's job-name label.
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    /// Events about TFJobs.
    pub events: Seen<Vec<Event>>,
    pub deployments: Seen<Vec<Deployment>>,
    pub leases: Seen<Vec<Lease>>,
    pub webhooks: Seen<Vec<ValidatingWebhookConfiguration>>,
}

impl Snapshot {
    /// Reads the cluster (all namespaces, or `namespace` only).
    pub async fn read(client: &Client, namespace: Option<&str>) -> anyhow::Result<Self> {
        let labelled = ListParams::default().labels(LABEL_JOB_NAME);
        let about_tfjobs = ListParams::default().fields("involvedObject.kind=TFJob");
        let jobs = list(scoped::<TFJob>(client, namespace), &ListParams::default())
            .await
            .map_err(|e| anyhow::anyhow!("could not list TFJobs: {e}"))?;
        Ok(Snapshot {
            now: Timestamp::now(),
            crd: seen(Api::all(client.clone()).get(CRD_NAME).await),
            jobs,
            pods: list(scoped(client, namespace), &labelled)
                .await
                .map_err(|e| anyhow::anyhow!("could not list Pods: {e}"))?,
            services: list(scoped(client, namespace), &labelled)
                .await
                .map_err(|e| anyhow::anyhow!("could not list Services: {e}"))?,
            events: seen(list(scoped(client, namespace), &about_tfjobs).await),
            // training-operator runs in its own namespace (`kubeflow`):
            // looked for everywhere.
            deployments: seen(list(Api::all(client.clone()), &ListParams::default()).await),
            leases: seen(list(Api::all(client.clone()), &ListParams::default()).await),
            webhooks: seen(list(Api::all(client.clone()), &ListParams::default()).await),
        })
    }
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Every page of a LIST.
async fn list<K>(api: Api<K>, params: &ListParams) -> Result<Vec<K>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut params = params.clone().limit(500);
    loop {
        let page = api.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(items),
        }
    }
}

fn seen<T>(result: Result<T, kube::Error>) -> Seen<T> {
    match result {
        Ok(t) => Seen::Read(t),
        Err(kube::Error::Api(s)) => Seen::NotVisible(format!("{} ({})", s.message, s.code)),
        Err(e) => Seen::NotVisible(e.to_string()),
    }
}
