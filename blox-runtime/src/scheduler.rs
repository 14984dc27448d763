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
//! A restarted scheduler reads the job table and queues every accepted,
//! unfinished job again; workers it no longer knows revoke their jobs (which
//! checkpoint) and register again, so running jobs are requeued and resume.

use crate::net::{NetError, Security, WorkerClient};
use crate::proto::scheduler_server::{Scheduler, SchedulerServer};
use crate::proto::*;
use crate::record::{settle, Ended, Record};
use crate::store::{Store, StoreError};
use blox_core::*;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tonic::{Request, Response, Status};

/// `[runtime]`: how the scheduler serves and supervises the cluster.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Address the scheduler listens on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The persistent job table (a redb file).
    #[serde(default = "default_state")]
    pub state: PathBuf,
    /// Checkpoints of job N go to `checkpoint_dir/N`; on a real cluster a
    /// directory every node mounts. Unset: each worker keeps checkpoints in
    /// its own workdir (a job resumes only on the node that wrote them).
    pub checkpoint_dir: Option<PathBuf>,
    /// Seconds a revoked job may take to checkpoint and exit before it is killed.
    #[serde(default = "default_grace")]
    pub grace_s: f64,
    /// Times a crashed job is restarted before it fails.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// How often workers beat.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_s: f64,
    /// A worker silent this long is declared dead and its jobs requeued.
    #[serde(default = "default_timeout")]
    pub worker_timeout_s: f64,
    /// One process per GPU instead of one per node.
    #[serde(default)]
    pub process_per_gpu: bool,
    /// The shared token (first line of the file); unset: no authentication.
    pub token_file: Option<PathBuf>,
    /// TLS: the scheduler's certificate and key, and the authority that
    /// signed the workers' certificates.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
}

fn default_listen() -> String {
    "127.0.0.1:50051".into()
}
fn default_state() -> PathBuf {
    "blox-state.redb".into()
}
fn default_grace() -> f64 {
    10.0
}
fn default_retries() -> u32 {
    2
}
fn default_heartbeat() -> f64 {
    1.0
}
fn default_timeout() -> f64 {
    5.0
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        toml::Value::Table(Default::default())
            .try_into()
            .expect("every field has a default")
    }
}

impl RuntimeConfig {
    /// Reads `[runtime]` of a blox config (paths relative to the config file).
    pub fn from_config(cfg: &Config) -> Result<Self, ConfigError> {
        let s = cfg.section("runtime");
        let mut r: RuntimeConfig = s.parse()?;
        for (key, v) in [
            ("grace_s", r.grace_s),
            ("heartbeat_s", r.heartbeat_s),
            ("worker_timeout_s", r.worker_timeout_s),
        ] {
            if !(v > 0.0 && v.is_finite()) {
                return Err(
                    s.error_at(key, format!("`{key}` must be a positive number of seconds"))
                );
            }
        }
        if r.worker_timeout_s <= r.heartbeat_s {
            return Err(s.error_at(
                "worker_timeout_s",
                "`worker_timeout_s` must be longer than `heartbeat_s`",
            ));
        }
        r.state = s.resolve_path(&r.state);
        r.checkpoint_dir = r.checkpoint_dir.map(|p| s.resolve_path(&p));
        for p in [
            &mut r.token_file,
            &mut r.tls_cert,
            &mut r.tls_key,
            &mut r.tls_ca,
        ]
        .into_iter()
        .flatten()
        {
            *p = s.resolve_path(p);
        }
        Ok(r)
    }

    /// The token and TLS settings it names.
    pub fn security(&self) -> Result<Security, NetError> {
        let token = self
            .token_file
            .as_deref()
            .map(Security::token_from_file)
            .transpose()?;
        let tls = (self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_ca.is_some())
            .then(|| crate::net::TlsFiles {
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
                ca: self.tls_ca.clone(),
                domain: None,
            });
        Ok(Security { token, tls })
    }
}

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

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

struct WorkerEntry {
    address: String,
    gpus: Vec<GpuDevice>,
    cpus: u32,
    host_mem_gb: f64,
    last_seen: Instant,
    alive: bool,
    /// The node it is in the loop's cluster, once joined.
    node: Option<NodeId>,
    client: WorkerClient,
}

/// What the gRPC handlers and the round loop share.
struct Hub {
    epoch: String,
    workers: BTreeMap<String, WorkerEntry>,
    next_worker: u64,
    /// Accepted submissions not yet handed to the loop.
    submissions: VecDeque<JobSpec>,
    exits: Vec<(ExitReport, Instant)>,
    metrics: Vec<MetricSample>,
    cancels: BTreeMap<u64, String>,
    /// Launches each worker should be running.
    expected: HashMap<String, HashSet<(u64, u32)>>,
    /// Every job's record, as persisted (status, placement, counters).
    jobs: BTreeMap<u64, JobRecord>,
    next_job_id: u64,
    /// GPUs of the workers in the loop's cluster.
    cluster_gpus: u32,
    rounds: u64,
    policy: String,
}

