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

use crate::net::{NetError, SchedulerClient, Security};
use crate::process::{LaunchSpec, Running};
use crate::proto::worker_server::{Worker, WorkerServer};
use crate::proto::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

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
        }
    }
}

#[derive(Default)]
struct State {
    worker_id: Option<String>,
    launches: HashMap<u64, Launch>,
    /// Exits and metrics not yet delivered to the scheduler (metrics
    /// bounded: the oldest are dropped and counted).
    exits: Vec<(ExitReport, Instant)>,
    metrics: Vec<MetricSample>,
    metrics_dropped: u64,
    /// Fencing: until when this worker may run jobs without hearing from
    /// the scheduler (`None`: not registered, or no lease).
    lease_until: Option<Instant>,
}

/// The most metric samples a worker holds for the scheduler (when it cannot
/// reach it); older ones are dropped.
const MAX_PENDING_METRICS: usize = 100_000;

impl State {
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

    /// True when the lease ran out: the worker must not run jobs.
    fn fenced(&self) -> bool {
        self.lease_until.is_some_and(|t| Instant::now() > t)
    }

    /// The launches running here, as reported when registering again.
    fn reports(&self) -> Vec<RunningLaunch> {
        let mut v: Vec<RunningLaunch> = self.launches.iter().map(|(j, l)| l.report(*j)).collect();
        v.sort_by_key(|r| r.launch.map(|l| l.job_id));
        v
    }

    /// The launches running here.
    fn running(&self) -> Vec<LaunchRef> {
        self.launches
            .iter()
            .map(|(j, l)| LaunchRef {
                job_id: *j,
                launch: l.launch,
            })
            .collect()
    }
}

struct Shared {
    cfg: WorkerConfig,
    gpus: Vec<GpuDevice>,
    address: String,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn reply(e: &crate::process::Exit, finished: bool) -> RevokeReply {
    RevokeReply {
        was_running: true,
        code: e.code,
        finished,
        exited_s_ago: e.at.elapsed().as_secs_f64(),
    }
}

struct Service(Arc<Shared>);

#[tonic::async_trait]
impl Worker for Service {
    async fn launch(&self, req: Request<LaunchRequest>) -> Result<Response<Ack>, Status> {
        let r = req.into_inner();
        let l = crate::validate::launch(&r)?;
        let sh = &self.0;
        let mut st = sh.lock();
        if !r.worker_id.is_empty() && st.worker_id.as_deref() != Some(r.worker_id.as_str()) {
            return Err(Status::aborted(format!(
                "this launch is for worker `{}`; this is {}",
                r.worker_id,
                st.worker_id
                    .as_deref()
                    .map_or("a worker not registered yet".into(), |w| format!("`{w}`"))
            )));
        }
        if st.fenced() {
            return Err(Status::unavailable(
                "this worker's lease ran out (its heartbeats do not reach the scheduler): it runs no job until they do",
            ));
        }
        if let Some(g) = r.gpus.iter().find(|g| **g as usize >= sh.gpus.len()) {
            return Err(Status::invalid_argument(format!(
                "gpus: this worker has {} GPUs; there is no GPU {g}",
                sh.gpus.len()
            )));
        }
        if let Some(old) = st.launches.get(&l.job_id) {
            return Err(Status::already_exists(format!(
                "job {} already runs here (launch {})",
                l.job_id, old.launch
            )));
        }
        for (job, other) in &st.launches {
            if let Some(g) = r.gpus.iter().find(|g| other.gpus.contains(g)) {
                return Err(Status::failed_precondition(format!(
                    "GPU {g} is held by job {job}"
                )));
            }
        }
        let dir = sh.cfg.workdir.join("jobs").join(l.job_id.to_string());
        let checkpoint = if r.checkpoint_dir.is_empty() {
            dir.join("checkpoint")
        } else {
            PathBuf::from(&r.checkpoint_dir)
        };
        let spec = LaunchSpec {
            job: l.job_id,
            argv: r.command.clone(),
            devices: r
                .gpus
                .iter()
                .map(|g| sh.gpus[*g as usize].index.to_string())
                .collect(),
            control: dir.join(format!("launch-{}", l.launch)),
            checkpoint,
            coord: (!r.coord_dir.is_empty()).then(|| PathBuf::from(&r.coord_dir)),
            resume: r.resume,
            batch_size: r.batch_size,
            master_addr: r.master_addr.clone(),
            worker_addr: sh.address.clone(),
            process_per_gpu: r.process_per_gpu,
            first_rank: r.first_rank,
            world_size: (r.world_size > 0).then_some(r.world_size),
            generation: r.generation,
        };
        let ranks = if r.process_per_gpu {
            r.gpus.len() as u32
        } else {
            1
        };
        match Running::spawn(&spec) {
            Ok(run) => {
                tracing::info!(job = l.job_id, launch = l.launch, gpus = ?r.gpus, "launched");
                st.launches.insert(
                    l.job_id,
                    Launch {
                        launch: l.launch,
                        gpus: r.gpus,
                        run,
                        first_rank: r.first_rank,
                        ranks,
                        world_size: if r.world_size > 0 {
                            r.world_size
                        } else {
                            ranks
                        },
                        generation: r.generation,
                        batch_size: r.batch_size,
                        spawned: Instant::now(),
                        startup_s: None,
                    },
                );
                Ok(Response::new(Ack {}))
            }
            Err(e) => {
                tracing::warn!(job = l.job_id, "{e}");
                Err(Status::failed_precondition(e.to_string()))
            }
        }
    }

