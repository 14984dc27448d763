//! Optimus+Oracle (Optimus, EuroSys'18, §4–5), as the Pollux artifact configures
//! it as a baseline (Pollux, OSDI'21, §5.1; `pollux-data.md` §8.2).
//!
//! Every job keeps its tuned batch size; Optimus chooses only GPU counts. Each
//! active job (in submission order) first gets one GPU while GPUs last — a job
//! without a profile gets the GPUs it asked for instead, as Blox's Optimus
//! starts every job from its request (it cannot predict any other count for
//! it, and one GPU would stretch a wide job's run many times over); then
//! GPUs go one at a time to the job whose remaining time drops most from one
//! more GPU, `gain = (T(k) − T(k+1)) · R`, until no gain is positive. As the
//! "Oracle" variant, `T(k)` is the *true* iteration time from the measured
//! profiles (replicas packed 4 per node) and `R` the true remaining iterations
//! at the job's batch size, from its current epoch (reported by the job as the
//! `epoch` metric). Pair with `most-free` placement, `order = "fewest-gpus-first"`.
//!
//! Two settings give the original Optimus (EuroSys'18) instead of the
//! artifact's baseline:
//! - `order = "expected-completion"`: the first GPU goes to jobs in order of
//!   expected completion time (remaining iterations × time per iteration on one
//!   GPU), shortest first, instead of submission order;
//! - `remaining = "convergence"`: remaining work from the job's own loss curve
//!   (Optimus §3.1: `l = 1/(β0·k + β1) + β2` fitted online by NNLS, shared with
//!   the doubling heuristic, [`super::doubling::fit_convergence`]); a job is
//!   done when its excess loss is `tolerance` of the start. Jobs that have not
//!   reported `min_loss_points` losses yet use the oracle.
//!
//! `throughput = "fitted"` drops the other oracle, the true iteration times:
//! `T(k)` comes only from the throughput the job reported at the GPU counts it
//! has run on (Optimus §3.2 fits its resource model to such samples), fitted
//! by NNLS to the ring all-reduce form the doubling heuristic uses
//! (`θ0·m/k + θ1·(k−1) + θ2·(k−1)/k + θ3`) from two counts on, and linear in
//! `k` from the one count it has run on before that. A job that has not run
//! yet gets its first GPU and no more until it reports.

use blox_core::*;
use blox_goodput::{AppProfile, ProfileCache};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Parameters: `traces_dir` — the per-application profiles (relative to the
/// config file; default: the workload's, `[workload] traces_dir` or `traces/`
/// beside a Pollux-format workload's folder); `gpus_per_node` — packing used
/// for predictions.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimusParams {
    #[serde(default)]
    pub traces_dir: Option<PathBuf>,
    #[serde(default = "four")]
    pub gpus_per_node: u32,
    #[serde(default)]
    pub order: Order,
    #[serde(default)]
    pub remaining: Remaining,
    #[serde(default = "d_tol")]
    pub tolerance: f64,
    #[serde(default = "d_points")]
    pub min_loss_points: usize,
    #[serde(default)]
    pub throughput: Throughput,
}

/// Where the time per iteration on `k` GPUs comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Throughput {
    /// The true step times from the profiles (the artifact's Oracle).
    #[default]
    Oracle,
    /// Fitted to the throughput the job reported at the counts it ran on.
    Fitted,
}

/// Who gets the first GPU first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// Submission order (the Pollux artifact's baseline).
    #[default]
    Submission,
    /// Shortest expected completion time first (Optimus §5).
    ExpectedCompletion,
}

/// Where the remaining work comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Remaining {
    /// The true remaining iterations from the profiles.
    #[default]
    Oracle,
    /// The online loss-curve fit (Optimus §3.1).
    Convergence,
}

fn four() -> u32 {
    4
}
fn d_tol() -> f64 {
    0.01
}
fn d_points() -> usize {
    4
}

#[derive(Clone)]
pub struct Optimus {
    params: OptimusParams,
    cache: ProfileCache,
    /// Predicted iteration time by (app, batch, GPUs).
    memo: HashMap<(String, u32, u32), Option<f64>>,
    /// `(epochs done, loss)` reported by each job.
    losses: HashMap<JobId, Vec<(f64, f64)>>,
    /// Samples/s each job reported at each GPU count (`throughput = "fitted"`).
    measured: HashMap<JobId, std::collections::BTreeMap<u32, f64>>,
}

