//! Event handlers: informer events in, queue keys out.
//!
//! Mirrors controller-runtime `pkg/handler` (`EnqueueRequestForObject`,
//! `EnqueueRequestForOwner` with `OnlyControllerOwner`,
//! `EnqueueRequestsFromMapFunc`) and `pkg/predicate` (event filters). One
//! [`EnqueueHandler`] is registered on an informer per watch: it decides which
//! keys an event concerns and adds them to the controller's queue.
//!
//! Handlers run inline on the informer's task, so they must never block,
//! call the API server, or read anything but the event's objects: they turn
//! an event into keys and return. Workers read the newest object later.
//!
//! Predicates look at metadata only, so one filter (`with_event_filter`) can
//! apply to every kind a controller watches. A filter that needs spec or
//! status can be a mapped handler returning no keys.
use std::any::TypeId;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Resource;

use crate::runtime::cache::delta_fifo::DeletedObject;
use crate::runtime::cache::informer::EventHandler;
use crate::runtime::cache::key::ObjectKey;
use crate::runtime::cache::object::Object;
use crate::runtime::workqueue::rate_limiting::RateLimitingQueue;

/// Errors building a handler or predicate.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("failed to parse label selector: unknown operator {operator:?} for key {key:?}")]
    UnknownOperator { key: String, operator: String },
    #[error("failed to parse label selector: operator {operator} for key {key:?} needs values")]
    MissingValues { key: String, operator: String },
}

/// A filter on events (controller-runtime `predicate.Predicate`), on metadata.
///
/// Every method defaults to `true` (let the event through).
pub trait Predicate: Send + Sync + 'static {
    /// An object appeared (watched create, or listed).
    fn create(&self, _meta: &ObjectMeta) -> bool {
        true
    }
    /// An object changed (or, for a handler registered with resync, was
    /// re-delivered unchanged by a relist or resync).
    fn update(&self, _old: &ObjectMeta, _new: &ObjectMeta) -> bool {
        true
    }
    /// An object was deleted (tombstones included).
    fn delete(&self, _meta: &ObjectMeta) -> bool {
        true
    }
}

/// Passes updates whose `metadata.generation` changed (spec changes).
///
/// Caveats (as in controller-runtime): status-only and metadata-only updates
/// are dropped, so a controller cannot repair a status someone else wiped;
/// kinds without a generation (ConfigMaps, older Pods) never pass an update;
/// some kinds bump generation on annotation changes (Deployments). Use it on
/// the primary kind, not on children whose status you follow.
#[derive(Clone, Copy, Debug, Default)]
pub struct GenerationChanged;

impl Predicate for GenerationChanged {
    fn update(&self, old: &ObjectMeta, new: &ObjectMeta) -> bool {
        old.generation != new.generation
    }
}

/// Passes updates whose `metadata.resourceVersion` changed, dropping the
/// re-deliveries of unchanged objects that relists and resyncs produce.
///
/// Caveat: this also drops the periodic resync a controller may rely on to
/// notice drift outside the API (use `Action::RequeueAfter` for that).
#[derive(Clone, Copy, Debug, Default)]
pub struct ResourceVersionChanged;

impl Predicate for ResourceVersionChanged {
    fn update(&self, old: &ObjectMeta, new: &ObjectMeta) -> bool {
        old.resource_version != new.resource_version
    }
}

/// Passes events for objects whose labels match a selector.
///
/// Caveats: it filters events, not the cache — every object is still listed,
/// watched and held in memory (scope the informer with a label selector in
/// its `WatchConfig` to save memory). On update only the *new* labels are
/// checked, so an object relabelled out of the selector produces no event
/// (the controller never hears it left); on delete the last known labels are
/// checked.
#[derive(Clone, Debug)]
pub struct LabelSelectorPredicate {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug)]
enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl LabelSelectorPredicate {
    /// A predicate for `selector` (the empty selector matches everything).
    pub fn new(selector: &LabelSelector) -> Result<Self, HandlerError> {
        let mut requirements: Vec<Requirement> = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::Equals(k.clone(), v.clone()))
            .collect();
        for e in selector.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let needs_values = |op: &str| {
                if values.is_empty() {
                    Err(HandlerError::MissingValues {
                        key: e.key.clone(),
                        operator: op.to_owned(),
                    })
                } else {
                    Ok(())
                }
            };
            requirements.push(match e.operator.as_str() {
                "In" => {
                    needs_values("In")?;
                    Requirement::In(e.key.clone(), values)
                }
                "NotIn" => {
                    needs_values("NotIn")?;
                    Requirement::NotIn(e.key.clone(), values)
                }
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(e.key.clone()),
                other => {
                    return Err(HandlerError::UnknownOperator {
                        key: e.key.clone(),
                        operator: other.to_owned(),
                    });
                }
            });
        }
        Ok(Self { requirements })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

