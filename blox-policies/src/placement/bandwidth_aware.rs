//! Bandwidth-aware intra-node placement (Blox, EuroSys'24, §5.3 and Table 4,
//! after Blink's observation that GPU pairs inside a node differ in bandwidth,
//! e.g. on p3.8xlarge GPU 0–3 has twice the bandwidth of GPU 0–1).
//!
//! Nodes are chosen as `consolidated` does (fewest nodes, best-fit node, Blox's
//! preemption walk). Inside the chosen node, a multi-GPU job gets the free GPUs
//! with the largest aggregate pairwise bandwidth, read from the node's
//! `gpu_bandwidth_gbps` matrix (every pair at `intra_node_bw_gbps` without
//! one). Jobs spanning nodes are placed as `consolidated` places them.

use super::consolidated::fewest_nodes;
use blox_core::walk::{priority_walk, FreeGpus, WalkParams};
use blox_core::*;

/// Parameters: `backfill` (false), `preempt` (true), as `consolidated`.
#[derive(Clone, Debug, Default)]
pub struct BandwidthAware {
    pub params: WalkParams,
}

/// Sum of the bandwidths of every pair of `gpus` (all on one node), GB/s.
pub fn aggregate_bandwidth(cluster: &ClusterState, gpus: &[GpuId]) -> f64 {
    let local: Vec<(NodeId, u32)> = gpus
        .iter()
        .filter_map(|g| cluster.gpu(*g))
        .map(|g| (g.node, g.local_id))
        .collect();
    let mut sum = 0.0;
    for (i, a) in local.iter().enumerate() {
        for b in &local[i + 1..] {
            if a.0 == b.0 {
                if let Some(node) = cluster.nodes().get(a.0.index()) {
                    sum += node.spec.pair_bandwidth(a.1, b.1);
                }
            }
        }
    }
    sum
}

/// The `n` GPUs among `candidates` (one node) with the largest aggregate
/// bandwidth: exhaustive when the choice is small, else greedy from the best
/// pair, adding the GPU that adds the most bandwidth.
fn best_subset(cluster: &ClusterState, candidates: &[GpuId], n: usize) -> Vec<GpuId> {
    if n <= 1 || candidates.len() <= n {
        return candidates.iter().copied().take(n).collect();
    }
    let subsets = binomial(candidates.len(), n);
    if subsets <= 5_000 {
        let mut best: Option<(f64, Vec<GpuId>)> = None;
        let mut pick: Vec<usize> = (0..n).collect();
        loop {
            let set: Vec<GpuId> = pick.iter().map(|&i| candidates[i]).collect();
            let bw = aggregate_bandwidth(cluster, &set);
            if best.as_ref().is_none_or(|(b, _)| bw > *b) {
                best = Some((bw, set));
            }
            // Next combination in lexicographic order.
            let Some(i) = (0..n).rev().find(|&i| pick[i] < candidates.len() - n + i) else {
                break;
            };
            pick[i] += 1;
            for k in i + 1..n {
                pick[k] = pick[k - 1] + 1;
            }
        }
        return best.map(|b| b.1).unwrap_or_default();
    }
    let mut chosen: Vec<GpuId> = Vec::with_capacity(n);
    let mut rest: Vec<GpuId> = candidates.to_vec();
    while chosen.len() < n {
        let (i, _) = rest
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mut with = chosen.clone();
                with.push(*g);
                (i, aggregate_bandwidth(cluster, &with))
            })
            .fold((0, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        chosen.push(rest.remove(i));
    }
    chosen
}

fn binomial(n: usize, k: usize) -> usize {
    (0..k).fold(1usize, |acc, i| acc.saturating_mul(n - i) / (i + 1))
}

/// Consolidated node choice, bandwidth-aware GPU choice inside a node.
pub fn choose(free: &FreeGpus, n: u32) -> Option<Vec<GpuId>> {
    let picked = fewest_nodes(free, n)?;
    let node = free.cluster.gpu(picked[0])?.node;
    let one_node = picked
        .iter()
        .all(|g| free.cluster.gpu(*g).is_some_and(|x| x.node == node));
    if !one_node || n < 2 {
        return Some(picked);
    }
    let candidates: Vec<GpuId> = free.gpus_on(node).collect();
    Some(best_subset(free.cluster, &candidates, n as usize))
}

impl PlacementPolicy for BandwidthAware {
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
        priority_walk(&self.params, schedule, jobs, cluster, |free, _job, n| {
            choose(free, n)
        })
    }
}

blox_core::register_placement!(
    "bandwidth-aware",
    "consolidated nodes; inside a node the GPUs with the most pairwise bandwidth (Blox §5.3)",
    |p| Ok(Box::new(BandwidthAware { params: p.parse()? }))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    /// A p3.8xlarge-like node: pairs 0–3 and 1–2 at 50 GB/s, others at 25.
    fn cluster() -> ClusterState {
        let mut spec = NodeSpec::with_gpus(4);
        let (hi, lo) = (50.0, 25.0);
        spec.gpu_bandwidth_gbps = vec![
            vec![0.0, lo, lo, hi],
            vec![lo, 0.0, hi, lo],
            vec![lo, hi, 0.0, lo],
            vec![hi, lo, lo, 0.0],
        ];
        let mut c = ClusterState::new();
        c.add_node(spec);
        c
    }

    #[test]
    fn a_two_gpu_job_gets_a_high_bandwidth_pair() {
        let cluster = cluster();
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, job(1, 0.0, 2), &[]);
        let schedule = Schedule::in_priority_order([state.get(JobId(1)).unwrap()]);
        let p = BandwidthAware::default().place(&info(0.0), &schedule, &state, &cluster);
        let mut ids: Vec<u32> = p.launch[0].gpus.iter().map(|g| g.0).collect();
        ids.sort();
        // First-free would give {0, 1} at 25 GB/s; the best pair is {0, 3}.
        assert_eq!(ids, vec![0, 3]);
        assert_eq!(aggregate_bandwidth(&cluster, &p.launch[0].gpus), 50.0);
    }

    #[test]
    fn the_best_remaining_pair_is_found_when_some_gpus_are_busy() {
        let mut cluster = cluster();
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[0]);
        add(&mut state, &mut cluster, job(2, 1.0, 2), &[]);
        let schedule = Schedule::in_priority_order([
            state.get(JobId(1)).unwrap(),
            state.get(JobId(2)).unwrap(),
        ]);
        let p = BandwidthAware::default().place(&info(0.0), &schedule, &state, &cluster);
        let mut ids: Vec<u32> = p.launch[0].gpus.iter().map(|g| g.0).collect();
        ids.sort();
        assert_eq!(ids, vec![1, 2]);
    }
}
