//! The worker manager (`blox worker`): one per node. It registers the node's
//! GPUs with the scheduler, beats, launches job processes when told to
//! (argv, never a shell; [`crate::process`]), holds their leases (revocation
//! is a file in the launch's control directory, checked by the job at every
//! iteration boundary: Blox §7), forwards the metrics the jobs write, and
//! reports every exit with its status.
//!
//! If the scheduler forgets the worker (it restarted, or declared the worker
//! dead after missed heartbeats), the worker registers again and reports
//! what it still runs: a restarted scheduler adopts those launches (they run
//! on, no checkpoint and restore) or revokes the ones it cannot adopt
//! before it uses their GPUs. Meanwhile the lease still holds: a worker that
//! cannot register again in time fences its jobs.

use crate::net::{with_credential, NetError, SchedulerClient, Security};
use crate::process::{LaunchSpec, Running, SharedDirs};
use crate::proto::worker_server::{Worker, WorkerServer};
use crate::proto::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

pub mod cgroup;
mod service;
mod uids;
mod upstream;

mod speed;
use service::Service;
use upstream::{heartbeat_loop, report_loop, stop_launch_within};

/// Settings of a worker manager.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The scheduler's address (`host:port` or a URL).
    pub scheduler: String,
    /// Where the worker's own service listens (port 0: any free port).
    pub listen: SocketAddr,
    /// The address the scheduler should use to reach this worker; by default
    /// the listening address (with the port actually bound).
    pub advertise: Option<String>,
    /// The node's name (host name by default).
    pub name: String,
    /// N logical GPUs instead of the ones NVML finds.
    pub logical_gpus: Option<u32>,
    /// Control directories of the launches (and checkpoints, unless the
    /// scheduler names a shared checkpoint directory).
    pub workdir: PathBuf,
    pub security: Security,
    /// Where the node sits in the scheduler's topology, by level name
    /// (`--labels rack=r3,block=b1`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The unprivileged account jobs run as (`--job-user NAME`); `None`:
    /// the worker's own.
    pub job_user: Option<String>,
    /// A uid of its own for every job, from this range (`--job-uids
    /// FIRST-LAST`; instead of `job_user`; see docs/RUNTIME.md, Security).
    pub job_uids: Option<(u32, u32)>,
    /// Run jobs as root when the worker runs as root without a job user
    /// (`--allow-root-jobs`: tests, single-user machines). Without it such
    /// a worker refuses to start: a job running as root can read every
    /// secret on the node.
    pub allow_root_jobs: bool,
    /// Each GPU's relative time, declared (`--gpu-slowdown 1.2,1,...`: one
    /// per GPU, by index), reported as measured.
    pub gpu_slowdown: Vec<f64>,
    /// A command run once per GPU before registering (`--speed-probe`),
    /// with `CUDA_VISIBLE_DEVICES` and `BLOX_GPU` set to the GPU's index:
    /// the number its last line of output prints (seconds), else its wall
    /// time, is the GPU's relative time.
    pub speed_probe: Option<String>,
    /// Variables of the worker's environment jobs get beyond the
    /// allow-list (`[worker] pass_env`, `--pass-env`; names, or prefixes
    /// ending in `*`; see [`crate::process::passed_env`]).
    pub pass_env: Vec<String>,
    /// How launches are contained (`[worker] cgroup`; [`cgroup`]).
    pub cgroup: cgroup::CgroupSetting,
    /// The memory limit of a launch whose job asks none, GB (`[worker]
    /// memory_gb`); `None`: no limit.
    pub memory_gb: Option<f64>,
    /// The process (and thread) limit of a launch whose job asks none
    /// (`[worker] max_processes`).
    pub max_processes: Option<u32>,
}

/// The process limit of a launch when neither its job nor the worker sets
/// one: far above what a training job with data-loader workers holds, far
/// below what a fork bomb reaches.
pub const DEFAULT_MAX_PROCESSES: u32 = 16_384;

impl Default for WorkerConfig {
    /// A worker of the scheduler at `127.0.0.1:50051`, listening on any
    /// free loopback port, in `./blox-worker`, with NVML's GPUs, no
    /// credential, and jobs run as the worker's own user.
    fn default() -> Self {
        WorkerConfig {
            scheduler: "127.0.0.1:50051".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            name: "worker".into(),
            logical_gpus: None,
            workdir: PathBuf::from("blox-worker"),
            security: Security::default(),
            labels: Default::default(),
            job_user: None,
            job_uids: None,
            allow_root_jobs: false,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            pass_env: Vec::new(),
            cgroup: cgroup::CgroupSetting::Auto,
            memory_gb: None,
            max_processes: None,
        }
    }
}

