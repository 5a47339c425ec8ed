//! A registry for the runtime's own tests: keeps every series in memory and
//! renders them in the Prometheus text format's shape (`# TYPE` lines,
//! `_total` on counters, `_sum`/`_count`/`_bucket{le=…}` on histograms), so
//! a test reads exactly the series its component counted without the
//! Prometheus registry the process plugs in (whose own tests show it
//! renders the same lines). client-go's workqueue tests do the same with a
//! `testMetricsProvider` (`util/workqueue/metrics_test.go`).
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{
    Buckets, Counter, CounterFamily, Family, Gauge, GaugeFamily, Histogram, HistogramFamily,
    MetricsRegistry, Scrape, ScrapedKind, SharedMetrics, Value,
};

/// A new, empty test registry, as the handle components take.
pub fn new_registry() -> SharedMetrics {
    Arc::new(TextRegistry::default())
}

/// What `registry` would serve on `/metrics`.
pub fn encode(registry: &SharedMetrics) -> String {
    registry.render()
}

#[derive(Default)]
pub struct TextRegistry {
    families: Mutex<Vec<Registered>>,
}

enum Registered {
    Counter(Family, Arc<Series<AtomicU64>>),
    Gauge(Family, Arc<Series<AtomicI64>>),
    Histogram(Family, Arc<Series<Hist>>),
    Scraped(Vec<(Family, ScrapedKind)>, Arc<dyn Scrape>),
}

/// One family's series, in the order they were first asked for.
struct Series<C> {
    make: Box<dyn Fn() -> C + Send + Sync>,
    series: Mutex<Vec<(Vec<String>, Arc<C>)>>,
}

impl<C> Series<C> {
    fn new(make: impl Fn() -> C + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            make: Box::new(make),
            series: Mutex::default(),
        })
    }

    fn get(&self, values: &[&str]) -> Arc<C> {
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, c)) = series.iter().find(|(v, _)| v == values) {
            return Arc::clone(c);
        }
        let c = Arc::new((self.make)());
        series.push((
            values.iter().map(|v| (*v).to_owned()).collect(),
            Arc::clone(&c),
        ));
        c
    }

    fn each(&self) -> Vec<(Vec<String>, Arc<C>)> {
        self.series
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

struct Hist {
    bounds: Vec<f64>,
    /// (count per bound, sum, count)
    state: Mutex<(Vec<u64>, f64, u64)>,
}

impl Counter for AtomicU64 {
    fn inc(&self) {
        self.fetch_add(1, Ordering::Relaxed);
    }
}

impl Gauge for AtomicI64 {
    fn inc(&self) {
        self.fetch_add(1, Ordering::Relaxed);
    }
    fn dec(&self) {
        self.fetch_sub(1, Ordering::Relaxed);
    }
    fn set(&self, value: i64) {
        self.store(value, Ordering::Relaxed);
    }
}

impl Histogram for Hist {
    fn observe(&self, value: f64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = self.bounds.iter().position(|b| value <= *b) {
            state.0[i] += 1;
        }
        state.1 += value;
        state.2 += 1;
    }
}

impl CounterFamily for Series<AtomicU64> {
    fn with(&self, values: &[&str]) -> Arc<dyn Counter> {
        self.get(values)
    }
}

impl GaugeFamily for Series<AtomicI64> {
    fn with(&self, values: &[&str]) -> Arc<dyn Gauge> {
        self.get(values)
    }
}

impl HistogramFamily for Series<Hist> {
    fn with(&self, values: &[&str]) -> Arc<dyn Histogram> {
        self.get(values)
    }
}

fn bounds(buckets: Buckets) -> Vec<f64> {
    match buckets {
        Buckets::Explicit(b) => b.to_vec(),
        Buckets::Exponential {
            start,
            factor,
            count,
        } => (0..count)
            .scan(start, |next, _| {
                let b = *next;
                *next *= factor;
                Some(b)
            })
            .collect(),
    }
}

fn labels(names: &[&str], values: &[String], first: Option<(&str, String)>) -> String {
    let pairs: Vec<String> = first
        .into_iter()
        .map(|(n, v)| format!("{n}=\"{v}\""))
        .chain(
            names
                .iter()
                .zip(values)
                .map(|(n, v)| format!("{n}=\"{v}\"")),
        )
        .collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", pairs.join(","))
    }
}