    async fn revoke(&self, req: Request<RevokeRequest>) -> Result<Response<RevokeReply>, Status> {
        let r = req.into_inner();
        let l = crate::validate::revoke(&r)?;
        let taken = {
            let mut st = self.0.lock();
            match st.launches.get(&l.job_id) {
                Some(x) if x.launch == l.launch => st.launches.remove(&l.job_id),
                _ => None,
            }
        };
        let Some(launch) = taken else {
            // Already exited; its exit is (or was) reported.
            return Ok(Response::new(RevokeReply::default()));
        };
        let grace = Duration::from_secs_f64(if r.kill { 0.0 } else { r.grace_s });
        let job = l.job_id;
        let out = tokio::task::spawn_blocking(move || {
            if grace.is_zero() {
                launch.run.kill();
            }
            let e = launch.run.revoke_and_wait(grace, job);
            let finished = launch.run.finished(&e);
            (e, finished, launch)
        })
        .await
        .map_err(|e| Status::internal(format!("revocation of job {job} failed: {e}")))?;
        let (e, finished, mut launch) = out;
        // Metrics written up to the exit (the last progress) still count.
        let mut samples = Vec::new();
        launch.run.read_metrics(job, |k, v| {
            samples.push(MetricSample {
                launch: Some(l),
                key: k.to_string(),
                value: v,
            })
        });
        self.0.lock().metrics.extend(samples);
        tracing::info!(job, launch = l.launch, code = ?e.code, finished, "revoked");
        Ok(Response::new(reply(&e, finished)))
    }

