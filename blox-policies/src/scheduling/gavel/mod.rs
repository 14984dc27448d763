//! Gavel's heterogeneity-aware LAS (Narayanan et al., OSDI'20, §3–5; Blox
//! §4.1, Table 1: "Gavel's optimization-based routine which outputs a share
//! for each GPU type for LAS", plus its round-based placement).
//!
//! 1. **Allocation** (Gavel §4.1, max-min fairness / LAS): with `T_jk` job
//!    `j`'s throughput on GPU type `k` and `s_j` its GPU count (scale factor),
//!    find time fractions `X_jk ≥ 0` that
//!    `maximise min_j Σ_k s_j·T_jk·X_jk / T_j^eq` subject to `Σ_k X_jk ≤ 1`
//!    per job and `Σ_j s_j·X_jk ≤ C_k` per type, `T_j^eq` being the job's
//!    throughput on an equal, capacity-proportional share of the types. The
//!    scale factor in the objective is the authors' (`max_min_fairness.py`):
//!    a job on one GPU gets `s` times the time of an equally fast job on `s`
//!    GPUs, so GPU-time, not wall time, is shared evenly. Solved as a linear
//!    program ([`crate::lp`]) whenever the set of jobs changes.
//! 2. **Rounds** (Gavel §5): each round, job–type pairs are served by priority
//!    `X_jk / (rounds on k / rounds so far)` (a pair never served yet first);
//!    a job gets `s_j` GPUs of one type if that type still has them. GPUs left
//!    over then go to the jobs still without any, in arrival order, each on
//!    its fastest type that has room (rounds are work-conserving, as the
//!    authors' round scheduler also places jobs whose allocation is zero).
//!
//! `T_jk` comes from the job's `speed.<type>` metrics (relative throughput per
//! GPU type, which the simulator reports from `[sim] type_speed` /
//! `model_type_speed`; a real job would be profiled on each type), 1 when
//! absent. Demands carry concrete GPUs: pair with `explicit` placement. A job
//! staying on its type keeps its GPUs; others are packed on the nodes of the
//! type with the most free GPUs.
//!
//! A job asking for more GPUs than any one type has cannot run on a single
//! type; rather than starve it, it gets a pseudo-type [`MIXED`] (any free GPUs,
//! at the speed of the slowest type). Its GPUs are the real types' GPUs: the
//! program bounds every job's use of all columns, MIXED included, by the
//! cluster's size, so it never plans more GPUs than there are.

use crate::lp;
use blox_core::*;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

pub mod artifact;
mod rounds;

/// Parameters: `heterogeneity_aware` (default true) — false gives the
/// paper's "LAS" baseline: the same program and rounds with every job's
/// throughput 1 on every type (Gavel §7.2, `MaxMinFairnessPolicy`);
/// `objective` and `rounds` select the Sia artifact's Gavel.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GavelParams {
    #[serde(default = "yes")]
    pub heterogeneity_aware: bool,
    #[serde(default)]
    pub objective: Objective,
    #[serde(default)]
    pub rounds: Rounds,
}

/// What Gavel's program optimises.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Max-min fairness of normalised throughput (LAS, Gavel §4.1).
    #[default]
    MaxMinFairness,
    /// The sum of the jobs' throughputs (`max_sum_throughput_perf`, Gavel
    /// §4.1; the policy the Sia artifact runs): `T_jk` is then the job's
    /// absolute `speed.<type>`, not a relative speed.
    MaxSumThroughput,
}

/// How allocations become rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rounds {
    /// Gavel §5 as described at the top of this file.
    #[default]
    Blox,
    /// The Sia artifact's round scheduler ([`artifact`]).
    SiaArtifact,
}

fn yes() -> bool {
    true
}

impl Default for GavelParams {
    fn default() -> Self {
        GavelParams {
            heterogeneity_aware: true,
            objective: Objective::default(),
            rounds: Rounds::default(),
        }
    }
}

/// The pseudo GPU type of jobs larger than every single type.
pub const MIXED: &str = "*mixed*";

#[derive(Clone, Default)]
pub struct Gavel {
    pub params: GavelParams,
    /// Last allocation, keyed by the job set it was solved for.
    solved_for: Vec<JobId>,
    alloc: HashMap<JobId, BTreeMap<String, f64>>,
    /// Rounds each job has been runnable, and run on each type.
    rounds: HashMap<JobId, (u64, BTreeMap<String, u64>)>,
    /// The Sia artifact's round state (`rounds = "sia-artifact"`).
    artifact: artifact::ArtifactRounds,
}

/// Relative throughput of `job` on `gpu_type` (its `speed.<type>` metric).
pub fn type_speed(jobs: &JobState, job: JobId, gpu_type: &str) -> f64 {
    jobs.metrics()
        .get(job, &format!("speed.{gpu_type}"))
        .filter(|v| *v > 0.0)
        .unwrap_or(1.0)
}