type SharedHub = Arc<Mutex<Hub>>;

fn lock(h: &SharedHub) -> MutexGuard<'_, Hub> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

fn info_of(r: &JobRecord) -> &JobInfo {
    r.info.as_ref().expect("records always carry their info")
}

/// Checks a submission; the error names the field.
fn check_submission(j: &JobSubmission, cluster_gpus: u32, workers: usize) -> Result<(), Status> {
    if j.command.is_empty() || j.command[0].trim().is_empty() {
        return Err(Status::invalid_argument(
            "command: must name a program and its arguments (argv, no shell)",
        ));
    }
    if let Some(i) = j.command.iter().position(|a| a.contains('\0')) {
        return Err(Status::invalid_argument(format!(
            "command[{i}]: contains a NUL byte"
        )));
    }
    if j.gpus == 0 {
        return Err(Status::invalid_argument("gpus: must be at least 1"));
    }
    if j.batch_size == Some(0) {
        return Err(Status::invalid_argument("batch_size: must be at least 1"));
    }
    if let Some(d) = j.duration_s {
        if !(d > 0.0 && d.is_finite()) {
            return Err(Status::invalid_argument(
                "duration_s: must be a positive number of seconds",
            ));
        }
    }
    if let Some((k, _)) = j
        .metrics
        .iter()
        .find(|(k, v)| k.is_empty() || !v.is_finite())
    {
        return Err(Status::invalid_argument(format!(
            "metrics[{k:?}]: keys must be non-empty and values finite"
        )));
    }
    if workers == 0 {
        return Err(Status::failed_precondition(
            "no worker has registered yet: the cluster has no GPUs",
        ));
    }
    if j.gpus > cluster_gpus {
        return Err(Status::invalid_argument(format!(
            "gpus: asks for {} but the cluster has {cluster_gpus} GPUs on {workers} workers",
            j.gpus
        )));
    }
    Ok(())
}

fn spec_of(id: u64, j: &JobSubmission, arrival_s: f64) -> JobSpec {
    let mut s = JobSpec::new(id, arrival_s, j.gpus);
    s.name = if j.name.is_empty() {
        format!("job-{id}")
    } else {
        j.name.clone()
    };
    s.command = j.command.clone();
    s.batch_size = j.batch_size;
    s.user = j.user.clone();
    s.model = j.model.clone();
    s.expected_duration_s = j.duration_s;
    s.metrics = j.metrics.iter().map(|(k, v)| (k.clone(), *v)).collect();
    s
}

struct Service {
    hub: SharedHub,
    store: Arc<Store>,
    start: Instant,
    cfg: RuntimeConfig,
    security: Security,
}

fn worker_known<'a>(h: &'a mut Hub, id: &str) -> Result<&'a mut WorkerEntry, Status> {
    match h.workers.get_mut(id) {
        Some(w) if w.alive => Ok(w),
        _ => Err(Status::not_found(format!(
            "worker `{id}` is not registered with this scheduler; register again"
        ))),
    }
}

#[tonic::async_trait]
impl Scheduler for Service {
    async fn submit(&self, req: Request<SubmitRequest>) -> Result<Response<SubmitReply>, Status> {
        let j = req
            .into_inner()
            .job
            .ok_or_else(|| Status::invalid_argument("job: missing"))?;
        let id = {
            let mut h = lock(&self.hub);
            let alive = h.workers.values().filter(|w| w.alive).count();
            let gpus: u32 = h
                .workers
                .values()
                .filter(|w| w.alive)
                .map(|w| w.gpus.len() as u32)
                .sum();
            check_submission(&j, gpus, alive)?;
            h.next_job_id += 1;
            h.next_job_id - 1
        };
        let spec = spec_of(id, &j, self.start.elapsed().as_secs_f64());
        let rec = JobRecord {
            info: Some(JobInfo {
                id,
                name: spec.name.clone(),
                status: JobStatus::Submitted.as_str().into(),
                requested_gpus: j.gpus,
                submitted_unix_s: unix_now(),
                command: j.command.clone(),
                ..Default::default()
            }),
            job: Some(j),
            run_time_s: 0.0,
        };
        // Durable before it is acknowledged or scheduled; written outside the
        // hub's lock (an fsync must not stall heartbeats).
        let (store, rec) = (self.store.clone(), rec);
        let rec =
            tokio::task::spawn_blocking(move || store.write(&[&rec], Some(id + 1)).map(|_| rec))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut h = lock(&self.hub);
        h.jobs.insert(id, rec);
        h.submissions.push_back(spec);
        tracing::info!(job = id, "submitted");
        Ok(Response::new(SubmitReply { job_id: id }))
    }

