//! Sia (Jayaram Subramanya et al., SOSP'23): heterogeneity-aware,
//! goodput-optimised scheduling. Every round, for every job and every
//! configuration (GPU type, nodes, GPUs) of the cluster ([`configs`]):
//!
//! 1. `G_ij`: the job's goodput there, from its fitted model on that type or
//!    bootstrapped from another type, the row divided by its minimum (§3.2,
//!    [`matrix`]);
//! 2. re-allocation factor `r_i = (T_i − N_i·S_i)/(T_i + S_i)` (Eq. 2; age
//!    `T_i`, restarts `N_i`, the model's restart penalty `S_i`) on every
//!    configuration but the one the job holds, for jobs that hold one
//!    ([`restart`]);
//! 3. fairness power: `A = round(G^p, 2)`, clipped at 3000 ([`program`]);
//! 4. choose at most one configuration per job within each type's GPUs to
//!    minimise `Σ A·X + λ_n·(jobs − Σ X)` for `p < 0` (maximise for `p > 0`)
//!    (Eq. 1, [`solve`]); a job in checkpoint-restore keeps its configuration;
//! 5. place the chosen configurations on GPUs: with `[placement] policy =
//!    "explicit"`, as the artifact's physical-cluster scheduler does
//!    ([`placement`]); with `"sia-artifact"`, as its simulator does
//!    ([`artifact_layout`]).
//!
//! Defaults are the artifact's run (`run_experiment.sh`): `p = −0.5`,
//! `λ_n = 1.1`, 60 s rounds (the config's), projected throughputs and replica
//! limits shared across types ([`params`]). Where the paper and `sia.py`
//! differ this follows the code: `p = −0.5` (paper: 0.5 by default); the
//! restart penalty by model (`get_restart_penalty`); `λ_a` (change-of-
//! allocation penalty) is an argument of the artifact that its objective
//! never uses, so it has no key here. A joint scheduling + placement module:
//! pair it with `explicit` placement. Jobs of every [`blox_core::Adaptivity`]
//! are scheduled within their constraints.
//!
//! The search stops on a node budget, so a simulation is a function of its
//! inputs; only a live scheduler (`RoundInfo::wall_clock`) adds the
//! wall-clock `solver_time_limit_s` as a safeguard.

pub mod artifact_layout;
pub mod configs;
pub mod matrix;
pub mod params;
pub mod placement;
pub mod program;
pub mod restart;
pub mod solve;

use blox_core::*;
pub use configs::Configs;
use matrix::{RowRules, TypeKeys};
pub use params::SiaParams;
use program::{JobRow, Objective};
use restart::{History, Kind};
use std::collections::HashMap;
use std::time::{Duration, Instant};

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
    /// Chosen jobs the placement found no room for (they wait this round).
    pub left_out: usize,
    /// Jobs the artifact's layout could not give their shape (`sia-artifact`
    /// only; see [`artifact_layout`]).
    pub reshaped: usize,
    /// Seconds to build the matrix, and to solve.
    pub build_s: f64,
    pub solve_s: f64,
}

#[derive(Clone)]
pub struct Sia {
    pub params: SiaParams,
    pub last: SiaDecision,
    /// (model, type) pairs already reported as estimated from another type.
    projected: std::collections::HashSet<(String, String)>,
    /// Metric names per GPU type, for the types of the last round.
    keys: Vec<TypeKeys>,
    /// How chosen configurations become GPUs: the placement policy paired
    /// with it ([`SchedulingPolicy::pair_with_placement`]).
    layout: Layout,
    /// The artifact's record of each job's type and shape (`sia-artifact`).
    shapes: artifact_layout::Shapes,
}

/// Step 5's rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// `explicit`: the artifact's physical-cluster scheduler's
    /// (`alloc_to_placement_smart`, [`placement`]).
    #[default]
    Smart,
    /// `sia-artifact`: the artifact's simulator's
    /// (`alloc_to_placement_fast`, [`artifact_layout`]).
    Artifact,
}

impl Sia {
    pub fn new(params: SiaParams) -> Self {
        Sia {
            params,
            last: SiaDecision::default(),
            projected: Default::default(),
            keys: Vec::new(),
            layout: Layout::Smart,
            shapes: Default::default(),
        }
    }

