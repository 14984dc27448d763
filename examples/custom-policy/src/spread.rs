//! `spread`: each job's GPUs come from the nodes with the most free GPUs,
//! one at a time (the opposite of consolidation), through blox-core's
//! priority walk, which handles preemption and running jobs.

use blox_core::*;

/// The policy; its parameters are the priority walk's (`backfill`, `preempt`).
#[derive(Clone, Debug, Default)]
pub struct Spread {
    pub walk: WalkParams,
}

impl PlacementPolicy for Spread {
    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        priority_walk(&self.walk, schedule, jobs, cluster, |free, _job, n| {
            let mut left: Vec<(NodeId, u32)> = cluster
                .nodes()
                .iter()
                .filter(|node| node.online)
                .map(|node| (node.id, free.on_node(node.id)))
                .collect();
            let mut taken: Vec<GpuId> = Vec::new();
            while (taken.len() as u32) < n {
                // The node with the most free GPUs left; lowest id on ties.
                let (node, count) = left
                    .iter_mut()
                    .max_by_key(|(id, c)| (*c, std::cmp::Reverse(*id)))?;
                if *count == 0 {
                    return None;
                }
                let gpu = free.gpus_on(*node).find(|g| !taken.contains(g))?;
                taken.push(gpu);
                *count -= 1;
            }
            Some(taken)
        })
    }
}

blox_core::register_placement!(
    "spread",
    "example crate: GPUs from the nodes with the most free GPUs, one at a time",
    |params| Ok(Box::new(Spread {
        walk: params.parse()?
    }))
);
