//! The command line's arguments (clap).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "blox",
    version,
    about = "Composable deep-learning cluster schedulers: simulate, sweep, compare, run"
)]
pub struct Cli {
    /// Log level filter (e.g. `info`, `debug`, `blox_core=debug`); also RUST_LOG.
    #[arg(long, global = true, default_value = "warn")]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

/// Changes to a config before it is read.
#[derive(Args, Debug, Clone, Default)]
pub struct Overrides {
    /// Set a config value: `--set scheduling.policy=las --set run.seed=3`
    /// (TOML values; `--set key=` removes the key).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Remove a config key, e.g. a parameter of a policy a `--set` replaced.
    #[arg(long = "unset", value_name = "KEY")]
    pub unset: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one simulation and print its summary.
    Sim(SimArgs),
    /// The FGD paper's packing experiment on GPUs that tasks share: the
    /// openb trace's tasks arrive shuffled, inflated to `--tune` × the GPU
    /// capacity, and never leave; prints the allocation for each policy and
    /// seed beside the FGD authors' published figure.
    ///
    /// Columns: arrived tasks (inflation copies included), placed, failed, the
    /// allocated share of GPU capacity (percent) when 100 % and the tune's share
    /// of capacity have arrived, the published figures for the same run. `--out`
    /// writes pack.csv, means.csv, curves.csv, a plot per pod list and
    /// summary.md (blox-share/README.md lists their columns).
    Pack(PackArgs),
    /// Run policies × loads × seeds from a config's `[sweep]` section, or whole
    /// configs × workloads × loads × seeds from a file of `[[grid]]`s (resumable), in parallel.
    ///
    /// A file with a `[packing]` table runs the FGD paper's packing experiment
    /// over pod lists × policies × seeds, as `blox pack` does, with its outputs
    /// (examples/configs/openb/packing.toml: the 1,020 published runs).
    ///
    /// `blox sweep merge DIR… --out DIR` puts the outputs of `--shard` runs
    /// back together (the `sweep.csv` and cell folders of an unsharded run).
    Sweep {
        /// The sweep file (or `merge` and the shards' output folders).
        #[arg(required = true, num_args = 1..)]
        config: Vec<PathBuf>,
        /// Where `sweep.csv` and the cells' folders go.
        #[arg(long, default_value = "sweep-out")]
        out: PathBuf,
        /// Worker threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Run only cells I, I+N, I+2N, … of the file (`I/N`, 0 <= I < N),
        /// e.g. one Slurm array task or Kubernetes Indexed Job pod each.
        #[arg(long, value_name = "I/N")]
        shard: Option<blox_sim::sweep::Shard>,
        #[command(flatten)]
        overrides: Overrides,
    },
    /// Plots (SVG and PNG) and a markdown summary of a sweep's output folder.
    Report {
        /// The folder `blox sweep --out` wrote.
        dir: PathBuf,
    },
    /// Run the config's policies on real job processes on this machine
    /// (wall-clock rounds; `[cluster]` gives the logical GPUs).
    Local {
        config: PathBuf,
        /// The jobs to run: a TOML file of `[[job]]` tables (see
        /// `blox_runtime::local::read_jobs_file`).
        #[arg(long)]
        jobs: PathBuf,
        /// Where job control, output and checkpoint folders go.
        #[arg(long, default_value = "blox-local")]
        workdir: PathBuf,
        /// Write jobs.csv, rounds.csv, summary.txt and events.jsonl here.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        overrides: Overrides,
    },
    /// Run the central scheduler: the config's policies on the workers that
    /// register with it, wall-clock rounds of `[run] round_s`, `[runtime]` settings.
    Scheduler {
        #[arg(long)]
        config: PathBuf,
        /// Listen here instead of `[runtime] listen`.
        #[arg(long)]
        listen: Option<String>,
        /// The job table file instead of `[runtime] state`.
        #[arg(long)]
        state: Option<PathBuf>,
        #[command(flatten)]
        overrides: Overrides,
    },
    /// Run a worker manager on this node: registers its GPUs with the scheduler
    /// and runs the jobs it is given.
    Worker(WorkerArgs),
    /// Submit a job to a scheduler: `blox submit --gpus 2 -- train --epochs 3`.
    Submit(SubmitArgs),
    /// Show a scheduler's jobs (all, or the ones named) and workers, with
    /// why each waiting job waits.
    Status {
        #[command(flatten)]
        connect: Connect,
        jobs: Vec<u64>,
        /// Only the jobs that have not ended, with their predicted start and
        /// finish (as `squeue --start`): the scheduler's state run forward in
        /// the simulator under its own policies.
        #[arg(long)]
        start: bool,
    },
    /// Cancel a job (killed if it runs).
    Cancel {
        #[command(flatten)]
        connect: Connect,
        /// The job's id: `7`, or `job-7` as logs and `blox events` name it.
        #[arg(value_parser = parse_job_id)]
        job: u64,
    },
    /// Print an event log: the scheduler's decisions (`[runtime] events`,
    /// by default events.jsonl beside the job table) or a simulation's
    /// (`blox sim --out DIR` writes DIR/events.jsonl); `--diff` compares
    /// two decision by decision.
    Events(EventsArgs),
    /// What if other policies had run? Replays the state of a live scheduler
    /// (`--scheduler ADDR`) or of an event log (`--events FILE`, from `--at`)
    /// under each `--config` in the simulator, beside what happened.
    Whatif(WhatifArgs),
    /// List every registered module (built-in and linked into this binary).
    Policies,
    /// Time the reference simulations and the runtime (build with --release).
    Bench {
        /// `blox-recipe`, `philly-10k`, `pollux`, `ones`, `gavel`, `doubling`, `synth`, `forecast`,
        /// `scale`, `lease`, `metric-push`, `runtime-round`, `soak`, `submit`, or `all` (the two
        /// replays).
        #[arg(default_value = "all")]
        which: String,
        /// Repetitions (the best is reported).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        #[command(flatten)]
        soak: SoakArgs,
        #[command(flatten)]
        scale: ScaleArgs,
    },
}

/// Options of `blox whatif`.
#[derive(Args, Debug)]
pub struct WhatifArgs {
    /// Replay an event log: a scheduler's (its rotated files are read too)
    /// or a simulation's (`blox sim --out DIR` writes DIR/events.jsonl).
    #[arg(
        long,
        conflicts_with = "scheduler",
        required_unless_present = "scheduler"
    )]
    pub events: Option<PathBuf>,
    /// Start the replay at this time of the log, seconds on its clock
    /// (default: its first round).
    #[arg(long, requires = "events")]
    pub at: Option<f64>,
    /// Replay the state of the scheduler at this address, now.
    #[arg(long)]
    pub scheduler: Option<String>,
    /// Its token and TLS (with --scheduler).
    #[command(flatten)]
    pub auth: Auth,
    /// A config to replay under (repeat to compare several).
    #[arg(long = "config", required = true)]
    pub configs: Vec<PathBuf>,
    /// Another replay under the first config with these changes:
    /// `--variant scheduling.policy=las` (comma-separated KEY=VALUE; repeat).
    #[arg(long = "variant", value_name = "KEY=VALUE[,…]")]
    pub variants: Vec<String>,
    /// Changes to every config.
    #[command(flatten)]
    pub overrides: Overrides,
    /// Write DIR/whatif.csv, DIR/predictions.csv (every job's start and
    /// finish under each config) and each replay's tables, plots and events
    /// under `DIR/<config>/` (`blox report DIR`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Options of `blox bench scale` (default: FIFO, LAS, SRTF and Tiresias at
