//! The simulation backend: a virtual clock and per-job progress, implementing the
//! loop's mechanisms (metric collection, submissions, preemption, launch, wait).
//!
//! Time advances in whole rounds (`t = k·R`). Inside a round a running job makes
//! progress from its launch (plus launch/restart overhead) and, by default,
//! finishes at its exact completion time; its GPUs come back at the next round.
//! With `round_quantized = true` the Blox simulator's accounting is reproduced:
//! every job running in a round is credited the whole round and finishes at the
//! round boundary (`blox-sim-semantics.md`).
//!
//! Profile-driven jobs (Pollux workloads) follow the Pollux artifact's simulator
//! (`pollux-data.md` §7.2): within a round a job advances in sub-steps; each
//! sub-step takes the true step time at its placement and batch, the true
//! gradient statistics of its epoch, and gains `g(M)/T_iter·(1−I)` progress per
//! second; an epoch boundary is crossed at a whole second (round half to even),
//! after which the batch is re-chosen (a PolluxAgent observes and refits first).
//! The job completes at the target progress `P*`.

mod advance;
mod cluster;
mod config;
pub mod failures;
mod fork;
mod pending;
mod progress;
mod source;

pub use config::SimConfig;
pub use progress::synthetic_loss;
use progress::{ProfileRun, Segment, SimJobState, Tuner};

use crate::workload::host_profile::HostProfiles;
use crate::workload::{BatchAgent, SimJob, WorkModel};
use blox_core::*;
use blox_goodput::{BatchConfig, PolluxAgent};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

/// The simulator: owns the trace and the true state of every job.
pub struct SimBackend {
    cfg: SimConfig,
    round_s: f64,
    tick: u64,
    /// Time of tick 0 (forks start at the live clock).
    t0: f64,
    /// Jobs not yet submitted, by arrival: each leaves at its submission
    /// (its spec moves to the loop), and the buffer shrinks as it empties,
    /// so a million-job trace does not outlive its arrivals.
    trace: pending::Pending,
    jobs: HashMap<JobId, SimJobState>,
    /// Whether any job run by its profile has arrived (only then does
    /// `advance` look for them).
    profiled: bool,
    running: BTreeSet<JobId>,
    /// Jobs whose state changed since the last metric collection.
    /// (Pushed in any order, possibly twice; sorted and deduplicated when
    /// collected, so jobs are reported in id order.)
    dirty: Vec<JobId>,
    /// Node of every GPU id (mirrors the cluster the loop manages).
    gpu_node: Vec<NodeId>,
    /// GPU type of every node.
    node_type: HashMap<NodeId, String>,
    /// Cluster changes to report at the next round (auto-scaling).
    events: Vec<ClusterEvent>,
    /// Nodes that join or leave at given times (a replayed history's), in
    /// time order ([`SimBackend::plan_nodes`]).
    planned: std::collections::VecDeque<(f64, ClusterEvent)>,
    online_nodes: Vec<NodeId>,
    next_node: u32,
    node_template: NodeSpec,
    /// Most nodes the simulated cloud provides (`[cluster] max_nodes`).
    max_nodes: u32,
    /// Metrics fixed for a job's life (per-type speeds, epoch size, batch
    /// limits), reported once at the collection after its submission.
    /// (Names are literals but for the per-type speeds: a literal costs
    /// no allocation per job, here or in the metric store.)
    static_metrics: Vec<(JobId, std::borrow::Cow<'static, str>, f64)>,
    /// CPU/memory sensitivity by model (Synergy); models not listed do not
    /// depend on host resources.
    host_profiles: HostProfiles,
    /// The proportional host share of every node.
    node_prop: HashMap<NodeId, HostShare>,
    /// Nodes failing and coming back (`[failures]`).
    failures: Option<failures::Failures>,
    /// Per-GPU slowdown factors by class, if the cluster has them.
    variability: Option<std::sync::Arc<blox_core::variability::Variability>>,
    /// Whether the last collection published the per-round progress
    /// metrics ([`metric::PER_ROUND`]): they are left out while no policy
    /// reads them, and every job's are published again when one does.
    progress_published: bool,
}

impl SimBackend {
    /// `trace` must be sorted by arrival; `cluster` is the cluster the loop
    /// starts with (the backend needs to know which node each GPU is on).
    pub fn new(cfg: SimConfig, round_s: f64, trace: Vec<SimJob>, cluster: &ClusterState) -> Self {
        let mut gpu_node = Vec::new();
        for node in cluster.nodes() {
            for g in &node.gpus {
                if gpu_node.len() <= g.index() {
                    gpu_node.resize(g.index() + 1, node.id);
                }
                gpu_node[g.index()] = node.id;
            }
        }
        SimBackend {
            node_type: cluster
                .nodes()
                .iter()
                .map(|n| (n.id, n.spec.gpu_type.clone()))
                .collect(),
            tick: u64::from(cfg.start_after_first_round),
            t0: 0.0,
            cfg,
            round_s,
            trace: pending::Pending::new(trace),
            jobs: HashMap::default(),
            profiled: false,
            running: BTreeSet::new(),
            dirty: Vec::new(),
            gpu_node,
            events: Vec::new(),
            planned: Default::default(),
            online_nodes: cluster
                .nodes()
                .iter()
                .filter(|n| n.online)
                .map(|n| n.id)
                .collect(),
            next_node: cluster.nodes().len() as u32,
            max_nodes: {
                let per_node = cluster
                    .nodes()
                    .first()
                    .map_or(1, |n| n.gpus.len().max(1) as u32);
                cluster.max_gpus() / per_node
            },
            static_metrics: Vec::new(),
            host_profiles: HostProfiles::new(),
            node_prop: cluster
                .nodes()
                .iter()
                .map(|n| (n.id, n.spec.proportional_share()))
                .collect(),
            node_template: cluster
                .nodes()
                .first()
                .map(|n| n.spec.clone())
                .unwrap_or_else(|| NodeSpec::with_gpus(4)),
            failures: None,
            variability: cluster.variability().cloned().map(std::sync::Arc::new),
            progress_published: false,
        }
    }

