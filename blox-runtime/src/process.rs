//! Job processes on one machine: what the local backend and every worker
//! manager share.
//!
//! A launch of a job runs its argv directly (never through a shell), as one
//! process holding all its GPUs on this machine or one process per GPU, with
//! the environment of [`blox_client::env`]. It gets a control directory
//! that the worker writes and the job only reads (`lease`, `revoked`,
//! `batch_size`, and the job's `stdout`/`stderr`), a report directory
//! inside it that the job writes and the worker only reads (`metrics`,
//! `done`; the job's home and working directory), and a checkpoint
//! directory shared by all its launches. Every directory is made and every
//! file read or written through [`crate::safe_fs`], so a link or a name a
//! job plants in a directory it can write turns no file operation of the
//! worker's elsewhere. A waiter thread per process records when it exits.
//!
//! On Linux every job process gets `SIGKILL` when the process that started
//! it dies, so a worker that is killed takes its jobs with it (nothing keeps
//! writing a checkpoint that the job's next launch, elsewhere, reads).
//!
//! Each process starts its own process group (on Unix), and the group is
//! what is killed: a cancel, a revocation past its grace or a failed rank
//! ends whatever the job forked too, and when a job's process exits, what it
//! left running in its group is killed before the process is reaped (the
//! zombie keeps the group's id from being reused meanwhile). On Linux the
//! group is led by a small *guardian* (the forked child, before it would
//! `exec`: `guard`) that forks the job and waits for it: when the worker
//! dies, even by `SIGKILL`, the guardian kills the whole group, so nothing
//! the job forked outlives its worker. What a job moves into a process
//! group of its own (`setsid`) is beyond this; a cgroup per launch would
//! hold that too.

use crate::safe_fs::{Dir, Trust};
use blox_client::env;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What to run for one launch (or one node's part of it).
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub job: u64,
    pub argv: Vec<String>,
    /// This machine's device indices (`CUDA_VISIBLE_DEVICES`).
    pub devices: Vec<String>,
    pub control: PathBuf,
    pub checkpoint: PathBuf,
    /// Shared directory where the ranks of a job spanning nodes agree on
    /// their exit iteration; `None`: the control directory.
    pub coord: Option<PathBuf>,
    pub resume: bool,
    pub batch_size: Option<u32>,
    pub master_addr: String,
    pub worker_addr: String,
    /// One process per device instead of one with every device.
    pub process_per_gpu: bool,
    /// Rank of the first process started here.
    pub first_rank: u32,
    /// Processes in the whole job; `None`: those started here.
    pub world_size: Option<u32>,
    /// The launch's generation (`BLOX_GENERATION`): larger for every later
    /// launch of the job, also across scheduler restarts.
    pub generation: u64,
    /// The account the job runs as (`blox worker --job-user`); `None`: the
    /// worker's own.
    pub job_user: Option<JobUser>,
    /// The worker's lease (until, grace), where it holds one: written to the
    /// control directory before any process starts, and checked again in
    /// each forked process before `exec`. A worker stopped (hung) while it
    /// started the launch thereby starts no job once it wakes past its
    /// lease, and one started just before holds a lease that runs out.
    pub lease: Option<(std::time::Instant, std::time::Duration)>,
    /// Variables of the worker's environment passed to the job beyond the
    /// allow-list ([`passed_env`]; `[worker] pass_env`).
    pub pass_env: Vec<String>,
    /// The `cgroup.procs` files of the launch's cgroups: each process
    /// joins them before anything of the job's runs (empty: none).
    pub cgroup_procs: Vec<std::ffi::CString>,
    /// Its share of its one GPU, when it shares the GPU with other launches.
    pub share: Option<GpuShareEnv>,
}

/// What a launch that shares its GPU is told of its share, in the
/// variables CUDA MPS reads (an MPS control daemon on the node enforces
/// them; without one they are advice the job may read).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuShareEnv {
    /// Thousandths of the GPU (`BLOX_GPU_MILLI`).
    pub milli: u32,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: the share in percent, rounded
    /// up (1-100).
    pub thread_percentage: u32,
    /// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, MiB of device 0 (the one GPU it
    /// sees): that part of the GPU's memory; `None` when the worker does
    /// not know the GPU's memory (logical GPUs).
    pub memory_mib: Option<u64>,
}

impl GpuShareEnv {
    /// The variables of a share of `milli` thousandths of a GPU of
    /// `memory_gb` GB (0: unknown).
    pub fn of(milli: u32, memory_gb: f64) -> Self {
        let milli = milli.clamp(1, blox_core::GPU_MILLI);
        let mib = memory_gb * 1024.0 * f64::from(milli) / f64::from(blox_core::GPU_MILLI);
        GpuShareEnv {
            milli,
            thread_percentage: milli.div_ceil(10),
            memory_mib: (memory_gb > 0.0 && mib.is_finite()).then(|| (mib.floor() as u64).max(1)),
        }
    }

    /// The variables and their values.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (env::GPU_MILLI, self.milli.to_string()),
            (
                env::MPS_THREAD_PERCENTAGE,
                self.thread_percentage.to_string(),
            ),
        ];
        if let Some(m) = self.memory_mib {
            v.push((env::MPS_PINNED_MEM_LIMIT, format!("0={m}M")));
        }
        v
    }
}

/// The report directory's name inside a launch's control directory
/// ([`blox_client::env::REPORT_DIR`]).
pub const REPORT_DIR: &str = "job";

/// The lease file's text: `until` and `grace` in seconds of the node's
/// monotonic clock.
fn lease_text(until: Instant, grace: Duration) -> Option<String> {
    let now = blox_client::monotonic_s()?;
    let left = until
        .saturating_duration_since(Instant::now())
        .as_secs_f64();
    Some(format!("{:.3} {:.3}\n", now + left, grace.as_secs_f64()))
}

