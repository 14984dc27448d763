//! ONES's progress predictor (ONES, SC'21, §3.2.1, Eq. 6–7).
//!
//! A job's training progress ρ (fraction of its total work done) is modelled as
//! `ρ ~ Be(α, β)` with `α = max(Y_processed/‖D‖, 1)` (epochs processed) and
//! `β = max(A·x + b, 1)` (epochs still to process), `x` the job's features
//! `{‖D‖, L_initial, Y_processed, r_L, 𝒜}` (footnote 1). `A, b` come from a
//! regression refit on every job completion over a bounded history whose points
//! are sampled uniformly from completed jobs' training logs.
//!
//! The paper fits its predictor "by maximizing the log marginal likelihood".
//! Here the regression is Bayesian linear regression on standardised features
//! whose prior precision and noise precision are chosen by maximising the log
//! marginal likelihood (evidence) over a log-spaced grid (Bishop, PRML §3.5);
//! `A, b` are the posterior mean.

use rand::Rng;

/// Number of features in `x`.
pub const FEATURES: usize = 5;

/// One point of a training log: the job's features then, and epochs processed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogPoint {
    pub x: [f64; FEATURES],
    pub epochs: f64,
}

/// The bounded, uniformly sampled training set and the fitted regression.
#[derive(Clone, Debug)]
pub struct Predictor {
    capacity: usize,
    /// `(x, epochs still to process)`.
    data: Vec<([f64; FEATURES], f64)>,
    /// Points offered so far (for reservoir sampling).
    seen: u64,
    fit: Option<Fit>,
}

#[derive(Clone, Debug)]
struct Fit {
    mean: [f64; FEATURES],
    scale: [f64; FEATURES],
    /// Posterior mean: bias then one weight per standardised feature.
    w: [f64; FEATURES + 1],
}

impl Predictor {
    pub fn new(capacity: usize) -> Self {
        Predictor {
            capacity: capacity.max(1),
            data: Vec::new(),
            seen: 0,
            fit: None,
        }
    }

    /// Points in the training set.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// A job completed after `total_epochs`: its log's points join the training
    /// set (reservoir sampling keeps it a uniform sample of every point offered,
    /// at most `capacity`), then the model is refit.
    pub fn job_completed(&mut self, log: &[LogPoint], total_epochs: f64, rng: &mut impl Rng) {
        self.add_job(log, total_epochs, rng);
        self.refit();
    }

    /// As [`Predictor::job_completed`] without the refit (for loading a
    /// history of many jobs, then one [`Predictor::refit`]).
    pub fn add_job(&mut self, log: &[LogPoint], total_epochs: f64, rng: &mut impl Rng) {
        for p in log {
            let item = (p.x, (total_epochs - p.epochs).max(0.0));
            self.seen += 1;
            if self.data.len() < self.capacity {
                self.data.push(item);
            } else {
                let k = rng.random_range(0..self.seen);
                if (k as usize) < self.capacity {
                    self.data[k as usize] = item;
                }
            }
        }
    }

    /// `β = max(A·x + b, 1)`; 1 until a job has completed.
    pub fn beta(&self, x: &[f64; FEATURES]) -> f64 {
        let Some(f) = &self.fit else {
            return 1.0;
        };
        let mut y = f.w[0];
        for (k, xk) in x.iter().enumerate() {
            y += f.w[k + 1] * (xk - f.mean[k]) / f.scale[k];
        }
        if y.is_finite() {
            y.max(1.0)
        } else {
            1.0
        }
    }

    /// Refits the regression to the training set.
    pub fn refit(&mut self) {
        let n = self.data.len();
        if n == 0 {
            return;
        }
        let mut mean = [0.0; FEATURES];
        let mut scale = [1.0; FEATURES];
        for k in 0..FEATURES {
            mean[k] = self.data.iter().map(|d| d.0[k]).sum::<f64>() / n as f64;
            let var = self
                .data
                .iter()
                .map(|d| (d.0[k] - mean[k]).powi(2))
                .sum::<f64>()
                / n as f64;
            scale[k] = if var > 1e-18 {
                var.sqrt()
            } else {
                f64::INFINITY
            };
        }
        // Design matrix rows φ = (1, standardised x); constant features vanish.
        const M: usize = FEATURES + 1;
        let phi = |x: &[f64; FEATURES]| {
            let mut r = [0.0; M];
            r[0] = 1.0;
            for k in 0..FEATURES {
                r[k + 1] = if scale[k].is_finite() {
                    (x[k] - mean[k]) / scale[k]
                } else {
                    0.0
                };
            }
            r
        };
        let mut gram = [[0.0; M]; M];
        let mut pt = [0.0; M];
        let mut tt = 0.0;
        for (x, t) in &self.data {
            let r = phi(x);
            for a in 0..M {
                pt[a] += r[a] * t;
                for b in 0..M {
                    gram[a][b] += r[a] * r[b];
                }
            }
            tt += t * t;
        }
        let mut best: Option<(f64, [f64; M])> = None;
        for ia in -6..=6 {
            let alpha = 10f64.powi(ia);
            for ib in -8..=4 {
                let beta = 10f64.powi(ib);
                if let Some((ev, m)) = evidence(&gram, &pt, tt, n, alpha, beta) {
                    if best.as_ref().is_none_or(|b| ev > b.0) {
                        best = Some((ev, m));
                    }
                }
            }
        }
        if let Some((_, w)) = best {
            self.fit = Some(Fit { mean, scale, w });
        }
    }
}