    /// The next node id, its GPUs and type, for a node the loop is told of
    /// (its GPUs are numbered after every node's before it).
    fn track_added(&mut self, spec: &NodeSpec) -> NodeId {
        let id = NodeId(self.next_node);
        self.next_node += 1;
        self.node_type.insert(id, spec.gpu_type.clone());
        self.node_prop.insert(id, spec.proportional_share());
        self.gpu_node
            .extend(std::iter::repeat_n(id, spec.gpus as usize));
        self.online_nodes.push(id);
        let now = self.now();
        if let Some(f) = &mut self.failures {
            f.add_node(id, spec, now);
        }
        id
    }

    /// Takes a job off its GPUs, keeping its progress (preemption, lost node).
    fn stop(&mut self, id: JobId) {
        self.stop_as(id, false);
    }

    /// [`Self::stop`]; `failed`: its node failed under it, so even a job
    /// that saves when stopped goes back (to where its launch began).
    fn stop_as(&mut self, id: JobId, failed: bool) {
        self.running.remove(&id);
        let now = self.now();
        if let Some(s) = self.jobs.get_mut(&id) {
            // A job that saves every so often goes back to its last
            // checkpoint (one that saves when stopped loses nothing).
            if failed {
                s.restore_after_failure();
            } else {
                s.restore();
            }
            self.dirty.push(id);
            s.unreported_first = s
                .segment
                .as_ref()
                .filter(|seg| seg.first_iteration_s <= now + 1e-9)
                .map(|seg| {
                    (
                        seg.first_iteration_s,
                        seg.first_iteration_s - seg.held_since_s,
                    )
                });
            s.segment = None;
            s.stopped_at = Some(now);
            if let Some(p) = s.profile.as_mut() {
                p.per_node.clear();
            }
        }
    }

    /// The nodes `gpus` are on, sorted, each once.
    fn nodes_of(&self, gpus: &[GpuId]) -> Box<[NodeId]> {
        let mut nodes: Vec<NodeId> = gpus
            .iter()
            .filter_map(|g| self.gpu_node.get(g.index()).copied())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.into_boxed_slice()
    }

