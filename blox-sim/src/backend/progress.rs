//! The true state of a simulated job and how it progresses: duration jobs
//! (linear speedup) and profile-driven jobs (Pollux's goodput model, epoch by
//! epoch, with the job's own batch-size tuner).

use blox_core::NodeId;
use blox_goodput::typed::{sia_fixed_batch, FixedRule};
use blox_goodput::{AppLimits, AppProfile, BatchConfig, GoodputModel, PolluxAgent, TypedProfiles};
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
    /// The nodes its GPUs are on, sorted, each once. (Which GPUs it holds
    /// is the cluster's record; the simulator needs only their nodes: a
    /// node that goes stops the jobs on it, and interference hits jobs
    /// that span nodes.)
    pub(super) nodes: Box<[NodeId]>,
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
    /// The profile of the GPU type it runs on (or last ran on).
    pub(super) app: Arc<AppProfile>,
    /// Its model's profile on every type, when the workload's profiles are
    /// per type: the job then follows the Sia artifact's rules (below).
    pub(super) types: Option<Arc<TypedProfiles>>,
    /// One throughput fit over all types (`[sim] merge_type_fits`).
    pub(super) merge_fits: bool,
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
    /// GPUs held.
    pub(super) fn gpus(&self) -> u32 {
        self.per_node.iter().sum()
    }

    /// Data-parallel replicas: GPUs, or whole pipelines of a hybrid-parallel model.
    pub(super) fn replicas(&self) -> u32 {
        self.gpus() / self.app.pipeline.map_or(1, |p| p.stages.max(1))
    }

    /// Moves to the profile of the GPU types it now holds (per-type
    /// profiles only): the type's own, or for several types the slowest. Its
    /// agent switches to that type's fit. `Err` names a type without profile.
    pub(super) fn on_types(&mut self, held: &[&str]) -> Result<(), String> {
        let Some(types) = &self.types else {
            return Ok(());
        };
        let p = match held {
            [t] => types.on(t),
            _ => types.slowest_of(held.iter().copied()),
        }
        .ok_or_else(|| {
            format!(
                "`{}` has no profile on GPU type {} (profiled on {})",
                types.app,
                held.join(", "),
                types.types().collect::<Vec<_>>().join(", ")
            )
        })?
        .clone();
        if let Tuner::Pollux(a) = &mut self.tuner {
            if self.merge_fits {
                a.limits = p.limits;
            } else {
                a.set_gpu_type(p.gpu_type.as_deref().unwrap_or(""), p.limits);
            }
        }
        self.app = p;
        Ok(())
    }

    /// The Sia artifact's batch choice (`Job.update_local_bsz`): a pipeline
    /// runs its fixed micro-batches; a fixed batch (or a job not yet measured
    /// on this type, at `max(M0, bmin·r)`) follows [`FixedRule::Job`]; an
    /// adaptive job takes the goodput-optimal batch of its fit on this type
    /// with the placement's largest measured atomic batch, capped by the
    /// largest measured at its replica count.
    fn choose_batch_sia(&self) -> BatchConfig {
        let app = &self.app;
        if let Some(p) = app.pipeline {
            return BatchConfig {
                atomic: 1,
                accum: p.microbatches.saturating_sub(1),
            };
        }
        let (n, r) = (self.per_node.len() as u32, self.replicas().max(1));
        let fixed = |m: f64| sia_fixed_batch(app, &self.per_node, m, FixedRule::Job);
        let agent = match &self.tuner {
            Tuner::Fixed(m) => return fixed(*m as f64),
            Tuner::Pollux(a) => a,
        };
        if let Some(m) = agent.fixed_batch {
            return fixed(m as f64);
        }
        let (Some(params), Some(grad)) = (agent.params(), agent.grad()) else {
            let l = app.limits;
            return fixed((l.m0 as f64).max((l.bmin * r) as f64));
        };
        let bmax = app
            .max_atomic_for(&self.per_node)
            .unwrap_or(app.limits.bmax);
        let model = GoodputModel {
            params,
            grad,
            limits: AppLimits { bmax, ..app.limits },
        };
        let mut c = model.best(n, r, agent.search).config;
        if let Some(cap) = app.max_atomic_at_replicas(r) {
            c.atomic = c.atomic.min(cap);
        }
        app.limits.clamp(r, c)
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
        let pipeline = self.app.pipeline.is_some();
        let local = self.batch.atomic * (self.batch.accum + 1);
        let query = if pipeline { local } else { self.batch.atomic };
        let (step, sync) = self
            .app
            .step_time_or_nearest(&self.per_node, query as f64)?;
        let accum = if pipeline { 0 } else { self.batch.accum };
        let t_iter = step + accum as f64 * (step - sync);
        let speed = self.slowdown * self.type_speed * self.app.calibration;
        Some(self.batch.global(r) as f64 / t_iter * speed)
    }

    pub(super) fn choose_batch(&mut self) {
        if self.types.is_some() {
            self.batch = self.choose_batch_sia();
            return;
        }
        let (n, r) = (self.per_node.len() as u32, self.replicas());
        self.batch = match &self.tuner {
            Tuner::Fixed(m) => self.app.limits.fixed_batch(r, *m as f64),
            Tuner::Pollux(a) => a.choose(n, r),
        };
    }

    /// Advances by `t_left` whole seconds from `t`; returns the completion time
    /// if the job reaches `P*` (pollux-data.md §7.2).
    ///
    /// Under the Sia artifact's rules (per-type profiles) the rate is
    /// calibrated by the model's factor, a pipeline's step is looked up by
    /// the samples of one replica and has no separate accumulation steps,
    /// and the batch is re-chosen after every sub-step, not only at epoch
    /// boundaries (`Job.step`).
    pub(super) fn advance(&mut self, mut t: f64, mut t_left: f64) -> Option<f64> {
        let last_epoch = self.app.max_epochs - 1;
        let sia = self.types.is_some();
        let pipeline = self.app.pipeline.is_some();
        let speed = self.slowdown * self.type_speed * self.app.calibration;
        while t_left > 0.0 {
            let (n, r) = (self.per_node.len() as u32, self.replicas());
            let local = self.batch.atomic * (self.batch.accum + 1);
            let query = if pipeline { local } else { self.batch.atomic };
            let m = self.batch.global(r) as f64;
            let (step, sync) = self
                .app
                .step_time_or_nearest(&self.per_node, query as f64)?;
            let grad = self.app.grad_stats(m, self.epoch);
            let accum = if pipeline { 0 } else { self.batch.accum };
            let t_iter = step + accum as f64 * (step - sync);
            let rate = grad.gain(m, self.app.limits.m0 as f64) / t_iter * speed;
            if let Tuner::Pollux(a) = &mut self.tuner {
                a.observe(n, r, query, step, sync);
                a.record_grad(grad);
            }
            let next = self.app.epoch_boundary(self.epoch + 1);
            let samples_rate = m / t_iter * speed;
            if self.progress + rate * t_left < next {
                self.progress += rate * t_left;
                self.samples += samples_rate * t_left;
                if sia {
                    self.choose_batch();
                }
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
    /// Its last checkpoint, for a job that saves every so often (a stop
    /// goes back to it); `None`: it saves when stopped.
    pub(super) saved: Option<Saved>,
    /// Its state when its current launch began: where a job that saves
    /// only when stopped resumes after a failure, which gives it no chance.
    pub(super) at_launch: Option<Saved>,
    /// The first iteration (time, start-up) of a launch a node's loss
    /// stopped before the loop heard of it: reported at the next
    /// collection, which the loop makes before counting what the job lost.
    pub(super) unreported_first: Option<(f64, f64)>,
}

/// What a checkpoint holds: the work done when it was saved.
#[derive(Clone, Debug)]
pub(super) struct Saved {
    /// Seconds between checkpoints past the first iteration.
    pub(super) every_s: f64,
    pub(super) at_s: f64,
    pub(super) done_s: f64,
    /// A profile-driven job's progress units and samples.
    pub(super) progress: f64,
    pub(super) samples: f64,
}

impl SimJobState {
    /// A checkpoint of its state now, at `at_s`, for a job that saves every
    /// `every_s` (none for a job that saves when stopped).
    pub(super) fn save(&mut self, every_s: Option<f64>, at_s: f64) {
        let now = Saved {
            every_s: f64::INFINITY,
            at_s,
            done_s: self.done_s,
            progress: self.profile.as_ref().map_or(0.0, |p| p.progress),
            samples: self.profile.as_ref().map_or(0.0, |p| p.samples),
        };
        self.saved = every_s.map(|every_s| Saved {
            every_s,
            ..now.clone()
        });
        self.at_launch = Some(now);
    }

    /// Notes the checkpoints of a launch that reached its first iteration at
    /// `first_s` and advanced from `from_s` (work `before`, progress units
    /// and samples `units_before`) to `stop_s`: the latest one in between,
    /// by linear interpolation within the step.
    pub(super) fn note_checkpoints(
        &mut self,
        first_s: f64,
        from_s: f64,
        stop_s: f64,
        before: f64,
        units_before: (f64, f64),
    ) {
        let Some(saved) = self.saved.as_mut() else {
            return;
        };
        let at = blox_core::checkpoint_at(first_s, saved.every_s, stop_s);
        if at <= saved.at_s || at < from_s {
            return;
        }
        let frac = if stop_s > from_s {
            ((at - from_s) / (stop_s - from_s)).clamp(0.0, 1.0)
        } else {
            1.0
        };
        let lerp = |a: f64, b: f64| a + (b - a) * frac;
        saved.at_s = at;
        saved.done_s = lerp(before, self.done_s);
        if let Some(p) = &self.profile {
            saved.progress = lerp(units_before.0, p.progress);
            saved.samples = lerp(units_before.1, p.samples);
        }
    }

    /// Goes back to its last checkpoint (a stop of a job that saves every
    /// so often).
    pub(super) fn restore(&mut self) {
        let Some(saved) = self.saved.clone() else {
            return;
        };
        self.go_back_to(&saved);
    }

    /// Goes back to where a failure leaves it: its last checkpoint, or,
    /// for a job that saves only when stopped, where its launch began.
    pub(super) fn restore_after_failure(&mut self) {
        let Some(point) = self.saved.clone().or_else(|| self.at_launch.clone()) else {
            return;
        };
        self.go_back_to(&point);
    }

    fn go_back_to(&mut self, saved: &Saved) {
        self.done_s = saved.done_s.min(self.done_s);
        if let Some(p) = self.profile.as_mut() {
            if saved.progress < p.progress {
                p.progress = saved.progress;
                p.samples = saved.samples;
                while p.epoch > 0 && p.app.epoch_boundary(p.epoch) > p.progress {
                    p.epoch -= 1;
                }
            }
        }
    }
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
