//! One training job as every policy sees it.

use crate::ids::{GpuId, JobId};
use serde::{Deserialize, Serialize};

/// Where a job is in its life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Submitted, not yet admitted (lives in the loop's wait queue).
    Submitted,
    /// Admitted, holds no GPU (never started, or preempted).
    Queued,
    /// Holds GPUs and makes progress.
    Running,
    /// Reached its target work.
    Finished,
    /// Ended without reaching its target (crash, or terminated by a policy).
    Failed,
    /// Never admitted: impossible request or rejected by admission.
    Rejected,
    /// Ended by its user (a `Cancel` on a cluster), whatever it was doing.
    Cancelled,
}

impl JobStatus {
    /// True once the job will never run again.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Rejected | JobStatus::Cancelled
        )
    }

    /// Lower-case name used in tables (`jobs.csv`'s `status` column).
    pub fn as_str(&self) -> &'static str {
        match self {
            JobStatus::Submitted => "submitted",
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Finished => "finished",
            JobStatus::Failed => "failed",
            JobStatus::Rejected => "rejected",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is none of [`JobStatus`]'s.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown job status `{0}`; expected submitted, queued, running, finished, failed, rejected or cancelled"
)]
pub struct UnknownStatus(pub String);

impl std::str::FromStr for JobStatus {
    type Err = UnknownStatus;

    /// The lower-case name of [`JobStatus::as_str`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "submitted" => JobStatus::Submitted,
            "queued" => JobStatus::Queued,
            "running" => JobStatus::Running,
            "finished" => JobStatus::Finished,
            "failed" => JobStatus::Failed,
            "rejected" => JobStatus::Rejected,
            "cancelled" => JobStatus::Cancelled,
            other => return Err(UnknownStatus(other.to_string())),
        })
    }
}

/// What a submitter says about a job (the immutable part).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub id: JobId,
    /// Human name (the trace's `name` column, or the id).
    pub name: String,
    /// Submission time, seconds since the start of the run.
    pub arrival_s: f64,
    /// GPUs the submitter asked for (the count rigid policies give it).
    pub requested_gpus: u32,
    /// Global batch size the submitter asked for, if known.
    pub batch_size: Option<u32>,
    pub user: Option<String>,
    /// The team (or virtual cluster) whose quota it runs under, where the
    /// trace or the submitter says (Philly's and Helios's VCs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    pub model: Option<String>,
    /// Run time at `requested_gpus` GPUs, when the submitter (or an oracle trace)
    /// knows it. Policies that need it (SRTF) say so; others must not peek.
    pub expected_duration_s: Option<f64>,
    /// Metrics known when the job is submitted (e.g. a profile measured
    /// before submission: Synergy's `best_cpus_per_gpu`); the loop puts them in
    /// the metric store on submission, so the first scheduling decision sees them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// The program a real backend runs for the job (argv, never through a
    /// shell); empty for simulated jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// What a scheduler may change about the job (default: anything).
    #[serde(default, skip_serializing_if = "Elasticity::is_default")]
    pub elasticity: Elasticity,
    /// Thousandths (1–999) of one GPU the job asks for, sharing that GPU
    /// with other jobs (`requested_gpus` is then 1); `None`: whole GPUs.
    /// Placements that share GPUs ([`crate::Assignment::share`]) honour
    /// it; the others give such a job a whole GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u32>,
    /// CPU cores and host memory per GPU the job needs, where the trace
    /// says (a sharing job: for its share; a job asking for no GPU,
    /// `requested_gpus` 0: in all, on one node). Placements that track
    /// host resources honour it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_need: Option<crate::cluster::HostShare>,
}

