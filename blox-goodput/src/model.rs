//! The goodput model (Pollux, OSDI'21, §3): `GOODPUT = THROUGHPUT × EFFICIENCY`.
//!
//! Units follow the Pollux artifact (`pollux-data.md` §4–5): progress is counted in
//! "iterations at the initial batch size `M0`", so goodput is `M0·g(M)/T_iter`
//! samples-at-`M0` per second, where `g` is the progress one optimizer step at
//! batch `M` makes.

/// `ε` of the artifact's ceiling rules: `ceil(x − ε)`.
pub const EPS: f64 = 1e-8;

/// An application's batch-size limits (`pollux-data.md` §2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AppLimits {
    /// Initial (smallest validated) global batch size `M0`.
    pub m0: u32,
    /// Largest global batch size `Mmax`.
    pub mmax: u32,
    /// Smallest atomic (per-replica, per-micro-step) batch size.
    pub bmin: u32,
    /// Largest atomic batch size (what fits in GPU memory).
    pub bmax: u32,
}

/// Gradient statistics of the current epoch: `μ²` (`sqr`, the squared gradient
/// norm) and `σ²` (`var`, the gradient variance, scaled so that
/// `B_noise = M0·σ²/μ²`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradStats {
    pub sqr: f64,
    pub var: f64,
}

impl GradStats {
    /// Progress per optimizer step at global batch `m` relative to `M0`:
    /// `g = (σ² + μ²) / (σ²/S + μ²)`, `S = m/M0` — between 1 and `S`. A
    /// non-positive denominator gives 1, as the artifact's agent does.
    pub fn gain(&self, m: f64, m0: f64) -> f64 {
        let s = m / m0;
        let denom = self.var / s + self.sqr;
        if denom <= 0.0 {
            1.0
        } else {
            (self.var + self.sqr) / denom
        }
    }

    /// Statistical efficiency (Eq. 7): `E(M) = (B_noise + M0)/(B_noise + M) = g/S`.
    pub fn efficiency(&self, m: f64, m0: f64) -> f64 {
        self.gain(m, m0) * m0 / m
    }

    /// The gradient noise scale `B_noise = M0·σ²/μ²`.
    pub fn noise_scale(&self, m0: f64) -> f64 {
        m0 * self.var / self.sqr
    }
}

/// θ_sys (Eq. 8–11 with the artifact's separate intra-node parameters,
/// `pollux-data.md` §5.1): compute time `α_c + β_c·b`, network time
/// `α_n + β_n·(r−2)` across nodes or `α_r + β_r·(r−2)` within one node, and the
/// overlap exponent `γ ∈ [1, 10]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThroughputParams {
    pub alpha_c: f64,
    pub beta_c: f64,
    pub alpha_n: f64,
    pub beta_n: f64,
    pub alpha_r: f64,
    pub beta_r: f64,
    pub gamma: f64,
}

impl ThroughputParams {
    pub fn to_array(&self) -> [f64; 7] {
        [
            self.alpha_c,
            self.beta_c,
            self.alpha_n,
            self.beta_n,
            self.alpha_r,
            self.beta_r,
            self.gamma,
        ]
    }

    pub fn from_array(a: [f64; 7]) -> Self {
        ThroughputParams {
            alpha_c: a[0],
            beta_c: a[1],
            alpha_n: a[2],
            beta_n: a[3],
            alpha_r: a[4],
            beta_r: a[5],
            gamma: a[6],
        }
    }

    /// Time of one micro-step that only accumulates gradients (Eq. 9).
    pub fn t_acc(&self, b: f64) -> f64 {
        self.alpha_c + self.beta_c * b
    }

    /// Gradient synchronisation time on `r` replicas over `n` nodes (Eq. 10).
    pub fn t_net(&self, n: u32, r: u32) -> f64 {
        let x = (r as f64 - 2.0).max(1e-8);
        if n > 1 {
            self.alpha_n + self.beta_n * x
        } else if r > 1 {
            self.alpha_r + self.beta_r * x
        } else {
            1e-8 + 1e-8 * 1e-8
        }
    }

