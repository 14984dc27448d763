//! The TOML config: cluster, run settings, and one section per module naming a
//! registered policy and its parameters. Every mistake names the file and
//! line where the key was written (from the TOML parser's spans), or the
//! `--set` that put it there.
//!
//! ```toml
//! [cluster]
//! nodes = 16
//! gpus_per_node = 4
//!
//! [run]
//! round_s = 60
//!
//! [admission]
//! policy = "load-based"
//! k = 1.2            # parameters of that policy, checked by its own struct
//!
//! [scheduling]
//! policy = "las"
//!
//! [placement]
//! policy = "consolidated"
//! ```
//!
//! Sections owned by other crates (`[workload]`, `[sim]`, `[sweep]`,
//! `[synthesizer]`, `[runtime]`) are kept as [`Section`]s and parsed by their
//! owners with the same error positions.

mod cluster;
mod number;
mod section;
mod source;

pub use cluster::{ClusterConfig, NodeGroup, MAX_NODES};
pub use number::{NonNegative, Positive};
pub use section::Section;
pub use source::{KeyLines, Override, SectionSource};

use serde::Deserialize;
use source::Origin;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A config problem, with where it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// TOML syntax, or the file as a whole; toml's message carries line and column.
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
    fn validate(&self, s: &Section) -> Result<(), ConfigError> {
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

/// A whole config file.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the config came from (file path, or a description).
    pub file: String,
    /// Directory that relative paths in the config are resolved against.
    pub base_dir: PathBuf,
    pub cluster: ClusterConfig,
    pub run: RunConfig,
    pub admission: ModuleConfig,
    pub scheduling: ModuleConfig,
    pub placement: ModuleConfig,
    /// The plugins at the loop's other extension points
    /// ([`crate::extension`]): `[protection]` and `[checkpointing]`.
    pub protection: ModuleConfig,
    pub checkpointing: ModuleConfig,
    /// `[recovery]`: what a job a node failure stopped does.
    pub recovery: ModuleConfig,
    /// Every other section, by name (`cluster`, `run`, `workload`, `sim`, …).
    sections: BTreeMap<String, Section>,
}

/// Where the module sections (policies and plugins) sit in [`SECTIONS`].
const MODULE_SECTIONS: std::ops::Range<usize> = 2..8;

/// Sections a config may have: the cluster, the run, the six modules
/// (policies and plugins), then the sections other crates own.
pub const SECTIONS: &[&str] = &[
    "cluster",
    "run",
    "admission",
    "scheduling",
    "placement",
    "protection",
    "checkpointing",
    "recovery",
    "workload",
    "sim",
    "sweep",
    "synthesizer",
    "forecast",
    "runtime",
    "worker",
    "failures",
];

/// What a config is read from: a file's text, plus whole sections supplied
/// from elsewhere and overrides applied in order.
#[derive(Clone, Debug)]
pub struct ConfigInput<'a> {
    pub source: &'a str,
    /// The file's name, as errors should show it.
    pub file: &'a str,
    /// Its folder (relative paths in it resolve against this).
    pub base_dir: &'a Path,
    /// Sections replacing the file's own.
    pub sections: Vec<SectionSource>,
    pub overrides: Vec<Override>,
    /// A missing `[cluster]` is no error (the cluster comes from elsewhere:
    /// a replayed log's nodes); [`Config::has_section`] says it was missing.
    pub cluster_optional: bool,
}

impl<'a> ConfigInput<'a> {
    pub fn new(source: &'a str, file: &'a str, base_dir: &'a Path) -> Self {
        ConfigInput {
            source,
            file,
            base_dir,
            sections: Vec::new(),
            overrides: Vec::new(),
            cluster_optional: false,
        }
    }
}

impl Config {
    /// Parses `source` (the text of `file`), after applying `overrides`
    /// (`("scheduling.policy", "las")`: dotted keys and TOML values; a value
    /// that is not valid TOML is taken as a string; an empty value removes
    /// the key).
    pub fn parse(
        source: &str,
        file: &str,
        base_dir: &Path,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut input = ConfigInput::new(source, file, base_dir);
        input.overrides = overrides.iter().map(|(k, v)| Override::set(k, v)).collect();
        Config::from_input(input)
    }

