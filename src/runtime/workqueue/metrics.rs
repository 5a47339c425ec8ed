//! Prometheus metrics for work queues, with client-go's names.
//!
//! Mirrors client-go `util/workqueue/metrics.go` and the names controller-runtime
//! registers in `pkg/metrics/workqueue.go`, so dashboards written for Go
//! controllers work unchanged: every series is labelled `controller` and
//! `name` (both the queue's name, as controller-runtime's provider sets them),
//! and `workqueue_depth` also `priority=""` (controller-runtime's priority
//! queue; ours has none, and Prometheus drops empty labels on ingestion).
//!
//! client-go refreshes `unfinished_work_seconds` and
//! `longest_running_processor_seconds` from a goroutine every 500 ms; we compute
//! them at scrape time with a [`Collector`] instead, so there is no background
//! task and the value is exact when read.
//!
//! This module must never touch a queue's lock on the hot path: queues call
//! the small `QueueMetrics` methods after releasing their lock.
use std::any::{Any, TypeId};
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::observability::metrics::SharedRegistry;

/// The labels every workqueue series carries.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub controller: String,
    pub name: String,
}

/// `workqueue_depth`'s labels: controller-runtime splits depth by priority.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DepthLabels {
    pub controller: String,
    pub name: String,
    pub priority: String,
}

type HistogramFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    // client-go: 10 ns up to 1000 s, one bucket per power of ten.
    Histogram::new(exponential_buckets(1e-8, 10.0, 12))
}

/// The workqueue metric families of one registry, shared by all its queues.
#[derive(Clone)]
pub struct WorkqueueMetrics {
    depth: Family<DepthLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<QueueLabels, Counter>,
    unfinished: Arc<UnfinishedCollector>,
}

impl WorkqueueMetrics {
    /// The families registered in `registry`, registering them on first use,
    /// so any number of queues can share one registry without duplicates.
    pub fn register(registry: &SharedRegistry) -> Self {
        register_once(registry, |r| {
            let m = WorkqueueMetrics {
                depth: Family::default(),
                adds: Family::default(),
                queue_duration: Family::new_with_constructor(duration_histogram),
                work_duration: Family::new_with_constructor(duration_histogram),
                retries: Family::default(),
                unfinished: Arc::new(UnfinishedCollector::default()),
            };
            r.register(
                "workqueue_depth",
                "Current depth of workqueue by workqueue and priority",
                m.depth.clone(),
            );
            // prometheus-client appends `_total` to counters itself.
            r.register(
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                m.adds.clone(),
            );
            r.register(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                m.queue_duration.clone(),
            );
            r.register(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                m.work_duration.clone(),
            );
            r.register(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                m.retries.clone(),
            );
            r.register_collector(Box::new(Arc::clone(&m.unfinished)));
            m
        })
    }

    /// Handles for the queue called `name`.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let labels = QueueLabels {
            controller: name.to_owned(),
            name: name.to_owned(),
        };
        let depth = DepthLabels {
            controller: name.to_owned(),
            name: name.to_owned(),
            priority: String::new(),
        };
        QueueMetrics {
            depth: self.depth.get_or_create(&depth).clone(),
            adds: self.adds.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            unfinished: Arc::clone(&self.unfinished),
            labels,
        }
    }
}

/// One queue's metric handles (cheap atomics; no lock, no lookup per op).
#[derive(Clone)]
pub struct QueueMetrics {
    labels: QueueLabels,
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    unfinished: Arc<UnfinishedCollector>,
}

impl QueueMetrics {
    pub(super) fn added(&self) {
        self.adds.inc();
        self.depth.inc();
    }

    pub(super) fn got(&self, queued_for: Option<Duration>) {
        self.depth.dec();
        if let Some(d) = queued_for {
            self.queue_duration.observe(d.as_secs_f64());
        }
    }

    pub(super) fn done(&self, worked_for: Duration) {
        self.work_duration.observe(worked_for.as_secs_f64());
    }

    pub(super) fn retry(&self) {
        self.retries.inc();
    }

    pub(super) fn track_unfinished(&self, queue: Weak<dyn UnfinishedWork>) {
        let mut queues = self
            .unfinished
            .queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        queues.push((self.labels.clone(), queue));
    }
}

/// Implemented by a queue so the collector can sum its in-flight work.
pub(super) trait UnfinishedWork: Send + Sync {
    /// (total seconds in flight, longest single item in flight) at `now`.
    fn unfinished(&self, now: Instant) -> (f64, f64);
}