    /// Time of the step that synchronises: `(T_acc^γ + T_net^γ)^(1/γ)` (Eq. 11).
    pub fn t_opt(&self, n: u32, r: u32, b: f64) -> f64 {
        let g = self.gamma;
        (self.t_acc(b).powf(g) + self.t_net(n, r).powf(g)).powf(1.0 / g)
    }

    /// Time of one optimizer step with `s` extra accumulation micro-steps.
    pub fn iter_time(&self, n: u32, r: u32, b: f64, s: u32) -> f64 {
        s as f64 * self.t_acc(b) + self.t_opt(n, r, b)
    }

    /// Samples per second: `r·b·(s+1) / T_iter`.
    pub fn throughput(&self, n: u32, r: u32, b: f64, s: u32) -> f64 {
        r as f64 * b * (s + 1) as f64 / self.iter_time(n, r, b, s)
    }
}

/// Atomic batch size and extra accumulation steps: the global batch is
/// `replicas · atomic · (accum + 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchConfig {
    pub atomic: u32,
    pub accum: u32,
}

impl BatchConfig {
    pub fn global(&self, replicas: u32) -> u32 {
        replicas * self.atomic * (self.accum + 1)
    }
}

fn ceil_eps(x: f64) -> f64 {
    (x - EPS).ceil()
}

impl AppLimits {
    /// `(b, s)` for local size `l = M/r` (`pollux-data.md` §5.3): the fewest
    /// accumulation steps keeping `b ≤ bmax`, at least one extra step for a single
    /// replica above `M0`.
    fn split(&self, r: u32, l: f64, always_accumulate_alone: bool) -> (f64, u32) {
        let mut s = (ceil_eps(l / self.bmax as f64) - 1.0).max(0.0);
        if r == 1 && (always_accumulate_alone || l > self.m0 as f64 + EPS) {
            s = s.max(1.0);
        }
        let b = ceil_eps(l / (s + 1.0));
        (b, s as u32)
    }

    /// Clamps the atomic batch so the global batch stays at most `Mmax`.
    pub fn clamp(&self, r: u32, c: BatchConfig) -> BatchConfig {
        let cap = self.mmax / (r * (c.accum + 1)).max(1);
        BatchConfig {
            atomic: c.atomic.min(cap).max(1),
            accum: c.accum,
        }
    }

    /// The fixed-batch rule (`pollux-data.md` §6.6) for a target global batch `m`
    /// on `r` replicas — what non-adaptive jobs run with. The realised batch can
    /// be slightly above `m`.
    pub fn fixed_batch(&self, r: u32, m: f64) -> BatchConfig {
        self.fixed_batch_rule(r, m, false)
    }

    /// Optimus's variant of the fixed-batch rule (`pollux-data.md` §8.2): one
    /// replica always takes at least one accumulation step, even at `M0`.
    pub fn fixed_batch_accumulating_alone(&self, r: u32, m: f64) -> BatchConfig {
        self.fixed_batch_rule(r, m, true)
    }

    fn fixed_batch_rule(&self, r: u32, m: f64, always_accumulate_alone: bool) -> BatchConfig {
        let r = r.max(1);
        let (b, s) = self.split(r, ceil_eps(m / r as f64), always_accumulate_alone);
        self.clamp(
            r,
            BatchConfig {
                atomic: b.max(1.0) as u32,
                accum: s,
            },
        )
    }
}

/// How [`GoodputModel::best`] searches the batch size (in configs:
/// `grid50` or `golden-section`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchSearch {
    /// The Pollux artifact's search: 50 global batch sizes on a geometric grid
    /// from `max(M0, bmin·r)` to `Mmax` (`pollux-data.md` §5.3).
    #[default]
    Grid50,
    /// Golden-section search over `log M` on the same interval (Pollux §4.1);
    /// the realised configurations follow the same rounding rules.
    GoldenSection,
}

