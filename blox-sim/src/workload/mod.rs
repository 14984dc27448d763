//! Workloads: where simulated jobs come from.
//!
//! | `kind` | file | what it gives |
//! |---|---|---|
//! | `csv` | `job_id,arrival_s,num_gpus,duration_s[,model,batch_size,user]` | jobs as written |
//! | `blox-csv` | `job_id,num_gpus,submit_time,duration,model,batch_size` (Blox's toy traces) | jobs as written |
//! | `pollux` | `name,time,application,num_replicas,batch_size` (Pollux artifact) | durations derived from the per-model profiles ([`pollux`]) |
//! | `philly` | `timestamp,duration,num_gpus,gpu_time,cluster` (Philly digest) | Poisson re-timed arrivals at `jobs_per_hour`, each job's GPU count kept; `sample = "joint"` draws any number of jobs from the rows' joint (GPU count, duration) distribution |
//! | `blox-recipe` | the Philly digest | Blox's Philly-Trace recipe: 1-GPU jobs, Gavel-style durations ([`philly`]) |
//! | `helios` | `cluster_log.csv` of SenseTime's Helios traces ([`helios`]) | jobs at their own submit times with their GPU count and run time |
//! | `pai` | Alibaba PAI 2020's `pai_job_table` + `pai_task_table` (+ `pai_instance_table`) ([`pai`]) | jobs at their own submit times, GPUs summed over tasks, run time from the tasks |
//!
//! Rows of a production trace (`helios`, `pai`) that cannot become jobs
//! (CPU-only, no run time, unreadable) are counted by reason and logged.
//!
//! Without `kind`, the format is recognised from the CSV header (`blox-recipe`
//! must be asked for by name: it shares the Philly header).

pub mod helios;
pub mod pai;
pub mod philly;
pub mod pollux;
pub mod sia;
pub mod stream;
pub mod table;
pub mod trace;

use blox_core::{JobSpec, Section};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use table::CsvTable;

/// A bad workload file or setting.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("{}:{line}: column `{column}`: {message}", path.display())]
    Field {
        path: PathBuf,
        line: u64,
        column: String,
        message: String,
    },
    #[error("{}: missing column `{column}` (header is `{found}`)", path.display())]
    MissingColumn {
        path: PathBuf,
        column: String,
        found: String,
    },
    #[error("{}: unrecognised CSV header `{found}`; expected one of:\n{expected}", path.display())]
    UnknownFormat {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error(transparent)]
    Config(#[from] blox_core::ConfigError),
    #[error("{0}")]
    Invalid(String),
}

/// How a simulated job makes progress.
#[derive(Clone, Debug)]
pub enum WorkModel {
    /// Runs for `duration_s` at its requested GPU count; at `g` GPUs its speed
    /// scales linearly, `g / requested` (for traces that give only durations).
    Duration { duration_s: f64 },
    /// Pollux-style: statistical progress from the application's measured step
    /// times and gradient statistics, until the target progress `P*`
    /// (`pollux-data.md` §3–4, §7).
    Profile {
        app: std::sync::Arc<blox_goodput::AppProfile>,
        agent: BatchAgent,
        /// The model's profile on each GPU type, when the workload's profiles
        /// are per type (Sia); `app` is then any one of them, and the job
        /// follows the Sia artifact's rules ([`sia`]).
        types: Option<std::sync::Arc<blox_goodput::TypedProfiles>>,
    },
}

impl PartialEq for WorkModel {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (WorkModel::Duration { duration_s: a }, WorkModel::Duration { duration_s: b }) => {
                a == b
            }
            (
                WorkModel::Profile {
                    app: a, agent: x, ..
                },
                WorkModel::Profile {
                    app: b, agent: y, ..
                },
            ) => a.app == b.app && x == y,
            _ => false,
        }
    }
}

/// Who picks a profile-driven job's batch size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BatchAgent {
    /// The job's global batch size, at any GPU count (fixed-batch rule).
    Fixed { batch: u32 },
    /// A PolluxAgent tunes the batch to the allocation; optionally pinned.
    Pollux {
        fixed_batch: Option<u32>,
        replica_cap: Option<u32>,
        search: blox_goodput::model::BatchSearch,
    },
}

