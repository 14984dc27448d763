//! The seven abstractions of a scheduler (Blox, EuroSys'24, §3 and Fig. 2) as one
//! small trait each, and the plain data that flows between them.
//!
//! Policies (admission, scheduling, placement) decide; mechanisms (cluster
//! management, metric collection, preemption, launch) act on a backend — the
//! simulator or a real cluster. The round loop in [`crate::round`] chains them.

use crate::cluster::{ClusterState, HostShare};
use crate::ids::{GpuId, JobId, NodeId};
use crate::job::{Job, JobSpec};
use crate::job_state::JobState;

/// What every module may know about the current round.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoundInfo {
    /// Round number, from 0.
    pub round: u64,
    /// Time at the start of this round, seconds.
    pub now_s: f64,
    /// Round length, seconds.
    pub round_s: f64,
    /// True when the round runs in real time (a live scheduler, whose
    /// backend's [`RoundClock::real_time`] says so): a policy with an anytime
    /// search may then also stop it at a wall-clock limit, as a safeguard.
    /// False in a simulation, where a decision must be a function of the
    /// inputs alone: searches stop on deterministic budgets (nodes,
    /// iterations), never on time taken.
    pub wall_clock: bool,
}

impl RoundInfo {
    /// A simulated round (`wall_clock` false).
    pub fn new(round: u64, now_s: f64, round_s: f64) -> Self {
        RoundInfo {
            round,
            now_s,
            round_s,
            wall_clock: false,
        }
    }
}

// ---------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------

/// What admission decided for this round. Jobs named in neither list stay in the
/// wait queue (deferred) and are offered again next round, in submission order.
/// Each job may be named once, and only jobs offered this round.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdmissionDecision {
    pub accept: Vec<JobId>,
    pub reject: Vec<(JobId, String)>,
}

impl AdmissionDecision {
    /// Admits every waiting job.
    pub fn accept_all(waiting: &[Job]) -> Self {
        AdmissionDecision {
            accept: waiting.iter().map(Job::id).collect(),
            reject: Vec::new(),
        }
    }
}

/// What a policy hands a fork of the loop (a forecast, policy synthesis) so
/// that the copy decides from here on as the policy itself would.
pub enum Fork<T: ?Sized> {
    /// It keeps no state beyond what the loop shows it each round: a fork
    /// builds a fresh one from the config (the default).
    Stateless,
    /// A copy of it, its state included.
    Copy(Box<T>),
    /// It keeps state it cannot copy (why): a fork starts from a fresh one
    /// and says so.
    Unforkable(String),
}

impl<T: ?Sized> Fork<T> {
    /// The copy, or why there is none: a policy that wraps another forks it
    /// with this (`what` names the wrapped one in the reason).
    pub fn into_copy(self, what: &str) -> Result<Box<T>, String> {
        match self {
            Fork::Copy(b) => Ok(b),
            Fork::Stateless => Err(format!("{what} does not copy itself")),
            Fork::Unforkable(why) => Err(why),
        }
    }
}

/// Admission policy: which submitted jobs enter the scheduler's view.
pub trait AdmissionPolicy: Send {
    /// A copy of this policy with its state, for a fork of the loop
    /// ([`Fork`]). A policy that remembers anything between rounds (queues,
    /// attained service of ended jobs, a model it fits, a random generator)
    /// returns `Fork::Copy(Box::new(self.clone()))`; the default says it
    /// remembers nothing.
    fn fork(&self) -> Fork<dyn AdmissionPolicy> {
        Fork::Stateless
    }

    /// `waiting` is every submitted, not yet admitted job in submission order.
    fn admit(
        &mut self,
        round: &RoundInfo,
        waiting: &[Job],
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> AdmissionDecision;

    /// Why `job`, still waiting after this round's decision, was not
    /// admitted, in the policy's words (e.g. "quota of user ana: 8 of 8 GPUs
    /// in use"); shown as the job's wait reason. `None`: the loop says which
    /// module holds it.
    fn why_waiting(&self, job: &Job, jobs: &JobState, cluster: &ClusterState) -> Option<String> {
        let _ = (job, jobs, cluster);
        None
    }

    /// The job metrics the policy reads, named as
    /// [`SchedulingPolicy::metrics_read`] names them. Default: none.
    fn metrics_read(&self) -> Vec<&'static str> {
        Vec::new()
    }
}