/// The best goodput for an allocation and the batch configuration reaching it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BestBatch {
    pub goodput: f64,
    pub config: BatchConfig,
}

/// A job's goodput model: fitted θ_sys, current gradient statistics, limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GoodputModel {
    pub params: ThroughputParams,
    pub grad: GradStats,
    pub limits: AppLimits,
}

impl GoodputModel {
    /// `GOODPUT(n, r, b, s) = THROUGHPUT · EFFICIENCY = M0·g(M)/T_iter` (Eq. 12).
    pub fn goodput(&self, n: u32, r: u32, b: f64, s: u32) -> f64 {
        let m = r as f64 * b * (s + 1) as f64;
        let m0 = self.limits.m0 as f64;
        m0 * self.grad.gain(m, m0) / self.params.iter_time(n, r, b, s)
    }

    /// Goodput of the configuration realised for a target global batch `m`;
    /// 0 where the atomic batch leaves `[bmin, bmax]`.
    fn candidate(&self, n: u32, r: u32, m: f64) -> (f64, BatchConfig) {
        let (b, s) = self.limits.split(r, m / r as f64, false);
        let cfg = BatchConfig {
            atomic: b.max(0.0) as u32,
            accum: s,
        };
        if b < self.limits.bmin as f64 || b > self.limits.bmax as f64 {
            return (0.0, cfg);
        }
        (self.goodput(n, r, b, s), cfg)
    }

    /// Goodput of the configuration realised for the global batch `m` (the
    /// fixed-batch rule's split; 0 outside `[bmin, bmax]`): a job whose batch
    /// may not change (strong scaling, Sia §3.3).
    pub fn at_batch(&self, n: u32, r: u32, m: f64) -> BestBatch {
        let (goodput, config) = self.candidate(n, r, m);
        BestBatch { goodput, config }
    }

    /// Goodput of a hybrid-parallel job (Sia §5.3, the artifact's
    /// `GoodputFunctionPMP`): `r` data-parallel replicas of a `stages`-deep
    /// pipeline on `n` nodes, each running `micro` micro-batches of one sample;
    /// a step takes `3·((stages − 1) + micro)·(α_c + β_c)` of compute plus the
    /// all-reduce time of `r` replicas. 0 when the global batch `r·micro`
    /// exceeds `mmax`. (The artifact multiplies by 100 for its solver's
    /// numerics; so does this, and every use normalises it away.)
    pub fn pipeline_goodput(&self, n: u32, r: u32, stages: u32, micro: u32) -> f64 {
        let m = (r * micro) as f64;
        if r == 0 || m > self.limits.mmax as f64 {
            return 0.0;
        }
        let fwd = self.params.t_acc(1.0);
        let compute = 3.0 * ((stages as f64 - 1.0) * fwd + micro as f64 * fwd);
        let t = compute + self.params.t_net(n, r);
        let m0 = self.limits.m0 as f64;
        100.0 * m / t * self.grad.efficiency(m, m0)
    }

    /// The search interval of global batch sizes for `r` replicas.
    fn range(&self, r: u32) -> (f64, f64) {
        let lo = (self.limits.m0 as f64).max(self.limits.bmin as f64 * r as f64);
        (lo, self.limits.mmax as f64)
    }

