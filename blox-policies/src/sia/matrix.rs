//! Sia's normalised goodput matrix `G` (Sia, SOSP'23, §3.2–3.3; the
//! artifact's `sia.py`, `optimize_mip`): one row per job, one column per
//! configuration (GPU type, nodes, GPUs).
//!
//! For an adaptive job, configuration `(t, n, g)` is worth the best goodput of
//! the job's fitted model on type `t` with `g / u_t` replicas (`u_t`: GPUs of
//! one replica, a pipeline's stages) on `n` nodes. Bootstrapping (§3.2): a
//! type the job has not run on borrows the model of the first type it has run
//! on, scaled by the two types' one-replica throughputs, measured when the
//! job was submitted; a job that has run nowhere is worth `u_t` on its
//! smallest configuration of every type and nothing elsewhere. Configurations
//! go up to twice the most replicas profiled (shared by all types, as the
//! artifact runs). The row is divided by its smallest non-zero entry, so the
//! smallest configuration of the job's least useful type is worth 1 (`u_t`
//! for a pipeline). A rigid job is worth its throughput at its requested
//! count on each type, the slowest normalised to its GPU count.

use super::Configs;
use blox_core::{Adaptivity, Job, JobState};
use blox_goodput::model::BatchSearch;
use blox_goodput::{AgentReport, AppLimits, GoodputModel, TypedKeys};

/// The value of a configuration a job cannot use.
pub const ZERO_ALLOC_GAIN: f64 = 1e-4;

/// What Sia knows about a job on one GPU type.
#[derive(Clone, Debug)]
pub struct OnType {
    /// Its fitted model there, if it has run there.
    pub model: Option<GoodputModel>,
    /// Most replicas it has run with there.
    pub max_profiled: u32,
    /// Samples per second of one replica (bootstrapping).
    pub xput1: f64,
    /// GPUs of one replica (a pipeline's stages).
    pub unit: u32,
    /// Micro-batches of a pipeline replica.
    pub microbatches: u32,
    /// Atomic batch limits there.
    pub bmin: u32,
    pub allowed: bool,
    /// Throughput at its requested GPUs and batch (rigid jobs).
    pub rigid_xput: f64,
}

/// One job's normalised row.
#[derive(Clone, Debug, PartialEq)]
pub enum Row {
    /// A value per configuration of [`Configs`].
    Adaptive(Vec<f64>),
    /// A rigid job: its GPU count, and a value per GPU type (0: not there).
    Rigid { gpus: u32, per_type: Vec<f64> },
}

/// The metric names Sia reads for one GPU type, formatted once (the policy
/// keeps them while the cluster's types stay the same).
#[derive(Clone, Debug, PartialEq)]
pub struct TypeKeys {
    pub name: String,
    /// GPUs per node of the type.
    pub gpus_per_node: u32,
    fit: TypedKeys,
    bmin: String,
    bmax: String,
    xput1: String,
    microbatches: String,
    rigid_xput: String,
    speed: String,
}

impl TypeKeys {
    pub fn new(name: &str, gpus_per_node: u32) -> Self {
        TypeKeys {
            name: name.to_string(),
            gpus_per_node,
            fit: TypedKeys::new(name),
            bmin: format!("type.{name}.bmin"),
            bmax: format!("type.{name}.bmax"),
            xput1: format!("type.{name}.xput1"),
            microbatches: format!("type.{name}.microbatches"),
            rigid_xput: format!("type.{name}.rigid_xput"),
            speed: format!("speed.{name}"),
        }
    }
}

/// What Sia reads about a job: its agent's report (read once, shared by
/// [`job_on_types`] and [`row`]).
pub fn report_of(job: &Job, jobs: &JobState) -> Option<AgentReport> {
    AgentReport::from_metrics(|k| jobs.metrics().get(job.id(), k))
}