/// One entry of a schedule: a job and what it should get.
///
/// ```
/// # use blox_core::*;
/// let d = Demand::new(JobId(7), 4).with_batch_size(512);
/// assert_eq!((d.gpus, d.batch_size, d.gpu_ids), (4, Some(512), None));
/// let pinned = Demand::new(JobId(7), 0).on_gpus(vec![GpuId(0), GpuId(1)]);
/// assert_eq!(pinned.gpus, 2);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Demand {
    pub job: JobId,
    /// GPUs the job should hold this round.
    pub gpus: u32,
    /// Global batch size to run with; `None` keeps the job's current one.
    pub batch_size: Option<u32>,
    /// Concrete GPUs chosen by a joint policy (Pollux, ONES); placement policies
    /// that honour them (`explicit`) pass them through.
    pub gpu_ids: Option<Vec<GpuId>>,
    /// CPUs and host memory per GPU the job would like (Synergy's demand
    /// vector); `None`: the proportional share. Placements that do not track
    /// host resources give the proportional share whatever this says.
    pub host: Option<HostShare>,
}

/// A scheduling decision: jobs in priority order, highest first. A runnable job
/// missing from it should not hold GPUs this round.
///
/// The loop checks it before placement sees it: every entry names an
/// admitted, runnable (queued or running) job, once; no job is both
/// scheduled and terminated; no demand asks for more GPUs than the cluster
/// can have; named GPU ids match the GPU count. A schedule that breaks a
/// rule is refused, naming the scheduling policy and the job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    pub entries: Vec<Demand>,
    /// Cluster size the policy would like (cloud auto-scaling, Pollux §4.2.2);
    /// the loop passes it to [`ClusterManager::request_nodes`].
    pub desired_nodes: Option<u32>,
    /// Jobs to end now, with the reason (e.g. training converged, Blox §5.3).
    /// They are stopped, recorded as finished at this round, and must not
    /// appear in `entries`.
    pub terminate: Vec<(JobId, String)>,
    /// Productive seconds past its first iteration a job must run before it
    /// may be preempted or moved, if this policy wants more than the loop's
    /// `min_run_s` (it cannot ask for less).
    pub min_run_s: Option<f64>,
    /// Something about this decision an operator should see beside the
    /// round (a solver that ran out of its budget and kept every
    /// allocation, chosen jobs left unplaced): the loop logs it and reports
    /// it in [`crate::round::RoundReport::note`] (`rounds.csv`'s `note`).
    pub note: Option<String>,
}

impl Demand {
    /// `gpus` GPUs for `job` at its current batch size; the placement policy
    /// chooses which GPUs, with the proportional host share.
    pub fn new(job: JobId, gpus: u32) -> Self {
        Demand {
            job,
            gpus,
            batch_size: None,
            gpu_ids: None,
            host: None,
        }
    }

    /// The job at its requested GPU count.
    pub fn requested(job: &Job) -> Self {
        Demand::new(job.id(), job.requested_gpus())
    }

    /// Runs the job at global batch size `batch`.
    pub fn with_batch_size(mut self, batch: u32) -> Self {
        self.batch_size = Some(batch);
        self
    }

    /// Names the GPUs (a joint policy; pair it with the `explicit`
    /// placement). The GPU count becomes their number.
    pub fn on_gpus(mut self, gpus: Vec<GpuId>) -> Self {
        self.gpus = gpus.len() as u32;
        self.gpu_ids = Some(gpus);
        self
    }

    /// Asks for CPUs and host memory per GPU (Synergy-style placements).
    pub fn with_host(mut self, host: HostShare) -> Self {
        self.host = Some(host);
        self
    }
}

impl Schedule {
    /// An empty schedule: nobody runs.
    pub fn new() -> Self {
        Schedule::default()
    }

    /// Appends `d` below every entry so far (lower priority).
    pub fn push(&mut self, d: Demand) {
        self.entries.push(d);
    }

