//! Same-run comparisons (issue #29, point 12): a peer listed more than once
//! in `BENCH_PEERS` runs that many times, in the order listed
//! (`ours-default,raw,ours-default,raw` alternates them), and the report
//! gives the median of the pairwise ratios (the i-th run of one peer over
//! the i-th of the other), so a drift of the machine during the invocation
//! weighs on both sides. Kept free of the bench's other modules so
//! `tests/bench_verdict.rs` can test it.

/// The median of `xs` (the mean of the middle two for an even count).
pub(crate) fn median(xs: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// The i-th value of `a` over the i-th of `b`, for as many pairs as both
/// have (a zero denominator leaves its pair out).
pub(crate) fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter(|(_, b)| **b > 0.0)
        .map(|(a, b)| a / b)
        .collect()
}