/// What Sia knows about a job on each GPU type: its agent's fits per type,
/// the profile it was submitted with, and its constraints.
pub fn job_on_types(
    job: &Job,
    jobs: &JobState,
    report: Option<&AgentReport>,
    types: &[TypeKeys],
) -> Vec<OnType> {
    let get = |k: &str| jobs.metrics().get(job.id(), k);
    let grad = report.and_then(|r| r.grad);
    let target = job
        .spec
        .batch_size
        .or(report.map(|r| r.limits.mmax))
        .unwrap_or(0);
    let e = &job.spec.elasticity;
    // An agent that tells types apart reports `pollux.<type>.*` for every
    // type it ran on; one that does not (a homogeneous cluster) has one fit,
    // which then stands for every type.
    let typed_agent = types.iter().any(|k| get(k.fit.max_profiled()).is_some());
    types
        .iter()
        .map(|k| {
            let t = k.name.as_str();
            let (mut params, mut max_profiled) = k.fit.fit(get);
            if !typed_agent {
                if let Some(r) = report {
                    params = r.params;
                    max_profiled = r.max_profiled_replicas;
                }
            }
            let base = report.map(|r| r.limits);
            let bmin = get(&k.bmin)
                .map(|v| v as u32)
                .or(base.map(|l| l.bmin))
                .unwrap_or(1);
            let bmax = get(&k.bmax)
                .map(|v| v as u32)
                .or(base.map(|l| l.bmax))
                .unwrap_or(u32::MAX);
            let model = match (params, grad, base) {
                (Some(params), Some(grad), Some(l)) => Some(GoodputModel {
                    params,
                    grad,
                    limits: AppLimits {
                        m0: l.m0,
                        mmax: target.max(1),
                        bmin,
                        bmax,
                    },
                }),
                _ => None,
            };
            let speed = get(&k.speed).filter(|v| *v > 0.0);
            OnType {
                model,
                max_profiled,
                xput1: get(&k.xput1).or(speed).unwrap_or(1.0),
                unit: e.replica_gpus_on(t),
                microbatches: get(&k.microbatches).map_or(1, |v| v as u32),
                bmin: bmin.max(1),
                allowed: e.allows_type(t),
                rigid_xput: get(&k.rigid_xput).or(speed).unwrap_or(1.0),
            }
        })
        .collect()
}

/// Settings of a row that are the policy's.
#[derive(Clone, Copy, Debug)]
pub struct RowRules {
    pub project: bool,
    pub share_max_replicas: bool,
    pub max_gpus: u32,
}

/// The unnormalised-then-normalised row of `job` (see the module docs).
pub fn row(
    job: &Job,
    report: Option<&AgentReport>,
    on: &[OnType],
    configs: &Configs,
    rules: RowRules,
) -> Row {
    let e = &job.spec.elasticity;
    let nc = configs.list.len();
    if e.adaptivity == Adaptivity::Rigid {
        return rigid_row(job, on, configs);
    }
    let mmax = report.map(|r| r.limits.mmax);
    let tune = e.adaptivity == Adaptivity::Adaptive;
    let target = job.spec.batch_size.or(mmax).unwrap_or(u32::MAX) as f64;
    // max_replicas per type: min(max(2·R_prof, 1), cap, ⌊Mmax/bmin⌋).
    let per_type_max: Vec<u32> = on
        .iter()
        .map(|o| {
            if e.adaptivity == Adaptivity::StrongScaling {
                return job.requested_gpus().div_ceil(o.unit).max(1);
            }
            let by_batch = mmax.map_or(u32::MAX, |m| (m / o.bmin).max(1));
            (2 * o.max_profiled)
                .max(1)
                .min(rules.max_gpus)
                .min(by_batch)
        })
        .collect();
    let shared_max = per_type_max.iter().copied().max().unwrap_or(1);
    let first_fit = on.iter().position(|o| o.model.is_some());
    let mut values = vec![ZERO_ALLOC_GAIN; nc];
    // Types where the job has no estimate at all: worth `u` on `u` GPUs.
    let mut blank = vec![false; on.len()];
    for (t, o) in on.iter().enumerate() {
        if !o.allowed {
            continue;
        }
        let max_r = if rules.share_max_replicas {
            shared_max
        } else {
            per_type_max[t]
        }
        .max(1);
        let min_r = e.min_gpus.div_ceil(o.unit).max(1);
        // The model to evaluate, and its type's index (itself or projected).
        let source = match (&o.model, first_fit) {
            (Some(_), _) => Some(t),
            (None, Some(d)) if rules.project => Some(d),
            _ => None,
        };
        let Some(d) = source else {
            blank[t] = true;
            continue;
        };
        let mut any = false;
        for &c in &configs.of_type[t] {
            let (_, _, g) = configs.list[c];
            if g > max_r * o.unit || g < min_r * o.unit || !g.is_multiple_of(o.unit) {
                continue;
            }
            let r = g / o.unit;
            let src = &on[d];
            let (n, ratio) = if d == t {
                (configs.list[c].1, 1.0)
            } else {
                // Sia §3.2: the same replicas on the source type, laid out there.
                let per_node = configs.gpus_per_node[d].max(1);
                (
                    (r * src.unit).div_ceil(per_node).max(1),
                    o.xput1 / src.xput1,
                )
            };
            let model = src.model.as_ref().expect("source type has a model");
            let g_value = if src.unit > 1 {
                model.pipeline_goodput(n, r, src.unit, src.microbatches)
            } else if tune {
                model.best(n.min(r), r, BatchSearch::Grid50).goodput
            } else {
                model.at_batch(n.min(r), r, target).goodput
            };
            values[c] = g_value * ratio;
            any = true;
        }
        if !any {
            blank[t] = true;
        }
    }
    normalise(&mut values, on, configs, &blank, e.min_gpus);
    Row::Adaptive(values)
}

