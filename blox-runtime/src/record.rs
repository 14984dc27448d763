//! What the real backends ([`crate::LocalBackend`],
//! [`crate::scheduler::ClusterBackend`]) keep per job, and how an ended
//! launch settles the job: finished, back to the queue to resume from its
//! checkpoint, or failed once it crashed more than `max_retries` times.

use blox_core::*;
use blox_forecast::LaunchCosts;
use std::collections::VecDeque;

/// Launches, crashes and service of one job (over its ended launches).
#[derive(Clone, Debug, Default)]
pub(crate) struct Record {
    /// Launches tried (each gets the next number).
    pub launches: u32,
    /// Launches a node refused for a reason of its own (not the job's):
    /// tried, but not the job's runs.
    pub refused: u32,
    /// Launches whose requests went out to workers: from the first, a
    /// process of the job may have run and left checkpoints, so later
    /// launches resume (a launch refused before any went out does not
    /// count: the job's first run is then told to start afresh).
    pub sent: u32,
    pub crashes: u32,
    /// Wall seconds holding GPUs, start-up included.
    pub run_time_s: f64,
    /// Productive GPU-seconds (past each launch's first iteration).
    pub attained_gpu_s: f64,
    /// Wall seconds and GPU-seconds spent starting.
    pub startup_s: f64,
    pub startup_gpu_s: f64,
    /// Work lost to stops before the scheduler restarted, until it is
    /// handed to the job (the loop counts later losses there).
    pub lost_work_gpu_s: f64,
}

impl Record {
    /// Adds an ended launch.
    pub fn fold(&mut self, c: &LaunchClock) {
        let (held, startup) = c.split();
        let g = c.gpus as f64;
        self.run_time_s += held;
        self.startup_s += startup;
        self.attained_gpu_s += (held - startup) * g;
        self.startup_gpu_s += startup * g;
    }
}

/// One launch's time: when the round gave it its GPUs, when its process was
/// spawned, how far it is accounted, and when it passed its first iteration
/// (from the [`blox_client::STARTUP_METRIC`] it reports, measured from its
/// spawn). Until then its time is start-up: waiting for the GPUs' previous
/// jobs to checkpoint and exit, the launch call, and the job's own start.
#[derive(Clone, Debug)]
pub(crate) struct LaunchClock {
    /// When the round that launched it began: its GPUs are its from then.
    pub launched_s: f64,
    /// When its process was spawned (at or after `launched_s`).
    pub spawned_s: f64,
    pub accounted_s: f64,
    pub gpus: u32,
    pub first_iteration_s: Option<f64>,
    /// When it last saved a checkpoint (from the
    /// [`blox_client::CHECKPOINT_METRIC`] it reports).
    pub checkpoint_s: Option<f64>,
}

impl LaunchClock {
    pub fn new(now_s: f64, gpus: u32) -> Self {
        Self::spawned(now_s, now_s, gpus)
    }

    /// A launch the round at `launched_s` decided, spawned at `spawned_s`
    /// (after the revocations before it and the launch call).
    pub fn spawned(launched_s: f64, spawned_s: f64, gpus: u32) -> Self {
        let launched_s = launched_s.min(spawned_s);
        LaunchClock {
            launched_s,
            spawned_s,
            accounted_s: launched_s,
            gpus,
            first_iteration_s: None,
            checkpoint_s: None,
        }
    }

    /// Accounts the launch's time up to `until`.
    pub fn advance(&mut self, until: f64) {
        self.accounted_s = self.accounted_s.max(until);
    }

    /// A metric the launch pushed, seen at `now_s`.
    pub fn on_metric(&mut self, key: &str, value: f64, now_s: f64) {
        if key == blox_client::STARTUP_METRIC
            && self.first_iteration_s.is_none()
            && value.is_finite()
            && value >= 0.0
        {
            // The job measured from its spawn; never later than when we
            // learn of it.
            self.first_iteration_s = Some((self.spawned_s + value).min(now_s));
        }
        if key == blox_client::CHECKPOINT_METRIC && value.is_finite() && value >= 0.0 {
            let at = (self.spawned_s + value).min(now_s);
            self.checkpoint_s = Some(self.checkpoint_s.map_or(at, |c| c.max(at)));
        }
    }

    /// A launch that reported no start-up for `max_startup_s` (a program
    /// that does not use a client library, or hung): its start-up is taken
    /// as unknown and none of its time counts as starting; the loop no
    /// longer protects it either.
    pub fn give_up_waiting(&mut self, now_s: f64, max_startup_s: f64) {
        if self.first_iteration_s.is_none() && now_s - self.launched_s >= max_startup_s {
            tracing::debug!(
                "a launch reported no start-up in {max_startup_s} s; its time counts as productive"
            );
            self.first_iteration_s = Some(self.spawned_s);
        }
    }

    /// A launch that finished its work without reporting its start-up did
    /// work all along: none of its time counts as starting.
    pub fn finished(&mut self) {
        self.first_iteration_s.get_or_insert(self.spawned_s);
    }

    /// (Seconds held, of which starting) so far.
    pub fn split(&self) -> (f64, f64) {
        let held = (self.accounted_s - self.launched_s).max(0.0);
        let startup = self
            .first_iteration_s
            .map_or(held, |f| (f - self.launched_s).clamp(0.0, held));
        (held, startup)
    }

    /// Start-up of this launch, once it passed its first iteration.
    pub fn startup_s(&self) -> Option<f64> {
        self.first_iteration_s
            .map(|f| (f - self.launched_s).max(0.0))
    }
}