/// How far a scheduler may adapt a job (Sia, SOSP'23, §3.3 "support for
/// limited adaptivity"; hybrid-parallel jobs, §5.3). The round loop refuses a
/// decision that breaks it, naming the policy; policies that cannot honour a
/// job's constraints refuse it before a simulation starts
/// ([`crate::SchedulingPolicy::accepts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elasticity {
    pub adaptivity: Adaptivity,
    /// Fewest GPUs the job can run on (0: no minimum beyond one replica).
    #[serde(default)]
    pub min_gpus: u32,
    /// GPU types it can run on (empty: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_types: Vec<String>,
    /// GPUs one data-parallel replica spans, by GPU type (a pipeline's
    /// stages); its GPU count there must be a multiple. Types not listed: 1.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub replica_gpus: std::collections::BTreeMap<String, u32>,
}

/// What may change: GPU count and batch size, GPU count alone, or neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Adaptivity {
    /// GPU count, GPU type and batch size may all change.
    #[default]
    Adaptive,
    /// GPU count and type may change; the global batch stays the submitted one.
    StrongScaling,
    /// Exactly the requested GPUs at the submitted batch; only the GPU type
    /// may change.
    Rigid,
}

impl Adaptivity {
    pub fn as_str(&self) -> &'static str {
        match self {
            Adaptivity::Adaptive => "adaptive",
            Adaptivity::StrongScaling => "strong-scaling",
            Adaptivity::Rigid => "rigid",
        }
    }
}

impl std::str::FromStr for Adaptivity {
    type Err = String;

    /// `adaptive`, `strong-scaling` (or the Sia artifact's `scale-gpus`), `rigid`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "adaptive" | "" => Ok(Adaptivity::Adaptive),
            "strong-scaling" | "scale-gpus" => Ok(Adaptivity::StrongScaling),
            "rigid" => Ok(Adaptivity::Rigid),
            other => Err(format!(
                "unknown job category `{other}`; expected adaptive, strong-scaling (or scale-gpus) or rigid"
            )),
        }
    }
}

impl Elasticity {
    pub fn is_default(&self) -> bool {
        *self == Elasticity::default()
    }

    /// GPUs one replica spans on `gpu_type`.
    pub fn replica_gpus_on(&self, gpu_type: &str) -> u32 {
        self.replica_gpus.get(gpu_type).copied().unwrap_or(1).max(1)
    }

    /// Whether the job may run on `gpu_type`.
    pub fn allows_type(&self, gpu_type: &str) -> bool {
        self.gpu_types.is_empty() || self.gpu_types.iter().any(|t| t == gpu_type)
    }

    /// Why `gpus` GPUs of `gpu_type` break the constraints of a job that asked
    /// for `requested`, if they do.
    pub fn violation(&self, requested: u32, gpus: u32, gpu_type: &str) -> Option<String> {
        if !self.allows_type(gpu_type) {
            return Some(format!(
                "it runs only on {}, not on `{gpu_type}`",
                self.gpu_types.join(", ")
            ));
        }
        if self.adaptivity == Adaptivity::Rigid && gpus != requested {
            return Some(format!("it is rigid at {requested} GPUs, not {gpus}"));
        }
        if gpus < self.min_gpus {
            return Some(format!(
                "it needs at least {} GPUs, not {gpus}",
                self.min_gpus
            ));
        }
        let unit = self.replica_gpus_on(gpu_type);
        if !gpus.is_multiple_of(unit) {
            return Some(format!(
                "one replica spans {unit} GPUs of `{gpu_type}`, so {gpus} is not a whole number of replicas"
            ));
        }
        None
    }

    /// True when running the job at exactly its requested GPU count on any
    /// GPU type honours every constraint (what a policy that never resizes
    /// jobs and ignores GPU types can promise).
    pub fn fits_fixed_count_anywhere(&self, requested: u32) -> bool {
        self.gpu_types.is_empty()
            && requested >= self.min_gpus
            && self
                .replica_gpus
                .values()
                .all(|u| requested.is_multiple_of((*u).max(1)))
    }
}