/// 10k, 100k and 1M jobs on 1,000 and 10,000 GPUs).
#[derive(Args, Debug, Default)]
pub struct ScaleArgs {
    /// scale: run only this cell, `POLICY:JOBS:GPUS` (e.g. `las:1000000:10000`);
    /// repeat for several.
    #[arg(long = "cell", value_name = "POLICY:JOBS:GPUS")]
    pub cells: Vec<String>,
    /// scale: run the cells in this process instead of one child process
    /// each (peak memory is then the largest so far, not each cell's).
    #[arg(long)]
    pub in_process: bool,
}

/// Options of `blox bench soak` (defaults: the full run, 10,000 jobs).
#[derive(Args, Debug, Default)]
pub struct SoakArgs {
    /// soak: the CI size (500 jobs, 100 clients, 2 worker kills, 1
    /// scheduler restart, 1 cut, 1 hang, 1 full disk, 1 clock step); the
    /// flags below override it.
    #[arg(long)]
    pub reduced: bool,
    /// soak, submit: jobs submitted in all.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// soak, submit: concurrent clients submitting them.
    #[arg(long)]
    pub clients: Option<usize>,
    /// soak: workers (each with 8 logical GPUs).
    #[arg(long)]
    pub workers: Option<usize>,
    /// soak: workers SIGKILLed (and restarted) during the run.
    #[arg(long)]
    pub worker_kills: Option<usize>,
    /// soak: scheduler SIGKILLs and restarts on the same job table.
    #[arg(long)]
    pub scheduler_restarts: Option<usize>,
    /// soak: network cuts between a worker and the scheduler (6 s each,
    /// longer than the worker timeout).
    #[arg(long)]
    pub cuts: Option<usize>,
    /// soak: workers stopped with SIGSTOP for 6 s (a hung node; longer than
    /// the worker timeout), then continued.
    #[arg(long)]
    pub hangs: Option<usize>,
    /// soak: times no file of the scheduler may grow for 6 s (a full disk:
    /// its file-size limit set to the job table's size).
    #[arg(long)]
    pub disk_fulls: Option<usize>,
    /// soak: times the scheduler's wall clock steps back an hour across a
    /// restart (through libfaketime: `apt-get install faketime`; skipped
    /// and said without it).
    #[arg(long)]
    pub clock_steps: Option<usize>,
    /// soak: scheduling policy of the scheduler.
    #[arg(long)]
    pub policy: Option<String>,
    /// soak: seed of the job mix and the faults.
    #[arg(long)]
    pub seed: Option<u64>,
    /// soak: stop after this many seconds whatever is left.
    #[arg(long)]
    pub max_time_s: Option<f64>,
    /// soak: deal the jobs to four teams with equal quotas (`teams` around
    /// the policy) and place gangs on racks of two workers (`topology`).
    #[arg(long)]
    pub teams: bool,
    /// soak: working directory (job table, logs, journal); kept afterwards.
    /// Default: a temporary directory, removed when the soak passes.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Options of `blox events`.
#[derive(clap::Args, Debug)]
pub struct EventsArgs {
    /// The log (default: the one `--config`'s scheduler writes, else
    /// ./events.jsonl). Its rotated files (FILE.1, FILE.2, …) are read too.
    #[arg(conflicts_with = "config")]
    pub file: Option<PathBuf>,
    /// The scheduler's config: its `[runtime] events` (or `state`) says
    /// where the log is.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Keep printing events as they are appended (across rotations); a log
    /// not there yet is waited for (a scheduler about to start).
    #[arg(long, short)]
    pub follow: bool,
    /// Only this job's events (`7` or `job-7`).
    #[arg(long)]
    pub job: Option<String>,
    /// Print the JSON lines as stored.
    #[arg(long)]
    pub json: bool,
    /// Compare with this log: jobs matched by name, each decision by kind
    /// and occurrence, rounds counted from each log's first job event.
    /// Exits 1 when they differ.
    #[arg(long, value_name = "OTHER", conflicts_with = "follow")]
    pub diff: Option<PathBuf>,
    /// With --diff: rounds a decision may differ by.
    #[arg(long, default_value_t = 0, requires = "diff")]
    pub slack_rounds: u64,
}

/// Options of `blox sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// The config (TOML). Default: the bundled `examples/configs/default.toml`.
    pub config: Option<PathBuf>,
    /// Replace the config's workload file (format recognised from its header).
    #[arg(long)]
    pub workload: Option<PathBuf>,
    /// Write jobs.csv, rounds.csv (and .parquet), summary.txt and the event
    /// log events.jsonl (`blox events`) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// With --out, leave out events.jsonl (a few lines per job: hundreds of
    /// MB for a million jobs).
    #[arg(long, requires = "out")]
    pub no_events: bool,
    #[command(flatten)]
    pub overrides: Overrides,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Exit 0 even when `run.max_rounds` / `run.max_time_s` stop the run
    /// with jobs unfinished (also `[run] allow_unfinished = true`).
    #[arg(long)]
    pub allow_unfinished: bool,
}