    /// Replicas per node in allocation order (run lengths of the GPUs' nodes).
    fn per_node(&self, gpus: &[GpuId]) -> Vec<u32> {
        let mut out: Vec<(NodeId, u32)> = Vec::new();
        for g in gpus {
            let node = self
                .gpu_node
                .get(g.index())
                .copied()
                .unwrap_or(NodeId(u32::MAX));
            match out.iter_mut().find(|(n, _)| *n == node) {
                Some((_, c)) => *c += 1,
                None => out.push((node, 1)),
            }
        }
        out.into_iter().map(|(_, c)| c).collect()
    }

    /// Sets each profile job's slowdown for the coming round (§7.4).
    fn apply_interference(&mut self) {
        let i = self.cfg.interference;
        let mut distributed_on: HashMap<NodeId, u32> = HashMap::default();
        fn spanning(s: &SimJobState) -> Option<&Segment> {
            s.segment.as_ref().filter(|seg| seg.nodes.len() > 1)
        }
        for id in &self.running {
            if let Some(seg) = self.jobs.get(id).and_then(spanning) {
                for n in &seg.nodes {
                    *distributed_on.entry(*n).or_default() += 1;
                }
            }
        }
        for id in &self.running {
            let Some(s) = self.jobs.get_mut(id) else {
                continue;
            };
            let hit = spanning(s).is_some_and(|seg| {
                seg.nodes
                    .iter()
                    .any(|n| distributed_on.get(n).copied().unwrap_or(0) >= 2)
            });
            let Some(p) = s.profile.as_mut() else {
                continue;
            };
            p.slowdown = if hit { 1.0 - i } else { 1.0 };
        }
    }

    /// Makes jobs' speed depend on the CPUs and host memory they get, by
    /// model (Synergy). Each job with a profile is submitted with its best
    /// share in `JobSpec::metrics`: `best_cpus_per_gpu`, `best_mem_gb_per_gpu`
    /// and `best_host_speedup` (what Synergy's optimistic profiling measures).
    pub fn with_host_profiles(mut self, profiles: HostProfiles) -> Self {
        self.host_profiles = profiles;
        self
    }

    /// Nodes fail and come back by `failures` (`[failures]`).
    pub fn with_failures(mut self, failures: Option<failures::Failures>) -> Self {
        self.failures = failures;
        self
    }

