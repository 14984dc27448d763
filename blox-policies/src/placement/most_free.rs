//! Most-free-node placement, the topology-oblivious greedy of the Pollux
//! artifact's Tiresias and Optimus baselines (`pollux-data.md` §8.1–8.2).
//!
//! Running jobs whose GPU count is unchanged keep their GPUs; running jobs left
//! out of the schedule are preempted and those whose count changed are moved.
//! Every job to place repeatedly takes `min(free GPUs on the node with the most
//! free GPUs, still needed)` from that node (lowest node id on ties), in
//! schedule order or, with `order = "fewest-gpus-first"` (Optimus), in
//! increasing GPU count. GPUs are listed in the order taken.

use blox_core::*;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Parameters: `order` = `schedule` (default) or `fewest-gpus-first`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MostFree {
    #[serde(default)]
    pub order: Order,
}

/// The order in which jobs take GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    #[default]
    Schedule,
    FewestGpusFirst,
}

impl PlacementPolicy for MostFree {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let mut out = Placement::default();
        let wanted: HashMap<JobId, u32> =
            schedule.entries.iter().map(|d| (d.job, d.gpus)).collect();
        // Free GPUs per node after keeping the unchanged running jobs.
        let mut taken: HashSet<GpuId> = HashSet::new();
        for job in jobs.running() {
            match wanted.get(&job.id()) {
                Some(&g) if g as usize == job.allocation.len() => {
                    taken.extend(job.allocation.iter().copied())
                }
                Some(_) => {}
                None => out.preempt.push(job.id()),
            }
        }
        let mut free: Vec<(NodeId, Vec<GpuId>)> = cluster
            .nodes()
            .iter()
            .filter(|n| n.online)
            .map(|n| {
                (
                    n.id,
                    n.gpus
                        .iter()
                        .copied()
                        .filter(|g| !taken.contains(g) && !cluster.is_shared(*g))
                        .collect(),
                )
            })
            .collect();
        let mut todo: Vec<&Demand> = schedule
            .entries
            .iter()
            .filter(|d| {
                d.gpus > 0
                    && jobs
                        .get(d.job)
                        .is_some_and(|j| !(j.is_running() && j.allocation.len() == d.gpus as usize))
            })
            .collect();
        if self.order == Order::FewestGpusFirst {
            todo.sort_by_key(|d| d.gpus);
        }
        for d in todo {
            let total: usize = free.iter().map(|(_, g)| g.len()).sum();
            if total < d.gpus as usize {
                if jobs.get(d.job).is_some_and(|j| j.is_running()) {
                    out.preempt.push(d.job);
                }
                continue;
            }
            let mut gpus = Vec::with_capacity(d.gpus as usize);
            while gpus.len() < d.gpus as usize {
                let (_, node_free) = free
                    .iter_mut()
                    .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)))
                    .expect("enough free GPUs");
                let k = node_free.len().min(d.gpus as usize - gpus.len());
                gpus.extend(node_free.drain(..k));
            }
            out.launch.push(Assignment {
                job: d.job,
                gpus,
                batch_size: d.batch_size,
                host: None,
                share: None,
                node: None,
            });
        }
        out
    }
}

blox_core::register_placement!(
    "most-free",
    "greedy: take GPUs from the node with the most free GPUs (Pollux artifact's Tiresias/Optimus placement)",
    |p| Ok(Box::new(p.parse::<MostFree>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn takes_from_the_node_with_most_free_gpus_first() {
        let mut cluster = ClusterState::homogeneous(3, 4);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 3), &[0, 1, 2]);
        add(&mut state, &mut cluster, job(2, 0.0, 6), &[]);
        let schedule = Schedule::in_priority_order([
            state.get(JobId(1)).unwrap(),
            state.get(JobId(2)).unwrap(),
        ]);
        let p = MostFree::default().place(&info(0.0), &schedule, &state, &cluster);
        assert!(p.preempt.is_empty());
        // Nodes 1 and 2 have 4 free each: node 1 first (lowest id), then 2 from node 2.
        assert_eq!(p.launch.len(), 1);
        let ids: Vec<u32> = p.launch[0].gpus.iter().map(|g| g.0).collect();
        assert_eq!(ids, vec![4, 5, 6, 7, 8, 9]);
    }
}
