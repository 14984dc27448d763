//! [`ClusterBackend`]: the round loop's mechanisms over the workers — cluster
//! management (workers join and leave as nodes), metric collection (metrics,
//! exits, cancellations folded in each round), job source, preemption and
//! launch over gRPC, and wall-clock rounds.
//!
//! This file holds its state and what the mechanisms share (revocations,
//! the round clock); `cluster` is cluster management, `collect` metric
//! collection, `intake` the job source, `launch` preemption and launch.

use super::{lock, RuntimeConfig, SharedHub};
use crate::net::WorkerClient;
use crate::proto::*;
use crate::record::{settle, Ended, LaunchClock, LaunchWaits, Record};
use crate::store::Store;
use blox_core::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Status;

mod cluster;
mod collect;
mod intake;
mod launch;
pub(super) use intake::submission_bytes;
pub use launch::coord_dir;

/// One worker's part of a launch.
pub(super) struct Part {
    pub(super) worker: String,
    pub(super) client: WorkerClient,
    pub(super) gpus: Vec<u32>,
    /// The worker's lease epoch when the launch was sent (or adopted).
    pub(super) lease_epoch: u64,
}

/// A launch running on its workers.
pub(super) struct Live {
    launch: u32,
    parts: Vec<Part>,
    parts_left: usize,
    clock: LaunchClock,
}

impl Live {
    /// Its launch number.
    pub(super) fn launch(&self) -> u32 {
        self.launch
    }

    pub(super) fn new(launch: u32, parts: Vec<Part>, clock: LaunchClock) -> Live {
        Live {
            launch,
            parts_left: parts.len(),
            parts,
            clock,
        }
    }
}

/// Per-round timings of the scheduler (the last 10,000 rounds): `busy_s`
/// from the start of a round to its wait (cluster management, metric
/// collection, submissions, policies, launches and preemptions), and
/// `publish_s`, updating the status view and the job table after it.
#[derive(Clone, Debug, Default)]
pub struct RoundStats {
    pub busy_s: VecDeque<f64>,
    pub publish_s: VecDeque<f64>,
    /// Median and 99th percentile of `busy_s + publish_s` (`Status`),
    /// refreshed after each round.
    pub round_p50_s: f64,
    pub round_p99_s: f64,
}

impl RoundStats {
    /// Rounds kept.
    pub const KEPT: usize = 10_000;

    /// Recomputes the round quantiles from the rounds kept.
    pub(super) fn refresh(&mut self) {
        let mut v: Vec<f64> = self
            .busy_s
            .iter()
            .zip(&self.publish_s)
            .map(|(b, p)| b + p)
            .collect();
        if v.is_empty() {
            return;
        }
        self.round_p50_s = blox_core::stats::quantile(&mut v, 0.5);
        self.round_p99_s = blox_core::stats::quantile(&mut v, 0.99);
    }

    /// Appends `x`, dropping the oldest beyond [`RoundStats::KEPT`].
    pub(super) fn push(v: &mut VecDeque<f64>, x: f64) {
        if v.len() >= Self::KEPT {
            v.pop_front();
        }
        v.push_back(x);
    }
}

/// The round loop's backend over the workers (see the module docs).
pub struct ClusterBackend {
    pub(super) hub: SharedHub,
    pub(super) store: Arc<Store>,
    pub(super) rt: tokio::runtime::Handle,
    pub(super) cfg: RuntimeConfig,
    pub(super) start: Instant,
    pub(super) next_round: u64,
    /// Worker of each node, by node id.
    pub(super) nodes: Vec<String>,
    /// (node, worker's GPU index) of each GPU, by GPU id.
    pub(super) gpu_map: Vec<(usize, u32)>,
    pub(super) running: HashMap<JobId, Live>,
    pub(super) records: rustc_hash::FxHashMap<JobId, Record>,
    pub(super) ended: Vec<Ended>,
    /// How many of the loop's finished jobs were published.
    pub(super) finished_seen: usize,
    pub(super) last_flush: Instant,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) round_started: Option<Instant>,
    pub(super) stats: Arc<Mutex<RoundStats>>,
    /// Generations of this scheduler's launches start here: a counter
    /// persisted in the job table, one [`GENERATIONS_PER_RUN`] above the
    /// last run's, so they outrank every launch of an earlier run of the
    /// scheduler on the same table, whatever the clock does.
    pub(super) generation_base: u64,
    /// The job table's identity as a directory name: launch directories
    /// and checkpoints live under it, so a new table never meets an old
    /// one's files (`None`: a table older than identities).
    pub(super) cluster_key: Option<String>,
    /// Jobs whose records a failed job-table write left unwritten: written
    /// with the next round's.
    pub(super) unwritten: Vec<u64>,
    /// Jobs restored from the job table: launched before, perhaps more often
    /// than the table recorded (a launch after its last write), so their
    /// every launch resumes from the newest checkpoint.
    pub(super) restored: HashSet<JobId>,
    /// The restart hold ended (decided once per round, so the reports
    /// settled and the held jobs released in one round agree).
    pub(super) hold_over: bool,
    /// The workers in the cluster as last written to the job table.
    pub(super) workers_written: std::collections::BTreeMap<String, String>,
    pub(super) metrics: Arc<super::metrics::Metrics>,
    /// How long launches waited for their spawn lately (the forecast's
    /// launch costs).
    pub(super) waits: LaunchWaits,
    /// Nodes of workers declared gone, by the worker's address, with their
    /// GPU count and whether they shared GPUs: a worker that registers
    /// again from that address with as many GPUs, sharing them as before, is
    /// the node repaired (its history kept: quarantine); one that differs
    /// (an upgrade or a rollback across GPU shares) joins as a new node, and
    /// one forgotten first has left for good.
    pub(super) failed_nodes: HashMap<String, (NodeId, usize, bool)>,
}

