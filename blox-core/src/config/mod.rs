//! What a config says, once read: the sections ([`Section`]: a table of
//! [`Value`]s that remembers where each key was written), the `[run]`
//! settings every loop shares, and a module section naming a registered
//! policy with its parameters ([`ModuleConfig`]). Every mistake names the
//! file and line of the key, or the `--set` that put it there.
//!
//! Reading a file (TOML, `--set` overrides, the whole config's sections and
//! the cluster they describe) is the `blox-config` crate's: this module has
//! no file format and does no I/O. A module reads its section with
//! [`Section::parse`] into its own parameter struct.

mod de;
mod number;
mod origin;
mod section;
mod value;

pub use de::ValueError;
pub use number::{NonNegative, Positive};
pub use origin::{KeyLines, Origin};
pub use section::Section;
pub use value::{Table, Value};

use serde::Deserialize;

/// A config problem, with where it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file's syntax, or the file as a whole (the reader's message:
    /// TOML's carries line and column).
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// A field inside a section.
    #[error("{file}:{line}: [{section}] {message}")]
    Field {
        file: String,
        line: usize,
        section: String,
        message: String,
    },
    /// A module name that nothing registered.
    #[error("{at}: [{kind}] unknown {kind} policy `{name}`{}; registered {kind} policies: {known}. A policy from another crate must be linked into the binary that runs it (`use my_policy as _;` in a runner whose main is `blox::main()`; README, \"Writing a policy\")",
        suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownModule {
        /// `file:line`, or the `--set` that named it.
        at: String,
        kind: &'static str,
        name: String,
        known: String,
        /// The registered name closest to `name`, if one is close.
        suggestion: Option<String>,
    },
    /// Modules that each build but do not work together (a joint
    /// scheduling policy with a placement that drops its GPUs).
    #[error("{at}: {message}")]
    Incompatible {
        /// `file:line` of the module named last, or the `--set`.
        at: String,
        message: String,
    },
    /// A `--set`/`--unset` override that cannot apply, or a value it set
    /// that is wrong.
    #[error("{expr}: {message}")]
    Override { expr: String, message: String },
}

/// `[run]`: settings of the loop shared by every backend.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Round length, seconds (Blox uses 300 s; Pollux 60 s).
    #[serde(default = "default_round_s")]
    pub round_s: Positive,
    /// Seed of every random draw (workload generation, randomised policies).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Stop after this much (simulated or wall) time, seconds.
    pub max_time_s: Option<Positive>,
    /// Stop after this many rounds.
    pub max_rounds: Option<u64>,
    /// `[first, last]` job ids (inclusive) over which metrics are computed; the run
    /// stops once all of them have ended while later jobs keep arriving (Blox §6).
    pub track_jobs: Option<[u64; 2]>,
    /// A run stopped by `max_rounds` or `max_time_s` with unfinished jobs is
    /// a warning and a non-zero exit status, unless this is true.
    #[serde(default)]
    pub allow_unfinished: bool,
    /// Start-up-aware preemption: a running job is not preempted or moved
    /// before it has run this long past its first iteration, seconds
    /// (default: half a round); jobs still starting are never preempted.
    pub min_run_s: Option<NonNegative>,
    /// ... and at least this many times its own last start-up (default 1).
    pub min_run_startup_factor: Option<NonNegative>,
    /// Warn about a job stopped before its first iteration this many
    /// launches in a row (default 3; 0: never).
    pub startup_warn_after: Option<u32>,
    /// A job the policies preempt or move before its first iteration this
    /// many rounds in a row is a livelock (default 20; 0: never checked):
    /// a run that fails on invalid decisions (a simulation) stops with an
    /// error naming the policies and the job; one that skips them (a live
    /// scheduler) keeps the job on its GPUs until it starts.
    pub livelock_after: Option<u32>,
    /// A launch still starting after this many seconds may be preempted
    /// like any other (default: 10 rounds, at least 600 s).
    pub max_startup_s: Option<NonNegative>,
    /// Jobs save a checkpoint every this many seconds past their first
    /// iteration, unless they name their own (`checkpoint_interval_s` in a
    /// job's metrics); a stop loses the work since the last one. Unset:
    /// jobs save when they are stopped and lose nothing.
    pub checkpoint_interval_s: Option<Positive>,
    /// Such a job also keeps its GPUs until its first checkpoint of each
    /// launch (default true: every launch saves some work).
    pub min_run_until_checkpoint: Option<bool>,
    /// `"young-daly"`: a job that names no interval of its own checkpoints
    /// every √(2δM) + δ, chosen at each launch from what one checkpoint
    /// costs it (δ, `checkpoint_save_s`) and its mean time to failure M,
    /// the loop's estimate of the per-GPU MTBF over its GPU count (Young,
    /// CACM 1974; Daly, FGCS 2006). Needs `checkpoint_save_s`; replaces
    /// `checkpoint_interval_s`.
    pub checkpoint: Option<CheckpointRule>,
    /// Seconds of a job's time one checkpoint takes (training stalls while
    /// it saves): the simulator charges it, Young/Daly weighs it.
    pub checkpoint_save_s: Option<NonNegative>,
    /// The per-GPU MTBF Young/Daly assumes before any failure is seen,
    /// hours (default 50,700: Llama 3's, `blox_sim`'s `[failures]` docs);
    /// the failures seen then move the estimate.
    pub checkpoint_gpu_mtbf_h: Option<Positive>,
}