/// How to reach and authenticate with a scheduler (clients and workers).
#[derive(Args, Clone, Debug)]
pub struct Connect {
    /// The scheduler's address.
    #[arg(long, env = "BLOX_SCHEDULER", default_value = "127.0.0.1:50051")]
    pub scheduler: String,
    #[command(flatten)]
    pub auth: Auth,
}

/// A connection's token and TLS settings.
#[derive(Args, Clone, Debug)]
pub struct Auth {
    /// File holding the cluster's shared token.
    #[arg(long, env = "BLOX_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Use TLS, trusting this certificate authority (PEM).
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Name to expect in the peer's certificate (default: the address's host).
    #[arg(long)]
    pub tls_domain: Option<String>,
}

/// Options of `blox worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// N logical GPUs instead of the ones NVML finds (also where NVML is absent).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Where the worker's own service listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// The address the scheduler should use to reach this worker (default: --listen).
    #[arg(long)]
    pub advertise: Option<String>,
    /// The node's name (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Where the node sits in the scheduler's [cluster.topology]:
    /// `--labels rack=r3,block=b1` (one LEVEL=DOMAIN per level).
    #[arg(long, value_name = "LEVEL=DOMAIN,…")]
    pub labels: Vec<String>,
    /// Control directories and (without a shared checkpoint dir) checkpoints.
    #[arg(long, default_value = "blox-worker")]
    pub workdir: PathBuf,
    /// Run jobs as this unprivileged account (the worker runs as root):
    /// they cannot read the worker's token, its environment or memory.
    #[arg(long, value_name = "NAME")]
    pub job_user: Option<String>,
    /// Run jobs as root when the worker runs as root without --job-user
    /// (tests, single-user machines); without it such a worker refuses to
    /// start.
    #[arg(long, conflicts_with_all = ["job_user", "job_uids"])]
    pub allow_root_jobs: bool,
    /// Run each job as a uid of its own from FIRST-LAST (the worker runs as
    /// root; no account may use them): jobs cannot read or write each
    /// other's directories either. Job N runs as FIRST + N mod the range's
    /// size on every worker.
    #[arg(long, value_name = "FIRST-LAST", value_parser = parse_uid_range, conflicts_with = "job_user")]
    pub job_uids: Option<(u32, u32)>,
    /// Run COMMAND once on each GPU before registering (`sh -c`, with
    /// CUDA_VISIBLE_DEVICES and BLOX_GPU set to its index): the seconds its
    /// last line of output prints (else its wall time) are the GPU's
    /// relative time; the scheduler turns them into slowdown factors for
    /// `pm-first` and `pal` (docs/RUNTIME.md, GPU variability).
    #[arg(long, value_name = "COMMAND", conflicts_with = "gpu_slowdown")]
    pub speed_probe: Option<String>,
    /// Declare each GPU's relative time instead of measuring it
    /// (`--gpu-slowdown 1,1,1.3,1`: one per GPU, by index; tests, known
    /// slow devices).
    #[arg(long, value_name = "X,…", value_delimiter = ',')]
    pub gpu_slowdown: Vec<f64>,
    /// Variables of the worker's environment that jobs get beyond PATH,
    /// HOME, USER, LANG, LC_*, TZ and the GPU variables (`--pass-env
    /// LD_LIBRARY_PATH,NCCL_*`: names, or prefixes ending in `*`; never a
    /// BLOX_* variable). Nothing else of the worker's reaches a job.
    #[arg(long, value_name = "NAME,…", value_delimiter = ',')]
    pub pass_env: Vec<String>,
    /// A config file whose `[worker]` section sets pass_env, memory_gb,
    /// max_processes and cgroup (the command line's flags win); it may be
    /// the scheduler's own config.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A launch's memory limit when its job asks none, GB (a cgroup limit).
    #[arg(long, value_name = "GB")]
    pub memory_gb: Option<f64>,
    /// A launch's process (and thread) limit when its job asks none
    /// (default 16384).
    #[arg(long, value_name = "N")]
    pub max_processes: Option<u32>,
    /// How launches are contained: `auto` (a cgroup per launch where the
    /// host has them), `off`, or a cgroup v2 directory delegated to the
    /// worker.
    #[arg(long, value_name = "auto|off|DIR")]
    pub cgroup: Option<String>,
    /// This worker's TLS certificate and key (PEM); also its client
    /// certificate where the scheduler asks for one (`tls_client_ca`).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: accept calls (launch, revoke, reconfigure) only from a
    /// caller whose client certificate this authority signed (PEM): the
    /// scheduler's own `tls_cert`.
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
}

