//! The pipeline's metrics seam: the small traits runtime code counts
//! through, with no metrics library behind them.
//!
//! Mirrors client-go's `util/workqueue` `MetricsProvider` (the queue asks a
//! provider for a depth gauge, an adds counter, ... and never sees
//! Prometheus) and the registration hooks of `tools/metrics` (the REST
//! client's metrics are plugged in from outside), with controller-runtime's
//! `metrics.RegistererGatherer` as the one handle the manager serves on
//! `/metrics`. Runtime code names its families here (names, help, labels,
//! buckets: what dashboards chart); what stores and renders them is plugged
//! in by the caller (the process's Prometheus registry, beside the
//! pipeline, not in it). A test builds a `testing::TextRegistry`.
//!
//! A family is asked for once per component; label values are resolved to a
//! handle up front wherever they are known, so a hot path (a queue's add)
//! costs one dynamic call and no lookup.
use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex, Weak};

/// A monotonic count.
pub trait Counter: Send + Sync {
    fn inc(&self);
}

/// A value that goes up and down.
pub trait Gauge: Send + Sync {
    fn inc(&self);
    fn dec(&self);
    fn set(&self, value: i64);
}

/// Observations counted into buckets.
pub trait Histogram: Send + Sync {
    fn observe(&self, value: f64);
}

/// A counter family: one [`Counter`] per set of label values.
pub trait CounterFamily: Send + Sync {
    /// The series for `values`, in the order of [`Family::labels`].
    fn with(&self, values: &[&str]) -> Arc<dyn Counter>;
}

/// A gauge family.
pub trait GaugeFamily: Send + Sync {
    fn with(&self, values: &[&str]) -> Arc<dyn Gauge>;
}

/// A histogram family.
pub trait HistogramFamily: Send + Sync {
    fn with(&self, values: &[&str]) -> Arc<dyn Histogram>;
}

/// What a family is called and how its series are labelled.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// The name without a counter's `_total` (the registry adds it).
    pub name: &'static str,
    pub help: &'static str,
    pub labels: &'static [&'static str],
}

/// A histogram's upper bounds.
#[derive(Clone, Copy, Debug)]
pub enum Buckets {
    /// `start`, `start * factor`, ... (`count` bounds).
    Exponential {
        start: f64,
        factor: f64,
        count: u16,
    },
    Explicit(&'static [f64]),
}

/// The kind of a family read at scrape time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrapedKind {
    Counter,
    Gauge,
}

/// One value read at scrape time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A counter's count.
    Count(u64),
    /// A whole-number gauge.
    Int(i64),
    /// A gauge in seconds or another fraction.
    Float(f64),
}

/// One series read at scrape time: its label values and one value per
/// family, in the order the families were registered.
pub type ScrapedSeries = (Vec<String>, Vec<Value>);

/// Families whose values are computed when scraped (client-go refreshes
/// such gauges from a goroutine; reading them on demand needs no task).
pub trait Scrape: Send + Sync {
    fn scrape(&self) -> Vec<ScrapedSeries>;
}

/// Where components register their families, and what `/metrics` renders.
pub trait MetricsRegistry: Send + Sync {
    fn counter(&self, family: Family) -> Arc<dyn CounterFamily>;
    fn gauge(&self, family: Family) -> Arc<dyn GaugeFamily>;
    fn histogram(&self, family: Family, buckets: Buckets) -> Arc<dyn HistogramFamily>;
    /// Registers `families` (all labelled alike), read from `source` at
    /// every scrape.
    fn scraped(&self, families: &[(Family, ScrapedKind)], source: Arc<dyn Scrape>);
    /// The registry in the text format `/metrics` serves.
    fn render(&self) -> String;
}

/// The handle components share (the manager's, or a test's).
pub type SharedMetrics = Arc<dyn MetricsRegistry>;

/// A registry that keeps nothing: components built without one count here.
pub struct Discard;

struct Nothing;

impl Counter for Nothing {
    fn inc(&self) {}
}

impl Gauge for Nothing {
    fn inc(&self) {}
    fn dec(&self) {}
    fn set(&self, _: i64) {}
}

impl Histogram for Nothing {
    fn observe(&self, _: f64) {}
}

impl CounterFamily for Nothing {
    fn with(&self, _: &[&str]) -> Arc<dyn Counter> {
        Arc::new(Nothing)
    }
}

impl GaugeFamily for Nothing {
    fn with(&self, _: &[&str]) -> Arc<dyn Gauge> {
        Arc::new(Nothing)
    }
}

impl HistogramFamily for Nothing {
    fn with(&self, _: &[&str]) -> Arc<dyn Histogram> {
        Arc::new(Nothing)
    }
}

impl MetricsRegistry for Discard {
    fn counter(&self, _: Family) -> Arc<dyn CounterFamily> {
        Arc::new(Nothing)
    }
    fn gauge(&self, _: Family) -> Arc<dyn GaugeFamily> {
        Arc::new(Nothing)
    }
    fn histogram(&self, _: Family, _: Buckets) -> Arc<dyn HistogramFamily> {
        Arc::new(Nothing)
    }
    fn scraped(&self, _: &[(Family, ScrapedKind)], _: Arc<dyn Scrape>) {}
    fn render(&self) -> String {
        String::new()
    }
}

type Registered = (Weak<dyn MetricsRegistry>, TypeId, Box<dyn Any + Send>);

/// Families already registered, per registry and per metrics type.
static REGISTERED: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

/// Returns the `M` registered in `registry`, calling `make` only the first time.
///
/// A registry may hold a family once (Prometheus encodes a duplicate twice),
/// so components that share a registry (two controllers, two queues) go
/// through here to register their families exactly once.
pub(crate) fn register_once<M: Clone + Send + 'static>(
    registry: &SharedMetrics,
    make: impl FnOnce(&SharedMetrics) -> M,
) -> M {
    let mut all = REGISTERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    all.retain(|(r, _, _)| r.strong_count() > 0);
    let wanted = TypeId::of::<M>();
    let here = Arc::as_ptr(registry).cast::<()>();
    let found = all
        .iter()
        .find(|(r, t, _)| *t == wanted && std::ptr::eq(r.as_ptr().cast::<()>(), here));
    if let Some(m) = found.and_then(|(_, _, m)| m.downcast_ref::<M>()) {
        return m.clone();
    }
    let m = make(registry);
    all.push((Arc::downgrade(registry), wanted, Box::new(m.clone())));
    m
}

#[cfg(test)]
pub mod testing;