/// How jobs that name no checkpoint interval choose one (`[run] checkpoint`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointRule {
    /// `checkpoint_interval_s`, or save only when stopped.
    Fixed,
    /// Young/Daly's interval for the job's size and the failure rate seen.
    YoungDaly,
}

fn default_round_s() -> Positive {
    Positive::of(300.0)
}
fn default_seed() -> u64 {
    1
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            round_s: default_round_s(),
            seed: default_seed(),
            max_time_s: None,
            max_rounds: None,
            track_jobs: None,
            allow_unfinished: false,
            min_run_s: None,
            min_run_startup_factor: None,
            startup_warn_after: None,
            livelock_after: None,
            max_startup_s: None,
            checkpoint_interval_s: None,
            min_run_until_checkpoint: None,
            checkpoint: None,
            checkpoint_save_s: None,
            checkpoint_gpu_mtbf_h: None,
        }
    }
}

impl RunConfig {
    /// Checks across keys (each number's own range is checked as it is
    /// parsed: [`Positive`], [`NonNegative`]).
    pub fn validate(&self, s: &Section) -> Result<(), ConfigError> {
        if let Some([a, b]) = self.track_jobs {
            if a > b {
                return Err(s.error_at(
                    "track_jobs",
                    "track_jobs must be [first, last] with first <= last",
                ));
            }
        }
        if let (Some(every), Some(save)) = (self.checkpoint_interval_s, self.checkpoint_save_s) {
            if save.get() >= every.get() {
                return Err(s.error_at(
                    "checkpoint_save_s",
                    format!(
                        "a checkpoint that takes {} s every {} s leaves no time to train",
                        save.get(),
                        every.get()
                    ),
                ));
            }
        }
        if self.checkpoint == Some(CheckpointRule::YoungDaly) {
            if self.checkpoint_interval_s.is_some() {
                return Err(s.error_at(
                    "checkpoint_interval_s",
                    "`checkpoint = \"young-daly\"` chooses each job's interval: leave out \
                     `checkpoint_interval_s`, or set `checkpoint = \"fixed\"`",
                ));
            }
            if self.checkpoint_save_s.is_none_or(|v| v.get() <= 0.0) {
                return Err(s.error_at(
                    "checkpoint",
                    "`checkpoint = \"young-daly\"` weighs what a checkpoint costs: set \
                     `checkpoint_save_s` (seconds a job stalls to save, > 0)",
                ));
            }
        }
        Ok(())
    }
}

/// A module section: the registered name and its parameters.
#[derive(Clone, Debug)]
pub struct ModuleConfig {
    pub policy: String,
    /// Line of `policy = …`, for messages.
    pub line: usize,
    /// Everything but `policy`: the module's own parameters.
    pub params: Section,
}

impl ModuleConfig {
    /// A module with default parameters, built in code.
    pub fn named(kind: &str, policy: &str) -> Self {
        ModuleConfig {
            policy: policy.into(),
            line: 0,
            params: Section::empty(kind),
        }
    }

    /// Where the policy was named: `file:line`, or the override.
    pub fn location(&self) -> String {
        self.params.location("policy")
    }
}

/// The candidate closest to `name` by edit distance, if it is close enough
/// to be a likely typo.
pub fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(name, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4) && *d < c.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
