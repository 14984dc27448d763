//! The `blox-tch-job` example (a binary behind the `tch` feature; see
//! README.md). The library part is the gradient noise scale estimator, which
//! needs no libtorch.

/// The "simple" gradient noise scale estimator (McCandlish et al. 2018,
/// App. A; the statistic Pollux's goodput model uses, Pollux §3.1): from the
/// squared norms of gradients computed on batches of `b_small` and `b_big`
/// examples, unbiased estimates of |G|² and of the trace of the per-example
/// gradient covariance S; the noise scale is S / |G|².
///
/// Returns `(g2, s)`; either may be negative on a noisy step, so average
/// them over steps (e.g. exponentially) before dividing.
pub fn gns_terms(g_small_sq: f64, b_small: f64, g_big_sq: f64, b_big: f64) -> (f64, f64) {
    let g2 = (b_big * g_big_sq - b_small * g_small_sq) / (b_big - b_small);
    let s = (g_small_sq - g_big_sq) / (1.0 / b_small - 1.0 / b_big);
    (g2, s)
}

/// Exponential moving averages of the two terms, and their ratio.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoiseScale {
    g2: Option<f64>,
    s: Option<f64>,
}

impl NoiseScale {
    /// Folds one step's terms in (weight `alpha` for the new one).
    pub fn update(&mut self, g2: f64, s: f64, alpha: f64) {
        let ema =
            |old: Option<f64>, new: f64| Some(old.map_or(new, |o| (1.0 - alpha) * o + alpha * new));
        self.g2 = ema(self.g2, g2);
        self.s = ema(self.s, s);
    }

    /// The averaged terms (|G|², S), zero before the first update; a
    /// checkpoint restores them with `update(g2, s, 1.0)`.
    pub fn terms(&self) -> (f64, f64) {
        (self.g2.unwrap_or(0.0), self.s.unwrap_or(0.0))
    }

    /// The current estimate, once |G|² is positive.
    pub fn value(&self) -> Option<f64> {
        match (self.g2, self.s) {
            (Some(g2), Some(s)) if g2 > 0.0 => Some(s / g2),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimator_recovers_a_known_noise_scale() {
        // Per-example gradients g_i = G + noise with E|noise|² = tr(S):
        // E|g_B|² = |G|² + tr(S)/B.
        let (g2_true, s_true) = (4.0, 100.0);
        let sq = |b: f64| g2_true + s_true / b;
        let (g2, s) = gns_terms(sq(8.0), 8.0, sq(64.0), 64.0);
        assert!((g2 - g2_true).abs() < 1e-9, "{g2}");
        assert!((s - s_true).abs() < 1e-9, "{s}");
        let mut n = NoiseScale::default();
        n.update(g2, s, 0.5);
        assert!((n.value().unwrap() - 25.0).abs() < 1e-9);
    }

    #[test]
    fn no_estimate_until_the_gradient_signal_is_positive() {
        let mut n = NoiseScale::default();
        n.update(-1.0, 5.0, 0.1);
        assert_eq!(n.value(), None);
    }
}
