//! `[workload]` as a config section: the keys every kind accepts, the keys
//! of each kind (a key another kind owns is an error, or dropped by
//! `--workload`), and their checks.

use super::*;
use blox_core::config::{Table, Value};

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
    pub burst_every_s: Option<Positive>,
    pub burst_length_s: Option<Positive>,
    pub burst_jobs_per_hour: Option<Positive>,
    pub burst_min_duration_s: Option<Positive>,
    pub burst_max_duration_s: Option<Positive>,
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
    BloxCsv(BloxCsvKeys),
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
    /// The Alibaba 2023 GPU trace's pod lists (FGD's "openb"), by their
    /// creation and deletion times.
    Openb(OpenbKeys),
}

/// `kind = "openb"`; `path` is a pod list (`.csv` or `.csv.gz`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OpenbKeys {
    /// The node list (default `openb_node_list_gpu_node.csv` beside the
    /// pod list): the GPU models that exist.
    pub nodes: Option<PathBuf>,
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
    pub jobs_per_hour: Option<Positive>,
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
    pub jobs_per_hour: Option<Positive>,
}

/// A kind without keys of its own.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NoKeys {}

/// `kind = "blox-csv"`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BloxCsvKeys {
    /// Seconds per iteration by model: `duration` then counts iterations
    /// (the PAL artifact's Sia-Philly traces, whose simulator multiplies
    /// them by a per-model iteration time, `workload.py`'s
    /// `get_per_iter_time`). Unset: `duration` is seconds.
    #[serde(default)]
    pub iteration_s: std::collections::BTreeMap<String, Positive>,
}

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
    /// `batch_agent = "pollux"`: scipy's `tol` of the agent's throughput fit
    /// (L-BFGS-B's `ftol` and `gtol`). Unset: scipy's defaults, as the Pollux
    /// artifact fits; the Sia artifact passes 1e-5 (`examples/configs/sia`).
    pub fit_tol: Option<Positive>,
}

/// `kind = "philly"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PhillyKeys {
    /// Poisson arrival rate, jobs per hour.
    pub jobs_per_hour: Positive,
    /// Skip jobs shorter than this, seconds.
    pub min_duration_s: Option<NonNegative>,
    /// Skip jobs longer than this, seconds.
    pub max_duration_s: Option<Positive>,
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
    pub jobs_per_hour: Positive,
}

/// The keys of a `[workload]` table that belong to another kind than `kind`
/// (known keys only: a misspelt key stays, to be reported where it is read).
/// `--workload` drops them when the file it names is of another kind.
pub fn keys_of_other_kinds<'a>(table: &'a Table, kind: &str) -> Vec<&'a str> {
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
    ("blox-csv", &["iteration_s"]),
    (
        "pollux",
        &[
            "traces_dir",
            "gpus_per_node",
            "model",
            "batch_agent",
            "batch_search",
            "fit_tol",
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
    ("openb", &["nodes"]),
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
            WorkloadKind::Openb(_) => "openb",
        }
    }

    /// The arrival rate it was asked for, if it re-times arrivals.
    pub fn jobs_per_hour(&self) -> Option<f64> {
        match self {
            WorkloadKind::Philly(k) => Some(k.jobs_per_hour.get()),
            WorkloadKind::BloxRecipe(k) => Some(k.jobs_per_hour.get()),
            WorkloadKind::Helios(k) => k.jobs_per_hour.map(Positive::get),
            WorkloadKind::Pai(k) => k.jobs_per_hour.map(Positive::get),
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
            Some(Value::String(p)) => section.resolve_path(Path::new(&p)),
            Some(_) => return Err(section.error_at("path", "`path` must be a string").into()),
            None => {
                return Err(section
                    .error_at("path", "[workload] needs `path` (the trace file)")
                    .into())
            }
        };
        let kind = match table.remove("kind") {
            Some(Value::String(k)) => k,
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
        let mut common = Table::new();
        let mut specific = Table::new();
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
        // Each kind's keys as their own struct, so that an error names the key.
        let keys = section.with_table(specific);
        let kind = match kind.as_str() {
            "csv" => WorkloadKind::Csv(keys.parse()?),
            "blox-csv" => WorkloadKind::BloxCsv(keys.parse()?),
            "pollux" => WorkloadKind::Pollux(keys.parse()?),
            "philly" => WorkloadKind::Philly(keys.parse()?),
            "blox-recipe" => WorkloadKind::BloxRecipe(keys.parse()?),
            "helios" => WorkloadKind::Helios(keys.parse()?),
            "pai" => WorkloadKind::Pai(keys.parse()?),
            "openb" => WorkloadKind::Openb(keys.parse()?),
            other => {
                return Err(section
                    .error_at("kind", format!("workload kind `{other}` has no reader"))
                    .into())
            }
        };
        if let WorkloadKind::Pollux(p) = &kind {
            if p.fit_tol.is_some() && p.batch_agent != AgentKind::Pollux {
                return Err(section
                    .error_at(
                        "fit_tol",
                        "fit_tol applies only with batch_agent = \"pollux\"; it would be ignored",
                    )
                    .into());
            }
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
                if lo.get() > hi.get() {
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
