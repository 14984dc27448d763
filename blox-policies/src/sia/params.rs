//! `[scheduling] policy = "sia"` parameters, their defaults (the artifact's
//! `run_experiment.sh` run) and the rules that refuse a combination that
//! cannot make progress.

use serde::Deserialize;
use std::collections::BTreeMap;

/// `[scheduling] policy = "sia"` parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiaParams {
    /// Fairness power `p` (≠ 0).
    #[serde(default = "d_p")]
    pub p: f64,
    /// `λ_n`: the penalty of a job left without a configuration. Unset: 1.1
    /// for `p < 0` (`run_experiment.sh`), −1 for `p > 0` (`sia.py`'s value
    /// when none is given). See [`SiaParams::lambda_n`].
    #[serde(default, rename = "lambda_n")]
    pub lambda_n_set: Option<f64>,
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
    /// … or after this many branch-and-bound nodes, or once nodes ×
    /// candidate (job, configuration) pairs reach `solver_work`, whichever
    /// comes first: deterministic budgets, so that a simulation's decisions
    /// do not depend on how fast the machine is. A node's relaxation costs
    /// about its candidates, so `solver_work` bounds the time of a large
    /// cluster's search, `solver_max_nodes` a small one's. Stopped there,
    /// its best schedule is used if it is proven within `solver_accept_gap`
    /// of the optimum; otherwise every job keeps its allocation, and the log
    /// and `rounds.csv` say so.
    #[serde(default = "d_max_nodes")]
    pub solver_max_nodes: usize,
    #[serde(default = "d_work")]
    pub solver_work: f64,
    /// A live scheduler's safeguard only: on a cluster (rounds in real time,
    /// `RoundInfo::wall_clock`), the search also stops after this many
    /// seconds, with the same rule as the node budget. A simulation never
    /// reads a clock.
    #[serde(default = "d_time")]
    pub solver_time_limit_s: f64,
    /// The largest relative gap (bound − best) / bound at which a schedule
    /// found before a budget ran out is still used.
    #[serde(default = "d_accept_gap")]
    pub solver_accept_gap: f64,
}

fn d_p() -> f64 {
    -0.5
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
fn d_max_nodes() -> usize {
    5_000
}
fn d_work() -> f64 {
    1e6
}
fn d_time() -> f64 {
    1.0
}
fn d_accept_gap() -> f64 {
    0.01
}

impl SiaParams {
    /// `λ_n` in force: the configured one, else the artifact's for the sign
    /// of `p`.
    pub fn lambda_n(&self) -> f64 {
        self.lambda_n_set
            .unwrap_or(if self.p < 0.0 { 1.1 } else { -1.0 })
    }

    /// The value of the least configuration of a job after the fairness
    /// power: every row is normalised so that it is worth 1, and `G^p` is
    /// clipped at `clip`.
    fn least_value(&self) -> f64 {
        1f64.min(self.clip)
    }

    /// Checks every parameter and the rule that lets every job make
    /// progress; the error names the key and the rule.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.p == 0.0 || !self.p.is_finite() {
            return Err(("p", "`p` must be a non-zero number".into()));
        }
        if self.clip.is_nan() || self.clip <= 0.0 {
            return Err(("clip", "`clip` must be positive".into()));
        }
        let lambda_n = self.lambda_n();
        if !lambda_n.is_finite() {
            return Err(("lambda_n", "`lambda_n` must be a number".into()));
        }
        // Eq. 1 with the no-allocation term: choosing configuration c is
        // worth λ_n − A_c to a minimisation (p < 0) and A_c − λ_n to a
        // maximisation (p > 0). A job's least configuration is worth
        // A = min(1, clip); if choosing it does not pay, a job that holds
        // nothing is never started and the cluster can stall.
        let a = self.least_value();
        if self.p < 0.0 && lambda_n <= a {
            return Err((
                "lambda_n",
                format!(
                    "with p = {} < 0 the program minimises, and a job's least configuration is worth {a}: `lambda_n` must be above {a} or no new job is ever started (got {lambda_n}; the artifact runs p = -0.5 with lambda_n = 1.1)",
                    self.p
                ),
            ));
        }
        if self.p > 0.0 && lambda_n >= a {
            return Err((
                "lambda_n",
                format!(
                    "with p = {} > 0 the program maximises, and a job's least configuration is worth {a}: `lambda_n` must be below {a} (its sign opposite to p's, as in the artifact, e.g. lambda_n = -1) or no new job is ever started (got {lambda_n})",
                    self.p
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
        if !(self.solver_gap >= 0.0 && self.solver_gap < 1.0) {
            return Err(("solver_gap", "`solver_gap` must be in [0, 1)".into()));
        }
        if !(self.solver_accept_gap >= 0.0 && self.solver_accept_gap < 1.0) {
            return Err((
                "solver_accept_gap",
                "`solver_accept_gap` must be in [0, 1)".into(),
            ));
        }
        if self.solver_max_nodes == 0 || self.solver_max_nodes > 100_000_000 {
            return Err((
                "solver_max_nodes",
                "`solver_max_nodes` must be in [1, 100000000]".into(),
            ));
        }
        if !(self.solver_work.is_finite() && self.solver_work >= 1.0) {
            return Err((
                "solver_work",
                "`solver_work` must be a number of at least 1 (nodes × candidates)".into(),
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

    /// The restart penalty `S_i` of a model (`sia.py`'s
    /// `get_restart_penalty`).
    pub fn penalty_of(&self, model: Option<&str>) -> f64 {
        model
            .and_then(|m| self.model_restart_penalty_s.get(m))
            .copied()
            .unwrap_or(self.restart_penalty_s)
    }
}
