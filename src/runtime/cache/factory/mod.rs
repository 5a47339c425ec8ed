//! The InformerFactory: one shared informer per (kind, watch config).
//!
//! Mirrors client-go `informers.SharedInformerFactory` (and
//! controller-runtime's informer cache). Every controller asks the factory for
//! the informers it needs; asking twice for the same kind and configuration
//! returns the same informer, so the process opens one watch per kind however
//! many controllers read it. `start` runs every informer created so far.
//!
//! A kind can have a transform (client-go `SharedInformerFactory`'s
//! `WithTransform`, controller-runtime's `cache.Options.ByObject[..].Transform`):
//! applied to every object of that kind before it is cached, to drop what no
//! controller of the process reads. It is set once per kind, before the first
//! informer of that kind, since every controller sharing the factory sees it.
//!
//! A kind's transform may also ask to read `metadata.managedFields`
//! ([`InformerFactory::set_transform_reading_managed_fields`]): informers
//! of every other kind drop them while decoding, as controller-runtime's
//! `TransformStripManagedFields` does; that one keeps them for the
//! transform, which trims them to what its controller reads.
//!
//! It must never start an informer implicitly on a read (controller-runtime's
//! lazy informers caused surprise cluster-wide watches), and never create two
//! informers for one (kind, config).
mod metrics;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, join_all};
use tokio_util::sync::CancellationToken;

use super::informer::{InformerConfig, SharedInformer};
use super::object::Object;
use super::reflector::list_watch::ApiListWatch;
use super::reflector::{ReflectorConfig, Transform};
use crate::runtime::client::protobuf;
use crate::runtime::client::protobuf::schema::{Message, ProtobufKind};
use crate::runtime::metrics::SharedMetrics;
use metrics::{InformerLabels, Snapshot};

/// Why the factory refused a request.
#[derive(Debug, thiserror::Error)]
pub enum FactoryError {
    #[error(
        "failed to set a transform for {kind}: an informer for {kind} exists already \
         (set transforms before creating informers, or its objects would be cached both ways)"
    )]
    TransformAfterInformer { kind: String },
    #[error("failed to set a transform for {kind}: one is set already (compose them into one)")]
    TransformSetTwice { kind: String },
}

/// What one informer watches: the scope and filters of its list/watch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct WatchConfig {
    /// Watch one namespace; `None` watches all (or a cluster-scoped kind).
    pub namespace: Option<String>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    /// Re-deliver every cached object this often, to handlers registered
    /// with `add_event_handler_with_resync`; `None`: never.
    pub resync: Option<Duration>,
}

/// The type-erased operations the factory needs on any informer.
trait AnyInformer: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn spawn(&self, shutdown: CancellationToken);
    fn has_synced(&self) -> bool;
    fn wait_for_sync(&self) -> BoxFuture<'static, ()>;
    fn snapshot(&self) -> Snapshot;
    fn kind(&self) -> String;
}

impl<K: Object> AnyInformer for SharedInformer<K> {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn spawn(&self, shutdown: CancellationToken) {
        tokio::spawn(self.clone().run(shutdown));
    }

    fn has_synced(&self) -> bool {
        SharedInformer::has_synced(self)
    }

    fn wait_for_sync(&self) -> BoxFuture<'static, ()> {
        let informer = self.clone();
        Box::pin(async move { informer.wait_for_sync().await })
    }

    fn snapshot(&self) -> Snapshot {
        let status = self.reflector_status();
        Snapshot {
            lists: status.lists(),
            watches: status.watches(),
            decode_failures: status.decode_failures(),
            last_sync_resource_version: status
                .last_sync_resource_version()
                .and_then(|rv| rv.parse().ok())
                .unwrap_or(0),
            cached_objects: i64::try_from(self.indexer().len()).unwrap_or(i64::MAX),
            synced: SharedInformer::has_synced(self),
        }
    }

    fn kind(&self) -> String {
        K::kind(&()).into_owned()
    }
}

struct Entry {
    informer: Arc<dyn AnyInformer>,
    started: bool,
}

/// A kind's transform, and whether it reads `metadata.managedFields`.
struct KindTransform<K> {
    transform: Transform<K>,
    reads_managed_fields: bool,
}

impl<K> Clone for KindTransform<K> {
    fn clone(&self) -> Self {
        Self {
            transform: self.transform.clone(),
            reads_managed_fields: self.reads_managed_fields,
        }
    }
}