/// A job as the simulator knows it: what the scheduler sees, plus its true work.
#[derive(Clone, Debug, PartialEq)]
pub struct SimJob {
    pub spec: JobSpec,
    pub work: WorkModel,
    /// Fraction of its work after which the job's training loss stops
    /// improving (its loss curve is then reported as `loss` / `loss_target`
    /// metrics); `None`: no loss is reported.
    pub converge_at: Option<f64>,
    /// Seconds every launch of this job spends starting before its first
    /// iteration (a trace's `startup_s` column); `None`: the model's
    /// (`[sim.model_startup_s]`) or the `[sim]` overheads.
    pub startup_s: Option<f64>,
}

impl SimJob {
    /// The trace duration, or for profile-driven jobs the rigid estimate at the
    /// requested GPUs and batch.
    pub fn duration_s(&self) -> f64 {
        match self.work {
            WorkModel::Duration { duration_s } => duration_s,
            WorkModel::Profile { .. } => self.spec.expected_duration_s.unwrap_or(0.0),
        }
    }
}

/// `[workload]`: which trace, and how to turn it into jobs. The keys every
/// kind accepts are here; the keys of one kind are in [`WorkloadKind`], so a
/// key that another kind owns is an error instead of being ignored.
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// The trace file, relative to the file that names it.
    pub path: PathBuf,
    pub kind: WorkloadKind,
    pub common: CommonKeys,
}

/// `[workload]` keys that apply to every kind.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommonKeys {
    /// Use at most this many jobs (in trace order).
    pub num_jobs: Option<usize>,
    /// Make every job ask for this many GPUs (e.g. 1, as the Blox simulator does).
    pub force_gpus: Option<u32>,
    /// Loss curves for loss-based termination (Blox §5.3): this fraction of
    /// jobs, drawn at random (run seed), converges after `converge_at` of its
    /// work, the rest at the end; every job then reports `loss`.
    pub converge_fraction: Option<f64>,
    /// See `converge_fraction` (default 0.4, Blox §5.3 after Jeon et al.).
    pub converge_at: Option<f64>,
    /// Give every job without a model one of these, uniformly at random (run
    /// seed); list a name twice to weight it. Synergy assigns models to Philly
    /// jobs this way (OSDI'22 §6).
    #[serde(default)]
    pub assign_models: Vec<String>,
    /// CPU/memory sensitivity profiles by model (relative to the config file;
    /// e.g. the vendored `data/blox/derived/model_profiles__models_dir.csv`):
    /// a job's speed then depends on the CPUs and host memory it gets
    /// ([`crate::host_profile`]). Every job must have a model listed there.
    pub host_profiles: Option<PathBuf>,
    /// Bursts of short jobs (Blox Fig. 15's bursty workload): every
    /// `burst_every_s`, for `burst_length_s`, an extra Poisson stream of 1-GPU
    /// jobs at `burst_jobs_per_hour` (default for `philly` and `blox-recipe`:
    /// `jobs_per_hour`, doubling the arrival rate) lasting
    /// U(`burst_min_duration_s`, `burst_max_duration_s`) (default 10–60 min).
    /// Job ids are renumbered in arrival order.
    pub burst_every_s: Option<f64>,
    pub burst_length_s: Option<f64>,
    pub burst_jobs_per_hour: Option<f64>,
    pub burst_min_duration_s: Option<f64>,
    pub burst_max_duration_s: Option<f64>,
}

/// Keys every kind accepts (besides `kind` and `path`).
const COMMON_KEYS: &[&str] = &[
    "num_jobs",
    "force_gpus",
    "converge_fraction",
    "converge_at",
    "assign_models",
    "host_profiles",
    "burst_every_s",
    "burst_length_s",
    "burst_jobs_per_hour",
    "burst_min_duration_s",
    "burst_max_duration_s",
];

/// The kind of a workload and the keys only it accepts (`kind = "..."`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// `job_id,arrival_s,num_gpus,duration_s[,model,batch_size,user]`.
    Csv(NoKeys),
    /// Blox's toy traces: `job_id,num_gpus,submit_time,duration,model,batch_size`.
    BloxCsv(NoKeys),
    /// The Pollux artifact's workloads.
    Pollux(PolluxKeys),
    /// The Philly digest, re-timed with Poisson arrivals.
    Philly(PhillyKeys),
    /// Blox's Philly-Trace recipe.
    BloxRecipe(RecipeKeys),
    /// SenseTime's Helios `cluster_log.csv`.
    Helios(HeliosKeys),
    /// Alibaba PAI 2020's job and task tables.
    Pai(PaiKeys),
}