/// The last checkpoint at or before `now_s` of a launch that reached its
/// first iteration at `first_s` and saves every `every_s` seconds after it
/// (`first_s` itself before the first interval ends). The simulator rolls
/// progress back to it; the loop counts lost work from it.
pub fn checkpoint_at(first_s: f64, every_s: f64, now_s: f64) -> f64 {
    if now_s <= first_s || every_s <= 0.0 {
        return first_s;
    }
    first_s + ((now_s - first_s) / every_s).floor() * every_s
}

impl JobSpec {
    /// A minimal spec: id, arrival and GPU count.
    pub fn new(id: u64, arrival_s: f64, requested_gpus: u32) -> Self {
        JobSpec {
            id: JobId(id),
            name: id.to_string(),
            arrival_s,
            requested_gpus,
            batch_size: None,
            user: None,
            team: None,
            model: None,
            expected_duration_s: None,
            metrics: Default::default(),
            command: Vec::new(),
            elasticity: Elasticity::default(),
            gpu_milli: None,
            host_need: None,
        }
    }

    /// Why its share of a GPU or its host need cannot be honoured, if so:
    /// a share is 1-999 thousandths of one GPU (`requested_gpus` 1); host
    /// CPUs and memory are finite and non-negative.
    pub fn share_problem(&self) -> Option<String> {
        if let Some(m) = self.gpu_milli {
            if !(1..crate::cluster::GPU_MILLI).contains(&m) || self.requested_gpus != 1 {
                return Some(format!(
                    "gpu_milli = {m} with {} GPUs; a share is 1-999 thousandths of one GPU",
                    self.requested_gpus
                ));
            }
        }
        if let Some(h) = self.host_need {
            let ok = |x: f64| x.is_finite() && x >= 0.0;
            if !(ok(h.cpus_per_gpu) && ok(h.mem_gb_per_gpu)) {
                return Some(format!(
                    "host_need {h:?}: CPUs and memory must be finite and non-negative"
                ));
            }
        }
        None
    }

    /// CPUs and host memory (GiB) of a job that asks for no GPU, in all:
    /// its `host_need` read as a total (0, 0 without one).
    pub fn host_in_all(&self) -> (f64, f64) {
        self.host_need
            .map_or((0.0, 0.0), |h| (h.cpus_per_gpu, h.mem_gb_per_gpu))
    }

    /// Builder: the known run time at the requested GPU count.
    pub fn with_duration(mut self, duration_s: f64) -> Self {
        self.expected_duration_s = Some(duration_s);
        self
    }
}