/// `[worker]` of a config file (`blox worker --config FILE`): what jobs
/// get of the worker's environment, the limits of their launches, and how
/// they are contained.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSection {
    /// Variables of the worker's environment jobs get beyond the
    /// allow-list: names, or prefixes ending in `*`; never `BLOX_*`.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// A launch's memory limit when its job asks none, GB.
    pub memory_gb: Option<f64>,
    /// A launch's process (and thread) limit when its job asks none
    /// (default 16384).
    pub max_processes: Option<u32>,
    /// `"auto"` (default), `"off"`, or a cgroup v2 directory delegated to
    /// the worker.
    pub cgroup: Option<String>,
}

impl WorkerSection {
    /// Reads `[worker]` of the config file `path`; errors name the file,
    /// the line and the figures.
    pub fn read(path: &std::path::Path) -> Result<WorkerSection, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(std::path::Path::new("."));
        let cfg = blox_config::Config::parse(&text, &path.display().to_string(), base, &[])
            .map_err(|e| e.to_string())?;
        let s = cfg.section("worker");
        let w: WorkerSection = s.parse().map_err(|e| e.to_string())?;
        for e in &w.pass_env {
            crate::process::check_pass_env(e).map_err(|m| {
                s.error_at("pass_env", format!("`pass_env`: {m}"))
                    .to_string()
            })?;
        }
        if let Some(m) = w.memory_gb {
            let host = host_mem_gb();
            if !(m > 0.0 && m.is_finite()) || (host > 0.0 && m > host) {
                return Err(s
                    .error_at(
                        "memory_gb",
                        format!("`memory_gb` = {m}: a launch's memory limit must be positive and at most this node's {host:.1} GB"),
                    )
                    .to_string());
            }
        }
        if w.max_processes == Some(0) {
            return Err(s
                .error_at("max_processes", "`max_processes` must be at least 1")
                .to_string());
        }
        Ok(w)
    }

    /// Applies it to `cfg` (what the command line set stays).
    pub fn apply(self, cfg: &mut WorkerConfig) {
        let mut pass = self.pass_env;
        pass.append(&mut cfg.pass_env);
        cfg.pass_env = pass;
        cfg.memory_gb = cfg.memory_gb.or(self.memory_gb);
        cfg.max_processes = cfg.max_processes.or(self.max_processes);
        if let (cgroup::CgroupSetting::Auto, Some(c)) = (&cfg.cgroup, &self.cgroup) {
            cfg.cgroup = cgroup::CgroupSetting::parse(c);
        }
    }
}

/// Errors that stop a worker from starting.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error("no GPUs: {0}")]
    NoGpus(String),
    #[error("{0}")]
    Io(String),
    /// The scheduler refused this worker for a reason no retry can fix.
    #[error("{0}")]
    Refused(String),
}

/// Finds the node's GPUs: NVML's, or `logical` logical devices (also when
/// NVML is absent, which the log says).
pub fn discover_gpus(logical: Option<u32>) -> Result<Vec<GpuDevice>, WorkerError> {
    if let Some(n) = logical {
        if n == 0 {
            return Err(WorkerError::NoGpus("--gpus must be at least 1".into()));
        }
        tracing::info!("using {n} logical GPUs (--gpus); NVML is not consulted");
        return Ok(logical_gpus(n));
    }
    match nvml_gpus() {
        Ok(g) if !g.is_empty() => Ok(g),
        Ok(_) => Err(WorkerError::NoGpus(
            "NVML found no GPU on this node; pass --gpus N to run N logical GPUs".into(),
        )),
        Err(why) => Err(WorkerError::NoGpus(format!(
            "NVML is not available ({why}); pass --gpus N to run N logical GPUs"
        ))),
    }
}

fn logical_gpus(n: u32) -> Vec<GpuDevice> {
    (0..n)
        .map(|i| GpuDevice {
            index: i,
            uuid: format!("logical-{i}"),
            name: "logical".into(),
            memory_gb: 16.0,
            relative_time: 0.0,
        })
        .collect()
}