    /// The failures so far, when a failure model runs.
    pub fn failure_counts(&self) -> Option<failures::FailureCounts> {
        self.failures.as_ref().map(|f| f.counts)
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Jobs of the trace not yet submitted.
    pub fn pending(&self) -> usize {
        self.trace.len()
    }

    /// True while something will happen without any policy acting: an
    /// arrival still to come, or a cluster change to report.
    pub fn has_pending_events(&self) -> bool {
        !self.trace.is_empty()
            || !self.events.is_empty()
            || !self.planned.is_empty()
            || self.failures.as_ref().is_some_and(|f| f.any_down())
    }

    fn now(&self) -> f64 {
        self.t0 + self.tick as f64 * self.round_s
    }
}

impl SimBackend {
    /// Metrics fixed at submission and not yet collected: a job popped this
    /// round reports them at the next round's collection. A snapshot taken
    /// between the two must carry them ([`crate::Simulation::snapshot`]).
    pub fn pending_metrics(&self) -> &[(JobId, std::borrow::Cow<'static, str>, f64)] {
        &self.static_metrics
    }
}

impl MetricCollector for SimBackend {
    fn collect_metrics(
        &mut self,
        round: &RoundInfo,
        jobs: &mut JobState,
    ) -> Result<(), BackendError> {
        for (id, k, v) in std::mem::take(&mut self.static_metrics) {
            match k {
                std::borrow::Cow::Borrowed(k) => jobs.metrics().update(id, |m| m.set_static(k, v)),
                std::borrow::Cow::Owned(k) => jobs.metrics().set(id, &k, v),
            }
        }
        // A handle on the store, so a job and its metrics are updated
        // under one lookup of each.
        let store = jobs.metrics().clone();
        // Trace jobs' progress metrics cost a store write per running job
        // per round: published only while a policy reads one (and then
        // every job's at once, if they were left out before).
        let publish = metric::PER_ROUND.iter().any(|k| store.is_read(k));
        if publish && !self.progress_published {
            self.dirty.extend(self.jobs.keys().copied());
        }
        self.progress_published = publish;
        store.withhold(if publish { &[] } else { metric::PER_ROUND });
        let mut dirty = std::mem::take(&mut self.dirty);
        // The running jobs come first, in id order, then the few launched
        // or stopped: a run-detecting sort is near one pass over them.
        dirty.sort();
        dirty.dedup();
        for job in jobs.active_mut_among(&dirty) {
            let id = job.id();
            let Some(s) = self.jobs.get(&id) else {
                continue;
            };
            if let Some(p) = &s.profile {
                job.progress = (p.progress / p.app.target_progress()).min(1.0);
                let m = &store;
                m.set(id, metric::EPOCH, p.epoch as f64);
                m.set(id, metric::EPOCHS_DONE, p.epochs_done());
                m.set(id, metric::PROGRESS_UNITS, p.progress);
                m.set(id, metric::SAMPLES_PROCESSED, p.samples);
                if p.epoch > 0 {
                    let mb = p.batch.global(p.replicas().max(1)) as f64;
                    if let Some(v) = p.app.val_metric(mb, p.epoch - 1) {
                        m.set(id, metric::VAL_METRIC, v);
                    }
                }
                match p.samples_per_s() {
                    Some(x) => m.set(id, metric::THROUGHPUT, x),
                    None => m.remove(id, metric::THROUGHPUT),
                }
                if let (Some(b0), false) = (p.initial_batch, p.per_node.is_empty()) {
                    // Linear learning-rate scaling (ONES §3.3.2): lr ∝ batch.
                    let b = p.batch.global(p.replicas()) as f64;
                    m.set(id, metric::LR_SCALE, b / b0 as f64);
                }
                if let Tuner::Pollux(a) = &p.tuner {
                    // The agent's throughput fit (θ and the replicas it was
                    // measured at) reaches the scheduler from a launch past
                    // its start-up only: a real agent pushes it once it
                    // trains, and until then the scheduler keeps the last
                    // launch's. Moved to another GPU type, the agent holds
                    // that type's fit at once; published then, it reached a
                    // type-blind PolluxSched before the job ran there, and
                    // the two types' fits disagreeing, it moved a job back
                    // and forth every round, never past its start-up (Sia's
                    // Philly workload 3; docs/RESULTS.md). The job's constants
                    // and gradient statistics are the job's, on any type.
                    let starting = job.is_running() && job.first_iteration_s.is_none();
                    for (k, v) in a.report().to_metrics() {
                        let fit = k == "pollux.max_profiled_replicas"
                            || blox_goodput::agent::PARAM_KEYS.contains(&k);
                        if !(starting && fit) {
                            m.set(id, k, v);
                        }
                    }
                    for (k, v) in a.typed_metrics() {
                        m.set(id, &k, v);
                    }
                }
                if !p.per_node.is_empty() {
                    let r = p.replicas();
                    m.set(id, metric::ATOMIC_BSZ, p.batch.atomic as f64);
                    m.set(id, metric::ACCUM_STEPS, p.batch.accum as f64);
                    job.current_batch_size = Some(p.batch.global(r));
                }
            } else {
                job.progress = if s.duration_s > 0.0 {
                    (s.done_s / s.duration_s).min(1.0)
                } else {
                    1.0
                };
                let k = s.requested_gpus.max(1) as f64;
                let epoch_s = self.cfg.epoch_s.max(1e-9);
                // One lookup for all of a job's metrics: this runs for every
                // running job every round.
                if publish {
                    store.update(id, |m| {
                        m.set_static(metric::SAMPLES_PROCESSED, s.done_s * k);
                        m.set_static(metric::EPOCHS_DONE, s.done_s / epoch_s);
                        match &s.segment {
                            Some(seg) => {
                                m.set_static(metric::THROUGHPUT, seg.gpus as f64 * s.type_speed)
                            }
                            None => m.remove(metric::THROUGHPUT),
                        }
                        if let Some(c) = s.converge_at {
                            m.set_static(
                                metric::LOSS,
                                synthetic_loss(s.done_s / s.duration_s.max(1e-9), c),
                            );
                            m.set_static(metric::LOSS_TARGET, 1.0);
                        }
                    });
                }
            }
            job.attained_service_gpu_s = s.attained_gpu_s;
            job.startup_gpu_s = s.startup_gpu_s;
            job.startup_s = s.startup_s;
            job.run_time_s = s.run_time_s;
            if let Some(seg) = &s.segment {
                if seg.first_iteration_s <= round.now_s + 1e-9 {
                    let started = seg.first_iteration_s - seg.held_since_s;
                    job.reached_first_iteration(seg.first_iteration_s, started);
                }
            } else if let Some((first, started)) = s.unreported_first {
                // Its node went under it; the loop still has it running.
                if job.is_running() {
                    job.reached_first_iteration(first, started);
                }
            }
            if let Some(t) = s.finished_at {
                job.status = JobStatus::Finished;
                job.finish_s = Some(t);
                job.progress = 1.0;
                // Everything the loop keeps about the job is reported: its
                // simulated state goes (a million-job trace would otherwise
                // hold every ended job's twice).
                self.jobs.remove(&id);
            }
        }
        // Keep the buffer's capacity for the next round.
        dirty.clear();
        self.dirty = dirty;
        Ok(())
    }
}

impl PreemptionMechanism for SimBackend {
    fn preempt(&mut self, _round: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        // Checkpointed: progress so far is kept.
        self.stop(job.id());
        Ok(())
    }
}

impl LaunchMechanism for SimBackend {
    fn launch(
        &mut self,
        round: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        batch_size: Option<u32>,
    ) -> Result<(), BackendError> {
        let per_node = self.per_node(gpus);
        let nodes = match (gpus, job.host_node) {
            // A job without GPUs stops when its node goes.
            ([], Some(n)) => Box::new([n]) as Box<[NodeId]>,
            _ => self.nodes_of(gpus),
        };
        let type_speed = self.speed_factor(job, gpus);
        let (gpu_node, node_type) = (&self.gpu_node, &self.node_type);
        let s = self
            .jobs
            .get_mut(&job.id())
            .ok_or_else(|| BackendError(format!("{} is not a submitted job", job.id())))?;
        let moved = s.stopped_at == Some(round.now_s);
        // Start-up before the first iteration: the job's own (trace or
        // model), else the launch / restart overhead; an elastic move costs
        // the elastic overhead.
        let overhead = match (
            s.started,
            moved,
            self.cfg.elastic_overhead_s,
            s.own_startup_s,
        ) {
            (true, true, Some(e), _) => e,
            (_, _, _, Some(own)) => own,
            (false, _, _, None) => self.cfg.launch_overhead_s,
            (true, _, _, None) => self.cfg.restart_overhead_s,
        };
        s.started = true;
        s.unreported_first = None;
        s.type_speed = type_speed;
        if let Some(p) = s.profile.as_mut() {
            // The GPU types it holds (a profile run's fits are per type).
            let mut held: Vec<&str> = gpus
                .iter()
                .filter_map(|g| gpu_node.get(g.index()))
                .filter_map(|n| node_type.get(n))
                .map(|t| t.as_str())
                .collect();
            held.sort_unstable();
            held.dedup();
            p.on_types(&held)
                .map_err(|e| BackendError(format!("{}: {e}", job.id())))?;
            p.type_speed = type_speed;
            p.per_node = per_node;
            match batch_size {
                Some(m) => p.set_batch(m),
                None => p.choose_batch(),
            }
            let r = p.replicas();
            p.initial_batch.get_or_insert(p.batch.global(r));
        }
        s.save(job.checkpoint_interval_s(), round.now_s + overhead);
        s.segment = Some(Segment {
            gpus: gpus.len() as u32,
            held_since_s: round.now_s,
            progress_from_s: round.now_s + overhead,
            first_iteration_s: round.now_s + overhead,
            nodes,
        });
        self.running.insert(job.id());
        self.dirty.push(job.id());
        Ok(())
    }

