//! One job as an event log shows it, up to a replay's start: its launches,
//! stops and work, folded into the state it has then.

use super::{Actual, Work};
use blox_core::round::events::{Event, GpuPlace, What};
use blox_core::*;

/// A job as the log shows it, up to the replay's start.
pub(super) struct Tracked {
    pub(super) job: Job,
    pub(super) places: Vec<GpuPlace>,
    /// Thousandths of its GPU, while its last launch before the start
    /// shares one.
    pub(super) share: Option<u32>,
    /// When the current launch began making progress (after start-up).
    pub(super) progress_from: Option<f64>,
    /// Productive GPU-seconds before the start, and in all.
    pub(super) attained_before: f64,
    pub(super) attained_all: f64,
    /// Of those, rolled back to a checkpoint by a stop.
    pub(super) lost_before: f64,
    pub(super) lost_all: f64,
    /// Its checkpoint interval (none: it saves when stopped).
    pub(super) every: Option<f64>,
    /// The speed of its current launch's GPUs (`[sim]` speeds), and its
    /// productive GPU-seconds before the start and in all weighted by the
    /// speed they ran at: work at speed 1 is attained × weighted / attained.
    pub(super) speed: f64,
    pub(super) weighted_before: f64,
    pub(super) weighted_all: f64,
    /// Productive GPU-seconds the log's `finished` event gives.
    pub(super) finished_attained: Option<f64>,
    /// The work its stops lost as the log's `finished` event gives it.
    pub(super) logged_lost: Option<f64>,
    pub(super) ended_before: bool,
    pub(super) actual: Actual,
    pub(super) gpus: u32,
    /// When the loop saw it (its `submitted` event).
    pub(super) submitted_at: f64,
    /// It was launched before (its next launch is a restart).
    pub(super) launched: bool,
}

pub(super) enum State {
    Ended,
    Waiting(Job),
    Active(Job, Vec<GpuPlace>),
}

impl Tracked {
    pub(super) fn new(spec: JobSpec, submitted_at: f64) -> Self {
        Tracked {
            job: Job::new(spec),
            places: Vec::new(),
            share: None,
            progress_from: None,
            attained_before: 0.0,
            attained_all: 0.0,
            lost_before: 0.0,
            lost_all: 0.0,
            every: None,
            speed: 1.0,
            weighted_before: 0.0,
            weighted_all: 0.0,
            finished_attained: None,
            logged_lost: None,
            ended_before: false,
            actual: Actual::default(),
            gpus: 0,
            submitted_at,
            launched: false,
        }
    }

    /// What a second of its launch counts: its GPUs (a job without GPUs:
    /// a second of its own work).
    pub(super) fn weight(&self) -> f64 {
        match self.job.without_gpus() {
            true => 1.0,
            false => f64::from(self.gpus),
        }
    }

    /// Submitted at or after the start: one of the future's.
    pub(super) fn spec_future(&self, at: f64) -> bool {
        self.submitted_at >= at
    }

    /// Closes the current launch at `t`: its productive time counts; a stop
    /// that is not its end (`rollback`) loses the work since its last
    /// checkpoint, as the loop counts it, and a node's failure under a job
    /// that saves only when stopped (which a failure does not let it) all
    /// the launch's work.
    pub(super) fn stop(&mut self, t: f64, at: f64, rollback: bool, failed: bool) {
        if let Some(from) = self.progress_from.take() {
            let gpus = self.weight();
            self.attained_all += (t - from).max(0.0) * gpus;
            self.attained_before += (t.min(at) - from).max(0.0) * gpus;
            self.weighted_all += (t - from).max(0.0) * gpus * self.speed;
            self.weighted_before += (t.min(at) - from).max(0.0) * gpus * self.speed;
            let saved = match self.every {
                Some(every) => Some(checkpoint_at(from, every, t)),
                None if failed => Some(from),
                None => None,
            };
            if let (true, Some(saved)) = (rollback && t > from, saved) {
                let lost = (t - saved) * gpus;
                self.lost_all += lost;
                if t < at {
                    self.lost_before += lost;
                }
            }
        }
    }

