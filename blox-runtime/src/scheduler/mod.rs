//! The central scheduler (`blox scheduler`): the blox-core round loop on
//! wall-clock rounds over a cluster of worker managers (Blox §6.3).
//!
//! [`ClusterBackend`] implements every mechanism trait of the loop over gRPC,
//! so the policies that were compared in simulation drive real jobs with no
//! change:
//!
//! - cluster management: a registered worker joins as a node with its GPUs;
//!   one silent for `worker_timeout_s` leaves, and the loop requeues its jobs
//!   (they resume from their last checkpoint);
//! - metric collection: metrics and exits the workers pushed since the last
//!   round (progress, crashes with their exit status, retries up to
//!   `max_retries`);
//! - job source: `Submit` calls, each written to the persistent job table
//!   ([`crate::store`]) before it is acknowledged;
//! - preemption: `Revoke` on every worker of the job (the lease is revoked,
//!   the job checkpoints and exits, or is killed after `grace_s`);
//! - launch: `Launch` on every worker of the job, its GPUs grouped by node.
//!
//! A restarted scheduler reads the job table and holds every accepted,
//! unfinished job for `worker_timeout_s`. Workers it no longer knows register
//! again and report what they still run: a job whose every rank is reported
//! is adopted and runs on, without a checkpoint and restore (`scheduler/adopt.rs`); a
//! launch it cannot adopt is revoked before its GPUs are used, and its job
//! queued again (it resumes from its checkpoint).

mod adopt;
mod backend;
mod config;
mod dashboard;
mod events;
mod forecast;
mod http;
mod jobs;
pub mod metrics;
mod queue;
mod rounds;
mod service;
mod status;
mod table;
pub mod uids;

pub use backend::{coord_dir, ClusterBackend, RoundStats};
pub use config::RuntimeConfig;

use crate::net::{NetError, WorkerClient};
use crate::proto::scheduler_server::SchedulerServer;
use crate::proto::*;
use crate::store::{Store, StoreError};
use blox_core::topology;
use blox_core::*;
use service::{spec_of, Service};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Errors that stop the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Loop(#[from] LoopError),
    #[error("{0}")]
    Runtime(String),
}

