//! Forecasts: when each job will start and finish, by running the loop's
//! present state forward under the scheduler's own policies (`blox status
//! --start`, as Slurm's `squeue --start`). A [`Snapshot`] is what the loop
//! knows at the end of a round; a [`Forecaster`] (the simulator's, in
//! `blox_sim::forecast`) turns it into a [`Forecast`]. The runtime takes
//! snapshots on the round thread and forecasts on a thread of its own, so a
//! slow or failing forecast never holds a round back.

use blox_core::{ClusterState, Job, JobId, JobState, PolicyForks, Profile, RoundLoop};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// What the loop knows at the end of a round: the unfinished admitted jobs
/// with their metrics, the jobs waiting for admission and the cluster. No
/// future arrivals, and no finished jobs.
#[derive(Clone)]
pub struct Snapshot {
    /// The round just run.
    pub round: u64,
    /// The loop's clock at the end of that round (the next round's start).
    pub now_s: f64,
    /// When the jobs' progress was measured: the start of that round
    /// (running jobs have made progress since, at their rate).
    pub measured_at_s: f64,
    pub round_s: f64,
    /// Admitted, unfinished jobs (running or queued) and their metrics.
    pub jobs: JobState,
    /// Submitted, not yet admitted.
    pub waiting: Vec<Job>,
    pub cluster: ClusterState,
    /// The loop's profile: start-up rules and plugins (the forecast
    /// follows them too).
    pub profile: Profile,
    /// What launching costs on this cluster, as its backend measured it
    /// (none in a simulation, or before the first launch).
    pub launch_costs: LaunchCosts,
    /// The loop's policies with their state ([`blox_core::Fork`]), for the
    /// forecast to continue from (`None`: it builds them afresh).
    pub policies: Option<Arc<Mutex<PolicyForks>>>,
}

/// Seconds from the start of a round to a launch's spawn, as a live backend
/// measured them lately: the launch call and, for a relaunch onto GPUs
/// whose jobs were just preempted, the wait for those jobs to checkpoint
/// and exit. Known as soon as a launch is spawned, before it reports its
/// first iteration; a forecast charges at least this to every launch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaunchCosts {
    /// The median over recent first launches of a job.
    pub launch_wait_s: Option<f64>,
    /// The median over recent relaunches.
    pub relaunch_wait_s: Option<f64>,
}

impl Snapshot {
    /// What `lp` knows now, at `now_s`.
    pub fn of(lp: &RoundLoop, now_s: f64) -> Snapshot {
        let mut jobs = JobState::new();
        for j in lp.jobs.active() {
            for (k, v) in lp.jobs.metrics().of_job(j.id()) {
                jobs.metrics().set(j.id(), &k, v);
            }
            jobs.insert(j.clone());
        }
        Snapshot {
            round: lp.rounds(),
            now_s,
            measured_at_s: lp.last_round_start_s().unwrap_or(now_s).min(now_s),
            round_s: lp.round_s(),
            jobs,
            waiting: lp.waiting().to_vec(),
            cluster: lp.cluster.clone(),
            profile: lp.profile().clone(),
            launch_costs: LaunchCosts::default(),
            policies: Some(Arc::new(Mutex::new(lp.policies.fork()))),
        }
    }

    /// Jobs the forecast is about: admitted ones, then those waiting for
    /// admission.
    pub fn len(&self) -> usize {
        self.jobs.num_active() + self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where a forecast took a job's run time from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DurationFrom {
    /// The submitter's `duration_s` (`JobSpec::expected_duration_s`).
    Submitted,
    /// Its measured rate: productive GPU-seconds so far per unit of progress.
    ProgressRate,
    /// Neither: it runs on in the forecast, so its finish is unknown (and
    /// so may be the start of jobs behind it).
    Unknown,
}

impl DurationFrom {
    pub fn as_str(&self) -> &'static str {
        match self {
            DurationFrom::Submitted => "duration_s",
            DurationFrom::ProgressRate => "progress-rate",
            DurationFrom::Unknown => "unknown",
        }
    }

    /// A job's run time at its requested GPUs, and where it came from:
    /// `duration_s` if given, else its productive GPU-seconds per unit of
    /// progress (once it reported at least `min_progress`), else unknown.
    pub fn of(job: &Job, min_progress: f64) -> (Option<f64>, DurationFrom) {
        Self::from_parts(
            job.spec.expected_duration_s,
            job.attained_service_gpu_s,
            job.lost_work_gpu_s,
            job.progress,
            job.requested_gpus(),
            min_progress,
        )
    }

    /// [`DurationFrom::of`] from a job's numbers (a scheduler's `JobInfo`
    /// has them too): the given `duration_s`, else productive GPU-seconds
    /// (attained less the work lost to checkpoint rollbacks, which the
    /// progress the job reports no longer counts) per unit of progress.
    pub fn from_parts(
        duration_s: Option<f64>,
        attained_gpu_s: f64,
        lost_gpu_s: f64,
        progress: f64,
        gpus: u32,
        min_progress: f64,
    ) -> (Option<f64>, DurationFrom) {
        if let Some(d) = duration_s.filter(|d| d.is_finite()) {
            return (Some(d.max(0.0)), DurationFrom::Submitted);
        }
        let gpus = f64::from(gpus.max(1));
        let productive = (attained_gpu_s - lost_gpu_s.max(0.0)).max(0.0);
        if progress >= min_progress.max(1e-9) && productive > 0.0 {
            let d = productive / progress.min(1.0) / gpus;
            if d.is_finite() {
                return (Some(d), DurationFrom::ProgressRate);
            }
        }
        (None, DurationFrom::Unknown)
    }
}

/// One job's predicted start and finish, on the loop's clock.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    pub job: JobId,
    /// When it next gets GPUs (for a running job: `None`, it runs now).
    /// `None` for a waiting job: not within the forecast's reach.
    pub start_s: Option<f64>,
    /// When it finishes; `None`: not within reach, or its run time unknown.
    pub finish_s: Option<f64>,
    pub duration_from: DurationFrom,
}

/// Predictions for every job of a [`Snapshot`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// The round of the snapshot, and its clock.
    pub round: u64,
    pub made_at_s: f64,
    /// Simulated time the forecast reached; a job that neither started nor
    /// finished by then has `None`.
    pub reached_s: f64,
    /// Rounds it simulated, and why it stopped.
    pub rounds: u64,
    pub stopped: String,
    /// By job id.
    pub predictions: Vec<Prediction>,
}

impl Forecast {
    pub fn get(&self, job: JobId) -> Option<&Prediction> {
        self.predictions
            .binary_search_by_key(&job, |p| p.job)
            .ok()
            .map(|i| &self.predictions[i])
    }
}

/// Why a forecast could not be made (it is logged; the jobs' predictions
/// read unknown).
#[derive(Debug, thiserror::Error)]
#[error("forecast: {0}")]
pub struct ForecastError(pub String);

/// Runs a snapshot forward. `Send + Sync`, so the runtime can call it from a
/// thread of its own.
pub trait Forecaster: Send + Sync {
    fn forecast(&self, snapshot: &Snapshot) -> Result<Forecast, ForecastError>;
}
