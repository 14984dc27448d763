//! Least Attained Service (LAS): run the jobs that have received the least GPU-time
//! first. Blox, EuroSys'24, §4.1 and Table 7; Tiresias, NSDI'19, §3.1 (LAS with
//! attained service measured in GPU-seconds, the "2D" in 2D-LAS).

use blox_core::*;
use serde::Deserialize;

/// Orders runnable jobs by attained service (GPU-seconds), earliest arrival on ties.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Las {
    /// The last round's order, where this round's sort starts.
    #[serde(skip)]
    order: super::KeptOrder,
}

impl SchedulingPolicy for Las {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, _round: &RoundInfo, jobs: &JobState, _c: &ClusterState) -> Schedule {
        // `by_attained_service`, keys read once.
        let order = self
            .order
            .sort(jobs.runnable(), |j| j.attained_service_gpu_s);
        Schedule::in_priority_order(order)
    }

    fn sort_key(&self, job: &Job, _jobs: &JobState) -> Option<String> {
        Some(format!(
            "attained {}",
            blox_core::wait::gpu_time(job.attained_service_gpu_s)
        ))
    }
}

/// Least attained (productive) service first, then earliest arrival, then
/// lowest id. Time a job spends starting does not count: a job that is still
/// importing and initialising has received no service.
pub fn by_attained_service(a: &Job, b: &Job) -> std::cmp::Ordering {
    a.attained_service_gpu_s
        .total_cmp(&b.attained_service_gpu_s)
        .then(a.arrival_s().total_cmp(&b.arrival_s()))
        .then(a.id().cmp(&b.id()))
}

blox_core::register_scheduling!(
    "las",
    "least attained service (GPU-seconds) first (Blox §4.1, Tiresias §3.1)",
    |p| Ok(Box::new(p.parse::<Las>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn job_with_least_attained_service_runs_first() {
        let mut cluster = ClusterState::homogeneous(1, 4);
        let mut state = JobState::new();
        let mut old = job(1, 0.0, 1);
        old.attained_service_gpu_s = 3600.0;
        let mut mid = job(2, 5.0, 2);
        mid.attained_service_gpu_s = 600.0;
        add(&mut state, &mut cluster, old, &[0]);
        add(&mut state, &mut cluster, mid, &[1, 2]);
        add(&mut state, &mut cluster, job(3, 9.0, 1), &[]);
        let s = Las::default().schedule(&info(0.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(3), JobId(2), JobId(1)]);
    }
}