/// [`type_speed`], or 1 for the speed-agnostic baseline.
fn speed(aware: bool, jobs: &JobState, job: JobId, gpu_type: &str) -> f64 {
    if aware {
        type_speed(jobs, job, gpu_type)
    } else {
        1.0
    }
}

impl Gavel {
    /// Solves the max-min fairness program for `order` over `types`
    /// (`(type, GPUs)`); returns `X` per job.
    pub fn solve(
        order: &[&Job],
        jobs: &JobState,
        types: &[(String, u32)],
    ) -> Result<HashMap<JobId, BTreeMap<String, f64>>, lp::LpError> {
        Self::solve_with(order, jobs, types, true)
    }

    /// [`Gavel::solve`]; with `aware = false` every throughput is 1.
    pub fn solve_with(
        order: &[&Job],
        jobs: &JobState,
        types: &[(String, u32)],
        aware: bool,
    ) -> Result<HashMap<JobId, BTreeMap<String, f64>>, lp::LpError> {
        let type_speed = |jobs: &JobState, id: JobId, k: &str| speed(aware, jobs, id, k);
        let total_gpus: u32 = types.iter().map(|t| t.1).sum();
        let largest = types.iter().map(|t| t.1).max().unwrap_or(0);
        let mut types = types.to_vec();
        if order.iter().any(|j| j.requested_gpus() > largest) {
            types.push((MIXED.to_string(), total_gpus));
        }
        let types = &types[..];
        let real = |k: usize| types[k].0 != MIXED;
        let (nj, nk) = (order.len(), types.len());
        let total: f64 = types
            .iter()
            .filter(|t| t.0 != MIXED)
            .map(|t| t.1 as f64)
            .sum();
        // Variables: X_jk (j-major), then t. Sparse rows: a program of 1,000
        // jobs holds thousands of non-zeros, not millions of cells.
        let nv = nj * nk + 1;
        let mut p = lp::SparseLp::new(nv);
        p.c[nv - 1] = 1.0;
        for (j, job) in order.iter().enumerate() {
            let real_speeds: Vec<f64> = (0..nk)
                .filter(|&k| real(k))
                .map(|k| type_speed(jobs, job.id(), &types[k].0))
                .collect();
            let slowest = real_speeds.iter().copied().fold(f64::INFINITY, f64::min);
            let speeds: Vec<f64> = (0..nk)
                .map(|k| {
                    if real(k) {
                        type_speed(jobs, job.id(), &types[k].0)
                    } else {
                        slowest
                    }
                })
                .collect();
            let t_eq: f64 = speeds
                .iter()
                .zip(types)
                .filter(|(_, t)| t.0 != MIXED)
                .map(|(s, t)| s * t.1 as f64 / total)
                .sum::<f64>()
                .max(1e-12);
            // A job runs on a type only if it fits there, and on MIXED only if
            // it fits nowhere else; X_jk ≤ 1 on the others (Σ_k X_jk ≤ 1).
            for (k, t) in types.iter().enumerate() {
                let fits = if real(k) {
                    job.requested_gpus() <= t.1
                } else {
                    job.requested_gpus() > largest
                };
                p.upper[j * nk + k] = if fits { 1.0 } else { 0.0 };
            }
            // t − Σ_k (s_j · T_jk / T_eq) X_jk ≤ 0
            let s_j = job.requested_gpus().max(1) as f64;
            let mut row: Vec<(usize, f64)> = (0..nk)
                .map(|k| (j * nk + k, -s_j * speeds[k] / t_eq))
                .collect();
            row.push((nv - 1, 1.0));
            p.le(row, 0.0);
            // Σ_k X_jk ≤ 1
            p.le((0..nk).map(|k| (j * nk + k, 1.0)).collect(), 1.0);
        }
        for (k, t) in types.iter().enumerate() {
            p.le(
                order
                    .iter()
                    .enumerate()
                    .map(|(j, job)| (j * nk + k, job.requested_gpus() as f64))
                    .collect(),
                t.1 as f64,
            );
        }
        if types.iter().any(|t| t.0 == MIXED) {
            // MIXED GPUs are the real types' GPUs: all columns together fit
            // the cluster.
            p.le(
                order
                    .iter()
                    .enumerate()
                    .flat_map(|(j, job)| {
                        (0..nk).map(move |k| (j * nk + k, job.requested_gpus() as f64))
                    })
                    .collect(),
                total,
            );
        }
        let s = lp::maximize_sparse(&p)?;
        Ok(order
            .iter()
            .enumerate()
            .map(|(j, job)| {
                let x = types
                    .iter()
                    .enumerate()
                    .map(|(k, t)| (t.0.clone(), s.x[j * nk + k].max(0.0)))
                    .collect();
                (job.id(), x)
            })
            .collect())
    }
}