#[cfg(feature = "nvml")]
fn nvml_gpus() -> Result<Vec<GpuDevice>, String> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| e.to_string())?;
    let n = nvml.device_count().map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let d = nvml.device_by_index(i).map_err(|e| e.to_string())?;
        out.push(GpuDevice {
            index: i,
            uuid: d.uuid().map_err(|e| e.to_string())?,
            name: d.name().map_err(|e| e.to_string())?,
            memory_gb: d
                .memory_info()
                .map(|m| m.total as f64 / (1u64 << 30) as f64)
                .unwrap_or(0.0),
            relative_time: 0.0,
        });
    }
    Ok(out)
}

#[cfg(not(feature = "nvml"))]
fn nvml_gpus() -> Result<Vec<GpuDevice>, String> {
    Err("this build has no NVML support (the `nvml` feature is off)".into())
}

/// Host memory in GiB (Linux: `/proc/meminfo`).
fn host_mem_gb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / (1u64 << 20) as f64)
}

struct Launch {
    launch: u32,
    gpus: Vec<u32>,
    /// Thousandths of its one GPU, when it shares the GPU.
    gpu_milli: Option<u32>,
    run: Running,
    /// How it was launched, for a scheduler that adopts it after a restart.
    first_rank: u32,
    ranks: u32,
    world_size: u32,
    generation: u64,
    batch_size: Option<u32>,
    spawned: Instant,
    /// The start-up it reported ([`blox_client::STARTUP_METRIC`]).
    startup_s: Option<f64>,
    /// The uid of its own it runs as (`--job-uids`): the directories it
    /// holds meanwhile are taken back when it is dropped.
    uid: Option<u32>,
    /// Parts of it run on other workers too, sharing its checkpoint and
    /// coordination directories: when this part ends, those stay the job's
    /// until the scheduler says every part ended ([`State::kept`]).
    shared: bool,
    /// Its cgroups, killed and removed when it is dropped.
    group: Option<cgroup::LaunchGroup>,
}

impl Drop for Launch {
    fn drop(&mut self) {
        // Whatever of the launch still runs, in whatever session or
        // process group, ends with it.
        self.run.kill();
        if let Some(g) = self.group.take() {
            cgroup::reap(g, self.uid);
        }
        if self.uid.is_some() {
            self.run.hand_back();
        }
    }
}

impl Launch {
    fn report(&self, job: u64) -> RunningLaunch {
        RunningLaunch {
            launch: Some(LaunchRef {
                job_id: job,
                launch: self.launch,
            }),
            gpus: self.gpus.clone(),
            first_rank: self.first_rank,
            ranks: self.ranks,
            world_size: self.world_size,
            generation: self.generation,
            batch_size: self.batch_size,
            running_s: self.spawned.elapsed().as_secs_f64(),
            startup_s: self.startup_s,
            gpu_milli: self.gpu_milli,
        }
    }
}

/// A launch being started (its directories, cgroup and processes made
/// outside the state's lock): its GPUs and uid are held meanwhile.
///
/// It is reported as running (registration, heartbeats): a scheduler that
/// restarted meanwhile must know of it before it runs, else it could launch
/// the job again elsewhere while this start completes.
struct Starting {
    launch: u32,
    uid: Option<u32>,
    /// Revoked meanwhile: stopped as soon as it runs.
    revoked: bool,
    /// What it reports (its GPUs, ranks, generation), and since when.
    report: RunningLaunch,
    since: Instant,
}

