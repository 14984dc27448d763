//! What the simulator does around each round of its loop (run by
//! [`blox_core::runner`]): its stop condition (`[run]`'s limits, the
//! tracked jobs), the round and ended-job tables, the decision log, and the
//! checks that a run can still progress.

use crate::backend::{SimBackend, SimConfig};
use crate::report::{JobRow, RoundRow, StopReason};
use crate::run::{SimError, FRUITLESS_INTERRUPTIONS, STALL_ROUNDS};
use blox_core::runner::Driver;
use blox_core::*;

/// What a simulation keeps beside its loop and backend.
#[derive(Default)]
pub(crate) struct RunState {
    pub rounds: Vec<RoundRow>,
    pub tracked_total: usize,
    pub tracked_ended: usize,
    pub seen_ended: usize,
    /// Rows of the ended jobs the loop no longer keeps whole
    /// ([`crate::run::ENDED_KEPT`]), in the order they ended.
    pub ended_rows: Vec<JobRow>,
    pub stalled_rounds: u64,
    /// Per job: its interruptions and useful GPU-seconds when it last kept
    /// more work than before (`[failures]`; [`SimError::NoProgress`]).
    pub kept_work: std::collections::HashMap<JobId, (u32, f64)>,
    /// Where the loop's decisions go, when
    /// [`crate::Simulation::log_events`] was called.
    pub events: Option<crate::log_writer::LogWriter>,
    /// The decisions kept in memory, when
    /// [`crate::Simulation::keep_events`] was called.
    pub kept: Option<Vec<blox_core::round::events::Event>>,
}

/// The simulator's driver: a simulation's parts other than its loop and
/// backend, borrowed for a step.
pub(crate) struct SimRounds<'a> {
    pub run: &'a RunConfig,
    pub sim: &'a SimConfig,
    pub ended_kept: usize,
    pub st: &'a mut RunState,
}

/// Why the run stops now, if its stop condition holds.
pub(crate) fn stop_reason(
    run: &RunConfig,
    st: &RunState,
    lp: &RoundLoop,
    backend: &SimBackend,
) -> Option<StopReason> {
    if run.track_jobs.is_some() && st.tracked_ended >= st.tracked_total {
        return Some(StopReason::Completed);
    }
    if blox_core::runner::all_done(lp, backend) {
        return Some(StopReason::Completed);
    }
    if let Some(m) = run.max_rounds {
        if lp.rounds() >= m {
            return Some(StopReason::Limit(format!("run.max_rounds = {m}")));
        }
    }
    if let Some(t) = run.max_time_s.map(|t| t.get()) {
        if backend.now_s() >= t {
            return Some(StopReason::Limit(format!("run.max_time_s = {t}")));
        }
    }
    None
}

impl Driver<SimBackend> for SimRounds<'_> {
    type Stop = StopReason;
    type Error = SimError;

    fn stop(&mut self, lp: &RoundLoop, backend: &SimBackend) -> Option<StopReason> {
        stop_reason(self.run, self.st, lp, backend)
    }

    fn after_round(
        &mut self,
        mut r: RoundReport,
        lp: &mut RoundLoop,
        backend: &mut SimBackend,
    ) -> Result<(), SimError> {
        let finished = lp.jobs.finished();
        for j in &finished[self.st.seen_ended..] {
            if self.is_tracked(j.id()) {
                self.st.tracked_ended += 1;
            }
        }
        let ended_now = finished.len() - self.st.seen_ended;
        self.st.seen_ended = finished.len();
        self.compact_ended(lp, ended_now);
        let stuck = r.running_jobs == 0
            && r.busy_gpus == 0
            && r.queued_jobs + r.waiting_jobs > 0
            && !backend.has_pending_events();
        // Nothing can change any more (no node to come back or be added):
        // the jobs the placement could never place are rejected next round,
        // saying why, and the run ends with the others' results.
        if stuck
            && r.queued_jobs == 0
            && !lp.cluster.is_elastic()
            && lp
                .waiting()
                .iter()
                .all(|j| lp.placement_hold(j.id()).is_some())
        {
            lp.reject_held_next_round();
        }
        self.st.stalled_rounds = if stuck { self.st.stalled_rounds + 1 } else { 0 };
        if self.st.stalled_rounds >= STALL_ROUNDS {
            return Err(stalled(lp, &r));
        }
        if backend.failure_counts().is_some() {
            self.check_progress(lp, r.time_s)?;
        }
        if let Some(k) = &mut self.st.kept {
            k.extend(r.events.iter().cloned());
        }
        if let Some(log) = &mut self.st.events {
            log.send(std::mem::take(&mut r.events))?;
        }
        self.st.rounds.push(RoundRow::from(r));
        Ok(())
    }

    fn failed(&mut self, lp: &RoundLoop, source: LoopError) -> SimError {
        SimError::Loop {
            round: lp.rounds(),
            source,
        }
    }
}