/// An unprivileged account jobs run as (`blox worker --job-user NAME`): it
/// cannot read the worker's token file (0600, the worker's), its
/// `/proc/<pid>/environ` or memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Set only where it is the account's own home (`--job-user`); a uid
    /// of its own (`--job-uids`) gets the launch's report directory.
    pub home: Option<PathBuf>,
    /// The uids whose files in the job's checkpoint directory become this
    /// launch's (`--job-uids`: the range; earlier launches of the job ran
    /// as other uids of it); `None`: only the directory itself changes
    /// owner.
    pub takes_over: Option<(u32, u32)>,
}

impl JobUser {
    /// Looks the account up in the system's user database.
    pub fn lookup(name: &str) -> Result<JobUser, String> {
        #[cfg(unix)]
        {
            use std::ffi::{CStr, CString};
            let c = CString::new(name)
                .map_err(|_| format!("job user `{name}`: contains a NUL byte"))?;
            let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
            let mut buf = vec![0 as libc::c_char; 16 * 1024];
            let mut out: *mut libc::passwd = std::ptr::null_mut();
            // SAFETY: every pointer is valid for the call; `buf` outlives
            // the reads of `pw`'s strings below.
            let rc = unsafe {
                libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out)
            };
            if rc != 0 || out.is_null() {
                return Err(format!(
                    "job user `{name}`: no such account on this node{}",
                    if rc != 0 {
                        format!(" ({})", std::io::Error::from_raw_os_error(rc))
                    } else {
                        String::new()
                    }
                ));
            }
            if pw.pw_uid == 0 {
                return Err(format!(
                    "job user `{name}` is root: jobs must run unprivileged"
                ));
            }
            // SAFETY: getpwnam_r filled `pw_dir` with a NUL-terminated
            // string inside `buf`.
            let home = unsafe { CStr::from_ptr(pw.pw_dir) }
                .to_string_lossy()
                .into_owned();
            Ok(JobUser {
                name: name.to_string(),
                uid: pw.pw_uid,
                gid: pw.pw_gid,
                home: Some(PathBuf::from(home)),
                takes_over: None,
            })
        }
        #[cfg(not(unix))]
        {
            Err(format!(
                "job user `{name}`: only Unix runs jobs as another account"
            ))
        }
    }
}

/// Whether the worker's environment variable `name` reaches a job: an
/// allow-list, so a secret set for the worker (a cloud or registry
/// credential) reaches no job. A job gets `PATH`, `HOME`, `USER`,
/// `LOGNAME`, `LANG`, `LANGUAGE`, `LC_*`, `TZ`, the GPU variables (`CUDA_*`,
/// `NVIDIA_*`, `ROCR_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`,
/// `GPU_DEVICE_ORDINAL`), and what the operator passes (`[worker]
/// pass_env`: names, or prefixes ending in `*`); never the worker's own
/// `BLOX_*` settings (its token file, its scheduler), as a job gets the
/// `BLOX_*` variables of [`blox_client::env`] set afresh.
pub fn passed_env(name: &str, pass_env: &[String]) -> bool {
    if name.starts_with("BLOX_") {
        return false;
    }
    matches!(
        name,
        "PATH"
            | "HOME"
            | "USER"
            | "LOGNAME"
            | "LANG"
            | "LANGUAGE"
            | "TZ"
            | "ROCR_VISIBLE_DEVICES"
            | "HIP_VISIBLE_DEVICES"
            | "GPU_DEVICE_ORDINAL"
    ) || name.starts_with("LC_")
        // (CUDA MPS's two limits are a sharing launch's own: never the
        // worker's, which a whole-GPU job would otherwise inherit. Its pipe
        // and log directories pass.)
        || (name.starts_with("CUDA_")
            && name != env::MPS_THREAD_PERCENTAGE
            && name != env::MPS_PINNED_MEM_LIMIT)
        || name.starts_with("NVIDIA_")
        || pass_env.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        })
}

/// Checks a `pass_env` entry: a variable name (letters, digits, `_`), or
/// a prefix of one ending in `*`; never a `BLOX_*` variable (the worker's
/// own settings; a job's are set afresh).
pub fn check_pass_env(entry: &str) -> Result<(), String> {
    let name = entry.strip_suffix('*').unwrap_or(entry);
    if name.is_empty() && entry.ends_with('*') {
        return Err(format!(
            "`{entry}` would pass the worker's whole environment: name the variables jobs need"
        ));
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "`{entry}` is not a variable name (letters, digits and `_`, or a prefix ending in `*`)"
        ));
    }
    if name.starts_with("BLOX_") || "BLOX_".starts_with(name) {
        return Err(format!(
            "`{entry}` names the worker's own BLOX_* settings (its token file, its scheduler): a job never gets them; its own BLOX_* variables are set for it"
        ));
    }
    Ok(())
}

/// How a launch (or one of its processes) ended.
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    pub at: Instant,
    /// Exit status; `None` when killed by a signal (or it could not be waited on).
    pub code: Option<i32>,
}

struct Rank {
    exit: Arc<Mutex<Option<Exit>>>,
    kill: Arc<AtomicBool>,
}

/// The most bytes of the job's `metrics` read in one poll, and the longest
/// line taken (a longer one is skipped).
const METRICS_READ_BYTES: usize = 1 << 20;
const METRIC_LINE_BYTES: usize = 4096;

/// A running launch: its processes and its directories.
pub struct Running {
    /// The control directory's path (messages).
    pub control: PathBuf,
    /// The control directory (the worker's; the job reads it) and the
    /// report directory (the job's; the worker reads it).
    control_dir: Dir,
    report: Dir,
    /// The uid the job runs as, when not the worker's: a file the worker
    /// reads from it must be that uid's own.
    owner: Option<u32>,
    /// The directories given to the job (report, checkpoint, coordination),
    /// taken back by [`Running::hand_back`].
    given: Vec<Dir>,
    /// Those of `given` that the launch's parts on other workers share
    /// were moved out ([`Running::keep_shared`]): the control directory
    /// still lists them ([`GIVEN_FILE`]) until they are taken back.
    kept_shared: bool,
    ranks: Vec<Rank>,
    metrics_offset: u64,
    /// Why a file the job gave the worker to read was refused (a link, a
    /// FIFO, another's file): the launch is ended for it, as the job's
    /// fault ([`Running::refusal`]).
    refusal: std::sync::Mutex<Option<String>>,
}