#[derive(Default)]
struct UnfinishedCollector {
    queues: Mutex<Vec<(QueueLabels, Weak<dyn UnfinishedWork>)>>,
}

impl fmt::Debug for UnfinishedCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UnfinishedCollector")
    }
}

impl Collector for UnfinishedCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let now = Instant::now();
        let values: Vec<(QueueLabels, (f64, f64))> = {
            let mut queues = self
                .queues
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            queues.retain(|(_, q)| q.strong_count() > 0);
            queues
                .iter()
                .filter_map(|(l, q)| q.upgrade().map(|q| (l.clone(), q.unfinished(now))))
                .collect()
        };
        let families: [(&str, &str, Pick); 2] = [
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been \
                 observed by work_duration. Large values indicate stuck threads.",
                |(total, _)| total,
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                |(_, longest)| longest,
            ),
        ];
        for (name, help, pick) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (labels, v) in &values {
                let gauge = ConstGauge::new(pick(*v));
                gauge.encode(metric.encode_family(labels)?)?;
            }
        }
        Ok(())
    }
}

/// Picks one of (total, longest) for a gauge.
type Pick = fn((f64, f64)) -> f64;

type Registered = (Weak<Mutex<Registry>>, TypeId, Box<dyn Any + Send>);

/// Families already registered, per registry and per metrics type.
static REGISTERED: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

/// Returns the `M` registered in `registry`, calling `make` only the first time.
///
/// prometheus-client has no lookup by name and happily encodes a family twice,
/// so components that share a registry (two controllers, two queues) go
/// through here to register their families exactly once.
pub(crate) fn register_once<M: Clone + Send + 'static>(
    registry: &SharedRegistry,
    make: impl FnOnce(&mut Registry) -> M,
) -> M {
    let mut all = REGISTERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    all.retain(|(r, _, _)| r.strong_count() > 0);
    let wanted = TypeId::of::<M>();
    let found = all
        .iter()
        .find(|(r, t, _)| *t == wanted && std::ptr::eq(r.as_ptr(), Arc::as_ptr(registry)));
    if let Some(m) = found.and_then(|(_, _, m)| m.downcast_ref::<M>()) {
        return m.clone();
    }
    let m = {
        let mut reg = registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        make(&mut reg)
    };
    all.push((Arc::downgrade(registry), wanted, Box::new(m.clone())));
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::{encode, new_registry};

    #[test]
    fn families_are_registered_once_per_registry() {
        let registry = new_registry();
        let a = WorkqueueMetrics::register(&registry).queue("a");
        let b = WorkqueueMetrics::register(&registry).queue("b");
        a.added();
        b.added();
        b.added();
        let text = encode(&registry);
        assert_eq!(text.matches("# TYPE workqueue_depth gauge").count(), 1);
        assert!(
            text.contains("workqueue_depth{controller=\"a\",name=\"a\",priority=\"\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("workqueue_adds_total{controller=\"b\",name=\"b\"} 2"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn every_client_go_workqueue_name_is_exposed_exactly() {
        let registry = new_registry();
        let _q = crate::runtime::workqueue::rate_limiting::RateLimitingQueue::<u8>::with_metrics(
            "q",
            crate::runtime::workqueue::rate_limiter::default_controller_rate_limiter(),
            &registry,
        );
        let text = encode(&registry);
        for (name, kind) in [
            ("workqueue_depth", "gauge"),
            ("workqueue_adds_total", "counter"),
            ("workqueue_queue_duration_seconds", "histogram"),
            ("workqueue_work_duration_seconds", "histogram"),
            ("workqueue_unfinished_work_seconds", "gauge"),
            ("workqueue_longest_running_processor_seconds", "gauge"),
            ("workqueue_retries_total", "counter"),
        ] {
            // prometheus-client writes counters' TYPE line without `_total`.
            let family = name.trim_end_matches("_total");
            assert!(
                text.contains(&format!("# TYPE {family} {kind}\n")),
                "{name}: {text}"
            );
            assert!(text.contains(name), "{name}");
        }
    }

    #[test]
    fn a_second_registry_gets_its_own_families() {
        let one = new_registry();
        let two = new_registry();
        WorkqueueMetrics::register(&one).queue("q").added();
        WorkqueueMetrics::register(&two).queue("q");
        assert!(encode(&one).contains("workqueue_adds_total{controller=\"q\",name=\"q\"} 1"));
        assert!(encode(&two).contains("workqueue_adds_total{controller=\"q\",name=\"q\"} 0"));
    }
}