/// Options of `blox submit`.
#[derive(Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// The job as a TOML file (name, gpus, command, batch_size, user, model,
    /// duration_s, metrics); flags override its fields.
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub gpus: Option<u32>,
    #[arg(long)]
    pub batch_size: Option<u32>,
    #[arg(long)]
    pub user: Option<String>,
    /// The team whose quota it runs under (`scheduling.policy = "teams"`).
    #[arg(long)]
    pub team: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// Expected run time at --gpus GPUs (for SRTF-like policies).
    #[arg(long, allow_negative_numbers = true)]
    pub duration_s: Option<f64>,
    /// A metric known up front: `--metric best_cpus_per_gpu=6`.
    #[arg(long = "metric", value_name = "KEY=VALUE")]
    pub metrics: Vec<String>,
    /// Part of one GPU, in thousandths (1-999; implies --gpus 1): placed
    /// beside other jobs on one GPU by a placement that shares GPUs
    /// (`placement.policy = "fgd"`).
    #[arg(long)]
    pub gpu_milli: Option<u32>,
    /// The program and its arguments (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// `FIRST-LAST`: a range of uids.
fn parse_uid_range(s: &str) -> Result<(u32, u32), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("`{s}`: give FIRST-LAST, e.g. 200000-265535"))?;
    let n = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|e| format!("`{s}`: `{v}` is not a uid ({e})"))
    };
    Ok((n(a)?, n(b)?))
}

