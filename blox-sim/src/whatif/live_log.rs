//! What a live cluster's event log carries beyond a simulation's: the runs
//! of a scheduler that restarted, joined on the Unix clock its events
//! carry, and each job's measured start-up.

use blox_core::round::events::{Event, What};
use blox_core::JobId;
use std::collections::HashMap;

/// A live log's scheduler runs joined into one history.
pub(super) struct Joined {
    pub(super) events: Vec<Event>,
    /// Where each later run starts in `events`, and when (the joined
    /// clock) the run before it was last seen.
    pub(super) boundaries: Vec<(usize, f64)>,
    pub(super) note: String,
}

/// Joins the runs of a live log that spans scheduler restarts (`restarts`:
/// where each later run starts) on the Unix clock its events carry: a
/// later run's times and rounds move by its start's distance from the
/// first run's; a job it submitted again (it was restored from the job
/// table) and admitted again keeps its first `submitted` and `admitted`.
/// `None` when there is nothing to join or a run lacks Unix times (a
/// simulation's log, or one from before they were logged).
pub(super) fn join_runs(events: &[Event], restarts: &[usize], round_s: f64) -> Option<Joined> {
    if restarts.is_empty() {
        return None;
    }
    let starts: Vec<usize> = std::iter::once(0).chain(restarts.iter().copied()).collect();
    let ends: Vec<usize> = restarts.iter().copied().chain([events.len()]).collect();
    // Each run's Unix time at its clock's zero.
    let zero: Option<Vec<f64>> = starts
        .iter()
        .zip(&ends)
        .map(|(&a, &b)| {
            events[a..b]
                .iter()
                .find_map(|e| e.unix_s.map(|u| u - e.time_s))
        })
        .collect();
    let zero = zero?;
    let mut out = Vec::with_capacity(events.len());
    let mut boundaries = Vec::new();
    let mut submitted = std::collections::HashSet::new();
    let mut admitted = std::collections::HashSet::new();
    let mut again = 0;
    for (k, (&a, &b)) in starts.iter().zip(&ends).enumerate() {
        let shift = zero[k] - zero[0];
        let rounds = (shift / round_s).round().max(0.0) as u64;
        if k > 0 {
            let last = out.last().map_or(0.0, |e: &Event| e.time_s);
            boundaries.push((out.len(), last));
        }
        for e in &events[a..b] {
            let mut e = e.clone();
            e.time_s += shift;
            e.round += rounds;
            if let (Some(id), What::Submitted { spec }) = (e.job, &mut e.what) {
                if !submitted.insert(id) {
                    again += 1;
                    continue;
                }
                spec.arrival_s += shift;
            }
            if let (Some(id), What::Admitted) = (e.job, &e.what) {
                if !admitted.insert(id) {
                    continue;
                }
            }
            out.push(e);
        }
    }
    Some(Joined {
        events: out,
        boundaries,
        note: format!(
            "the log spans {} scheduler restarts, joined on the Unix clock its events carry ({again} jobs submitted again by a restarted scheduler count once); what a restart did (jobs it stopped and relaunched, jobs adopted) is in the log, not in a replay, so decisions about those jobs after it can differ",
            restarts.len()
        ),
    })
}

/// A live cluster's log (its events carry Unix times): each finished
/// job's mean start-up per launch, from its `finished` event's `startup_s`
/// (all its launches' start-up) over its launches in the log. None for a
/// simulation's log.
pub(super) fn measured_startups(events: &[Event]) -> HashMap<JobId, f64> {
    let mut out = HashMap::new();
    if !events.iter().any(|e| e.unix_s.is_some()) {
        return out;
    }
    let mut launches: HashMap<JobId, u32> = HashMap::new();
    for e in events {
        let Some(id) = e.job else { continue };
        match &e.what {
            What::Launched { .. } => *launches.entry(id).or_default() += 1,
            What::Finished {
                startup_s: Some(s), ..
            } => {
                if let Some(n) = launches.get(&id).filter(|n| **n > 0) {
                    if s.is_finite() && *s >= 0.0 {
                        out.insert(id, s / f64::from(*n));
                    }
                }
            }
            _ => {}
        }
    }
    out
}
