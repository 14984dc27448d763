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
//!
//! This file starts and stops a worker ([`start`], [`WorkerHandle`]) and
//! lets in only its scheduler's calls; `config` holds its settings,
//! `devices` the node's GPUs and memory, `state` what it holds while it
//! runs, `service` the calls it serves, `upstream` its registration,
//! heartbeats and reports.

use crate::net::{with_credential, NetError, SchedulerClient};
use crate::process::{LaunchSpec, Running, SharedDirs};
use crate::proto::worker_server::{Worker, WorkerServer};
use crate::proto::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

pub mod cgroup;
mod config;
mod devices;
mod service;
mod state;
mod uids;
mod upstream;

mod speed;
pub use config::{WorkerConfig, WorkerSection, DEFAULT_MAX_PROCESSES};
pub use devices::discover_gpus;
use devices::host_mem_gb;
#[cfg(test)]
use devices::logical_gpus;
use service::Service;
use state::{Launch, Shared, Starting, State};
use upstream::{heartbeat_loop, report_loop, stop_launch_within};

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
    let job_user = job_account(&cfg)?;
    check_limits(&cfg)?;
    let containment = contain_launches(&cfg)?;
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

/// The account jobs run as: a uid of their own each (`--job-uids`, `None`
/// here), `--job-user`, or the worker's own; refused where the settings
/// conflict or the worker may not start jobs so (not root, or root without
/// `--allow-root-jobs`).
fn job_account(cfg: &WorkerConfig) -> Result<Option<crate::process::JobUser>, WorkerError> {
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
    Ok(job_user)
}

/// Checks the launches' limits (`memory_gb`, `max_processes`) against
/// this node.
fn check_limits(cfg: &WorkerConfig) -> Result<(), WorkerError> {
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
    Ok(())
}

/// Detects the cgroups launches are contained in, killing what an earlier
/// run of this worker left in them, and takes back the directories that
/// run gave its launches.
fn contain_launches(cfg: &WorkerConfig) -> Result<Option<cgroup::Containment>, WorkerError> {
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
    Ok(containment)
}