    /// Ends `job` now (it must not also be in `entries`).
    pub fn terminate(&mut self, job: JobId, reason: impl Into<String>) {
        self.terminate.push((job, reason.into()));
    }

    /// Each job at its requested GPU count and batch size, in the given order.
    pub fn in_priority_order<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> Self {
        Schedule {
            desired_nodes: None,
            terminate: Vec::new(),
            min_run_s: None,
            entries: jobs.into_iter().map(Demand::requested).collect(),
            note: None,
        }
    }

    pub fn job_order(&self) -> Vec<JobId> {
        self.entries.iter().map(|d| d.job).collect()
    }
}

/// Scheduling policy: who runs, in which order, with how many GPUs and which batch.
pub trait SchedulingPolicy: Send {
    /// A copy of this policy with its state, for a fork of the loop
    /// ([`Fork`]). A policy that remembers anything between rounds (queues,
    /// attained service of ended jobs, a model it fits, a random generator)
    /// returns `Fork::Copy(Box::new(self.clone()))`; the default says it
    /// remembers nothing.
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Stateless
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule;

    /// Whether the policy schedules `job` within its [`crate::Elasticity`]
    /// (checked for a whole trace before a simulation starts); `Err` says
    /// why not. The default suits policies that run every job at exactly its
    /// requested GPU count on any GPU type: they accept rigid jobs and jobs
    /// with a minimum, and refuse jobs bound to some GPU types or to
    /// multi-GPU replicas that the requested count does not fit. A policy
    /// that resizes jobs or chooses GPU types says what it honours.
    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        if job.elasticity.fits_fixed_count_anywhere(job.requested_gpus) {
            Ok(())
        } else {
            Err(format!(
                "it runs jobs at their requested GPU count on any GPU type, which breaks the constraints of {} ({})",
                job.name,
                describe(&job.elasticity)
            ))
        }
    }

    /// The job metrics the policy reads ([`crate::metric`] names; a name
    /// ending in `.*` is a family). The simulator sets them all; on a real
    /// cluster jobs push them (`docs/RUNTIME.md` lists what each policy
    /// needs), and the scheduler says at start which ones its policy reads.
    /// A policy that reads none leaves the default. The simulator publishes
    /// the per-round progress metrics ([`crate::metric::PER_ROUND`]) only
    /// while some policy of the loop names one of them; a policy that reads
    /// one it does not name stops the run with an error that says so.
    fn metrics_read(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// The placement policy this policy's schedules need, by its registered
    /// name: a joint policy that names concrete GPUs (Pollux, ONES, Gavel,
    /// Sia) needs `explicit`, which honours them; any other placement would
    /// drop its choice of GPUs. Checked when the policies are built.
    fn requires_placement(&self) -> Option<&'static str> {
        None
    }

    /// Told, when the policies are built, which placement policy (by its
    /// registered name) carries out its schedules; refuses one it cannot
    /// work with, saying why. A joint policy that lays its jobs out in more
    /// than one way reads its choice here (Sia: `explicit`, or
    /// `sia-artifact` for its artifact's layout). The default accepts any
    /// placement unless [`Self::requires_placement`] names another.
    fn pair_with_placement(&mut self, placement: &str) -> Result<(), String> {
        match self.requires_placement() {
            Some(need) if need != placement => Err(format!(
                "it would drop the GPUs this policy chooses for each job: it needs `placement.policy = \"{need}\"`"
            )),
            _ => Ok(()),
        }
    }

    /// What the policy orders jobs by, for `job`, in words (e.g. "attained
    /// 3.20 GPU-h" for LAS, in the unit that fits: `wait::gpu_time`); shown with the job's place in the order when it
    /// waits for GPUs. `None`: only the place is shown.
    fn sort_key(&self, job: &Job, jobs: &JobState) -> Option<String> {
        let _ = (job, jobs);
        None
    }

    /// Refuses a cluster the policy's settings cannot fit (e.g. team quotas
    /// that sum to more GPUs than it has), naming the setting. Checked
    /// before a run on a cluster known in advance (a simulation); a live
    /// cluster grows as workers join, so it is not checked there.
    fn fits_cluster(&self, cluster: &ClusterState) -> Result<(), String> {
        let _ = cluster;
        Ok(())
    }
}

