//! The ring doubling heuristic (seed `ring-doubling-heuristic.txt`, §3.2 and
//! §4; precompute variant of §7), on the profile-driven job model.
//!
//! - **Resource model** (§3.2, Eq. 5): time per minibatch on `w` workers
//!   `T(w) = θ0·m/w + θ1·(w−1) + θ2·(w−1)/w + θ3` (the model size `n` of Eq. 5
//!   folded into θ2), fitted by non-negative least squares to the job's step
//!   times measured at 1, 2, 4 and 8 GPUs (the precompute variant: these runs
//!   are assumed done before scheduling; here they come from the measured
//!   profiles, packed 4 GPUs a node, at the job's fixed batch size). The speed
//!   in epochs per second is `f(w) = 1 / (T(w) · iterations per epoch)`. With a
//!   job's `m` and `n` fixed, the θ0 and θ2 terms both vary as `1/w`, so the
//!   coefficients are not unique; the fitted `T(w)` is.
//! - **Remaining epochs** `Q_j`: from the job's reported `epoch` and
//!   `progress_units` and its profile's epoch boundaries (an oracle in place
//!   of the online convergence fit of §3.1, which needs loss curves the
//!   profiles do not have).
//! - **Allocation** (§4.2, Eq. 6): one GPU to every job in submission order
//!   while GPUs last, then repeatedly double the allocation `w_j → 2·w_j` of the
//!   job with the largest average marginal gain per GPU
//!   `(Q_j/f(w_j) − Q_j/f(2·w_j)) / w_j`, while the extra `w_j` GPUs are free,
//!   the gain is positive and `2·w_j` stays within `⌊M/bmin⌋`.
//!
//! Pair with `consolidated` placement (§4.3: as few nodes as possible).

use blox_core::*;
use blox_goodput::{AppProfile, ProfileCache};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DoublingParams {
    pub traces_dir: PathBuf,
    #[serde(default = "four")]
    pub gpus_per_node: u32,
}

fn four() -> u32 {
    4
}

/// Non-negative least squares for a handful of unknowns: the best
/// unconstrained fit over every support set whose coefficients are all
/// non-negative (exact for the small problems here).
pub fn nnls(rows: &[Vec<f64>], y: &[f64]) -> Vec<f64> {
    let k = rows.first().map_or(0, |r| r.len());
    let mut best: (f64, Vec<f64>) = (y.iter().map(|v| v * v).sum(), vec![0.0; k]);
    for mask in 1u32..(1 << k) {
        let cols: Vec<usize> = (0..k).filter(|c| mask & (1 << c) != 0).collect();
        let Some(coef) = least_squares(rows, y, &cols) else {
            continue;
        };
        if coef.iter().any(|c| *c < 0.0) {
            continue;
        }
        let mut full = vec![0.0; k];
        for (c, v) in cols.iter().zip(&coef) {
            full[*c] = *v;
        }
        let res: f64 = rows
            .iter()
            .zip(y)
            .map(|(r, v)| {
                let p: f64 = r.iter().zip(&full).map(|(a, b)| a * b).sum();
                (p - v) * (p - v)
            })
            .sum();
        if res < best.0 - 1e-15 {
            best = (res, full);
        }
    }
    best.1
}

