//! Sia (Jayaram Subramanya et al., SOSP'23): heterogeneity-aware,
//! goodput-optimised scheduling. Every round, for every job and every
//! configuration (GPU type, nodes, GPUs) of the cluster:
//!
//! 1. `G_ij`: the job's goodput there, from its fitted model on that type or
//!    bootstrapped from another type, the row divided by its minimum (§3.2,
//!    [`matrix`]);
//! 2. re-allocation factor `r_i = (T_i − N_i·S_i)/(T_i + S_i)` (Eq. 2; age
//!    `T_i`, restarts `N_i`, the model's restart penalty `S_i`; 1 while
//!    `T_i < S_i`) on every configuration but the job's current one;
//! 3. fairness power: `A = round(G^p, 2)`, clipped at 3000;
//! 4. choose at most one configuration per job within each type's GPUs to
//!    minimise `Σ A·X + λ_n·(jobs − Σ X)` for `p < 0` (maximise for `p > 0`)
//!    (Eq. 1, [`solve`]); a job in checkpoint-restore keeps its configuration;
//! 5. place the chosen configurations on GPUs ([`placement`]).
//!
//! Defaults are the artifact's run (`run_experiment.sh`): `p = −0.5`,
//! `λ_n = 1.1`, 60 s rounds (the config's), projected throughputs and replica
//! limits shared across types. Where the paper and `sia.py` differ this
//! follows the code: `p = −0.5` (paper: 0.5 by default); the restart penalty
//! by model (`get_restart_penalty`); `λ_a` (change-of-allocation penalty) is an
//! argument of the artifact that its objective never uses, so it has no key
//! here. A joint scheduling + placement module: pair it with `explicit`
//! placement. Jobs of every [`blox_core::Adaptivity`] are scheduled within
//! their constraints.

pub mod matrix;
pub mod placement;
pub mod solve;

use blox_core::*;
use matrix::{Row, RowRules};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// `[scheduling] policy = "sia"` parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiaParams {
    /// Fairness power `p` (≠ 0).
    #[serde(default = "d_p")]
    pub p: f64,
    /// `λ_n`: the penalty of a job left without a configuration.
    #[serde(default = "d_lambda_n")]
    pub lambda_n: f64,
    /// Restart penalty `S_i` by model, seconds (`sia.py`'s table);
    /// `restart_penalty_s` for the others.
    #[serde(default = "d_penalties")]
    pub model_restart_penalty_s: BTreeMap<String, f64>,
    #[serde(default = "d_penalty")]
    pub restart_penalty_s: f64,
    /// Bootstrapping: estimate a type a job has not run on from a type it has
    /// (`--project_throughputs`).
    #[serde(default = "yes")]
    pub project_throughputs: bool,
    /// Replica limits shared by all types (`--share_max_replicas`).
    #[serde(default = "yes")]
    pub share_max_replicas: bool,
    /// Most GPUs of one configuration (64 in the artifact).
    #[serde(default = "d_max_gpus")]
    pub max_gpus: u32,
    /// Most nodes of one configuration, by GPU type (the artifact: the nodes
    /// it profiled, `cluster_max_physical_nnodes`); unlisted types: all.
    #[serde(default)]
    pub max_nodes: BTreeMap<String, u32>,
    /// Clip of `G^p` (the artifact's `sia_goodput_clip_val`).
    #[serde(default = "d_clip")]
    pub clip: f64,
    /// A job still restoring its checkpoint keeps its configuration
    /// (`preserve_ckpt_allocs`).
    #[serde(default = "yes")]
    pub hold_restoring: bool,
    /// The solver stops within this relative gap of the optimum (CBC's
    /// `allowablePercentageGap` of 0.01 % in the artifact) …
    #[serde(default = "d_gap")]
    pub solver_gap: f64,
    /// … or after this long (the artifact sets no limit: CBC runs to the
    /// gap). Stopped there, its best schedule is used if it is proven within
    /// `solver_accept_gap` of the optimum; otherwise every job keeps its
    /// allocation and the log says why.
    #[serde(default = "d_time")]
    pub solver_time_limit_s: f64,
    /// The largest relative gap (bound − best) / bound at which a schedule
    /// found before the time limit is still used.
    #[serde(default = "d_accept_gap")]
    pub solver_accept_gap: f64,
}