    /// Reads a config from its parts (see [`ConfigInput`]).
    pub fn from_input(input: ConfigInput<'_>) -> Result<Config, ConfigError> {
        let file = input.file;
        let mut doc: toml::Table =
            toml::from_str(input.source).map_err(|e| ConfigError::Parse {
                file: file.to_string(),
                message: e.to_string().trim_end().to_string(),
            })?;
        let lines = KeyLines::of(input.source);
        let file_arc: Arc<str> = Arc::from(file);
        let mut origins: HashMap<String, (Origin, PathBuf)> = HashMap::new();
        let origin_of = |name: &str| Origin {
            file: file_arc.clone(),
            lines: Arc::new(lines.under(name)),
            header: lines.line(name).unwrap_or(0),
            set: Arc::default(),
            whole: None,
        };
        for s in input.sections {
            doc.insert(s.name.clone(), toml::Value::Table(s.table));
            let o = Origin {
                file: Arc::from(s.file.as_str()),
                lines: Arc::new(s.lines),
                header: s.line,
                set: Arc::default(),
                whole: None,
            };
            origins.insert(s.name.clone(), (o, s.base_dir));
        }
        let mut set: HashMap<String, HashMap<String, String>> = HashMap::new();
        let mut whole: HashMap<String, String> = HashMap::new();
        for o in &input.overrides {
            o.apply(&mut doc)?;
            match o.key.split_once('.') {
                Some((sec, rest)) => {
                    set.entry(sec.to_string())
                        .or_default()
                        .insert(rest.to_string(), o.origin.clone());
                }
                None => {
                    whole.insert(o.key.clone(), o.origin.clone());
                }
            }
        }
        let mut sections: BTreeMap<String, Section> = BTreeMap::new();
        for (key, value) in &doc {
            let (mut origin, base) = origins
                .get(key)
                .cloned()
                .unwrap_or_else(|| (origin_of(key), input.base_dir.to_path_buf()));
            origin.set = Arc::new(set.remove(key).unwrap_or_default());
            origin.whole = whole.remove(key);
            let at = |message: String| -> ConfigError {
                let s = Section::new(key, toml::Table::new(), origin.clone(), None);
                s.error_at("", message)
            };
            if !SECTIONS.contains(&key.as_str()) {
                let near = closest(key, SECTIONS.iter().copied())
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                return Err(at(format!(
                    "unknown section `{key}`{near}; expected one of: {}",
                    SECTIONS.join(", ")
                )));
            }
            let Some(table) = value.as_table() else {
                return Err(at(format!("`{key}` must be a table ([{key}])")));
            };
            sections.insert(
                key.clone(),
                Section::new(key, table.clone(), origin, Some(base)),
            );
        }
        let empty = |name: &str| {
            Section::new(
                name,
                toml::Table::new(),
                Origin {
                    file: file_arc.clone(),
                    set: Arc::new(set.get(name).cloned().unwrap_or_default()),
                    ..Default::default()
                },
                Some(input.base_dir.to_path_buf()),
            )
        };
        // A scheduler's config ([runtime]) may leave the cluster out: the
        // workers that register bring the GPUs.
        let live = sections.contains_key("runtime") || sections.contains_key("worker");
        let cluster = match sections.get("cluster") {
            Some(s) => s.parse::<ClusterConfig>()?,
            None if live || input.cluster_optional => ClusterConfig::default(),
            None => {
                return Err(ConfigError::Parse {
                    file: file.to_string(),
                    message: "missing [cluster] section (e.g. nodes = 16, gpus_per_node = 4)"
                        .into(),
                })
            }
        };
        let run_section = sections.get("run").cloned().unwrap_or_else(|| empty("run"));
        let run: RunConfig = run_section.parse()?;
        run.validate(&run_section)?;
        let module = |name: &str, default: &str| -> Result<ModuleConfig, ConfigError> {
            let mut params = sections
                .get(name)
                .cloned()
                .unwrap_or_else(|| empty(name))
                .with_run_seed(run.seed)
                .with_workload(sections.get("workload").cloned());
            let line = params
                .line_of_key("policy")
                .unwrap_or_else(|| params.header_line());
            let policy = params
                .take_string("policy")?
                .unwrap_or_else(|| default.to_string());
            Ok(ModuleConfig {
                policy,
                line,
                params,
            })
        };
        let admission = module("admission", "accept-all")?;
        let scheduling = module("scheduling", "fifo")?;
        let placement = module("placement", "first-free")?;
        let protection = module("protection", "startup-aware")?;
        let checkpointing = module(
            "checkpointing",
            crate::extension::default_checkpointing(&run),
        )?;
        let recovery = module("recovery", "hot-spares")?;
        crate::extension::one_checkpointing_plugin(&run, &run_section, &checkpointing)?;
        for name in &SECTIONS[MODULE_SECTIONS] {
            sections.remove(*name);
        }
        let cfg = Config {
            file: file.to_string(),
            base_dir: input.base_dir.to_path_buf(),
            cluster,
            run,
            admission,
            scheduling,
            placement,
            protection,
            checkpointing,
            recovery,
            sections,
        };
        // A scheduler's config may describe only the topology's levels
        // (`[cluster.topology]`): its workers bring the nodes.
        let workers_bring_gpus = (live || (input.cluster_optional && !cfg.has_section("cluster")))
            && cfg.cluster.nodes.is_none()
            && cfg.cluster.node_groups.is_empty();
        if !workers_bring_gpus {
            cfg.cluster_state()?;
        }
        Ok(cfg)
    }

    /// A section other than the three modules (`cluster`, `run`, `workload`,
    /// `sim`, …), or an empty one.
    pub fn section(&self, name: &str) -> Section {
        self.sections.get(name).cloned().unwrap_or_else(|| {
            Section::new(
                name,
                toml::Table::new(),
                Origin {
                    file: Arc::from(self.file.as_str()),
                    ..Default::default()
                },
                Some(self.base_dir.clone()),
            )
        })
    }

    /// Every section but the three modules, by name.
    pub fn sections(&self) -> impl Iterator<Item = &Section> {
        self.sections.values()
    }

    /// True if the config has that section.
    pub fn has_section(&self, name: &str) -> bool {
        self.sections.contains_key(name)
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

#[cfg(test)]
mod tests;