impl MetricsRegistry for TextRegistry {
    fn counter(&self, family: Family) -> Arc<dyn CounterFamily> {
        let series = Series::new(AtomicU64::default);
        self.push(Registered::Counter(family, Arc::clone(&series)));
        series
    }

    fn gauge(&self, family: Family) -> Arc<dyn GaugeFamily> {
        let series = Series::new(AtomicI64::default);
        self.push(Registered::Gauge(family, Arc::clone(&series)));
        series
    }

    fn histogram(&self, family: Family, buckets: Buckets) -> Arc<dyn HistogramFamily> {
        let bounds = bounds(buckets);
        let series = Series::new(move || Hist {
            state: Mutex::new((vec![0; bounds.len()], 0.0, 0)),
            bounds: bounds.clone(),
        });
        self.push(Registered::Histogram(family, Arc::clone(&series)));
        series
    }

    fn scraped(&self, families: &[(Family, ScrapedKind)], source: Arc<dyn Scrape>) {
        self.push(Registered::Scraped(families.to_vec(), source));
    }

    fn render(&self) -> String {
        let mut out = String::new();
        let families = self.families.lock().unwrap_or_else(|p| p.into_inner());
        for registered in families.iter() {
            match registered {
                Registered::Counter(f, series) => {
                    let _ = writeln!(out, "# TYPE {} counter", f.name);
                    for (values, c) in series.each() {
                        let v = c.load(Ordering::Relaxed);
                        let _ = writeln!(
                            out,
                            "{}_total{} {v}",
                            f.name,
                            labels(f.labels, &values, None)
                        );
                    }
                }
                Registered::Gauge(f, series) => {
                    let _ = writeln!(out, "# TYPE {} gauge", f.name);
                    for (values, g) in series.each() {
                        let v = g.load(Ordering::Relaxed);
                        let _ = writeln!(out, "{}{} {v}", f.name, labels(f.labels, &values, None));
                    }
                }
                Registered::Histogram(f, series) => {
                    let _ = writeln!(out, "# TYPE {} histogram", f.name);
                    for (values, h) in series.each() {
                        let (counts, sum, count) =
                            h.state.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        let l = labels(f.labels, &values, None);
                        let _ = writeln!(out, "{}_sum{l} {sum:?}", f.name);
                        let _ = writeln!(out, "{}_count{l} {count}", f.name);
                        let mut cumulative = 0;
                        for (bound, n) in h.bounds.iter().zip(counts) {
                            cumulative += n;
                            let l = labels(f.labels, &values, Some(("le", format!("{bound:?}"))));
                            let _ = writeln!(out, "{}_bucket{l} {cumulative}", f.name);
                        }
                        let l = labels(f.labels, &values, Some(("le", "+Inf".to_owned())));
                        let _ = writeln!(out, "{}_bucket{l} {count}", f.name);
                    }
                }
                Registered::Scraped(families, source) => {
                    let series = source.scrape();
                    for (i, (f, kind)) in families.iter().enumerate() {
                        let (suffix, kind) = match kind {
                            ScrapedKind::Counter => ("_total", "counter"),
                            ScrapedKind::Gauge => ("", "gauge"),
                        };
                        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
                        for (values, v) in &series {
                            let value = match v.get(i) {
                                Some(Value::Count(n)) => n.to_string(),
                                Some(Value::Int(n)) => n.to_string(),
                                Some(Value::Float(x)) => format!("{x:?}"),
                                None => continue,
                            };
                            let l = labels(f.labels, values, None);
                            let _ = writeln!(out, "{}{suffix}{l} {value}", f.name);
                        }
                    }
                }
            }
        }
        out
    }
}

impl TextRegistry {
    fn push(&self, registered: Registered) {
        self.families
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(registered);
    }
}