    /// An in-place batch change: profile-driven jobs run at the new batch
    /// after `elastic_overhead_s`; duration-based jobs do not depend on it.
    fn reconfigure(
        &mut self,
        round: &RoundInfo,
        job: &Job,
        batch_size: u32,
    ) -> Result<(), BackendError> {
        let cost = self.cfg.elastic_overhead_s.unwrap_or(0.0);
        let s = self
            .jobs
            .get_mut(&job.id())
            .ok_or_else(|| BackendError(format!("{} is not a submitted job", job.id())))?;
        if let Some(p) = s.profile.as_mut() {
            p.set_batch(batch_size);
            if let Some(seg) = s.segment.as_mut() {
                seg.progress_from_s = seg.progress_from_s.max(round.now_s + cost);
            }
            self.dirty.push(job.id());
        }
        Ok(())
    }
}

impl SimBackend {
    /// Speed of `job` on `gpus`: its GPU type's (the slowest it holds) times
    /// its speed with the CPUs and memory it got (host profiles), times the
    /// share of its time not spent saving checkpoints (δ of every interval).
    fn speed_factor(&self, job: &Job, gpus: &[GpuId]) -> f64 {
        // (At least 1 %: a job's own metrics may save longer than they run.)
        job.unsaving_share().max(0.01) * self.hardware_speed(job, gpus)
    }