impl Predicate for LabelSelectorPredicate {
    fn create(&self, meta: &ObjectMeta) -> bool {
        self.matches(meta.labels.as_ref())
    }
    fn update(&self, _old: &ObjectMeta, new: &ObjectMeta) -> bool {
        self.matches(new.labels.as_ref())
    }
    fn delete(&self, meta: &ObjectMeta) -> bool {
        self.matches(meta.labels.as_ref())
    }
}

/// Passes an event only if any of the predicates does.
pub struct Any(pub Vec<Arc<dyn Predicate>>);

impl Predicate for Any {
    fn create(&self, meta: &ObjectMeta) -> bool {
        self.0.iter().any(|p| p.create(meta))
    }
    fn update(&self, old: &ObjectMeta, new: &ObjectMeta) -> bool {
        self.0.iter().any(|p| p.update(old, new))
    }
    fn delete(&self, meta: &ObjectMeta) -> bool {
        self.0.iter().any(|p| p.delete(meta))
    }
}

/// Which kind an owner reference must point at (group + kind, as
/// controller-runtime compares them; the version does not matter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerType {
    pub group: String,
    pub kind: String,
    /// Cluster-scoped owners have keys without a namespace.
    pub namespaced: bool,
}

impl OwnerType {
    /// The owner type of kind `O`.
    pub fn of<O: Resource<DynamicType = ()>>() -> Self
    where
        O::Scope: 'static,
    {
        Self {
            group: O::group(&()).into_owned(),
            kind: O::kind(&()).into_owned(),
            namespaced: TypeId::of::<O::Scope>() != TypeId::of::<ClusterResourceScope>(),
        }
    }

    /// An owner type from an `apiVersion` (`group/version` or `v1`) and kind.
    pub fn new(api_version: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group_of(api_version).to_owned(),
            kind: kind.to_owned(),
            namespaced,
        }
    }

    /// The key of `child`'s controller owner, if it is of this type.
    pub fn controller_key_of(&self, child: &ObjectMeta) -> Option<ObjectKey> {
        let owner = child
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))?;
        if owner.kind != self.kind || group_of(&owner.api_version) != self.group {
            return None;
        }
        let namespace = if self.namespaced {
            child.namespace.as_deref()
        } else {
            None
        };
        Some(ObjectKey::new(namespace, &owner.name))
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

/// Maps an object to the keys it concerns.
pub type MapFn<K> = Arc<dyn Fn(&K) -> Vec<ObjectKey> + Send + Sync>;

enum Mapping<K> {
    Object,
    ControllerOwner(OwnerType),
    Mapped(MapFn<K>),
}

/// An informer event handler that enqueues keys, filtered by predicates.
pub struct EnqueueHandler<K> {
    queue: RateLimitingQueue<ObjectKey>,
    mapping: Mapping<K>,
    predicates: Vec<Arc<dyn Predicate>>,
}

impl<K: Object> EnqueueHandler<K> {
    /// Enqueues the object's own key (controller-runtime `EnqueueRequestForObject`).
    pub fn for_object(queue: RateLimitingQueue<ObjectKey>) -> Self {
        Self::with_mapping(queue, Mapping::Object)
    }

    /// Enqueues the key of the object's controller owner if it is of type
    /// `owner` (`EnqueueRequestForOwner` + `OnlyControllerOwner`). On update,
    /// both the old and the new owner are enqueued if they differ, so an
    /// owner that lost a child hears about it too.
    pub fn for_controller_owner(queue: RateLimitingQueue<ObjectKey>, owner: OwnerType) -> Self {
        Self::with_mapping(queue, Mapping::ControllerOwner(owner))
    }

    /// Enqueues whatever `map` returns (`EnqueueRequestsFromMapFunc`); on
    /// update, the union for the old and the new object.
    pub fn mapped(
        queue: RateLimitingQueue<ObjectKey>,
        map: impl Fn(&K) -> Vec<ObjectKey> + Send + Sync + 'static,
    ) -> Self {
        Self::with_mapping(queue, Mapping::Mapped(Arc::new(map)))
    }

    fn with_mapping(queue: RateLimitingQueue<ObjectKey>, mapping: Mapping<K>) -> Self {
        Self {
            queue,
            mapping,
            predicates: Vec::new(),
        }
    }

