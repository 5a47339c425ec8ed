//! The Prometheus side of the pipeline's metrics seam
//! ([`crate::runtime::metrics`]): each family the runtime asks for becomes a
//! `prometheus-client` family in the shared registry, so the names, labels
//! and values on `/metrics` are the ones dashboards for Go controllers chart.
//!
//! Mirrors component-base's `metrics/prometheus/workqueue` (the Prometheus
//! `MetricsProvider` client-go's workqueue is handed) and
//! `metrics/prometheus/restclient` (the `tools/metrics` hooks registered
//! from outside). This is the one place in `observability` that names the
//! runtime: it implements the runtime's traits, the runtime never sees it.
use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::{Family as PromFamily, MetricConstructor};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::{SharedRegistry, encode};
use crate::runtime::metrics::{
    self as seam, Buckets, Family, MetricsRegistry, Scrape, ScrapedKind, SharedMetrics, Value,
};

type Labels = Vec<(String, String)>;

/// The runtime's metrics handle backed by `registry`.
pub fn pipeline_metrics(registry: &SharedRegistry) -> SharedMetrics {
    Arc::new(PrometheusMetrics {
        registry: Arc::clone(registry),
    })
}

/// Implements the seam over one shared registry.
struct PrometheusMetrics {
    registry: SharedRegistry,
}

fn labels(family: &Family, values: &[&str]) -> Labels {
    family
        .labels
        .iter()
        .zip(values)
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

/// A family, or for a family without labels the one metric (a labelled
/// family with no labels would render `name{}`).
enum Metric<M, C = fn() -> M> {
    Plain(M),
    Labelled(Family, PromFamily<Labels, M, C>),
}

impl<M: Clone, C: MetricConstructor<M>> Metric<M, C> {
    fn get(&self, values: &[&str]) -> M {
        match self {
            Self::Plain(m) => m.clone(),
            Self::Labelled(family, f) => f.get_or_create(&labels(family, values)).clone(),
        }
    }
}

impl seam::Counter for Counter {
    fn inc(&self) {
        Counter::inc(self);
    }
}

impl seam::Gauge for Gauge {
    fn inc(&self) {
        Gauge::inc(self);
    }
    fn dec(&self) {
        Gauge::dec(self);
    }
    fn set(&self, value: i64) {
        Gauge::set(self, value);
    }
}

impl seam::Histogram for Histogram {
    fn observe(&self, value: f64) {
        Histogram::observe(self, value);
    }
}

impl seam::CounterFamily for Metric<Counter> {
    fn with(&self, values: &[&str]) -> Arc<dyn seam::Counter> {
        Arc::new(self.get(values))
    }
}

impl seam::GaugeFamily for Metric<Gauge> {
    fn with(&self, values: &[&str]) -> Arc<dyn seam::Gauge> {
        Arc::new(self.get(values))
    }
}

impl seam::HistogramFamily for Metric<Histogram, NewHistogram> {
    fn with(&self, values: &[&str]) -> Arc<dyn seam::Histogram> {
        Arc::new(self.get(values))
    }
}

/// Builds each series' histogram with the family's buckets.
#[derive(Clone)]
struct NewHistogram(Buckets);

impl MetricConstructor<Histogram> for NewHistogram {
    fn new_metric(&self) -> Histogram {
        match self.0 {
            Buckets::Exponential {
                start,
                factor,
                count,
            } => Histogram::new(exponential_buckets(start, factor, count)),
            Buckets::Explicit(bounds) => Histogram::new(bounds.iter().copied()),
        }
    }
}

impl PrometheusMetrics {
    fn register(&self, family: Family, metric: impl prometheus_client::registry::Metric) {
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .register(family.name, family.help, metric);
    }

    fn metric<M, C>(
        &self,
        family: Family,
        plain: impl FnOnce() -> M,
        constructor: C,
    ) -> Metric<M, C>
    where
        M: prometheus_client::registry::Metric + Clone + EncodeMetric,
        M: prometheus_client::metrics::TypedMetric,
        C: MetricConstructor<M> + Clone + Send + Sync + 'static,
    {
        if family.labels.is_empty() {
            let m = plain();
            self.register(family, m.clone());
            Metric::Plain(m)
        } else {
            let f = PromFamily::<Labels, M, C>::new_with_constructor(constructor);
            self.register(family, f.clone());
            Metric::Labelled(family, f)
        }
    }
}

impl MetricsRegistry for PrometheusMetrics {
    fn counter(&self, family: Family) -> Arc<dyn seam::CounterFamily> {
        let ctor: fn() -> Counter = Counter::default;
        Arc::new(self.metric(family, Counter::default, ctor))
    }

    fn gauge(&self, family: Family) -> Arc<dyn seam::GaugeFamily> {
        let ctor: fn() -> Gauge = Gauge::default;
        Arc::new(self.metric(family, Gauge::default, ctor))
    }

    fn histogram(&self, family: Family, buckets: Buckets) -> Arc<dyn seam::HistogramFamily> {
        let ctor = NewHistogram(buckets);
        Arc::new(self.metric(family, || ctor.new_metric(), ctor.clone()))
    }

    fn scraped(&self, families: &[(Family, ScrapedKind)], source: Arc<dyn Scrape>) {
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .register_collector(Box::new(Scraped {
                families: families.to_vec(),
                source,
            }));
    }

    fn render(&self) -> String {
        encode(&self.registry)
    }
}

/// Families read at scrape time.
struct Scraped {
    families: Vec<(Family, ScrapedKind)>,
    source: Arc<dyn Scrape>,
}

impl fmt::Debug for Scraped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scraped")
    }
}