/// Time per iteration at batch `m` on `k` GPUs from a job's own throughput
/// reports: NNLS on the all-reduce form from two GPU counts on, linear in
/// `k` from one; `None` before any.
fn t_fitted(measured: &std::collections::BTreeMap<u32, f64>, m: u32, k: u32) -> Option<f64> {
    if let Some(theta) = super::doubling::theta_from_throughput(measured, m) {
        let t = super::doubling::step_time(&theta, k, m);
        return (t > 0.0).then_some(t);
    }
    let (w0, x0) = measured.iter().find(|(_, x)| **x > 0.0)?;
    Some(m as f64 / x0 * *w0 as f64 / k as f64)
}

/// A job Optimus can model: profile, batch, most GPUs, remaining iterations.
type JobInfo = (Arc<AppProfile>, u32, u32, f64);

impl Optimus {
    fn profile(&mut self, app: &str) -> Option<Arc<AppProfile>> {
        match self.cache.get(app) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(
                    "optimus: no profile for `{app}`: {e}; the job gets the GPUs it asked for"
                );
                None
            }
        }
    }

    /// Time per iteration of `job` on `k` GPUs at batch `m`: the profile's
    /// (oracle) or fitted to the job's own reports.
    fn t_job(&mut self, job: JobId, p: &AppProfile, m: u32, k: u32) -> Option<f64> {
        match self.params.throughput {
            Throughput::Oracle => self.t_pred(p, m, k),
            Throughput::Fitted => self.measured.get(&job).and_then(|x| t_fitted(x, m, k)),
        }
    }

    /// Predicted time per iteration on `k` GPUs at global batch `m`
    /// (pollux-data.md §8.2: the fixed-batch rule, at least one accumulation
    /// step on a single GPU).
    fn t_pred(&mut self, p: &AppProfile, m: u32, k: u32) -> Option<f64> {
        let key = (p.app.clone(), m, k);
        if let Some(v) = self.memo.get(&key) {
            return *v;
        }
        let g = self.params.gpus_per_node;
        let mut per_node = vec![g; (k / g) as usize];
        if !k.is_multiple_of(g) {
            per_node.push(k % g);
        }
        let c = p.limits.fixed_batch_accumulating_alone(k, m as f64);
        let (b, s) = (c.atomic as f64, c.accum as f64);
        let t = p
            .step_time(&per_node, b)
            .map(|(step, sync)| step + s * (step - sync));
        self.memo.insert(key, t);
        t
    }
}

impl Optimus {
    /// Remaining iterations at batch `m` from the job's loss curve.
    fn fitted_remaining(&self, j: &Job, jobs: &JobState, m: u32) -> Option<f64> {
        let now = jobs
            .metrics()
            .get(j.id(), metric::EPOCHS_DONE)
            .unwrap_or(0.0);
        let q = super::doubling::remaining_epochs(
            self.losses.get(&j.id())?,
            self.params.min_loss_points,
            self.params.tolerance,
            now,
        )?;
        let per_epoch = jobs.metrics().get(j.id(), metric::EPOCH_SIZE)? / m.max(1) as f64;
        Some((q * per_epoch).max(1.0))
    }
}