/// The recent waits from a round's start to a launch's spawn, first
/// launches and relaunches apart: what a forecast charges a launch at least
/// ([`LaunchCosts`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct LaunchWaits {
    first: VecDeque<f64>,
    again: VecDeque<f64>,
}

impl LaunchWaits {
    /// Launches remembered of each kind.
    const KEEP: usize = 64;

    /// A launch (a relaunch if `relaunch`) spawned `wait_s` after its
    /// round began.
    pub fn add(&mut self, relaunch: bool, wait_s: f64) {
        if !wait_s.is_finite() {
            return;
        }
        let q = if relaunch {
            &mut self.again
        } else {
            &mut self.first
        };
        if q.len() == Self::KEEP {
            q.pop_front();
        }
        q.push_back(wait_s.max(0.0));
    }

    pub fn costs(&self) -> LaunchCosts {
        let median = |q: &VecDeque<f64>| {
            let mut v: Vec<f64> = q.iter().copied().collect();
            (!v.is_empty()).then(|| blox_core::stats::quantile(&mut v, 0.5))
        };
        LaunchCosts {
            launch_wait_s: median(&self.first),
            relaunch_wait_s: median(&self.again),
        }
    }
}

/// How one launch ended.
#[derive(Clone, Debug)]
pub(crate) struct Ended {
    pub job: JobId,
    pub at_s: f64,
    pub code: Option<i32>,
    pub finished: bool,
    pub reason: String,
    /// The job's own fault (a crash, a program that cannot start), which
    /// counts against its retries; a lost worker does not.
    pub blame: bool,
    /// The job's own fault that no retry can help (its program does not
    /// exist): the job fails now.
    pub permanent: bool,
}

impl Ended {
    pub fn finished(job: JobId, at_s: f64) -> Self {
        Ended {
            job,
            at_s,
            code: Some(0),
            finished: true,
            reason: String::new(),
            blame: false,
            permanent: false,
        }
    }

    /// A crash; the reason is the exit status unless one is given.
    pub fn crashed(job: JobId, at_s: f64, code: Option<i32>, reason: Option<String>) -> Self {
        let reason = reason.unwrap_or_else(|| match code {
            Some(c) => format!("exit status {c}"),
            None => "killed by a signal".into(),
        });
        Ended {
            job,
            at_s,
            code,
            finished: false,
            reason,
            blame: true,
            permanent: false,
        }
    }
}

/// Applies ended launches to their jobs, then every job's service so far:
/// its ended launches (`records`) plus the running ones (`live`).
pub(crate) fn settle<'a>(
    ended: Vec<Ended>,
    records: &mut rustc_hash::FxHashMap<JobId, Record>,
    live: impl Iterator<Item = (JobId, &'a LaunchClock)>,
    jobs: &mut JobState,
    max_retries: u32,
) {
    for e in ended {
        let Some(job) = jobs.get_mut(e.job) else {
            continue;
        };
        if job.status.is_terminal() {
            continue;
        }
        if e.finished {
            job.status = JobStatus::Finished;
            job.finish_s = Some(e.at_s);
            job.progress = 1.0;
            continue;
        }
        let rec = records.entry(e.job).or_default();
        if e.blame {
            rec.crashes += 1;
        }
        if e.blame && e.permanent {
            tracing::warn!(job = %e.job, "failed: {} (not retried: trying again cannot help)", e.reason);
            job.status = JobStatus::Failed;
            job.finish_s = Some(e.at_s);
            job.end_reason = Some(format!("{} (not retried)", e.reason));
        } else if rec.crashes > max_retries {
            tracing::warn!(job = %e.job, "failed after {} attempts: {}", rec.crashes, e.reason);
            job.status = JobStatus::Failed;
            job.finish_s = Some(e.at_s);
            job.end_reason = Some(format!("failed {} times; last: {}", rec.crashes, e.reason));
        } else {
            tracing::warn!(job = %e.job, code = ?e.code, "ended without finishing ({}); it goes back to the queue and resumes from its checkpoint", e.reason);
            job.status = JobStatus::Queued;
        }
    }
    for (id, rec) in records.iter_mut() {
        if let Some(job) = jobs.get_mut(*id) {
            job.run_time_s = rec.run_time_s;
            job.attained_service_gpu_s = rec.attained_gpu_s;
            job.startup_s = rec.startup_s;
            job.startup_gpu_s = rec.startup_gpu_s;
            // Handed over once: the loop adds later losses to the job.
            job.lost_work_gpu_s += std::mem::take(&mut rec.lost_work_gpu_s);
        }
    }
    for (id, c) in live {
        let Some(job) = jobs.get_mut(id) else {
            continue;
        };
        let (held, startup) = c.split();
        let g = c.gpus as f64;
        job.run_time_s += held;
        job.startup_s += startup;
        job.attained_service_gpu_s += (held - startup) * g;
        job.startup_gpu_s += startup * g;
        if let (Some(f), Some(s)) = (c.first_iteration_s, c.startup_s()) {
            if job.is_running() && job.first_iteration_s.is_none() {
                tracing::debug!(
                    job = %id,
                    "first iteration {s:.3} s after its round began ({:.3} s of it before the spawn)",
                    c.spawned_s - c.launched_s
                );
                job.reached_first_iteration(f, s);
            }
        }
        if job.is_running() {
            job.checkpoint_s = c.checkpoint_s;
        }
    }
}
