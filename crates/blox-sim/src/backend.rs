//! The simulation backend: a virtual clock and per-job progress, implementing the
//! loop's mechanisms (metric collection, submissions, preemption, launch, wait).
//!
//! Time advances in whole rounds (`t = k·R`). Inside a round a running job makes
//! progress from its launch (plus launch/restart overhead) and, by default,
//! finishes at its exact completion time; its GPUs come back at the next round.
//! With `round_quantized = true` the Blox simulator's accounting is reproduced:
//! every job running in a round is credited the whole round and finishes at the
//! round boundary (`blox-sim-semantics.md`).

use crate::workload::SimJob;
use blox_core::*;
use serde::Deserialize;
use std::collections::{BTreeSet, HashMap};

/// `[sim]`: simulator settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Blox compatibility: credit whole rounds and stamp completions (and, in the
    /// reports, first starts) at round boundaries.
    #[serde(default)]
    pub round_quantized: bool,
    /// Seconds between a job's first launch and its first progress.
    #[serde(default)]
    pub launch_overhead_s: f64,
    /// Seconds lost on every relaunch after a preemption or re-allocation
    /// (checkpoint restore; Pollux's artifact uses 30 s).
    #[serde(default)]
    pub restart_overhead_s: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_quantized: false,
            launch_overhead_s: 0.0,
            restart_overhead_s: 0.0,
        }
    }
}

#[derive(Clone, Debug)]
struct Segment {
    gpus: u32,
    /// GPUs held since (attained service counts from here).
    held_since_s: f64,
    /// Progress starts here (launch + overhead).
    progress_from_s: f64,
}

#[derive(Clone, Debug)]
struct SimJobState {
    duration_s: f64,
    requested_gpus: u32,
    /// Seconds of work done, measured at the requested GPU count.
    done_s: f64,
    attained_gpu_s: f64,
    run_time_s: f64,
    segment: Option<Segment>,
    finished_at: Option<f64>,
    started: bool,
}

impl SimJobState {
    fn remaining_s(&self) -> f64 {
        (self.duration_s - self.done_s).max(0.0)
    }
}

/// The simulator: owns the trace and the true state of every job.
pub struct SimBackend {
    cfg: SimConfig,
    round_s: f64,
    tick: u64,
    /// Extra offset when fast-forwarding over idle time (whole rounds).
    trace: Vec<SimJob>,
    next: usize,
    jobs: HashMap<JobId, SimJobState>,
    running: BTreeSet<JobId>,
    /// Jobs whose state changed since the last metric collection.
    dirty: BTreeSet<JobId>,
}

impl SimBackend {
    /// `trace` must be sorted by arrival.
    pub fn new(cfg: SimConfig, round_s: f64, trace: Vec<SimJob>) -> Self {
        SimBackend {
            cfg,
            round_s,
            tick: 0,
            trace,
            next: 0,
            jobs: HashMap::new(),
            running: BTreeSet::new(),
            dirty: BTreeSet::new(),
        }
    }

    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Jobs of the trace not yet submitted.
    pub fn pending(&self) -> usize {
        self.trace.len() - self.next
    }

    fn now(&self) -> f64 {
        self.tick as f64 * self.round_s
    }

    /// Advances every running job from `start` to `end`.
    fn advance(&mut self, start: f64, end: f64) {
        let quantized = self.cfg.round_quantized;
        let mut done = Vec::new();
        for id in &self.running {
            let s = self.jobs.get_mut(id).expect("running job is known");
            let seg = s.segment.as_ref().expect("running job has a segment");
            let speed = seg.gpus as f64 / s.requested_gpus.max(1) as f64;
            let from = seg.progress_from_s.max(start);
            let held_from = seg.held_since_s.max(start);
            if quantized {
                // Blox: the whole round is credited to every job that ran in it.
                s.done_s += (end - from).max(0.0) * speed;
                s.run_time_s += end - held_from;
                s.attained_gpu_s += (end - held_from) * seg.gpus as f64;
                if s.done_s >= s.duration_s - 1e-9 {
                    s.finished_at = Some(end);
                    done.push(*id);
                }
            } else {
                let need = s.remaining_s() / speed;
                let finish = from + need;
                let stop = if finish <= end { finish } else { end };
                s.done_s += (stop - from).max(0.0) * speed;
                s.run_time_s += (stop - held_from).max(0.0);
                s.attained_gpu_s += (stop - held_from).max(0.0) * seg.gpus as f64;
                if finish <= end {
                    s.done_s = s.duration_s;
                    s.finished_at = Some(finish.max(held_from));
                    done.push(*id);
                }
            }
            self.dirty.insert(*id);
        }
        for id in done {
            self.running.remove(&id);
            if let Some(s) = self.jobs.get_mut(&id) {
                s.segment = None;
            }
        }
    }
}