#[derive(Default)]
struct State {
    worker_id: Option<String>,
    /// Launches being started.
    starting: HashMap<u64, Starting>,
    /// Its credential from the scheduler (with `worker_id`): sent on every
    /// report, and required of every call the scheduler makes here.
    secret: Option<String>,
    launches: HashMap<u64, Launch>,
    /// Exits and metrics not yet delivered to the scheduler (metrics
    /// bounded: the oldest are dropped and counted).
    exits: Vec<(ExitReport, Instant)>,
    metrics: Vec<MetricSample>,
    metrics_dropped: u64,
    /// Fencing: until when this worker may run jobs without hearing from
    /// the scheduler (`None`: not registered, or no lease).
    lease_until: Option<Instant>,
    /// The grace a fenced job gets (from the scheduler, with the lease).
    fence_grace: Duration,
    /// Grows each time a heartbeat gets through after the lease ran out:
    /// a launch sent under an earlier epoch (before this worker hung or
    /// was cut off) is refused, as the scheduler may have given up on it.
    lease_epoch: u64,
    /// The end of the last lease that ran out before a heartbeat renewed
    /// it: a job that stopped itself then (its lease file said so) exits
    /// within the grace after it, and is reported fenced, not crashed,
    /// though the lease holds again by the time it exits.
    lapsed_at: Option<Instant>,
    /// Launches being stopped (revoked, taken out of `launches`) whose
    /// processes may still run, saving their last checkpoint: reported as
    /// running until they exited, so the scheduler neither relaunches
    /// their job nor has their shared directories taken back meanwhile.
    stopping: std::collections::HashSet<(u64, u32)>,
    /// The shared directories of ended parts of launches on several
    /// workers, still their jobs' while other parts may run: reported to
    /// the scheduler (`HeartbeatRequest.kept`, their uids as busy) until it
    /// answers that every part ended (`HeartbeatReply.take_back`).
    kept: Vec<(LaunchRef, SharedDirs)>,
    /// Uids of kept directories being taken back (off the heartbeat: shared
    /// storage may be slow), busy until they are.
    returning: Vec<u32>,
    /// Job uids of launches that ended here, until nothing of them is left
    /// (reported as busy meanwhile: `HeartbeatRequest.busy_uids`).
    draining: std::collections::BTreeSet<u32>,
    /// The worker shuts down: a launch that finishes starting now is
    /// killed at once.
    closing: bool,
}

/// The most kept launches one heartbeat reports (the proto's bound).
const MAX_KEPT_REPORTED: usize = crate::validate::MAX_WORKER_LAUNCHES;

/// The most metric samples a worker holds for the scheduler (when it cannot
/// reach it); older ones are dropped.
const MAX_PENDING_METRICS: usize = 100_000;

impl State {
    /// After a launch that ran as `uid` ended: every process still running
    /// as that uid is killed, unless a launch here holds it again or another
    /// worker on this machine runs a part of the job as it (that worker's
    /// sweep, at its part's end, kills what is left).
    fn sweep(&mut self, uid: Option<u32>, contained: bool) {
        if let Some(u) = uid {
            self.draining.insert(u);
            // The launch's cgroup holds all it started: killing it (when
            // the launch is dropped) ends them, and no other worker's.
            if contained {
                return;
            }
            if self.launches.values().any(|l| l.uid == Some(u)) {
                return;
            }
            if uids::held_by_another_worker(u) {
                tracing::debug!(
                    uid = u,
                    "job uid also runs under another worker here: its sweep is left to that worker"
                );
                return;
            }
            uids::kill_all(u);
        }
    }

    fn bound_metrics(&mut self) {
        let over = self.metrics.len().saturating_sub(MAX_PENDING_METRICS);
        if over > 0 {
            self.metrics.drain(..over);
            if self.metrics_dropped == 0 {
                tracing::warn!("the scheduler is not taking metrics: the oldest are dropped (at most {MAX_PENDING_METRICS} are kept)");
            }
            self.metrics_dropped += over as u64;
        }
    }

    /// Tells every job here until when its lease holds (its control
    /// directory's `lease` file; [`blox_client::LEASE_FILE`]), so a job
    /// stops itself when this worker cannot renew it, even a worker that
    /// hangs.
    fn publish_lease(&self, grace: Duration) {
        let Some(until) = self.lease_until else {
            return;
        };
        for l in self.launches.values() {
            l.run.write_lease(until, grace);
        }
    }

    /// True when the lease ran out: the worker must not run jobs.
    fn fenced(&self) -> bool {
        self.lease_until.is_some_and(|t| Instant::now() > t)
    }

    /// Renews the lease until `until`; one that had run out is noted
    /// ([`State::stopped_by_lease`]).
    fn renew_lease(&mut self, until: Instant) {
        if self.fenced() {
            self.lapsed_at = self.lease_until;
        }
        self.lease_until = Some(until);
    }

    /// Whether a launch that exited at `at` without finishing stopped
    /// because its lease ran out: now, or in a lapse since renewed (it
    /// exits within the grace after its lease's end; a second of slack).
    fn stopped_by_lease(&self, at: Instant) -> bool {
        let window = self.fence_grace + Duration::from_secs(1);
        self.lease_until.is_some_and(|t| at >= t)
            || self.lapsed_at.is_some_and(|t| at >= t && at <= t + window)
    }

