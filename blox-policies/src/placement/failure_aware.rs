//! Failure-aware placement: large gangs avoid nodes with
//! a bad recent history. A job interrupted by any one of its nodes fails
//! with the sum of their rates, so the nodes that failed lately (lemons
//! fail again: Kokolis et al., HPCA'25, arXiv 2410.21680, §V) cost a large
//! job the most. Jobs of at least `min_gpus` GPUs take nodes with the
//! fewest failures in the last `window_h` first; smaller jobs take the
//! others first, leaving the clean nodes to the gangs. Ties go to nodes
//! with more free GPUs (fewer nodes per job), then to lower ids. The
//! history is the loop's ([`blox_core::health`]): failures as the cluster
//! saw them, in the simulator and live alike.

use blox_core::walk::{priority_walk, WalkParams};
use blox_core::*;
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default)]
    backfill: bool,
    #[serde(default = "yes")]
    preempt: bool,
    /// Jobs this large avoid nodes that failed lately.
    #[serde(default = "d_min_gpus")]
    min_gpus: u32,
    /// How far back a node's failures count, hours.
    #[serde(default = "d_window_h")]
    window_h: Positive,
}

fn yes() -> bool {
    true
}
fn d_min_gpus() -> u32 {
    16
}
fn d_window_h() -> Positive {
    Positive::of(168.0)
}

/// Failure-aware placement. Parameters: `min_gpus` (16), `window_h` (168),
/// `backfill` (false), `preempt` (true).
#[derive(Clone, Debug)]
pub struct FailureAware {
    pub walk: WalkParams,
    pub min_gpus: u32,
    pub window_s: f64,
}

impl PlacementPolicy for FailureAware {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let health = cluster.health();
        let failures: Vec<usize> = cluster
            .nodes()
            .iter()
            .map(|n| health.failures_within(n.id, round.now_s, self.window_s))
            .collect();
        let (min_gpus, walk) = (self.min_gpus, self.walk.clone());
        priority_walk(&walk, schedule, jobs, cluster, |free, _job, n| {
            let large = n >= min_gpus;
            let mut nodes: Vec<(usize, u32, NodeId)> = cluster
                .nodes()
                .iter()
                .filter(|node| node.online)
                .map(|node| (failures[node.id.index()], free.on_node(node.id), node.id))
                .filter(|(_, f, _)| *f > 0)
                .collect();
            nodes.sort_by(|a, b| {
                let by_failures = if large { a.0.cmp(&b.0) } else { b.0.cmp(&a.0) };
                by_failures.then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2))
            });
            let chosen: Vec<GpuId> = nodes
                .iter()
                .flat_map(|(_, _, id)| free.gpus_on(*id))
                .take(n as usize)
                .collect();
            (chosen.len() == n as usize).then_some(chosen)
        })
    }
}

blox_core::register_placement!(
    "failure-aware",
    "large gangs on the nodes with the fewest recent failures, small jobs on the rest",
    |p| {
        let p: Params = p.parse()?;
        Ok(Box::new(FailureAware {
            walk: WalkParams {
                backfill: p.backfill,
                preempt: p.preempt,
            },
            min_gpus: p.min_gpus,
            window_s: p.window_h.get() * 3600.0,
        }))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn a_large_gang_avoids_the_node_that_failed_and_a_small_job_takes_it() {
        let mut cluster = ClusterState::homogeneous(3, 4);
        cluster.health_mut().note_failure(NodeId(0), 10.0);
        cluster.health_mut().down.clear();
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 8), &[]);
        add(&mut state, &mut cluster, job(2, 1.0, 2), &[]);
        let schedule = Schedule::in_priority_order([
            state.get(JobId(1)).unwrap(),
            state.get(JobId(2)).unwrap(),
        ]);
        let mut p = FailureAware {
            walk: WalkParams::default(),
            min_gpus: 8,
            window_s: 3600.0,
        };
        let out = p.place(&info(100.0), &schedule, &state, &cluster);
        let node_of = |g: &GpuId| cluster.node_of(*g).unwrap();
        let gang = &out.launch[0];
        assert!(gang.gpus.iter().all(|g| node_of(g) != NodeId(0)), "{out:?}");
        assert!(out.launch[1].gpus.iter().all(|g| node_of(g) == NodeId(0)));
        // Past the window, the node is as good as any: the gang packs from id 0.
        let out = p.place(&info(10_000.0), &schedule, &state, &cluster);
        assert!(out.launch[0].gpus.iter().any(|g| node_of(g) == NodeId(0)));
    }
}