/// An idempotency key as the scheduler files it: each user's keys are their
/// own.
fn key_of(user: Option<&str>, key: &str) -> String {
    format!("{}\u{1f}{key}", user.unwrap_or(""))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

struct WorkerEntry {
    /// Its node's name (`RegisterRequest.name`): job uids are released
    /// node by node.
    name: String,
    /// How it contains its launches (`RegisterRequest.containment`).
    containment: String,
    address: String,
    gpus: Vec<GpuDevice>,
    cpus: u32,
    host_mem_gb: f64,
    last_seen: Instant,
    alive: bool,
    /// It showed it sees the shared checkpoint storage (or there is none):
    /// only then does it join the cluster.
    verified: bool,
    /// When it was declared gone; shown by `Status` for an hour, then
    /// forgotten (each restart of a worker registers a new one).
    dead_since: Option<Instant>,
    /// The node it is in the loop's cluster, once joined.
    node: Option<NodeId>,
    /// Calls it as the scheduler it registered with (its credential on
    /// every call).
    client: WorkerClient,
    /// Launches it still ran when it registered (after this scheduler
    /// restarted), while they wait to be adopted or revoked; it joins the
    /// cluster once they are decided.
    reported: Vec<RunningLaunch>,
    /// Where it sits in the topology (`--labels`).
    labels: BTreeMap<String, String>,
    /// Its lease epoch as its last heartbeat gave it (0: none yet): named
    /// in every launch, which the worker refuses once its lease ran out
    /// since (`LaunchRequest.lease_epoch`).
    lease_epoch: u64,
}

/// What the gRPC handlers and the round loop share.
struct Hub {
    epoch: String,
    workers: BTreeMap<String, WorkerEntry>,
    /// Jobs accepted and not running as of the last round, in all and by
    /// user (`max_waiting_jobs`, `max_waiting_per_user`; submissions since
    /// are counted from `submissions`).
    waiting_total: usize,
    waiting_by_user: HashMap<String, usize>,
    /// Why the job table took no write lately (cleared by the next write
    /// that succeeds); `None` while it takes them.
    table_error: Option<String>,
    /// Each registered worker's own credential (`RegisterReply.
    /// worker_secret`) → its id: a worker is who its credential says.
    credentials: HashMap<String, String>,
    next_worker: u64,
    /// Accepted submissions not yet handed to the loop.
    submissions: queue::Submissions,
    exits: Vec<(ExitReport, Instant)>,
    /// Metrics pushed since the last round, by job (bounded per job: the
    /// oldest are dropped), and how many were dropped in all.
    metrics: HashMap<u64, VecDeque<MetricSample>>,
    metrics_dropped: u64,
    cancels: BTreeMap<u64, String>,
    /// Launches each worker should be running.
    expected: HashMap<String, HashSet<(u64, u32)>>,
    /// Launches whose revocation got no answer (job → (worker, launch)):
    /// they may still run, so the job is not launched again until the
    /// worker's heartbeat shows them stopped or it is declared gone.
    in_doubt: HashMap<u64, Vec<(String, u32)>>,
    /// Jobs restored from the job table, held until `hold_until`: by then
    /// every launch of the previous scheduler run has stopped (its worker
    /// revoked it on registering again, or fenced it when its lease ran out).
    held: VecDeque<JobSpec>,
    hold_until: Instant,
    /// The previous run's workers (id → address, as the job table last
    /// recorded them) and, for each held job that ran, the addresses of the
    /// workers it ran on. A held job is queued before `hold_until` once
    /// every worker it ran on (a job that did not run: every previous
    /// worker) registered again without reporting it: a worker registers
    /// only after the jobs its lapsed lease stopped have exited.
    restart_workers: BTreeMap<String, String>,
    held_on: HashMap<u64, Vec<String>>,
    /// Every job's record, as persisted (status, placement, counters).
    jobs: jobs::JobTable,
    /// Ended jobs in the order they ended, with when (Unix seconds) and
    /// their record's bytes: the oldest are forgotten first
    /// ([`RuntimeConfig::retention_s`], `retention_jobs`, `retention_bytes`).
    ended: VecDeque<(u64, f64, u64)>,
    /// The bytes of the records in `ended`.
    ended_bytes: u64,
    /// Bytes of the submissions waiting, by user and in all, as of the last
    /// round (`max_waiting_bytes_per_user`, `max_waiting_bytes`).
    waiting_bytes: u64,
    waiting_bytes_by_user: HashMap<String, u64>,
    compacted: u64,
    next_job_id: u64,
    /// The job of each idempotency key (`JobSubmission.idempotency_key`).
    keys: HashMap<String, u64>,
    /// GPUs of the workers in the loop's cluster.
    cluster_gpus: u32,
    rounds: u64,
    policy: String,
    /// The last invalid decision a policy made (dropped), for `Status`.
    last_error: String,
    /// The latest forecast of starts and finishes, and its drift.
    forecasts: forecast::Forecasts,
    /// The topology as registered workers placed themselves in it (to
    /// check a new worker's labels), and how many did.
    topology: Option<topology::Topology>,
    labelled: u32,
    /// Nodes the loop keeps out on purpose, with why (a spare, quarantined):
    /// `Status` shows it as the worker's problem.
    node_notes: HashMap<u32, String>,
    /// The cluster's job uids ([`uids`]; `[runtime] job_uids`).
    uids: uids::UidPool,
}

impl Hub {
    /// Job `id` (its record in the table) ended at `at`.
    fn push_ended(&mut self, id: u64, at: f64) {
        use prost::Message;
        let bytes = self.jobs.get(&id).map_or(0, |r| r.encoded_len() as u64);
        self.ended_bytes += bytes;
        self.ended.push_back((id, at, bytes));
    }
}

type SharedHub = Arc<Mutex<Hub>>;

fn lock(h: &SharedHub) -> MutexGuard<'_, Hub> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes `checkpoint_dir/.blox-probe` with a token of this scheduler run
/// (atomically): a worker proves it mounts the shared checkpoint storage by
/// reading it back. Returns (path, token); `None` without a checkpoint_dir.
fn write_checkpoint_probe(cfg: &RuntimeConfig) -> Result<Option<(String, String)>, SchedulerError> {
    let Some(dir) = &cfg.checkpoint_dir else {
        return Ok(None);
    };
    let fail = |e: std::io::Error| {
        SchedulerError::Runtime(format!("[runtime] checkpoint_dir {}: {e}", dir.display()))
    };
    let handle = crate::safe_fs::Dir::open(dir, true, crate::safe_fs::Trust::Same)
        .map_err(|e| SchedulerError::Runtime(format!("[runtime] checkpoint_dir: {e}")))?;
    let token = format!(
        "blox-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let path = dir.join(".blox-probe");
    // A new file renamed into place, never through a link.
    handle
        .write(".blox-probe", token.as_bytes())
        .map_err(fail)?;
    Ok(Some((path.display().to_string(), token)))
}

/// A running scheduler: its address, and a way to stop it.
pub struct SchedulerHandle {
    pub address: SocketAddr,
    /// Where `GET /metrics` is served (`[runtime] metrics_listen`).
    pub metrics_address: Option<SocketAddr>,
    /// Where the dashboard is served (`[runtime] dashboard_listen`).
    pub dashboard_address: Option<SocketAddr>,
    /// Time 0 of the scheduler's clock (arrivals, finishes, rounds).
    pub started: Instant,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<RoundStats>>,
    thread: Option<std::thread::JoinHandle<Result<(), SchedulerError>>>,
}

impl SchedulerHandle {
    /// Timings of the rounds so far.
    pub fn round_stats(&self) -> RoundStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Asks the loop to stop after its current round and waits for it.
    pub fn shutdown(mut self) -> Result<(), SchedulerError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(SchedulerError::Runtime(
                "the scheduler thread panicked".into(),
            )),
            None => Ok(()),
        }
    }

    /// The flag that stops the loop (e.g. from a signal handler).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Waits until the loop ends (after the stop flag is set) and returns its result.
    pub fn wait(mut self) -> Result<(), SchedulerError> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(SchedulerError::Runtime(
                "the scheduler thread panicked".into(),
            )),
            None => Ok(()),
        }
    }
}

