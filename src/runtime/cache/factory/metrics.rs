//! Metrics of every informer a factory created, read at scrape time.
//!
//! client-go once exported `reflector_*` metrics (lists, watches, last
//! resourceVersion; removed in 1.17 for their cost with per-reflector
//! labels). Here there are a handful of informers per process, so one series
//! per informer is cheap, and a stuck or silently failing informer (decode
//! failures, relists in a loop, a frozen resourceVersion) becomes visible.
//!
//! It must never touch the informers' hot paths: a collector reads the
//! counters the reflector keeps anyway, only when scraped (through the
//! runtime's metrics seam, [`crate::runtime::metrics`]).
use std::sync::Arc;

use crate::runtime::metrics::{Family, Scrape, ScrapedKind, ScrapedSeries, SharedMetrics, Value};

/// Labels of one informer: its kind and the scope of its watch.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(super) struct InformerLabels {
    pub kind: String,
    pub namespace: String,
    pub label_selector: String,
    pub field_selector: String,
}

/// One informer's numbers at scrape time.
#[derive(Clone, Debug, Default)]
pub(super) struct Snapshot {
    pub lists: u64,
    pub watches: u64,
    pub decode_failures: u64,
    /// 0 when unknown or not numeric (resourceVersions are opaque strings;
    /// etcd-backed servers use integers).
    pub last_sync_resource_version: i64,
    pub cached_objects: i64,
    pub synced: bool,
}

/// Yields the current snapshot of every informer.
pub(super) type Source = Arc<dyn Fn() -> Vec<(InformerLabels, Snapshot)> + Send + Sync>;

const LABELS: &[&str] = &["kind", "namespace", "label_selector", "field_selector"];

const fn family(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        labels: LABELS,
    }
}

/// The families, in the order [`InformerCollector::scrape`] gives values.
const FAMILIES: [(Family, ScrapedKind); 6] = [
    (
        family(
            "tfjob_operator_informer_lists",
            "Completed (re)lists of the informer's reflector, streaming or paginated",
        ),
        ScrapedKind::Counter,
    ),
    (
        family(
            "tfjob_operator_informer_watches",
            "Watches opened by the informer's reflector",
        ),
        ScrapedKind::Counter,
    ),
    (
        family(
            "tfjob_operator_informer_decode_failures",
            "Objects from lists and watches that failed to decode (the cache kept its last good copy; an undecodable delete still deleted by key)",
        ),
        ScrapedKind::Counter,
    ),
    (
        family(
            "tfjob_operator_informer_last_sync_resource_version",
            "The resourceVersion the informer's cache is synced to (0: unknown)",
        ),
        ScrapedKind::Gauge,
    ),
    (
        family(
            "tfjob_operator_informer_cached_objects",
            "Objects in the informer's cache",
        ),
        ScrapedKind::Gauge,
    ),
    (
        family(
            "tfjob_operator_informer_synced",
            "1 once the informer's first list has been delivered",
        ),
        ScrapedKind::Gauge,
    ),
];

/// Registers the informer families in `registry`, read from `source`.
pub(super) fn register(registry: &SharedMetrics, source: Source) {
    registry.scraped(&FAMILIES, Arc::new(InformerCollector { source }));
}

struct InformerCollector {
    source: Source,
}

impl Scrape for InformerCollector {
    fn scrape(&self) -> Vec<ScrapedSeries> {
        (self.source)()
            .into_iter()
            .map(|(l, s)| {
                (
                    vec![l.kind, l.namespace, l.label_selector, l.field_selector],
                    vec![
                        Value::Count(s.lists),
                        Value::Count(s.watches),
                        Value::Count(s.decode_failures),
                        Value::Int(s.last_sync_resource_version),
                        Value::Int(s.cached_objects),
                        Value::Int(i64::from(s.synced)),
                    ],
                )
            })
            .collect()
    }
}