/// `kind = "helios"`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeliosKeys {
    /// Keep only rows in these states (e.g. `["COMPLETED"]`); default all.
    #[serde(default)]
    pub states: Vec<String>,
    /// Re-time arrivals as a Poisson process at this rate, jobs/hour;
    /// default: the trace's own submit times.
    pub jobs_per_hour: Option<f64>,
}

/// `kind = "pai"`; `path` is the job table.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PaiKeys {
    /// The task table (default `pai_task_table.csv` beside the job table).
    pub task_table: Option<PathBuf>,
    /// The instance table, if run times should come from instances.
    pub instance_table: Option<PathBuf>,
    /// Keep only jobs in these statuses (e.g. `["Terminated"]`); default all.
    #[serde(default)]
    pub states: Vec<String>,
    /// Re-time arrivals as a Poisson process at this rate, jobs/hour;
    /// default: the trace's own submit times.
    pub jobs_per_hour: Option<f64>,
}

/// A kind without keys of its own.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NoKeys {}

/// `kind = "pollux"`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolluxKeys {
    /// Folder of per-application profiles (`<app>/placements.csv`, …);
    /// default `../traces` next to the workload file's folder.
    pub traces_dir: Option<PathBuf>,
    /// GPUs per node used to lay out a job for its rigid duration (default 4).
    pub gpus_per_node: Option<u32>,
    /// `profile` (default; progress from the measured profiles) or
    /// `duration` (a fixed duration at the tuned GPUs and batch).
    #[serde(default)]
    pub model: ProgressModel,
    /// Profile-driven: `fixed` (default; the workload's batch size) or
    /// `pollux` (a PolluxAgent tunes each job's batch size).
    #[serde(default)]
    pub batch_agent: AgentKind,
    /// `batch_agent = "pollux"`: how the agent searches the batch size,
    /// `grid50` (default, the artifact's) or `golden-section` (Pollux §4.1).
    pub batch_search: Option<blox_goodput::model::BatchSearch>,
}

/// `kind = "philly"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PhillyKeys {
    /// Poisson arrival rate, jobs per hour.
    pub jobs_per_hour: f64,
    /// Skip jobs shorter than this, seconds.
    pub min_duration_s: Option<f64>,
    /// Skip jobs longer than this, seconds.
    pub max_duration_s: Option<f64>,
    /// `in-order` (default): the rows in submission order, each at most once;
    /// `joint`: each job's GPU count and duration drawn from the rows'
    /// joint distribution (any `num_jobs`).
    #[serde(default)]
    pub sample: Sample,
}

/// `[workload] sample` of a `philly` workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sample {
    #[default]
    InOrder,
    Joint,
}

/// `kind = "blox-recipe"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RecipeKeys {
    /// Poisson arrival rate, jobs per hour.
    pub jobs_per_hour: f64,
}

/// The keys of a `[workload]` table that belong to another kind than `kind`
/// (known keys only: a misspelt key stays, to be reported where it is read).
/// `--workload` drops them when the file it names is of another kind.
pub fn keys_of_other_kinds<'a>(table: &'a toml::Table, kind: &str) -> Vec<&'a str> {
    let own: &[&str] = KIND_KEYS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, keys)| *keys)
        .unwrap_or(&[]);
    table
        .keys()
        .map(String::as_str)
        .filter(|k| {
            !COMMON_KEYS.contains(k)
                && !own.contains(k)
                && KIND_KEYS.iter().any(|(_, keys)| keys.contains(k))
        })
        .collect()
}

/// Kinds and the keys only they accept.
const KIND_KEYS: &[(&str, &[&str])] = &[
    ("csv", &[]),
    ("blox-csv", &[]),
    (
        "pollux",
        &[
            "traces_dir",
            "gpus_per_node",
            "model",
            "batch_agent",
            "batch_search",
        ],
    ),
    (
        "philly",
        &[
            "jobs_per_hour",
            "min_duration_s",
            "max_duration_s",
            "sample",
        ],
    ),
    ("blox-recipe", &["jobs_per_hour"]),
    ("helios", &["states", "jobs_per_hour"]),
    (
        "pai",
        &["task_table", "instance_table", "states", "jobs_per_hour"],
    ),
];