impl Drop for SchedulerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the scheduler: reads the job table, binds the service, and runs
/// `policies` on rounds of `round_s` in a thread of its own until stopped.
pub fn start(
    cfg: RuntimeConfig,
    policies: Policies,
    round_s: f64,
) -> Result<SchedulerHandle, SchedulerError> {
    start_with_selector(cfg, policies, round_s, None)
}

/// [`start`], with a [`PolicySelector`] (policy synthesis, Blox §5.2) that
/// may swap the policies between rounds, as in simulation.
pub fn start_with_selector(
    cfg: RuntimeConfig,
    policies: Policies,
    round_s: f64,
    selector: Option<Box<dyn PolicySelector>>,
) -> Result<SchedulerHandle, SchedulerError> {
    start_with(
        cfg,
        policies,
        round_s,
        Extras {
            selector,
            ..Extras::default()
        },
    )
}

/// What a scheduler may run beside its policies.
#[derive(Default)]
pub struct Extras {
    /// Swaps the policies between rounds (policy synthesis, Blox §5.2).
    pub selector: Option<Box<dyn PolicySelector>>,
    /// Predicts every job's start and finish after each round, on a thread
    /// of its own (`blox status --start`; the simulator's
    /// `blox_sim::forecast::SimForecaster`).
    pub forecaster: Option<Arc<dyn Forecaster>>,
}