    /// Best goodput over batch sizes for `r` replicas on `n` nodes (§4.1,
    /// `pollux-data.md` §5.3). The first maximum wins ties.
    pub fn best(&self, n: u32, r: u32, search: BatchSearch) -> BestBatch {
        let (lo, hi) = self.range(r);
        let mut best: Option<BestBatch> = None;
        let mut consider = |m: f64| {
            let (g, cfg) = self.candidate(n, r, m);
            if best.is_none_or(|b| g > b.goodput) {
                best = Some(BestBatch {
                    goodput: g,
                    config: cfg,
                });
            }
            g
        };
        match search {
            BatchSearch::Grid50 => {
                let (l0, l1) = (lo.log10(), hi.log10());
                for k in 0..50 {
                    let m = match k {
                        0 => lo,
                        49 => hi,
                        _ => 10f64.powf(l0 + k as f64 * (l1 - l0) / 49.0),
                    };
                    consider(m);
                }
            }
            BatchSearch::GoldenSection => {
                consider(lo);
                if lo < hi {
                    consider(hi);
                    let x = golden_section_max(|lm| consider(lm.exp()), lo.ln(), hi.ln(), 1e-4);
                    consider(x.exp());
                }
            }
        }
        best.expect("at least one candidate")
    }

    /// [`best`](Self::best) for `r` replicas on each node count of `nodes`,
    /// in order. On the artifact's grid the batch sizes, and the terms of the
    /// step time that do not depend on the node count, are worked out once
    /// for all node counts: the same operations on the same values, so the
    /// same results, bit for bit, at about a quarter of the `powf` calls.
    pub fn best_on_nodes(
        &self,
        r: u32,
        nodes: std::ops::RangeInclusive<u32>,
        search: BatchSearch,
    ) -> Vec<BestBatch> {
        if search != BatchSearch::Grid50 {
            return nodes.map(|n| self.best(n, r, search)).collect();
        }
        let (lo, hi) = self.range(r);
        let (l0, l1) = (lo.log10(), hi.log10());
        let g = self.params.gamma;
        let m0 = self.limits.m0 as f64;
        // Per grid point: its configuration and, when its atomic batch is in
        // range, (M0·g(M), s·T_acc(b), T_acc(b)^γ).
        type Terms = Option<(f64, f64, f64)>;
        let grid: Vec<(BatchConfig, Terms)> = (0..50)
            .map(|k| {
                let m = match k {
                    0 => lo,
                    49 => hi,
                    _ => 10f64.powf(l0 + k as f64 * (l1 - l0) / 49.0),
                };
                let (b, s) = self.limits.split(r, m / r as f64, false);
                let cfg = BatchConfig {
                    atomic: b.max(0.0) as u32,
                    accum: s,
                };
                if b < self.limits.bmin as f64 || b > self.limits.bmax as f64 {
                    return (cfg, None);
                }
                let m = r as f64 * b * (s + 1) as f64;
                let acc = self.params.t_acc(b);
                let terms = (m0 * self.grad.gain(m, m0), s as f64 * acc, acc.powf(g));
                (cfg, Some(terms))
            })
            .collect();
        nodes
            .map(|n| {
                let net = self.params.t_net(n, r).powf(g);
                let mut best: Option<BestBatch> = None;
                for &(config, terms) in &grid {
                    let goodput = terms.map_or(0.0, |(num, acc, acc_g)| {
                        num / (acc + (acc_g + net).powf(1.0 / g))
                    });
                    if best.is_none_or(|b| goodput > b.goodput) {
                        best = Some(BestBatch { goodput, config });
                    }
                }
                best.expect("fifty candidates")
            })
            .collect()
    }
}