impl SchedulingPolicy for Optimus {
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
        self.losses
            .retain(|id, _| jobs.get(*id).is_some_and(|j| !j.status.is_terminal()));
        for j in &order {
            super::doubling::record_loss(self.losses.entry(j.id()).or_default(), jobs, j.id());
        }
        if self.params.throughput == Throughput::Fitted {
            self.measured
                .retain(|id, _| jobs.get(*id).is_some_and(|j| !j.status.is_terminal()));
            for j in order.iter().filter(|j| j.is_running()) {
                if let Some(x) = jobs.metrics().get(j.id(), metric::THROUGHPUT) {
                    let k = j.allocation.len() as u32;
                    self.measured.entry(j.id()).or_default().insert(k, x);
                }
            }
        }
        // Per job: profile, batch, max GPUs, remaining iterations.
        let mut info: Vec<Option<JobInfo>> = order
            .iter()
            .map(|j| {
                let app = j.spec.model.as_deref()?;
                let p = self.profile(app)?;
                let m = j.spec.batch_size.unwrap_or(p.limits.m0);
                let max = if app == "ncf" {
                    1
                } else {
                    (m / p.limits.bmin).max(1)
                };
                let epoch = jobs.metrics().get(j.id(), metric::EPOCH).unwrap_or(0.0) as usize;
                let last = p.max_epochs - 1;
                let remaining = if epoch >= last {
                    1.0
                } else {
                    p.iterations(m as f64, last) - p.iterations(m as f64, epoch)
                };
                let remaining = match self.params.remaining {
                    Remaining::Oracle => remaining,
                    Remaining::Convergence => {
                        self.fitted_remaining(j, jobs, m).unwrap_or(remaining)
                    }
                };
                Some((p, m, max, remaining))
            })
            .collect();
        if self.params.order == Order::ExpectedCompletion {
            let mut keyed: Vec<(f64, usize)> = info
                .iter()
                .enumerate()
                .map(|(i, inf)| {
                    let id = order[i].id();
                    let t = inf.as_ref().and_then(|(p, m, _, rem)| {
                        let p = p.clone();
                        Some(rem * self.t_job(id, &p, *m, 1)?)
                    });
                    // Jobs without a profile: their submitted run time, as
                    // one-GPU seconds (duration model, linear in GPUs).
                    let t = t.or_else(|| {
                        let j = order[i];
                        j.expected_remaining_s()
                            .map(|r| r * j.requested_gpus().max(1) as f64)
                    });
                    (t.unwrap_or(f64::INFINITY), i)
                })
                .collect();
            // Stable: ties (and jobs with no estimate) stay in submission order.
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (o, inf): (Vec<&Job>, Vec<_>) = keyed
                .iter()
                .map(|(_, i)| (order[*i], info[*i].clone()))
                .unzip();
            order = o;
            info = inf;
        }
        let mut free = cluster.num_gpus();
        let mut alloc: Vec<u32> = Vec::with_capacity(order.len());
        for (j, inf) in order.iter().zip(&info) {
            // One GPU to start a modelled job; a job Optimus cannot model
            // starts as requested, or waits (later jobs may still fit).
            let want = match inf {
                Some(_) => 1,
                None => j.requested_gpus().max(1),
            };
            let g = if free >= want { want } else { 0 };
            free -= g;
            alloc.push(g);
        }
        while free > 0 {
            let mut best: Option<(usize, f64)> = None;
            for (i, inf) in info.iter().enumerate() {
                let Some((p, m, max, rem)) = inf else {
                    continue;
                };
                let k = alloc[i];
                if k == 0 || k + 1 > *max {
                    continue;
                }
                let id = order[i].id();
                let (a, b) = (self.t_job(id, p, *m, k), self.t_job(id, p, *m, k + 1));
                let gain = match (a, b) {
                    (Some(a), Some(b)) => (a - b) * rem,
                    _ => 0.0,
                };
                if gain > 0.0 && best.is_none_or(|(_, g)| gain > g) {
                    best = Some((i, gain));
                }
            }
            let Some((i, _)) = best else { break };
            alloc[i] += 1;
            free -= 1;
        }
        Schedule {
            min_run_s: None,
            note: None,
            desired_nodes: None,
            terminate: Vec::new(),
            entries: order
                .iter()
                .zip(alloc)
                .filter(|(_, k)| *k > 0)
                .map(|(j, k)| Demand {
                    job: j.id(),
                    gpus: k,
                    batch_size: None,
                    gpu_ids: None,
                    host: None,
                })
                .collect(),
        }
    }

    /// Optimus resizes jobs at their submitted batch size, on any GPU type.
    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        accepts_resizable(job, "optimus", false)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        vec![
            metric::EPOCHS_DONE,
            metric::EPOCH,
            metric::EPOCH_SIZE,
            metric::THROUGHPUT,
        ]
    }
}