    /// Adds an event filter; an event is handled only if every filter passes.
    pub fn with_predicate(mut self, predicate: Arc<dyn Predicate>) -> Self {
        self.predicates.push(predicate);
        self
    }

    /// Adds several event filters.
    pub fn with_predicates(
        mut self,
        predicates: impl IntoIterator<Item = Arc<dyn Predicate>>,
    ) -> Self {
        self.predicates.extend(predicates);
        self
    }

    fn keys(&self, obj: &K) -> Vec<ObjectKey> {
        match &self.mapping {
            Mapping::Object => ObjectKey::of(obj).into_iter().collect(),
            Mapping::ControllerOwner(owner) => {
                owner.controller_key_of(obj.meta()).into_iter().collect()
            }
            Mapping::Mapped(map) => map(obj),
        }
    }

    fn enqueue(&self, keys: Vec<ObjectKey>) {
        for key in keys {
            // `depth`: keys ready in the queue as this one arrives (a key
            // already waiting is not queued twice). Read only when tracing.
            tracing::debug!(target: "pipeline", stage = "5 handler", key = %key, depth = self.queue.len(), "key added to the workqueue");
            self.queue.add(key);
        }
    }
}

impl<K: Object> EventHandler<K> for EnqueueHandler<K> {
    fn on_add(&self, obj: &Arc<K>, _in_initial_list: bool) {
        if self.predicates.iter().all(|p| p.create(obj.meta())) {
            self.enqueue(self.keys(obj));
        }
    }

    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if !self
            .predicates
            .iter()
            .all(|p| p.update(old.meta(), new.meta()))
        {
            return;
        }
        let mut keys = self.keys(new);
        // An object's own key never changes; owners and mappings may.
        if !matches!(self.mapping, Mapping::Object) {
            for key in self.keys(old) {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        self.enqueue(keys);
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        // Tombstones carry the last known state; handle them like deletes.
        let obj = obj.object();
        if self.predicates.iter().all(|p| p.delete(obj.meta())) {
            self.enqueue(self.keys(obj));
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelectorRequirement, OwnerReference,
    };

    use super::*;

    fn queue() -> RateLimitingQueue<ObjectKey> {
        RateLimitingQueue::with_default_limiter()
    }

    /// Every key currently queued, in order (each marked done).
    fn drain(q: &RateLimitingQueue<ObjectKey>) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(Some(k)) = q.get().now_or_never() {
            q.done(&k);
            out.push(k.to_string());
        }
        out
    }

    fn owner_ref(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(controller),
            block_owner_deletion: Some(true),
        }
    }

    fn pod(name: &str, owners: Vec<OwnerReference>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                owner_references: Some(owners),
                resource_version: Some("1".into()),
                generation: Some(1),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn with_meta(p: &Arc<Pod>, f: impl FnOnce(&mut ObjectMeta)) -> Arc<Pod> {
        let mut p = (**p).clone();
        f(&mut p.metadata);
        Arc::new(p)
    }

    fn rs_owner() -> OwnerType {
        OwnerType::of::<ReplicaSet>()
    }

    /// Records the `depth` field of every `pipeline` event.
    #[derive(Clone, Default)]
    struct Depths(Arc<std::sync::Mutex<Vec<u64>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Depths {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Depth(Option<u64>);
            impl tracing::field::Visit for Depth {
                fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                    if field.name() == "depth" {
                        self.0 = Some(value);
                    }
                }
                fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
            }
            if event.metadata().target() != "pipeline" {
                return;
            }
            let mut depth = Depth(None);
            event.record(&mut depth);
            if let Some(d) = depth.0 {
                self.0.lock().unwrap().push(d);
            }
        }
    }

