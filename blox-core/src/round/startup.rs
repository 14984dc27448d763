//! Jobs stopped while starting. A training job spends seconds to minutes
//! starting before its first iteration; the `protection` plugin decides
//! which jobs keep their GPUs meanwhile ([`crate::extension`]; by default
//! `startup-aware`, from these rules). The loop itself counts the launches
//! that end before their first iteration: a job that keeps being stopped
//! while starting gets a warning, and one the policies keep moving is a
//! livelock.

use super::RoundLoop;
use crate::config::RunConfig;
use crate::ids::JobId;

/// The `[run]` rules on starting jobs and checkpoints: what the loop keeps
/// itself (warnings, livelocks) and the settings of the default profile's
/// plugins ([`crate::extension::Profile::of_rules`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StartupRules {
    /// Least productive time past the first iteration before a preemption
    /// or move, seconds.
    pub min_run_s: f64,
    /// And at least this many times the job's own last start-up.
    pub min_run_startup_factor: f64,
    /// A job stopped before its first iteration this many launches in a row
    /// gets a warning (0: never).
    pub warn_after: u32,
    /// A job the policies preempt or move before its first iteration this
    /// many rounds in a row is a livelock (0: never checked): the run stops
    /// with [`crate::round::LoopError::Livelock`] (a simulation), or the job
    /// keeps its GPUs until it starts (a live scheduler).
    pub livelock_after: u32,
    /// A launch still starting after this many seconds loses its protection
    /// (a hung job, or one that never reports its first iteration, must not
    /// hold its GPUs for ever).
    pub max_startup_s: f64,
    /// Checkpoint interval of jobs that name none (`[run]
    /// checkpoint_interval_s`); `None`: they save when stopped.
    pub checkpoint_interval_s: Option<f64>,
    /// A job that saves every so often also keeps its GPUs until its first
    /// checkpoint of the launch (`[run] min_run_until_checkpoint`, default
    /// on): each launch then saves some work, so a policy that preempts
    /// every round cannot keep a job from ever finishing.
    pub until_checkpoint: bool,
    /// `[run] checkpoint = "young-daly"`: the per-GPU MTBF assumed before
    /// any failure is seen, seconds; `None`: intervals are fixed.
    pub young_daly_prior_s: Option<f64>,
    /// Seconds one checkpoint stalls a job that names no cost of its own.
    pub checkpoint_save_s: Option<f64>,
}

impl StartupRules {
    /// The defaults for rounds of `round_s`: half a round past the first
    /// iteration, and at least the job's own start-up again (so at most
    /// half of a launch's time goes to starting); a warning after 3 launches
    /// that never got past start-up; protection while starting for at most
    /// 10 minutes or 10 rounds, whichever is longer.
    pub fn for_round(round_s: f64) -> Self {
        StartupRules {
            min_run_s: round_s / 2.0,
            min_run_startup_factor: 1.0,
            warn_after: 3,
            livelock_after: 20,
            max_startup_s: (10.0 * round_s).max(600.0),
            checkpoint_interval_s: None,
            until_checkpoint: true,
            young_daly_prior_s: None,
            checkpoint_save_s: None,
        }
    }

    /// The rules a `[run]` section sets, defaults for the rest.
    pub fn from_run(run: &RunConfig) -> Self {
        let d = Self::for_round(run.round_s.get());
        StartupRules {
            min_run_s: run.min_run_s.map_or(d.min_run_s, |v| v.get()),
            min_run_startup_factor: run
                .min_run_startup_factor
                .map_or(d.min_run_startup_factor, |v| v.get()),
            warn_after: run.startup_warn_after.unwrap_or(d.warn_after),
            livelock_after: run.livelock_after.unwrap_or(d.livelock_after),
            max_startup_s: run.max_startup_s.map_or(d.max_startup_s, |v| v.get()),
            checkpoint_interval_s: run.checkpoint_interval_s.map(|v| v.get()),
            until_checkpoint: run.min_run_until_checkpoint.unwrap_or(true),
            young_daly_prior_s: (run.checkpoint == Some(crate::config::CheckpointRule::YoungDaly))
                .then(|| {
                    run.checkpoint_gpu_mtbf_h
                        .map_or(crate::health::LLAMA3_GPU_MTBF_H, |v| v.get())
                        * 3600.0
                }),
            checkpoint_save_s: run.checkpoint_save_s.map(|v| v.get()).filter(|v| *v > 0.0),
        }
    }