impl WorkloadKind {
    /// The name used in configs.
    pub fn name(&self) -> &'static str {
        match self {
            WorkloadKind::Csv(_) => "csv",
            WorkloadKind::BloxCsv(_) => "blox-csv",
            WorkloadKind::Pollux(_) => "pollux",
            WorkloadKind::Philly(_) => "philly",
            WorkloadKind::BloxRecipe(_) => "blox-recipe",
            WorkloadKind::Helios(_) => "helios",
            WorkloadKind::Pai(_) => "pai",
        }
    }

    /// The arrival rate it was asked for, if it re-times arrivals.
    pub fn jobs_per_hour(&self) -> Option<f64> {
        match self {
            WorkloadKind::Philly(k) => Some(k.jobs_per_hour),
            WorkloadKind::BloxRecipe(k) => Some(k.jobs_per_hour),
            WorkloadKind::Helios(k) => k.jobs_per_hour,
            WorkloadKind::Pai(k) => k.jobs_per_hour,
            _ => None,
        }
    }
}

impl WorkloadConfig {
    /// Reads and checks `[workload]`: `path` is required; without `kind` the
    /// format is recognised from the file's CSV header.
    pub fn from_section(section: &Section) -> Result<Self, WorkloadError> {
        let mut table = section.table().clone();
        let path = match table.remove("path") {
            Some(toml::Value::String(p)) => section.resolve_path(Path::new(&p)),
            Some(_) => return Err(section.error_at("path", "`path` must be a string").into()),
            None => {
                return Err(section
                    .error_at("path", "[workload] needs `path` (the trace file)")
                    .into())
            }
        };
        let kind = match table.remove("kind") {
            Some(toml::Value::String(k)) => k,
            Some(_) => return Err(section.error_at("kind", "`kind` must be a string").into()),
            None => detect_format(&path)?.to_string(),
        };
        let Some((_, own)) = KIND_KEYS.iter().find(|(k, _)| *k == kind) else {
            let names: Vec<&str> = KIND_KEYS.iter().map(|(k, _)| *k).collect();
            let near = blox_core::config::closest(&kind, names.iter().copied())
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err(section
                .error_at(
                    "kind",
                    format!(
                        "unknown workload kind `{kind}`{near}; known: {}",
                        names.join(", ")
                    ),
                )
                .into());
        };
        let mut common = toml::Table::new();
        let mut specific = toml::Table::new();
        for (k, v) in table {
            if COMMON_KEYS.contains(&k.as_str()) {
                common.insert(k, v);
            } else if own.contains(&k.as_str()) {
                specific.insert(k, v);
            } else {
                let owners: Vec<&str> = KIND_KEYS
                    .iter()
                    .filter(|(_, keys)| keys.contains(&k.as_str()))
                    .map(|(n, _)| *n)
                    .collect();
                let message = if owners.is_empty() {
                    let all = COMMON_KEYS.iter().chain(own.iter()).copied();
                    let near = blox_core::config::closest(&k, all)
                        .map(|n| format!(" (did you mean `{n}`?)"))
                        .unwrap_or_default();
                    format!("unknown key `{k}`{near} for a `{kind}` workload")
                } else {
                    format!(
                        "`{k}` does not apply to a `{kind}` workload (only to {}); it would be ignored",
                        owners.join(", ")
                    )
                };
                return Err(section.error_at(&k, message).into());
            }
        }
        let common: CommonKeys = section.with_table(common).parse()?;
        specific.insert("kind".into(), toml::Value::String(kind.clone()));
        let kind: WorkloadKind = section.with_table(specific).parse()?;
        if let Some(rate) = kind.jobs_per_hour() {
            if !(rate > 0.0 && rate.is_finite()) {
                return Err(section
                    .error_at("jobs_per_hour", "jobs_per_hour must be a positive number")
                    .into());
            }
        }
        if let WorkloadKind::Pollux(p) = &kind {
            if p.batch_search.is_some() && p.batch_agent != AgentKind::Pollux {
                return Err(section
                    .error_at(
                        "batch_search",
                        "batch_search applies only with batch_agent = \"pollux\"; it would be ignored",
                    )
                    .into());
            }
            if p.batch_agent == AgentKind::Pollux && p.model == ProgressModel::Duration {
                return Err(section
                    .error_at(
                        "batch_agent",
                        "batch_agent = \"pollux\" needs profile-driven jobs (model = \"profile\")",
                    )
                    .into());
            }
            if p.gpus_per_node == Some(0) {
                return Err(section
                    .error_at("gpus_per_node", "gpus_per_node must be at least 1")
                    .into());
            }
        }
        if let WorkloadKind::Philly(p) = &kind {
            if let (Some(lo), Some(hi)) = (p.min_duration_s, p.max_duration_s) {
                if lo > hi {
                    return Err(section
                        .error_at("min_duration_s", "min_duration_s is above max_duration_s")
                        .into());
                }
            }
        }
        if common.force_gpus == Some(0) {
            return Err(section
                .error_at("force_gpus", "force_gpus must be at least 1")
                .into());
        }
        if common.num_jobs == Some(0) {
            return Err(section
                .error_at("num_jobs", "num_jobs must be at least 1")
                .into());
        }
        Ok(WorkloadConfig { path, kind, common })
    }
}

