//! The steps of starting a scheduler ([`super::start_with`] lists them):
//! each opens, binds or serves one thing and says what went wrong with it.

use super::{backend, http, lock, metrics, unix_now, Hub, RuntimeConfig, SchedulerError, Service};
use crate::auth::{Access, SchedulerGate};
use crate::net::{NetError, Security};
use crate::proto::scheduler_server::SchedulerServer;
use crate::proto::JobRecord;
use crate::store::{RunIdentity, Store};
use blox_core::{
    topology, ClusterState, OnInvalidDecision, Policies, Profile, RoundLoop, StartupRules,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A file over the size limit (`ulimit -f`) is an error the scheduler
/// handles (the job table refuses the write, the loop goes on), not a
/// signal that kills it.
pub(super) fn survive_file_size_limit() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to "ignore" touches no memory.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The placement's settings against the topology's levels, before anything
/// starts (no nodes yet: they join as workers register).
pub(super) fn check_placement(
    cfg: &RuntimeConfig,
    policies: &Policies,
) -> Result<(), SchedulerError> {
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
    })
}

/// The job table, opened for this run: what it holds, and this run's
/// identity (its generations count per run of the table, never by the
/// clock).
pub(super) struct Table {
    pub store: Arc<Store>,
    pub records: Vec<JobRecord>,
    pub next_job_id: u64,
    pub identity: RunIdentity,
}

pub(super) fn open_table(cfg: &RuntimeConfig) -> Result<Table, SchedulerError> {
    let store = Arc::new(Store::open(&cfg.state)?);
    let (records, next_job_id) = store.load()?;
    let identity = store.begin_run(
        backend::GENERATIONS_PER_RUN,
        backend::generation_base(unix_now()),
    )?;
    tracing::info!(
        cluster = identity.dir_key().as_deref().unwrap_or("legacy layout"),
        generation_base = identity.generation_base,
        "job table identity"
    );
    Ok(Table {
        store,
        records,
        next_job_id,
        identity,
    })
}

/// The runtime of the RPC service, the HTTP endpoints and the calls to
/// workers.
pub(super) fn rpc_runtime() -> Result<tokio::runtime::Runtime, SchedulerError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("blox-scheduler-rpc")
        .enable_all()
        .build()
        .map_err(|e| SchedulerError::Runtime(e.to_string()))
}

/// Binds `[runtime] listen`.
pub(super) fn bind(
    rt: &tokio::runtime::Runtime,
    listen: &str,
) -> Result<(tokio::net::TcpListener, SocketAddr), SchedulerError> {
    let addr: SocketAddr = listen.parse().map_err(|e| NetError::Address {
        addr: listen.to_string(),
        message: format!("{e}"),
    })?;
    let listener = rt.block_on(crate::net::listen(addr))?;
    let address = listener.local_addr().map_err(|e| NetError::Listen {
        addr: listen.to_string(),
        message: e.to_string(),
    })?;
    Ok((listener, address))
}

