//! # blox-client
//!
//! The library a training job links to run under a blox worker: it reads the
//! job's environment, checks its lease at every iteration boundary *with the
//! local worker only* (optimistic renewal: a lease is valid until the worker
//! revokes it; there is no round-trip to the scheduler — Blox, EuroSys'24, §7
//! "Leases for Preemption"), and pushes key→value metrics.
//!
//! The worker writes a per-launch *control directory* (`BLOX_CONTROL_DIR`)
//! that the job only reads, and the job writes its *report directory*
//! (`BLOX_REPORT_DIR`, inside the control directory; the job's working and
//! home directory) that the worker only reads. Neither writes where the
//! other does, so a job can turn no file operation of its worker's (often
//! root) elsewhere. In the control directory:
//! - `revoked` appears when the lease is revoked (the job should checkpoint and
//!   exit with status 0 at its next iteration boundary);
//! - `batch_size` holds a new global batch size to apply at the next boundary
//!   without a restart (elastic policies such as ONES);
//! - `lease` holds, while the worker can reach the scheduler, until when the
//!   lease holds and the grace after it (`<until_s> <grace_s>`, seconds of
//!   the node's monotonic clock, [`monotonic_s`]), renewed at every
//!   acknowledged heartbeat. A lease that ran out counts as revoked, so a
//!   job stops itself even when its worker hangs (no job runs
//!   twice); past the grace as well, [`Job::attach`]'s watchdog ends the
//!   process (exit status [`LEASE_LOST_EXIT`]). No `lease` file: the lease
//!   holds until revoked (the local backend).
//!
//! In the report directory (the control directory where `BLOX_REPORT_DIR`
//! is unset: a worker older than it):
//! - `metrics` is an append-only log of `key value` lines the worker folds into
//!   the scheduler's metric store; `progress` (0–1) is the job's share of work
//!   done;
//! - `done` is written by [`Job::finish`] when the job completed its work.
//!
//! In the coordination directory (`BLOX_COORD_DIR`, else the report
//! directory):
//! - `exit_at` fixes, for a multi-rank job, the iteration at which every rank
//!   stops after a revocation (two-phase revocation, Blox §7: the first rank
//!   that sees `revoked` at boundary *i* writes *i + 1*; every rank runs up to
//!   that boundary and stops there, so all ranks checkpoint the same step).
//!
//! A lease check is one `stat` of a file that does not exist (a few µs; the
//! benchmark is in `docs/PERFORMANCE.md`).

mod lease;
use lease::spawn_watchdog;
pub use lease::{monotonic_s, read_lease, LEASE_FILE, LEASE_LOST_EXIT};

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Names of the environment variables a worker sets for a job.
pub mod env {
    pub const JOB_ID: &str = "BLOX_JOB_ID";
    pub const RANK: &str = "BLOX_RANK";
    pub const WORLD_SIZE: &str = "BLOX_WORLD_SIZE";
    pub const VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
    pub const MASTER_ADDR: &str = "BLOX_MASTER_ADDR";
    pub const WORKER_ADDR: &str = "BLOX_WORKER_ADDR";
    pub const CHECKPOINT_DIR: &str = "BLOX_CHECKPOINT_DIR";
    /// The launch's control directory: the worker writes it (`lease`,
    /// `revoked`, `batch_size`), the job only reads it.
    pub const CONTROL_DIR: &str = "BLOX_CONTROL_DIR";
    /// The launch's report directory: the job writes it (`metrics`,
    /// `done`), the worker only reads it. Unset: the control directory.
    pub const REPORT_DIR: &str = "BLOX_REPORT_DIR";
    /// Where the ranks of a job that spans nodes agree on their exit
    /// iteration (`exit_at`): a directory on storage every node shares.
    /// Unset: the report directory (all ranks on one node).
    pub const COORD_DIR: &str = "BLOX_COORD_DIR";
    pub const RESUME: &str = "BLOX_RESUME";
    pub const BATCH_SIZE: &str = "BLOX_BATCH_SIZE";
    /// When the worker started this process, Unix seconds (fractional): the
    /// job's start-up is measured from here to its first iteration.
    pub const LAUNCH_UNIX_S: &str = "BLOX_LAUNCH_UNIX_S";
    /// This launch's generation: launches of a job get ever larger ones,
    /// also across scheduler restarts. Checkpoints are written per
    /// generation and the newest complete one is restored, so a launch that
    /// lost its lease (a worker cut off from the scheduler) cannot overwrite
    /// a newer launch's checkpoint. Unset or 0: plain checkpoint files.
    pub const GENERATION: &str = "BLOX_GENERATION";
    /// Thousandths of its one GPU a launch that shares the GPU holds
    /// (unset: its GPUs whole).
    pub const GPU_MILLI: &str = "BLOX_GPU_MILLI";
    /// CUDA MPS's share of the GPU's threads, percent (set with
    /// [`GPU_MILLI`]).
    pub const MPS_THREAD_PERCENTAGE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
    /// CUDA MPS's device memory limit (`0=<MiB>M`; set with [`GPU_MILLI`]
    /// where the worker knows the GPU's memory).
    pub const MPS_PINNED_MEM_LIMIT: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
}