/// A job with everything the loop and the backends record about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub spec: JobSpec,
    pub status: JobStatus,
    /// GPU-seconds of productive service received so far (Σ GPUs × time
    /// past each launch's first iteration); start-up is in `startup_gpu_s`.
    pub attained_service_gpu_s: f64,
    /// Wall seconds spent holding GPUs.
    pub run_time_s: f64,
    /// Fraction of the job's work done, `0.0..=1.0` (reported by the backend).
    pub progress: f64,
    /// Time the job first got GPUs.
    pub first_start_s: Option<f64>,
    /// Time the job reached a terminal status.
    pub finish_s: Option<f64>,
    /// GPUs held now (empty unless `Running`).
    pub allocation: Vec<GpuId>,
    /// Global batch size in use now (a policy may change it, e.g. ONES, Pollux).
    pub current_batch_size: Option<u32>,
    /// CPUs and host memory per GPU held now; `None`: the proportional share
    /// (Synergy-style policies set it).
    #[serde(default)]
    pub host_share: Option<crate::cluster::HostShare>,
    /// Thousandths of its one GPU held now, while it shares that GPU
    /// ([`crate::Assignment::share`]); `None` otherwise. A copy of the
    /// cluster's record, as `allocation` is: backends read it at launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<u32>,
    /// The node whose CPUs and memory it holds now, while it runs without
    /// GPUs (a job asking for none, [`crate::Assignment::node`]); `None`
    /// otherwise. A copy of the cluster's record, as `allocation` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_node: Option<crate::ids::NodeId>,
    /// Largest GPU count the job has held so far (Pollux caps growth at 2×).
    pub max_gpus_so_far: u32,
    /// Times it was suspended to make room for another job.
    pub preemptions: u32,
    /// Times it was restarted on a different allocation (re-allocation).
    pub restarts: u32,
    /// Times it was started: the first start, every restart after a
    /// preemption and every re-allocation (so restarts in Pollux's sense are
    /// `launches − 1`).
    #[serde(default)]
    pub launches: u32,
    /// Time of the last launch / re-allocation.
    pub last_launch_s: Option<f64>,
    /// Why the job ended, for `Failed` and `Rejected`.
    pub end_reason: Option<String>,
    /// When the current launch passed its first iteration boundary (its
    /// start-up — imports, initialisation, checkpoint restore — done);
    /// `None` while it starts, and while it is not running. Backends set it:
    /// the simulator from its start-up model, a real backend from the
    /// `startup_s` the job reports.
    #[serde(default)]
    pub first_iteration_s: Option<f64>,
    /// Start-up of the last launch that got past it, seconds.
    #[serde(default)]
    pub last_startup_s: Option<f64>,
    /// Wall seconds spent starting, over all launches.
    #[serde(default)]
    pub startup_s: f64,
    /// GPU-seconds held while starting (beside `attained_service_gpu_s`,
    /// which counts only productive time).
    #[serde(default)]
    pub startup_gpu_s: f64,
    /// Launches in a row that ended (preempted, moved, lost with a node,
    /// crashed) before their first iteration.
    #[serde(default)]
    pub launches_without_progress: u32,
    /// Times in a row the policies preempted or moved it before its first
    /// iteration, and whether the loop now keeps it on its GPUs until it
    /// starts (a livelock on a live cluster: [`crate::StartupRules`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preempted_while_starting: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held_while_starting: bool,
    /// Something an operator should know (e.g. the job keeps being stopped
    /// before it starts), shown by `blox status`.
    #[serde(default)]
    pub warning: Option<String>,
    /// Why it is not running, at the end of the last round (`None` while it
    /// runs, and once it ended).
    #[serde(default)]
    pub wait: Option<crate::wait::WaitReason>,
    /// Seconds it spent under each kind of wait reason, in the order of
    /// [`crate::wait::WaitReason::KINDS`], counted round by round.
    #[serde(default)]
    pub wait_s: [f64; 5],
    /// When its current wait reason was last counted.
    #[serde(default)]
    pub wait_counted_s: Option<f64>,
    /// When the current launch last saved a checkpoint, as its backend
    /// learnt it (a real job reports them); `None` if no backend said.
    #[serde(default)]
    pub checkpoint_s: Option<f64>,
    /// Productive GPU-seconds lost because it was stopped (preempted, moved,
    /// lost with its node) after its last checkpoint, over all launches.
    #[serde(default)]
    pub lost_work_gpu_s: f64,
    /// Its checkpoint interval is chosen at each launch by Young/Daly
    /// (`[run] checkpoint = "young-daly"`; it named none of its own).
    #[serde(default)]
    pub auto_checkpoint: bool,
    /// Times a node failure stopped it ([`crate::ClusterEvent::NodeFailed`]).
    #[serde(default)]
    pub interruptions: u32,
    /// The part of `lost_work_gpu_s` lost to node failures (the rest was
    /// lost to preemptions and moves).
    #[serde(default)]
    pub failure_lost_gpu_s: f64,
}