    /// `overheads`: start-up of a first launch and of a restart.
    pub(super) fn apply(&mut self, e: &Event, at: f64, overheads: (f64, f64)) {
        let before = e.time_s < at;
        match &e.what {
            What::Admitted if before => self.job.status = JobStatus::Queued,
            // Adopted by a restarted scheduler while its launch ran on
            // (the runs joined): the same launch, its progress unbroken.
            What::Adopted { gpus } if self.progress_from.is_some() => {
                self.places = gpus.clone();
            }
            What::Launched { gpus, .. } | What::Adopted { gpus } => {
                self.stop(e.time_s, at, true, false);
                self.gpus = gpus.len() as u32;
                let startup = if matches!(e.what, What::Adopted { .. }) {
                    0.0
                } else if self.launched {
                    overheads.1
                } else {
                    overheads.0
                };
                self.launched = true;
                self.progress_from = Some(e.time_s + startup);
                if self.actual.start_s.is_none() {
                    self.actual.start_s = Some(e.time_s);
                }
                if before {
                    self.job.wait = None;
                    self.job.status = JobStatus::Running;
                    self.places = gpus.clone();
                    (self.share, self.job.host_node) = match &e.what {
                        What::Launched { share, node, .. } => (*share, node.map(NodeId)),
                        _ => (None, None),
                    };
                    self.job.launches += 1;
                    self.job.last_launch_s = Some(e.time_s);
                    self.job.first_start_s.get_or_insert(e.time_s);
                    self.job.max_gpus_so_far = self.job.max_gpus_so_far.max(self.gpus);
                    self.job.first_iteration_s = Some(e.time_s + startup);
                    self.job.last_startup_s = Some(startup);
                }
            }
            What::Preempted { .. } | What::Requeued { .. } => {
                // The loop requeues a failed node's jobs as "node N failed".
                let failed =
                    matches!(&e.what, What::Requeued { reason } if reason.ends_with(" failed"));
                self.stop(e.time_s, at, true, failed);
                if before {
                    self.job.status = JobStatus::Queued;
                    self.places.clear();
                    self.job.host_node = None;
                    self.job.preemptions += u32::from(matches!(e.what, What::Preempted { .. }));
                }
            }
            What::Finished { jct_s, .. } => {
                self.stop(e.time_s, at, false, false);
                self.finished_attained = e.what.finished_work_gpu_s();
                if let What::Finished { lost_gpu_s, .. } = &e.what {
                    self.logged_lost = Some(lost_gpu_s.unwrap_or(0.0));
                }
                // Its exact end, where the log gives its JCT (the round
                // that saw it end comes after).
                let end = jct_s.map_or(e.time_s, |j| self.job.spec.arrival_s + j);
                self.end(e.time_s, end, at, true);
            }
            What::Failed { .. } | What::Cancelled | What::Rejected { .. } => {
                self.stop(e.time_s, at, false, false);
                self.end(e.time_s, e.time_s, at, false);
            }
            What::Waiting { wait_kind, .. } if before => {
                self.job.wait = WaitReason::of_kind(wait_kind, self.job.requested_gpus());
                self.job.wait_counted_s = Some(e.time_s);
            }
            _ => {}
        }
    }

    /// The scheduler stopped at `t` (a restart): a launch running then
    /// ended without rolling back (its workers' lapsed leases stopped it
    /// with a checkpoint, or it runs on to be adopted).
    pub(super) fn restarted(&mut self, t: f64, at: f64) {
        if self.progress_from.is_some() {
            self.stop(t, at, false, false);
            if t < at && self.job.status == JobStatus::Running {
                self.job.status = JobStatus::Queued;
                self.places.clear();
            }
        }
    }