impl Gavel {
    /// The max-sum-throughput program (`max_sum_throughput.py`): maximise
    /// `Σ_jk T_jk·X_jk` subject to `Σ_k X_jk ≤ 1` per job and
    /// `Σ_j s_j·X_jk ≤ C_k` per type, `T_jk` the job's `speed.<type>`.
    pub fn solve_max_sum(
        order: &[&Job],
        jobs: &JobState,
        types: &[(String, u32)],
        aware: bool,
    ) -> Result<HashMap<JobId, BTreeMap<String, f64>>, lp::LpError> {
        let (nj, nk) = (order.len(), types.len());
        let mut p = lp::SparseLp::new(nj * nk);
        for (j, job) in order.iter().enumerate() {
            for (k, t) in types.iter().enumerate() {
                p.c[j * nk + k] = speed(aware, jobs, job.id(), &t.0);
                p.upper[j * nk + k] = 1.0;
            }
            p.le((0..nk).map(|k| (j * nk + k, 1.0)).collect(), 1.0);
        }
        for (k, t) in types.iter().enumerate() {
            p.le(
                order
                    .iter()
                    .enumerate()
                    .map(|(j, job)| (j * nk + k, job.requested_gpus() as f64))
                    .collect(),
                t.1 as f64,
            );
        }
        let s = lp::maximize_sparse(&p)?;
        Ok(order
            .iter()
            .enumerate()
            .map(|(j, job)| {
                let x = types
                    .iter()
                    .enumerate()
                    // The artifact rounds its solver's answer to 5 decimals.
                    .map(|(k, t)| (t.0.clone(), (s.x[j * nk + k] * 1e5).round() / 1e5))
                    .map(|(t, v)| (t, v.clamp(0.0, 1.0)))
                    .collect();
                (job.id(), x)
            })
            .collect())
    }

    /// Re-solves the program when the job set changed; keeps the last
    /// allocation if it fails.
    fn refresh(&mut self, order: &[&Job], jobs: &JobState, type_list: &[(String, u32)]) {
        let ids: Vec<JobId> = order.iter().map(|j| j.id()).collect();
        if ids == self.solved_for {
            return;
        }
        let aware = self.params.heterogeneity_aware;
        let solved = match self.params.objective {
            Objective::MaxMinFairness => Gavel::solve_with(order, jobs, type_list, aware),
            Objective::MaxSumThroughput => Gavel::solve_max_sum(order, jobs, type_list, aware),
        };
        match solved {
            Ok(x) => self.alloc = x,
            Err(e) => {
                tracing::warn!("gavel: allocation program failed ({e}); keeping the last one")
            }
        }
        self.solved_for = ids;
    }
}

impl SchedulingPolicy for Gavel {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        super::fifo::sort_by_arrival(&mut order);
        // Online GPUs by type.
        let mut types: BTreeMap<String, u32> = BTreeMap::new();
        for n in cluster.nodes().iter().filter(|n| n.online) {
            *types.entry(n.spec.gpu_type.clone()).or_default() += n.gpus.len() as u32;
        }
        if order.is_empty() {
            self.solved_for.clear();
            return Schedule::default();
        }
        if self.params.rounds == Rounds::SiaArtifact {
            return self.artifact_round(round, &order, jobs, cluster, &types);
        }
        // 1. The allocation X, solved again when the jobs changed.
        let type_list: Vec<(String, u32)> = types.clone().into_iter().collect();
        self.refresh(&order, jobs, &type_list);
        self.rounds
            .retain(|id, _| jobs.get(*id).is_some_and(|j| !j.status.is_terminal()));
        // 2. Job–type pairs served by priority, then the GPUs left over to
        // jobs without any.
        let pairs = self.priorities(&order);
        let mut free = types;
        let mut chosen = rounds::by_priority(&order, pairs, &mut free);
        self.fill_idle(&order, jobs, &mut free, &mut chosen);
        // 3. Concrete GPUs, and the rounds each job got on its type.
        let entries = rounds::concrete_gpus(&order, &chosen, cluster);
        self.count_rounds(&order, &chosen, &entries);
        Schedule {
            min_run_s: None,
            note: None,
            entries: entries
                .into_iter()
                .map(|(i, gpus)| Demand {
                    job: order[i].id(),
                    gpus: gpus.len() as u32,
                    batch_size: None,
                    gpu_ids: Some(gpus),
                    host: None,
                })
                .collect(),
            desired_nodes: None,
            terminate: Vec::new(),
        }
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        vec![metric::SPEED_PER_TYPE]
    }

    fn requires_placement(&self) -> Option<&'static str> {
        Some("explicit")
    }
}

blox_core::register_scheduling!(
    "gavel",
    "Gavel heterogeneity-aware LAS: max-min fair time shares per GPU type (an LP), served in rounds by priority (Gavel §4–5); use with `explicit` placement",
    |p| {
        let params = p.parse::<GavelParams>()?;
        Ok(Box::new(Gavel { params, ..Gavel::default() }))
    }
);

#[cfg(test)]
mod tests;
