//! Shortest Remaining Time First: the job closest to completion runs first
//! (Blox, EuroSys'24, §4.1 and §5.2, where SRTF is one of the synthesizer's
//! candidate scheduling policies). It needs each job's expected run time (from the
//! trace — an oracle assumption); jobs without one go last, in arrival order.

use blox_core::*;
use serde::Deserialize;

/// Orders runnable jobs by remaining run time = duration × (1 − progress).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Srtf {
    /// The last round's order, where this round's sort starts.
    #[serde(skip)]
    order: super::KeptOrder,
}

impl SchedulingPolicy for Srtf {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, _round: &RoundInfo, jobs: &JobState, _c: &ClusterState) -> Schedule {
        // `by_remaining_time`, keys read once.
        let order = self.order.sort(jobs.runnable(), |j| {
            j.expected_remaining_s().unwrap_or(f64::INFINITY)
        });
        Schedule::in_priority_order(order)
    }

    fn sort_key(&self, job: &Job, _jobs: &JobState) -> Option<String> {
        Some(match job.expected_remaining_s() {
            Some(r) => format!("{:.2} h remaining", r / 3600.0),
            None => "remaining time unknown (goes last)".into(),
        })
    }
}

/// Least expected remaining run time first; unknown last; ties by arrival.
pub fn by_remaining_time(a: &Job, b: &Job) -> std::cmp::Ordering {
    let ra = a.expected_remaining_s().unwrap_or(f64::INFINITY);
    let rb = b.expected_remaining_s().unwrap_or(f64::INFINITY);
    ra.total_cmp(&rb)
        .then(a.arrival_s().total_cmp(&b.arrival_s()))
        .then(a.id().cmp(&b.id()))
}

blox_core::register_scheduling!(
    "srtf",
    "shortest remaining time first, from the trace's durations (Blox §4.1, §5.2)",
    |p| Ok(Box::new(p.parse::<Srtf>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn job_with_least_remaining_time_runs_first() {
        let mut cluster = ClusterState::homogeneous(1, 4);
        let mut state = JobState::new();
        let mut long_half_done = job(1, 0.0, 1);
        long_half_done.spec.expected_duration_s = Some(1000.0);
        long_half_done.progress = 0.5; // 500 s left
        let mut short = job(2, 10.0, 1);
        short.spec.expected_duration_s = Some(400.0);
        let unknown = job(3, 0.0, 1);
        add(&mut state, &mut cluster, long_half_done, &[0]);
        add(&mut state, &mut cluster, short, &[]);
        add(&mut state, &mut cluster, unknown, &[]);
        let s = Srtf::default().schedule(&info(0.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(2), JobId(1), JobId(3)]);
    }
}
