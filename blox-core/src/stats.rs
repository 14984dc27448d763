//! The few statistics every crate reports: quantiles by nearest rank and the
//! mean, one definition for the simulator's tables, the benchmarks and the
//! runtime's status.

/// The `q` quantile (0–1) of an ascending slice, by nearest rank (the
/// element at `round(q · (n − 1))`); NaN when empty. `q` outside 0–1 is
/// clamped.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The `q` quantile (0–1) of `v` by nearest rank; sorts `v` (NaNs last).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile_sorted(v, q)
}

/// The arithmetic mean; NaN when empty.
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut v = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(quantile(&mut v, 0.5), 3.0);
        assert_eq!(v, [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(quantile_sorted(&v, 0.0), 1.0);
        assert_eq!(quantile_sorted(&v, 1.0), 5.0);
        // round(0.99 · 4) = 4; round(0.6 · 4) = 2.
        assert_eq!(quantile_sorted(&v, 0.99), 5.0);
        assert_eq!(quantile_sorted(&v, 0.6), 3.0);
        assert_eq!(quantile_sorted(&v, 7.0), 5.0);
        assert!(quantile_sorted(&[], 0.5).is_nan());
        assert_eq!(mean(&v), 3.0);
        assert!(mean(&[]).is_nan());
    }
}