    /// Ended: seen by the round at `seen` (the event's), at `t`.
    pub(super) fn end(&mut self, seen: f64, t: f64, at: f64, finished: bool) {
        if seen < at {
            self.ended_before = true;
        } else if finished {
            self.actual.finish_s = Some(t);
        } else {
            self.actual.ended_otherwise = true;
        }
    }

    /// Its productive time at speed 1 per second it ran (1 where every GPU
    /// it held runs at the reference speed).
    pub(super) fn speed_factor(weighted: f64, attained: f64) -> f64 {
        if attained > 0.0 && weighted > 0.0 {
            weighted / attained
        } else {
            1.0
        }
    }

    /// Its work: what a finished job took, else its `duration_s`.
    pub(super) fn work(&self) -> Option<Work> {
        let w = self.work_raw()?;
        if w.from == "duration_s" {
            return Some(w);
        }
        Some(Work {
            duration_s: w.duration_s * Self::speed_factor(self.weighted_all, self.attained_all),
            from: w.from,
        })
    }

    /// [`Tracked::work`] in the seconds it took on the GPUs it ran on.
    pub(super) fn work_raw(&self) -> Option<Work> {
        let gpus = f64::from(self.job.requested_gpus().max(1));
        if let Some(a) = self.finished_attained.filter(|a| *a > 0.0) {
            return Some(Work {
                duration_s: a / gpus,
                from: "the log",
            });
        }
        if self.actual.finish_s.is_some() && self.attained_all > 0.0 {
            return Some(Work {
                duration_s: (self.attained_all - self.lost_all).max(0.0) / gpus,
                from: "the log",
            });
        }
        // A job that ended otherwise ran for what it ran.
        if self.actual.ended_otherwise && self.attained_all > 0.0 {
            return Some(Work {
                duration_s: self.attained_all / gpus,
                from: "the log (ended unfinished)",
            });
        }
        self.job.spec.expected_duration_s.map(|d| Work {
            duration_s: d,
            from: "duration_s",
        })
    }

    /// Its state at the start, with progress from `work` (run time at its
    /// requested GPUs) where known.
    pub(super) fn state_at(mut self, at: f64, work: Option<f64>) -> State {
        if self.ended_before {
            return State::Ended;
        }
        if self.job.status == JobStatus::Running {
            // Progress of the launch running at the start, up to it.
            if let Some(from) = self.progress_from {
                let ran = (at - from).max(0.0) * self.weight();
                self.attained_before += ran;
                self.weighted_before += ran * self.speed;
            }
        }
        // What its stops lost as the loop that ran measured it (from the
        // checkpoints the job reported), where the log gives it and it is
        // not what the model here gives (a live job's own checkpoints; a
        // node failure the model takes as losing the whole launch): the
        // model's split before and after the start is kept.
        if let Some(l) = self.logged_lost {
            if self.lost_all > 0.0 && (l - self.lost_all).abs() > 1e-6 * l.max(1.0) {
                self.lost_before = l * self.lost_before / self.lost_all;
                self.lost_all = l;
            }
        }
        let j = &mut self.job;
        j.attained_service_gpu_s = self.attained_before;
        j.lost_work_gpu_s = self.lost_before;
        let gpus = f64::from(j.requested_gpus().max(1));
        if let Some(w) = work.filter(|w| *w > 0.0) {
            let done = (self.attained_before - self.lost_before).max(0.0)
                * Self::speed_factor(self.weighted_before, self.attained_before);
            j.progress = (done / gpus / w).clamp(0.0, 1.0);
        }
        if j.without_gpus() {
            // Its work was counted in seconds: it attains no GPU service.
            j.attained_service_gpu_s = 0.0;
            j.lost_work_gpu_s = 0.0;
        }
        if j.status == JobStatus::Running {
            j.allocation.clear();
            State::Active(self.job, self.places)
        } else if j.status == JobStatus::Submitted {
            State::Waiting(self.job)
        } else {
            State::Active(self.job, Vec::new())
        }
    }
}
