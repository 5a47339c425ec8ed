//! Prometheus metrics of every informer a factory created, read at scrape time.
//!
//! client-go once exported `reflector_*` metrics (lists, watches, last
//! resourceVersion; removed in 1.17 for their cost with per-reflector
//! labels). Here there are a handful of informers per process, so one series
//! per informer is cheap, and a stuck or silently failing informer (decode
//! failures, relists in a loop, a frozen resourceVersion) becomes visible.
//!
//! It must never touch the informers' hot paths: a collector reads the
//! counters the reflector keeps anyway, only when scraped.
use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Labels of one informer: its kind and the scope of its watch.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
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

pub(super) struct InformerCollector {
    pub source: Source,
}

impl fmt::Debug for InformerCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InformerCollector")
    }
}

type CounterPick = fn(&Snapshot) -> u64;
type GaugePick = fn(&Snapshot) -> i64;

impl Collector for InformerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let values = (self.source)();
        let counters: [(&str, &str, CounterPick); 3] = [
            (
                "tfjob_operator_informer_lists",
                "Completed (re)lists of the informer's reflector, streaming or paginated",
                |s| s.lists,
            ),
            (
                "tfjob_operator_informer_watches",
                "Watches opened by the informer's reflector",
                |s| s.watches,
            ),
            (
                "tfjob_operator_informer_decode_failures",
                "Objects from lists and watches that failed to decode (the cache kept its last good copy; an undecodable delete still deleted by key)",
                |s| s.decode_failures,
            ),
        ];
        for (name, help, pick) in counters {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (labels, snapshot) in &values {
                ConstCounter::new(pick(snapshot)).encode(metric.encode_family(labels)?)?;
            }
        }
        let gauges: [(&str, &str, GaugePick); 3] = [
            (
                "tfjob_operator_informer_last_sync_resource_version",
                "The resourceVersion the informer's cache is synced to (0: unknown)",
                |s| s.last_sync_resource_version,
            ),
            (
                "tfjob_operator_informer_cached_objects",
                "Objects in the informer's cache",
                |s| s.cached_objects,
            ),
            (
                "tfjob_operator_informer_synced",
                "1 once the informer's first list has been delivered",
                |s| i64::from(s.synced),
            ),
        ];
        for (name, help, pick) in gauges {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (labels, snapshot) in &values {
                ConstGauge::new(pick(snapshot)).encode(metric.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}
