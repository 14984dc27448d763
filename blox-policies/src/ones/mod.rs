//! ONES: online evolutionary batch-size scheduling (Bian et al., SC'21).
//!
//! Two readings of the paper, chosen by `variant`:
//!
//! - `"authors"` (default, [`authors`]): the rules of the authors' published
//!   implementation (repository `kurisusnowdeng/ones_sc21`, `src/scheduler.py`
//!   and `src/monitor.py`) wherever the paper leaves them open: a small carried
//!   population, new jobs start at once on one GPU, limits double every few
//!   epochs up to 4× the request, scale-down is a rare brake on the largest
//!   job, the update gate covers only jobs whose placement changes, and idle
//!   GPUs go to new jobs first, then to the least predicted remaining work.
//! - `"paper-literal"` ([`literal`]): the paper's text read literally (σ =
//!   arrival rate applied to every job every epoch, a global update gate,
//!   resume halving every round). Kept so the difference stays measurable
//!   (`docs/RESULTS.md`).
//!
//! Shared parts: the progress predictor ([`predictor`], §3.2.1) and, for the
//! literal variant, the evolutionary search ([`search`], §3.2.2).

pub mod authors;
pub mod literal;
pub mod predictor;
pub mod search;

pub use authors::Ones;
pub use literal::OnesLiteral;

use serde::Deserialize;
use std::path::PathBuf;

/// Which reading of ONES runs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The authors' implementation's rules.
    #[default]
    Authors,
    /// The paper's text read literally.
    PaperLiteral,
}

/// *authors*: the batch a job trains at (`batch`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum BatchRule {
    /// ONES's rule (§3.1 and the authors' code): the submitted per-GPU batch
    /// times the GPUs held, the learning rate scaled with it.
    #[default]
    PerGpu,
    /// The submitted global batch at any GPU count, accumulating where it
    /// does not fit, as the fixed-batch baselines (Optimus, Tiresias) run
    /// jobs. Not ONES's rule: kept to measure what its batch rule costs
    /// (`docs/RESULTS.md`, "ONES against its paper").
    Submitted,
}

/// `[scheduling] policy = "ones"` parameters. Keys marked *authors* or
/// *literal* apply to that variant only; setting one for the other is an error.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnesParams {
    #[serde(default)]
    pub variant: Variant,
    /// Population size K; default 8 (authors' `population_size`), or the
    /// number of GPUs for the literal variant.
    #[serde(default)]
    pub population: Option<usize>,
    /// Generations evolved per round; default 10 (authors: one per second of
    /// a continuous loop) or 3 (literal).
    #[serde(default)]
    pub generations: Option<usize>,
    /// Mutation rate θ: each job of a candidate is dropped with this
    /// probability.
    #[serde(default = "d_mutation")]
    pub mutation_rate: f64,
    /// *authors*: crossover probability ξ per GPU (default 0.5).
    #[serde(default)]
    pub crossover: Option<f64>,
    /// Most points kept in the predictor's training set.
    #[serde(default = "d_history")]
    pub history: usize,
    /// *authors*: a history of completed jobs that warm-starts the predictor
    /// (as the authors' `traces/job_history.csv`), relative to the config:
    /// CSV `job,epoch,epoch_size,total_epochs[,initial_loss,loss,val_metric]`,
    /// one row per finished epoch.
    #[serde(default)]
    pub history_file: Option<PathBuf>,
    /// Epochs a job must finish between two changes of its placement
    /// (authors' `update_interval`; literal: every running job, globally).
    #[serde(default = "d_one")]
    pub update_after_epochs: f64,
    /// *authors*: epochs before a job is *executed*: predicted, scaled,
    /// mutated (authors' `num_epochs_before_next_scaling`, default 3).
    #[serde(default)]
    pub warmup_epochs: Option<f64>,
    /// *authors*: or seconds of run time, whichever comes first (default 600;
    /// an epoch of a full-size dataset on one GPU can take hours).
    #[serde(default)]
    pub warmup_s: Option<f64>,
    /// *authors*: scale-down factor of the largest job (default 0.5).
    #[serde(default)]
    pub scale_down_factor: Option<f64>,
    /// *authors*: limits grow to at most this many times the requested GPUs
    /// (default 4).
    #[serde(default)]
    pub max_scale_factor: Option<u32>,
    /// *authors*: the batch a job trains at (default `"per-gpu"`; see
    /// [`BatchRule`]).
    #[serde(default)]
    pub batch: Option<BatchRule>,
    /// *authors*: while the update gate holds the best candidate back, GPUs
    /// still idle go to waiting jobs as padding would give them (default
    /// `true`). The authors' loop reacts within a second and has no such
    /// rule; a round here is 30–60 s. `false` leaves them idle until the
    /// gate opens, to measure the rule.
    #[serde(default)]
    pub pad_while_gated: Option<bool>,
    /// *literal*: σ of the scale-down rule, per second; default: the measured
    /// arrival rate.
    #[serde(default)]
    pub sigma_per_s: Option<f64>,
    /// Seed of ONES's own random choices; default: `[run] seed`.
    #[serde(default)]
    pub seed: Option<u64>,
}

