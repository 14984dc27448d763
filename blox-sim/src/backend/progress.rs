//! The true state of a simulated job and how it progresses: duration jobs
//! (linear speedup) and profile-driven jobs (Pollux's goodput model, epoch by
//! epoch, with the job's own batch-size tuner).

use blox_goodput::{AppProfile, BatchConfig, PolluxAgent};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(super) struct Segment {
    pub(super) gpus: u32,
    /// GPUs held since (attained service counts from here).
    pub(super) held_since_s: f64,
    /// Progress starts here (launch + overhead; later after an elastic change).
    pub(super) progress_from_s: f64,
    /// The launch's first iteration: launch + start-up.
    pub(super) first_iteration_s: f64,
}

/// The batch-size chooser of a profile-driven job.
#[derive(Clone, Debug)]
pub(super) enum Tuner {
    Fixed(u32),
    Pollux(Box<PolluxAgent>),
}

/// True state of a profile-driven job.
#[derive(Clone, Debug)]
pub(super) struct ProfileRun {
    pub(super) app: Arc<AppProfile>,
    pub(super) tuner: Tuner,
    /// Completed epochs.
    pub(super) epoch: usize,
    /// Statistical progress, iterations at `M0`.
    pub(super) progress: f64,
    pub(super) batch: BatchConfig,
    /// Replicas per node, in allocation order.
    pub(super) per_node: Vec<u32>,
    /// Goodput factor for this round (1 − interference).
    pub(super) slowdown: f64,
    /// Samples processed so far (Σ global batch × optimizer steps).
    pub(super) samples: f64,
    /// Speed of the GPU type it runs on (heterogeneous clusters).
    pub(super) type_speed: f64,
    /// The job's first global batch (its learning rate's reference).
    pub(super) initial_batch: Option<u32>,
}

impl ProfileRun {
    pub(super) fn replicas(&self) -> u32 {
        self.per_node.iter().sum()
    }

    /// Runs at global batch `m` from now on, as a scheduler asked (ONES).
    pub(super) fn set_batch(&mut self, m: u32) {
        match &mut self.tuner {
            Tuner::Fixed(b) => *b = m,
            Tuner::Pollux(a) => a.fixed_batch = Some(m),
        }
        if self.replicas() > 0 {
            self.choose_batch();
        }
    }

    /// Fractional epochs done: completed epochs plus the share of the current one.
    pub(super) fn epochs_done(&self) -> f64 {
        let lo = self.app.epoch_boundary(self.epoch);
        let hi = self.app.epoch_boundary(self.epoch + 1);
        let frac = if hi > lo {
            ((self.progress - lo) / (hi - lo)).clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.epoch as f64 + frac
    }

    /// True samples per second at the current placement and batch.
    pub(super) fn samples_per_s(&self) -> Option<f64> {
        let r = self.replicas();
        if r == 0 {
            return None;
        }
        let (step, sync) = self
            .app
            .step_time_or_nearest(&self.per_node, self.batch.atomic as f64)?;
        let t_iter = step + self.batch.accum as f64 * (step - sync);
        Some(self.batch.global(r) as f64 / t_iter * self.slowdown * self.type_speed)
    }

    pub(super) fn choose_batch(&mut self) {
        let (n, r) = (self.per_node.len() as u32, self.replicas());
        self.batch = match &self.tuner {
            Tuner::Fixed(m) => self.app.limits.fixed_batch(r, *m as f64),
            Tuner::Pollux(a) => a.choose(n, r),
        };
    }

    /// Advances by `t_left` whole seconds from `t`; returns the completion time
    /// if the job reaches `P*` (pollux-data.md §7.2).
    pub(super) fn advance(&mut self, mut t: f64, mut t_left: f64) -> Option<f64> {
        let last_epoch = self.app.max_epochs - 1;
        while t_left > 0.0 {
            let (n, r) = (self.per_node.len() as u32, self.replicas());
            let b = self.batch.atomic as f64;
            let m = self.batch.global(r) as f64;
            let (step, sync) = self.app.step_time_or_nearest(&self.per_node, b)?;
            let grad = self.app.grad_stats(m, self.epoch);
            let t_iter = step + self.batch.accum as f64 * (step - sync);
            let rate =
                grad.gain(m, self.app.limits.m0 as f64) / t_iter * self.slowdown * self.type_speed;
            if let Tuner::Pollux(a) = &mut self.tuner {
                a.observe(n, r, self.batch.atomic, step, sync);
                a.record_grad(grad);
            }
            let next = self.app.epoch_boundary(self.epoch + 1);
            let samples_rate = m / t_iter * self.slowdown * self.type_speed;
            if self.progress + rate * t_left < next {
                self.progress += rate * t_left;
                self.samples += samples_rate * t_left;
                return None;
            }
            let delta = round_half_even((next - self.progress) / rate).min(t_left);
            self.samples += samples_rate * delta;
            self.epoch += 1;
            self.progress = next;
            t += delta;
            t_left -= delta;
            if self.epoch > last_epoch {
                return Some(t);
            }
            self.choose_batch();
        }
        None
    }
}

/// Python's `round`: halves go to the even neighbour.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

#[derive(Clone, Debug)]
pub(super) struct SimJobState {
    pub(super) duration_s: f64,
    pub(super) requested_gpus: u32,
    /// Seconds of work done, measured at the requested GPU count.
    pub(super) done_s: f64,
    /// Productive GPU-seconds (past each launch's first iteration).
    pub(super) attained_gpu_s: f64,
    /// GPU-seconds and wall seconds spent starting.
    pub(super) startup_gpu_s: f64,
    pub(super) startup_s: f64,
    pub(super) run_time_s: f64,
    /// Start-up of every launch of this job, if the trace or its model says.
    pub(super) own_startup_s: Option<f64>,
    pub(super) segment: Option<Segment>,
    pub(super) finished_at: Option<f64>,
    pub(super) started: bool,
    pub(super) profile: Option<ProfileRun>,
    pub(super) converge_at: Option<f64>,
    /// Speed of the GPU type it runs on (slowest of its GPUs) times its speed
    /// with the CPUs and host memory it got (host profiles).
    pub(super) type_speed: f64,
    /// Time it was last taken off its GPUs (a launch in the same round is a move).
    pub(super) stopped_at: Option<f64>,
}

/// The synthetic training loss of a job that converges after fraction `c` of
/// its work: from 10 down to its final value 1 along `1 + 9·(1 − p/c)²`, flat
/// after `c` (loss-based termination, Blox §5.3).
pub fn synthetic_loss(progress: f64, c: f64) -> f64 {
    let x = 1.0 - (progress / c.max(1e-9)).min(1.0);
    1.0 + 9.0 * x * x
}

impl SimJobState {
    pub(super) fn remaining_s(&self) -> f64 {
        (self.duration_s - self.done_s).max(0.0)
    }
}