/// A job id as a user types it: `7`, or `job-7` (how logs, events and
/// errors name a job).
pub fn parse_job_id(s: &str) -> Result<u64, String> {
    let digits = s.trim().strip_prefix("job-").unwrap_or(s.trim());
    match digits.parse::<u64>() {
        Ok(0) => Err("job ids start at 1".into()),
        Ok(id) => Ok(id),
        Err(_) => Err(format!("`{s}` is not a job id (a number, or job-N)")),
    }
}

/// `blox pack`.
#[derive(clap::Args, Debug)]
pub struct PackArgs {
    /// Bundled pod lists, comma-separated (`default`, `gpushare40`, `multigpu50`, `gpuspec33`, …:
    /// the files `data/openb/openb_pod_list_<name>.csv.gz`; `all`: the 17 the FGD paper uses)
    /// or paths to pod lists.
    #[arg(long, value_delimiter = ',', default_value = "default")]
    pub trace: Vec<String>,
    /// The node list (default: the bundled openb GPU nodes).
    #[arg(long)]
    pub nodes: Option<PathBuf>,
    /// Policies, comma-separated: fgd, best-fit, dot-product, gpu-packing, gpu-clustering,
    /// random, or `all` (those six); `fgd-exact` is FGD without the reference's integer
    /// scores (a variant to measure them).
    #[arg(long, value_delimiter = ',', default_value = "fgd")]
    pub policy: Vec<String>,
    /// Seeds of Go's generator (the reference's `-tuneseed`), comma-separated; `A-B` for a range.
    #[arg(long, value_delimiter = ',', default_value = "42")]
    pub seed: Vec<String>,
    /// Arrived GPU demand as a multiple of the GPU capacity, at most 100 (0: the trace as
    /// it is). Default 1.3, as the FGD paper's experiments; 0 with `--timed`.
    #[arg(long)]
    pub tune: Option<f64>,
    /// Worker threads (default: all cores); the results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write `pack.csv`, `means.csv`, `curves.csv` and a plot per pod list here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// With `--out`: also each run's per-task placements (`<trace>-<policy>-<seed>-placements.csv`,
    /// or `-events.csv` with `--timed`).
    #[arg(long)]
    pub placements: bool,
    /// Tasks arrive at their creation times and leave at their deletion times (the pod list
    /// needs `creation_time`); prints the mean and peak allocation instead of the curve.
    #[arg(long)]
    pub timed: bool,
}

impl PackArgs {
    /// `--tune`, or its default: 1.3 for the packing experiment, 0 with `--timed`.
    pub fn tune(&self) -> f64 {
        self.tune.unwrap_or(if self.timed { 0.0 } else { 1.3 })
    }
}
