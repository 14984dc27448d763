//! The allocation curve the FGD paper plots (Fig. 9, 11–14): the share of
//! GPU capacity allocated, by the share of capacity that has arrived, in
//! whole percent. Computed as the authors' analysis computes it
//! (`experiments/analysis/merge_alloc_discrete.py`): after each arriving
//! task, arrived and allocated thousandths over the cluster's GPUs, the
//! first rounded to whole percent (ties to even), the second to hundredths;
//! at each whole percent r, the mean allocation over the tasks at r, or over
//! those within r ± 1 when none is at r.

use crate::packing::Outcome;

/// Rounds to hundredths as Python's `round(x, 2)` does (through the decimal
/// expansion of the binary value).
fn round2(x: f64) -> f64 {
    format!("{x:.2}").parse().unwrap_or(x)
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
            curve.push((r, round2(at.iter().sum::<f64>() / at.len() as f64)));
        }
    }
    curve
}

/// The curve's value at `percent` arrived, if it has one.
pub fn allocated_at(curve: &[(u32, f64)], percent: u32) -> Option<f64> {
    curve.iter().find(|(r, _)| *r == percent).map(|&(_, v)| v)
}