    async fn reconfigure(&self, req: Request<ReconfigureRequest>) -> Result<Response<Ack>, Status> {
        let r = req.into_inner();
        let l = crate::validate::reconfigure(&r)?;
        let st = self.0.lock();
        match st.launches.get(&l.job_id) {
            Some(x) if x.launch == l.launch => x
                .run
                .set_batch_size(r.batch_size)
                .map(|_| Response::new(Ack {}))
                .map_err(|e| Status::internal(format!("job {}: {e}", l.job_id))),
            _ => Err(Status::not_found(format!(
                "job {} launch {} does not run here",
                l.job_id, l.launch
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
        let launches: Vec<Launch> = self
            .shared
            .lock()
            .launches
            .drain()
            .map(|(_, l)| l)
            .collect();
        for l in &launches {
            l.run.kill();
        }
        drop(launches);
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
    let gpus = discover_gpus(cfg.logical_gpus)?;
    std::fs::create_dir_all(&cfg.workdir)
        .map_err(|e| WorkerError::Io(format!("{}: {e}", cfg.workdir.display())))?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(|e| NetError::Listen {
            addr: cfg.listen.to_string(),
            message: e.to_string(),
        })?;
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
    let check = cfg.security.check();
    let shared = Arc::new(Shared {
        gpus,
        address: address.clone(),
        cfg,
        state: Mutex::new(State::default()),
    });
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let svc = WorkerServer::with_interceptor(Service(shared.clone()), check);
    let mut rx = stop_rx.clone();
    let serve = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
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

/// Registers, then beats every `heartbeat_s`; registers again whenever the
/// scheduler does not know this worker (after revoking every job here).
/// When no heartbeat got through for the lease the scheduler gave, every job
/// here is fenced ([`fence`]).
async fn heartbeat_loop(sh: Arc<Shared>, mut client: SchedulerClient) {
    let mut period = Duration::from_secs(1);
    let mut lease: Option<(Duration, Duration)> = None;
    let mut probe_path: Option<PathBuf> = None;
    let mut warned = false;
    loop {
        let id = sh.lock().worker_id.clone();
        // A call never waits longer than a beat (or half the lease): a cut
        // network must not hold the loop past the lease.
        let call_timeout = lease.map_or(Duration::from_secs(5), |(l, _)| (l / 2).max(period));
        match id {
            None => {
                let req = RegisterRequest {
                    name: sh.cfg.name.clone(),
                    address: sh.address.clone(),
                    gpus: sh.gpus.clone(),
                    cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
                    host_mem_gb: host_mem_gb(),
                    running: sh.lock().reports(),
                };
                let sent = Instant::now();
                let r = tokio::time::timeout(call_timeout, client.register(req))
                    .await
                    .unwrap_or_else(|_| Err(Status::deadline_exceeded("no reply")));
                match r {
                    Ok(r) => {
                        let r = r.into_inner();
                        tracing::info!(worker = %r.worker_id, "registered with the scheduler");
                        if let Ok(p) = Duration::try_from_secs_f64(r.heartbeat_s) {
                            if !p.is_zero() {
                                period = p.min(Duration::from_secs(3600));
                            }
                        }
                        lease = match (
                            Duration::try_from_secs_f64(r.lease_s),
                            Duration::try_from_secs_f64(r.fence_grace_s),
                        ) {
                            (Ok(l), Ok(g)) if !l.is_zero() && l < Duration::from_secs(86_400) => {
                                Some((l, g.min(Duration::from_secs(86_400))))
                            }
                            _ => None,
                        };
                        probe_path = (!r.checkpoint_probe_path.is_empty())
                            .then(|| PathBuf::from(&r.checkpoint_probe_path));
                        let mut st = sh.lock();
                        st.worker_id = Some(r.worker_id);
                        st.lease_until = lease.map(|(l, _)| sent + l);
                        warned = false;
                        // Beat at once: the first heartbeat carries the
                        // checkpoint probe that lets this worker in.
                        continue;
                    }
                    Err(e) => {
                        if !warned {
                            tracing::warn!(
                                "cannot register with {}: {}",
                                sh.cfg.scheduler,
                                e.message()
                            );
                            warned = true;
                        }
                        // Jobs kept from an earlier registration are
                        // fenced when the lease it gave runs out.
                        if let Some((l, grace)) = lease {
                            if sh.lock().fenced() {
                                fence(&sh, l, grace).await;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        continue;
                    }
                }
            }
            Some(id) => {
                let running = sh.lock().running();
                // Read on every beat until accepted: an operator may mount
                // the storage meanwhile.
                let checkpoint_probe = probe_path
                    .as_deref()
                    .and_then(|p| std::fs::read_to_string(p).ok())
                    .unwrap_or_default();
                let sent = Instant::now();
                let r = tokio::time::timeout(
                    call_timeout,
                    client.heartbeat(HeartbeatRequest {
                        worker_id: id.clone(),
                        running,
                        checkpoint_probe,
                    }),
                )
                .await
                .unwrap_or_else(|_| Err(Status::deadline_exceeded("no reply")));
                match r {
                    Ok(r) => {
                        if let Some((l, _)) = lease {
                            sh.lock().lease_until = Some(sent + l);
                        }
                        // The scheduler checks the probe until it once
                        // matches; a new registration names it again.
                        probe_path = None;
                        for l in r.into_inner().stop {
                            stop_launch(&sh, l).await;
                        }
                        warned = false;
                    }
                    Err(e) if e.code() == Code::NotFound => {
                        let mut st = sh.lock();
                        tracing::warn!(worker = %id, jobs = st.launches.len(), "the scheduler does not know this worker any more ({}); registering again with the jobs running here (it adopts them or revokes them)", e.message());
                        // The jobs run on under the lease the last
                        // acknowledged heartbeat renewed: if registering
                        // takes longer, they are fenced.
                        st.worker_id = None;
                        // Exits of launches before this point: the new
                        // registration reports what still runs instead.
                        st.exits.clear();
                        continue;
                    }
                    Err(e) if e.code() == Code::FailedPrecondition => {
                        // Not taken into the cluster; beating still renews
                        // nothing, so it runs no job meanwhile.
                        if !warned {
                            tracing::error!("{}", e.message());
                            warned = true;
                        }
                    }
                    Err(e) => {
                        if !warned {
                            tracing::warn!(
                                "heartbeat to {} failed: {}",
                                sh.cfg.scheduler,
                                e.message()
                            );
                            warned = true;
                        }
                    }
                }
            }
        }
        if let Some((l, grace)) = lease {
            if sh.lock().fenced() {
                fence(&sh, l, grace).await;
            }
        }
        tokio::time::sleep(period).await;
    }
}

/// The lease ran out: every job here is revoked, gets `grace` to checkpoint
/// and is killed after it; each is reported as fenced (queued again without
/// blame) once the scheduler can be reached. The scheduler declares this
/// worker gone only after the lease and the grace are over, so no job runs
/// here and on its next worker at once.
async fn fence(sh: &Arc<Shared>, lease: Duration, grace: Duration) {
    let taken: Vec<(u64, Launch)> = sh.lock().launches.drain().collect();
    if taken.is_empty() {
        return;
    }
    tracing::warn!(
        jobs = taken.len(),
        "no heartbeat reached the scheduler for {:.1} s (the lease): stopping every job here",
        lease.as_secs_f64()
    );
    let waits: Vec<_> = taken
        .into_iter()
        .map(|(job, l)| {
            tokio::task::spawn_blocking(move || {
                let e = l.run.revoke_and_wait(grace, job);
                let finished = l.run.finished(&e);
                (job, l.launch, e, finished)
            })
        })
        .collect();
    for w in waits {
        let Ok((job, launch, e, finished)) = w.await else {
            continue;
        };
        tracing::info!(job, launch, finished, "fenced");
        sh.lock().exits.push((
            ExitReport {
                worker_id: String::new(),
                launch: Some(LaunchRef {
                    job_id: job,
                    launch,
                }),
                code: e.code,
                finished,
                reason: if finished {
                    String::new()
                } else {
                    format!(
                        "fenced: its worker could not reach the scheduler for {:.1} s",
                        lease.as_secs_f64()
                    )
                },
                exited_s_ago: 0.0,
                fenced: !finished,
            },
            e.at,
        ));
    }
}

/// Revokes a launch the scheduler no longer expects, or every launch when
/// the scheduler forgot this worker (grace: 5 s).
async fn stop_launch(sh: &Arc<Shared>, l: LaunchRef) {
    stop_launch_within(sh, l, Duration::from_secs(5)).await
}

/// Revokes a launch and waits up to `grace` for it to exit (then kills it).
async fn stop_launch_within(sh: &Arc<Shared>, l: LaunchRef, grace: Duration) {
    let taken = {
        let mut st = sh.lock();
        match st.launches.get(&l.job_id) {
            Some(x) if x.launch == l.launch => st.launches.remove(&l.job_id),
            _ => None,
        }
    };
    if let Some(launch) = taken {
        tracing::info!(job = l.job_id, launch = l.launch, "revoking");
        let _ = tokio::task::spawn_blocking(move || {
            launch.run.revoke_and_wait(grace, l.job_id);
        })
        .await;
    }
}

/// Every 20 ms: reads the jobs' metric logs, notices exits, and delivers
/// both to the scheduler (undelivered ones are retried).
async fn report_loop(sh: Arc<Shared>, mut client: SchedulerClient) {
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (id, exits, metrics) = {
            let mut st = sh.lock();
            let st = &mut *st;
            let mut ended = Vec::new();
            for (job, l) in st.launches.iter_mut() {
                let lref = LaunchRef {
                    job_id: *job,
                    launch: l.launch,
                };
                let startup = &mut l.startup_s;
                l.run.read_metrics(*job, |k, v| {
                    if k == blox_client::STARTUP_METRIC && startup.is_none() && v.is_finite() {
                        *startup = Some(v.max(0.0));
                    }
                    st.metrics.push(MetricSample {
                        launch: Some(lref),
                        key: k.to_string(),
                        value: v,
                    })
                });
                if let Some(e) = l.run.exit() {
                    ended.push((*job, e, l.run.finished(&e)));
                }
            }
            for (job, e, finished) in ended {
                let l = st.launches.remove(&job).expect("listed above");
                tracing::info!(job, launch = l.launch, code = ?e.code, finished, "exited");
                st.exits.push((
                    ExitReport {
                        worker_id: String::new(),
                        launch: Some(LaunchRef {
                            job_id: job,
                            launch: l.launch,
                        }),
                        code: e.code,
                        finished,
                        reason: String::new(),
                        exited_s_ago: 0.0,
                        fenced: false,
                    },
                    e.at,
                ));
            }
            st.bound_metrics();
            let Some(id) = st.worker_id.clone() else {
                continue;
            };
            (
                id,
                std::mem::take(&mut st.exits),
                std::mem::take(&mut st.metrics),
            )
        };
        if !metrics.is_empty() {
            let batch = MetricBatch {
                worker_id: id.clone(),
                samples: metrics,
            };
            if let Err(e) = client.push_metrics(batch.clone()).await {
                tracing::debug!("metric push failed: {}", e.message());
                let mut st = sh.lock();
                // Keep them for the next try, newest last.
                let newer = std::mem::take(&mut st.metrics);
                st.metrics = batch.samples;
                st.metrics.extend(newer);
                st.bound_metrics();
            }
        }
        let mut failed = Vec::new();
        for (mut r, at) in exits {
            r.worker_id = id.clone();
            r.exited_s_ago = at.elapsed().as_secs_f64();
            match client.report_exit(r.clone()).await {
                Ok(_) => {}
                // Refused as it is: sending it again cannot help.
                Err(e) if e.code() == Code::InvalidArgument => {
                    tracing::warn!("exit report refused: {}", e.message());
                }
                Err(e) => {
                    tracing::debug!("exit report failed: {}", e.message());
                    failed.push((r, at));
                }
            }
        }
        if !failed.is_empty() {
            let mut st = sh.lock();
            failed.extend(std::mem::take(&mut st.exits));
            st.exits = failed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_gpus_on_request_and_a_clear_error_without_nvml() {
        let g = discover_gpus(Some(3)).unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g[2].index, 2);
        assert!(discover_gpus(Some(0)).is_err());
        match discover_gpus(None) {
            // A machine with NVIDIA drivers: real devices with UUIDs.
            Ok(g) => assert!(!g.is_empty() && g.iter().all(|d| !d.uuid.is_empty())),
            // Without them: the message says how to go on.
            Err(e) => assert!(e.to_string().contains("--gpus N"), "{e}"),
        }
    }
}
