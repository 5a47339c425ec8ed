//! Model test of DeltaFIFO + Indexer + the informer's processing: random
//! creates/updates/deletes on a model "server", with watch outages, relists,
//! resyncs and pops interleaved. After processing, the cache equals the
//! server, and every handler sees a clean lifecycle per key: no delete of an
//! absent object (a duplicate), no add of a present one (a lost delete).
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

use super::*;
use crate::runtime::cache::reflector::script::ScriptedListWatch;

#[derive(Clone, Debug)]
enum Op {
    Create(u8),
    Update(u8),
    Delete(u8),
    WatchDown,
    Relist,
    Pop,
    Resync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6).prop_map(Op::Create),
        3 => (0u8..6).prop_map(Op::Update),
        3 => (0u8..6).prop_map(Op::Delete),
        1 => Just(Op::WatchDown),
        1 => Just(Op::Relist),
        4 => Just(Op::Pop),
        1 => Just(Op::Resync),
    ]
}

fn obj(key: u8, rv: u64) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            namespace: Some("ns".into()),
            name: Some(format!("cm-{key}")),
            resource_version: Some(rv.to_string()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// What one handler believes exists, and every lifecycle violation seen.
#[derive(Default)]
struct Lifecycle {
    view: Mutex<HashMap<String, String>>,
    violations: Mutex<Vec<String>>,
    deletes: Mutex<HashMap<String, usize>>,
    adds: Mutex<HashMap<String, usize>>,
}

fn name_rv(obj: &ConfigMap) -> (String, String) {
    (
        obj.metadata.name.clone().unwrap_or_default(),
        obj.metadata.resource_version.clone().unwrap_or_default(),
    )
}

impl EventHandler<ConfigMap> for Lifecycle {
    fn on_add(&self, obj: &Arc<ConfigMap>, _: bool) {
        let (name, rv) = name_rv(obj);
        *self.adds.lock().unwrap().entry(name.clone()).or_default() += 1;
        if self.view.lock().unwrap().insert(name.clone(), rv).is_some() {
            self.violations
                .lock()
                .unwrap()
                .push(format!("add of present {name}"));
        }
    }

    fn on_update(&self, _: &Arc<ConfigMap>, new: &Arc<ConfigMap>) {
        let (name, rv) = name_rv(new);
        if self.view.lock().unwrap().insert(name.clone(), rv).is_none() {
            self.violations
                .lock()
                .unwrap()
                .push(format!("update of absent {name}"));
        }
    }

    fn on_delete(&self, obj: &DeletedObject<ConfigMap>) {
        let (name, _) = name_rv(obj.object());
        *self
            .deletes
            .lock()
            .unwrap()
            .entry(name.clone())
            .or_default() += 1;
        if self.view.lock().unwrap().remove(&name).is_none() {
            self.violations
                .lock()
                .unwrap()
                .push(format!("delete of absent {name}"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn after_processing_the_cache_equals_the_server_and_no_delete_is_lost_or_doubled(
        ops in proptest::collection::vec(op(), 0..120)
    ) {
        let informer: SharedInformer<ConfigMap> =
            SharedInformer::new(Arc::new(ScriptedListWatch::new()), InformerConfig::default());
        let handler = Arc::new(Lifecycle::default());
        informer.add_event_handler(handler.clone());
        let fifo = informer.inner.fifo.clone();
        let pop = || fifo.try_pop_with(|d| informer.process(d));

        let mut server: BTreeMap<u8, u64> = BTreeMap::new();
        let mut rv = 0u64;
        let list = |server: &BTreeMap<u8, u64>| -> Vec<Arc<ConfigMap>> {
            server.iter().map(|(k, v)| obj(*k, *v)).collect()
        };
        // The reflector starts with a list.
        fifo.replace(list(&server));
        let mut watch_up = true;

        for op in ops {
            match op {
                Op::Create(k) if !server.contains_key(&k) => {
                    rv += 1;
                    server.insert(k, rv);
                    if watch_up { fifo.add(obj(k, rv)); }
                }
                Op::Update(k) if server.contains_key(&k) => {
                    rv += 1;
                    server.insert(k, rv);
                    if watch_up { fifo.update(obj(k, rv)); }
                }
                Op::Delete(k) if server.contains_key(&k) => {
                    rv += 1;
                    server.remove(&k);
                    // While the watch is down the delete is missed: only a
                    // relist's tombstone can tell the informer.
                    if watch_up { fifo.delete(obj(k, rv)); }
                }
                Op::WatchDown => watch_up = false,
                Op::Relist => {
                    fifo.replace(list(&server));
                    watch_up = true;
                }
                Op::Pop => { pop(); }
                Op::Resync => fifo.resync(),
                _ => {}
            }
        }
        if !watch_up {
            fifo.replace(list(&server));
        }
        while pop().is_some() {}

        let violations = handler.violations.lock().unwrap().clone();
        prop_assert!(violations.is_empty(), "{violations:?}");

        let expected: HashMap<String, String> = server
            .iter()
            .map(|(k, v)| (format!("cm-{k}"), v.to_string()))
            .collect();
        let cached: HashMap<String, String> =
            informer.indexer().list().iter().map(|o| name_rv(o)).collect();
        prop_assert_eq!(&cached, &expected);
        prop_assert_eq!(&*handler.view.lock().unwrap(), &expected);

        // Each key's lifetimes as the handler saw them: every add is matched
        // by exactly one delete, except the one still alive at the end.
        let deletes = handler.deletes.lock().unwrap();
        let adds = handler.adds.lock().unwrap();
        for (name, added) in adds.iter() {
            let deleted = deletes.get(name).copied().unwrap_or(0);
            let alive = usize::from(expected.contains_key(name));
            prop_assert_eq!(*added, deleted + alive, "{}", name);
        }
    }
}