/// `[workload] model`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProgressModel {
    #[default]
    Profile,
    Duration,
}

/// `[workload] batch_agent`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    #[default]
    Fixed,
    Pollux,
}

const FORMATS: &[(&str, &[&str])] = &[
    ("csv", &["job_id", "arrival_s", "num_gpus", "duration_s"]),
    (
        "blox-csv",
        &["job_id", "num_gpus", "submit_time", "duration"],
    ),
    (
        "pollux",
        &["name", "time", "application", "num_replicas", "batch_size"],
    ),
    ("philly", &["timestamp", "duration", "num_gpus"]),
    ("helios", &["job_id", "gpu_num", "submit_time", "duration"]),
    (
        "pai",
        &["job_name", "inst_id", "status", "start_time", "end_time"],
    ),
];

/// The format a CSV header belongs to.
pub fn detect_format(path: &Path) -> Result<&'static str, WorkloadError> {
    let table_head = std::fs::read_to_string(path).map_err(|e| WorkloadError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let header = table_head
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches('\u{feff}');
    let cols: Vec<&str> = header.split(',').map(|c| c.trim()).collect();
    for (name, required) in FORMATS {
        if required.iter().all(|r| cols.contains(r)) {
            return Ok(name);
        }
    }
    Err(WorkloadError::UnknownFormat {
        path: path.to_path_buf(),
        found: header.to_string(),
        expected: FORMATS
            .iter()
            .map(|(n, c)| format!("  {n}: {}", c.join(",")))
            .collect::<Vec<_>>()
            .join("\n"),
    })
}

/// Reads the `[workload]` section and produces the jobs, sorted by arrival, with
/// ids `0..n` in arrival order unless the trace gives ids.
pub fn load(section: &Section, seed: u64) -> Result<Vec<SimJob>, WorkloadError> {
    load_for(section, seed, None)
}