    /// Step 5's rule (as `pair_with_placement` sets it).
    pub fn layout(&self) -> Layout {
        self.layout
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

    /// The metric names of the cluster's types, formatted when they change.
    fn refresh_keys(&mut self, configs: &Configs) {
        let same = self.keys.len() == configs.types.len()
            && self
                .keys
                .iter()
                .zip(configs.types.iter().zip(&configs.gpus_per_node))
                .all(|(k, (t, g))| k.name == *t && k.gpus_per_node == *g);
        if !same {
            self.keys = configs
                .types
                .iter()
                .zip(&configs.gpus_per_node)
                .map(|(t, g)| TypeKeys::new(t, *g))
                .collect();
        }
    }

    /// Steps 1–2: each job's row, what it holds and its history.
    fn rows(
        &mut self,
        round: &RoundInfo,
        order: &[&Job],
        jobs: &JobState,
        cluster: &ClusterState,
        configs: &Configs,
    ) -> Vec<JobRow> {
        let rules = RowRules {
            project: self.params.project_throughputs,
            share_max_replicas: self.params.share_max_replicas,
            max_gpus: self.params.max_gpus,
        };
        let mut rows = Vec::with_capacity(order.len());
        for job in order {
            let report = matrix::report_of(job, jobs);
            let on = matrix::job_on_types(job, jobs, report.as_ref(), &self.keys);
            self.report_projections(job, &on, &configs.types);
            let row = matrix::row(job, report.as_ref(), &on, configs, rules);
            let kind = match row {
                matrix::Row::Adaptive(_) => Kind::Adaptive,
                matrix::Row::Rigid { .. } => Kind::Rigid,
            };
            let holds = job.is_running() && !job.allocation.is_empty();
            let r = JobRow {
                row,
                holds,
                holding: Self::holding(job, cluster, configs),
                history: History {
                    kind,
                    age_s: round.now_s - job.arrival_s(),
                    restarts: job.launches.saturating_sub(1),
                    penalty_s: self.params.penalty_of(job.spec.model.as_deref()),
                    service_gpu_s: job.held_service_gpu_s(),
                },
                restoring: job.is_starting(),
            };
            tracing::trace!(job = %job.id(), row = ?r.row, holds, factor = restart::factor(&r.history), "sia row");
            rows.push(r);
        }
        rows
    }

    /// Step 4's budgets: nodes always (at most `solver_max_nodes`, and
    /// `solver_work` over the program's candidates); the wall clock on a
    /// live scheduler.
    fn limits(&self, round: &RoundInfo, program: &solve::Program) -> solve::Limits {
        let by_work = (self.params.solver_work / program.candidates.len().max(1) as f64) as usize;
        solve::Limits {
            deadline: round
                .wall_clock
                .then(|| Instant::now() + Duration::from_secs_f64(self.params.solver_time_limit_s)),
            rel_gap: self.params.solver_gap,
            max_nodes: self.params.solver_max_nodes.min(by_work.max(1)),
        }
    }

    /// Why a solved program's schedule is not used, if it is not: a budget
    /// stopped the search further than `solver_accept_gap` from the bound.
    fn refused(&self, solved: &solve::Solved, gap: f64, candidates: usize) -> Option<String> {
        if solved.proven || gap <= self.params.solver_accept_gap {
            return None;
        }
        let budget = match solved.stopped {
            Some(solve::Stop::Deadline) => format!(
                "its wall-clock limit (solver_time_limit_s = {} s, live only)",
                self.params.solver_time_limit_s
            ),
            _ => format!(
                "its node budget (solver_max_nodes = {}, solver_work = {} over {} candidates)",
                self.params.solver_max_nodes, self.params.solver_work, candidates
            ),
        };
        Some(format!(
            "sia: the solver stopped at {budget} after {} nodes with its best schedule {:.3} % below the bound (objective {:.3}, bound {:.3}; solver_accept_gap {} %); every job keeps its allocation",
            solved.nodes,
            gap * 100.0,
            solved.objective,
            solved.bound,
            self.params.solver_accept_gap * 100.0
        ))
    }

    /// Step 5: each type's chosen configurations onto GPUs. Returns the
    /// GPUs of each placed job, the jobs left out with their counts, and the
    /// jobs reshaped.
    fn place(
        &mut self,
        program: &solve::Program,
        solved: &solve::Solved,
        order: &[&Job],
        rows: &[JobRow],
        cluster: &ClusterState,
        configs: &Configs,
    ) -> (placement::Placed, usize) {
        let mut wants: Vec<Vec<placement::Want>> = vec![Vec::new(); configs.types.len()];
        // The artifact lists jobs of fixed size before adaptive ones.
        let mut listed: Vec<usize> = (0..order.len()).collect();
        if self.layout == Layout::Artifact {
            listed.sort_by_key(|&i| rows[i].history.kind != Kind::Rigid);
        }
        for i in listed {
            if let Some(c) = solved.chosen[i] {
                let (t, gpus) = program.configs[c as usize];
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
        let mut all = placement::Placed::default();
        let mut reshaped = 0;
        let mut shapes = artifact_layout::Shapes::new();
        for (t, w) in wants.iter().enumerate() {
            let p = match self.layout {
                Layout::Smart => placement::place_type(cluster, &configs.nodes[t], w, &current),
                Layout::Artifact => {
                    let max_nodes = self.params.max_nodes.get(&configs.types[t]).copied();
                    let laid = artifact_layout::place_type(
                        cluster,
                        t,
                        &configs.nodes[t],
                        max_nodes,
                        w,
                        &current,
                        &self.shapes,
                    );
                    for j in &laid.reshaped {
                        tracing::debug!(job = %j, "sia-artifact: no nodes with room for the job's shape this round; it takes its GPUs where most are free");
                    }
                    reshaped += laid.reshaped.len();
                    shapes.extend(laid.shapes.into_iter().map(|(j, s)| (j, (t, s))));
                    laid.placed
                }
            };
            all.gpus.extend(p.gpus);
            all.left_out.extend(p.left_out);
        }
        // A job not placed this round is suspended: its shape is forgotten.
        self.shapes = shapes;
        (all, reshaped)
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

    /// Keeps every running job where it is (a round whose program failed
    /// or whose search ran out of budget), saying why in the round's note.
    fn keep_all(jobs: &JobState, note: String) -> Schedule {
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
            note: Some(note),
            ..Schedule::default()
        }
    }
}

impl SchedulingPolicy for Sia {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let t0 = Instant::now();
        let configs = Configs::of(cluster, self.params.max_gpus, &self.params.max_nodes);
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
        self.refresh_keys(&configs);
        // Steps 1–3: rows, re-allocation factors, values.
        let rows = self.rows(round, &order, jobs, cluster, &configs);
        let objective = Objective {
            p: self.params.p,
            lambda_n: self.params.lambda_n(),
            clip: self.params.clip,
        };
        let program = program::build(&rows, &configs, objective, self.params.hold_restoring);
        let built = t0.elapsed().as_secs_f64();
        // Step 4: the program.
        let t1 = Instant::now();
        let solved = match solve::solve(&program, self.limits(round, &program)) {
            Ok(s) => s,
            Err(e) => {
                let note = format!("sia: {e}; every job keeps its allocation");
                tracing::warn!("round {}: {note}", round.round);
                return Self::keep_all(jobs, note);
            }
        };
        let gap = if solved.proven {
            0.0
        } else {
            (solved.bound - solved.objective).max(0.0) / solved.bound.abs().max(1e-9)
        };
        if let Some(note) = self.refused(&solved, gap, program.candidates.len()) {
            tracing::warn!("round {}: {note}", round.round);
            return Self::keep_all(jobs, note);
        }
        if !solved.proven {
            tracing::debug!(
                "sia: round {}: the solver stopped at a budget ({:?}) after {} nodes; its best schedule, within {:.3} % of the optimum, is used",
                round.round,
                solved.stopped,
                solved.nodes,
                gap * 100.0
            );
        }
        let solve_s = t1.elapsed().as_secs_f64();
        // Step 5: placement.
        let (mut placed, reshaped) =
            self.place(&program, &solved, &order, &rows, cluster, &configs);
        let mut note = (!placed.left_out.is_empty()).then(|| {
            let list: Vec<String> = placed
                .left_out
                .iter()
                .map(|(j, g)| format!("{j} ({g} GPUs)"))
                .collect();
            let note = format!(
                "sia: {} chosen job(s) found no room on their GPU type and wait this round: {}",
                list.len(),
                list.join(", ")
            );
            tracing::warn!("round {}: {note}", round.round);
            note
        });
        if reshaped > 0 {
            let more = format!(
                "sia-artifact: {reshaped} job(s) found no nodes with room for their shape and took their GPUs where most were free"
            );
            tracing::debug!("round {}: {more}", round.round);
            note = Some(match note {
                Some(n) => format!("{n}; {more}"),
                None => more,
            });
        }
        tracing::debug!(
            round = round.round,
            jobs = order.len(),
            candidates = program.candidates.len(),
            nodes = solved.nodes,
            proven = solved.proven,
            build_s = built,
            solve_s,
            place_s = t1.elapsed().as_secs_f64() - solve_s,
            "sia decision"
        );
        self.last = SiaDecision {
            jobs: order.len(),
            configs: program.configs.len(),
            candidates: program.candidates.len(),
            objective: solved.objective,
            solver_nodes: solved.nodes,
            proven_optimal: solved.proven,
            gap,
            left_out: placed.left_out.len(),
            reshaped,
            build_s: built,
            solve_s,
        };
        Schedule {
            entries: order
                .iter()
                .filter_map(|j| {
                    let gpus = placed.gpus.remove(&j.id())?;
                    Some(Demand {
                        job: j.id(),
                        gpus: gpus.len() as u32,
                        batch_size: None,
                        gpu_ids: Some(gpus),
                        host: None,
                    })
                })
                .collect(),
            note,
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

    /// `explicit` (its own layout) or `sia-artifact` (its artifact
    /// simulator's).
    fn pair_with_placement(&mut self, placement: &str) -> Result<(), String> {
        self.layout = match placement {
            "explicit" => Layout::Smart,
            artifact_layout::NAME => Layout::Artifact,
            _ => {
                return Err(format!(
                    "it would drop the GPUs Sia chooses for each job: it needs `placement.policy = \"explicit\"` (Sia's own layout) or `\"{}\"` (its artifact simulator's)",
                    artifact_layout::NAME
                ))
            }
        };
        Ok(())
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
