//! Pollux (OSDI'21): co-adaptive scheduling. Jobs run a PolluxAgent
//! (`blox-goodput`) that fits θ_sys, tracks the gradient noise scale and tunes
//! the batch size; the cluster scheduler, PolluxSched (§4.2), re-allocates GPUs
//! every round with a genetic algorithm ([`ga`]) that maximises a fitness of
//! per-job speedups. It is an ordinary scheduling module whose [`Demand`]s carry
//! concrete GPUs; pair it with the `explicit` placement.
//!
//! Per round (`pollux-data.md` §6):
//! 1. jobs ordered by attained service, then arrival (§6.2); nodes by id;
//! 2. per job: the agent's model from its `pollux.*` metrics; `max_replicas =
//!    min(max(2·R_prof, 1), GPUs, ⌊Mmax/bmin⌋)` — at most twice the most GPUs
//!    it has been measured on (§4.1's exploration cap);
//! 3. speedup(n, r) = best goodput on (n, r) / best goodput of the fair share
//!    `⌈G/J⌉` GPUs on one node (Eq. 15 with the artifact's base); a job not yet
//!    measured gets `r/⌈G/J⌉`;
//! 4. NSGA-II over allocation matrices with fitness = power mean (p = −1) of
//!    scaled speedups, each penalised by `max(age − 30·restarts, 0)/(age + 30)`
//!    when the job's allocation changes, and job weights (Eq. 16, off by
//!    default); utility (Eq. 17) as the second objective;
//! 5. the member of the final non-dominated set with the largest fitness.
//!
//! Artifact choices that differ from the paper: the fair-share normalisation of
//! speedups (paper: one GPU), the harmonic power mean (paper: a weighted
//! arithmetic mean, Eq. 14), NSGA-II with utility as a second objective.
//! The artifact re-indexes the population carried between rounds by position,
//! which can hand a row to another job; `carry = "by-position"` reproduces
//! that, the default `by-job` carries each row to its own job.

pub mod ga;

use blox_core::*;
use blox_goodput::model::BatchSearch;
use blox_goodput::AgentReport;
use ga::{Alloc, GaSettings, Problem};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// `[scheduling] policy = "pollux"` parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolluxParams {
    #[serde(default = "d_pop")]
    pub population: usize,
    #[serde(default = "d_pop")]
    pub generations: usize,
    /// Restart cost used in the penalty, seconds (the simulator's restart delay).
    #[serde(default = "d_restart")]
    pub restart_penalty_s: f64,
    /// Power of the fitness power mean (−1: harmonic, as the artifact).
    #[serde(default = "d_power")]
    pub power: f64,
    /// Repair step 1: at most one distributed job per node (§4.2).
    #[serde(default = "d_true")]
    pub interference_avoidance: bool,
    /// Eq. 16: weight `min(1, threshold / GPU-time)^decay`; decay 0 = all 1.
    #[serde(default)]
    pub weight_decay: f64,
    #[serde(default = "d_thres")]
    pub weight_threshold_gpu_s: f64,
    /// `by-job` (default) or `by-position` (the artifact's re-indexing).
    #[serde(default)]
    pub carry: Carry,
    /// How speedups search the batch size: `grid50` (the artifact's) or
    /// `golden-section`.
    #[serde(default)]
    pub batch_search: BatchSearch,
    /// Seed of the search's random numbers.
    #[serde(default = "d_seed")]
    pub seed: u64,
    /// Cloud auto-scaling (§4.2.2), off unless `[scheduling.autoscale]` is given.
    #[serde(default)]
    pub autoscale: Option<AutoscaleParams>,
    /// The Sia artifact's heterogeneity-unaware Pollux (Sia §4.3): larger
    /// nodes are searched over as virtual nodes of this many GPUs, so every
    /// node looks alike.
    #[serde(default)]
    pub virtual_node_gpus: Option<u32>,
    /// … and a job placed on several GPU types keeps only those of its
    /// most-used type (ties: the type listed first in `type_priority`).
    #[serde(default)]
    pub mixed_types: MixedTypes,
    #[serde(default)]
    pub type_priority: Vec<String>,
    /// At most this many replicas per job (the artifact's cap of the smallest
    /// GPU type's size).
    #[serde(default)]
    pub max_replicas: Option<u32>,
}

/// What happens to a job the search spreads over several GPU types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MixedTypes {
    /// It runs on all of them (at the speed of the slowest).
    #[default]
    Keep,
    /// It keeps the GPUs of its most-used type (Sia §4.3).
    DropMinority,
}

