//! The numbers every results table shares: how a table reads other
//! results files, how it prints a figure (as the Python reports do), and
//! the median of same-run ratios. Below both `results_tables` and
//! `results_machinery`, which use it and not each other's helpers.
use serde_json::Value;

/// How a table reads other results files (the headline's rows name theirs).
pub type Load<'a> = &'a dyn Fn(&str) -> Result<Value, String>;

pub fn num(v: &Value, digits: usize) -> String {
    v.as_f64()
        .map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "-".to_owned())
}

/// Python's `f"{v:,.{digits}f}"`: thousands separated by commas.
pub fn grouped(v: f64, digits: usize) -> String {
    let text = format!("{v:.digits$}");
    let (sign, rest) = text
        .strip_prefix('-')
        .map_or(("", text.as_str()), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::from(sign);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(frac) = frac {
        out.push('.');
        out.push_str(frac);
    }
    out
}

pub fn median(xs: &[f64]) -> Option<f64> {
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

/// The ratio of each pair of runs that took turns (the i-th of `a` over the
/// i-th of `b`), skipping a pair whose `b` is zero.
pub fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .filter(|(_, b)| **b > 0.0)
        .map(|(a, b)| a / b)
        .collect()
}