/// Why a launch could not start: the job's fault (a missing program, a
/// tree it made that cannot be handed over), so it is retried and then
/// fails with this reason, or the node's (`node`: its directories cannot
/// be made safely), which is not held against the job.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StartError {
    pub message: String,
    pub node: bool,
    /// Trying again cannot help: its program does not exist or is not
    /// executable (the job fails at once).
    pub permanent: bool,
}

impl StartError {
    pub fn job(message: impl Into<String>) -> StartError {
        StartError {
            message: message.into(),
            node: false,
            permanent: false,
        }
    }
    pub fn node(message: impl Into<String>) -> StartError {
        StartError {
            message: message.into(),
            node: true,
            permanent: false,
        }
    }
}

/// `path`'s parent and last component.
fn split(path: &Path) -> Result<(PathBuf, &str), StartError> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        StartError::node(format!(
            "{}: not a directory a launch can use",
            path.display()
        ))
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name))
}

/// The job's own directory at `path` (checkpoint, coordination): its
/// parent reached safely (and made where missing), the directory itself
/// made where missing, never through a link.
fn job_dir(path: &Path, trust: Trust) -> Result<Dir, StartError> {
    let (parent, name) = split(path)?;
    Dir::open(&parent, true, trust)
        .and_then(|p| p.subdir(name, 0o700, false))
        .map_err(StartError::node)
}

/// Gives the job's directory `d` to its account (0700): with `takes_over`,
/// what earlier launches of the job left in it as other job uids too,
/// unless the directory's group says the last launch ran as this uid
/// already (see [`Running::hand_back`]).
fn give(d: &Dir, u: &JobUser) -> Result<(), StartError> {
    let st = d.stat().map_err(StartError::node)?;
    match u.takes_over {
        Some((first, last)) if st.st_gid != u.gid => {
            let n = d
                .chown_tree(u.uid, u.gid, &|x| (first..=last).contains(&x))
                .map_err(|e| {
                    StartError::job(format!("cannot give the job its checkpoints: {e}"))
                })?;
            tracing::debug!(dir = %d.path().display(), uid = u.uid, entries = n, "handed over");
        }
        _ => d
            .chown(Some(u.uid), Some(u.gid))
            .map_err(StartError::node)?,
    }
    d.chmod(0o700).map_err(StartError::node)
}

impl Running {
    /// Creates the directories and starts the processes.
    pub fn spawn(spec: &LaunchSpec) -> Result<Running, StartError> {
        if spec.argv.is_empty() || spec.argv[0].is_empty() {
            return Err(StartError::job("no command to run"));
        }
        let user = spec.job_user.as_ref();
        // Jobs that run as another uid may plant links where the worker
        // works: every directory on the way is checked then.
        let trust = match user {
            Some(u) => Trust::Strict {
                uids: u.takes_over.unwrap_or((u.uid, u.uid)),
                gids: u.takes_over.unwrap_or((u.gid, u.gid)),
            },
            None => Trust::Same,
        };
        let (parent, name) = split(&spec.control)?;
        let parent = Dir::open(&parent, true, trust).map_err(StartError::node)?;
        // A launch directory left by a launch the scheduler never recorded
        // (it restarted meanwhile) is not this launch's: its `done` or
        // `revoked` must not speak for it.
        parent.remove(name).map_err(|e| {
            StartError::node(format!("cannot clear the stale launch directory: {e}"))
        })?;
        // The control directory: the worker's, the job's group may read.
        let control_dir = parent.subdir(name, 0o750, true).map_err(StartError::node)?;
        let report = control_dir
            .subdir(REPORT_DIR, 0o700, true)
            .map_err(StartError::node)?;
        let mut running = Running {
            control: spec.control.clone(),
            control_dir,
            report,
            owner: user.map(|u| u.uid),
            given: Vec::new(),
            kept_shared: false,
            ranks: Vec::new(),
            metrics_offset: 0,
            refusal: std::sync::Mutex::new(None),
        };
        match running.start(spec, trust) {
            Ok(()) => Ok(running),
            Err(e) => {
                // Nothing of it runs: what it was given goes back now.
                running.kill();
                if user.is_some() {
                    running.hand_back();
                }
                Err(e)
            }
        }
    }

