//! The placement's figures per round (`PlacementPolicy::round_figures`,
//! e.g. FGD's fragmentation): `rounds.csv`'s columns after `note`, and the
//! summary's mean and largest value of each.

use super::tables::RoundRow;

/// The figure columns of `rounds.csv`: the first round's names.
pub fn figure_names(rows: &[RoundRow]) -> Vec<&'static str> {
    rows.first()
        .map(|r| r.figures.iter().map(|f| f.0).collect())
        .unwrap_or_default()
}

impl RoundRow {
    /// The value of figure `name` this round, if measured.
    pub fn figure(&self, name: &str) -> Option<f64> {
        self.figures.iter().find(|f| f.0 == name).map(|f| f.1)
    }
}

/// Each figure's mean over the rounds that measured it, and its largest
/// value.
pub fn summarise(rounds: &[RoundRow]) -> Vec<(&'static str, f64, f64)> {
    figure_names(rounds)
        .into_iter()
        .map(|n| {
            let v: Vec<f64> = rounds.iter().filter_map(|r| r.figure(n)).collect();
            let max = v.iter().copied().fold(f64::NAN, f64::max);
            (n, blox_core::stats::mean(&v), max)
        })
        .collect()
}