    /// No protection at all (a policy's preemptions always run).
    pub fn off() -> Self {
        StartupRules {
            min_run_s: 0.0,
            min_run_startup_factor: 0.0,
            warn_after: 0,
            livelock_after: 0,
            max_startup_s: 0.0,
            checkpoint_interval_s: None,
            until_checkpoint: false,
            young_daly_prior_s: None,
            checkpoint_save_s: None,
        }
    }
}

/// Why a running job stopped (for the warning's hint).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Stopped {
    /// A policy preempted or moved it; `round_after_launch`: in the round
    /// after the one that launched it (what a livelock looks like).
    Preempted { round_after_launch: bool },
    /// Its process ended without finishing (a crash, to be retried).
    Ended,
    /// Its node left the cluster.
    NodeLost,
}

impl RoundLoop {
    /// Bookkeeping when a running job stops before or after its first
    /// iteration (preempted, moved, lost with its node, crashed). A job the
    /// policies preempt or move before its first iteration
    /// `livelock_after` rounds in a row never gets past its start-up: a
    /// loop that fails on invalid decisions stops with
    /// [`LoopError::Livelock`] after this round; one that skips them (a
    /// live scheduler) keeps the job on its GPUs until it starts.
    pub(super) fn note_stopped(&mut self, id: JobId, why: Stopped) {
        let warn_after = self.profile.rules.warn_after;
        let livelock_after = self.profile.rules.livelock_after;
        let fail = self.on_invalid == super::OnInvalidDecision::Fail;
        let policies = self.policies.label();
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let moved_at_once = why
            == Stopped::Preempted {
                round_after_launch: true,
            };
        if job.first_iteration_s.is_some() || !moved_at_once {
            job.preempted_while_starting = 0;
        } else {
            job.preempted_while_starting += 1;
            let n = job.preempted_while_starting;
            if livelock_after > 0 && n >= livelock_after && !job.held_while_starting {
                if fail {
                    let name = &job.spec.name;
                    let job_name = if name.is_empty() || *name == id.0.to_string() {
                        id.to_string()
                    } else {
                        format!("{id} ({name})")
                    };
                    self.livelock.get_or_insert(super::LoopError::Livelock {
                        policies,
                        job: job_name,
                        rounds: n,
                    });
                } else {
                    job.held_while_starting = true;
                    tracing::error!(job = %id, policies = %policies, "moved or preempted before its first iteration {n} rounds in a row (a livelock): marked to keep its GPUs until it starts, which the protection plugin honours (`startup-aware` does; [run] livelock_after)");
                }
            }
        }
        if job.first_iteration_s.is_some() {
            job.launches_without_progress = 0;
        } else {
            job.launches_without_progress += 1;
            let n = job.launches_without_progress;
            if warn_after > 0 && n >= warn_after {
                let hint = match why {
                    Stopped::Preempted { .. } => {
                        "preempted while starting: raise [run] max_startup_s, or lengthen the rounds"
                    }
                    Stopped::Ended => "its process ends while starting: see its stderr",
                    Stopped::NodeLost => "its node left while it was starting",
                };
                let text =
                    format!("stopped before its first iteration {n} launches in a row ({hint})");
                if n == warn_after {
                    tracing::warn!(job = %id, "{text}");
                }
                job.warning = Some(text);
            }
        }
        job.first_iteration_s = None;
    }
}