impl ClusterManager for SimBackend {
    fn cluster_events(&mut self, _round: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError> {
        Ok(Vec::new())
    }
}

impl MetricCollector for SimBackend {
    fn collect_metrics(
        &mut self,
        _round: &RoundInfo,
        jobs: &mut JobState,
    ) -> Result<(), BackendError> {
        for id in std::mem::take(&mut self.dirty) {
            let (Some(s), Some(job)) = (self.jobs.get(&id), jobs.get_mut(id)) else {
                continue;
            };
            job.progress = if s.duration_s > 0.0 {
                (s.done_s / s.duration_s).min(1.0)
            } else {
                1.0
            };
            job.attained_service_gpu_s = s.attained_gpu_s;
            job.run_time_s = s.run_time_s;
            if let Some(t) = s.finished_at {
                job.status = JobStatus::Finished;
                job.finish_s = Some(t);
                job.progress = 1.0;
            }
        }
        Ok(())
    }
}

impl JobSource for SimBackend {
    fn poll_submissions(&mut self, round: &RoundInfo) -> Result<Vec<JobSpec>, BackendError> {
        let mut out = Vec::new();
        while self.next < self.trace.len()
            && self.trace[self.next].spec.arrival_s <= round.now_s + 1e-9
        {
            let j = &self.trace[self.next];
            self.jobs.insert(
                j.spec.id,
                SimJobState {
                    duration_s: j.duration_s(),
                    requested_gpus: j.spec.requested_gpus,
                    done_s: 0.0,
                    attained_gpu_s: 0.0,
                    run_time_s: 0.0,
                    segment: None,
                    finished_at: None,
                    started: false,
                },
            );
            out.push(j.spec.clone());
            self.next += 1;
        }
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.next >= self.trace.len()
    }
}

impl PreemptionMechanism for SimBackend {
    fn preempt(&mut self, _round: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        // Checkpointed: progress so far is kept.
        self.running.remove(&job.id());
        if let Some(s) = self.jobs.get_mut(&job.id()) {
            s.segment = None;
        }
        Ok(())
    }
}

impl LaunchMechanism for SimBackend {
    fn launch(
        &mut self,
        round: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        _batch_size: Option<u32>,
    ) -> Result<(), BackendError> {
        let s = self
            .jobs
            .get_mut(&job.id())
            .ok_or_else(|| BackendError(format!("{} is not a submitted job", job.id())))?;
        let overhead = if s.started {
            self.cfg.restart_overhead_s
        } else {
            self.cfg.launch_overhead_s
        };
        s.started = true;
        s.segment = Some(Segment {
            gpus: gpus.len() as u32,
            held_since_s: round.now_s,
            progress_from_s: round.now_s + overhead,
        });
        self.running.insert(job.id());
        Ok(())
    }

    fn reconfigure(
        &mut self,
        _round: &RoundInfo,
        _job: &Job,
        _batch_size: u32,
    ) -> Result<(), BackendError> {
        // Duration-based jobs do not depend on the batch size.
        Ok(())
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
        self.advance(start, self.now());
        if idle && self.running.is_empty() && self.next < self.trace.len() {
            // Nothing admitted or running: jump to the round of the next arrival.
            let arrival = self.trace[self.next].spec.arrival_s;
            let tick = (arrival / self.round_s).ceil() as u64;
            self.tick = self.tick.max(tick);
        }
        Ok(())
    }
}
