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
//!
//! This file holds what a launch is given and how it ends ([`LaunchSpec`],
//! [`Exit`], [`StartError`]); `running` the launch itself ([`Running`]),
//! `job_env` the job's environment, `ownership` whose its directories
//! are, `reports` what the job reports, `child` the forked processes.

mod child;
mod job_env;
mod ownership;
mod reports;
mod running;

pub use job_env::{check_pass_env, passed_env, GpuShareEnv};
pub use ownership::{reclaim, JobUser, SharedDirs, GIVEN_FILE};
pub use running::Running;

use std::path::PathBuf;
use std::time::Instant;

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

/// The report directory's name inside a launch's control directory
/// ([`blox_client::env::REPORT_DIR`]).
pub const REPORT_DIR: &str = "job";

/// How a launch (or one of its processes) ended.
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    pub at: Instant,
    /// Exit status; `None` when killed by a signal (or it could not be waited on).
    pub code: Option<i32>,
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