impl Job {
    pub fn new(spec: JobSpec) -> Self {
        let batch = spec.batch_size;
        Job {
            spec,
            status: JobStatus::Submitted,
            attained_service_gpu_s: 0.0,
            run_time_s: 0.0,
            progress: 0.0,
            first_start_s: None,
            finish_s: None,
            allocation: Vec::new(),
            current_batch_size: batch,
            host_share: None,
            gpu_share: None,
            host_node: None,
            max_gpus_so_far: 0,
            preemptions: 0,
            restarts: 0,
            launches: 0,
            last_launch_s: None,
            end_reason: None,
            first_iteration_s: None,
            last_startup_s: None,
            startup_s: 0.0,
            startup_gpu_s: 0.0,
            launches_without_progress: 0,
            preempted_while_starting: 0,
            held_while_starting: false,
            warning: None,
            wait: None,
            wait_s: [0.0; 5],
            wait_counted_s: None,
            checkpoint_s: None,
            lost_work_gpu_s: 0.0,
            auto_checkpoint: false,
            interruptions: 0,
            failure_lost_gpu_s: 0.0,
        }
    }

    /// GPU-seconds held, start-up included (what simulators that do not
    /// model start-up call attained service, e.g. the Pollux artifact's).
    pub fn held_service_gpu_s(&self) -> f64 {
        self.attained_service_gpu_s + self.startup_gpu_s
    }

    /// True while the job holds GPUs but has not reached its first iteration.
    pub fn is_starting(&self) -> bool {
        self.is_running() && self.first_iteration_s.is_none()
    }

    /// Seconds the current launch has run past its first iteration.
    pub fn productive_run_s(&self, now_s: f64) -> Option<f64> {
        self.first_iteration_s
            .filter(|_| self.is_running())
            .map(|f| (now_s - f).max(0.0))
    }

    /// Records that the current launch passed its first iteration at `at_s`
    /// after starting for `startup_s` (backends call this once per launch).
    pub fn reached_first_iteration(&mut self, at_s: f64, startup_s: f64) {
        if self.first_iteration_s.is_none() {
            self.first_iteration_s = Some(at_s);
            self.last_startup_s = Some(startup_s.max(0.0));
            self.launches_without_progress = 0;
            self.preempted_while_starting = 0;
            self.held_while_starting = false;
            self.warning = None;
        }
    }

    pub fn id(&self) -> JobId {
        self.spec.id
    }

    /// Seconds between its checkpoints: its own `checkpoint_interval_s`
    /// metric (the loop fills in `[run] checkpoint_interval_s` for jobs
    /// without one). `None`: it saves when stopped.
    pub fn checkpoint_interval_s(&self) -> Option<f64> {
        self.spec
            .metrics
            .get(crate::metric::CHECKPOINT_INTERVAL_S)
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
    }

    /// When the running launch's state was last saved, at `now_s`, for a
    /// job that saves every so often (a checkpoint interval): the last
    /// checkpoint it reported (a real job, through `blox_client`), else its
    /// first iteration plus whole intervals (it starts from a checkpoint).
    /// `None` while it starts, when it is not running, and for a job that
    /// saves when it is stopped (no interval).
    pub fn last_checkpoint_s(&self, now_s: f64) -> Option<f64> {
        let first = self.first_iteration_s.filter(|_| self.is_running())?;
        let every = self.checkpoint_interval_s()?;
        Some(match self.checkpoint_s {
            Some(c) => c.clamp(first, now_s.max(first)),
            None => checkpoint_at(first, every, now_s),
        })
    }

    /// Productive seconds a stop at `now_s` would lose (since its last
    /// checkpoint; 0 for a job that saves when stopped, or still starting).
    pub fn uncheckpointed_s(&self, now_s: f64) -> f64 {
        self.last_checkpoint_s(now_s)
            .map_or(0.0, |c| (now_s - c).max(0.0))
    }

    /// Productive seconds a failure under it at `now_s` loses: since its
    /// last checkpoint (one it reported, on a cluster, even without an
    /// interval), or, for a job that saves only when stopped (which a
    /// failure does not let it), since its launch's first iteration.
    pub fn unsaved_at_failure_s(&self, now_s: f64) -> f64 {
        if self.checkpoint_interval_s().is_some() {
            return self.uncheckpointed_s(now_s);
        }
        let Some(first) = self.first_iteration_s.filter(|_| self.is_running()) else {
            return 0.0;
        };
        let from = self
            .checkpoint_s
            .map_or(first, |c| c.clamp(first, now_s.max(first)));
        (now_s - from).max(0.0)
    }

