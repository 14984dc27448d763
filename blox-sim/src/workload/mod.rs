//! Workloads: where simulated jobs come from.
//!
//! | `kind` | file | what it gives |
//! |---|---|---|
//! | `csv` | `job_id,arrival_s,num_gpus,duration_s[,model,batch_size,user,team]` | jobs as written |
//! | `blox-csv` | `job_id,num_gpus,submit_time,duration,model,batch_size` (Blox's toy traces; the PAL artifact's Sia-Philly traces without `batch_size`) | jobs as written; with `iteration_s = { model = seconds }`, `duration` counts iterations of that many seconds |
//! | `pollux` | `name,time,application,num_replicas,batch_size` (Pollux artifact) | durations derived from the per-model profiles ([`pollux`]) |
//! | `philly` | `timestamp,duration,num_gpus,gpu_time,cluster` (Philly digest) | Poisson re-timed arrivals at `jobs_per_hour`, each job's GPU count kept, its `cluster` (virtual cluster) as its team; `sample = "joint"` draws any number of jobs from the rows' joint (GPU count, duration) distribution |
//! | `blox-recipe` | the Philly digest | Blox's Philly-Trace recipe: 1-GPU jobs, Gavel-style durations ([`philly`]) |
//! | `helios` | `cluster_log.csv` of SenseTime's Helios traces ([`helios`]) | jobs at their own submit times with their GPU count and run time, their VC as their team |
//! | `pai` | Alibaba PAI 2020's `pai_job_table` + `pai_task_table` (+ `pai_instance_table`) ([`pai`]) | jobs at their own submit times, GPUs summed over tasks, run time from the tasks, their user as their team |
//!
//! Rows of a production trace (`helios`, `pai`) that cannot become jobs
//! (CPU-only, no run time, unreadable) are counted by reason and logged.
//!
//! Without `kind`, the format is recognised from the CSV header (`blox-recipe`
//! must be asked for by name: it shares the Philly header).

mod config;
pub mod helios;
pub mod host_profile;
pub mod openb;
pub mod pai;
pub mod philly;
pub mod pollux;
pub mod sia;
pub mod stream;
pub mod table;
pub mod trace;

pub use config::*;

use blox_core::{JobSpec, NonNegative, Positive, Section};
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
        /// scipy's `tol` for the agent's throughput fit (`None`: scipy's
        /// defaults, as the Pollux artifact fits; the Sia artifact: 1e-5).
        fit_tol: Option<f64>,
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
    /// A job that runs `duration_s` at its requested GPUs (linear speed-up),
    /// with no loss curve and the `[sim]` start-up.
    pub fn of_duration(spec: JobSpec, duration_s: f64) -> Self {
        SimJob {
            spec,
            work: WorkModel::Duration { duration_s },
            converge_at: None,
            startup_s: None,
        }
    }

    /// The trace duration, or for profile-driven jobs the rigid estimate at the
    /// requested GPUs and batch.
    pub fn duration_s(&self) -> f64 {
        match self.work {
            WorkModel::Duration { duration_s } => duration_s,
            WorkModel::Profile { .. } => self.spec.expected_duration_s.unwrap_or(0.0),
        }
    }
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
    (
        "openb",
        &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"],
    ),
];

/// The format a CSV header belongs to (its first line only is read; a
/// `.gz` file's through gzip).
pub fn detect_format(path: &Path) -> Result<&'static str, WorkloadError> {
    use std::io::BufRead;
    let io = |e: std::io::Error| WorkloadError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let reader: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(std::io::BufReader::new(flate2::read::GzDecoder::new(file)))
    } else {
        Box::new(std::io::BufReader::new(file))
    };
    let mut first = Vec::new();
    std::io::Read::take(reader, 1 << 20)
        .read_until(b'\n', &mut first)
        .map_err(io)?;
    let table_head = String::from_utf8_lossy(&first);
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
    let (c, path) = (&cfg.common, &cfg.path);
    let jobs = match &cfg.kind {
        WorkloadKind::Csv(_) => trace::read_generic(&CsvTable::read(path)?)?,
        WorkloadKind::BloxCsv(k) => trace::read_blox(&CsvTable::read(path)?, &k.iteration_s)?,
        WorkloadKind::Pollux(p) => read_pollux(section, path, p, cluster)?,
        WorkloadKind::Philly(p) => philly::retimed(&CsvTable::read(path)?, p, c.num_jobs, seed)?,
        WorkloadKind::BloxRecipe(r) => {
            philly::blox_recipe(path, r.jobs_per_hour.get(), c.num_jobs, seed)?
        }
        WorkloadKind::Helios(h) => {
            let (mut jobs, tally) = helios::read(path, h)?;
            tally.log(path);
            if let Some(rate) = h.jobs_per_hour {
                philly::retime(&mut jobs, rate.get(), seed);
            }
            jobs
        }
        WorkloadKind::Openb(k) => {
            let nodes = match &k.nodes {
                Some(n) => section.resolve_path(n),
                None => path.with_file_name(openb::NODE_LIST),
            };
            let (jobs, tally) = openb::read(path, &nodes)?;
            tally.log(path);
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
                philly::retime(&mut jobs, rate.get(), seed);
            }
            jobs
        }
    };
    common_keys(section, &cfg, seed, jobs)
}