impl SimRounds<'_> {
    fn is_tracked(&self, id: JobId) -> bool {
        match self.run.track_jobs {
            Some([a, b]) => (a..=b).contains(&id.0),
            None => true,
        }
    }

    /// Turns the oldest ended records into rows once the loop holds twice
    /// what it keeps (`ended_kept`, and every job that ended this round): a
    /// row is half a `Job`, and the run's end has nothing left to convert.
    fn compact_ended(&mut self, lp: &mut RoundLoop, ended_now: usize) {
        let keep = self.ended_kept.max(ended_now);
        if lp.jobs.finished().len() < keep.saturating_mul(2) {
            return;
        }
        let (quantized, round_s) = (self.sim.round_quantized, lp.round_s());
        let old = lp.jobs.drain_finished_oldest(keep);
        let n = old.len();
        self.st
            .ended_rows
            .extend(old.map(|j| JobRow::from_job(&j, quantized, round_s)));
        self.st.seen_ended -= n;
    }

    /// Stops a run in which a job keeps failing without keeping work.
    fn check_progress(&mut self, lp: &RoundLoop, now_s: f64) -> Result<(), SimError> {
        for j in lp.jobs.active() {
            if j.interruptions == 0 {
                continue;
            }
            // (A job without GPUs attains no GPU-seconds: its progress is
            // the work it keeps.)
            let useful = if j.without_gpus() {
                j.progress
            } else {
                j.attained_service_gpu_s - j.lost_work_gpu_s
            };
            let mark = self
                .st
                .kept_work
                .entry(j.id())
                .or_insert((j.interruptions, useful));
            if useful > mark.1 + 1e-6 {
                *mark = (j.interruptions, useful);
            } else if j.interruptions >= mark.0 + FRUITLESS_INTERRUPTIONS {
                return Err(SimError::NoProgress {
                    job: j.id().0,
                    gpus: j.requested_gpus(),
                    interruptions: j.interruptions - mark.0,
                    time_h: now_s / 3600.0,
                });
            }
        }
        Ok(())
    }
}

fn stalled(lp: &RoundLoop, r: &RoundReport) -> SimError {
    let mut waiting: Vec<String> = lp
        .jobs
        .queued()
        .chain(lp.waiting())
        .take(5)
        .map(|j| {
            let state = if j.status == JobStatus::Submitted {
                "waiting for admission"
            } else {
                "admitted"
            };
            format!("{} ({} GPUs, {state})", j.id(), j.requested_gpus())
        })
        .collect();
    let n = r.queued_jobs + r.waiting_jobs;
    if n > waiting.len() {
        waiting.push(format!("{} more", n - waiting.len()));
    }
    // The first one's wait in the loop's words (a placement's reason for
    // holding it back, what it waits for).
    let first = lp.jobs.queued().chain(lp.waiting()).next();
    let words = first
        .and_then(|j| Some((j.id(), lp.explain_wait(j)?)))
        .map(|(id, w)| format!("; {id}: {w}"))
        .unwrap_or_default();
    SimError::Stalled {
        round: r.round,
        time_h: r.time_s / 3600.0,
        gpus: r.total_gpus,
        detail: format!("{n} jobs wait: {}{words}", waiting.join(", ")),
        policies: lp.policies.names.clone(),
    }
}
