//! First-in first-out: jobs run in arrival order (Blox, EuroSys'24, §4.1, Table 7).

use blox_core::*;
use serde::Deserialize;

/// Submission order: arrival time, then id (shared by every policy that
/// serves or lists jobs in the order they came).
pub fn by_arrival(a: &Job, b: &Job) -> std::cmp::Ordering {
    a.arrival_s()
        .total_cmp(&b.arrival_s())
        .then(a.id().cmp(&b.id()))
}

/// Orders runnable jobs by arrival time, then id. No parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fifo {}

impl SchedulingPolicy for Fifo {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, _round: &RoundInfo, jobs: &JobState, _c: &ClusterState) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        order.sort_by(|a, b| by_arrival(a, b));
        Schedule::in_priority_order(order)
    }

    fn sort_key(&self, job: &Job, _jobs: &JobState) -> Option<String> {
        Some(format!("arrived at {:.0} s", job.arrival_s()))
    }
}

blox_core::register_scheduling!(
    "fifo",
    "first in, first out: by arrival time (Blox §4.1)",
    |p| { Ok(Box::new(p.parse::<Fifo>()?)) }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn earliest_arrival_comes_first_even_if_it_is_running_less() {
        let mut cluster = ClusterState::homogeneous(1, 4);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 50.0, 1), &[0]);
        add(&mut state, &mut cluster, job(2, 10.0, 1), &[]);
        add(&mut state, &mut cluster, job(3, 10.0, 1), &[]);
        let s = Fifo {}.schedule(&info(100.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(2), JobId(3), JobId(1)]);
        assert!(s.entries.iter().all(|d| d.gpus == 1));
    }
}
