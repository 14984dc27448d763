//! The simulator as a fork of a live scheduler (forecasts, synthesis,
//! `blox whatif`): jobs taken over where they are, and the clock started at
//! the live scheduler's time.

use super::progress::{Segment, SimJobState};
use super::SimBackend;
use blox_core::*;

impl SimBackend {
    /// Takes over a job from a live scheduler (a synthesizer's fork): `job` as
    /// the scheduler knows it, `duration_s` its estimated run time at the
    /// requested GPUs, of which the fraction `job.progress` is done. A running
    /// job keeps running on its GPUs from `now_s` without a restart.
    pub fn adopt(&mut self, job: &Job, duration_s: f64, now_s: f64) {
        let id = job.id();
        let done_s = duration_s * job.progress.clamp(0.0, 1.0);
        let mut st = SimJobState {
            duration_s,
            requested_gpus: job.requested_gpus(),
            done_s,
            attained_gpu_s: job.attained_service_gpu_s,
            startup_gpu_s: job.startup_gpu_s,
            startup_s: job.startup_s,
            run_time_s: job.run_time_s,
            // Its next launch is a relaunch: its own last one's start-up if
            // that was a relaunch too, else at least what relaunches cost
            // here (they wait for the jobs they replace to stop).
            own_startup_s: job.last_startup_s.map(|s| {
                if job.launches > 1 {
                    s
                } else {
                    s.max(self.cfg.restart_overhead_s)
                }
            }),
            segment: None,
            finished_at: None,
            started: job.launches > 0,
            profile: None,
            converge_at: None,
            type_speed: 1.0,
            stopped_at: None,
            saved: None,
            at_launch: None,
            unreported_first: None,
        };
        // (A job without GPUs runs on its node's CPUs.)
        if job.is_running() && (!job.allocation.is_empty() || job.host_node.is_some()) {
            st.type_speed = self.speed_factor(job, &job.allocation);
            // A fork continues a running job where it is: still starting
            // until its expected first iteration, or already past it.
            let first = match job.first_iteration_s {
                Some(f) => f.min(now_s),
                None => {
                    // Its start-up as this simulator would model it.
                    let since = job.last_launch_s.unwrap_or(now_s);
                    let overhead = job.last_startup_s.unwrap_or(if job.launches > 1 {
                        self.cfg.restart_overhead_s
                    } else {
                        self.cfg.launch_overhead_s
                    });
                    since + overhead
                }
            };
            // Its last checkpoint, with the work it held then (the work
            // since, at the rate it runs now, is taken off).
            let saved_at = job.last_checkpoint_s(now_s).unwrap_or(first);
            let held = match st.requested_gpus {
                0 => 1.0,
                r => job.allocation.len() as f64 / r as f64,
            };
            let speed = held * st.type_speed;
            st.save(job.checkpoint_interval_s(), saved_at);
            if let Some(saved) = st.saved.as_mut() {
                saved.done_s = (done_s - (now_s - saved_at).max(0.0) * speed).max(0.0);
            }
            st.segment = Some(Segment {
                gpus: job.allocation.len() as u32,
                held_since_s: now_s,
                progress_from_s: first.max(now_s),
                first_iteration_s: first,
                nodes: match (job.allocation.as_slice(), job.host_node) {
                    ([], Some(n)) => Box::new([n]) as Box<[NodeId]>,
                    (gpus, _) => self.nodes_of(gpus),
                },
            });
            self.running.insert(id);
        }
        self.jobs.insert(id, st);
    }

    /// Credits the adopted running jobs with the progress they made from
    /// `since_s` (when the live scheduler measured it) to the fork's start,
    /// as if they had run here; one that would have finished meanwhile
    /// finishes at the fork's first round.
    pub fn catch_up(&mut self, since_s: f64) {
        let now = self.now();
        if since_s >= now {
            return;
        }
        for id in &self.running {
            if let Some(seg) = self.jobs.get_mut(id).and_then(|s| s.segment.as_mut()) {
                seg.held_since_s = seg.held_since_s.min(since_s);
                seg.progress_from_s = seg.first_iteration_s.max(since_s);
            }
        }
        self.advance(since_s, now);
    }

    /// Starts the clock at `t` (a fork of a live scheduler).
    pub fn start_at(&mut self, t: f64) {
        self.t0 = t;
        self.tick = 0;
    }

    /// Nodes that join (`NodeAdded`, numbered after every node before) and
    /// leave (`NodeRemoved`) at these times, on the replay's clock: a
    /// history's cluster as it changed.
    pub fn plan_nodes(&mut self, mut changes: Vec<(f64, ClusterEvent)>) {
        // Stable: nodes joining at one time keep their order.
        changes.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.planned = changes.into();
    }
}