    /// [`Running::spawn`]'s second half: gives the job its directories,
    /// writes its lease and starts its processes.
    fn start(&mut self, spec: &LaunchSpec, trust: Trust) -> Result<(), StartError> {
        let user = spec.job_user.as_ref();
        if let Some(u) = user {
            self.control_dir
                .chown(None, Some(u.gid))
                .and_then(|_| self.report.chown(Some(u.uid), Some(u.gid)))
                .map_err(StartError::node)?;
        }
        // Each is kept before it is given: a failed hand-over is taken
        // back with the rest. What is given is written down first, for a
        // worker killed before it takes them back (`reclaim`).
        let paths: Vec<&PathBuf> = std::iter::once(&spec.checkpoint)
            .chain(spec.coord.as_ref())
            .collect();
        if let Some(u) = user {
            // The uid first: once the report directory went back (a part
            // of a launch on several workers that ended), its owner no
            // longer says whose the listed directories are.
            let list: String = std::iter::once(format!("{UID_LINE}{}\n", u.uid))
                .chain(paths.iter().map(|p| {
                    format!(
                        "{}\n",
                        std::path::absolute(p)
                            .unwrap_or_else(|_| p.to_path_buf())
                            .display()
                    )
                }))
                .collect();
            self.control_dir
                .write(GIVEN_FILE, list.as_bytes())
                .map_err(|e| {
                    StartError::node(format!(
                        "cannot write {}: {e}",
                        spec.control.join(GIVEN_FILE).display()
                    ))
                })?;
        }
        for path in paths {
            self.given.push(job_dir(path, trust)?);
            if let Some(u) = user {
                give(self.given.last().expect("just pushed"), u)?;
            }
        }
        if let Some((until, grace)) = spec.lease {
            if let Some(text) = lease_text(until, grace) {
                self.control_dir
                    .write(blox_client::LEASE_FILE, text.as_bytes())
                    .map_err(|e| {
                        StartError::node(format!(
                            "cannot write {}: {e}",
                            spec.control.join(blox_client::LEASE_FILE).display()
                        ))
                    })?;
            }
        }
        let report_path = self.report.path().to_path_buf();
        let out = |dir: &Dir, name: &str| -> Result<std::fs::File, StartError> {
            dir.create(name).map_err(|e| {
                StartError::node(format!(
                    "cannot create {}: {e}",
                    spec.control.join(name).display()
                ))
            })
        };
        let groups: Vec<Vec<String>> = if spec.process_per_gpu {
            spec.devices.iter().map(|d| vec![d.clone()]).collect()
        } else {
            vec![spec.devices.clone()]
        };
        let world = spec.world_size.unwrap_or(groups.len() as u32);
        // Start-up is measured from here (the job reports its first
        // iteration against it; `blox_client::STARTUP_METRIC`).
        let launched = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| format!("{:.3}", d.as_secs_f64()))
            .unwrap_or_default();
        for (i, devs) in groups.iter().enumerate() {
            let rank = spec.first_rank + i as u32;
            let suffix = if groups.len() > 1 {
                format!(".rank{rank}")
            } else {
                String::new()
            };
            let mut cmd = Command::new(&spec.argv[0]);
            cmd.env_clear();
            for (k, v) in std::env::vars_os() {
                if k.to_str().is_some_and(|k| passed_env(k, &spec.pass_env)) {
                    cmd.env(k, v);
                }
            }
            cmd.current_dir(&report_path);
            // The account is taken in the forked child (`spawn_child`),
            // after it joined the launch's cgroups, with no supplementary
            // group of the worker's.
            if let Some(u) = user {
                cmd.env("HOME", u.home.as_deref().unwrap_or(&report_path))
                    .env("USER", &u.name)
                    .env("LOGNAME", &u.name);
            }
            cmd.args(&spec.argv[1..])
                .env(env::JOB_ID, spec.job.to_string())
                .env(env::RANK, rank.to_string())
                .env(env::WORLD_SIZE, world.to_string())
                .env(env::VISIBLE_DEVICES, devs.join(","))
                .env(env::MASTER_ADDR, &spec.master_addr)
                .env(env::WORKER_ADDR, &spec.worker_addr)
                .env(env::CHECKPOINT_DIR, &spec.checkpoint)
                .env(env::CONTROL_DIR, &spec.control)
                .env(env::REPORT_DIR, &report_path)
                .env(env::COORD_DIR, spec.coord.as_ref().unwrap_or(&report_path))
                .env(env::RESUME, if spec.resume { "1" } else { "0" })
                .env(env::LAUNCH_UNIX_S, &launched)
                .env(env::GENERATION, spec.generation.to_string())
                .env(
                    env::BATCH_SIZE,
                    spec.batch_size.map(|b| b.to_string()).unwrap_or_default(),
                )
                .stdin(Stdio::null())
                .stdout(out(&self.control_dir, &format!("stdout{suffix}"))?)
                .stderr(out(&self.control_dir, &format!("stderr{suffix}"))?);
            for (k, v) in spec.share.iter().flat_map(GpuShareEnv::vars) {
                cmd.env(k, v);
            }
            match spawn_child(
                cmd,
                spec.lease.map(|l| l.0),
                spec.cgroup_procs.clone(),
                user.map(|u| (u.uid, u.gid)),
            ) {
                Ok(child) => {
                    let exit = Arc::new(Mutex::new(None));
                    let kill = Arc::new(AtomicBool::new(false));
                    spawn_waiter(child, exit.clone(), kill.clone());
                    self.ranks.push(Rank { exit, kill });
                }
                #[cfg(target_os = "linux")]
                Err(e) if e.raw_os_error() == Some(CGROUP_JOIN_FAILED) => {
                    return Err(StartError::node(format!(
                        "cannot put the launch into its cgroup ({})",
                        spec.cgroup_procs
                            .iter()
                            .map(|p| p.to_string_lossy())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                Err(e) => {
                    let mut err =
                        StartError::job(format!("cannot start {}: {e}", argv_summary(&spec.argv)));
                    err.permanent = matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                    );
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// The launch's exit once every process exited: the last exit time, and
    /// status 0 only if every process exited 0. A process that fails takes
    /// the others down.
    pub fn exit(&self) -> Option<Exit> {
        let exits: Vec<Option<Exit>> = self
            .ranks
            .iter()
            .map(|r| *r.exit.lock().expect("not poisoned"))
            .collect();
        if exits.iter().flatten().any(|e| e.code != Some(0)) {
            self.kill();
        }
        let all: Vec<Exit> = exits.into_iter().collect::<Option<_>>()?;
        let at = all.iter().map(|e| e.at).max()?;
        let code = all
            .iter()
            .map(|e| e.code)
            .find(|c| *c != Some(0))
            .unwrap_or(Some(0));
        Some(Exit { at, code })
    }

    /// Kills every process (they are reaped by their waiters).
    pub fn kill(&self) {
        for r in &self.ranks {
            r.kill.store(true, Ordering::Relaxed);
        }
    }

    /// True when the job marked itself done (a plain file `done` of its
    /// own in its report directory) and exited cleanly.
    pub fn finished(&self, exit: &Exit) -> bool {
        exit.code == Some(0) && self.marked_done()
    }

    /// True when the job marked itself done (see [`Running::finished`]); a
    /// `done` that is not the job's plain file is refused
    /// ([`Running::refusal`]).
    pub fn marked_done(&self) -> bool {
        match self.report.open_job_file("done", self.owner) {
            Ok(found) => found.is_some(),
            Err(e) => {
                self.refuse(e);
                false
            }
        }
    }

    /// Why a file of the job's was refused, if one was: the worker ends
    /// the launch, and reports this as its reason (the job's fault).
    pub fn refusal(&self) -> Option<String> {
        self.refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn refuse(&self, why: String) {
        let mut r = self.refusal.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            tracing::warn!(dir = %self.control.display(), "{why}: the launch is ended");
            *r = Some(why);
        }
    }

    /// Tells the job until when its lease holds (the control directory's
    /// `lease`, replaced whole; [`blox_client::LEASE_FILE`]).
    pub fn write_lease(&self, until: Instant, grace: Duration) {
        let Some(text) = lease_text(until, grace) else {
            return;
        };
        if let Err(e) = self
            .control_dir
            .write(blox_client::LEASE_FILE, text.as_bytes())
        {
            tracing::debug!(dir = %self.control.display(), "cannot write the lease file: {e}");
        }
    }

    /// Revokes the lease: the job checkpoints and exits at its next iteration
    /// boundary.
    pub fn revoke(&self) -> std::io::Result<()> {
        self.control_dir.write("revoked", b"")
    }

    /// Revokes the lease and waits for the exit; kills the job once `grace`
    /// has passed.
    pub fn revoke_and_wait(&self, grace: Duration, job: u64) -> Exit {
        if let Err(e) = self.revoke() {
            tracing::warn!(job, "cannot revoke the lease ({e}); killing the job");
            self.kill();
        }
        let deadline = Instant::now() + grace;
        let mut warned = false;
        loop {
            if let Some(e) = self.exit() {
                return e;
            }
            if Instant::now() >= deadline && !warned {
                tracing::warn!(
                    job,
                    "did not exit {:.1} s after revocation; killed",
                    grace.as_secs_f64()
                );
                warned = true;
                self.kill();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits up to `timeout` for every process to exit.
    pub fn wait(&self, timeout: Duration) -> Option<Exit> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.exit() {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Writes a new batch size for the job to apply at its next boundary.
    pub fn set_batch_size(&self, batch_size: u32) -> std::io::Result<()> {
        self.control_dir
            .write("batch_size", batch_size.to_string().as_bytes())
    }

    /// Feeds the metric lines written since the last call to `sink`: at
    /// most 1 MiB a call, from the job's own plain `metrics` file (a link
    /// or another's file is refused: [`Running::refusal`]); a line still being
    /// written is read next time, a malformed one or one over 4 KiB is
    /// logged (cut short) and skipped.
    pub fn read_metrics(&mut self, job: u64, mut sink: impl FnMut(&str, f64)) {
        let chunk = match self.report.read_job_file(
            "metrics",
            self.owner,
            self.metrics_offset,
            METRICS_READ_BYTES,
        ) {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(e) => {
                let _ = job;
                self.refuse(e);
                return;
            }
        };
        let mut rest = &chunk[..];
        // Bad lines are counted and said once a call (the first of them):
        // a job writing millions must not flood the worker's log.
        let (mut bad, mut first_bad) = (0usize, None);
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let line = &rest[..end];
            rest = &rest[end + 1..];
            self.metrics_offset += end as u64 + 1;
            let text = std::str::from_utf8(line)
                .ok()
                .filter(|_| line.len() <= METRIC_LINE_BYTES);
            let mut it = text.unwrap_or("").split_whitespace();
            match (it.next(), it.next().map(str::parse::<f64>), it.next()) {
                // What the scheduler takes: a key of at most 128 bytes, a
                // finite value.
                (Some(k), Some(Ok(v)), None)
                    if v.is_finite() && k.len() <= crate::validate::MAX_KEY_BYTES =>
                {
                    sink(k, v)
                }
                _ => {
                    bad += 1;
                    first_bad.get_or_insert_with(|| {
                        String::from_utf8_lossy(&line[..line.len().min(200)])
                            .trim()
                            .to_string()
                    });
                }
            }
        }
        if let Some(first) = first_bad {
            tracing::warn!(job, lines = bad, first = %first, "bad metric lines ignored (a key of at most 128 bytes and a finite number each)");
        }
        // A partial line longer than any metric line is no metric: skipped
        // whole, so the reader never stalls on it.
        if rest.len() > METRIC_LINE_BYTES {
            tracing::warn!(job, bytes = rest.len(), "metric line too long; skipped");
            self.metrics_offset += rest.len() as u64;
        }
    }

    /// Takes the directories given to the job back for the worker (their
    /// top level only: nothing below can be reached through them then).
    /// Each keeps the job's group, which tells the next launch of the job
    /// whether it ran as the same uid (when it is given them again); mode 0700 gives that
    /// group nothing.
    pub fn hand_back(&self) {
        let me = rustix::process::geteuid().as_raw();
        let my_group = rustix::process::getegid().as_raw();
        for d in self.given.iter().chain([&self.report]) {
            if let Err(e) = d.chown(Some(me), None).and_then(|_| d.chmod(0o700)) {
                tracing::warn!("cannot take {} back from its job: {e}", d.path().display());
            }
        }
        if let Err(e) = self.control_dir.chown(None, Some(my_group)) {
            tracing::warn!(
                "cannot take {} back from its job: {e}",
                self.control.display()
            );
        }
        if !self.kept_shared {
            let _ = self.control_dir.remove(GIVEN_FILE);
        }
    }

    /// Moves the checkpoint and coordination directories out of this
    /// launch, for a part of a launch that spans several workers: they are
    /// shared with the other parts, which may still run when this one ends,
    /// so they stay the job's (`uid`'s) until the scheduler says every part
    /// ended ([`SharedDirs::take_back`]); [`Running::hand_back`] takes back
    /// the rest. `None` when they cannot be kept (the control directory's
    /// handle cannot be duplicated): they go back with the rest.
    pub fn keep_shared(&mut self, uid: u32) -> Option<SharedDirs> {
        let control = match self.control_dir.try_clone() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("{e}: the launch's shared directories are taken back at once");
                return None;
            }
        };
        self.kept_shared = true;
        Some(SharedDirs {
            dirs: std::mem::take(&mut self.given),
            control,
            uid,
        })
    }
}

/// The shared directories (checkpoints, coordination) of an ended part of a
/// launch on several workers, still the job's while other parts may run
/// ([`Running::keep_shared`]).
pub struct SharedDirs {
    dirs: Vec<Dir>,
    control: Dir,
    uid: u32,
}

impl SharedDirs {
    /// The job uid they were given to.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Takes them back for the worker, as [`Running::hand_back`] does; one
    /// that is no longer the uid's (a later launch of the job was given it
    /// meanwhile, on another worker) is left as it is.
    pub fn take_back(self) {
        let me = rustix::process::geteuid().as_raw();
        for d in &self.dirs {
            match d.stat() {
                Ok(st) if st.st_uid == self.uid => {
                    if let Err(e) = d.chown(Some(me), None).and_then(|_| d.chmod(0o700)) {
                        tracing::warn!("cannot take {} back from its job: {e}", d.path().display());
                    }
                }
                Ok(_) => tracing::debug!(
                    dir = %d.path().display(),
                    "no longer the ended launch's uid's: left to its holder"
                ),
                Err(e) => tracing::warn!("{e}"),
            }
        }
        let _ = self.control.remove(GIVEN_FILE);
    }
}

/// The file in a launch's control directory listing the directories the
/// launch was given, one path a line, until they are taken back: a worker
/// killed before it took them back does so when it starts again
/// ([`reclaim`]).
pub const GIVEN_FILE: &str = "given";

/// The first line of [`GIVEN_FILE`]: `uid=` and the uid they were given to.
const UID_LINE: &str = "uid=";

/// Takes back what launches of an earlier run of the worker were given and
/// never returned (the worker was killed): under `workdir/jobs`, every
/// launch directory that still lists what it was given ([`GIVEN_FILE`])
/// has its report directory and those directories taken back where they
/// are still its uid's (the owner of its report directory). Run before the
/// worker registers: the scheduler gives none of those uids to a new launch
/// until this node reports them free. Returns how many were taken back.
pub fn reclaim(workdir: &Path) -> usize {
    let me = rustix::process::geteuid().as_raw();
    let mut taken = 0;
    let jobs = workdir.join("jobs");
    // jobs/<cluster>/<job>/launch-<n>, or jobs/<job>/launch-<n> (a table
    // older than identities).
    let mut launches = Vec::new();
    for a in std::fs::read_dir(&jobs).into_iter().flatten().flatten() {
        for b in std::fs::read_dir(a.path()).into_iter().flatten().flatten() {
            let p = b.path();
            if b.file_name().to_string_lossy().starts_with("launch-") {
                launches.push(p);
                continue;
            }
            for c in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                if c.file_name().to_string_lossy().starts_with("launch-") {
                    launches.push(c.path());
                }
            }
        }
    }
    for launch in launches {
        let Ok(control) = Dir::open(&launch, false, Trust::Same) else {
            continue;
        };
        let Ok(Some(list)) = control.read_job_file(GIVEN_FILE, Some(me), 0, 1 << 16) else {
            continue;
        };
        let Ok(report) = control.subdir(REPORT_DIR, 0o700, false) else {
            continue;
        };
        // The uid the list names (a file written before it named one: the
        // report directory's owner).
        let text = String::from_utf8_lossy(&list);
        let named = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix(UID_LINE))
            .and_then(|u| u.parse::<u32>().ok());
        let Some(uid) = named.or_else(|| report.stat().ok().map(|s| s.st_uid)) else {
            continue;
        };
        let mut dirs = vec![report];
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with(UID_LINE))
        {
            let path = Path::new(line);
            let (Some(parent), Some(name)) =
                (path.parent(), path.file_name().and_then(|n| n.to_str()))
            else {
                continue;
            };
            if let Ok(d) =
                Dir::open(parent, false, Trust::Same).and_then(|p| p.subdir(name, 0o700, false))
            {
                dirs.push(d);
            }
        }
        for d in dirs {
            if d.stat().is_ok_and(|s| s.st_uid == uid && uid != me)
                && d.chown(Some(me), None).and_then(|_| d.chmod(0o700)).is_ok()
            {
                taken += 1;
            }
        }
        let _ = control.chown(None, Some(rustix::process::getegid().as_raw()));
        let _ = control.remove(GIVEN_FILE);
    }
    taken
}

impl Drop for Running {
    /// No job process outlives its handle.
    fn drop(&mut self) {
        // (A launch that could not start its first process has none to wait
        // for: it waited 2 s here, holding its worker meanwhile.)
        if !self.ranks.is_empty() && self.exit().is_none() {
            self.kill();
            let _ = self.wait(Duration::from_secs(2));
        }
    }
}

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

/// The error a forked child reports when it cannot join its launch's
/// cgroups (an errno nothing else before `exec` returns).
#[cfg(target_os = "linux")]
const CGROUP_JOIN_FAILED: i32 = libc::EBADSLT;

/// At most this many bytes of an argv go into a message (errors travel back
/// over gRPC and into logs; an argv can be megabytes).
const ARGV_SUMMARY_BYTES: usize = 200;

/// `argv` for a message: quoted, cut to 200 bytes, with what was left out
/// counted.
pub fn argv_summary(argv: &[String]) -> String {
    let full = format!("{argv:?}");
    if full.len() <= ARGV_SUMMARY_BYTES {
        return full;
    }
    let mut cut = ARGV_SUMMARY_BYTES;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let bytes: usize = argv.iter().map(String::len).sum();
    format!(
        "{}… ({} arguments, {bytes} bytes in all)",
        &full[..cut],
        argv.len()
    )
}

/// Starts `cmd` from one long-lived thread. On Linux the child is killed when
/// the thread that forked it ends (`PR_SET_PDEATHSIG`), so children are
/// forked from a thread that lives as long as the process.
fn spawn_child(
    mut cmd: Command,
    lease_until: Option<std::time::Instant>,
    cgroup_procs: Vec<std::ffi::CString>,
    drop_to: Option<(u32, u32)>,
) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Its own process group, killed as a whole (the module docs).
        cmd.process_group(0);
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    if let Some((uid, gid)) = drop_to {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (&cgroup_procs, drop_to);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let worker = std::process::id() as libc::pid_t;
        // SAFETY: the closure and `guard` make only async-signal-safe calls
        // (open, write, close, setgroups, setresgid, setresuid, prctl, fork,
        // sigaction, waitpid, kill, _exit) on data prepared before the fork,
        // and allocate nothing; reading the monotonic clock
        // (clock_gettime) is safe too, and errors are built from errnos,
        // without allocating.
        unsafe {
            cmd.pre_exec(move || {
                if lease_until.is_some_and(|t| std::time::Instant::now() > t) {
                    return Err(std::io::Error::from_raw_os_error(libc::ETIME));
                }
                // Into the launch's cgroups while still root (moving a
                // process takes the worker's rights), then down to the job's
                // account before anything of the job's runs (the guardian
                // and what it forks inherit both).
                for procs in &cgroup_procs {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::from_raw_os_error(CGROUP_JOIN_FAILED));
                    }
                    let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                    libc::close(fd);
                    if !ok {
                        return Err(std::io::Error::from_raw_os_error(CGROUP_JOIN_FAILED));
                    }
                }
                if let Some((uid, gid)) = drop_to {
                    // No setuid program gives it anything back either (one
                    // a job left for whoever gets its uid next, say).
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setresgid(gid, gid, gid) != 0
                        || libc::setresuid(uid, uid, uid) != 0
                        || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                guard(worker)
            });
        }
    }
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, SpawnReply)>();
        std::thread::Builder::new()
            .name("blox-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("cannot start the spawner thread");
        Mutex::new(tx)
    });
    let (reply, rx) = mpsc::channel();
    tx.lock()
        .expect("not poisoned")
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// Runs in the forked child, before `exec` (Linux): the child becomes the
/// launch's *guardian* and forks the job, which goes on to `exec`. The
/// guardian leads the launch's process group and waits for the job, exiting
/// as it exits; when the worker dies (even by `SIGKILL`), the kernel sends
/// the guardian `SIGTERM` (`PR_SET_PDEATHSIG`), and it kills its whole
/// group, whatever the job forked into it. The job itself gets `SIGKILL`
/// if its guardian dies.
#[cfg(target_os = "linux")]
fn guard(worker: libc::pid_t) -> std::io::Result<()> {
    extern "C" fn worker_died(_: libc::c_int) {
        // SAFETY: kill(2) is async-signal-safe; 0 is this process group.
        unsafe {
            libc::kill(0, libc::SIGKILL);
        }
    }
    // SAFETY: every call below is async-signal-safe and touches only the
    // plain data on this stack.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = worker_died as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut()) != 0
            || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // The worker died before the death signal was armed.
        if libc::getppid() != worker {
            libc::kill(0, libc::SIGKILL);
            libc::_exit(1);
        }
        let job = libc::fork();
        if job < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if job == 0 {
            // The job: default SIGTERM again, and killed with its guardian.
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() == 1 {
                libc::_exit(1);
            }
            return Ok(());
        }
        // The guardian holds no file of the worker's (the pipe that reports
        // a failed exec must close with the job's exec).
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..4096 {
                libc::close(fd);
            }
        }
        let mut status: libc::c_int = 0;
        loop {
            let r = libc::waitpid(job, &mut status, 0);
            if r == job {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = libc::WTERMSIG(status);
        // Dies as the job died (the worker reads the signal).
        libc::signal(sig, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}

/// `SIGKILL` to the process group led by `pid` (Unix; elsewhere nothing).
fn kill_group(pid: u32) {
    #[cfg(unix)]
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 0 {
            // SAFETY: a plain syscall on a group this process created.
            unsafe {
                libc::killpg(pid, libc::SIGKILL);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// True once `pid` (our child) has exited, without reaping it: its zombie
/// keeps its process-group id from being reused.
fn exited_unreaped(pid: u32) -> bool {
    #[cfg(unix)]
    {
        // SAFETY: waitid on our own child with WNOWAIT leaves it waitable;
        // `info` is plain data the call fills.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r == 0 && info.si_pid() != 0
        }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// Polls the child every 2 ms; records its exit time; kills its process
/// group when asked, and what it left in its group when it exits.
fn spawn_waiter(mut child: Child, exit: Arc<Mutex<Option<Exit>>>, kill: Arc<AtomicBool>) {
    let pid = child.id();
    std::thread::spawn(move || loop {
        if kill.load(Ordering::Relaxed) {
            kill_group(pid);
            let _ = child.kill();
        }
        if exited_unreaped(pid) {
            kill_group(pid);
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                *exit.lock().expect("not poisoned") = Some(Exit {
                    at: Instant::now(),
                    code: status.code(),
                });
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => {
                *exit.lock().expect("not poisoned") = Some(Exit {
                    at: Instant::now(),
                    code: None,
                });
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_becomes_the_mps_thread_percentage_and_memory_limit() {
        let s = GpuShareEnv::of(460, 16.0);
        assert_eq!(
            s.vars(),
            [
                (env::GPU_MILLI, "460".to_string()),
                (env::MPS_THREAD_PERCENTAGE, "46".to_string()),
                (env::MPS_PINNED_MEM_LIMIT, "0=7536M".to_string()),
            ]
        );
        // Rounded up to a whole percent, at least 1; no memory limit where
        // the GPU's memory is unknown (logical GPUs).
        let tiny = GpuShareEnv::of(1, 0.0);
        assert_eq!(tiny.thread_percentage, 1);
        assert_eq!(tiny.memory_mib, None);
        assert_eq!(GpuShareEnv::of(1000, 80.0).thread_percentage, 100);
        assert_eq!(GpuShareEnv::of(455, 0.0).thread_percentage, 46);
    }

    #[test]
    fn a_job_gets_the_allowed_variables_and_what_the_operator_passes() {
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "TZ",
            "CUDA_HOME",
            "CUDA_MPS_PIPE_DIRECTORY",
            "NVIDIA_DRIVER_CAPABILITIES",
        ] {
            assert!(passed_env(name, &[]), "{name}");
        }
        for name in [
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "BLOX_TOKEN_FILE",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_CA_BUNDLE",
            "PIP_INDEX_URL",
            "OLDPWD",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "XBLOX_Y",
        ] {
            assert!(!passed_env(name, &[]), "{name}");
        }
        let pass = vec!["LD_LIBRARY_PATH".to_string(), "NCCL_*".to_string()];
        assert!(passed_env("LD_LIBRARY_PATH", &pass));
        assert!(passed_env("NCCL_SOCKET_IFNAME", &pass));
        assert!(!passed_env("NCC", &pass));
        // Never the worker's own settings, whatever is passed.
        assert!(!passed_env(
            "BLOX_TOKEN_FILE",
            &["BLOX_TOKEN_FILE".to_string()]
        ));
        for bad in ["BLOX_TOKEN_FILE", "BLOX_*", "BLO*", "*", "A B", ""] {
            assert!(check_pass_env(bad).is_err(), "{bad}");
        }
        for good in ["LD_LIBRARY_PATH", "NCCL_*", "HF_HOME"] {
            check_pass_env(good).unwrap();
        }
    }

    #[test]
    fn a_stale_launch_directory_is_cleared_before_a_launch_uses_it() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("launch-1");
        std::fs::create_dir_all(&control).unwrap();
        // What an unrecorded launch left: it finished.
        std::fs::create_dir_all(control.join(REPORT_DIR)).unwrap();
        std::fs::write(control.join(REPORT_DIR).join("done"), "").unwrap();
        let spec = LaunchSpec {
            job: 1,
            argv: vec!["/bin/sh".into(), "-c".into(), "exit 0".into()],
            devices: vec!["0".into()],
            control: control.clone(),
            checkpoint: dir.path().join("ck"),
            coord: None,
            resume: false,
            batch_size: None,
            master_addr: String::new(),
            worker_addr: String::new(),
            process_per_gpu: false,
            first_rank: 0,
            world_size: None,
            generation: 2,
            job_user: None,
            lease: None,
            pass_env: Vec::new(),
            cgroup_procs: Vec::new(),
            share: None,
        };
        let run = Running::spawn(&spec).unwrap();
        let t = Instant::now();
        let e = loop {
            if let Some(e) = run.exit() {
                break e;
            }
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(!control.join(REPORT_DIR).join("done").exists());
        assert!(!run.finished(&e), "the old launch's `done` spoke for it");
    }

    /// A part of a launch on several workers ended and kept the shared
    /// directories its job's, then its worker was killed before taking
    /// them back: the restarted worker's `reclaim` takes them back, though
    /// the report directory (whose owner named the uid) went back already.
    #[test]
    fn a_killed_worker_takes_back_what_an_ended_part_kept() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if rustix::process::geteuid().as_raw() != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let uid = 1_900_000_700;
        let spec = LaunchSpec {
            job: 1,
            argv: vec!["/bin/sh".into(), "-c".into(), "exit 0".into()],
            devices: vec!["0".into()],
            control: dir.path().join("jobs/1/launch-1"),
            checkpoint: dir.path().join("ck"),
            coord: Some(dir.path().join("coord")),
            resume: false,
            batch_size: None,
            master_addr: String::new(),
            worker_addr: String::new(),
            process_per_gpu: false,
            first_rank: 0,
            world_size: Some(2),
            generation: 1,
            job_user: Some(JobUser {
                name: format!("blox-job-{uid}"),
                uid,
                gid: uid,
                home: None,
                takes_over: Some((uid, uid + 10)),
            }),
            lease: None,
            pass_env: Vec::new(),
            cgroup_procs: Vec::new(),
            share: None,
        };
        let mut run = Running::spawn(&spec).unwrap();
        let t = Instant::now();
        while run.exit().is_none() {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(10));
        }
        let owner = |p: &str| {
            let m = std::fs::metadata(dir.path().join(p)).unwrap();
            (m.uid(), m.mode() & 0o777)
        };
        // The part ends: the shared directories stay the job's.
        let kept = run.keep_shared(uid).unwrap();
        run.hand_back();
        assert_eq!(owner("ck"), (uid, 0o700));
        assert_eq!(owner("coord"), (uid, 0o700));
        // The worker dies before the scheduler says every part ended.
        drop(kept);
        drop(run);
        assert_eq!(reclaim(dir.path()), 2);
        assert_eq!(owner("ck"), (0, 0o700));
        assert_eq!(owner("coord"), (0, 0o700));
        assert!(!dir.path().join("jobs/1/launch-1").join(GIVEN_FILE).exists());
    }
}
