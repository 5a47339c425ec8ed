//! Work-queue metrics with client-go's names, counted through the
//! runtime's metrics seam ([`crate::runtime::metrics`]), as client-go's queue
//! counts through its `MetricsProvider` without knowing Prometheus.
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
//! them at scrape time ([`Scrape`]) instead, so there is no background
//! task and the value is exact when read.
//!
//! This module must never touch a queue's lock on the hot path: queues call
//! the small `QueueMetrics` methods after releasing their lock.
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::runtime::metrics::{
    self, Buckets, CounterFamily, Family, GaugeFamily, HistogramFamily, Scrape, ScrapedKind,
    ScrapedSeries, SharedMetrics, Value, register_once,
};

/// The labels every workqueue series carries.
const QUEUE_LABELS: &[&str] = &["controller", "name"];

/// client-go: 10 ns up to 1000 s, one bucket per power of ten.
const DURATION_BUCKETS: Buckets = Buckets::Exponential {
    start: 1e-8,
    factor: 10.0,
    count: 12,
};

/// The workqueue metric families of one registry, shared by all its queues.
#[derive(Clone)]
pub struct WorkqueueMetrics {
    depth: Arc<dyn GaugeFamily>,
    adds: Arc<dyn CounterFamily>,
    queue_duration: Arc<dyn HistogramFamily>,
    work_duration: Arc<dyn HistogramFamily>,
    retries: Arc<dyn CounterFamily>,
    unfinished: Arc<UnfinishedCollector>,
}

impl WorkqueueMetrics {
    /// The families registered in `registry`, registering them on first use,
    /// so any number of queues can share one registry without duplicates.
    pub fn register(registry: &SharedMetrics) -> Self {
        register_once(registry, |r| {
            let family = |name, help| Family {
                name,
                help,
                labels: QUEUE_LABELS,
            };
            let depth = r.gauge(Family {
                name: "workqueue_depth",
                help: "Current depth of workqueue by workqueue and priority",
                labels: &["controller", "name", "priority"],
            });
            // The registry appends `_total` to counters itself.
            let adds = r.counter(family(
                "workqueue_adds",
                "Total number of adds handled by workqueue",
            ));
            let queue_duration = r.histogram(
                family(
                    "workqueue_queue_duration_seconds",
                    "How long in seconds an item stays in workqueue before being requested",
                ),
                DURATION_BUCKETS,
            );
            let work_duration = r.histogram(
                family(
                    "workqueue_work_duration_seconds",
                    "How long in seconds processing an item from workqueue takes",
                ),
                DURATION_BUCKETS,
            );
            let retries = r.counter(family(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
            ));
            let unfinished = Arc::new(UnfinishedCollector::default());
            r.scraped(
                &[
                    (
                        family(
                            "workqueue_unfinished_work_seconds",
                            "How many seconds of work has been done that is in progress and hasn't been \
                             observed by work_duration. Large values indicate stuck threads.",
                        ),
                        ScrapedKind::Gauge,
                    ),
                    (
                        family(
                            "workqueue_longest_running_processor_seconds",
                            "How many seconds has the longest running processor for workqueue been running",
                        ),
                        ScrapedKind::Gauge,
                    ),
                ],
                Arc::clone(&unfinished) as Arc<dyn Scrape>,
            );
            WorkqueueMetrics {
                depth,
                adds,
                queue_duration,
                work_duration,
                retries,
                unfinished,
            }
        })
    }

    /// Handles for the queue called `name`.
    pub fn queue(&self, name: &str) -> QueueMetrics {
        let labels = [name, name];
        QueueMetrics {
            depth: self.depth.with(&[name, name, ""]),
            adds: self.adds.with(&labels),
            queue_duration: self.queue_duration.with(&labels),
            work_duration: self.work_duration.with(&labels),
            retries: self.retries.with(&labels),
            unfinished: Arc::clone(&self.unfinished),
            name: name.to_owned(),
        }
    }
}

/// One queue's metric handles (resolved once; no lock, no lookup per op).
#[derive(Clone)]
pub struct QueueMetrics {
    name: String,
    depth: Arc<dyn metrics::Gauge>,
    adds: Arc<dyn metrics::Counter>,
    queue_duration: Arc<dyn metrics::Histogram>,
    work_duration: Arc<dyn metrics::Histogram>,
    retries: Arc<dyn metrics::Counter>,
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
        queues.push((self.name.clone(), queue));
    }
}

/// Implemented by a queue so the collector can sum its in-flight work.
pub(super) trait UnfinishedWork: Send + Sync {
    /// (total seconds in flight, longest single item in flight) at `now`.
    fn unfinished(&self, now: Instant) -> (f64, f64);
}

/// Every queue of one registry, read when scraped.
#[derive(Default)]
struct UnfinishedCollector {
    queues: Mutex<Vec<(String, Weak<dyn UnfinishedWork>)>>,
}

impl Scrape for UnfinishedCollector {
    fn scrape(&self) -> Vec<ScrapedSeries> {
        let now = Instant::now();
        let mut queues = self
            .queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        queues.retain(|(_, q)| q.strong_count() > 0);
        queues
            .iter()
            .filter_map(|(name, q)| {
                let (total, longest) = q.upgrade()?.unfinished(now);
                Some((
                    vec![name.clone(), name.clone()],
                    vec![Value::Float(total), Value::Float(longest)],
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::metrics::testing::{encode, new_registry};

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