/// Divides the row by its smallest non-zero entry (times the GPUs of one
/// replica of the type holding it, or the job's minimum GPU count: Sia §3.3
/// normalises a job needing `N_min` GPUs to a minimum of `N_min`), gives a
/// blank type's smallest usable configuration its GPU count, and floors
/// everything at [`ZERO_ALLOC_GAIN`].
fn normalise(values: &mut [f64], on: &[OnType], configs: &Configs, blank: &[bool], min_gpus: u32) {
    let mut min = f64::INFINITY;
    for (t, cs) in configs.of_type.iter().enumerate() {
        if blank[t] || !on[t].allowed {
            continue;
        }
        for &c in cs {
            if values[c] > ZERO_ALLOC_GAIN {
                min = min.min(values[c]);
            }
        }
    }
    let min = if min.is_finite() { min } else { 1.0 };
    let mut unit = 1;
    for (t, cs) in configs.of_type.iter().enumerate() {
        if !blank[t] && on[t].allowed && cs.iter().any(|&c| values[c] == min) {
            unit = on[t].unit;
        }
    }
    let scale = unit.max(min_gpus) as f64 / min;
    for (t, cs) in configs.of_type.iter().enumerate() {
        for &c in cs {
            values[c] *= scale;
        }
        if blank[t] && on[t].allowed {
            let u = on[t].unit;
            let least = cs
                .iter()
                .map(|&c| (c, configs.list[c].2))
                .find(|&(_, g)| g >= u.max(min_gpus) && g.is_multiple_of(u));
            if let Some((c, g)) = least {
                values[c] = g as f64;
            }
        }
        for &c in cs {
            if values[c] <= ZERO_ALLOC_GAIN || !on[t].allowed {
                values[c] = ZERO_ALLOC_GAIN;
            }
        }
    }
}

/// A rigid job: one value per type, its throughput at its requested count,
/// the slowest type's normalised to the GPU count (`_compute_rigid_job_goodput_single`).
fn rigid_row(job: &Job, on: &[OnType], configs: &Configs) -> Row {
    let g = job.requested_gpus().max(1);
    let fits =
        |t: usize, o: &OnType| o.allowed && g.is_multiple_of(o.unit) && g <= configs.type_gpus[t];
    let min = on
        .iter()
        .enumerate()
        .filter(|(t, o)| fits(*t, o))
        .map(|(_, o)| o.rigid_xput)
        .fold(f64::INFINITY, f64::min);
    let per_type = on
        .iter()
        .enumerate()
        .map(|(t, o)| {
            if fits(t, o) {
                o.rigid_xput * g as f64 / min
            } else {
                0.0
            }
        })
        .collect();
    Row::Rigid { gpus: g, per_type }
}
