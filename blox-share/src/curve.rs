//! The allocation curve the FGD paper plots (Fig. 9, 11–14): the share of
//! GPU capacity allocated, by the share of capacity that has arrived, in
//! whole percent. Computed as the authors' analysis computes it
//! (`experiments/analysis/merge_alloc_discrete.py`): after each arriving
//! task, arrived and allocated thousandths over the cluster's GPUs, the
//! first rounded to whole percent (ties to even), the second to hundredths
//! (Python's rounding of the exact value); at each whole percent r, the mean
//! allocation over the tasks at r, or over those within r ± 1 when none is
//! at r, summed as numpy sums and rounded as numpy rounds. With these three
//! roundings every published figure of the five deterministic policies is
//! ours to the hundredth.

use crate::packing::Outcome;

/// Rounds to hundredths as Python's `round(x, 2)` does (through the decimal
/// expansion of the binary value).
fn round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap_or(x)
}

/// Rounds to hundredths as numpy rounds a `float64` (`x·100`, to even, `/100`),
/// which the reference's `round(mean, 2)` does on a pandas mean.
fn round2_numpy(x: f64) -> f64 {
    (x * 100.0).round_ties_even() / 100.0
}

/// A sum as numpy adds a float array (pairwise, eight accumulators in
/// blocks of up to 128), which pandas' `mean` uses: a mean that lands on a
/// rounding boundary rounds as the reference's did.
fn numpy_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for x in a {
            res += x;
        }
        res
    } else if n <= 128 {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let whole = n - n % 8;
        let mut i = 8;
        while i < whole {
            for (j, acc) in r.iter_mut().enumerate() {
                *acc += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for x in &a[whole..] {
            res += x;
        }
        res
    } else {
        let half = n / 2;
        let half = half - half % 8;
        numpy_sum(&a[..half]) + numpy_sum(&a[half..])
    }
}

/// (arrived percent, mean allocated percent) for each whole percent from 0
/// to `up_to` that has tasks at or beside it.
pub fn allocation_curve(outcomes: &[Outcome], total_gpus: u32, up_to: u32) -> Vec<(u32, f64)> {
    if total_gpus == 0 {
        return Vec::new();
    }
    let gpus = total_gpus as f64;
    let rows: Vec<(f64, f64)> = outcomes
        .iter()
        .map(|o| {
            let arrived = (o.arrived_milli as f64 / gpus / 10.0).round_ties_even();
            (arrived, round2(o.used_milli as f64 / gpus / 10.0))
        })
        .collect();
    let mut curve = Vec::new();
    for r in 0..=up_to {
        let r_f = r as f64;
        let mut at: Vec<f64> = rows
            .iter()
            .filter(|(a, _)| *a == r_f)
            .map(|&(_, u)| u)
            .collect();
        if at.is_empty() {
            at = rows
                .iter()
                .filter(|(a, _)| *a >= r_f - 1.0 && *a <= r_f + 1.0)
                .map(|&(_, u)| u)
                .collect();
        }
        if !at.is_empty() {
            curve.push((r, round2_numpy(numpy_sum(&at) / at.len() as f64)));
        }
    }
    curve
}

/// The curve's value at `percent` arrived, if it has one.
pub fn allocated_at(curve: &[(u32, f64)], percent: u32) -> Option<f64> {
    curve.iter().find(|(r, _)| *r == percent).map(|&(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_as_numpy_does() {
        // 102 allocation figures of one published run (gpushare60,
        // dot-product, seed 49, at 100 % arrived) whose mean numpy takes as
        // 87.05499999999994 (published 87.05) and a plain sum as
        // 87.05500000000016 (87.06).
        let mut v = vec![87.05; 51];
        v.extend(vec![87.06; 51]);
        let plain: f64 = v.iter().sum::<f64>() / 102.0;
        let pairwise = numpy_sum(&v) / 102.0;
        assert!(pairwise <= plain);
        assert_eq!(numpy_sum(&[1.0; 300]), 300.0);
        assert_eq!(numpy_sum(&[0.1, 0.2, 0.3]), 0.1 + 0.2 + 0.3);
        // 89.175 is 89.17499999999999716 in binary: Python's round of the
        // exact value gives 89.17, numpy's (×100, to even) 89.18.
        assert_eq!(round2(89.175), 89.17);
        assert_eq!(round2_numpy(89.175), 89.18);
    }
}