/// [`load`] for a cluster: a workload with per-GPU-type profiles is read for
/// the cluster's GPU types (without a cluster: every profiled type, laid out
/// `gpus_per_node` to a node).
pub fn load_for(
    section: &Section,
    seed: u64,
    cluster: Option<&blox_core::ClusterState>,
) -> Result<Vec<SimJob>, WorkloadError> {
    let cfg = WorkloadConfig::from_section(section)?;
    let c = &cfg.common;
    let path = &cfg.path;
    let mut jobs = match &cfg.kind {
        WorkloadKind::Csv(_) => trace::read_generic(&CsvTable::read(path)?)?,
        WorkloadKind::BloxCsv(_) => trace::read_blox(&CsvTable::read(path)?)?,
        WorkloadKind::Pollux(p) => {
            let traces = match &p.traces_dir {
                Some(d) => section.resolve_path(d),
                None => blox_goodput::profiles_beside(path),
            };
            let opt = pollux::PolluxOptions {
                profile_driven: p.model == ProgressModel::Profile,
                agent_pollux: p.batch_agent == AgentKind::Pollux,
                batch_search: p.batch_search.unwrap_or_default(),
                gpus_per_node: p.gpus_per_node.unwrap_or(4),
            };
            if blox_goodput::typed::is_per_type(&traces) {
                let mut cache = blox_goodput::TypedCache::open(&traces)
                    .map_err(|e| WorkloadError::Invalid(e.to_string()))?;
                let types = match cluster {
                    Some(c) => sia::cluster_types(c),
                    None => cache
                        .profiled_types()
                        .into_iter()
                        .map(|name| sia::GpuTypeInfo {
                            name,
                            gpus_per_node: opt.gpus_per_node,
                            gpus: 64,
                        })
                        .collect(),
                };
                sia::read_workload(&CsvTable::read(path)?, &mut cache, &types, opt)?
            } else {
                pollux::read_workload(&CsvTable::read(path)?, &traces, opt)?
            }
        }
        WorkloadKind::Philly(p) => philly::retimed(&CsvTable::read(path)?, p, c.num_jobs, seed)?,
        WorkloadKind::BloxRecipe(r) => {
            philly::blox_recipe(&CsvTable::read(path)?, r.jobs_per_hour, c.num_jobs, seed)?
        }
        WorkloadKind::Helios(h) => {
            let (mut jobs, tally) = helios::read(path, h)?;
            tally.log(path);
            if let Some(rate) = h.jobs_per_hour {
                philly::retime(&mut jobs, rate, seed);
            }
            jobs
        }
        WorkloadKind::Pai(p) => {
            let tasks = match &p.task_table {
                Some(t) => section.resolve_path(t),
                None => path.with_file_name("pai_task_table.csv"),
            };
            let instances = p.instance_table.as_ref().map(|t| section.resolve_path(t));
            let (mut jobs, tally) = pai::read(path, p, &tasks, instances.as_deref())?;
            tally.log(path);
            if let Some(rate) = p.jobs_per_hour {
                philly::retime(&mut jobs, rate, seed);
            }
            jobs
        }
    };
    if let Some(n) = c.num_jobs {
        if n > jobs.len() {
            tracing::warn!(
                "{}: num_jobs = {n} but the trace gives {} jobs; using all of them",
                path.display(),
                jobs.len()
            );
        }
        jobs.truncate(n);
    }
    if let Some(f) = c.converge_fraction {
        if !(0.0..=1.0).contains(&f) {
            return Err(section
                .error_at("converge_fraction", "converge_fraction must be in [0, 1]")
                .into());
        }
        let at = c.converge_at.unwrap_or(0.4);
        if !(at > 0.0 && at <= 1.0) {
            return Err(section
                .error_at("converge_at", "converge_at must be in (0, 1]")
                .into());
        }
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x1055);
        for j in &mut jobs {
            j.converge_at = Some(if rng.random_bool(f) { at } else { 1.0 });
        }
    } else if c.converge_at.is_some() {
        return Err(section
            .error_at(
                "converge_at",
                "converge_at needs converge_fraction; it would be ignored",
            )
            .into());
    }
    if let Some(g) = c.force_gpus {
        for j in &mut jobs {
            j.spec.requested_gpus = g;
        }
    }
    if let Some(every) = c.burst_every_s {
        let length = c
            .burst_length_s
            .ok_or_else(|| section.error_at("burst_every_s", "bursts need `burst_length_s` too"))?;
        let rate = c
            .burst_jobs_per_hour
            .or(cfg.kind.jobs_per_hour())
            .ok_or_else(|| {
                section.error_at("burst_every_s", "bursts need `burst_jobs_per_hour`")
            })?;
        let (lo, hi) = (
            c.burst_min_duration_s.unwrap_or(600.0),
            c.burst_max_duration_s.unwrap_or(3600.0),
        );
        if !(every > 0.0 && length > 0.0 && length <= every && rate > 0.0 && 0.0 < lo && lo <= hi) {
            return Err(section
                .error_at(
                    "burst_every_s",
                    "need 0 < burst_length_s <= burst_every_s, a positive rate and 0 < min <= max duration",
                )
                .into());
        }
        // Bounded before generating: a window every few microseconds or a
        // rate of millions an hour would fill the memory.
        let last = jobs.iter().map(|j| j.spec.arrival_s).fold(0.0, f64::max);
        let windows = (last / every).floor() + 1.0;
        let expected = windows * (rate / 3600.0 * length).min(length.ceil());
        if windows + expected > MAX_BURST_JOBS as f64 {
            return Err(section
                .error_at(
                    "burst_every_s",
                    format!(
                        "these bursts would take {windows:.3e} windows of {length} s and add about {expected:.3e} jobs at {rate} jobs/hour, more than {MAX_BURST_JOBS} in all: lengthen `burst_every_s` or lower `burst_jobs_per_hour`"
                    ),
                )
                .into());
        }
        add_bursts(&mut jobs, every, length, rate, (lo, hi), seed);
    } else if let Some(k) = [
        ("burst_length_s", c.burst_length_s),
        ("burst_jobs_per_hour", c.burst_jobs_per_hour),
        ("burst_min_duration_s", c.burst_min_duration_s),
        ("burst_max_duration_s", c.burst_max_duration_s),
    ]
    .iter()
    .find(|(_, v)| v.is_some())
    .map(|(k, _)| *k)
    {
        return Err(section
            .error_at(
                k,
                format!("`{k}` needs `burst_every_s`; it would be ignored"),
            )
            .into());
    }
    if !c.assign_models.is_empty() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5e7e);
        for j in &mut jobs {
            if j.spec.model.is_none() {
                let k = rng.random_range(0..c.assign_models.len());
                j.spec.model = Some(c.assign_models[k].clone());
            }
        }
    }
    Ok(jobs)
}

