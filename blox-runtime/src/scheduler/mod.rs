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
mod hub;
mod jobs;
pub mod metrics;
mod queue;
mod rounds;
mod service;
mod start;
mod status;
mod table;
pub mod uids;

pub use backend::{coord_dir, ClusterBackend, RoundStats};
pub use config::RuntimeConfig;

use crate::net::NetError;
use crate::store::StoreError;
use blox_core::*;
use blox_forecast::Forecaster;
use hub::{lock, Hub, SharedHub, WorkerEntry};
use service::{spec_of, Service};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

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
    start::survive_file_size_limit();
    if access.needs_token() && cfg.worker_token_file.is_none() {
        tracing::warn!("[runtime] worker_token_file is unset: workers use the users' token, so any user can register a worker and be handed jobs");
    }
    start::check_placement(&cfg, &policies)?;
    let probe = write_checkpoint_probe(&cfg)?;
    crate::conn::raise_fd_limit();
    let table = start::open_table(&cfg)?;
    let events = events::EventSink::open(&cfg)?;
    let rt = start::rpc_runtime()?;
    let (listener, address) = start::bind(&rt, &cfg.listen)?;
    let start = Instant::now();
    // Every accepted, unfinished job is queued again, in id order; its
    // service so far still counts.
    let mut hub = Hub::new(&cfg, &table.store, policies.label(), table.next_job_id)?;
    let (seeded, n_restored) = table::restore(&mut hub, table.records);
    start::say_what_starts(n_restored, &policies);
    let hub = Arc::new(Mutex::new(hub));
    let stats = Arc::new(Mutex::new(RoundStats::default()));
    let metrics = Arc::new(metrics::Metrics::new());
    // The HTTP endpoints serve TLS when the gRPC API does.
    let http_tls = http::HttpTls::of(&security)?;
    let metrics_address =
        start::serve_metrics(&rt, &cfg, &access, &http_tls, metrics.clone(), hub.clone())?;
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
    let stop = Arc::new(AtomicBool::new(false));
    let gate = crate::auth::SchedulerGate {
        access: access.clone(),
        workers: worker_security.check(),
        worker_certs: cfg.tls_client_ca.is_some(),
    };
    let svc = Service {
        stats: stats.clone(),
        hub: hub.clone(),
        store: table.store.clone(),
        start,
        cfg: cfg.clone(),
        probe,
        workers: worker_security.check(),
        security: worker_security,
        metrics: metrics.clone(),
        round_s,
    };
    start::serve_api(
        &rt,
        &security,
        listener,
        cfg.conn_limits(),
        svc,
        gate,
        stop.clone(),
    )?;
    let backend = ClusterBackend {
        hub,
        store: table.store,
        rt: rt.handle().clone(),
        cfg,
        start,
        next_round: 0,
        nodes: Vec::new(),
        gpu_map: Vec::new(),
        running: HashMap::new(),
        restored: seeded.keys().copied().collect(),
        records: seeded,
        ended: Vec::new(),
        finished_seen: 0,
        last_flush: Instant::now(),
        stop: stop.clone(),
        round_started: None,
        stats: stats.clone(),
        generation_base: table.identity.generation_base,
        cluster_key: table.identity.dir_key(),
        unwritten: Vec::new(),
        hold_over: false,
        workers_written: Default::default(),
        metrics: metrics.clone(),
        waits: Default::default(),
        failed_nodes: HashMap::new(),
    };
    let thread = start::spawn_rounds(
        backend,
        rt,
        policies,
        round_s,
        Extras {
            selector,
            forecaster,
        },
        start::Outputs {
            stop: stop.clone(),
            metrics,
            view: dashboard_address.is_some().then_some(view),
            events,
        },
    )?;
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