/// Creates and owns the shared informers of one process. Cloning shares it.
#[derive(Clone)]
pub struct InformerFactory {
    client: kube::Client,
    entries: Arc<Mutex<HashMap<(TypeId, WatchConfig), Entry>>>,
    /// Kind → its [`KindTransform<K>`], boxed as `Any`.
    transforms: Arc<Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>>,
    metrics_registered: Arc<AtomicBool>,
}

impl InformerFactory {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            entries: Arc::new(Mutex::new(HashMap::new())),
            transforms: Arc::new(Mutex::new(HashMap::new())),
            metrics_registered: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Has every informer of kind `K` apply `transform` to each object
    /// before caching it (after `managedFields` are dropped; see
    /// [`Self::set_transform_reading_managed_fields`] for the exception). For what no
    /// controller sharing this factory reads: the TFJob controller drops
    /// the `spec` of the Pods and Services it owns, since it reads only
    /// their metadata and status.
    ///
    /// Refused once an informer of `K` exists (its objects are cached
    /// already), and when `K` has a transform already.
    pub fn set_transform<K: Object>(&self, transform: Transform<K>) -> Result<(), FactoryError> {
        self.set_kind_transform(KindTransform {
            transform,
            reads_managed_fields: false,
        })
    }

    /// [`Self::set_transform`] for a transform that reads
    /// `metadata.managedFields`: informers of `K` keep them for it instead
    /// of dropping them while decoding, and the transform trims them to
    /// what its controller reads (the TFJob controller keeps the status
    /// writes of another TFJob controller, to step back from its jobs).
    /// Every other kind still drops them.
    pub fn set_transform_reading_managed_fields<K: Object>(
        &self,
        transform: Transform<K>,
    ) -> Result<(), FactoryError> {
        self.set_kind_transform(KindTransform {
            transform,
            reads_managed_fields: true,
        })
    }

    fn set_kind_transform<K: Object>(
        &self,
        transform: KindTransform<K>,
    ) -> Result<(), FactoryError> {
        let kind = || K::kind(&()).into_owned();
        // Lock order: entries, then transforms (as `informer` does).
        let entries = self.lock();
        if entries.keys().any(|(id, _)| *id == TypeId::of::<K>()) {
            return Err(FactoryError::TransformAfterInformer { kind: kind() });
        }
        let mut transforms = self.transforms.lock().unwrap_or_else(|p| p.into_inner());
        if transforms.contains_key(&TypeId::of::<K>()) {
            return Err(FactoryError::TransformSetTwice { kind: kind() });
        }
        transforms.insert(TypeId::of::<K>(), Box::new(transform));
        Ok(())
    }

    /// The transform set for `K`, if any.
    fn transform<K: Object>(&self) -> Option<KindTransform<K>> {
        let transforms = self.transforms.lock().unwrap_or_else(|p| p.into_inner());
        transforms
            .get(&TypeId::of::<K>())
            .and_then(|t| t.downcast_ref::<KindTransform<K>>())
            .cloned()
    }

    /// How an informer of `K` with `config` lists, watches and decodes.
    fn reflector_config<K: Object>(&self, config: WatchConfig) -> ReflectorConfig<K> {
        let kind = self.transform::<K>();
        ReflectorConfig {
            label_selector: config.label_selector,
            field_selector: config.field_selector,
            strip_managed_fields: !kind.as_ref().is_some_and(|k| k.reads_managed_fields),
            transform: kind.map(|k| k.transform),
            ..ReflectorConfig::default()
        }
    }