/// The most burst windows plus jobs a workload may take (the jobs: about
/// 1 GB of records).
const MAX_BURST_JOBS: usize = 2_000_000;

/// Adds the burst jobs to `jobs` (windows `[k·every, k·every + length)` up to
/// the last arrival) and renumbers all in arrival order.
fn add_bursts(
    jobs: &mut Vec<SimJob>,
    every: f64,
    length: f64,
    rate: f64,
    (lo, hi): (f64, f64),
    seed: u64,
) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xb0057);
    let last = jobs.iter().map(|j| j.spec.arrival_s).fold(0.0, f64::max);
    let mut start = 0.0;
    let mut extra = Vec::new();
    while start <= last {
        let mut t = start;
        loop {
            let u: f64 = rng.random();
            // Whole seconds, at least one: the window always ends.
            t += (-(1.0 - u).ln() / rate * 3600.0).ceil().max(1.0);
            if t >= start + length {
                break;
            }
            let d = rng.random_range(lo..=hi).round();
            let mut spec = JobSpec::new(0, t, 1).with_duration(d);
            spec.name = format!("burst-{}", extra.len());
            extra.push(SimJob {
                startup_s: None,
                spec,
                work: WorkModel::Duration { duration_s: d },
                converge_at: None,
            });
        }
        start += every;
    }
    jobs.extend(extra);
    jobs.sort_by(|a, b| a.spec.arrival_s.total_cmp(&b.spec.arrival_s));
    for (i, j) in jobs.iter_mut().enumerate() {
        if !j.spec.name.starts_with("burst-") {
            j.spec.name = i.to_string();
        }
        j.spec.id = blox_core::JobId(i as u64);
    }
}

/// The `[workload] host_profiles` table, checked against the jobs: every job
/// needs a model that has a profile. Empty when the key is not set.
pub fn load_host_profiles(
    section: &Section,
    jobs: &[SimJob],
) -> Result<crate::host_profile::HostProfiles, WorkloadError> {
    let cfg = WorkloadConfig::from_section(section)?;
    let Some(rel) = cfg.common.host_profiles.as_ref() else {
        return Ok(Default::default());
    };
    let path = section.resolve_path(rel);
    let profiles = crate::host_profile::read(&path)?;
    let known = || profiles.keys().cloned().collect::<Vec<_>>().join(", ");
    for j in jobs {
        match j.spec.model.as_deref() {
            None => {
                return Err(section
                    .error_at(
                        "host_profiles",
                        format!(
                            "{} has no model, so its host profile is unknown; \
                             give the trace a model column or set `assign_models`",
                            j.spec.id
                        ),
                    )
                    .into())
            }
            Some(m) if !profiles.contains_key(m) => {
                return Err(section
                    .error_at(
                        "host_profiles",
                        format!(
                            "{}: model `{m}` has no profile in {} (it has: {})",
                            j.spec.id,
                            path.display(),
                            known()
                        ),
                    )
                    .into())
            }
            Some(_) => {}
        }
    }
    Ok(profiles)
}