/// The metric a job pushes once per launch, at its first iteration boundary:
/// seconds from its launch to there (imports, device initialisation,
/// checkpoint restore). The scheduler protects a launch from preemption until
/// it has reported it and then run `[run] min_run_s` more.
pub const STARTUP_METRIC: &str = "startup_s";

/// The metric [`Job::save_checkpoint`] pushes (rank 0): seconds from the
/// launch to the checkpoint just saved. A job that saves only every so often
/// (`checkpoint_interval_s`) then loses, when stopped, only the work since.
pub const CHECKPOINT_METRIC: &str = "checkpoint_s";

/// What can go wrong reading the environment or talking to the worker.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("environment variable {name} is not set (is this job running under a blox worker?)")]
    Missing { name: &'static str },
    #[error("environment variable {name} = `{value}`: {message}")]
    Bad {
        name: &'static str,
        value: String,
        message: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A job's view of its launch, from the environment the worker set.
#[derive(Clone, Debug, PartialEq)]
pub struct JobEnv {
    pub job_id: u64,
    pub rank: u32,
    pub world_size: u32,
    /// GPU indices on this node (`CUDA_VISIBLE_DEVICES`); empty for logical GPUs
    /// that have no device.
    pub devices: Vec<String>,
    pub master_addr: Option<String>,
    pub worker_addr: Option<String>,
    pub checkpoint_dir: PathBuf,
    pub control_dir: PathBuf,
    /// Where the job writes its metrics and `done` (`BLOX_REPORT_DIR`, else
    /// the control directory).
    pub report_dir: PathBuf,
    /// Where ranks agree on the exit iteration (`BLOX_COORD_DIR`, else the
    /// report directory).
    pub coord_dir: PathBuf,
    /// True when a checkpoint from an earlier launch should be restored.
    pub resume: bool,
    /// Global batch size chosen by the scheduler, if any.
    pub batch_size: Option<u32>,
    /// When the worker started the process, Unix seconds.
    pub launch_unix_s: Option<f64>,
    /// This launch's generation ([`env::GENERATION`]); 0: unknown.
    pub generation: u64,
    /// Thousandths of its one GPU, when it shares the GPU with other jobs
    /// ([`env::GPU_MILLI`]; CUDA MPS's variables say the same); `None`:
    /// its GPUs are its own.
    pub gpu_milli: Option<u32>,
}

impl JobEnv {
    /// Reads the environment of this process.
    pub fn from_env() -> Result<Self, ClientError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the variables through `get` (tests, wrappers).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ClientError> {
        let need = |name: &'static str| get(name).ok_or(ClientError::Missing { name });
        let num = |name: &'static str, v: String| {
            v.trim().parse::<u64>().map_err(|e| ClientError::Bad {
                name,
                value: v.clone(),
                message: e.to_string(),
            })
        };
        // Ranks, world sizes and batch sizes are 32-bit: a larger value is
        // an error, never cut down.
        let num32 = |name: &'static str, v: String| {
            v.trim().parse::<u32>().map_err(|e| ClientError::Bad {
                name,
                value: v.clone(),
                message: e.to_string(),
            })
        };
        let job_id = num(env::JOB_ID, need(env::JOB_ID)?)?;
        let rank = get(env::RANK)
            .map(|v| num32(env::RANK, v))
            .transpose()?
            .unwrap_or(0);
        let world_size = get(env::WORLD_SIZE)
            .map(|v| num32(env::WORLD_SIZE, v))
            .transpose()?
            .unwrap_or(1);
        if world_size == 0 || rank >= world_size {
            return Err(ClientError::Bad {
                name: env::RANK,
                value: rank.to_string(),
                message: format!("must be below {} = {world_size}", env::WORLD_SIZE),
            });
        }
        let batch_size = get(env::BATCH_SIZE)
            .filter(|v| !v.is_empty())
            .map(|v| num32(env::BATCH_SIZE, v))
            .transpose()?;
        let gpu_milli = get(env::GPU_MILLI)
            .filter(|v| !v.is_empty())
            .map(|v| num32(env::GPU_MILLI, v))
            .transpose()?;
        Ok(JobEnv {
            job_id,
            rank,
            world_size,
            devices: get(env::VISIBLE_DEVICES)
                .map(|v| {
                    v.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            master_addr: get(env::MASTER_ADDR),
            worker_addr: get(env::WORKER_ADDR),
            checkpoint_dir: PathBuf::from(need(env::CHECKPOINT_DIR)?),
            control_dir: PathBuf::from(need(env::CONTROL_DIR)?),
            report_dir: get(env::REPORT_DIR)
                .filter(|v| !v.is_empty())
                .or_else(|| get(env::CONTROL_DIR))
                .map(PathBuf::from)
                .unwrap_or_default(),
            coord_dir: get(env::COORD_DIR)
                .filter(|v| !v.is_empty())
                .or_else(|| get(env::REPORT_DIR).filter(|v| !v.is_empty()))
                .or_else(|| get(env::CONTROL_DIR))
                .map(PathBuf::from)
                .unwrap_or_default(),
            resume: get(env::RESUME).is_some_and(|v| v == "1" || v == "true"),
            batch_size,
            gpu_milli,
            generation: get(env::GENERATION)
                .filter(|v| !v.is_empty())
                .map(|v| num(env::GENERATION, v))
                .transpose()?
                .unwrap_or(0),
            launch_unix_s: match get(env::LAUNCH_UNIX_S).filter(|v| !v.is_empty()) {
                None => None,
                Some(v) => Some(
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|t| t.is_finite() && *t >= 0.0)
                        .ok_or_else(|| ClientError::Bad {
                            name: env::LAUNCH_UNIX_S,
                            value: v.clone(),
                            message: "expected Unix seconds".into(),
                        })?,
                ),
            },
        })
    }
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The current file of checkpoint `base` (`<checkpoint_dir>/<name>`, or
/// `<name>.rank<r>`): its newest generation, or the plain file. For tools
/// and tests that read a job's checkpoint from outside the job.
pub fn latest_checkpoint(base: &Path) -> Option<PathBuf> {
    generations(base)
        .into_iter()
        .max_by_key(|(g, _)| *g)
        .map(|(_, p)| p)
}

/// The files of checkpoint `base`: the plain file (generation 0) and every
/// `<base>.gen-<G>`, with their generations.
fn generations(base: &Path) -> Vec<(u64, PathBuf)> {
    let mut out = Vec::new();
    if base.is_file() {
        out.push((0, base.to_path_buf()));
    }
    let (Some(dir), Some(stem)) = (base.parent(), base.file_name().and_then(|n| n.to_str())) else {
        return out;
    };
    let prefix = format!("{stem}.gen-");
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let Some(g) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|g| g.parse::<u64>().ok())
        else {
            continue;
        };
        out.push((g, e.path()));
    }
    out
}

/// The running job: lease checks, metrics, checkpoints.
pub struct Job {
    pub env: JobEnv,
    revoked: PathBuf,
    lease: PathBuf,
    /// The lease's end as last read (re-read only once it is reached).
    lease_until: std::cell::Cell<Option<f64>>,
    /// Stops the lease watchdog when the job is dropped.
    watchdog: std::sync::Arc<std::sync::atomic::AtomicBool>,
    batch_file: PathBuf,
    metrics: File,
    /// Global batch size in use (starts at the launch's).
    batch: std::cell::Cell<Option<u32>>,
    /// Whether this launch's start-up was reported.
    started: std::cell::Cell<bool>,
}

impl Job {
    /// Attaches to the worker's control directory.
    pub fn attach(env: JobEnv) -> Result<Self, ClientError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ClientError::Io { path, source }
        };
        std::fs::create_dir_all(&env.checkpoint_dir).map_err(io(&env.checkpoint_dir))?;
        let mpath = env.report_dir.join("metrics");
        let metrics = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&mpath)
            .map_err(io(&mpath))?;
        let lease = env.control_dir.join(LEASE_FILE);
        let watchdog = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        spawn_watchdog(lease.clone(), watchdog.clone());
        Ok(Job {
            batch: std::cell::Cell::new(env.batch_size),
            started: std::cell::Cell::new(false),
            lease,
            lease_until: std::cell::Cell::new(None),
            watchdog,
            revoked: env.control_dir.join("revoked"),
            batch_file: env.control_dir.join("batch_size"),
            metrics,
            env,
        })
    }

    /// From this process's environment.
    pub fn from_env() -> Result<Self, ClientError> {
        Self::attach(JobEnv::from_env()?)
    }

    /// True once the worker revoked the lease, or the lease ran out (the
    /// worker could not renew it): checkpoint and exit (status 0).
    pub fn lease_revoked(&self) -> bool {
        self.revoked.exists() || self.lease_expired()
    }

    /// True once the worker's lease file says the lease ran out. One clock
    /// read while the last end read is ahead; the file is read again only
    /// once it is reached.
    pub fn lease_expired(&self) -> bool {
        let Some(now) = monotonic_s() else {
            return false;
        };
        if self.lease_until.get().is_some_and(|u| now < u) {
            return false;
        }
        match read_lease(&self.lease) {
            Some((until, _)) => {
                self.lease_until.set(Some(until));
                now >= until
            }
            None => false,
        }
    }

    /// A new global batch size to apply now, if the scheduler sent one.
    pub fn new_batch_size(&self) -> Option<u32> {
        let v = std::fs::read_to_string(&self.batch_file).ok()?;
        let b = v.trim().parse().ok()?;
        (Some(b) != self.batch.get()).then_some(b)
    }

    /// Records that the batch size in use is now `b`.
    pub fn applied_batch_size(&self, b: u32) {
        self.batch.set(Some(b));
    }

    /// Pushes one metric (appended to the worker's log; read each round).
    pub fn push_metric(&self, key: &str, value: f64) -> Result<(), ClientError> {
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(ClientError::Bad {
                name: "metric key",
                value: key.to_string(),
                message: "keys are non-empty and have no whitespace".into(),
            });
        }
        writeln!(&self.metrics, "{key} {value}").map_err(|source| ClientError::Io {
            path: self.env.report_dir.join("metrics"),
            source,
        })
    }

    /// Reports that start-up is over: the job is at its first iteration
    /// boundary. Pushes [`STARTUP_METRIC`] (seconds since the worker started
    /// the process) once per launch, from rank 0; later calls do nothing.
    /// [`Job::iterate`] calls it before the first iteration, so a job that
    /// iterates through it need not. Returns the start-up, if measured.
    pub fn report_started(&self) -> Result<Option<f64>, ClientError> {
        if self.started.replace(true) {
            return Ok(None);
        }
        let startup = self.startup_so_far().unwrap_or(0.0);
        if self.env.rank == 0 {
            self.push_metric(STARTUP_METRIC, startup)?;
        }
        Ok(Some(startup))
    }

    /// Seconds since the worker started this process, if it said when.
    pub fn startup_so_far(&self) -> Option<f64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs_f64();
        self.env.launch_unix_s.map(|t| (now - t).max(0.0))
    }

    /// The checkpoint file `name` of this job (rank-specific for rank > 0).
    pub fn checkpoint_path(&self, name: &str) -> PathBuf {
        if self.env.rank == 0 {
            self.env.checkpoint_dir.join(name)
        } else {
            self.env
                .checkpoint_dir
                .join(format!("{name}.rank{}", self.env.rank))
        }
    }

    /// Saves `bytes` as checkpoint `name` atomically (write, then rename).
    ///
    /// With a generation (every launch by a blox worker has one) the file
    /// is `<name>[.rank<r>].gen-<G>`, and older generations' files are
    /// removed after it is in place: a stale launch still writing (its
    /// worker cut off from the scheduler) never replaces a newer launch's
    /// checkpoint, since [`Job::load_checkpoint`] restores the newest.
    pub fn save_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<(), ClientError> {
        let base = self.checkpoint_path(name);
        let g = self.env.generation;
        let path = if g == 0 {
            base.clone()
        } else {
            with_suffix(&base, &format!(".gen-{g}"))
        };
        // Each rank and generation has its own temporary file.
        let tmp = with_suffix(&path, ".tmp");
        // Durable before it replaces anything (a node may crash right after).
        File::create(&tmp)
            .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|source| ClientError::Io {
                path: path.clone(),
                source,
            })?;
        if g > 0 {
            for (older, file) in generations(&base) {
                if older < g {
                    let _ = std::fs::remove_file(file);
                }
            }
        }
        match self.startup_so_far() {
            Some(at) if self.env.rank == 0 => self.push_metric(CHECKPOINT_METRIC, at),
            _ => Ok(()),
        }
    }

    /// Checkpoint `name` from an earlier launch, if resuming and one exists:
    /// the newest generation up to this launch's (any, without one).
    pub fn load_checkpoint(&self, name: &str) -> Option<Vec<u8>> {
        if !self.env.resume {
            return None;
        }
        let g = self.env.generation;
        let mut found = generations(&self.checkpoint_path(name));
        found.retain(|(k, _)| g == 0 || *k <= g);
        found.sort_by_key(|(k, _)| *k);
        found
            .into_iter()
            .rev()
            .find_map(|(_, p)| std::fs::read(p).ok())
    }

    /// Tells the worker the job completed its work (then exit with status 0).
    pub fn finish(&self) -> Result<(), ClientError> {
        let path = self.env.report_dir.join("done");
        std::fs::write(&path, b"").map_err(|source| ClientError::Io { path, source })
    }

    /// Wraps `iter`: yields items while the lease holds; stops at the first
    /// boundary after a revocation ([`LeaseIter::revoked`] then says so).
    pub fn iterate<I: Iterator>(&self, iter: I) -> LeaseIter<'_, I> {
        LeaseIter {
            job: self,
            inner: iter,
            stopped: false,
            step: 0,
        }
    }

    /// The agreed exit boundary of a multi-rank job, if one is fixed.
    fn exit_at(&self) -> Option<u64> {
        let v = std::fs::read_to_string(self.env.coord_dir.join("exit_at")).ok()?;
        v.trim().parse().ok()
    }

    /// Proposes `step` as the exit boundary; the first proposal wins
    /// (written to a private file, then linked into place atomically).
    fn propose_exit_at(&self, step: u64) -> Option<u64> {
        let dir = &self.env.coord_dir;
        let tmp = dir.join(format!("exit_at.rank{}", self.env.rank));
        if std::fs::write(&tmp, step.to_string()).is_ok() {
            let _ = std::fs::hard_link(&tmp, dir.join("exit_at"));
            let _ = std::fs::remove_file(&tmp);
        }
        self.exit_at()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.watchdog
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// An iterator that ends when the lease is revoked.
pub struct LeaseIter<'a, I> {
    job: &'a Job,
    inner: I,
    stopped: bool,
    /// Iterations yielded so far in this launch (the next boundary).
    step: u64,
}

impl<I> LeaseIter<'_, I> {
    /// True if iteration ended because the lease was revoked.
    pub fn revoked(&self) -> bool {
        self.stopped
    }
}

impl<I: Iterator> Iterator for LeaseIter<'_, I> {
    type Item = I::Item;
    fn next(&mut self) -> Option<I::Item> {
        if self.stopped {
            return None;
        }
        if self.job.env.world_size <= 1 {
            if self.job.lease_revoked() {
                self.stopped = true;
                return None;
            }
        } else {
            let exit = match self.job.exit_at() {
                Some(e) => Some(e),
                None if self.job.lease_revoked() => self.job.propose_exit_at(self.step + 1),
                None => None,
            };
            if exit.is_some_and(|e| self.step >= e) {
                self.stopped = true;
                return None;
            }
        }
        if self.step == 0 {
            // The first boundary: start-up is over (a failed write only
            // loses the measurement; the job goes on).
            let _ = self.job.report_started();
        }
        self.step += 1;
        self.inner.next()
    }
}

#[cfg(test)]
mod tests;