    /// Exports `tfjob_operator_informer_*` metrics (lists, watches, decode failures, last
    /// resourceVersion, cached objects, synced) for every informer this
    /// factory creates, now or later. Only the first call registers.
    pub fn register_metrics(&self, registry: &SharedMetrics) {
        if self.metrics_registered.swap(true, Ordering::SeqCst) {
            return;
        }
        let entries = Arc::downgrade(&self.entries);
        let source = Arc::new(move || {
            let Some(entries) = entries.upgrade() else {
                return Vec::new();
            };
            let entries = entries.lock().unwrap_or_else(|p| p.into_inner());
            entries
                .iter()
                .map(|((_, config), entry)| {
                    let labels = InformerLabels {
                        kind: entry.informer.kind(),
                        namespace: config.namespace.clone().unwrap_or_default(),
                        label_selector: config.label_selector.clone().unwrap_or_default(),
                        field_selector: config.field_selector.clone().unwrap_or_default(),
                    };
                    (labels, entry.informer.snapshot())
                })
                .collect()
        });
        metrics::register(registry, source);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(TypeId, WatchConfig), Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The informer for `K` with `config`, created on first request. Call
    /// [`Self::start`] after creating informers to run them.
    pub fn informer<K: Object>(&self, config: WatchConfig) -> SharedInformer<K> {
        self.informer_decoding(config, protobuf::message_for::<K>())
    }

    /// [`Self::informer`] for a *view* of a built-in kind: a type with the
    /// kind's identity and only some of its fields (e.g. metadata and
    /// status), decoded from the kind's protobuf table, skipping the bytes of
    /// every field the view leaves out rather than building and dropping
    /// them. client-go's metadata-only informers are the same idea.
    pub fn view_informer<K: Object + ProtobufKind>(
        &self,
        config: WatchConfig,
    ) -> SharedInformer<K> {
        self.informer_decoding(config, Some(K::MESSAGE))
    }

    fn informer_decoding<K: Object>(
        &self,
        config: WatchConfig,
        protobuf: Option<&'static Message>,
    ) -> SharedInformer<K> {
        let mut entries = self.lock();
        let id = (TypeId::of::<K>(), config.clone());
        if let Some(existing) = entries
            .get(&id)
            .and_then(|e| e.informer.as_any().downcast_ref::<SharedInformer<K>>())
        {
            return existing.clone();
        }
        let list_watch = ApiListWatch::new::<K>(self.client.clone(), config.namespace.as_deref());
        let list_watch = match protobuf {
            Some(message) => list_watch.with_protobuf_table(message),
            None => list_watch.json(),
        };
        let informer = SharedInformer::new(
            Arc::new(list_watch),
            InformerConfig {
                resync: config.resync,
                reflector: self.reflector_config(config),
            },
        );
        entries.insert(
            id,
            Entry {
                informer: Arc::new(informer.clone()),
                started: false,
            },
        );
        informer
    }

    /// Spawns every informer created so far that is not running yet
    /// (idempotent; call again after creating more). Needs a tokio runtime.
    pub fn start(&self, shutdown: CancellationToken) {
        for entry in self.lock().values_mut() {
            if !entry.started {
                entry.informer.spawn(shutdown.clone());
                entry.started = true;
            }
        }
    }

    /// Waits until every informer created so far has synced. Cancel-safe.
    pub async fn wait_for_cache_sync(&self) {
        let waits: Vec<_> = self
            .lock()
            .values()
            .map(|e| e.informer.wait_for_sync())
            .collect();
        join_all(waits).await;
    }

    /// Whether every informer created so far has synced.
    pub fn has_synced(&self) -> bool {
        self.lock().values().all(|e| e.informer.has_synced())
    }

    /// Number of distinct informers created.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no informer was created yet.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};

    /// A client for a server that is never reached: these tests only look at
    /// which informers the factory hands out.
    fn offline_client() -> kube::Client {
        let url = "http://127.0.0.1:9".parse().expect("a valid URL");
        kube::Client::try_from(kube::Config::new(url)).expect("a client")
    }

    fn same<K: Object>(a: &SharedInformer<K>, b: &SharedInformer<K>) -> bool {
        // Informers share their cache iff they are the same informer.
        let probe = Arc::new(
            serde_json::from_value::<K>(serde_json::json!({
                "metadata": {"name": "probe", "namespace": "ns"}
            }))
            .expect("a minimal object"),
        );
        a.indexer().insert(probe);
        let shared = b.indexer().len() == 1;
        a.indexer()
            .remove(&crate::runtime::cache::key::ObjectKey::new(
                Some("ns"),
                "probe",
            ));
        shared
    }

    fn no_spec() -> Transform<Pod> {
        Arc::new(|pod: &mut Pod| pod.spec = None)
    }

    #[tokio::test]
    async fn a_transform_is_refused_once_an_informer_of_its_kind_exists() {
        let factory = InformerFactory::new(offline_client());
        factory.informer::<Pod>(WatchConfig::default());
        let err = factory.set_transform(no_spec()).unwrap_err();
        assert!(
            matches!(&err, FactoryError::TransformAfterInformer { kind } if kind == "Pod"),
            "{err}"
        );
        // Another kind is still free to get one.
        let keep: Transform<ConfigMap> = Arc::new(|_| {});
        assert!(factory.set_transform(keep).is_ok());
    }

    #[tokio::test]
    async fn a_kind_gets_one_transform() {
        let factory = InformerFactory::new(offline_client());
        factory.set_transform(no_spec()).expect("the first is set");
        let err = factory.set_transform(no_spec()).unwrap_err();
        assert!(
            matches!(err, FactoryError::TransformSetTwice { .. }),
            "{err}"
        );
        assert!(factory.transform::<Pod>().is_some());
        assert!(factory.transform::<ConfigMap>().is_none());
        let keep: Transform<Pod> = Arc::new(|_| {});
        let err = factory
            .set_transform_reading_managed_fields(keep)
            .unwrap_err();
        assert!(
            matches!(err, FactoryError::TransformSetTwice { .. }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn only_a_kind_whose_transform_reads_managed_fields_keeps_them() {
        let factory = InformerFactory::new(offline_client());
        let keep: Transform<ConfigMap> = Arc::new(|_| {});
        factory
            .set_transform_reading_managed_fields(keep)
            .expect("the first is set");
        factory.set_transform(no_spec()).expect("the first is set");
        let config_maps = factory.reflector_config::<ConfigMap>(WatchConfig::default());
        assert!(!config_maps.strip_managed_fields);
        assert!(config_maps.transform.is_some());
        let pods = factory.reflector_config::<Pod>(WatchConfig::default());
        assert!(pods.strip_managed_fields, "a plain transform sees none");
        assert!(pods.transform.is_some());
        let services =
            factory.reflector_config::<k8s_openapi::api::core::v1::Service>(WatchConfig::default());
        assert!(services.strip_managed_fields, "nor does a kind without one");
        assert!(services.transform.is_none());
    }

    #[tokio::test]
    async fn the_same_kind_and_config_get_the_same_informer() {
        let factory = InformerFactory::new(offline_client());
        let a = factory.informer::<Pod>(WatchConfig::default());
        let b = factory.clone().informer::<Pod>(WatchConfig::default());
        assert!(same(&a, &b));
        assert_eq!(factory.len(), 1);
    }

    #[tokio::test]
    async fn another_config_or_kind_gets_another_informer() {
        let factory = InformerFactory::new(offline_client());
        let all = factory.informer::<Pod>(WatchConfig::default());
        let one_ns = factory.informer::<Pod>(WatchConfig {
            namespace: Some("ns".into()),
            ..WatchConfig::default()
        });
        let _cms = factory.informer::<ConfigMap>(WatchConfig::default());
        assert!(!same(&all, &one_ns));
        assert_eq!(factory.len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_synced_while_the_server_is_unreachable() {
        let factory = InformerFactory::new(offline_client());
        let _pods = factory.informer::<Pod>(WatchConfig::default());
        assert!(!factory.has_synced());
        let shutdown = CancellationToken::new();
        factory.start(shutdown.clone());
        factory.start(shutdown.clone());
        // The server is unreachable: the informer keeps retrying, never syncs.
        let waited =
            tokio::time::timeout(Duration::from_secs(30), factory.wait_for_cache_sync()).await;
        assert!(waited.is_err());
        assert!(!factory.has_synced());
        shutdown.cancel();
    }

    #[tokio::test]
    async fn metrics_report_every_informer_once_even_if_registered_twice() {
        let factory = InformerFactory::new(offline_client());
        let registry = crate::runtime::metrics::testing::new_registry();
        factory.register_metrics(&registry);
        factory.register_metrics(&registry);
        let pods = factory.informer::<Pod>(WatchConfig {
            namespace: Some("team-a".into()),
            ..WatchConfig::default()
        });
        pods.indexer().insert(Arc::new(
            serde_json::from_value::<Pod>(serde_json::json!({
                "metadata": {"name": "p", "namespace": "team-a"}
            }))
            .expect("a minimal Pod"),
        ));
        let text = crate::runtime::metrics::testing::encode(&registry);
        let cached: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tfjob_operator_informer_cached_objects{"))
            .collect();
        assert_eq!(cached.len(), 1, "{text}");
        assert!(cached[0].contains(r#"kind="Pod""#), "{text}");
        assert!(cached[0].contains(r#"namespace="team-a""#), "{text}");
        assert!(cached[0].ends_with(" 1"), "{text}");
        assert!(
            text.contains("# TYPE tfjob_operator_informer_lists counter"),
            "{text}"
        );
        assert!(
            text.contains("tfjob_operator_informer_lists_total{"),
            "{text}"
        );
        assert!(text.contains("tfjob_operator_informer_synced{"), "{text}");
        assert!(
            text.contains("tfjob_operator_informer_decode_failures_total{"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_empty_factory_is_synced() {
        let factory = InformerFactory::new(offline_client());
        assert!(factory.is_empty());
        assert!(factory.has_synced());
        factory.wait_for_cache_sync().await;
    }
}