/// A job's constraints in words (for errors).
pub fn describe(e: &crate::Elasticity) -> String {
    let mut parts = vec![e.adaptivity.as_str().to_string()];
    if e.min_gpus > 1 {
        parts.push(format!("at least {} GPUs", e.min_gpus));
    }
    if !e.gpu_types.is_empty() {
        parts.push(format!("only on {}", e.gpu_types.join(", ")));
    }
    for (t, u) in &e.replica_gpus {
        if *u > 1 {
            parts.push(format!("replicas of {u} GPUs on {t}"));
        }
    }
    parts.join(", ")
}

/// [`SchedulingPolicy::accepts`] for a policy that may change a job's GPU
/// count (and, if `changes_batch`, its batch size) but runs every job on any
/// GPU type: adaptive jobs only (strong-scaling ones too when the batch stays),
/// with no minimum, GPU type or replica constraint.
pub fn accepts_resizable(job: &JobSpec, policy: &str, changes_batch: bool) -> Result<(), String> {
    let e = &job.elasticity;
    let ok = match e.adaptivity {
        crate::Adaptivity::Adaptive => true,
        crate::Adaptivity::StrongScaling => !changes_batch,
        crate::Adaptivity::Rigid => false,
    } && e.min_gpus <= 1
        && e.gpu_types.is_empty()
        && e.replica_gpus.values().all(|u| *u <= 1);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{policy}` resizes jobs{} on any GPU type, which breaks the constraints of {} ({}); schedule it with `sia`, or with a policy that keeps requested GPU counts",
            if changes_batch { " and their batch sizes" } else { "" },
            job.name,
            describe(e)
        ))
    }
}

/// A job's new allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Assignment {
    pub job: JobId,
    pub gpus: Vec<GpuId>,
    pub batch_size: Option<u32>,
    /// CPUs and host memory per GPU; `None`: each node's proportional share.
    pub host: Option<HostShare>,
    /// Thousandths (1–1000) of its one GPU, for a job that shares the GPU
    /// with others ([`crate::ClusterState::assign_share`]); `None`: its
    /// GPUs whole. A share's host figures are the job's, not per GPU.
    pub share: Option<u32>,
    /// The node for a job that asks for no GPU (`gpus` empty): it takes
    /// CPUs and memory there, its [`JobSpec::host_need`]
    /// (`crate::ClusterState::assign_host`); `None` for jobs with GPUs.
    pub node: Option<NodeId>,
}

impl Assignment {
    /// `job` on `gpus` at its own batch size and the proportional host share.
    pub fn new(job: JobId, gpus: Vec<GpuId>) -> Self {
        Assignment {
            job,
            gpus,
            batch_size: None,
            host: None,
            share: None,
            node: None,
        }
    }

    /// `job`, which asks for no GPU, on `node`'s CPUs and memory.
    pub fn on_node(job: JobId, node: NodeId) -> Self {
        Assignment {
            node: Some(node),
            ..Assignment::new(job, Vec::new())
        }
    }
}

/// A placement decision, checked by the loop before anything runs:
///
/// - a running job in neither list **keeps its GPUs** (whatever the schedule
///   said about it — a placement that wants it stopped must preempt it);
/// - a job in `preempt` must be running; it checkpoints and releases its GPUs;
/// - a job in `launch` must be admitted and runnable, at most once, on GPUs
///   that exist, are online and that no job holds after the decision (GPUs
///   of jobs preempted or moved in the same decision are free);
/// - a running job listed in `launch` with other GPUs or another host share
///   is restarted there (a re-allocation); with the same GPUs and host share
///   and another batch size it is reconfigured in place;
/// - CPU and host memory shares must fit each node;
/// - a job that asks for no GPU is launched on no GPU, on one online node
///   ([`Assignment::node`]); a job with GPUs names no node.
///
/// A decision that breaks a rule is refused as a whole, naming the policy.
/// [`crate::walk::priority_walk`] builds placements that keep these rules.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    /// Running jobs to suspend (checkpoint and release their GPUs).
    pub preempt: Vec<JobId>,
    /// Jobs to start, restart or reconfigure.
    pub launch: Vec<Assignment>,
}

/// Placement policy: which GPUs each scheduled job gets and whom to preempt.
pub trait PlacementPolicy: Send {
    /// A copy of this policy with its state, for a fork of the loop
    /// ([`Fork`]). A policy that remembers anything between rounds (queues,
    /// attained service of ended jobs, a model it fits, a random generator)
    /// returns `Fork::Copy(Box::new(self.clone()))`; the default says it
    /// remembers nothing.
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Stateless
    }

    fn place(
        &mut self,
        round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement;

    /// Whether it orders GPUs by their per-class slowdown factors
    /// ([`crate::variability`]), so that a cluster without them cannot run
    /// it (`pm-first`, `pal`). Checked when a simulation is built.
    fn requires_variability(&self) -> bool {
        false
    }

    /// The job metrics the policy reads, named as
    /// [`SchedulingPolicy::metrics_read`] names them. Default: none.
    fn metrics_read(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Why this policy could never place `job` on `cluster` as it is (even
    /// empty), if so: e.g. a job that must stay within one rack asking more
    /// GPUs than any rack has. The loop holds such a job before admission
    /// with these words instead of admitting it to wait for ever; it is
    /// offered again when the cluster changes; a driver that knows it can
    /// no longer change rejects it with these words
    /// ([`crate::RoundLoop::reject_held_next_round`]). Default: every job that fits
    /// the cluster's GPU count can be placed.
    fn never_places(&self, job: &Job, cluster: &ClusterState) -> Option<String> {
        let _ = (job, cluster);
        None
    }

    /// The scheduling policy (by its registered name) this placement only
    /// works with, if any (`sia-artifact` carries out Sia's layout and
    /// nothing else's). Checked when the policies are built.
    fn requires_scheduling(&self) -> Option<&'static str> {
        None
    }

    /// Refuses a cluster the policy's settings do not fit (e.g. a level
    /// name its topology does not have), naming the setting. Checked before
    /// a run: a simulation's cluster, and a live scheduler's before workers
    /// join (its topology levels, no nodes yet). Default: fits.
    fn fits_cluster(&self, cluster: &ClusterState) -> Result<(), String> {
        let _ = cluster;
        Ok(())
    }

    /// Whether it places every job only on GPUs of its types
    /// ([`crate::Elasticity::gpu_types`]): a scheduling policy that runs
    /// jobs at their requested count on any type may then schedule jobs
    /// bound to types (checked before a simulation). Default: no.
    fn honours_gpu_types(&self) -> bool {
        false
    }

    /// Whether it places jobs that ask for no GPU (`requested_gpus` 0,
    /// their CPUs and memory in [`JobSpec::host_need`]) on a node with
    /// [`Assignment::on_node`]. The loop rejects such a job at submission
    /// under a placement that does not; a schedule lists such a job with a
    /// demand of 0 GPUs. Default: no.
    fn places_jobs_without_gpus(&self) -> bool {
        false
    }

    /// Figures the policy measures of the cluster after each round, by
    /// name (FGD's fragmentation); they become columns of `rounds.csv`
    /// and lines of the summary. A policy returns the same names every
    /// round, or none. Default: none (no columns).
    fn round_figures(&mut self, cluster: &ClusterState) -> Vec<(&'static str, f64)> {
        let _ = cluster;
        Vec::new()
    }
}

// ---------------------------------------------------------------------------
// Mechanisms (what a backend implements)
// ---------------------------------------------------------------------------

/// An error raised by a backend mechanism (an RPC failed, a process could not
/// start, …). The loop reports it with the step that failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BackendError(pub String);

/// A change a backend reports about the cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterEvent {
    NodeAdded(crate::cluster::NodeSpec),
    NodeRemoved(crate::ids::NodeId),
    /// A node failed: it goes offline, and its jobs stop as with
    /// `NodeRemoved`, counted as interruptions (`Job::interruptions`).
    NodeFailed(crate::ids::NodeId),
    /// A failed (or removed) node is back, its GPUs free.
    NodeRepaired(crate::ids::NodeId),
    /// A job found already running on `gpus` (free GPUs of nodes already
    /// added), e.g. by a restarted scheduler whose workers kept their jobs:
    /// it joins the loop as admitted and running, without a launch. It must
    /// not be known to the loop yet.
    JobAdopted {
        spec: crate::job::JobSpec,
        gpus: Vec<crate::ids::GpuId>,
        batch_size: Option<u32>,
        /// It is past its start-up (its first iteration was reported).
        past_startup: bool,
        /// Thousandths of its one GPU, where it shares that GPU.
        share: Option<u32>,
    },
}

/// Cluster management: nodes joining, failing or leaving (step 1).
pub trait ClusterManager {
    /// Cluster changes since the last round; the loop applies them to
    /// `ClusterState` and requeues jobs that lost GPUs.
    fn cluster_events(&mut self, round: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError>;

    /// Asks for the cluster to grow or shrink to `nodes` online nodes (cloud
    /// auto-scaling). Changes arrive later as [`ClusterEvent`]s. A backend that
    /// cannot resize says so.
    fn request_nodes(&mut self, round: &RoundInfo, nodes: u32) -> Result<(), BackendError> {
        let _ = round;
        Err(BackendError(format!(
            "this backend cannot resize the cluster (asked for {nodes} nodes)"
        )))
    }
}

/// Metric collection (step 2): fold what jobs reported since the last round into
/// `JobState` (progress, attained service, completion, per-job metrics).
pub trait MetricCollector {
    fn collect_metrics(
        &mut self,
        round: &RoundInfo,
        jobs: &mut JobState,
    ) -> Result<(), BackendError>;
}

/// Job submission intake (step 4): jobs submitted since the last round.
pub trait JobSource {
    fn poll_submissions(&mut self, round: &RoundInfo) -> Result<Vec<JobSpec>, BackendError>;
    /// True when no submission can ever arrive again (end of a trace).
    fn exhausted(&self) -> bool;
}

/// Preemption mechanism (step 8): suspend a running job, keeping its progress.
pub trait PreemptionMechanism {
    fn preempt(&mut self, round: &RoundInfo, job: &Job) -> Result<(), BackendError>;

    /// Preempts a round's whole set at once. The default preempts them one
    /// by one; a backend whose preemptions wait (a real cluster waits up to
    /// its grace period for each job to checkpoint) overrides it to wait for
    /// all of them together.
    fn preempt_all(&mut self, round: &RoundInfo, jobs: &[&Job]) -> Result<(), BackendError> {
        for job in jobs {
            self.preempt(round, job)?;
        }
        Ok(())
    }
}

/// Launch mechanism (step 8): start a job on GPUs, or change its batch size in
/// place (elastic, no restart).
pub trait LaunchMechanism {
    /// Starts `job` on `gpus`. `batch_size` is the global batch a policy chose
    /// for it; `None` leaves the job at its own (the submitted one, or whatever
    /// the job's own tuner picks).
    fn launch(
        &mut self,
        round: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        batch_size: Option<u32>,
    ) -> Result<(), BackendError>;
    fn reconfigure(
        &mut self,
        round: &RoundInfo,
        job: &Job,
        batch_size: u32,
    ) -> Result<(), BackendError>;
}

/// The wait (step 9): simulation advances a virtual clock, a real backend sleeps.
pub trait RoundClock {
    fn now_s(&self) -> f64;
    /// True when `now_s` is wall-clock time (a real cluster, local
    /// processes): policies may then bound their searches by wall-clock
    /// time ([`RoundInfo::wall_clock`]). A simulator keeps the default.
    fn real_time(&self) -> bool {
        false
    }
    /// Returns once the next round may start. `idle` says that no job is admitted
    /// or waiting, so a backend may skip ahead to its next event.
    fn wait_round(&mut self, round_s: f64, idle: bool) -> Result<(), BackendError>;
}

/// Everything the loop needs from where jobs really run.
pub trait Backend:
    ClusterManager + MetricCollector + JobSource + PreemptionMechanism + LaunchMechanism + RoundClock
{
}

impl<T> Backend for T where
    T: ClusterManager
        + MetricCollector
        + JobSource
        + PreemptionMechanism
        + LaunchMechanism
        + RoundClock
{
}