fn d_p() -> f64 {
    -0.5
}
fn d_lambda_n() -> f64 {
    1.1
}
fn d_penalty() -> f64 {
    30.0
}
fn d_penalties() -> BTreeMap<String, f64> {
    [
        ("deepspeech2", 25.0),
        ("imagenet", 250.0),
        ("cifar10", 30.0),
        ("bert", 120.0),
        ("yolov3", 45.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}
fn yes() -> bool {
    true
}
fn d_max_gpus() -> u32 {
    64
}
fn d_clip() -> f64 {
    3000.0
}
fn d_gap() -> f64 {
    1e-4
}
fn d_time() -> f64 {
    1.0
}
fn d_accept_gap() -> f64 {
    0.01
}

impl SiaParams {
    fn check(&self) -> Result<(), (&'static str, String)> {
        if self.p == 0.0 || !self.p.is_finite() {
            return Err(("p", "`p` must be a non-zero number".into()));
        }
        if !self.lambda_n.is_finite() {
            return Err(("lambda_n", "`lambda_n` must be a number".into()));
        }
        if self.p < 0.0 && self.lambda_n <= 0.0 {
            return Err((
                "lambda_n",
                format!(
                    "with p = {} < 0, `lambda_n` must be positive (the penalty of a job left out), got {}",
                    self.p, self.lambda_n
                ),
            ));
        }
        let penalties = self
            .model_restart_penalty_s
            .values()
            .chain([&self.restart_penalty_s]);
        for v in penalties {
            if !(v.is_finite() && *v >= 0.0) {
                return Err((
                    "restart_penalty_s",
                    "restart penalties must be non-negative seconds".into(),
                ));
            }
        }
        if self.max_gpus == 0 {
            return Err(("max_gpus", "`max_gpus` must be at least 1".into()));
        }
        if self.clip.is_nan() || self.clip <= 0.0 {
            return Err(("clip", "`clip` must be positive".into()));
        }
        if !(self.solver_gap >= 0.0 && self.solver_gap < 1.0) {
            return Err(("solver_gap", "`solver_gap` must be in [0, 1)".into()));
        }
        if !(self.solver_accept_gap >= 0.0 && self.solver_accept_gap < 1.0) {
            return Err((
                "solver_accept_gap",
                "`solver_accept_gap` must be in [0, 1)".into(),
            ));
        }
        if !(self.solver_time_limit_s > 0.0 && self.solver_time_limit_s <= 3600.0) {
            return Err((
                "solver_time_limit_s",
                "`solver_time_limit_s` must be in (0, 3600]".into(),
            ));
        }
        Ok(())
    }
}

/// The cluster's configurations: `(type, nodes, GPUs)`, by type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Configs {
    pub types: Vec<String>,
    pub list: Vec<(usize, u32, u32)>,
    pub of_type: Vec<Vec<usize>>,
    pub gpus_per_node: Vec<u32>,
    /// Online GPUs of each type.
    pub type_gpus: Vec<u32>,
    /// Online nodes of each type, in id order.
    pub nodes: Vec<Vec<NodeId>>,
}

impl Configs {
    /// Sia §3.2: on `R`-GPU nodes, powers of two below `R` and `R` on one
    /// node, then `n·R` on `n` nodes, up to `max_gpus` GPUs and the type's
    /// node cap. Types in the order their first node appears.
    pub fn of(cluster: &ClusterState, max_gpus: u32, max_nodes: &BTreeMap<String, u32>) -> Self {
        let mut c = Configs::default();
        for n in cluster.nodes().iter().filter(|n| n.online) {
            let online = n
                .gpus
                .iter()
                .filter(|g| cluster.gpu(**g).is_some_and(|x| x.online))
                .count() as u32;
            let t = match c.types.iter().position(|t| *t == n.spec.gpu_type) {
                Some(t) => t,
                None => {
                    c.types.push(n.spec.gpu_type.clone());
                    c.gpus_per_node.push(0);
                    c.type_gpus.push(0);
                    c.nodes.push(Vec::new());
                    c.of_type.push(Vec::new());
                    c.types.len() - 1
                }
            };
            c.gpus_per_node[t] = c.gpus_per_node[t].max(n.gpus.len() as u32);
            c.type_gpus[t] += online;
            c.nodes[t].push(n.id);
        }
        for t in 0..c.types.len() {
            let r = c.gpus_per_node[t];
            let nodes =
                (c.nodes[t].len() as u32).min(*max_nodes.get(&c.types[t]).unwrap_or(&u32::MAX));
            let mut sizes: Vec<(u32, u32)> = Vec::new();
            let mut g = 1;
            while g < r {
                sizes.push((1, g));
                g *= 2;
            }
            for n in 1..=nodes {
                sizes.push((n, n * r));
            }
            for (n, g) in sizes {
                if g <= max_gpus && n <= nodes && g >= 1 {
                    c.of_type[t].push(c.list.len());
                    c.list.push((t, n, g));
                }
            }
        }
        c
    }
}

/// What the last round decided, for reports and `blox bench sia`.
#[derive(Clone, Debug, Default)]
pub struct SiaDecision {
    pub jobs: usize,
    pub configs: usize,
    pub candidates: usize,
    pub objective: f64,
    pub solver_nodes: usize,
    pub proven_optimal: bool,
    /// Relative gap of the schedule used to the solver's bound (0 when
    /// proven within `solver_gap`).
    pub gap: f64,
    /// Seconds to build the matrix, and to solve.
    pub build_s: f64,
    pub solve_s: f64,
}

pub struct Sia {
    pub params: SiaParams,
    pub last: SiaDecision,
    /// (model, type) pairs already reported as estimated from another type.
    projected: std::collections::HashSet<(String, String)>,
}

/// Python's `round(x, 2)` on the value (half to even).
fn round2(x: f64) -> f64 {
    let y = x * 100.0;
    let r = y.round();
    let r = if (y - y.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - y.signum()
    } else {
        r
    };
    r / 100.0
}

impl Sia {
    pub fn new(params: SiaParams) -> Self {
        Sia {
            params,
            last: SiaDecision::default(),
            projected: Default::default(),
        }
    }

    fn penalty(&self, job: &Job) -> f64 {
        job.spec
            .model
            .as_ref()
            .and_then(|m| self.params.model_restart_penalty_s.get(m))
            .copied()
            .unwrap_or(self.params.restart_penalty_s)
    }

    /// The type index and GPU count a running job holds now, if on one type.
    fn holding(job: &Job, cluster: &ClusterState, configs: &Configs) -> Option<(usize, u32)> {
        if !job.is_running() || job.allocation.is_empty() {
            return None;
        }
        let mut t = None;
        for g in &job.allocation {
            let ty = cluster
                .gpu(*g)
                .and_then(|x| cluster.node(x.node))
                .map(|n| n.spec.gpu_type.as_str())?;
            let i = configs.types.iter().position(|x| x == ty)?;
            if t.is_some_and(|t| t != i) {
                return None;
            }
            t = Some(i);
        }
        t.map(|t| (t, job.allocation.len() as u32))
    }

    /// Logs once per (model, GPU type) that the type is estimated from
    /// another (Sia §3.2's bootstrapping), and with what.
    fn report_projections(&mut self, job: &Job, on: &[matrix::OnType], types: &[String]) {
        if !self.params.project_throughputs {
            return;
        }
        let Some(src) = on.iter().position(|o| o.model.is_some()) else {
            return;
        };
        let model = job
            .spec
            .model
            .clone()
            .unwrap_or_else(|| job.spec.name.clone());
        for (t, o) in on.iter().enumerate() {
            if o.model.is_some() || !o.allowed {
                continue;
            }
            if self.projected.insert((model.clone(), types[t].clone())) {
                tracing::info!(
                    "sia: `{model}` has not run on `{}` yet: its goodput there is estimated from `{}` times {:.3} (their one-replica throughputs, {:.1} and {:.1} samples/s)",
                    types[t],
                    types[src],
                    o.xput1 / on[src].xput1,
                    o.xput1,
                    on[src].xput1
                );
            }
        }
    }

    /// Keeps every running job where it is (a round whose program failed).
    fn keep_all(jobs: &JobState) -> Schedule {
        Schedule {
            entries: jobs
                .running()
                .map(|j| Demand {
                    job: j.id(),
                    gpus: j.allocation.len() as u32,
                    batch_size: None,
                    gpu_ids: Some(j.allocation.clone()),
                    host: None,
                })
                .collect(),
            ..Schedule::default()
        }
    }
}

impl SchedulingPolicy for Sia {
    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let t0 = Instant::now();
        let configs = Configs::of(cluster, self.params.max_gpus, &self.params.max_nodes);
        let type_list: Vec<(String, u32)> = configs
            .types
            .iter()
            .cloned()
            .zip(configs.gpus_per_node.iter().copied())
            .collect();
        let mut order: Vec<&Job> = jobs.runnable().collect();
        order.sort_by(|a, b| {
            a.arrival_s()
                .total_cmp(&b.arrival_s())
                .then(a.id().cmp(&b.id()))
        });
        if order.is_empty() || configs.list.is_empty() {
            self.last = SiaDecision::default();
            return Schedule::default();
        }
        let rules = RowRules {
            project: self.params.project_throughputs,
            share_max_replicas: self.params.share_max_replicas,
            max_gpus: self.params.max_gpus,
        };
        // The program: configurations (adaptive ones, then each rigid count
        // per type), candidates and forced choices.
        let mut program = solve::Program {
            jobs: order.len(),
            configs: configs.list.iter().map(|&(t, _, g)| (t, g)).collect(),
            capacity: configs.type_gpus.clone(),
            ..solve::Program::default()
        };
        let mut rigid_config: HashMap<(usize, u32), u32> = HashMap::new();
        let (p, lambda_n, clip) = (self.params.p, self.params.lambda_n, self.params.clip);
        let value = |g: f64| {
            let a = round2(g.powf(p).min(clip));
            if p < 0.0 {
                lambda_n - a
            } else {
                a - lambda_n
            }
        };
        for (i, job) in order.iter().enumerate() {
            let on = matrix::job_on_types(job, jobs, &type_list);
            self.report_projections(job, &on, &configs.types);
            let row = matrix::row(job, jobs, &on, &configs, rules);
            let on_xput: Vec<f64> = on.iter().map(|o| o.xput1).collect();
            let holding = Self::holding(job, cluster, &configs);
            let s = self.penalty(job);
            let age = round.now_s - job.arrival_s();
            let restarts = job.launches.saturating_sub(1) as f64;
            let mut factor = (age - restarts * s).max(0.0) / (age + s);
            let (entries, current): (Vec<(u32, f64)>, Option<u32>) = match row {
                Row::Adaptive(values) => {
                    if age < s {
                        factor = 1.0;
                    }
                    let current = holding.and_then(|(t, g)| {
                        configs.of_type[t]
                            .iter()
                            .find(|&&c| configs.list[c].2 == g)
                            .map(|&c| c as u32)
                    });
                    let e = values
                        .iter()
                        .enumerate()
                        .map(|(c, v)| (c as u32, *v))
                        .collect();
                    (e, current)
                }
                Row::Rigid { gpus, per_type } => {
                    if job.held_service_gpu_s() < s {
                        factor = 1.0;
                    }
                    let mut e = Vec::new();
                    let mut current = None;
                    for (t, v) in per_type.iter().enumerate() {
                        let next = program.configs.len() as u32;
                        let c = *rigid_config.entry((t, gpus)).or_insert(next);
                        if c == next {
                            program.configs.push((t, gpus));
                        }
                        if holding == Some((t, gpus)) {
                            current = Some(c);
                        }
                        if *v > 0.0 {
                            e.push((c, *v));
                        }
                    }
                    (e, current)
                }
            };
            tracing::trace!(job = %job.id(), ?entries, ?current, factor, xput1 = ?on_xput, "sia row");
            for (c, g) in entries {
                let g = if Some(c) == current { g } else { g * factor };
                let v = value(g);
                if v > 0.0 {
                    program.candidates.push((i as u32, c, v));
                }
            }
            if let Some(c) = current {
                if self.params.hold_restoring && job.is_starting() {
                    program.forced.push((i as u32, c));
                }
            }
        }
        let built = t0.elapsed().as_secs_f64();
        let limits = solve::Limits {
            deadline: Instant::now() + Duration::from_secs_f64(self.params.solver_time_limit_s),
            rel_gap: self.params.solver_gap,
            max_nodes: 200_000,
        };
        let t1 = Instant::now();
        let solved = match solve::solve(&program, limits) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(
                    "sia: round {}: {e}; every job keeps its allocation",
                    round.round
                );
                return Self::keep_all(jobs);
            }
        };
        let gap = if solved.proven {
            0.0
        } else {
            (solved.bound - solved.objective).max(0.0) / solved.bound.abs().max(1e-9)
        };
        if !solved.proven && gap > self.params.solver_accept_gap {
            tracing::warn!(
                "sia: round {}: the solver stopped at its time limit ({} s) after {} nodes with its best schedule {:.3} % below the bound (objective {:.3}, bound {:.3}; solver_accept_gap {} %); every job keeps its allocation",
                round.round,
                self.params.solver_time_limit_s,
                solved.nodes,
                gap * 100.0,
                solved.objective,
                solved.bound,
                self.params.solver_accept_gap * 100.0
            );
            return Self::keep_all(jobs);
        }
        if !solved.proven {
            tracing::debug!(
                "sia: round {}: the solver stopped at its time limit ({} s) after {} nodes; its best schedule, within {:.3} % of the optimum, is used",
                round.round,
                self.params.solver_time_limit_s,
                solved.nodes,
                gap * 100.0
            );
        }
        self.last = SiaDecision {
            jobs: order.len(),
            configs: program.configs.len(),
            candidates: program.candidates.len(),
            objective: solved.objective,
            solver_nodes: solved.nodes,
            proven_optimal: solved.proven,
            gap,
            build_s: built,
            solve_s: t1.elapsed().as_secs_f64(),
        };
        // Place each type's chosen configurations.
        let mut wants: Vec<Vec<placement::Want>> = vec![Vec::new(); configs.types.len()];
        for (i, c) in solved.chosen.iter().enumerate() {
            if let Some(c) = c {
                let (t, gpus) = program.configs[*c as usize];
                wants[t].push(placement::Want {
                    job: order[i].id(),
                    gpus,
                });
            }
        }
        let current: HashMap<JobId, Vec<GpuId>> = order
            .iter()
            .filter(|j| j.is_running())
            .map(|j| (j.id(), j.allocation.clone()))
            .collect();
        let mut placed: HashMap<JobId, Vec<GpuId>> = HashMap::new();
        for (t, w) in wants.iter().enumerate() {
            placed.extend(placement::place_type(
                cluster,
                &configs.nodes[t],
                w,
                &current,
            ));
        }
        Schedule {
            entries: order
                .iter()
                .filter_map(|j| {
                    let gpus = placed.remove(&j.id())?;
                    Some(Demand {
                        job: j.id(),
                        gpus: gpus.len() as u32,
                        batch_size: None,
                        gpu_ids: Some(gpus),
                        host: None,
                    })
                })
                .collect(),
            ..Schedule::default()
        }
    }

    /// Sia schedules every kind of job within its constraints.
    fn accepts(&self, _job: &JobSpec) -> Result<(), String> {
        Ok(())
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        vec![metric::POLLUX_AGENT]
    }

    fn requires_placement(&self) -> Option<&'static str> {
        Some("explicit")
    }
}

blox_core::register_scheduling!(
    "sia",
    "Sia (SOSP'23): per-GPU-type goodput, one (type, nodes, GPUs) configuration per job chosen by an integer program each round; use with `explicit` placement",
    |p| {
        let params = p.parse::<SiaParams>()?;
        params.check().map_err(|(k, m)| p.error_at(k, m))?;
        Ok(Box::new(Sia::new(params)))
    }
);

#[cfg(test)]
mod tests;