    #[test]
    fn the_trace_line_of_an_added_key_carries_the_queues_real_depth() {
        use tracing_subscriber::layer::SubscriberExt;
        let depths = Depths::default();
        let q = queue();
        let h = EnqueueHandler::<Pod>::for_object(q.clone());
        let subscriber = tracing_subscriber::registry().with(depths.clone());
        tracing::subscriber::with_default(subscriber, || {
            for name in ["a", "b", "a"] {
                h.on_add(&pod(name, vec![]), false);
            }
        });
        // Ahead of each key as it arrives; "a" again finds a and b waiting
        // and is not queued twice.
        assert_eq!(*depths.0.lock().unwrap(), [0, 1, 2]);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn for_object_enqueues_the_object_key_for_every_event() {
        let q = queue();
        let h = EnqueueHandler::<Pod>::for_object(q.clone());
        let p = pod("a", vec![]);
        h.on_add(&p, true);
        assert_eq!(drain(&q), ["ns/a"]);
        h.on_update(
            &p,
            &with_meta(&p, |m| m.resource_version = Some("2".into())),
        );
        assert_eq!(drain(&q), ["ns/a"]);
        h.on_delete(&DeletedObject::FinalStateUnknown {
            key: ObjectKey::new(Some("ns"), "a"),
            obj: p,
        });
        assert_eq!(drain(&q), ["ns/a"]);
    }

    #[test]
    fn owner_type_comes_from_the_kind_with_its_scope() {
        assert_eq!(rs_owner(), OwnerType::new("apps/v1", "ReplicaSet", true));
        assert!(!OwnerType::of::<Namespace>().namespaced);
        assert_eq!(OwnerType::of::<Namespace>().group, "");
    }

    #[test]
    fn a_child_enqueues_its_controller_owner_of_the_right_kind_only() {
        let q = queue();
        let h = EnqueueHandler::<Pod>::for_controller_owner(q.clone(), rs_owner());
        h.on_add(
            &pod("c1", vec![owner_ref("apps/v1", "ReplicaSet", "rs", true)]),
            false,
        );
        // Not the controller, wrong kind, wrong group, no owner: nothing.
        h.on_add(
            &pod("c2", vec![owner_ref("apps/v1", "ReplicaSet", "x", false)]),
            false,
        );
        h.on_add(
            &pod("c3", vec![owner_ref("apps/v1", "Deployment", "x", true)]),
            false,
        );
        h.on_add(
            &pod(
                "c4",
                vec![owner_ref("other.io/v1", "ReplicaSet", "x", true)],
            ),
            false,
        );
        h.on_add(&pod("c5", vec![]), false);
        // Another version of the same group and kind still matches.
        h.on_add(
            &pod(
                "c6",
                vec![owner_ref("apps/v1beta2", "ReplicaSet", "old", true)],
            ),
            false,
        );
        assert_eq!(drain(&q), ["ns/rs", "ns/old"]);
    }

    #[test]
    fn an_update_that_moves_a_child_enqueues_the_old_and_the_new_owner() {
        let q = queue();
        let h = EnqueueHandler::<Pod>::for_controller_owner(q.clone(), rs_owner());
        let old = pod(
            "c",
            vec![owner_ref("apps/v1", "ReplicaSet", "before", true)],
        );
        let new = with_meta(&old, |m| {
            m.owner_references = Some(vec![owner_ref("apps/v1", "ReplicaSet", "after", true)]);
        });
        h.on_update(&old, &new);
        assert_eq!(drain(&q), ["ns/after", "ns/before"]);
        h.on_update(&new, &new);
        assert_eq!(drain(&q), ["ns/after"], "same owner enqueued once");
    }

    #[test]
    fn a_tombstone_is_unwrapped_to_find_the_owner() {
        let q = queue();
        let h = EnqueueHandler::<Pod>::for_controller_owner(q.clone(), rs_owner());
        let p = pod("gone", vec![owner_ref("apps/v1", "ReplicaSet", "rs", true)]);
        h.on_delete(&DeletedObject::FinalStateUnknown {
            key: ObjectKey::new(Some("ns"), "gone"),
            obj: p.clone(),
        });
        h.on_delete(&DeletedObject::Deleted(p));
        // Both deletes name one owner; the queue holds it once.
        assert_eq!(drain(&q), ["ns/rs"]);
    }

    #[test]
    fn a_cluster_scoped_owner_key_has_no_namespace() {
        let q = queue();
        let h = EnqueueHandler::<ConfigMap>::for_controller_owner(
            q.clone(),
            OwnerType::of::<Namespace>(),
        );
        let cm = Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("cm".into()),
                namespace: Some("team".into()),
                owner_references: Some(vec![owner_ref("v1", "Namespace", "team", true)]),
                ..Default::default()
            },
            ..Default::default()
        });
        h.on_add(&cm, false);
        assert_eq!(drain(&q), ["team"]);
    }

    #[test]
    fn a_mapped_handler_enqueues_the_union_for_old_and_new() {
        let q = queue();
        let h = EnqueueHandler::<Pod>::mapped(q.clone(), |p: &Pod| {
            p.metadata
                .labels
                .iter()
                .flatten()
                .filter(|(k, _)| k.as_str() == "job")
                .map(|(_, v)| ObjectKey::new(Some("ns"), v))
                .collect()
        });
        let old = with_meta(&pod("p", vec![]), |m| {
            m.labels = Some([("job".to_owned(), "one".to_owned())].into());
        });
        let new = with_meta(&old, |m| {
            m.labels = Some([("job".to_owned(), "two".to_owned())].into());
        });
        h.on_update(&old, &new);
        assert_eq!(drain(&q), ["ns/two", "ns/one"]);
    }

    #[test]
    fn generation_changed_drops_status_only_updates_but_not_creates_or_deletes() {
        let q = queue();
        let h = EnqueueHandler::<Pod>::for_object(q.clone())
            .with_predicate(Arc::new(GenerationChanged));
        let p = pod("a", vec![]);
        h.on_update(
            &p,
            &with_meta(&p, |m| m.resource_version = Some("2".into())),
        );
        assert!(drain(&q).is_empty());
        h.on_update(&p, &with_meta(&p, |m| m.generation = Some(2)));
        assert_eq!(drain(&q), ["ns/a"]);
        h.on_add(&p, false);
        h.on_delete(&DeletedObject::Deleted(pod("b", vec![])));
        assert_eq!(drain(&q), ["ns/a", "ns/b"]);
    }

    #[test]
    fn resource_version_changed_drops_resyncs() {
        let q = queue();
        let h = EnqueueHandler::<Pod>::for_object(q.clone())
            .with_predicate(Arc::new(ResourceVersionChanged));
        let p = pod("a", vec![]);
        h.on_update(&p, &p);
        assert!(drain(&q).is_empty());
        h.on_update(
            &p,
            &with_meta(&p, |m| m.resource_version = Some("9".into())),
        );
        assert_eq!(drain(&q), ["ns/a"]);
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn label_selector_supports_match_labels_and_every_operator() {
        let sel = LabelSelectorPredicate::new(&LabelSelector {
            match_labels: Some([("app".to_owned(), "tf".to_owned())].into()),
            match_expressions: Some(vec![
                expr("tier", "In", &["a", "b"]),
                expr("env", "NotIn", &["prod"]),
                expr("team", "Exists", &[]),
                expr("legacy", "DoesNotExist", &[]),
            ]),
        })
        .expect("valid selector");
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let good = labels(&[("app", "tf"), ("tier", "a"), ("team", "x")]);
        assert!(sel.matches(Some(&good)));
        let mut prod = good.clone();
        prod.insert("env".into(), "prod".into());
        assert!(!sel.matches(Some(&prod)));
        let mut legacy = good.clone();
        legacy.insert("legacy".into(), "1".into());
        assert!(!sel.matches(Some(&legacy)));
        assert!(!sel.matches(Some(&labels(&[
            ("app", "tf"),
            ("tier", "c"),
            ("team", "x")
        ]))));
        assert!(!sel.matches(None));
        assert!(
            LabelSelectorPredicate::new(&LabelSelector::default())
                .expect("empty")
                .matches(None)
        );
    }

    #[test]
    fn label_selector_rejects_unknown_operators_and_missing_values() {
        let bad = |e| LabelSelector {
            match_expressions: Some(vec![e]),
            ..Default::default()
        };
        assert!(matches!(
            LabelSelectorPredicate::new(&bad(expr("k", "Near", &[]))),
            Err(HandlerError::UnknownOperator { .. })
        ));
        assert!(matches!(
            LabelSelectorPredicate::new(&bad(expr("k", "In", &[]))),
            Err(HandlerError::MissingValues { .. })
        ));
    }

    #[test]
    fn label_selector_checks_only_the_new_labels_on_update() {
        let q = queue();
        let sel = LabelSelectorPredicate::new(&LabelSelector {
            match_labels: Some([("watch".to_owned(), "yes".to_owned())].into()),
            ..Default::default()
        })
        .expect("valid selector");
        let h = EnqueueHandler::<Pod>::for_object(q.clone()).with_predicate(Arc::new(sel));
        let inside = with_meta(&pod("a", vec![]), |m| {
            m.labels = Some([("watch".to_owned(), "yes".to_owned())].into());
        });
        let outside = with_meta(&inside, |m| m.labels = None);
        h.on_update(&inside, &outside);
        assert!(
            drain(&q).is_empty(),
            "documented caveat: leaving the selector is silent"
        );
        h.on_update(&outside, &inside);
        assert_eq!(drain(&q), ["ns/a"]);
    }

    #[test]
    fn any_passes_if_one_predicate_does() {
        let either = Any(vec![
            Arc::new(GenerationChanged),
            Arc::new(ResourceVersionChanged),
        ]);
        let m = ObjectMeta {
            generation: Some(1),
            resource_version: Some("1".into()),
            ..Default::default()
        };
        let rv = ObjectMeta {
            resource_version: Some("2".into()),
            ..m.clone()
        };
        assert!(!either.update(&m, &m));
        assert!(either.update(&m, &rv));
    }
}