/// How last round's population is carried to this round's jobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Carry {
    /// Each row goes to its own job.
    #[default]
    ByJob,
    /// The artifact's: the k-th surviving job of the old order to the k-th
    /// surviving job of the new order.
    ByPosition,
}

/// Auto-scaling settings (Pollux §4.2.2).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoscaleParams {
    pub min_nodes: u32,
    pub max_nodes: u32,
    #[serde(default = "d_low")]
    pub low_util: f64,
    #[serde(default = "d_high")]
    pub high_util: f64,
}

fn d_pop() -> usize {
    100
}
fn d_restart() -> f64 {
    30.0
}
fn d_power() -> f64 {
    -1.0
}
fn d_true() -> bool {
    true
}
fn d_thres() -> f64 {
    3600.0
}
fn d_seed() -> u64 {
    1
}
fn d_low() -> f64 {
    0.5
}
fn d_high() -> f64 {
    0.8
}

/// What one round's search decided, for reports and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct Decision {
    /// Desired node count from auto-scaling, when enabled.
    pub desired_nodes: Option<u32>,
    pub fitness: f64,
    pub utility: f64,
}

#[derive(Clone)]
pub struct PolluxSched {
    params: PolluxParams,
    rng: ChaCha8Rng,
    /// Last round's non-dominated set: (job order, node order, matrices).
    carried: Option<(Vec<JobId>, Vec<NodeId>, Vec<Alloc>)>,
    pub last: Decision,
}

impl PolluxSched {
    pub fn new(params: PolluxParams) -> Self {
        PolluxSched {
            rng: ChaCha8Rng::seed_from_u64(params.seed),
            params,
            carried: None,
            last: Decision::default(),
        }
    }

    fn settings(&self) -> GaSettings {
        GaSettings {
            population: self.params.population,
            offspring: self.params.population,
            generations: self.params.generations,
            ..GaSettings::default()
        }
    }