/// What the operator reads as the scheduler starts: the jobs restored, and
/// the metrics the scheduling policy reads.
pub(super) fn say_what_starts(restored: usize, policies: &Policies) {
    if restored > 0 {
        tracing::info!(
            jobs = restored,
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
}

/// Serves `GET /metrics` (`[runtime] metrics_listen`), if asked.
pub(super) fn serve_metrics(
    rt: &tokio::runtime::Runtime,
    cfg: &RuntimeConfig,
    access: &Access,
    tls: &http::HttpTls,
    metrics: Arc<metrics::Metrics>,
    hub: Arc<Mutex<Hub>>,
) -> Result<Option<SocketAddr>, SchedulerError> {
    let Some(addr) = &cfg.metrics_listen else {
        return Ok(None);
    };
    let render: Arc<dyn Fn() -> String + Send + Sync> =
        Arc::new(move || metrics.render(&lock(&hub)));
    let handler = metrics::handler(access.clone(), render);
    let bound = http::listen(rt, addr, "metrics_listen", handler, tls.clone())?;
    tracing::info!(address = %bound, "Prometheus metrics at /metrics");
    Ok(Some(bound))
}

/// Serves the gRPC API on `listener` until `stop` is set. A call without
/// any of the cluster's tokens is refused before its body is decoded
/// (`gate`); each handler then checks the credential of its role (users, or
/// a registered worker's own).
pub(super) fn serve_api(
    rt: &tokio::runtime::Runtime,
    security: &Security,
    listener: tokio::net::TcpListener,
    limits: crate::conn::ConnLimits,
    svc: Service,
    gate: SchedulerGate,
    stop: Arc<AtomicBool>,
) -> Result<(), SchedulerError> {
    let mut server = security.server()?;
    let router = server.add_service(SchedulerServer::with_interceptor(svc, gate));
    let connections = Arc::new(crate::conn::Registry::default());
    rt.spawn(async move {
        // Connections: handshake deadline, caps (conn.rs).
        let incoming = crate::conn::incoming(listener, limits, connections);
        let r = router
            .serve_with_incoming_shutdown(incoming, async move {
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await;
        if let Err(e) = r {
            tracing::error!("scheduler service stopped: {e}");
        }
    });
    Ok(())
}

/// Where the round loop's thread reports: the flag that stops it, the
/// Prometheus metrics, the dashboard's view (when served) and the event log.
pub(super) struct Outputs {
    pub stop: Arc<AtomicBool>,
    pub metrics: Arc<metrics::Metrics>,
    pub view: Option<Arc<Mutex<super::dashboard::View>>>,
    pub events: super::events::EventSink,
}

/// Starts the round loop on a thread of its own: `policies` on rounds of
/// `round_s` over `backend`'s workers, run by [`blox_core::runner`] with
/// the scheduler's driver ([`super::rounds::LiveRounds`]) until stopped.
/// A policy's invalid decision is dropped and shown by `Status`; the
/// scheduler keeps serving.
pub(super) fn spawn_rounds(
    mut backend: super::ClusterBackend,
    rt: tokio::runtime::Runtime,
    policies: Policies,
    round_s: f64,
    extras: super::Extras,
    out: Outputs,
) -> Result<std::thread::JoinHandle<Result<(), SchedulerError>>, SchedulerError> {
    // The wall-clock time of the loop's time 0.
    let unix0 = unix_now() - backend.start.elapsed().as_secs_f64();
    let forecasts = match extras.forecaster {
        Some(f) => Some(
            super::forecast::spawn(f, backend.hub.clone(), out.metrics.clone(), unix0).map_err(
                |e| SchedulerError::Runtime(format!("starting the forecast thread: {e}")),
            )?,
        ),
        None => None,
    };
    let mut cluster = ClusterState::new();
    cluster.set_topology(
        backend
            .cfg
            .topology
            .clone()
            .and_then(|l| topology::Topology::empty(l).ok()),
    );
    cluster.health_mut().spares_target = backend.cfg.spares;
    cluster.health_mut().quarantine = backend.cfg.quarantine;
    let profile = backend
        .cfg
        .profile
        .clone()
        .unwrap_or_else(|| Profile::of_rules(StartupRules::for_round(round_s)));
    let mut lp = RoundLoop::builder(policies, cluster, round_s)
        .selector(extras.selector)
        .profile(profile)
        .on_invalid(OnInvalidDecision::SkipRound)
        .record_events()
        .build();
    let mut driver = super::rounds::LiveRounds {
        stop: out.stop,
        metrics: out.metrics,
        forecasts,
        view: out.view,
        events: out.events,
        unix0,
    };
    std::thread::Builder::new()
        .name("blox-scheduler".into())
        .spawn(move || {
            let r = blox_core::runner::run(&mut lp, &mut backend, &mut driver);
            // Jobs keep running on their workers; a restarted scheduler
            // requeues them.
            let store = backend.store.clone();
            drop(backend);
            rt.shutdown_timeout(Duration::from_secs(1));
            // A task that outlived the shutdown must not keep the job
            // table's file locked against the next scheduler.
            store.close();
            r
        })
        .map_err(|e| SchedulerError::Runtime(e.to_string()))
}