/// Least squares on the columns `cols` by the normal equations; `None` if singular.
fn least_squares(rows: &[Vec<f64>], y: &[f64], cols: &[usize]) -> Option<Vec<f64>> {
    let n = cols.len();
    let mut a = vec![vec![0.0; n + 1]; n];
    for (r, v) in rows.iter().zip(y) {
        for i in 0..n {
            for j in 0..n {
                a[i][j] += r[cols[i]] * r[cols[j]];
            }
            a[i][n] += r[cols[i]] * v;
        }
    }
    for i in 0..n {
        let p = (i..n).max_by(|&x, &z| a[x][i].abs().total_cmp(&a[z][i].abs()))?;
        if a[p][i].abs() < 1e-14 {
            return None;
        }
        a.swap(i, p);
        for r in 0..n {
            if r != i {
                let f = a[r][i] / a[i][i];
                for c in i..=n {
                    a[r][c] -= f * a[i][c];
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// Features of Eq. 5 for `w` workers at minibatch `m`.
fn features(w: f64, m: f64) -> Vec<f64> {
    vec![m / w, w - 1.0, (w - 1.0) / w, 1.0]
}

pub struct Doubling {
    params: DoublingParams,
    cache: ProfileCache,
    /// Fitted θ per (app, batch).
    fits: HashMap<(String, u32), Option<[f64; 4]>>,
}

impl Doubling {
    /// θ of Eq. 5 for `app` at batch `m`, from measured step times at 1–8 GPUs.
    fn theta(&mut self, p: &AppProfile, m: u32) -> Option<[f64; 4]> {
        let key = (p.app.clone(), m);
        if let Some(t) = self.fits.get(&key) {
            return *t;
        }
        let g = self.params.gpus_per_node;
        let (mut rows, mut y) = (Vec::new(), Vec::new());
        for w in [1u32, 2, 4, 8] {
            let mut per_node = vec![g; (w / g) as usize];
            if w % g != 0 {
                per_node.push(w % g);
            }
            let c = p.limits.fixed_batch(w, m as f64);
            if let Some((step, sync)) = p.step_time(&per_node, c.atomic as f64) {
                rows.push(features(w as f64, m as f64));
                y.push(step + c.accum as f64 * (step - sync));
            }
        }
        let t = (rows.len() >= 2).then(|| {
            let v = nnls(&rows, &y);
            [v[0], v[1], v[2], v[3]]
        });
        self.fits.insert(key, t);
        t
    }
}

fn step_time(theta: &[f64; 4], w: u32, m: u32) -> f64 {
    features(w as f64, m as f64)
        .iter()
        .zip(theta)
        .map(|(a, b)| a * b)
        .sum()
}

struct Candidate {
    /// Remaining iterations (epochs × iterations per epoch).
    remaining_iters: f64,
    theta: [f64; 4],
    batch: u32,
    max_w: u32,
}

impl SchedulingPolicy for Doubling {
    fn schedule(
        &mut self,
        _round: &RoundInfo,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        order.sort_by(|a, b| {
            a.arrival_s()
                .total_cmp(&b.arrival_s())
                .then(a.id().cmp(&b.id()))
        });
        let mut free = cluster.num_gpus();
        let mut w: Vec<u32> = order
            .iter()
            .map(|_| {
                let g = u32::from(free > 0);
                free -= g;
                g
            })
            .collect();
        let cands: Vec<Option<Candidate>> = order
            .iter()
            .map(|j| {
                let app = j.spec.model.as_deref()?;
                let p: Arc<AppProfile> = self.cache.get(app).ok()?;
                let m = j.spec.batch_size.unwrap_or(p.limits.m0);
                let theta = self.theta(&p, m)?;
                let metrics = jobs.metrics();
                let e = metrics.get(j.id(), "epoch").unwrap_or(0.0) as usize;
                let progress = metrics.get(j.id(), "progress_units").unwrap_or(0.0);
                // Iterations left at batch m: the rest of this epoch and the
                // later ones, each ΔP / g(m, epoch) iterations.
                let mut rem = 0.0;
                for k in e..p.max_epochs {
                    let (lo, hi) = (
                        p.epoch_boundary(k).max(if k == e { progress } else { 0.0 }),
                        p.epoch_boundary(k + 1),
                    );
                    rem += (hi - lo).max(0.0) / p.gain(m as f64, k);
                }
                let max_w = if app == "ncf" {
                    1
                } else {
                    (m / p.limits.bmin.max(1)).max(1)
                };
                Some(Candidate {
                    remaining_iters: rem,
                    theta,
                    batch: m,
                    max_w,
                })
            })
            .collect();
        loop {
            let mut best: Option<(usize, f64)> = None;
            for (i, c) in cands.iter().enumerate() {
                let Some(c) = c else { continue };
                let k = w[i];
                if k == 0 || 2 * k > c.max_w || k > free {
                    continue;
                }
                let t = |x: u32| c.remaining_iters * step_time(&c.theta, x, c.batch);
                let gain = (t(k) - t(2 * k)) / k as f64;
                if gain > 0.0 && best.is_none_or(|(_, g)| gain > g) {
                    best = Some((i, gain));
                }
            }
            let Some((i, _)) = best else { break };
            free -= w[i];
            w[i] *= 2;
        }
        Schedule {
            entries: order
                .iter()
                .zip(w)
                .filter(|(_, k)| *k > 0)
                .map(|(j, k)| Demand {
                    job: j.id(),
                    gpus: k,
                    batch_size: None,
                    gpu_ids: None,
                })
                .collect(),
            desired_nodes: None,
            terminate: Vec::new(),
        }
    }
}

blox_core::register_scheduling!(
    "doubling",
    "ring doubling heuristic: 1 GPU each, then double the job with the best marginal gain per GPU (precompute variant)",
    |p| {
        let params = p.parse::<DoublingParams>()?;
        let dir = p.resolve_path(&params.traces_dir);
        if !dir.is_dir() {
            return Err(p.error_at("traces_dir", format!("{} is not a folder of application profiles", dir.display())));
        }
        Ok(Box::new(Doubling { cache: ProfileCache::new(&dir), params, fits: HashMap::new() }))
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnls_recovers_non_negative_coefficients_and_clips_negative_ones() {
        let rows: Vec<Vec<f64>> = [1.0, 2.0, 4.0, 8.0]
            .iter()
            .map(|&w| features(w, 256.0))
            .collect();
        let truth = [0.001, 0.01, 0.05, 0.02];
        let y: Vec<f64> = rows
            .iter()
            .map(|r| r.iter().zip(&truth).map(|(a, b)| a * b).sum())
            .collect();
        let fit = nnls(&rows, &y);
        // With m fixed, m/w and (w−1)/w = 1 − 1/w are collinear with the
        // constant: the coefficients are not unique, the predictions are.
        let fit4 = [fit[0], fit[1], fit[2], fit[3]];
        for w in [1u32, 3, 16, 64] {
            let (a, b) = (step_time(&fit4, w, 256), step_time(&truth, w, 256));
            assert!(
                (a - b).abs() < 1e-9 * b.max(1.0),
                "w={w}: {a} vs {b} ({fit:?})"
            );
        }
        assert!(fit.iter().all(|c| *c >= 0.0));
        // y = 1 − x has a negative slope: NNLS keeps it at 0.
        let rows = vec![vec![0.0, 1.0], vec![1.0, 1.0], vec![2.0, 1.0]];
        let fit = nnls(&rows, &[1.0, 0.0, -1.0]);
        assert_eq!(fit[0], 0.0);
        assert!(fit[1] >= 0.0);
    }

    #[test]
    fn allocations_are_powers_of_two_within_capacity() {
        let traces = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/pollux/traces");
        let mut d = Doubling {
            cache: ProfileCache::new(&traces),
            params: DoublingParams {
                traces_dir: traces.clone(),
                gpus_per_node: 4,
            },
            fits: HashMap::new(),
        };
        let cluster = ClusterState::homogeneous(4, 4);
        let mut state = JobState::new();
        for (id, app, batch) in [
            (1, "cifar10", 1024),
            (2, "imagenet", 3200),
            (3, "bert", 96),
            (4, "ncf", 32768),
        ] {
            let mut j = Job::new(JobSpec::new(id, id as f64, 1));
            j.spec.model = Some(app.into());
            j.spec.batch_size = Some(batch);
            j.status = JobStatus::Queued;
            state.insert(j);
        }
        let s = d.schedule(&crate::test_util::info(0.0), &state, &cluster);
        let total: u32 = s.entries.iter().map(|e| e.gpus).sum();
        assert!(total <= 16);
        for e in &s.entries {
            assert!(e.gpus.is_power_of_two(), "{e:?}");
        }
        // ncf never grows past one GPU; the others got more than one.
        assert_eq!(
            s.entries.iter().find(|e| e.job == JobId(4)).unwrap().gpus,
            1
        );
        assert!(s.entries.iter().any(|e| e.gpus > 1), "{s:?}");
    }
}