    async fn status(&self, req: Request<StatusRequest>) -> Result<Response<StatusReply>, Status> {
        let r = req.into_inner();
        let h = lock(&self.hub);
        let jobs = if r.job_ids.is_empty() {
            h.jobs.values().map(|r| info_of(r).clone()).collect()
        } else {
            r.job_ids
                .iter()
                .map(|id| {
                    h.jobs
                        .get(id)
                        .map(|r| info_of(r).clone())
                        .ok_or_else(|| Status::not_found(format!("job {id} is not known")))
                })
                .collect::<Result<_, _>>()?
        };
        let workers = h
            .workers
            .iter()
            .map(|(id, w)| WorkerInfo {
                id: id.clone(),
                address: w.address.clone(),
                gpus: w.gpus.clone(),
                alive: w.alive,
                last_heartbeat_s_ago: w.last_seen.elapsed().as_secs_f64(),
            })
            .collect();
        Ok(Response::new(StatusReply {
            jobs,
            workers,
            rounds: h.rounds,
            policy: h.policy.clone(),
        }))
    }

    async fn cancel(&self, req: Request<CancelRequest>) -> Result<Response<CancelReply>, Status> {
        let id = req.into_inner().job_id;
        let mut h = lock(&self.hub);
        let Some(rec) = h.jobs.get(&id) else {
            return Err(Status::not_found(format!("job {id} is not known")));
        };
        let info = info_of(rec);
        if matches!(info.status.as_str(), "finished" | "failed" | "rejected") {
            return Err(Status::failed_precondition(format!(
                "job {id} already ended ({})",
                info.status
            )));
        }
        if let Some(pos) = h.submissions.iter().position(|s| s.id.0 == id) {
            // Not handed to the loop yet: it ends here.
            h.submissions.remove(pos);
            let rec = h.jobs.get_mut(&id).expect("checked above");
            let info = rec.info.as_mut().expect("records carry info");
            info.status = JobStatus::Failed.as_str().into();
            info.reason = "cancelled".into();
            info.finished_unix_s = Some(unix_now());
            let rec = rec.clone();
            self.store
                .write(&[&rec], None)
                .map_err(|e| Status::unavailable(e.to_string()))?;
        } else {
            h.cancels.insert(id, "cancelled".into());
        }
        tracing::info!(job = id, "cancel requested");
        Ok(Response::new(CancelReply {}))
    }