/// A Pollux-format workload: each job's throughput profiles from `traces_dir`
/// (default: beside the workload), per GPU type for `cluster`'s types where
/// the profiles are typed.
fn read_pollux(
    section: &Section,
    path: &Path,
    p: &PolluxKeys,
    cluster: Option<&blox_core::ClusterState>,
) -> Result<Vec<SimJob>, WorkloadError> {
    let traces = match &p.traces_dir {
        Some(d) => section.resolve_path(d),
        None => blox_goodput::profiles_beside(path),
    };
    let opt = pollux::PolluxOptions {
        profile_driven: p.model == ProgressModel::Profile,
        agent_pollux: p.batch_agent == AgentKind::Pollux,
        batch_search: p.batch_search.unwrap_or_default(),
        fit_tol: p.fit_tol.map(|t| t.get()),
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
        Ok(sia::read_workload(
            &CsvTable::read(path)?,
            &mut cache,
            &types,
            opt,
        )?)
    } else {
        Ok(pollux::read_workload(&CsvTable::read(path)?, &traces, opt)?)
    }
}

/// The `[workload]` keys every kind has, applied to its jobs: `num_jobs`,
/// convergence, `force_gpus`, bursts and models.
fn common_keys(
    section: &Section,
    cfg: &WorkloadConfig,
    seed: u64,
    mut jobs: Vec<SimJob>,
) -> Result<Vec<SimJob>, WorkloadError> {
    let (c, path) = (&cfg.common, &cfg.path);
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
    converge(section, c, seed, &mut jobs)?;
    if let Some(g) = c.force_gpus {
        for j in &mut jobs {
            j.spec.requested_gpus = g;
        }
    }
    bursts(section, cfg, seed, &mut jobs)?;
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

/// `converge_fraction` of the jobs converge at `converge_at` of their work.
fn converge(
    section: &Section,
    c: &CommonKeys,
    seed: u64,
    jobs: &mut [SimJob],
) -> Result<(), WorkloadError> {
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
        for j in jobs.iter_mut() {
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
    Ok(())
}

/// Bursts of short jobs added every `burst_every_s`, or an error naming a
/// burst key given without it.
fn bursts(
    section: &Section,
    cfg: &WorkloadConfig,
    seed: u64,
    jobs: &mut Vec<SimJob>,
) -> Result<(), WorkloadError> {
    let c = &cfg.common;
    if let Some(every) = c.burst_every_s.map(Positive::get) {
        let length = c
            .burst_length_s
            .map(Positive::get)
            .ok_or_else(|| section.error_at("burst_every_s", "bursts need `burst_length_s` too"))?;
        let rate = c
            .burst_jobs_per_hour
            .map(Positive::get)
            .or(cfg.kind.jobs_per_hour())
            .ok_or_else(|| {
                section.error_at("burst_every_s", "bursts need `burst_jobs_per_hour`")
            })?;
        let (lo, hi) = (
            c.burst_min_duration_s.map_or(600.0, Positive::get),
            c.burst_max_duration_s.map_or(3600.0, Positive::get),
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
        add_bursts(jobs, every, length, rate, (lo, hi), seed);
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
    Ok(())
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
) -> Result<host_profile::HostProfiles, WorkloadError> {
    let cfg = WorkloadConfig::from_section(section)?;
    let Some(rel) = cfg.common.host_profiles.as_ref() else {
        return Ok(Default::default());
    };
    let path = section.resolve_path(rel);
    let profiles = host_profile::read(&path)?;
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