/// The most launches of one job that get distinct generations in one run
/// of the scheduler (later ones share the last).
pub(super) const GENERATIONS_PER_RUN: u64 = 1_000_000;

/// How long an RPC to a worker may take beyond what it waits for itself.
const RPC_SLACK: Duration = Duration::from_secs(5);

/// The most distinct metric keys a job may have (as many as a submission
/// may carry).
const MAX_JOB_METRIC_KEYS: usize = 256;

/// The first generation of a scheduler started at `unix_s` under the old,
/// clock-based scheme (a table older than persisted generations starts
/// counting from here).
pub(super) fn generation_base(unix_s: f64) -> u64 {
    (unix_s.max(0.0) * 1000.0) as u64 * GENERATIONS_PER_RUN
}

impl ClusterBackend {
    /// How long a worker may be silent and still count as beating: its
    /// lease (by then its jobs stop themselves), and at least three
    /// heartbeats (a busy worker's beats come late).
    pub(super) fn fresh(&self) -> Duration {
        Duration::from_secs_f64(self.cfg.lease().0.max(self.cfg.heartbeat_s * 3.0))
    }

    pub(super) fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn at_s(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64()
    }

    /// Ends the launch of `id` at `until`: its time goes to the job's record.
    fn retire(&mut self, id: JobId, until: f64) -> Option<Live> {
        let mut live = self.running.remove(&id)?;
        live.clock.advance(until);
        self.records.entry(id).or_default().fold(&live.clock);
        Some(live)
    }

    /// Seconds a launch may go without reporting its start-up.
    fn max_startup_s(&self) -> f64 {
        self.cfg
            .profile
            .as_ref()
            .map_or(StartupRules::for_round(1.0).max_startup_s, |p| {
                p.rules.max_startup_s
            })
    }

    pub(super) fn forget_expected(&self, id: JobId, live: &Live) {
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
        let calls = self.spawn_revokes(id, live, kill);
        let out = self.rt.block_on(async { futures_join(calls).await });
        self.forget_expected(id, live);
        out
    }

    /// Sends the revocations of every part of a launch; the tasks answer
    /// with the workers' replies.
    pub(super) fn spawn_revokes(
        &self,
        id: JobId,
        live: &Live,
        kill: bool,
    ) -> Vec<tokio::task::JoinHandle<Option<RevokeReply>>> {
        let grace = self.cfg.grace_s;
        live
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
                let hub = self.hub.clone();
                let launch = live.launch;
                // The worker answers once the job exited (within the grace,
                // then it kills): no answer well past it is a lost worker.
                let limit = Duration::from_secs_f64(grace) + RPC_SLACK;
                let fresh = self.fresh();
                self.rt.spawn(async move {
                    let r =
                        while_beating(&hub, &worker, fresh, limit, c.revoke(req)).await;
                    match r {
                        Ok(r) => Some(r.into_inner()),
                        Err(e) => {
                            tracing::warn!(job = %id, worker = %worker, "revocation failed: {}; the job is not launched again until the worker shows it stopped or is declared gone", e.message());
                            lock(&hub)
                                .in_doubt
                                .entry(id.0)
                                .or_default()
                                .push((worker, launch));
                            None
                        }
                    }
                })
            })
            .collect()
    }
}

/// Waits for `call` to a worker, at most `limit`, and no longer than the
/// worker keeps beating (it was heard from within `fresh`): a worker whose
/// heartbeats stopped (hung, cut off) will not answer, and waiting for it
/// would stall the round.
pub(super) async fn while_beating<T>(
    hub: &super::SharedHub,
    worker: &str,
    fresh: Duration,
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let deadline = tokio::time::Instant::now() + limit;
    tokio::pin!(call);
    loop {
        tokio::select! {
            r = &mut call => return r,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                let silent = lock(hub)
                    .workers
                    .get(worker)
                    .is_none_or(|w| w.last_seen.elapsed() > fresh);
                if silent {
                    return Err(Status::deadline_exceeded("the worker stopped beating"));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(Status::deadline_exceeded("no reply"));
                }
            }
        }
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), marked.
fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes)", &text[..cut], text.len())
}

/// Awaits every task, in order.
async fn futures_join<T>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T>
where
    T: Default + Send + 'static,
{
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap_or_default());
    }
    out
}

impl RoundClock for ClusterBackend {
    fn now_s(&self) -> f64 {
        self.now()
    }

    fn real_time(&self) -> bool {
        true
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