impl Collector for Scraped {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let series = self.source.scrape();
        for (i, (family, kind)) in self.families.iter().enumerate() {
            let kind = match kind {
                ScrapedKind::Counter => MetricType::Counter,
                ScrapedKind::Gauge => MetricType::Gauge,
            };
            let mut metric = encoder.encode_descriptor(family.name, family.help, None, kind)?;
            for (values, row) in &series {
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                let labels = labels(family, &values);
                let encoder = metric.encode_family(&labels)?;
                match row.get(i) {
                    Some(Value::Count(n)) => ConstCounter::new(*n).encode(encoder)?,
                    Some(Value::Int(n)) => ConstGauge::new(*n).encode(encoder)?,
                    Some(Value::Float(x)) => ConstGauge::new(*x).encode(encoder)?,
                    None => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observability::metrics::new_registry;

    const REQUESTS: Family = Family {
        name: "rest_client_requests",
        help: "Number of HTTP requests",
        labels: &["code", "method"],
    };
    const FAILURES: Family = Family {
        name: "tfjob_operator_events_write_failures",
        help: "Events that could not be written",
        labels: &[],
    };
    const LATENCY: Family = Family {
        name: "rest_client_request_duration_seconds",
        help: "Request latency",
        labels: &["verb"],
    };

    struct Two;
    impl Scrape for Two {
        fn scrape(&self) -> Vec<seam::ScrapedSeries> {
            vec![(vec!["q".into()], vec![Value::Count(3), Value::Float(0.5)])]
        }
    }

    #[test]
    fn each_kind_renders_the_lines_prometheus_users_chart() {
        let registry = new_registry();
        let metrics = pipeline_metrics(&registry);
        let requests = metrics.counter(REQUESTS);
        requests.with(&["200", "GET"]).inc();
        requests.with(&["200", "GET"]).inc();
        metrics.counter(FAILURES).with(&[]).inc();
        metrics
            .histogram(LATENCY, Buckets::Explicit(&[0.25, 0.5]))
            .with(&["GET"])
            .observe(0.3);
        let depth = Family {
            name: "workqueue_depth",
            help: "Depth",
            labels: &["name", "priority"],
        };
        metrics.gauge(depth).with(&["q", ""]).set(4);
        let lists = Family {
            name: "tfjob_operator_informer_lists",
            help: "Lists",
            labels: &["kind"],
        };
        let unfinished = Family {
            name: "workqueue_unfinished_work_seconds",
            help: "Unfinished",
            labels: &["name"],
        };
        metrics.scraped(
            &[
                (lists, ScrapedKind::Counter),
                (unfinished, ScrapedKind::Gauge),
            ],
            Arc::new(Two),
        );
        let text = metrics.render();
        for line in [
            "# TYPE rest_client_requests counter\n",
            "rest_client_requests_total{code=\"200\",method=\"GET\"} 2\n",
            "tfjob_operator_events_write_failures_total 1\n",
            "rest_client_request_duration_seconds_sum{verb=\"GET\"} 0.3\n",
            "rest_client_request_duration_seconds_bucket{le=\"0.5\",verb=\"GET\"} 1\n",
            "workqueue_depth{name=\"q\",priority=\"\"} 4\n",
            "tfjob_operator_informer_lists_total{kind=\"q\"} 3\n",
            "workqueue_unfinished_work_seconds{name=\"q\"} 0.5\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        assert_eq!(text, encode(&registry));
    }
}
