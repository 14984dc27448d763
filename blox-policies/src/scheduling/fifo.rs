//! First-in first-out: jobs run in arrival order (Blox, EuroSys'24, §4.1, Table 7).

use blox_core::*;
use serde::Deserialize;

/// Submission order: arrival time, then id (the order of every policy that
/// serves or lists jobs in the order they came; [`sort_by_arrival`] sorts by it).
pub fn by_arrival(a: &Job, b: &Job) -> std::cmp::Ordering {
    a.arrival_s()
        .total_cmp(&b.arrival_s())
        .then(a.id().cmp(&b.id()))
}

/// Sorts `order` by [`by_arrival`] (the same order: arrival and id are
/// unique together), reading each job once for its key instead of twice
/// per comparison: a live scheduler sorts a queue of 100,000 every round.
pub fn sort_by_arrival(order: &mut Vec<&Job>) {
    /// `f64::total_cmp`'s order as an unsigned integer's.
    fn ordered_bits(x: f64) -> u64 {
        let b = x.to_bits();
        if b >> 63 == 1 {
            !b
        } else {
            b | 1 << 63
        }
    }
    let mut keyed: Vec<(u64, JobId, &Job)> = order
        .iter()
        .map(|j| (ordered_bits(j.arrival_s()), j.id(), *j))
        .collect();
    keyed.sort_unstable_by_key(|k| (k.0, k.1));
    order.clear();
    order.extend(keyed.into_iter().map(|k| k.2));
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
        sort_by_arrival(&mut order);
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

    proptest::proptest! {
        /// The keyed sort gives `by_arrival`'s order: ties, negative
        /// zeros, infinities and NaNs included.
        #[test]
        fn the_keyed_sort_is_by_arrival(
            arrivals in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Strategy::prop_map(0u32..20, f64::from),
                    proptest::num::f64::ANY,
                    proptest::sample::select(vec![0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -f64::NAN]),
                ],
                0..60,
            ),
        ) {
            let jobs: Vec<Job> = arrivals
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    let mut j = job(1000 - i as u64, 0.0, 1);
                    j.spec.arrival_s = *a;
                    j
                })
                .collect();
            let mut want: Vec<&Job> = jobs.iter().collect();
            want.sort_by(|a, b| by_arrival(a, b));
            let mut got: Vec<&Job> = jobs.iter().collect();
            sort_by_arrival(&mut got);
            let ids = |v: &[&Job]| v.iter().map(|j| j.id()).collect::<Vec<_>>();
            proptest::prop_assert_eq!(ids(&got), ids(&want));
        }
    }
}
