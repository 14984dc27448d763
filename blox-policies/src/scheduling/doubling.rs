//! The ring doubling heuristic (seed `ring-doubling-heuristic.txt`, §3–4 and
//! §7), on the profile-driven or the duration job model.
//!
//! - **Convergence** (§3.1, Eq. 1): the job's loss curve `l = 1/(β0·k + β1) +
//!   β2` is fitted by non-negative least squares to the `(epochs, loss)` points
//!   it has reported ([`fit_convergence`]); it has converged once its excess
//!   loss `l − β2` is `tolerance` of the excess at the start, which gives the
//!   remaining epochs `Q_j`. A job without enough loss points falls back to its
//!   profile's true remaining work (an oracle; Pollux profiles carry no loss
//!   curves) or, with no profile either, to one epoch.
//! - **Resource model** (§3.2, Eq. 2–5): time per minibatch on `w` workers
//!   `T(w) = θ0·m/w + θ1·(w−1) + θ2·(w−1)/w + θ3` (Eq. 5 with the model size
//!   `n` folded into θ2), fitted by NNLS. Eq. 2 (ring all-reduce) has exactly
//!   this form; doubling-halving (Eq. 3) and binary blocks (Eq. 4) are fitted by
//!   it approximately ([`t_ring`], [`t_doubling_halving`], [`t_binary_blocks`]).
//!   The speed is `f(w) = 1 / (T(w) · iterations per epoch)`.
//!   - *precompute* (§4, §7): θ from step times at 1, 2, 4 and 8 GPUs known
//!     before scheduling — here the measured profiles, packed 4 GPUs a node, at
//!     the job's fixed batch;
//!   - *exploratory* (§7): a new job first runs `explore_s` (10 min) on 1, 2, 4
//!     and 8 GPUs in turn (2.5 min each), and θ is fitted to the throughput it
//!     reported at each size. Explorers are served first.
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
        let pivot = a[i].clone();
        for (r, row) in a.iter_mut().enumerate().take(n) {
            if r != i {
                let f = row[i] / pivot[i];
                for (x, p) in row[i..=n].iter_mut().zip(&pivot[i..=n]) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

/// Features of Eq. 5 for `w` workers at minibatch `m`.
/// θ of Eq. 5 at batch `m` from throughput (samples/s) measured at two or
/// more worker counts, by NNLS; `None` from fewer.
pub(crate) fn theta_from_throughput(
    measured: &std::collections::BTreeMap<u32, f64>,
    m: u32,
) -> Option<[f64; 4]> {
    let (rows, y): (Vec<Vec<f64>>, Vec<f64>) = measured
        .iter()
        .filter(|(_, x)| **x > 0.0)
        .map(|(w, x)| (features(*w as f64, m as f64), m as f64 / x))
        .unzip();
    (rows.len() >= 2).then(|| {
        let v = nnls(&rows, &y);
        [v[0], v[1], v[2], v[3]]
    })
}

fn features(w: f64, m: f64) -> Vec<f64> {
    vec![m / w, w - 1.0, (w - 1.0) / w, 1.0]
}

/// Eq. 2: ring all-reduce. `m` minibatch, `tf + tb` forward and backward time
/// per example, `alpha` latency per message, `beta` seconds per byte, `gamma`
/// compute seconds per byte, `n` model bytes.
#[allow(clippy::too_many_arguments)]
pub fn t_ring(w: f64, m: f64, tfb: f64, alpha: f64, beta: f64, gamma: f64, n: f64) -> f64 {
    m * tfb
        + (w - 1.0) * 4.0 * alpha
        + (w - 1.0) * (n / w) * 4.0 * beta
        + (w - 1.0) * (n / w) * 2.0 * gamma
}

/// Eq. 3: recursive doubling-halving all-reduce.
pub fn t_doubling_halving(
    w: f64,
    m: f64,
    tfb: f64,
    alpha: f64,
    beta: f64,
    gamma: f64,
    n: f64,
) -> f64 {
    m * tfb + 4.0 * w.ln() * alpha + 4.0 * n * beta + 2.5 * n * gamma
}

/// Eq. 4: binary-blocks all-reduce.
pub fn t_binary_blocks(w: f64, m: f64, tfb: f64, alpha: f64, beta: f64, gamma: f64, n: f64) -> f64 {
    m * tfb + (5.0 + 4.0 * w.ln().ceil()) * alpha + 7.0 * n * beta + 3.0 * n * gamma
}

/// Eq. 1 fitted to `(k, loss)` points: `[β0, β1, β2]` with all three ≥ 0,
/// minimising the squared loss error. For a fixed asymptote β2 the model is
/// linear in (β0, β1) after `1/(l − β2)`; β2 is searched on a grid below the
/// smallest loss and refined, and (β0, β1) come from NNLS.
pub fn fit_convergence(points: &[(f64, f64)]) -> Option<[f64; 3]> {
    if points.len() < 3 {
        return None;
    }
    let lmin = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    if !(lmin.is_finite() && lmin > 0.0) {
        return None;
    }
    let sse = |b: &[f64; 3]| -> f64 {
        points
            .iter()
            .map(|(k, l)| {
                let d = b[0] * k + b[1];
                let pred = if d > 0.0 {
                    1.0 / d + b[2]
                } else {
                    f64::INFINITY
                };
                (pred - l).powi(2)
            })
            .sum()
    };
    let at = |b2: f64| -> Option<[f64; 3]> {
        let rows: Vec<Vec<f64>> = points.iter().map(|(k, _)| vec![*k, 1.0]).collect();
        let y: Vec<f64> = points
            .iter()
            .map(|(_, l)| 1.0 / (l - b2).max(1e-12))
            .collect();
        let c = nnls(&rows, &y);
        (c[0] > 0.0 || c[1] > 0.0).then_some([c[0], c[1], b2])
    };
    let mut best: Option<([f64; 3], f64)> = None;
    let grid = 200;
    let consider = |b2: f64, best: &mut Option<([f64; 3], f64)>| {
        if let Some(b) = at(b2) {
            let e = sse(&b);
            if best.as_ref().is_none_or(|x| e < x.1) {
                *best = Some((b, e));
            }
        }
    };
    for i in 0..grid {
        consider(lmin * i as f64 / grid as f64, &mut best);
    }
    // Refine around the best grid point.
    let step = lmin / grid as f64;
    let centre = best.as_ref()?.0[2];
    for i in 0..=100 {
        let b2 = centre - step + 2.0 * step * i as f64 / 100.0;
        if (0.0..lmin).contains(&b2) {
            consider(b2, &mut best);
        }
    }
    best.map(|b| b.0)
}

/// Epochs at which the fitted curve's excess loss is `tol` of its excess at
/// `k = 0`: `β0·k + β1 = β1 / tol`.
pub fn converged_at(b: &[f64; 3], tol: f64) -> f64 {
    if b[0] <= 0.0 {
        return f64::INFINITY;
    }
    b[1] * (1.0 / tol.max(1e-9) - 1.0) / b[0]
}

/// Appends job `id`'s reported `(epochs_done, loss)` to `points` when it is
/// a new point (the loss history the convergence fit uses).
pub fn record_loss(points: &mut Vec<(f64, f64)>, jobs: &JobState, id: JobId) {
    let m = |k: &str| jobs.metrics().get(id, k);
    if let (Some(e), Some(l)) = (m(metric::EPOCHS_DONE), m(metric::LOSS)) {
        if points.last().is_none_or(|p| e > p.0) {
            points.push((e, l));
        }
    }
}

/// Epochs left by the fitted loss curve, once there are `min_points` points.
pub fn remaining_epochs(
    points: &[(f64, f64)],
    min_points: usize,
    tol: f64,
    epochs_now: f64,
) -> Option<f64> {
    if points.len() < min_points {
        return None;
    }
    let b = fit_convergence(points)?;
    let q = (converged_at(&b, tol) - epochs_now).max(0.0);
    q.is_finite().then_some(q)
}

/// How θ of the resource model is obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// From step times known before scheduling (the profiles).
    #[default]
    Precompute,
    /// From the job's own throughput at 1, 2, 4 and 8 GPUs in its first minutes.
    Exploratory,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DoublingParams {
    /// Per-application profiles (required by `precompute`, which defaults to
    /// the workload's; used by both for the oracle fallback and batch limits
    /// when present).
    #[serde(default)]
    pub traces_dir: Option<PathBuf>,
    #[serde(default = "four")]
    pub gpus_per_node: u32,
    #[serde(default)]
    pub variant: Variant,
    /// Length of the exploratory phase, seconds (§7: ten minutes).
    #[serde(default = "d_explore")]
    pub explore_s: f64,
    /// Excess loss left at convergence, relative to the start.
    #[serde(default = "d_tol")]
    pub tolerance: f64,
    /// Loss points needed before the convergence fit is used.
    #[serde(default = "d_points")]
    pub min_loss_points: usize,
}

fn four() -> u32 {
    4
}
fn d_explore() -> f64 {
    600.0
}
fn d_tol() -> f64 {
    0.01
}
fn d_points() -> usize {
    4
}

/// GPU counts tried by the exploratory phase, in order.
const EXPLORE: [u32; 4] = [1, 2, 4, 8];

#[derive(Clone, Debug, Default)]
struct Track {
    /// `(epochs done, loss)` as reported.
    losses: Vec<(f64, f64)>,
    /// Measured samples/s at each GPU count (exploratory).
    measured: std::collections::BTreeMap<u32, f64>,
    /// Run time when the job was first seen running.
    explore_from: Option<f64>,
}

#[derive(Clone)]
pub struct Doubling {
    params: DoublingParams,
    cache: Option<ProfileCache>,
    /// Fitted θ per (app, batch) from profiles.
    fits: HashMap<(String, u32), Option<[f64; 4]>>,
    tracks: HashMap<JobId, Track>,
}

impl Doubling {
    pub fn new(params: DoublingParams, traces: Option<PathBuf>) -> Self {
        Doubling {
            cache: traces.map(|t| ProfileCache::new(&t)),
            params,
            fits: HashMap::new(),
            tracks: HashMap::new(),
        }
    }

    fn profile(&mut self, job: &Job) -> Option<Arc<AppProfile>> {
        let app = job.spec.model.as_deref()?;
        self.cache.as_mut()?.get(app).ok()
    }

    /// θ of Eq. 5 for `app` at batch `m`, from measured step times at 1–8 GPUs.
    fn theta(&mut self, p: &AppProfile, m: u32) -> Option<[f64; 4]> {
        let key = (p.app.clone(), m);
        if let Some(t) = self.fits.get(&key) {
            return *t;
        }
        let g = self.params.gpus_per_node;
        let (mut rows, mut y) = (Vec::new(), Vec::new());
        for w in EXPLORE {
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

    /// θ of Eq. 5 from the job's own throughput at the sizes it explored.
    fn theta_explored(t: &Track, m: u32) -> Option<[f64; 4]> {
        theta_from_throughput(&t.measured, m)
    }

    /// Records this round's loss and throughput reports.
    fn observe(&mut self, jobs: &JobState, order: &[&Job]) {
        self.tracks
            .retain(|id, _| jobs.get(*id).is_some_and(|j| !j.status.is_terminal()));
        for j in order {
            let t = self.tracks.entry(j.id()).or_default();
            let m = |k: &str| jobs.metrics().get(j.id(), k);
            record_loss(&mut t.losses, jobs, j.id());
            if j.is_running() {
                t.explore_from.get_or_insert(j.run_time_s);
                if let Some(x) = m(metric::THROUGHPUT) {
                    t.measured.insert(j.allocation.len() as u32, x);
                }
            }
        }
    }

    /// GPUs an exploring job should hold now, or `None` once it has explored.
    fn exploring(&self, j: &Job) -> Option<u32> {
        if self.params.variant != Variant::Exploratory {
            return None;
        }
        let t = self.tracks.get(&j.id())?;
        let since = j.run_time_s - t.explore_from.unwrap_or(j.run_time_s);
        let phase = (since / (self.params.explore_s / EXPLORE.len() as f64)).floor() as usize;
        (phase < EXPLORE.len() || t.measured.len() < 2)
            .then(|| EXPLORE[phase.min(EXPLORE.len() - 1)])
    }

    /// `Q_j` as remaining iterations at batch `m`: the convergence fit when the
    /// job has reported enough loss points, else its profile's true remaining
    /// work, else one epoch.
    fn remaining_iters(&mut self, j: &Job, jobs: &JobState, m: u32) -> f64 {
        let metric = |k: &str| jobs.metrics().get(j.id(), k);
        let epochs_now = metric(metric::EPOCHS_DONE).unwrap_or(0.0);
        let iters_per_epoch = metric(metric::EPOCH_SIZE).map_or(1.0, |d| d / m.max(1) as f64);
        let fitted = self.tracks.get(&j.id()).and_then(|t| {
            remaining_epochs(
                &t.losses,
                self.params.min_loss_points,
                self.params.tolerance,
                epochs_now,
            )
        });
        if let Some(q) = fitted {
            return q * iters_per_epoch;
        }
        if let Some(p) = self.profile(j) {
            let e = metric(metric::EPOCH).unwrap_or(0.0) as usize;
            let progress = metric(metric::PROGRESS_UNITS).unwrap_or(0.0);
            // Iterations left at batch m: the rest of this epoch and the later
            // ones, each ΔP / g(m, epoch) iterations.
            let mut rem = 0.0;
            for k in e..p.max_epochs {
                let lo = p.epoch_boundary(k).max(if k == e { progress } else { 0.0 });
                rem += (p.epoch_boundary(k + 1) - lo).max(0.0) / p.gain(m as f64, k);
            }
            return rem;
        }
        iters_per_epoch
    }
}

/// The time per minibatch of Eq. 5 on `w` workers at batch `m`, from θ.
pub(crate) fn step_time(theta: &[f64; 4], w: u32, m: u32) -> f64 {
    features(w as f64, m as f64)
        .iter()
        .zip(theta)
        .map(|(a, b)| a * b)
        .sum()
}

struct Candidate {
    remaining_iters: f64,
    theta: [f64; 4],
    batch: u32,
    max_w: u32,
}

impl SchedulingPolicy for Doubling {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(
        &mut self,
        _round: &RoundInfo,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        super::fifo::sort_by_arrival(&mut order);
        self.observe(jobs, &order);
        let mut free = cluster.num_gpus();
        // Explorers first (§7), at their phase's size.
        let mut w: Vec<u32> = vec![0; order.len()];
        let mut exploring = vec![false; order.len()];
        for (i, j) in order.iter().enumerate() {
            if let Some(k) = self.exploring(j) {
                exploring[i] = true;
                if k <= free {
                    w[i] = k;
                    free -= k;
                }
            }
        }
        for (i, _) in order.iter().enumerate() {
            if !exploring[i] && free > 0 {
                w[i] = 1;
                free -= 1;
            }
        }
        let mut cands: Vec<Option<Candidate>> = Vec::with_capacity(order.len());
        for (i, j) in order.iter().enumerate() {
            if exploring[i] {
                cands.push(None);
                continue;
            }
            let profile = self.profile(j);
            let m = j
                .spec
                .batch_size
                .or(profile.as_ref().map(|p| p.limits.m0))
                .unwrap_or(1);
            let theta = match self.params.variant {
                Variant::Precompute => profile.as_ref().and_then(|p| self.theta(p, m)),
                Variant::Exploratory => self
                    .tracks
                    .get(&j.id())
                    .and_then(|t| Self::theta_explored(t, m)),
            };
            let Some(theta) = theta else {
                cands.push(None);
                continue;
            };
            let max_w = match &profile {
                Some(_) if j.spec.model.as_deref() == Some("ncf") => 1,
                Some(p) => (m / p.limits.bmin.max(1)).max(1),
                None => cluster.num_gpus(),
            };
            cands.push(Some(Candidate {
                remaining_iters: self.remaining_iters(j, jobs, m),
                theta,
                batch: m,
                max_w,
            }));
        }
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
            min_run_s: None,
            note: None,
            entries: order
                .iter()
                .zip(w)
                .filter(|(_, k)| *k > 0)
                .map(|(j, k)| Demand {
                    job: j.id(),
                    gpus: k,
                    batch_size: None,
                    gpu_ids: None,
                    host: None,
                })
                .collect(),
            desired_nodes: None,
            terminate: Vec::new(),
        }
    }

    /// The doubling heuristic resizes jobs at their batch size, on any GPU type.
    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        accepts_resizable(job, "doubling", false)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        vec![
            metric::EPOCHS_DONE,
            metric::EPOCH,
            metric::EPOCH_SIZE,
            metric::PROGRESS_UNITS,
            metric::LOSS,
            metric::THROUGHPUT,
        ]
    }
}

blox_core::register_scheduling!(
    "doubling",
    "ring doubling heuristic: 1 GPU each, then double the job with the best marginal gain per GPU; precompute or exploratory resource model, NNLS convergence fit",
    |p| {
        let params = p.parse::<DoublingParams>()?;
        // The precompute variant defaults to the workload's profiles; the
        // exploratory one uses profiles only when given.
        let dir = match (params.traces_dir.as_deref(), params.variant) {
            (None, Variant::Exploratory) => None,
            (given, _) => crate::profiles::profiles_dir(p, "traces_dir", given)?,
        };
        if dir.is_none() && params.variant == Variant::Precompute {
            return Err(p.error_at("variant", "the precompute variant needs `traces_dir` (step times known before scheduling), or a workload with profiles beside it; use variant = \"exploratory\" without profiles"));
        }
        if !(params.tolerance > 0.0 && params.tolerance < 1.0) || params.explore_s <= 0.0 {
            return Err(p.error_at("tolerance", "tolerance must be within (0, 1) and explore_s positive"));
        }
        Ok(Box::new(Doubling::new(params, dir)))
    }
);

#[cfg(test)]
mod tests;