    async fn register(
        &self,
        req: Request<RegisterRequest>,
    ) -> Result<Response<RegisterReply>, Status> {
        let r = req.into_inner();
        if r.gpus.is_empty() {
            return Err(Status::invalid_argument("gpus: a worker needs at least 1"));
        }
        let mut seen = HashSet::new();
        if let Some(g) = r.gpus.iter().find(|g| !seen.insert(g.index)) {
            return Err(Status::invalid_argument(format!(
                "gpus: index {} appears twice",
                g.index
            )));
        }
        if r.address.is_empty() {
            return Err(Status::invalid_argument(
                "address: the worker's own service address is required",
            ));
        }
        let client = self
            .security
            .worker_client(&r.address)
            .map_err(|e| Status::invalid_argument(format!("address: {e}")))?;
        let mut h = lock(&self.hub);
        h.next_worker += 1;
        let name = if r.name.is_empty() { "worker" } else { &r.name };
        let id = format!("{name}-{}-{}", h.epoch, h.next_worker);
        tracing::info!(worker = %id, address = %r.address, gpus = r.gpus.len(), "worker registered");
        h.workers.insert(
            id.clone(),
            WorkerEntry {
                address: r.address,
                gpus: r.gpus,
                cpus: r.cpus,
                host_mem_gb: r.host_mem_gb,
                last_seen: Instant::now(),
                alive: true,
                node: None,
                client,
            },
        );
        Ok(Response::new(RegisterReply {
            worker_id: id,
            heartbeat_s: self.cfg.heartbeat_s,
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatReply>, Status> {
        let r = req.into_inner();
        let mut h = lock(&self.hub);
        worker_known(&mut h, &r.worker_id)?.last_seen = Instant::now();
        let expected = h.expected.get(&r.worker_id);
        let stop = r
            .running
            .into_iter()
            .filter(|l| !expected.is_some_and(|e| e.contains(&(l.job_id, l.launch))))
            .collect();
        Ok(Response::new(HeartbeatReply { stop }))
    }

    async fn report_exit(&self, req: Request<ExitReport>) -> Result<Response<Ack>, Status> {
        let r = req.into_inner();
        if r.launch.is_none() {
            return Err(Status::invalid_argument("launch: missing"));
        }
        if !(r.exited_s_ago >= 0.0 && r.exited_s_ago.is_finite()) {
            return Err(Status::invalid_argument(
                "exited_s_ago: must be a non-negative number",
            ));
        }
        let mut h = lock(&self.hub);
        worker_known(&mut h, &r.worker_id)?.last_seen = Instant::now();
        let at = Instant::now()
            .checked_sub(Duration::from_secs_f64(r.exited_s_ago))
            .unwrap_or_else(Instant::now);
        h.exits.push((r, at));
        Ok(Response::new(Ack {}))
    }

    async fn push_metrics(&self, req: Request<MetricBatch>) -> Result<Response<Ack>, Status> {
        let r = req.into_inner();
        if let Some(i) = r
            .samples
            .iter()
            .position(|s| s.launch.is_none() || s.key.is_empty())
        {
            return Err(Status::invalid_argument(format!(
                "samples[{i}]: needs a launch and a key"
            )));
        }
        let mut h = lock(&self.hub);
        worker_known(&mut h, &r.worker_id)?;
        h.metrics.extend(r.samples);
        Ok(Response::new(Ack {}))
    }
}

// ---------------------------------------------------------------------------
// The backend the round loop drives
// ---------------------------------------------------------------------------

struct Part {
    worker: String,
    client: WorkerClient,
    gpus: Vec<u32>,
}

struct Live {
    launch: u32,
    parts: Vec<Part>,
    parts_left: usize,
    gpus: u32,
    accounted_s: f64,
}

/// Per-round timings of the scheduler (the last 10,000 rounds): `busy_s`
/// from the start of a round to its wait (cluster management, metric
/// collection, submissions, policies, launches and preemptions), and
/// `publish_s`, updating the status view and the job table after it.
#[derive(Clone, Debug, Default)]
pub struct RoundStats {
    pub busy_s: Vec<f64>,
    pub publish_s: Vec<f64>,
}

impl RoundStats {
    fn push(v: &mut Vec<f64>, x: f64) {
        if v.len() >= 10_000 {
            v.remove(0);
        }
        v.push(x);
    }
}

/// The round loop's backend over the workers (see the module docs).
pub struct ClusterBackend {
    hub: SharedHub,
    store: Arc<Store>,
    rt: tokio::runtime::Handle,
    cfg: RuntimeConfig,
    start: Instant,
    next_round: u64,
    /// Worker of each node, by node id.
    nodes: Vec<String>,
    /// (node, worker's GPU index) of each GPU, by GPU id.
    gpu_map: Vec<(usize, u32)>,
    running: HashMap<JobId, Live>,
    records: HashMap<JobId, Record>,
    ended: Vec<Ended>,
    /// How many of the loop's finished jobs were published.
    finished_seen: usize,
    last_flush: Instant,
    stop: Arc<AtomicBool>,
    round_started: Option<Instant>,
    stats: Arc<Mutex<RoundStats>>,
}

impl ClusterBackend {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn at_s(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    fn account(&mut self, id: JobId, until: f64) {
        if let Some(l) = self.running.get_mut(&id) {
            let dt = (until - l.accounted_s).max(0.0);
            l.accounted_s = until.max(l.accounted_s);
            let r = self.records.entry(id).or_default();
            r.run_time_s += dt;
            r.attained_gpu_s += dt * l.gpus as f64;
        }
    }

    fn forget_expected(&self, id: JobId, live: &Live) {
        let mut h = lock(&self.hub);
        for p in &live.parts {
            if let Some(e) = h.expected.get_mut(&p.worker) {
                e.remove(&(id.0, live.launch));
            }
        }
    }

    /// Revokes (or kills) every part of a launch at once; returns the replies
    /// (an unreachable worker counts as gone).
    fn revoke_parts(&self, id: JobId, live: &Live, kill: bool) -> Vec<Option<RevokeReply>> {
        let grace = self.cfg.grace_s;
        let calls: Vec<_> = live
            .parts
            .iter()
            .map(|p| {
                let mut c = p.client.clone();
                let req = RevokeRequest {
                    launch: Some(LaunchRef {
                        job_id: id.0,
                        launch: live.launch,
                    }),
                    grace_s: grace,
                    kill,
                };
                let worker = p.worker.clone();
                self.rt.spawn(async move {
                    match c.revoke(req).await {
                        Ok(r) => Some(r.into_inner()),
                        Err(e) => {
                            tracing::warn!(job = %id, worker = %worker, "revocation failed: {}", e.message());
                            None
                        }
                    }
                })
            })
            .collect();
        let out = self.rt.block_on(async { futures_join(calls).await });
        self.forget_expected(id, live);
        out
    }

    /// Publishes the loop's view of every job (for `Status`) and persists the
    /// changes: state changes at once, progress and service every 5 s.
    fn publish(&mut self, lp: &RoundLoop) -> Result<(), StoreError> {
        let mut h = lock(&self.hub);
        h.rounds = lp.rounds();
        h.policy = lp.policies.label();
        let mut urgent: Vec<u64> = Vec::new();
        let mut dirty: Vec<u64> = Vec::new();
        let now_unix = unix_now();
        let now_s = self.now();
        let finished = lp.jobs.finished();
        let fresh = &finished[self.finished_seen.min(finished.len())..];
        self.finished_seen = finished.len();
        let jobs = lp
            .jobs
            .active()
            .chain(lp.waiting().iter())
            .chain(fresh.iter());
        for j in jobs {
            let id = j.id().0;
            let Some(rec) = h.jobs.get_mut(&id) else {
                continue;
            };
            let run_time_s = self
                .records
                .get(&j.id())
                .map_or(j.run_time_s, |r| r.run_time_s);
            let info = rec.info.as_mut().expect("records carry info");
            let status = j.status.as_str();
            let gpus: Vec<String> = j
                .allocation
                .iter()
                .filter(|_| !j.status.is_terminal())
                .map(|g| match self.gpu_map.get(g.index()) {
                    Some((n, i)) => format!("{}:{i}", self.nodes[*n]),
                    None => g.to_string(),
                })
                .collect();
            let reason = j.end_reason.clone().unwrap_or_default();
            let launches = self.records.get(&j.id()).map_or(0, |r| r.launches);
            let changed_state = info.status != status
                || info.gpus != gpus
                || info.launches != launches
                || info.reason != reason;
            let changed = changed_state
                || info.progress != j.progress
                || info.attained_gpu_s != j.attained_service_gpu_s;
            if !changed {
                continue;
            }
            info.status = status.into();
            info.gpus = gpus;
            info.launches = launches;
            info.preemptions = j.preemptions;
            info.progress = j.progress;
            info.attained_gpu_s = j.attained_service_gpu_s;
            info.reason = reason;
            if let Some(f) = j.finish_s.filter(|_| j.status.is_terminal()) {
                info.finished_unix_s = Some(now_unix - (now_s - f).max(0.0));
                info.jct_s = j.jct_s();
            }
            rec.run_time_s = run_time_s;
            if changed_state {
                urgent.push(id);
            } else {
                dirty.push(id);
            }
        }
        let flush = self.last_flush.elapsed() >= Duration::from_secs(5);
        let mut ids = urgent;
        if flush || !ids.is_empty() {
            ids.extend(dirty);
        }
        if ids.is_empty() {
            return Ok(());
        }
        let recs: Vec<JobRecord> = ids
            .iter()
            .filter_map(|id| h.jobs.get(id).cloned())
            .collect();
        // Written outside the hub's lock: an fsync must not stall heartbeats.
        drop(h);
        self.store.write(&recs.iter().collect::<Vec<_>>(), None)?;
        if flush {
            self.last_flush = Instant::now();
        }
        Ok(())
    }
}

/// Awaits every task, in order.
async fn futures_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T>
where
    T: Default,
{
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap_or_default());
    }
    out
}

impl ClusterManager for ClusterBackend {
    fn cluster_events(&mut self, _round: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError> {
        self.round_started = Some(Instant::now());
        let timeout = Duration::from_secs_f64(self.cfg.worker_timeout_s);
        let mut events = Vec::new();
        let mut lost = Vec::new();
        {
            let mut h = lock(&self.hub);
            let h = &mut *h;
            for (id, w) in h.workers.iter_mut() {
                if w.alive && w.last_seen.elapsed() > timeout {
                    w.alive = false;
                    tracing::warn!(worker = %id, "no heartbeat for {:.1} s: the worker is gone; its jobs go back to the queue", self.cfg.worker_timeout_s);
                    h.expected.remove(id);
                    if let Some(n) = w.node {
                        events.push(ClusterEvent::NodeRemoved(n));
                        lost.push(id.clone());
                    }
                } else if w.alive && w.node.is_none() {
                    let node = NodeId(self.nodes.len() as u32);
                    w.node = Some(node);
                    self.nodes.push(id.clone());
                    // The loop numbers GPUs in the order nodes add them.
                    self.gpu_map
                        .extend(w.gpus.iter().map(|g| (node.index(), g.index)));
                    let mut spec = NodeSpec::with_gpus(w.gpus.len() as u32);
                    spec.gpu_type = w.gpus[0].name.clone();
                    if w.gpus[0].memory_gb > 0.0 {
                        spec.gpu_mem_gb = w.gpus[0].memory_gb;
                    }
                    if w.cpus > 0 {
                        spec.cpus = w.cpus;
                    }
                    if w.host_mem_gb > 0.0 {
                        spec.host_mem_gb = w.host_mem_gb;
                    }
                    events.push(ClusterEvent::NodeAdded(spec));
                    tracing::info!(worker = %id, node = %node, "worker joined the cluster");
                }
            }
            h.cluster_gpus = h
                .workers
                .values()
                .filter(|w| w.alive && w.node.is_some())
                .map(|w| w.gpus.len() as u32)
                .sum();
        }
        if !lost.is_empty() {
            let now = self.now();
            let hit: Vec<JobId> = self
                .running
                .iter()
                .filter(|(_, l)| l.parts.iter().any(|p| lost.contains(&p.worker)))
                .map(|(id, _)| *id)
                .collect();
            for id in hit {
                self.account(id, now);
                let mut live = self.running.remove(&id).expect("listed above");
                // The job's parts on live workers stop too; the loop requeues it.
                live.parts.retain(|p| !lost.contains(&p.worker));
                if !live.parts.is_empty() {
                    self.revoke_parts(id, &live, true);
                } else {
                    self.forget_expected(id, &live);
                }
            }
        }
        Ok(events)
    }
}

impl JobSource for ClusterBackend {
    fn poll_submissions(&mut self, _round: &RoundInfo) -> Result<Vec<JobSpec>, BackendError> {
        let mut h = lock(&self.hub);
        let cap = h.cluster_gpus;
        let mut out = Vec::new();
        let mut keep = VecDeque::new();
        // Jobs larger than the cluster as it is now (workers still joining
        // after a restart) wait here.
        while let Some(s) = h.submissions.pop_front() {
            if s.requested_gpus <= cap {
                out.push(s);
            } else {
                keep.push_back(s);
            }
        }
        h.submissions = keep;
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

impl MetricCollector for ClusterBackend {
    fn collect_metrics(
        &mut self,
        _round: &RoundInfo,
        jobs: &mut JobState,
    ) -> Result<(), BackendError> {
        let (exits, metrics, cancels) = {
            let mut h = lock(&self.hub);
            let cancels: Vec<(u64, String)> = h
                .cancels
                .iter()
                .filter(|(id, _)| jobs.get(JobId(**id)).is_some())
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            for (id, _) in &cancels {
                h.cancels.remove(id);
            }
            (
                std::mem::take(&mut h.exits),
                std::mem::take(&mut h.metrics),
                cancels,
            )
        };
        for s in metrics {
            let l = s.launch.expect("checked on receipt");
            let id = JobId(l.job_id);
            if let Some(j) = jobs.get_mut(id) {
                if s.key == "progress" {
                    j.progress = s.value.clamp(0.0, 1.0);
                }
                jobs.metrics().set(id, &s.key, s.value);
            }
        }
        for (r, at) in exits {
            let l = r.launch.expect("checked on receipt");
            let id = JobId(l.job_id);
            let at_s = self.at_s(at);
            let current = self.running.get(&id).is_some_and(|x| x.launch == l.launch);
            if !current {
                // A launch that was already revoked; only a finish matters.
                if r.finished {
                    self.ended.push(Ended::finished(id, at_s));
                }
                continue;
            }
            if r.finished {
                let live = self.running.get_mut(&id).expect("checked above");
                live.parts_left = live.parts_left.saturating_sub(1);
                if live.parts_left > 0 {
                    continue;
                }
                self.account(id, at_s);
                let live = self.running.remove(&id).expect("checked above");
                self.forget_expected(id, &live);
                self.ended.push(Ended::finished(id, at_s));
            } else {
                self.account(id, at_s);
                let live = self.running.remove(&id).expect("checked above");
                // A failing part takes the others down.
                self.revoke_parts(id, &live, true);
                let reason = (!r.reason.is_empty()).then(|| r.reason.clone());
                self.ended.push(Ended::crashed(id, at_s, r.code, reason));
            }
        }
        let now = self.now();
        for (id, reason) in cancels {
            let id = JobId(id);
            if let Some(live) = self.running.remove(&id) {
                self.account(id, now);
                self.revoke_parts(id, &live, true);
            }
            if let Some(j) = jobs.get_mut(id) {
                if !j.status.is_terminal() {
                    j.status = JobStatus::Failed;
                    j.finish_s = Some(now);
                    j.end_reason = Some(reason);
                }
            }
        }
        let running: Vec<JobId> = self.running.keys().copied().collect();
        for id in running {
            self.account(id, now);
        }
        let ended = std::mem::take(&mut self.ended);
        settle(ended, &mut self.records, jobs, self.cfg.max_retries);
        Ok(())
    }
}

impl PreemptionMechanism for ClusterBackend {
    fn preempt(&mut self, _round: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        let id = job.id();
        let Some(live) = self.running.remove(&id) else {
            return Ok(()); // already exited; folded in next round
        };
        let replies = self.revoke_parts(id, &live, false);
        let now = self.now();
        let mut last = live.accounted_s;
        let mut finished = !replies.is_empty();
        for r in &replies {
            match r {
                Some(r) if r.was_running => {
                    last = last.max(now - r.exited_s_ago);
                    finished &= r.finished;
                }
                _ => {
                    last = last.max(now);
                    finished = false;
                }
            }
        }
        self.running.insert(id, live);
        self.account(id, last);
        self.running.remove(&id);
        if finished {
            self.ended.push(Ended::finished(id, last));
        }
        Ok(())
    }
}

impl LaunchMechanism for ClusterBackend {
    fn launch(
        &mut self,
        _round: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        batch_size: Option<u32>,
    ) -> Result<(), BackendError> {
        let id = job.id();
        if self.ended.iter().any(|e| e.job == id && e.finished) {
            return Ok(()); // finished as it was being moved
        }
        let rec = self.records.entry(id).or_default();
        rec.launches += 1;
        let launch = rec.launches;
        // Group the GPUs by node, in order.
        let mut groups: Vec<(usize, Vec<u32>)> = Vec::new();
        for g in gpus {
            let (node, idx) = *self
                .gpu_map
                .get(g.index())
                .ok_or_else(|| BackendError(format!("{g} is not a GPU of any worker")))?;
            match groups.iter_mut().find(|(n, _)| *n == node) {
                Some((_, v)) => v.push(idx),
                None => groups.push((node, vec![idx])),
            }
        }
        // The parts, and rank 0's host (for the job's collective library).
        let (parts, master) = {
            let mut h = lock(&self.hub);
            let mut parts = Vec::new();
            let mut master = None;
            for (node, idx) in groups {
                let wid = self.nodes[node].clone();
                let w = h
                    .workers
                    .get(&wid)
                    .ok_or_else(|| BackendError(format!("worker {wid} is gone")))?;
                let addr = w.address.split("://").last().unwrap_or("");
                master.get_or_insert_with(|| {
                    addr.rsplit_once(':')
                        .map_or(addr, |(host, _)| host)
                        .to_string()
                });
                parts.push(Part {
                    worker: wid.clone(),
                    client: w.client.clone(),
                    gpus: idx,
                });
                h.expected.entry(wid).or_default().insert((id.0, launch));
            }
            (parts, master.unwrap_or_default())
        };
        let world: u32 = if self.cfg.process_per_gpu {
            gpus.len() as u32
        } else {
            parts.len() as u32
        };
        let ckpt = self
            .cfg
            .checkpoint_dir
            .as_ref()
            .map(|d| d.join(id.0.to_string()).display().to_string())
            .unwrap_or_default();
        // Ranks on several nodes agree on where to stop through shared storage.
        let coord = match (&self.cfg.checkpoint_dir, parts.len() > 1) {
            (Some(d), true) => d
                .join(id.0.to_string())
                .join(format!(".launch-{launch}"))
                .display()
                .to_string(),
            (None, true) => {
                tracing::warn!(job = %id, "runs on {} workers but [runtime] checkpoint_dir is unset: its ranks cannot agree on where to stop when revoked", parts.len());
                String::new()
            }
            _ => String::new(),
        };
        let mut first_rank = 0;
        let mut calls = Vec::new();
        for p in &parts {
            let req = LaunchRequest {
                launch: Some(LaunchRef {
                    job_id: id.0,
                    launch,
                }),
                command: job.spec.command.clone(),
                gpus: p.gpus.clone(),
                batch_size: batch_size.or(job.current_batch_size),
                resume: launch > 1,
                checkpoint_dir: ckpt.clone(),
                master_addr: master.clone(),
                process_per_gpu: self.cfg.process_per_gpu,
                first_rank,
                world_size: world,
                coord_dir: coord.clone(),
            };
            first_rank += if self.cfg.process_per_gpu {
                p.gpus.len() as u32
            } else {
                1
            };
            let mut c = p.client.clone();
            calls.push(
                self.rt
                    .spawn(async move { c.launch(req).await.map(|_| ()) }),
            );
        }
        let results: Vec<Result<(), Status>> = self.rt.block_on(async {
            let mut out = Vec::new();
            for c in calls {
                out.push(
                    c.await
                        .unwrap_or_else(|e| Err(Status::internal(e.to_string()))),
                );
            }
            out
        });
        let live = Live {
            launch,
            parts_left: parts.len(),
            parts,
            gpus: gpus.len() as u32,
            accounted_s: self.now(),
        };
        if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
            // The job's fault (its program cannot start) counts as a crash;
            // an unreachable worker does not (it is declared gone soon).
            let blame = matches!(
                e.code(),
                tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument
            );
            let reason = e.message().to_string();
            tracing::warn!(job = %id, "launch failed: {reason}");
            self.revoke_parts(id, &live, true);
            let at_s = self.now();
            let mut e = Ended::crashed(id, at_s, None, Some(reason));
            e.blame = blame;
            self.ended.push(e);
            return Ok(());
        }
        tracing::info!(job = %id, launch, gpus = gpus.len(), "launched");
        self.running.insert(id, live);
        Ok(())
    }

    fn reconfigure(
        &mut self,
        _round: &RoundInfo,
        job: &Job,
        batch_size: u32,
    ) -> Result<(), BackendError> {
        let id = job.id();
        let live = self
            .running
            .get(&id)
            .ok_or_else(|| BackendError(format!("{id} is not running")))?;
        for p in &live.parts {
            let mut c = p.client.clone();
            let req = ReconfigureRequest {
                launch: Some(LaunchRef {
                    job_id: id.0,
                    launch: live.launch,
                }),
                batch_size,
            };
            if let Err(e) = self.rt.block_on(c.reconfigure(req)) {
                tracing::warn!(job = %id, worker = %p.worker, "reconfiguration failed: {}", e.message());
            }
        }
        Ok(())
    }
}

impl RoundClock for ClusterBackend {
    fn now_s(&self) -> f64 {
        self.now()
    }

    fn wait_round(&mut self, round_s: f64, _idle: bool) -> Result<(), BackendError> {
        if let Some(t) = self.round_started.take() {
            let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
            RoundStats::push(&mut s.busy_s, t.elapsed().as_secs_f64());
        }
        self.next_round += 1;
        let due = self.next_round as f64 * round_s;
        loop {
            let left = due - self.now();
            if left <= 0.0 || self.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_secs_f64(left.min(0.05)));
        }
    }
}

/// A running scheduler: its address, and a way to stop it.
pub struct SchedulerHandle {
    pub address: SocketAddr,
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
    let security = cfg.security()?;
    let store = Arc::new(Store::open(&cfg.state)?);
    let (records, next_job_id) = store.load()?;
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
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(listen))
        .map_err(|e| NetError::Listen {
            addr: cfg.listen.clone(),
            message: e.to_string(),
        })?;
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
        next_worker: 0,
        submissions: VecDeque::new(),
        exits: Vec::new(),
        metrics: Vec::new(),
        cancels: BTreeMap::new(),
        expected: HashMap::new(),
        jobs: BTreeMap::new(),
        next_job_id,
        cluster_gpus: 0,
        rounds: 0,
        policy: policies.label(),
    };
    let mut seeded = HashMap::new();
    let mut restored = 0;
    for mut r in records {
        let info = r.info.clone().unwrap_or_default();
        let terminal = matches!(info.status.as_str(), "finished" | "failed" | "rejected");
        if !terminal {
            let Some(sub) = r.job.clone() else { continue };
            // Its JCT still counts from its submission, before the restart.
            let arrival = -(unix_now() - info.submitted_unix_s).max(0.0);
            hub.submissions.push_back(spec_of(info.id, &sub, arrival));
            seeded.insert(
                JobId(info.id),
                Record {
                    launches: info.launches,
                    crashes: 0,
                    run_time_s: r.run_time_s,
                    attained_gpu_s: info.attained_gpu_s,
                },
            );
            if let Some(i) = r.info.as_mut() {
                i.status = JobStatus::Submitted.as_str().into();
                i.gpus.clear();
            }
            restored += 1;
        }
        hub.jobs.insert(info.id, r);
    }
    if restored > 0 {
        tracing::info!(
            jobs = restored,
            "restored unfinished jobs from the job table; they are queued again"
        );
    }
    let hub = Arc::new(Mutex::new(hub));
    let svc = Service {
        hub: hub.clone(),
        store: store.clone(),
        start,
        cfg: cfg.clone(),
        security: security.clone(),
    };
    let mut server = security.server()?;
    let router = server.add_service(SchedulerServer::with_interceptor(svc, security.check()));
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    rt.spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
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
        stats: Arc::new(Mutex::new(RoundStats::default())),
    };
    let stats = backend.stats.clone();
    let stop3 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("blox-scheduler".into())
        .spawn(move || {
            let mut lp = RoundLoop::new(policies, ClusterState::new(), round_s);
            lp.selector = selector;
            let r = (|| {
                while !stop3.load(Ordering::Relaxed) {
                    lp.run_round(&mut backend)?;
                    let t = Instant::now();
                    backend.publish(&lp)?;
                    let mut s = backend.stats.lock().unwrap_or_else(|e| e.into_inner());
                    RoundStats::push(&mut s.publish_s, t.elapsed().as_secs_f64());
                }
                Ok(())
            })();
            // Jobs keep running on their workers; a restarted scheduler
            // requeues them.
            drop(backend);
            rt.shutdown_timeout(Duration::from_secs(1));
            r
        })
        .map_err(|e| SchedulerError::Runtime(e.to_string()))?;
    Ok(SchedulerHandle {
        address,
        started: start,
        stop,
        stats,
        thread: Some(thread),
    })
}