/// [`start`], with [`Extras`].
pub fn start_with(
    cfg: RuntimeConfig,
    policies: Policies,
    round_s: f64,
    extras: Extras,
) -> Result<SchedulerHandle, SchedulerError> {
    let Extras {
        selector,
        forecaster,
    } = extras;
    let security = cfg.security()?;
    let worker_security = cfg.worker_security()?;
    // Who may call the user API and read the HTTP endpoints.
    let access = cfg.access()?;
    // A file over the size limit (`ulimit -f`) is an error the scheduler
    // handles (the job table refuses the write, the loop goes on), not a
    // signal that kills it.
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to "ignore" touches no memory.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    if access.needs_token() && cfg.worker_token_file.is_none() {
        tracing::warn!("[runtime] worker_token_file is unset: workers use the users' token, so any user can register a worker and be handed jobs");
    }
    let startup = cfg.startup;
    // The placement's settings against the topology's levels, before
    // anything starts (no nodes yet: they join as workers register).
    let mut empty = ClusterState::new();
    empty.set_topology(
        cfg.topology
            .clone()
            .and_then(|l| topology::Topology::empty(l).ok()),
    );
    policies.placement.fits_cluster(&empty).map_err(|why| {
        SchedulerError::Runtime(format!(
            "placement policy `{}` does not fit the cluster: {why}",
            policies.names.placement
        ))
    })?;
    let probe = write_checkpoint_probe(&cfg)?;
    // Connections: handshake deadline, caps (conn.rs).
    let backend_conn_limits = cfg.conn_limits();
    crate::conn::raise_fd_limit();
    let svc_connections = Arc::new(crate::conn::Registry::default());
    let store = Arc::new(Store::open(&cfg.state)?);
    let events = events::EventSink::open(&cfg)?;
    let (records, next_job_id) = store.load()?;
    // Generations count per run of the table, never by the clock.
    let identity = store.begin_run(
        backend::GENERATIONS_PER_RUN,
        backend::generation_base(unix_now()),
    )?;
    tracing::info!(
        cluster = identity.dir_key().as_deref().unwrap_or("legacy layout"),
        generation_base = identity.generation_base,
        "job table identity"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("blox-scheduler-rpc")
        .enable_all()
        .build()
        .map_err(|e| SchedulerError::Runtime(e.to_string()))?;
    let listen: SocketAddr = cfg.listen.parse().map_err(|e| NetError::Address {
        addr: cfg.listen.clone(),
        message: format!("{e}"),
    })?;
    let listener = rt.block_on(crate::net::listen(listen))?;
    let address = listener.local_addr().map_err(|e| NetError::Listen {
        addr: cfg.listen.clone(),
        message: e.to_string(),
    })?;
    let start = Instant::now();
    // Every accepted, unfinished job is queued again, in id order; its
    // service so far still counts.
    let mut hub = Hub {
        epoch: format!("{:x}", (unix_now() * 1000.0) as u64 % 0xffff_ffff),
        workers: BTreeMap::new(),
        credentials: HashMap::new(),
        table_error: None,
        waiting_total: 0,
        waiting_by_user: HashMap::new(),
        next_worker: 0,
        submissions: Default::default(),
        exits: Vec::new(),
        metrics: HashMap::new(),
        metrics_dropped: 0,
        cancels: BTreeMap::new(),
        expected: HashMap::new(),
        in_doubt: HashMap::new(),
        held: VecDeque::new(),
        hold_until: Instant::now() + Duration::from_secs_f64(cfg.worker_timeout_s),
        restart_workers: store.load_workers()?,
        held_on: HashMap::new(),
        jobs: jobs::JobTable::default(),
        ended: VecDeque::new(),
        ended_bytes: 0,
        waiting_bytes: 0,
        waiting_bytes_by_user: HashMap::new(),
        compacted: 0,
        // Job ids start at 1: 0 is "not set" in the API.
        next_job_id: next_job_id.max(1),
        keys: HashMap::new(),
        cluster_gpus: 0,
        rounds: 0,
        policy: policies.label(),
        last_error: String::new(),
        forecasts: forecast::Forecasts::default(),
        topology: cfg
            .topology
            .clone()
            .and_then(|l| topology::Topology::empty(l).ok()),
        labelled: 0,
        node_notes: HashMap::new(),
        uids: uids::UidPool::new(cfg.job_uid_range),
    };
    // Who held which job uid when the last run wrote it: none is given
    // again until the nodes that ran it say it is free.
    hub.uids.restore(store.load_uids()?);
    let (seeded, n_restored) = table::restore(&mut hub, records);
    let restored = seeded.keys().copied().collect();
    if n_restored > 0 {
        tracing::info!(
            jobs = n_restored,
            "restored unfinished jobs from the job table: those the workers still run are adopted; the others are queued again once the workers they ran on register again without them (at most a worker timeout)"
        );
    }
    let reads = policies.scheduling.metrics_read();
    if !reads.is_empty() {
        tracing::info!(
            "scheduling policy `{}` reads these job metrics, which jobs push through blox_client (docs/RUNTIME.md, \"Metrics each policy reads\"): {}",
            policies.names.scheduling,
            reads.join(", ")
        );
    }
    let hub = Arc::new(Mutex::new(hub));
    let stats = Arc::new(Mutex::new(RoundStats::default()));
    let metrics = Arc::new(metrics::Metrics::new());
    // The HTTP endpoints serve TLS when the gRPC API does.
    let http_tls = http::HttpTls::of(&security)?;
    let metrics_address = match &cfg.metrics_listen {
        None => None,
        Some(addr) => {
            let (m, h) = (metrics.clone(), hub.clone());
            let render: Arc<dyn Fn() -> String + Send + Sync> =
                Arc::new(move || m.render(&lock(&h)));
            let handler = metrics::handler(access.clone(), render);
            let bound = http::listen(&rt, addr, "metrics_listen", handler, http_tls.clone())?;
            tracing::info!(address = %bound, "Prometheus metrics at /metrics");
            Some(bound)
        }
    };
    let view = Arc::new(Mutex::new(dashboard::View::default()));
    let dashboard_address = match &cfg.dashboard_listen {
        None => None,
        Some(addr) => {
            let handler =
                dashboard::handler(hub.clone(), view.clone(), stats.clone(), access.clone());
            let bound = http::listen(&rt, addr, "dashboard_listen", handler, http_tls.clone())?;
            tracing::info!(address = %bound, "dashboard at http://{bound}/");
            Some(bound)
        }
    };
    let gate = crate::auth::SchedulerGate {
        access: access.clone(),
        workers: worker_security.check(),
        worker_certs: cfg.tls_client_ca.is_some(),
    };
    let svc = Service {
        stats: stats.clone(),
        hub: hub.clone(),
        store: store.clone(),
        start,
        cfg: cfg.clone(),
        probe,
        workers: worker_security.check(),
        security: worker_security,
        metrics: metrics.clone(),
        round_s,
    };
    let mut server = security.server()?;
    let conn_limits = backend_conn_limits;
    // A call without any of the cluster's tokens is refused before its body
    // is decoded; each handler then checks the credential of its role
    // (users, or a registered worker's own).
    let router = server.add_service(SchedulerServer::with_interceptor(svc, gate));
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let connections = svc_connections.clone();
    rt.spawn(async move {
        let incoming = crate::conn::incoming(listener, conn_limits, connections);
        let r = router
            .serve_with_incoming_shutdown(incoming, async move {
                while !stop2.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await;
        if let Err(e) = r {
            tracing::error!("scheduler service stopped: {e}");
        }
    });
    let mut backend = ClusterBackend {
        hub,
        store,
        rt: rt.handle().clone(),
        cfg,
        start,
        next_round: 0,
        nodes: Vec::new(),
        gpu_map: Vec::new(),
        running: HashMap::new(),
        records: seeded,
        ended: Vec::new(),
        finished_seen: 0,
        last_flush: Instant::now(),
        stop: stop.clone(),
        round_started: None,
        stats: stats.clone(),
        generation_base: identity.generation_base,
        cluster_key: identity.dir_key(),
        unwritten: Vec::new(),
        restored,
        hold_over: false,
        workers_written: Default::default(),
        metrics: metrics.clone(),
        waits: Default::default(),
        failed_nodes: HashMap::new(),
    };
    // The wall-clock time of the loop's time 0.
    let unix0 = unix_now() - start.elapsed().as_secs_f64();
    let forecasts = match forecaster {
        Some(f) => Some(
            forecast::spawn(f, backend.hub.clone(), metrics.clone(), unix0).map_err(|e| {
                SchedulerError::Runtime(format!("starting the forecast thread: {e}"))
            })?,
        ),
        None => None,
    };
    let topo_levels = backend.cfg.topology.clone();
    let (spares, quarantine) = (backend.cfg.spares, backend.cfg.quarantine);
    let stop3 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("blox-scheduler".into())
        .spawn(move || {
            let mut cluster = ClusterState::new();
            cluster.set_topology(topo_levels.and_then(|l| topology::Topology::empty(l).ok()));
            cluster.health_mut().spares_target = spares;
            cluster.health_mut().quarantine = quarantine;
            // A policy's invalid decision is dropped and shown by `Status`;
            // the scheduler keeps serving.
            let mut lp = RoundLoop::builder(policies, cluster, round_s)
                .selector(selector)
                .startup(startup.unwrap_or_else(|| StartupRules::for_round(round_s)))
                .on_invalid(OnInvalidDecision::SkipRound)
                .record_events()
                .build();
            let mut driver = rounds::LiveRounds {
                stop: stop3,
                metrics,
                forecasts,
                view: dashboard_address.is_some().then_some(view),
                events,
                unix0,
            };
            let r = blox_core::runner::run(&mut lp, &mut backend, &mut driver);
            // Jobs keep running on their workers; a restarted scheduler
            // requeues them.
            drop(backend);
            rt.shutdown_timeout(Duration::from_secs(1));
            r
        })
        .map_err(|e| SchedulerError::Runtime(e.to_string()))?;
    Ok(SchedulerHandle {
        address,
        metrics_address,
        dashboard_address,
        started: start,
        stop,
        stats,
        thread: Some(thread),
    })
}
