//! What the gRPC handlers and the round loop share (the hub), and the
//! scheduler's record of each worker.

use super::{forecast, jobs, queue, uids, unix_now, RuntimeConfig};
use crate::net::WorkerClient;
use crate::proto::*;
use crate::store::{Store, StoreError};
use blox_core::*;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(super) struct WorkerEntry {
    /// Its node's name (`RegisterRequest.name`): job uids are released
    /// node by node.
    pub(super) name: String,
    /// How it contains its launches (`RegisterRequest.containment`).
    pub(super) containment: String,
    pub(super) address: String,
    pub(super) gpus: Vec<GpuDevice>,
    pub(super) cpus: u32,
    pub(super) host_mem_gb: f64,
    /// It hosts several launches on one GPU (`RegisterRequest.shares_gpus`).
    pub(super) shares_gpus: bool,
    pub(super) last_seen: Instant,
    pub(super) alive: bool,
    /// It showed it sees the shared checkpoint storage (or there is none):
    /// only then does it join the cluster.
    pub(super) verified: bool,
    /// When it was declared gone; shown by `Status` for an hour, then
    /// forgotten (each restart of a worker registers a new one).
    pub(super) dead_since: Option<Instant>,
    /// The node it is in the loop's cluster, once joined.
    pub(super) node: Option<NodeId>,
    /// Calls it as the scheduler it registered with (its credential on
    /// every call).
    pub(super) client: WorkerClient,
    /// Launches it still ran when it registered (after this scheduler
    /// restarted), while they wait to be adopted or revoked; it joins the
    /// cluster once they are decided.
    pub(super) reported: Vec<RunningLaunch>,
    /// Where it sits in the topology (`--labels`).
    pub(super) labels: BTreeMap<String, String>,
    /// Its lease epoch as its last heartbeat gave it (0: none yet): named
    /// in every launch, which the worker refuses once its lease ran out
    /// since (`LaunchRequest.lease_epoch`).
    pub(super) lease_epoch: u64,
}

/// What the gRPC handlers and the round loop share.
pub(super) struct Hub {
    pub(super) epoch: String,
    pub(super) workers: BTreeMap<String, WorkerEntry>,
    /// Jobs accepted and not running as of the last round, in all and by
    /// user (`max_waiting_jobs`, `max_waiting_per_user`; submissions since
    /// are counted from `submissions`).
    pub(super) waiting_total: usize,
    pub(super) waiting_by_user: HashMap<String, usize>,
    /// Why the job table took no write lately (cleared by the next write
    /// that succeeds); `None` while it takes them.
    pub(super) table_error: Option<String>,
    /// Each registered worker's own credential (`RegisterReply.
    /// worker_secret`) → its id: a worker is who its credential says.
    pub(super) credentials: HashMap<String, String>,
    pub(super) next_worker: u64,
    /// Accepted submissions not yet handed to the loop.
    pub(super) submissions: queue::Submissions,
    pub(super) exits: Vec<(ExitReport, Instant)>,
    /// Metrics pushed since the last round, by job (bounded per job: the
    /// oldest are dropped), and how many were dropped in all.
    pub(super) metrics: HashMap<u64, VecDeque<MetricSample>>,
    pub(super) metrics_dropped: u64,
    pub(super) cancels: BTreeMap<u64, String>,
    /// Launches each worker should be running.
    pub(super) expected: HashMap<String, HashSet<(u64, u32)>>,
    /// Launches whose revocation got no answer (job → (worker, launch)):
    /// they may still run, so the job is not launched again until the
    /// worker's heartbeat shows them stopped or it is declared gone.
    pub(super) in_doubt: HashMap<u64, Vec<(String, u32)>>,
    /// Jobs restored from the job table, held until `hold_until`: by then
    /// every launch of the previous scheduler run has stopped (its worker
    /// revoked it on registering again, or fenced it when its lease ran out).
    pub(super) held: VecDeque<JobSpec>,
    pub(super) hold_until: Instant,
    /// The previous run's workers (id → address, as the job table last
    /// recorded them) and, for each held job that ran, the addresses of the
    /// workers it ran on. A held job is queued before `hold_until` once
    /// every worker it ran on (a job that did not run: every previous
    /// worker) registered again without reporting it: a worker registers
    /// only after the jobs its lapsed lease stopped have exited.
    pub(super) restart_workers: BTreeMap<String, String>,
    pub(super) held_on: HashMap<u64, Vec<String>>,
    /// Every job's record, as persisted (status, placement, counters).
    pub(super) jobs: jobs::JobTable,
    /// Ended jobs in the order they ended, with when (Unix seconds) and
    /// their record's bytes: the oldest are forgotten first
    /// ([`RuntimeConfig::retention_s`], `retention_jobs`, `retention_bytes`).
    pub(super) ended: VecDeque<(u64, f64, u64)>,
    /// The bytes of the records in `ended`.
    pub(super) ended_bytes: u64,
    /// Bytes of the submissions waiting, by user and in all, as of the last
    /// round (`max_waiting_bytes_per_user`, `max_waiting_bytes`).
    pub(super) waiting_bytes: u64,
    pub(super) waiting_bytes_by_user: HashMap<String, u64>,
    pub(super) compacted: u64,
    pub(super) next_job_id: u64,
    /// The job of each idempotency key (`JobSubmission.idempotency_key`).
    pub(super) keys: HashMap<String, u64>,
    /// GPUs of the workers in the loop's cluster.
    pub(super) cluster_gpus: u32,
    pub(super) rounds: u64,
    pub(super) policy: String,
    /// The last invalid decision a policy made (dropped), for `Status`.
    pub(super) last_error: String,
    /// The latest forecast of starts and finishes, and its drift.
    pub(super) forecasts: forecast::Forecasts,
    /// The topology as registered workers placed themselves in it (to
    /// check a new worker's labels), and how many did.
    pub(super) topology: Option<topology::Topology>,
    pub(super) labelled: u32,
    /// Nodes the loop keeps out on purpose, with why (a spare, quarantined):
    /// `Status` shows it as the worker's problem.
    pub(super) node_notes: HashMap<u32, String>,
    /// The cluster's job uids ([`uids`]; `[runtime] job_uids`).
    pub(super) uids: uids::UidPool,
}

impl Hub {
    /// Job `id` (its record in the table) ended at `at`.
    pub(super) fn push_ended(&mut self, id: u64, at: f64) {
        use prost::Message;
        let bytes = self.jobs.get(&id).map_or(0, |r| r.encoded_len() as u64);
        self.ended_bytes += bytes;
        self.ended.push_back((id, at, bytes));
    }
}

pub(super) type SharedHub = Arc<Mutex<Hub>>;

pub(super) fn lock(h: &SharedHub) -> MutexGuard<'_, Hub> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    /// The hub of a scheduler starting on the job table `store` (its next
    /// job id `next_job_id`), running `policy`.
    pub(super) fn new(
        cfg: &RuntimeConfig,
        store: &Store,
        policy: String,
        next_job_id: u64,
    ) -> Result<Hub, StoreError> {
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
            policy,
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
        Ok(hub)
    }
}