/// Maximises a unimodal `f` on `[a, b]` by golden-section search to interval
/// width `tol`; returns the arg-max estimate.
pub fn golden_section_max(mut f: impl FnMut(f64) -> f64, a: f64, b: f64, tol: f64) -> f64 {
    let inv_phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (a.min(b), a.max(b));
    let mut c = b - inv_phi * (b - a);
    let mut d = a + inv_phi * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    while b - a > tol {
        if fc >= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - inv_phi * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + inv_phi * (b - a);
            fd = f(d);
        }
    }
    (a + b) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_eq7() {
        // B_noise = M0·σ²/μ² = 100·4/1 = 400; E(800) = (400+100)/(400+800) = 5/12.
        let g = GradStats { sqr: 1.0, var: 4.0 };
        assert!((g.noise_scale(100.0) - 400.0).abs() < 1e-12);
        assert!((g.efficiency(800.0, 100.0) - 5.0 / 12.0).abs() < 1e-12);
        assert!((g.efficiency(100.0, 100.0) - 1.0).abs() < 1e-12);
        // Gain lies between 1 and S.
        let gain = g.gain(800.0, 100.0);
        assert!((1.0..=8.0).contains(&gain));
        assert!((gain - 8.0 * 5.0 / 12.0).abs() < 1e-12);
    }

    #[test]
    fn fixed_batch_rule_matches_the_artifact_example() {
        // pollux-data.md §6.6: cifar10 2048 on 6 GPUs -> b = 342, realised 2052.
        let l = AppLimits {
            m0: 128,
            mmax: 4096,
            bmin: 32,
            bmax: 1024,
        };
        let c = l.fixed_batch(6, 2048.0);
        assert_eq!(
            c,
            BatchConfig {
                atomic: 342,
                accum: 0
            }
        );
        assert_eq!(c.global(6), 2052);
        // One replica above M0 accumulates at least once.
        assert_eq!(l.fixed_batch(1, 256.0).accum, 1);
        assert_eq!(l.fixed_batch(1, 128.0).accum, 0);
    }

    #[test]
    fn golden_section_finds_the_maximum_of_a_unimodal_function() {
        for peak in [-3.0, 0.1, 2.5, 7.9] {
            let x = golden_section_max(|x: f64| -(x - peak) * (x - peak) + 3.0, -5.0, 8.0, 1e-7);
            assert!((x - peak).abs() < 1e-6, "{x} vs {peak}");
        }
    }

    #[test]
    fn golden_section_search_matches_the_grid_on_goodput() {
        let m = GoodputModel {
            params: ThroughputParams {
                alpha_c: 0.05,
                beta_c: 0.002,
                alpha_n: 0.2,
                beta_n: 0.01,
                alpha_r: 0.05,
                beta_r: 0.005,
                gamma: 1.5,
            },
            grad: GradStats {
                sqr: 1.0,
                var: 20.0,
            },
            limits: AppLimits {
                m0: 128,
                mmax: 4096,
                bmin: 32,
                bmax: 1024,
            },
        };
        for (n, r) in [(1, 1), (1, 4), (2, 8), (4, 16)] {
            let grid = m.best(n, r, BatchSearch::Grid50).goodput;
            let gold = m.best(n, r, BatchSearch::GoldenSection).goodput;
            // The grid has 50 points; golden-section is at least as good up to
            // the grid's spacing.
            assert!(gold >= grid * 0.99, "({n},{r}): {gold} < {grid}");
        }
    }

    proptest::proptest! {
        /// The batched search gives `best`'s result bit for bit.
        #[test]
        fn best_on_nodes_is_best_bit_for_bit(
            p in proptest::array::uniform7(0.001f64..2.0), gamma in 1.0f64..10.0,
            sqr in 0.01f64..10.0, var in 0.0f64..100.0, m0 in 1u32..512, mult in 1u32..64,
            bmin in 1u32..64, bmax_mult in 1u32..32, r in 1u32..65, golden in proptest::bool::ANY,
        ) {
            let mut a = p;
            a[6] = gamma;
            let model = GoodputModel {
                params: ThroughputParams::from_array(a),
                grad: GradStats { sqr, var },
                limits: AppLimits { m0, mmax: m0 * mult, bmin, bmax: bmin * bmax_mult },
            };
            let search = if golden { BatchSearch::GoldenSection } else { BatchSearch::Grid50 };
            let batched = model.best_on_nodes(r, 1..=r.min(16), search);
            for (n, got) in (1..=r.min(16)).zip(batched) {
                let want = model.best(n, r, search);
                proptest::prop_assert_eq!(got.goodput.to_bits(), want.goodput.to_bits());
                proptest::prop_assert_eq!(got.config, want.config);
            }
        }
    }
}