    /// Builds the round's problem on the given nodes.
    fn problem(
        &self,
        round: &RoundInfo,
        order: &[&Job],
        jobs: &JobState,
        nodes: &[&Node],
    ) -> Problem {
        let slot: HashMap<GpuId, usize> = nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| n.gpus.iter().map(move |g| (*g, i)))
            .collect();
        let total: u32 = nodes.iter().map(|n| n.gpus.len() as u32).sum();
        let nj = order.len();
        let nn = nodes.len();
        let r_fair = total.div_ceil(nj.max(1) as u32).max(1);
        let mut current: Vec<(u32, u32, u8)> = Vec::new();
        let mut speedup = Vec::with_capacity(nj);
        let mut max_replicas = Vec::with_capacity(nj);
        let mut restart_factor = Vec::with_capacity(nj);
        let mut weights = Vec::with_capacity(nj);
        let max_per_node = nodes.iter().map(|n| n.gpus.len()).max().unwrap_or(0) as u32;
        // Each job's speedups, in parallel: the goodput model is asked for
        // the best batch on every (nodes, replicas) pair.
        let tables: Vec<(u32, Vec<f64>)> = order
            .par_iter()
            .map(|job| self.speedup_table(job, jobs, total, nn, r_fair, max_per_node))
            .collect();
        for ((j, job), (max_r, table)) in order.iter().enumerate().zip(tables) {
            let mut per_node: HashMap<usize, u8> = HashMap::new();
            for g in &job.allocation {
                if let Some(k) = slot.get(g) {
                    *per_node.entry(*k).or_default() += 1;
                }
            }
            current.extend(per_node.into_iter().map(|(k, x)| (j as u32, k as u32, x)));
            speedup.push(table);
            max_replicas.push(max_r);
            let age = round.now_s - job.arrival_s();
            let restarts = job.launches.saturating_sub(1) as f64;
            let d = self.params.restart_penalty_s;
            restart_factor.push((age - d * restarts).max(0.0) / (age + d));
            weights.push(
                if self.params.weight_decay > 0.0 && job.held_service_gpu_s() > 0.0 {
                    (self.params.weight_threshold_gpu_s / job.held_service_gpu_s())
                        .min(1.0)
                        .powf(self.params.weight_decay)
                } else {
                    1.0
                },
            );
        }
        Problem {
            jobs: nj,
            nodes: nn,
            capacity: nodes.iter().map(|n| n.gpus.len().min(255) as u8).collect(),
            current: Alloc::from_triples(nj, current),
            speedup,
            max_replicas,
            restart_factor,
            weights,
            scale: nn as f64 / total.max(1) as f64,
            power: self.params.power,
            interference_avoidance: self.params.interference_avoidance,
        }
    }

    /// A job's largest replica count and its speedup table, indexed
    /// `[n * (max_r + 1) + r]` (Pollux §4.2: goodput over that of the fair share).
    fn speedup_table(
        &self,
        job: &Job,
        jobs: &JobState,
        total: u32,
        nn: usize,
        r_fair: u32,
        max_per_node: u32,
    ) -> (u32, Vec<f64>) {
        let report = AgentReport::from_metrics(|k| jobs.metrics().get(job.id(), k));
        let r_prof = report.map_or(job.max_gpus_so_far, |r| r.max_profiled_replicas);
        let mut max_r = (2 * r_prof).max(1).min(total);
        if let Some(r) = report {
            max_r = max_r.min((r.limits.mmax / r.limits.bmin.max(1)).max(1));
            if let Some(c) = r.replica_cap {
                max_r = max_r.min(c.max(1));
            }
        }
        if let Some(c) = self.params.max_replicas {
            max_r = max_r.min(c.max(1));
        }
        let width = max_r as usize + 1;
        let mut table = vec![0.0; (nn.min(max_r as usize) + 1) * width];
        match report.and_then(|r| r.model()) {
            Some(model) => {
                let base = model.best(1, r_fair, self.params.batch_search).goodput;
                for r in 1..=max_r {
                    let n_lo = r.div_ceil(max_per_node.max(1)).max(1);
                    let ns = n_lo..=r.min(nn as u32);
                    let best = model.best_on_nodes(r, ns.clone(), self.params.batch_search);
                    for (n, b) in ns.zip(best) {
                        table[n as usize * width + r as usize] =
                            if base > 0.0 { b.goodput / base } else { 0.0 };
                    }
                }
            }
            None => {
                for r in 1..=max_r {
                    for n in 1..=r.min(nn as u32) {
                        table[n as usize * width + r as usize] = r as f64 / r_fair as f64;
                    }
                }
            }
        }
        (max_r, table)
    }

    /// The starting population: last round's set re-indexed to this round.
    fn initial(&self, order: &[&Job], nodes: &[&Node], p: &Problem) -> Vec<Alloc> {
        let Some((old_jobs, old_nodes, sets)) = &self.carried else {
            return vec![p.current.clone()];
        };
        let now: HashMap<JobId, usize> =
            order.iter().enumerate().map(|(i, j)| (j.id(), i)).collect();
        // New row of each old row.
        let mut new_row: Vec<Option<u32>> = vec![None; old_jobs.len()];
        if self.params.carry == Carry::ByPosition {
            // The artifact pairs the k-th surviving job of the old order with
            // the k-th surviving job of the new order.
            let survivors_new = order
                .iter()
                .enumerate()
                .filter(|(_, j)| old_jobs.contains(&j.id()))
                .map(|(i, _)| i);
            let survivors_old = old_jobs
                .iter()
                .enumerate()
                .filter(|(_, id)| now.contains_key(id))
                .map(|(i, _)| i);
            for (o, n) in survivors_old.zip(survivors_new) {
                new_row[o] = Some(n as u32);
            }
        } else {
            for (o, id) in old_jobs.iter().enumerate() {
                new_row[o] = now.get(id).map(|&n| n as u32);
            }
        }
        let col: HashMap<NodeId, u32> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id, i as u32))
            .collect();
        let new_col: Vec<Option<u32>> = old_nodes.iter().map(|n| col.get(n).copied()).collect();
        sets.iter()
            .map(|old| {
                let mut t = Vec::new();
                for (o, nr) in new_row.iter().enumerate() {
                    let Some(nr) = nr else { continue };
                    for &(k, x) in old.row(o) {
                        if let Some(nk) = new_col[k as usize] {
                            t.push((*nr, nk, x));
                        }
                    }
                }
                Alloc::from_triples(order.len(), t)
            })
            .collect()
    }

    /// Turns the chosen matrix into concrete GPUs: unchanged rows keep their
    /// GPUs; changed rows take free GPUs node by node (their own first).
    fn assign(
        order: &[&Job],
        nodes: &[&Node],
        p: &Problem,
        genes: &Alloc,
        cluster: &ClusterState,
    ) -> Vec<Demand> {
        let unchanged: Vec<bool> = (0..order.len())
            .map(|j| genes.row(j) == p.current.row(j))
            .collect();
        let mut kept: std::collections::HashSet<GpuId> = std::collections::HashSet::new();
        for (j, job) in order.iter().enumerate() {
            if unchanged[j] {
                kept.extend(job.allocation.iter().copied());
            }
        }
        let mut free: Vec<Vec<GpuId>> = nodes
            .iter()
            .map(|n| {
                n.gpus
                    .iter()
                    .copied()
                    .filter(|g| !kept.contains(g) && cluster.gpu(*g).is_some_and(|x| x.online))
                    .collect()
            })
            .collect();
        let mut out = Vec::new();
        for (j, job) in order.iter().enumerate() {
            if genes.row(j).is_empty() {
                continue;
            }
            let gpus = if unchanged[j] {
                job.allocation.clone()
            } else {
                let mut gpus = Vec::new();
                for &(k, want) in genes.row(j) {
                    let free_k = &mut free[k as usize];
                    // Prefer the job's own GPUs on this node.
                    free_k.sort_by_key(|g| (!job.allocation.contains(g), *g));
                    let take = (want as usize).min(free_k.len());
                    gpus.extend(free_k.drain(..take));
                }
                gpus
            };
            out.push(Demand {
                job: job.id(),
                gpus: gpus.len() as u32,
                batch_size: None,
                gpu_ids: Some(gpus),
                host: None,
            });
        }
        out
    }

    /// The nodes the search sees: the online ones, each split into virtual
    /// nodes of `virtual_node_gpus` GPUs when set (ids in a space of their
    /// own, stable from round to round).
    fn search_nodes(&self, cluster: &ClusterState) -> Vec<Node> {
        let online = cluster
            .nodes()
            .iter()
            .filter(|n| n.online && !n.gpus.is_empty());
        match self.params.virtual_node_gpus {
            None => online.cloned().collect(),
            Some(v) => online
                .flat_map(|n| {
                    n.gpus
                        .chunks(v.max(1) as usize)
                        .enumerate()
                        .map(|(part, gpus)| Node {
                            id: NodeId(n.id.0.saturating_mul(256).saturating_add(part as u32)),
                            spec: n.spec.clone(),
                            gpus: gpus.to_vec(),
                            online: true,
                        })
                        .collect::<Vec<Node>>()
                })
                .collect(),
        }
    }

    /// Keeps a demand's GPUs of its most-used type only (ties: the type
    /// listed first in `type_priority`, then the type's name).
    fn drop_minority(&self, d: &mut Demand, cluster: &ClusterState) {
        let Some(gpus) = d.gpu_ids.as_mut() else {
            return;
        };
        let type_of = |g: &GpuId| {
            cluster
                .gpu(*g)
                .and_then(|x| cluster.node(x.node))
                .map(|n| n.spec.gpu_type.clone())
                .unwrap_or_default()
        };
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for g in gpus.iter() {
            *count.entry(type_of(g)).or_default() += 1;
        }
        if count.len() < 2 {
            return;
        }
        let rank = |t: &String| {
            self.params
                .type_priority
                .iter()
                .position(|x| x == t)
                .unwrap_or(usize::MAX)
        };
        let keep = count
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(rank(b.0).cmp(&rank(a.0))))
            .map(|(t, _)| t.clone())
            .expect("two types or more");
        gpus.retain(|g| type_of(g) == keep);
        d.gpus = gpus.len() as u32;
    }

    /// Auto-scaling (§4.2.2): binary search on the node count for utility
    /// within [low, high], assuming utility falls as nodes are added; the count
    /// whose utility is closest to the middle of the band wins.
    fn autoscale(
        &mut self,
        a: &AutoscaleParams,
        round: &RoundInfo,
        order: &[&Job],
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> u32 {
        let template = cluster
            .nodes()
            .iter()
            .find(|n| n.online)
            .map(|n| n.gpus.len())
            .unwrap_or(4);
        let target = (a.low_util + a.high_util) / 2.0;
        let (mut lo, mut hi) = (a.min_nodes.max(1), a.max_nodes.max(a.min_nodes.max(1)));
        let mut best = (f64::INFINITY, lo);
        let settings = GaSettings {
            generations: (self.params.generations / 4).max(2),
            ..self.settings()
        };
        while lo <= hi {
            let mid = lo + (hi - lo) / 2;
            // A hypothetical cluster of `mid` identical nodes.
            let hypo = ClusterState::homogeneous(mid, template as u32);
            let nodes: Vec<&Node> = hypo.nodes().iter().collect();
            let bare: Vec<Job> = order
                .iter()
                .map(|j| {
                    let mut j = (*j).clone();
                    j.allocation.clear();
                    j
                })
                .collect();
            let bare_refs: Vec<&Job> = bare.iter().collect();
            let p = self.problem(round, &bare_refs, jobs, &nodes);
            let front = ga::solve(&p, vec![p.current.clone()], settings, &mut self.rng);
            let u = ga::pick(&front).map_or(0.0, |i| i.obj.1);
            if (u - target).abs() < best.0 {
                best = ((u - target).abs(), mid);
            }
            if u > a.high_util {
                lo = mid + 1;
            } else if u < a.low_util {
                if mid == 0 {
                    break;
                }
                hi = mid - 1;
            } else {
                break;
            }
        }
        best.1
    }
}