/// Log marginal likelihood of Bayesian linear regression with prior precision
/// `alpha` and noise precision `beta`, and the posterior mean (PRML Eq. 3.86).
fn evidence<const M: usize>(
    gram: &[[f64; M]; M],
    pt: &[f64; M],
    tt: f64,
    n: usize,
    alpha: f64,
    beta: f64,
) -> Option<(f64, [f64; M])> {
    // A = αI + βΦᵀΦ; m = β A⁻¹ Φᵀt.
    let mut a = [[0.0; M]; M];
    for i in 0..M {
        for j in 0..M {
            a[i][j] = beta * gram[i][j] + if i == j { alpha } else { 0.0 };
        }
    }
    let l = cholesky(&a)?;
    let rhs: [f64; M] = std::array::from_fn(|i| beta * pt[i]);
    let m = cholesky_solve(&l, &rhs);
    // E(m) = β/2 ‖t − Φm‖² + α/2 mᵀm, with ‖t − Φm‖² = tᵀt − 2mᵀΦᵀt + mᵀΦᵀΦm.
    let mut quad = 0.0;
    for i in 0..M {
        for j in 0..M {
            quad += m[i] * gram[i][j] * m[j];
        }
    }
    let mtp: f64 = (0..M).map(|i| m[i] * pt[i]).sum();
    let sse = (tt - 2.0 * mtp + quad).max(0.0);
    let mm: f64 = m.iter().map(|v| v * v).sum();
    let e = beta / 2.0 * sse + alpha / 2.0 * mm;
    let logdet: f64 = 2.0 * (0..M).map(|i| l[i][i].ln()).sum::<f64>();
    let nf = n as f64;
    let ev = M as f64 / 2.0 * alpha.ln() + nf / 2.0 * beta.ln()
        - e
        - 0.5 * logdet
        - nf / 2.0 * (2.0 * std::f64::consts::PI).ln();
    ev.is_finite().then_some((ev, m))
}

fn cholesky<const M: usize>(a: &[[f64; M]; M]) -> Option<[[f64; M]; M]> {
    let mut l = [[0.0; M]; M];
    for i in 0..M {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                let d = a[i][i] - s;
                if d <= 0.0 {
                    return None;
                }
                l[i][j] = d.sqrt();
            } else {
                l[i][j] = (a[i][j] - s) / l[j][j];
            }
        }
    }
    Some(l)
}

fn cholesky_solve<const M: usize>(l: &[[f64; M]; M], b: &[f64; M]) -> [f64; M] {
    let mut y = [0.0; M];
    for i in 0..M {
        let s: f64 = (0..i).map(|k| l[i][k] * y[k]).sum();
        y[i] = (b[i] - s) / l[i][i];
    }
    let mut x = [0.0; M];
    for i in (0..M).rev() {
        let s: f64 = (i + 1..M).map(|k| l[k][i] * x[k]).sum();
        x[i] = (y[i] - s) / l[i][i];
    }
    x
}

/// A draw from `Be(α, β)` (`rand_distr`), kept inside (0, 1). Parameters
/// that are not finite and positive give the mean of a flat prior, 0.5.
pub fn sample_beta(alpha: f64, beta: f64, rng: &mut impl Rng) -> f64 {
    match rand_distr::Beta::new(alpha, beta) {
        Ok(d) => rng.sample(d).clamp(1e-6, 1.0 - 1e-6),
        Err(_) => 0.5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn beta_samples_have_the_right_mean() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for (a, b) in [(1.0, 1.0), (2.0, 5.0), (30.0, 3.0), (0.5, 0.5)] {
            let n = 20_000;
            let mean = (0..n).map(|_| sample_beta(a, b, &mut rng)).sum::<f64>() / n as f64;
            assert!((mean - a / (a + b)).abs() < 0.01, "Be({a},{b}): {mean}");
        }
    }

    #[test]
    fn regression_learns_epochs_to_go_from_history() {
        // Jobs of 10 epochs whose epoch size decides nothing; β must learn
        // "10 − epochs processed" from the processed-samples feature.
        let mut p = Predictor::new(1000);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        assert_eq!(p.beta(&[0.0; FEATURES]), 1.0, "no history: β = 1");
        for job in 0..5 {
            let d = 1000.0 * (job + 1) as f64;
            let log: Vec<LogPoint> = (0..10)
                .map(|e| LogPoint {
                    x: [d, 0.0, 1000.0 * e as f64, 0.0, 0.0],
                    epochs: e as f64 * 1000.0 / 1000.0,
                })
                .collect();
            p.job_completed(&log, 10.0, &mut rng);
        }
        let b = p.beta(&[3000.0, 0.0, 2000.0, 0.0, 0.0]);
        assert!((b - 8.0).abs() < 0.5, "β = {b}");
        // The threshold: never below 1.
        assert!(p.beta(&[3000.0, 0.0, 1e6, 0.0, 0.0]) >= 1.0);
    }

    #[test]
    fn history_stays_bounded() {
        let mut p = Predictor::new(16);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let log: Vec<LogPoint> = (0..10)
            .map(|e| LogPoint {
                x: [1.0, 0.0, e as f64, 0.0, 0.0],
                epochs: e as f64,
            })
            .collect();
        for _ in 0..10 {
            p.job_completed(&log, 10.0, &mut rng);
        }
        assert_eq!(p.len(), 16);
    }
}
