//! Summary statistics shared by the machinery benchmarks.
#![allow(dead_code)] // each bench binary uses a different subset

/// The median (the mean of the middle two for an even count; NaN if empty).
/// Benchmarks report the median run, never the best: under contention runs
/// are bimodal, and the best of a few would report the lucky mode.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