impl SchedulingPolicy for PolluxSched {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        // By GPU time held, start-up included, then arrival: the artifact
        // counts a job's re-scale delay as attained service (simulator.py).
        order.sort_by(|a, b| {
            a.held_service_gpu_s()
                .total_cmp(&b.held_service_gpu_s())
                .then(a.arrival_s().total_cmp(&b.arrival_s()))
                .then(a.id().cmp(&b.id()))
        });
        let owned = self.search_nodes(cluster);
        let nodes: Vec<&Node> = owned.iter().collect();
        if order.is_empty() || nodes.is_empty() {
            return Schedule::default();
        }
        let p = self.problem(round, &order, jobs, &nodes);
        let initial = self.initial(&order, &nodes, &p);
        let mut rng = ChaCha8Rng::seed_from_u64(self.rng.next_u64());
        let front = ga::solve(&p, initial, self.settings(), &mut rng);
        let best = ga::pick(&front)
            .expect("the search keeps at least one individual")
            .clone();
        self.last = Decision {
            desired_nodes: None,
            fitness: best.obj.0,
            utility: best.obj.1,
        };
        self.carried = Some((
            order.iter().map(|j| j.id()).collect(),
            nodes.iter().map(|n| n.id).collect(),
            front.into_iter().map(|i| i.genes).collect(),
        ));
        if let Some(a) = self.params.autoscale.clone() {
            self.last.desired_nodes = Some(self.autoscale(&a, round, &order, jobs, cluster));
        }
        let mut entries = Self::assign(&order, &nodes, &p, &best.genes, cluster);
        if self.params.mixed_types == MixedTypes::DropMinority {
            for d in entries.iter_mut() {
                self.drop_minority(d, cluster);
            }
            entries.retain(|d| d.gpus > 0);
        }
        Schedule {
            min_run_s: None,
            note: None,
            entries,
            desired_nodes: self.last.desired_nodes,
            terminate: Vec::new(),
        }
    }

    /// Pollux resizes jobs and tunes their batch sizes, on any GPU type; a
    /// rigid one-GPU job (ncf, pinned by its agent: `pollux.replica_cap` and
    /// `pollux.fixed_batch`, `pollux-data.md` §6.1) it runs as it is.
    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        let e = &job.elasticity;
        let pinned = e.adaptivity == Adaptivity::Rigid
            && job.requested_gpus == 1
            && e.gpu_types.is_empty()
            && e.replica_gpus.values().all(|u| *u <= 1);
        if pinned {
            return Ok(());
        }
        accepts_resizable(job, "pollux", true)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        vec![metric::POLLUX_AGENT]
    }

    fn requires_placement(&self) -> Option<&'static str> {
        Some("explicit")
    }
}

blox_core::register_scheduling!(
    "pollux",
    "PolluxSched: genetic algorithm over per-node allocations maximising goodput-based speedups (Pollux §4.2); use with `explicit` placement",
    |p| {
        let params = p.parse::<PolluxParams>()?;
        if params.population == 0 || params.generations == 0 {
            return Err(p.error_at("population", "population and generations must be at least 1"));
        }
        if let Some(a) = &params.autoscale {
            if a.min_nodes == 0 || a.max_nodes < a.min_nodes || a.low_util.partial_cmp(&a.high_util) != Some(std::cmp::Ordering::Less) {
                return Err(p.error_at("autoscale", "autoscale needs 1 <= min_nodes <= max_nodes and low_util < high_util"));
            }
        }
        Ok(Box::new(PolluxSched::new(params)))
    }
);

#[cfg(test)]
mod tests;
