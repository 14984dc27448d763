//! [`ClusterBackend`]: the round loop's mechanisms over the workers — cluster
//! management (workers join and leave as nodes), metric collection (metrics,
//! exits, cancellations folded in each round), job source, preemption and
//! launch over gRPC, and wall-clock rounds.

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

mod launch;
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
    /// GPU count: a worker that registers again from that address with as
    /// many GPUs is the node repaired (its history kept: quarantine), one
    /// forgotten first has left for good.
    pub(super) failed_nodes: HashMap<String, (NodeId, usize)>,
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

impl ClusterManager for ClusterBackend {
    /// A live cluster's nodes are the workers that registered: a policy that
    /// asks for another size (Pollux's autoscaling) is told no, once in the
    /// log and in `Status`, and the scheduler goes on with the nodes it has.
    fn request_nodes(&mut self, round: &RoundInfo, nodes: u32) -> Result<(), BackendError> {
        let text = format!(
            "round {}: the policy asked for {nodes} nodes; on a live cluster the nodes are the workers that register, so the request is ignored (turn the policy's autoscaling off)",
            round.round
        );
        let mut h = lock(&self.hub);
        if !h.last_error.contains("asked for") {
            tracing::warn!("{text}");
        }
        h.last_error = text;
        Ok(())
    }

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
                    w.dead_since = Some(Instant::now());
                    tracing::warn!(worker = %id, "no heartbeat for {:.1} s: the worker is gone; its jobs go back to the queue", self.cfg.worker_timeout_s);
                    self.metrics.workers_lost.inc();
                    h.expected.remove(id);
                    // Its busy uids no longer speak; those its launches
                    // held stay held until it beats again.
                    h.uids.gone(id);
                    // Its lease and fence grace are over: nothing runs there.
                    h.in_doubt.retain(|_, parts| {
                        parts.retain(|(w, _)| w != id);
                        !parts.is_empty()
                    });
                    if let Some(n) = w.node {
                        // A failed node: its jobs go back to their last
                        // checkpoint, and it is the same node if it comes back.
                        events.push(ClusterEvent::NodeFailed(n));
                        self.metrics.failures.inc();
                        self.failed_nodes
                            .insert(w.address.clone(), (n, w.gpus.len()));
                        lost.push(id.clone());
                    }
                }
            }
        }
        // Workers that registered again after a restart: what they still
        // run is adopted or revoked before they join.
        self.hold_over = Instant::now() >= lock(&self.hub).hold_until;
        let adopted = self.settle_reports();
        {
            let mut h = lock(&self.hub);
            let h = &mut *h;
            let mut repaired = Vec::new();
            for (id, w) in h.workers.iter_mut() {
                if w.alive && w.verified && w.node.is_none() && w.reported.is_empty() {
                    if let Some((node, _)) = self
                        .failed_nodes
                        .get(&w.address)
                        .copied()
                        .filter(|(_, g)| *g == w.gpus.len())
                    {
                        // The node that failed, back: same id, same GPUs.
                        self.failed_nodes.remove(&w.address);
                        w.node = Some(node);
                        self.nodes[node.index()] = id.clone();
                        let mut local = w.gpus.iter().map(|g| g.index);
                        for e in self.gpu_map.iter_mut().filter(|e| e.0 == node.index()) {
                            e.1 = local.next().unwrap_or(e.1);
                        }
                        events.push(ClusterEvent::NodeRepaired(node));
                        repaired.push(node);
                        tracing::info!(worker = %id, node = %node, "worker back: its node rejoins the cluster");
                        continue;
                    }
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
                    spec.labels = w.labels.clone();
                    // Each GPU's relative time, where the worker measured
                    // every one ([`blox_core::variability`]).
                    if w.gpus.iter().all(|g| g.relative_time > 0.0) {
                        spec.gpu_slowdown = w.gpus.iter().map(|g| g.relative_time).collect();
                    }
                    events.push(ClusterEvent::NodeAdded(spec));
                    tracing::info!(worker = %id, node = %node, "worker joined the cluster");
                }
            }
            // The gone entry of a node that came back no longer holds it.
            for w in h.workers.values_mut() {
                if !w.alive && w.node.is_some_and(|n| repaired.contains(&n)) {
                    w.node = None;
                }
            }
            let forget_after = self.cfg.forget_workers_after_s;
            // A failed node whose worker is forgotten has left for good.
            for w in h.workers.values() {
                let forgotten = w
                    .dead_since
                    .is_some_and(|t| t.elapsed().as_secs_f64() >= forget_after);
                if let (true, Some(n)) = (forgotten, w.node) {
                    if self
                        .failed_nodes
                        .get(&w.address)
                        .is_some_and(|(f, _)| *f == n)
                    {
                        self.failed_nodes.remove(&w.address);
                        events.push(ClusterEvent::NodeRemoved(n));
                    }
                }
            }
            h.workers.retain(|_, w| {
                w.dead_since
                    .is_none_or(|t| t.elapsed().as_secs_f64() < forget_after)
            });
            // A gone worker's credential is worth nothing from then on.
            let workers = &h.workers;
            h.credentials
                .retain(|_, id| workers.get(id).is_some_and(|w| w.alive));
            h.cluster_gpus = h
                .workers
                .values()
                .filter(|w| w.alive && w.node.is_some())
                .map(|w| w.gpus.len() as u32)
                .sum();
        }
        events.extend(self.adopted(adopted));
        if !lost.is_empty() {
            let now = self.now();
            let hit: Vec<JobId> = self
                .running
                .iter()
                .filter(|(_, l)| l.parts.iter().any(|p| lost.contains(&p.worker)))
                .map(|(id, _)| *id)
                .collect();
            for id in hit {
                let mut live = self.retire(id, now).expect("listed above");
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
        // Jobs restored after a restart join once the previous run's
        // launches must have stopped.
        if !h.held.is_empty() && self.hold_over {
            let held = std::mem::take(&mut h.held);
            for s in held.into_iter().rev() {
                let b = submission_bytes(&h, s.id.0);
                h.submissions.push_front(s, b);
            }
            h.held_on.clear();
        } else if !h.held.is_empty() {
            release_early(&mut h);
        }
        let cap = h.cluster_gpus;
        // Jobs larger than the cluster as it is now (workers still joining
        // after a restart) wait here.
        let out = h.submissions.take_where(|s| s.requested_gpus <= cap);
        // They wait in the loop now: counted against the bounds on
        // submissions until the round's end counts them afresh.
        h.waiting_total += out.len();
        for s in &out {
            let user = s.user.clone().unwrap_or_default();
            let bytes = h
                .jobs
                .get(&s.id.0)
                .and_then(|r| r.job.as_ref())
                .map_or(0, |j| prost::Message::encoded_len(j) as u64);
            h.waiting_bytes += bytes;
            *h.waiting_bytes_by_user.entry(user.clone()).or_default() += bytes;
            *h.waiting_by_user.entry(user).or_default() += 1;
        }
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
        let now = self.now();
        let mut dropped = 0;
        for s in metrics.into_values().flatten() {
            let l = s.launch.expect("checked on receipt");
            let id = JobId(l.job_id);
            if let Some(live) = self.running.get_mut(&id).filter(|x| x.launch == l.launch) {
                live.clock.on_metric(&s.key, s.value, now);
            }
            if let Some(j) = jobs.get_mut(id) {
                if s.key == metric::PROGRESS {
                    j.progress = s.value.clamp(0.0, 1.0);
                }
                // Distinct keys per job are bounded as in a submission.
                let m = jobs.metrics();
                if m.get(id, &s.key).is_none() && m.key_count(id) >= MAX_JOB_METRIC_KEYS {
                    dropped += 1;
                    continue;
                }
                m.set(id, &s.key, s.value);
            }
        }
        if dropped > 0 {
            lock(&self.hub).metrics_dropped += dropped;
        }
        for (r, at) in exits {
            let l = r.launch.expect("checked on receipt");
            let id = JobId(l.job_id);
            let at_s = self.at_s(at);
            let current = self.running.get(&id).is_some_and(|x| x.launch == l.launch);
            if !current {
                // A launch that was already revoked: only its finish
                // matters, and only while no other launch of the job runs
                // (that one ends the job itself; a stale report must not
                // end it under it or free its GPUs).
                if r.finished && !self.running.contains_key(&id) {
                    self.ended.push(Ended::finished(id, at_s));
                } else {
                    tracing::info!(job = %id, launch = l.launch, finished = r.finished, "exit report of a launch that is not the job's current one: ignored");
                }
                continue;
            }
            if r.finished {
                let live = self.running.get_mut(&id).expect("checked above");
                live.parts_left = live.parts_left.saturating_sub(1);
                if live.parts_left > 0 {
                    continue;
                }
                live.clock.finished();
                let live = self.retire(id, at_s).expect("checked above");
                self.forget_expected(id, &live);
                self.ended.push(Ended::finished(id, at_s));
                self.metrics.exits.with_label_values(&["finished"]).inc();
            } else {
                let live = self.retire(id, at_s).expect("checked above");
                // A failing part takes the others down.
                self.revoke_parts(id, &live, true);
                let reason = (!r.reason.is_empty()).then(|| r.reason.clone());
                let mut e = Ended::crashed(id, at_s, r.code, reason);
                // Fenced by its worker (lease lost): not the job's fault.
                e.blame = !r.fenced;
                self.ended.push(e);
                let outcome = if r.fenced { "fenced" } else { "crashed" };
                self.metrics.exits.with_label_values(&[outcome]).inc();
            }
        }
        for (id, reason) in cancels {
            let id = JobId(id);
            if let Some(live) = self.retire(id, now) {
                self.revoke_parts(id, &live, true);
            }
            if let Some(j) = jobs.get_mut(id) {
                if !j.status.is_terminal() {
                    j.status = JobStatus::Cancelled;
                    j.finish_s = Some(now);
                    j.end_reason = Some(reason);
                }
            }
        }
        let max_startup_s = self.max_startup_s();
        for live in self.running.values_mut() {
            live.clock.advance(now);
            live.clock.give_up_waiting(now, max_startup_s);
        }
        let ended = std::mem::take(&mut self.ended);
        let live = self.running.iter().map(|(id, l)| (*id, &l.clock));
        settle(ended, &mut self.records, live, jobs, self.cfg.max_retries);
        Ok(())
    }
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

/// Queues the held jobs whose previous workers are all back (see
/// `Hub::restart_workers`) and did not report them: a worker registers
/// again only after what its lapsed lease stopped has exited, so nothing of
/// the job runs any more and its GPUs need not sit idle until the hold ends.
fn release_early(h: &mut super::Hub) {
    if h.restart_workers.is_empty() {
        return;
    }
    let back: HashSet<&str> = h
        .workers
        .values()
        .filter(|w| w.alive)
        .map(|w| w.address.as_str())
        .collect();
    let everyone = h
        .restart_workers
        .values()
        .all(|a| back.contains(a.as_str()));
    let reported: HashSet<u64> = h
        .workers
        .values()
        .flat_map(|w| w.reported.iter().filter_map(|r| r.launch.map(|l| l.job_id)))
        .chain(h.expected.values().flat_map(|s| s.iter().map(|(j, _)| *j)))
        .chain(h.in_doubt.keys().copied())
        .collect();
    let mut released = Vec::new();
    let mut keep = VecDeque::new();
    for s in std::mem::take(&mut h.held) {
        let id = s.id.0;
        let gone = match h.held_on.get(&id) {
            Some(on) => on.iter().all(|a| back.contains(a.as_str())),
            None => everyone,
        };
        if gone && !reported.contains(&id) {
            h.held_on.remove(&id);
            released.push(s);
        } else {
            keep.push_back(s);
        }
    }
    h.held = keep;
    if !released.is_empty() {
        tracing::info!(
            jobs = released.len(),
            "queued again before the restart hold ends: every worker they ran on registered again without them"
        );
        // Ahead of newer submissions, in id order, as at the hold's end.
        for s in released.into_iter().rev() {
            let b = submission_bytes(h, s.id.0);
            h.submissions.push_front(s, b);
        }
    }
}

/// The encoded size of job `id`'s submission in the job table, bytes (what
/// the intake's byte bounds count).
pub(super) fn submission_bytes(h: &super::Hub, id: u64) -> u64 {
    h.jobs
        .get(&id)
        .and_then(|r| r.job.as_ref())
        .map_or(0, |j| prost::Message::encoded_len(j) as u64)
}