    /// What stopping it at `now_s` costs, in GPU-seconds: the work since its
    /// last checkpoint plus starting again (its own last start-up, else
    /// `startup_guess_s`), on the GPUs it holds. Policies choosing victims
    /// prefer the cheapest (kueue#8551).
    pub fn preemption_cost_gpu_s(&self, now_s: f64, startup_guess_s: f64) -> f64 {
        let restart = self.last_startup_s.unwrap_or(startup_guess_s);
        self.allocation.len() as f64 * (self.uncheckpointed_s(now_s) + restart)
    }

    /// Effective training time ratio, once it finished (Kokolis et al.,
    /// HPCA'25, arXiv 2410.21680, §IV): productive time (past start-up, less
    /// work lost to stops and the time spent saving checkpoints, δ of each
    /// interval; with Young/Daly, of its last launch's interval) over its
    /// time since submission.
    /// `None` for a job without GPUs: it trains on none.
    pub fn ettr(&self) -> Option<f64> {
        if self.without_gpus() {
            return None;
        }
        let wall = self.finish_s? - self.arrival_s();
        let gpus = f64::from(self.requested_gpus().max(1));
        let useful =
            (self.attained_service_gpu_s - self.lost_work_gpu_s) * self.unsaving_share() / gpus;
        (wall > 0.0).then(|| (useful / wall).max(0.0))
    }

    /// The share of its running time not spent saving checkpoints: 1 − δ/τ
    /// for a job whose checkpoints (every τ) each take δ
    /// (`checkpoint_save_s`), else 1.
    pub fn unsaving_share(&self) -> f64 {
        match (
            self.checkpoint_interval_s(),
            self.spec.metrics.get(crate::metric::CHECKPOINT_SAVE_S),
        ) {
            (Some(every), Some(save)) if save.is_finite() && *save > 0.0 => {
                (1.0 - save / every).max(0.0)
            }
            _ => 1.0,
        }
    }

    pub fn arrival_s(&self) -> f64 {
        self.spec.arrival_s
    }

    pub fn requested_gpus(&self) -> u32 {
        self.spec.requested_gpus
    }

    /// Whether it asks for no GPU: it runs on a node's CPUs and memory
    /// alone ([`JobSpec::host_need`] in all).
    pub fn without_gpus(&self) -> bool {
        self.spec.requested_gpus == 0
    }

    pub fn is_running(&self) -> bool {
        self.status == JobStatus::Running
    }

    /// Seconds since submission without GPUs (queueing so far), at `now_s`.
    pub fn waiting_s(&self, now_s: f64) -> f64 {
        (now_s - self.spec.arrival_s - self.run_time_s).max(0.0)
    }

    /// Seconds since submission, at `now_s`.
    pub fn age_s(&self, now_s: f64) -> f64 {
        (now_s - self.spec.arrival_s).max(0.0)
    }

    /// Seconds since the job last (re)started, if it has run.
    pub fn since_launch_s(&self, now_s: f64) -> Option<f64> {
        self.last_launch_s.map(|t| (now_s - t).max(0.0))
    }

    /// Remaining run time at the requested GPU count, if the duration is known.
    pub fn expected_remaining_s(&self) -> Option<f64> {
        self.spec
            .expected_duration_s
            .map(|d| d * (1.0 - self.progress).max(0.0))
    }

    /// Job completion time, for a finished job.
    pub fn jct_s(&self) -> Option<f64> {
        match (self.status == JobStatus::Finished, self.finish_s) {
            (true, Some(f)) => Some(f - self.spec.arrival_s),
            _ => None,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
