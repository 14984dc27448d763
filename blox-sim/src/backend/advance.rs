//! A round of simulated time: every running job advances, those run by
//! their profiles in parallel.

use super::progress::SimJobState;
use super::SimBackend;
use blox_core::JobId;
use rayon::prelude::*;

impl SimBackend {
    /// Advances every running job from `start` to `end`.
    pub(super) fn advance(&mut self, start: f64, end: f64) {
        // Jobs run by their profiles advance first, in parallel: each
        // touches only its own state, and its agent's refits are most of a
        // round's simulation. What they report is then taken in job order.
        let mut profiled: Vec<(JobId, Option<f64>)> = if self.profiled {
            self.jobs
                .iter_mut()
                .filter(|(_, s)| s.profile.is_some() && s.segment.is_some())
                .collect::<Vec<_>>()
                .into_par_iter()
                .map(|(id, s)| {
                    let seg = s.segment.as_ref().expect("running job has a segment");
                    let from = seg.progress_from_s.max(start);
                    let p = s.profile.as_mut().expect("filtered");
                    (*id, p.advance(from, (end - from).max(0.0)))
                })
                .collect()
        } else {
            Vec::new()
        };
        profiled.sort_unstable_by_key(|x| x.0);
        let round = Round {
            start,
            end,
            quantized: self.cfg.round_quantized,
            profiled: &profiled,
        };
        let mut done = Vec::new();
        // A job runs exactly while it has a segment (`running` is the set
        // of those), and its step reads and writes its own state only, so
        // the order jobs are taken in changes nothing. While most known
        // jobs run (a cluster that keeps up), their states are read in
        // memory order instead of looked up one by one; with a long queue,
        // each running job's is looked up.
        if self.jobs.len() <= 2 * self.running.len() {
            for (id, s) in self.jobs.iter_mut() {
                if s.segment.is_some() {
                    round.step(*id, s, &mut done);
                }
            }
        } else {
            for id in &self.running {
                let s = self.jobs.get_mut(id).expect("running job is known");
                round.step(*id, s, &mut done);
            }
        }
        // Reported in id order: the collection's sort finds one run.
        self.dirty.extend(self.running.iter().copied());
        for id in done {
            self.running.remove(&id);
            if let Some(s) = self.jobs.get_mut(&id) {
                s.segment = None;
            }
        }
    }
}

/// The round being simulated, and what the jobs run by their profiles
/// reported for it (by id).
struct Round<'a> {
    start: f64,
    end: f64,
    quantized: bool,
    profiled: &'a [(JobId, Option<f64>)],
}

impl Round<'_> {
    /// Advances one running job over the round; one that finishes in it is
    /// pushed on `done`.
    fn step(&self, id: JobId, s: &mut SimJobState, done: &mut Vec<JobId>) {
        let (start, end) = (self.start, self.end);
        let seg = s.segment.as_ref().expect("running job has a segment");
        // (A job without GPUs runs at its own pace on its node's CPUs.)
        let held = match s.requested_gpus {
            0 => 1.0,
            r => seg.gpus as f64 / r as f64,
        };
        let speed = held * s.type_speed;
        let from = seg.progress_from_s.max(start);
        let held_from = seg.held_since_s.max(start);
        let first = seg.first_iteration_s;
        let gpus = seg.gpus as f64;
        let before = s.done_s;
        let units_before = s
            .profile
            .as_ref()
            .map_or((0.0, 0.0), |p| (p.progress, p.samples));
        // Held time up to `stop`: start-up before the first iteration,
        // productive (attained) service after it.
        let account = |s: &mut SimJobState, stop: f64| {
            let starting = (stop.min(first) - held_from).max(0.0);
            let productive = (stop - held_from.max(first)).max(0.0);
            s.run_time_s += (stop - held_from).max(0.0);
            s.startup_s += starting;
            s.startup_gpu_s += starting * gpus;
            s.attained_gpu_s += productive * gpus;
        };
        if let Some(p) = s.profile.as_mut() {
            let at = self
                .profiled
                .binary_search_by_key(&id, |x| x.0)
                .expect("advanced above");
            let finish = self.profiled[at].1;
            let stop = finish.unwrap_or(end);
            s.done_s = p.progress;
            account(s, stop);
            if let Some(t) = finish {
                s.finished_at = Some(t);
                done.push(id);
            }
        } else if self.quantized {
            // Blox: the whole round is credited to every job that ran in it.
            s.done_s += (end - from).max(0.0) * speed;
            account(s, end);
            if s.done_s >= s.duration_s - 1e-9 {
                s.finished_at = Some(end);
                done.push(id);
            }
        } else {
            let need = s.remaining_s() / speed;
            let finish = from + need;
            let stop = if finish <= end { finish } else { end };
            s.done_s += (stop - from).max(0.0) * speed;
            account(s, stop);
            if finish <= end {
                s.done_s = s.duration_s;
                s.finished_at = Some(finish.max(held_from));
                done.push(id);
            }
        }
        if s.finished_at.is_none() {
            s.note_checkpoints(first, from, end, before, units_before);
        }
    }
}