    fn hardware_speed(&self, job: &Job, gpus: &[GpuId]) -> f64 {
        let type_speed = gpus
            .iter()
            .filter_map(|g| self.gpu_node.get(g.index()))
            .filter_map(|n| self.node_type.get(n))
            .map(|t| self.cfg.speed(job.spec.model.as_deref(), t))
            .fold(f64::INFINITY, f64::min);
        let type_speed = if type_speed.is_finite() {
            type_speed
        } else {
            1.0
        };
        // CPU and memory sensitivity: the slowest of its nodes' shares.
        let host_speed = match job
            .spec
            .model
            .as_deref()
            .and_then(|m| self.host_profiles.get(m))
        {
            Some(h) => gpus
                .iter()
                .filter_map(|g| self.gpu_node.get(g.index()))
                .filter_map(|n| job.host_share.or_else(|| self.node_prop.get(n).copied()))
                .map(|share| h.speed_at(share))
                .fold(f64::INFINITY, f64::min),
            None => 1.0,
        };
        let host_speed = if host_speed.is_finite() {
            host_speed
        } else {
            1.0
        };
        type_speed * host_speed / self.variability_slowdown(job, gpus)
    }

    /// How many times slower than the median GPU `job` runs on `gpus`: its
    /// slowest GPU's factor for its class ([`blox_core::variability`]),
    /// times `locality_penalty` when they span nodes (the PAL artifact's
    /// `per_iter_time = pm_penalty × locality_penalty × iteration_time`).
    fn variability_slowdown(&self, job: &Job, gpus: &[GpuId]) -> f64 {
        let pm = self.variability.as_ref().map_or(1.0, |v| {
            v.slowest(gpus, v.class_of(job.spec.model.as_deref()))
        });
        let spans = self.cfg.locality_penalty != 1.0 && {
            let mut nodes = gpus.iter().filter_map(|g| self.gpu_node.get(g.index()));
            let first = nodes.next();
            nodes.any(|n| Some(n) != first)
        };
        if spans {
            pm * self.cfg.locality_penalty
        } else {
            pm
        }
    }
}

impl RoundClock for SimBackend {
    fn now_s(&self) -> f64 {
        self.now()
    }

    fn wait_round(&mut self, round_s: f64, idle: bool) -> Result<(), BackendError> {
        debug_assert_eq!(round_s, self.round_s);
        let start = self.now();
        self.tick += 1;
        if self.cfg.interference > 0.0 {
            self.apply_interference();
        }
        self.advance(start, self.now());
        if let (true, true, Some(next)) = (idle, self.running.is_empty(), self.trace.front()) {
            // Nothing admitted or running: jump to the round of the next arrival.
            // (No further than a planned node change.)
            let mut arrival = next.spec.arrival_s;
            if let Some((t, _)) = self.planned.front() {
                arrival = arrival.min(*t);
            }
            let tick = ((arrival - self.t0) / self.round_s).ceil().max(0.0) as u64;
            self.tick = self.tick.max(tick);
        }
        Ok(())
    }
}