impl Default for OnesParams {
    fn default() -> Self {
        OnesParams {
            variant: Variant::Authors,
            population: None,
            generations: None,
            mutation_rate: d_mutation(),
            crossover: None,
            history: d_history(),
            history_file: None,
            update_after_epochs: d_one(),
            warmup_epochs: None,
            warmup_s: None,
            scale_down_factor: None,
            max_scale_factor: None,
            batch: None,
            pad_while_gated: None,
            sigma_per_s: None,
            seed: None,
        }
    }
}

fn d_mutation() -> f64 {
    0.1
}
fn d_history() -> usize {
    2000
}
fn d_one() -> f64 {
    1.0
}

impl OnesParams {
    /// The seed in effect: set, else `[run] seed`, else 1.
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(1)
    }

    /// The first key set that the chosen variant does not use.
    fn foreign_key(&self) -> Option<&'static str> {
        match self.variant {
            Variant::Authors => self.sigma_per_s.is_some().then_some("sigma_per_s"),
            Variant::PaperLiteral => [
                ("crossover", self.crossover.is_some()),
                ("history_file", self.history_file.is_some()),
                ("warmup_epochs", self.warmup_epochs.is_some()),
                ("warmup_s", self.warmup_s.is_some()),
                ("scale_down_factor", self.scale_down_factor.is_some()),
                ("max_scale_factor", self.max_scale_factor.is_some()),
                ("batch", self.batch.is_some()),
                ("pad_while_gated", self.pad_while_gated.is_some()),
            ]
            .into_iter()
            .find(|(_, set)| *set)
            .map(|(k, _)| k),
        }
    }
}

blox_core::register_scheduling!(
    "ones",
    "ONES: online evolutionary search over GPU allocations with Beta-sampled remaining work and elastic batch sizes (SC'21); `variant = \"authors\"` (default, the authors' code) or `\"paper-literal\"`; use with `explicit` placement",
    |p| {
        let mut params = p.parse::<OnesParams>()?;
        params.seed = params.seed.or(p.run_seed());
        if let Some(k) = params.foreign_key() {
            let v = match params.variant {
                Variant::Authors => "paper-literal",
                Variant::PaperLiteral => "authors",
            };
            return Err(p.error_at(k, format!("`{k}` applies only to `variant = \"{v}\"`")));
        }
        if params.generations == Some(0) || params.population.is_some_and(|k| k < 2) {
            return Err(p.error_at("population", "population must be at least 2 and generations at least 1"));
        }
        for (k, v) in [("mutation_rate", Some(params.mutation_rate)), ("crossover", params.crossover)] {
            if v.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
                return Err(p.error_at(k, format!("{k} must be within 0..=1")));
            }
        }
        for (k, v) in [
            ("update_after_epochs", Some(params.update_after_epochs)),
            ("sigma_per_s", params.sigma_per_s),
            ("warmup_epochs", params.warmup_epochs),
            ("warmup_s", params.warmup_s),
            ("scale_down_factor", params.scale_down_factor),
        ] {
            if v.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
                return Err(p.error_at(k, format!("{k} must be a finite number, not negative")));
            }
        }
        if params.max_scale_factor == Some(0) {
            return Err(p.error_at("max_scale_factor", "max_scale_factor must be at least 1"));
        }
        Ok(match params.variant {
            Variant::PaperLiteral => Box::new(OnesLiteral::new(params)),
            Variant::Authors => {
                if let Some(f) = &params.history_file {
                    params.history_file = Some(p.resolve_path(f));
                }
                let ones = Ones::new(params).map_err(|e| p.error_at("history_file", e))?;
                Box::new(ones)
            }
        })
    }
);