blox_core::register_scheduling!(
    "optimus",
    "Optimus+Oracle: GPUs by marginal reduction of remaining time, from true profiles (Optimus §5; Pollux artifact baseline)",
    |p| {
        let params = p.parse::<OptimusParams>()?;
        let Some(dir) = crate::profiles::profiles_dir(p, "traces_dir", params.traces_dir.as_deref())? else {
            return Err(p.error_at("traces_dir", "Optimus needs the application profiles: set `traces_dir`, or use a workload with profiles (`[workload] traces_dir`, or `traces/` beside a Pollux-format workload's folder)"));
        };
        Ok(Box::new(Optimus { cache: ProfileCache::new(&dir), params, memo: HashMap::new(), losses: HashMap::new(), measured: HashMap::new() }))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn optimus(order: Order, remaining: Remaining) -> Optimus {
        let traces = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/pollux/traces");
        Optimus {
            cache: ProfileCache::new(&traces),
            params: OptimusParams {
                traces_dir: Some(traces),
                gpus_per_node: 4,
                order,
                remaining,
                tolerance: 0.01,
                min_loss_points: 4,
                throughput: Throughput::Oracle,
            },
            memo: HashMap::new(),
            losses: HashMap::new(),
            measured: HashMap::new(),
        }
    }

    /// Two cifar10 jobs on one GPU: job 1 arrived first with all its work
    /// ahead, job 2 later but nearly done.
    fn two_jobs() -> JobState {
        let mut state = JobState::new();
        for (id, arrival, epoch) in [(1, 0.0, 0.0), (2, 10.0, 60.0)] {
            let mut j = job(id, arrival, 1);
            j.spec.model = Some("cifar10".into());
            j.spec.batch_size = Some(128);
            state.insert(j);
            state.metrics().set(JobId(id), metric::EPOCH, epoch);
        }
        state
    }

    fn first_gpu(o: &mut Optimus, state: &JobState, now: f64) -> JobId {
        let s = o.schedule(&info(now), state, &ClusterState::homogeneous(1, 1));
        assert_eq!(s.entries.len(), 1, "{s:?}");
        s.entries[0].job
    }

    #[test]
    fn expected_completion_order_serves_the_shortest_remaining_job_first() {
        let state = two_jobs();
        let mut sub = optimus(Order::Submission, Remaining::Oracle);
        assert_eq!(first_gpu(&mut sub, &state, 60.0), JobId(1));
        let mut exp = optimus(Order::ExpectedCompletion, Remaining::Oracle);
        assert_eq!(first_gpu(&mut exp, &state, 60.0), JobId(2));
    }

    #[test]
    fn convergence_estimate_uses_the_reported_loss_curve() {
        // Now job 1 reports a loss curve that has flattened: by its own curve
        // it is nearly converged, so it goes first despite the oracle.
        let state = two_jobs();
        let mut o = optimus(Order::ExpectedCompletion, Remaining::Convergence);
        state.metrics().set(JobId(1), metric::EPOCH_SIZE, 50_000.0);
        for e in 0..8 {
            let e = e as f64 * 5.0;
            state.metrics().set(JobId(1), metric::EPOCHS_DONE, e);
            state
                .metrics()
                .set(JobId(1), metric::LOSS, 1.0 / (2.0 * e + 0.5) + 0.1);
            first_gpu(&mut o, &state, 60.0 + e);
        }
        assert_eq!(first_gpu(&mut o, &state, 1000.0), JobId(1));
    }

    #[test]
    fn jobs_without_a_profile_are_ordered_by_their_submitted_run_time() {
        let mut cluster = ClusterState::homogeneous(1, 1);
        let mut state = JobState::new();
        let mut long = job(1, 0.0, 1);
        long.spec.expected_duration_s = Some(10_000.0);
        let mut short = job(2, 5.0, 1);
        short.spec.expected_duration_s = Some(100.0);
        add(&mut state, &mut cluster, long, &[]);
        add(&mut state, &mut cluster, short, &[]);
        let mut exp = optimus(Order::ExpectedCompletion, Remaining::Oracle);
        assert_eq!(first_gpu(&mut exp, &state, 60.0), JobId(2));
        let mut sub = optimus(Order::Submission, Remaining::Oracle);
        assert_eq!(first_gpu(&mut sub, &state, 60.0), JobId(1));
    }

    /// Blox's Optimus starts every job from its request: a job without a
    /// profile gets what it asked for (never one GPU of a wide request), a
    /// request that does not fit waits while smaller ones behind it start,
    /// and modelled jobs still start from one GPU.
    #[test]
    fn jobs_without_a_profile_start_with_the_gpus_they_asked_for() {
        let mut cluster = ClusterState::homogeneous(2, 4);
        let mut state = JobState::new();
        for (id, gpus) in [(1, 4), (2, 8), (3, 2)] {
            add(&mut state, &mut cluster, job(id, id as f64, gpus), &[]);
        }
        let mut j = job(4, 4.0, 4);
        j.spec.model = Some("cifar10".into());
        j.spec.batch_size = Some(128);
        add(&mut state, &mut cluster, j, &[]);
        let mut o = optimus(Order::Submission, Remaining::Oracle);
        let s = o.schedule(&info(0.0), &state, &cluster);
        let got: Vec<(u64, u32)> = s.entries.iter().map(|d| (d.job.0, d.gpus)).collect();
        assert_eq!(got, vec![(1, 4), (3, 2), (4, 2)], "{s:?}");
    }

    #[test]
    fn fitted_iteration_times_come_only_from_what_the_job_reported() {
        let theta = [0.01, 0.02, 0.05, 0.1];
        let m = 64;
        let t = |w: u32| super::super::doubling::step_time(&theta, w, m);
        let mut seen = std::collections::BTreeMap::new();
        assert_eq!(t_fitted(&seen, m, 2), None, "nothing reported yet");
        // One count: linear in GPUs from it.
        seen.insert(2, m as f64 / t(2));
        assert!((t_fitted(&seen, m, 4).unwrap() - t(2) / 2.0).abs() < 1e-9);
        // Several: the all-reduce form, recovered where it was not measured.
        for w in [1, 4, 8] {
            seen.insert(w, m as f64 / t(w));
        }
        for k in [3, 6, 16] {
            let got = t_fitted(&seen, m, k).unwrap();
            assert!(
                (got - t(k)).abs() < 1e-6 * t(k),
                "k = {k}: {got} against {}",
                t(k)
            );
        }
    }
}