    /// The launches running here, as reported when registering again.
    fn reports(&self) -> Vec<RunningLaunch> {
        let mut v: Vec<RunningLaunch> = self
            .launches
            .iter()
            .map(|(j, l)| l.report(*j))
            // (One revoked while it starts is killed as it runs: not one
            // to adopt.)
            .chain(
                self.starting
                    .values()
                    .filter(|s| !s.revoked)
                    .map(|s| RunningLaunch {
                        running_s: s.since.elapsed().as_secs_f64(),
                        ..s.report.clone()
                    }),
            )
            .collect();
        v.sort_by_key(|r| r.launch.map(|l| l.job_id));
        v
    }

    /// Takes launch `job` out (it ends): its uid counts as busy until
    /// nothing of it is left.
    fn take_launch(&mut self, job: u64) -> Option<Launch> {
        let mut l = self.launches.remove(&job)?;
        self.draining.extend(l.uid);
        if let (true, Some(uid)) = (l.shared, l.uid) {
            if let Some(dirs) = l.run.keep_shared(uid) {
                let at = LaunchRef {
                    job_id: job,
                    launch: l.launch,
                };
                self.kept.push((at, dirs));
            }
        }
        Some(l)
    }

    /// The launches whose shared directories are kept here (at most
    /// [`MAX_KEPT_REPORTED`] are reported; the rest next time).
    fn kept_refs(&self) -> Vec<LaunchRef> {
        self.kept
            .iter()
            .take(MAX_KEPT_REPORTED)
            .map(|(l, _)| *l)
            .collect()
    }

    /// Takes out the kept directories of `ended` launches (every part
    /// ended), to be taken back.
    fn release_kept(&mut self, ended: &[LaunchRef]) -> Vec<SharedDirs> {
        let (out, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.kept)
            .into_iter()
            .partition(|(l, _)| ended.contains(l));
        self.kept = keep;
        let out: Vec<SharedDirs> = out.into_iter().map(|(_, d)| d).collect();
        self.returning.extend(out.iter().map(SharedDirs::uid));
        out
    }

