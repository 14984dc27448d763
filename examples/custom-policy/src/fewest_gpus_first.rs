//! `fewest-gpus-first`: the jobs asking for the fewest GPUs run first
//! (earliest arrival on ties) — a "smallest job first" heuristic.

use blox_core::*;
use serde::Deserialize;

/// Parameters, read from the `[scheduling]` section.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FewestGpusFirst {
    /// Reverse the order (largest jobs first).
    #[serde(default)]
    pub largest_first: bool,
}

impl SchedulingPolicy for FewestGpusFirst {
    fn schedule(
        &mut self,
        _round: &RoundInfo,
        jobs: &JobState,
        _cluster: &ClusterState,
    ) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        order.sort_by(|a, b| {
            let by_size = a.requested_gpus().cmp(&b.requested_gpus());
            let by_size = if self.largest_first {
                by_size.reverse()
            } else {
                by_size
            };
            by_size
                .then(a.arrival_s().total_cmp(&b.arrival_s()))
                .then(a.id().cmp(&b.id()))
        });
        Schedule::in_priority_order(order)
    }
}

blox_core::register_scheduling!(
    "fewest-gpus-first",
    "example crate: jobs asking for the fewest GPUs first",
    |params| Ok(Box::new(params.parse::<FewestGpusFirst>()?))
);