    /// The job uids in use here: the running and starting launches', and
    /// those of ended launches with a process or cgroup left (re-checked
    /// now), or whose leftovers are being removed.
    fn busy_uids(&mut self) -> Vec<u32> {
        let reaping = cgroup::draining_uids();
        let held: Vec<u32> = self
            .launches
            .values()
            .filter_map(|l| l.uid)
            .chain(self.starting.values().filter_map(|s| s.uid))
            .chain(self.kept.iter().map(|(_, d)| d.uid()))
            .chain(self.returning.iter().copied())
            .collect();
        let mut done = Vec::new();
        self.draining.retain(|u| {
            let busy = held.contains(u) || reaping.contains(u) || uids::process_of(*u).is_some();
            if !busy {
                done.push(*u);
            }
            busy
        });
        // What the uid left in the node's shared places goes before the
        // uid is reported free (the next holder must not find it).
        for u in done {
            uids::cleanup(u);
        }
        let mut all: Vec<u32> = held
            .into_iter()
            .chain(self.draining.iter().copied())
            .chain(uids::cleaning())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The launches running or starting here.
    fn running(&self) -> Vec<LaunchRef> {
        self.launches
            .iter()
            .map(|(j, l)| (*j, l.launch))
            .chain(self.starting.iter().map(|(j, s)| (*j, s.launch)))
            .chain(self.stopping.iter().copied())
            .map(|(job_id, launch)| LaunchRef { job_id, launch })
            .collect()
    }
}

struct Shared {
    cfg: WorkerConfig,
    job_user: Option<crate::process::JobUser>,
    /// `--job-uids`, checked.
    job_uids: Option<(u32, u32)>,
    /// A cgroup per launch, where the host has them.
    containment: Option<cgroup::Containment>,
    gpus: Vec<GpuDevice>,
    address: String,
    state: Mutex<State>,
    /// Set (once) when the scheduler refuses this worker for good.
    refused: tokio::sync::watch::Sender<Option<String>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
/// Lets in only the scheduler this worker registered with: the cluster's
/// token and this worker's own credential (which only that scheduler and
/// this worker hold), checked before a request's body is decoded.
#[derive(Clone)]
struct FromScheduler {
    token: crate::net::CheckToken,
    shared: Arc<Shared>,
}

impl tonic::service::Interceptor for FromScheduler {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        self.token.verify(req.metadata(), "the workers' token")?;
        let st = self.shared.lock();
        let Some(mine) = st.secret.as_deref() else {
            return Err(Status::unauthenticated(
                "this worker has not registered yet: it takes calls only from the scheduler it registers with",
            ));
        };
        match crate::net::credential_of(req.metadata()) {
            Some(c) if crate::net::constant_time_eq(c.as_bytes(), mine.as_bytes()) => {
                crate::conn::authenticated(&req);
                Ok(req)
            }
            _ => Err(Status::unauthenticated(format!(
                "this call needs the credential this worker's scheduler issued (`{}`)",
                crate::net::WORKER_CREDENTIAL
            ))),
        }
    }
}

/// A running worker manager; dropping it (or [`WorkerHandle::shutdown`])
/// stops its service and kills its jobs.
pub struct WorkerHandle {
    pub address: String,
    shared: Arc<Shared>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl WorkerHandle {
    /// The worker id the scheduler gave, once registered.
    pub fn worker_id(&self) -> Option<String> {
        self.shared.lock().worker_id.clone()
    }

    /// The credential its scheduler issued at registration (what the
    /// scheduler proves itself with on every call here), once registered.
    pub fn credential(&self) -> Option<String> {
        self.shared.lock().secret.clone()
    }

    /// Waits until the scheduler refuses this worker for a reason no retry
    /// can fix (a wrong or missing token, the users' token, an argument it
    /// rejects) and returns that reason; never returns otherwise. The worker
    /// has stopped registering and beating by then.
    pub async fn refused(&self) -> String {
        let mut rx = self.shared.refused.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            // The sender lives as long as `self`.
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Revokes every job here and waits (up to `grace` each, in parallel)
    /// for them to checkpoint and exit: a node leaving on purpose loses no
    /// work. The scheduler requeues them when the worker stops beating.
    pub async fn drain(&mut self, grace: Duration) {
        let all = self.shared.lock().running();
        let waits: Vec<_> = all
            .into_iter()
            .map(|l| {
                let sh = self.shared.clone();
                tokio::spawn(async move { stop_launch_within(&sh, l, grace).await })
            })
            .collect();
        for w in waits {
            let _ = w.await;
        }
    }

    /// Stops the service and kills every job here.
    pub fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            t.abort();
        }
        let launches: Vec<Launch> = {
            let mut st = self.shared.lock();
            // Launches still starting are killed as soon as they run.
            st.closing = true;
            st.launches.drain().map(|(_, l)| l).collect()
        };
        // Nothing of the worker's outlives it: what it kept of launches
        // on several workers goes back too (another part that still runs
        // loses its checkpoint writes, as its worker is told this one is
        // gone).
        let kept: Vec<SharedDirs> = std::mem::take(&mut self.shared.lock().kept)
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        for d in kept {
            d.take_back();
        }
        for l in &launches {
            l.run.kill();
        }
        // Nothing runs here any more: no uid is held.
        let contained = self.shared.containment.is_some();
        let held: Vec<u32> = launches.iter().filter_map(|l| l.uid).collect();
        drop(launches);
        if contained {
            cgroup::drain(Duration::from_secs(5));
        } else {
            for u in held {
                uids::kill_all(u);
            }
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts a worker manager on the current tokio runtime: binds its service,
/// then registers and beats in the background (retrying while the scheduler
/// is unreachable).
pub async fn start(cfg: WorkerConfig) -> Result<WorkerHandle, WorkerError> {
    if let Some(range) = cfg.job_uids {
        if cfg.job_user.is_some() {
            return Err(WorkerError::Refused(
                "--job-user and --job-uids: give one (a shared account, or a uid per job)".into(),
            ));
        }
        uids::check_range(range).map_err(WorkerError::Refused)?;
        #[cfg(unix)]
        if unsafe { libc::geteuid() } != 0 {
            return Err(WorkerError::Refused(format!(
                "--job-uids {}-{}: only a worker running as root can start jobs as other uids",
                range.0, range.1
            )));
        }
        tracing::info!(
            first = range.0,
            last = range.1,
            "each job runs as a uid of its own"
        );
    }
    let job_user = match &cfg.job_user {
        _ if cfg.job_uids.is_some() => None,
        Some(name) => {
            let u = crate::process::JobUser::lookup(name).map_err(WorkerError::Refused)?;
            #[cfg(unix)]
            if unsafe { libc::geteuid() } != 0 {
                return Err(WorkerError::Refused(format!(
                    "--job-user {name}: only a worker running as root can start jobs as another account"
                )));
            }
            tracing::info!(user = %u.name, uid = u.uid, "jobs run as their own account");
            Some(u)
        }
        None => {
            #[cfg(unix)]
            if unsafe { libc::geteuid() } == 0 {
                if !cfg.allow_root_jobs {
                    return Err(WorkerError::Refused(
                        "this worker runs as root and would run jobs as root, where they can read its token and every other secret on the node: pass --job-user NAME (an unprivileged account jobs run as), or --allow-root-jobs on a single-user machine".into(),
                    ));
                }
                tracing::warn!(
                    "jobs run as root (--allow-root-jobs): they can read this worker's token"
                );
            }
            None
        }
    };
    let host_gb = host_mem_gb();
    if let Some(m) = cfg.memory_gb {
        if !(m > 0.0 && m.is_finite()) || (host_gb > 0.0 && m > host_gb) {
            return Err(WorkerError::Refused(format!(
                "memory_gb = {m}: a launch's memory limit must be positive and at most this node's {host_gb:.1} GB"
            )));
        }
    }
    if cfg.max_processes == Some(0) {
        return Err(WorkerError::Refused(
            "max_processes = 0: a launch needs at least 1 process".into(),
        ));
    }
    // Cgroups, and what an earlier run of this worker left in them, before
    // anything registers or starts.
    let containment =
        cgroup::Containment::detect(&cfg.cgroup, &cgroup::worker_key(&cfg.name, &cfg.workdir))
            .map_err(WorkerError::Refused)?;
    match &containment {
        Some(c) => {
            let killed = c.sweep_stale();
            if killed > 0 {
                tracing::warn!(
                    killed,
                    "killed what launches of an earlier run of this worker left in their cgroups"
                );
            }
            tracing::info!(containment = %c.summary, "a cgroup per launch");
        }
        None if cfg.job_uids.is_some() || cfg.job_user.is_some() => tracing::warn!(
            "no cgroups: a job that leaves its process group is found by its uid only"
        ),
        None => {}
    }
    // Then the directories an earlier run gave its launches and never took back
    // (it was killed): taken back before the scheduler hears of this node.
    if cfg.job_uids.is_some() {
        let taken = crate::process::reclaim(&cfg.workdir);
        if taken > 0 {
            tracing::warn!(
                taken,
                "took back the directories launches of an earlier run of this worker still held"
            );
        }
    }
    let mut gpus = discover_gpus(cfg.logical_gpus)?;
    speed::measure(&mut gpus, &cfg.gpu_slowdown, cfg.speed_probe.as_deref())?;
    std::fs::create_dir_all(&cfg.workdir)
        .map_err(|e| WorkerError::Io(format!("{}: {e}", cfg.workdir.display())))?;
    crate::conn::raise_fd_limit();
    let listener = crate::net::listen(cfg.listen).await?;
    let bound = listener.local_addr().map_err(|e| NetError::Listen {
        addr: cfg.listen.to_string(),
        message: e.to_string(),
    })?;
    let address = match &cfg.advertise {
        Some(a) => a.clone(),
        None if bound.ip().is_unspecified() => {
            return Err(WorkerError::Io(format!(
                "listening on {bound}: pass --advertise HOST:PORT, the address the scheduler should use"
            )))
        }
        None => bound.to_string(),
    };
    let client = cfg.security.scheduler_client(&cfg.scheduler)?;
    let mut server = cfg.security.server()?;
    let token = cfg.security.check();
    let shared = Arc::new(Shared {
        job_user,
        job_uids: cfg.job_uids,
        containment,
        gpus,
        address: address.clone(),
        cfg,
        state: Mutex::new(State {
            // 0 is "unknown" to a launch: the first epoch is 1.
            lease_epoch: 1,
            ..State::default()
        }),
        refused: tokio::sync::watch::channel(None).0,
    });
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let check = FromScheduler {
        token,
        shared: shared.clone(),
    };
    let svc = WorkerServer::with_interceptor(Service(shared.clone()), check);
    let mut rx = stop_rx.clone();
    let serve = tokio::spawn(async move {
        let incoming = crate::conn::incoming(
            listener,
            crate::conn::ConnLimits::default(),
            std::sync::Arc::new(crate::conn::Registry::default()),
        );
        let r = server
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = rx.changed().await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!("worker service stopped: {e}");
        }
    });
    let beat = tokio::spawn(heartbeat_loop(shared.clone(), client.clone()));
    let report = tokio::spawn(report_loop(shared.clone(), client));
    tracing::info!(
        address = %address,
        gpus = shared.gpus.len(),
        "worker listening"
    );
    Ok(WorkerHandle {
        address,
        shared,
        stop,
        tasks: vec![serve, beat, report],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_gpus_on_request_and_a_clear_error_without_nvml() {
        let g = discover_gpus(Some(3)).unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g[2].index, 2);
        let e = discover_gpus(Some(0)).unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        match discover_gpus(None) {
            // A machine with NVIDIA drivers: real devices with UUIDs.
            Ok(g) => assert!(!g.is_empty() && g.iter().all(|d| !d.uuid.is_empty())),
            // Without them: the message says how to go on.
            Err(e) => assert!(e.to_string().contains("--gpus N"), "{e}"),
        }
    }

    #[test]
    fn a_bad_worker_section_is_refused_with_its_file_line_and_figures() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("worker.toml");
        let read = |text: &str| {
            std::fs::write(&f, text).unwrap();
            WorkerSection::read(&f)
        };
        let e =
            read("[worker]\npass_env = [\"LD_LIBRARY_PATH\", \"BLOX_TOKEN_FILE\"]\n").unwrap_err();
        assert!(
            e.contains("worker.toml") && e.contains(":2") && e.contains("BLOX_TOKEN_FILE"),
            "{e}"
        );
        let e = read("[worker]\nmemory_gb = 1000000\n").unwrap_err();
        assert!(
            e.contains(":2") && e.contains("1000000") && e.contains("GB"),
            "{e}"
        );
        let e = read("[worker]\nmax_processes = 0\n").unwrap_err();
        assert!(e.contains("max_processes"), "{e}");
        let e = read("[worker]\npass_envs = []\n").unwrap_err();
        assert!(e.contains("pass_envs"), "{e}");
        let w = read("[worker]\npass_env = [\"NCCL_*\"]\nmax_processes = 64\ncgroup = \"off\"\n")
            .unwrap();
        let mut cfg = WorkerConfig {
            max_processes: Some(8),
            ..WorkerConfig::default()
        };
        w.apply(&mut cfg);
        // The command line's value stays; the file fills the rest.
        assert_eq!(cfg.max_processes, Some(8));
        assert_eq!(cfg.pass_env, vec!["NCCL_*".to_string()]);
        assert_eq!(cfg.cgroup, cgroup::CgroupSetting::Off);
    }

    /// A job that stopped itself because its lease ran out is fenced even
    /// when a late heartbeat renewed the lease before it exited (a worker
    /// starved of CPU: the job read the lease file's end, the renewal came
    /// after). Before, such an exit read as a crash, blamed on the job.
    #[test]
    fn a_job_stopped_by_a_lapsed_lease_is_fenced_after_the_renewal_too() {
        let now = Instant::now();
        let mut st = State {
            lease_until: Some(now - Duration::from_millis(500)),
            fence_grace: Duration::from_secs(2),
            ..State::default()
        };
        assert!(st.fenced() && st.stopped_by_lease(now));
        st.renew_lease(now + Duration::from_secs(10));
        assert!(!st.fenced());
        // Its exit, within the grace after the lapsed lease's end.
        assert!(st.stopped_by_lease(now));
        assert!(st.stopped_by_lease(now + Duration::from_secs(2)));
        // Later, an exit without a finish is the job's own.
        assert!(!st.stopped_by_lease(now + Duration::from_secs(4)));
        // A renewal in time notes no lapse.
        let mut calm = State {
            lease_until: Some(now + Duration::from_secs(1)),
            fence_grace: Duration::from_secs(2),
            ..State::default()
        };
        calm.renew_lease(now + Duration::from_secs(10));
        assert!(!calm.stopped_by_lease(now + Duration::from_secs(1)));
    }
}
