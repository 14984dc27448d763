//! Consolidated placement: a job's GPUs on as few nodes as possible — one node
//! when it fits (best fit: the node with the fewest free GPUs that still fits),
//! else the nodes with the most free GPUs first (Blox, EuroSys'24, §4.1,
//! "consolidated" placement; Tiresias, NSDI'19, §4 on consolidation), with Blox's
//! preemption of lower-priority jobs.

use blox_core::walk::{priority_walk, FreeGpus, WalkParams};
use blox_core::*;

/// Fewest-nodes placement. Parameters: `backfill` (false), `preempt` (true).
#[derive(Clone, Debug, Default)]
pub struct Consolidated {
    pub params: WalkParams,
}

/// Picks `n` GPUs on the fewest nodes.
pub fn fewest_nodes(free: &FreeGpus, n: u32) -> Option<Vec<GpuId>> {
    if free.count() < n {
        return None;
    }
    if n == 0 {
        return Some(Vec::new());
    }
    // One node if any can hold the whole job: best fit, the node with the
    // fewest free GPUs that still fit (lowest id among equals).
    let most = free.node_size_max();
    if let Some(node) = (n..=most).find_map(|c| free.nodes_with_free(c).next()) {
        return Some(free.gpus_on(node).take(n as usize).collect());
    }
    // Otherwise the emptiest nodes first (lowest id among equals).
    let mut out = Vec::with_capacity(n as usize);
    for c in (1..=most).rev() {
        for id in free.nodes_with_free(c) {
            for g in free.gpus_on(id) {
                if out.len() == n as usize {
                    return Some(out);
                }
                out.push(g);
            }
        }
    }
    (out.len() == n as usize).then_some(out)
}

impl PlacementPolicy for Consolidated {
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
            fewest_nodes(free, n)
        })
    }
}

blox_core::register_placement!(
    "consolidated",
    "fewest nodes per job (best-fit node), preempting from the bottom of the order (Blox §4.1)",
    |p| Ok(Box::new(Consolidated { params: p.parse()? }))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use proptest::prelude::*;

    #[test]
    fn job_goes_to_the_one_node_that_holds_it_whole() {
        // Node 0 has 3 free, node 1 has 4 free: a 3-GPU job fits best on node 0;
        // first-free would have split a 4-GPU job across both.
        let mut cluster = ClusterState::homogeneous(2, 4);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[0]);
        add(&mut state, &mut cluster, job(2, 1.0, 3), &[]);
        add(&mut state, &mut cluster, job(3, 2.0, 4), &[]);
        let order = [1, 2, 3].map(|i| state.get(JobId(i)).unwrap());
        let p = Consolidated::default().place(
            &info(0.0),
            &Schedule::in_priority_order(order),
            &state,
            &cluster,
        );
        assert_eq!(p.launch[0].gpus, vec![GpuId(1), GpuId(2), GpuId(3)]);
        assert_eq!(
            p.launch[1].gpus,
            vec![GpuId(4), GpuId(5), GpuId(6), GpuId(7)]
        );
    }

    #[test]
    fn job_larger_than_a_node_spans_the_fewest_nodes() {
        // Free: node0 1, node1 4, node2 3, node3 2 — a 7-GPU job takes nodes 1 and 2.
        let mut cluster = ClusterState::homogeneous(4, 4);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 3), &[0, 1, 2]);
        add(&mut state, &mut cluster, job(2, 0.0, 1), &[8]);
        add(&mut state, &mut cluster, job(3, 0.0, 2), &[12, 13]);
        add(&mut state, &mut cluster, job(4, 1.0, 7), &[]);
        let order: Vec<&Job> = state.runnable().collect();
        let p = Consolidated::default().place(
            &info(0.0),
            &Schedule::in_priority_order(order),
            &state,
            &cluster,
        );
        assert_eq!(p.launch.len(), 1);
        assert_eq!(cluster.nodes_spanned(&p.launch[0].gpus), 2);
        assert!(p.launch[0].gpus.iter().all(|g| (4..12).contains(&g.0)));
    }

    /// The scan `fewest_nodes` replaced (every node visited per job), kept
    /// as the reference its grouped lookup must equal.
    fn fewest_nodes_by_scan(free: &FreeGpus, n: u32) -> Option<Vec<GpuId>> {
        if free.count() < n {
            return None;
        }
        let nodes = free.cluster.nodes();
        if let Some(node) = nodes
            .iter()
            .filter(|node| free.on_node(node.id) >= n)
            .min_by_key(|node| (free.on_node(node.id), node.id))
        {
            return Some(free.gpus_on(node.id).take(n as usize).collect());
        }
        let mut order: Vec<NodeId> = nodes
            .iter()
            .map(|n| n.id)
            .filter(|id| free.on_node(*id) > 0)
            .collect();
        order.sort_by_key(|id| (std::cmp::Reverse(free.on_node(*id)), *id));
        let mut out = Vec::with_capacity(n as usize);
        for id in order {
            for g in free.gpus_on(id) {
                if out.len() == n as usize {
                    return Some(out);
                }
                out.push(g);
            }
        }
        (out.len() == n as usize).then_some(out)
    }

    proptest! {
        // Whatever the load, a placement never gives a GPU to two jobs and never
        // uses a GPU that a job keeping its allocation holds.
        #[test]
        fn never_double_books_and_uses_one_node_when_possible(
            sizes in proptest::collection::vec(1u32..6, 1..12),
            running in proptest::collection::vec(any::<bool>(), 12),
        ) {
            let mut cluster = ClusterState::homogeneous(4, 4);
            let mut state = JobState::new();
            let mut next_gpu = 0u32;
            for (i, &n) in sizes.iter().enumerate() {
                let j = job(i as u64, i as f64, n);
                if running[i] && next_gpu + n <= 16 {
                    let gpus: Vec<u32> = (next_gpu..next_gpu + n).collect();
                    next_gpu += n;
                    add(&mut state, &mut cluster, j, &gpus);
                } else {
                    add(&mut state, &mut cluster, j, &[]);
                }
            }
            let order: Vec<&Job> = state.runnable().collect();
            let p = Consolidated::default().place(&info(0.0), &Schedule::in_priority_order(order), &state, &cluster);
            let mut used: Vec<GpuId> = state.running()
                .filter(|j| !p.preempt.contains(&j.id()))
                .flat_map(|j| j.allocation.clone()).collect();
            for a in &p.launch {
                used.extend(a.gpus.iter().copied());
            }
            let total = used.len();
            used.sort_unstable(); used.dedup();
            prop_assert_eq!(total, used.len(), "a GPU was given twice");
        }

        // Nodes grouped by free count give the same GPUs as the
        // scan over every node, through a whole walk with preemptions (the
        // walk's takes and puts regroup nodes), on nodes of mixed sizes,
        // some offline, for 70 nodes (more than one 64-bit word of them).
        #[test]
        fn the_grouped_lookup_places_as_the_scan_did(
            sizes in proptest::collection::vec(1u32..9, 1..70),
            offline in proptest::collection::vec(any::<bool>(), 70),
            jobs in proptest::collection::vec((1u32..24, any::<bool>(), 0u32..1000), 1..40),
        ) {
            let mut cluster = ClusterState::new();
            for &k in &sizes {
                cluster.add_node(NodeSpec::with_gpus(k));
            }
            for (i, off) in offline.iter().enumerate().take(sizes.len()) {
                if *off && i % 3 == 0 {
                    cluster.remove_node(NodeId(i as u32)).unwrap();
                }
            }
            let mut state = JobState::new();
            for (i, &(n, running, _)) in jobs.iter().enumerate() {
                let j = job(i as u64, i as f64, n);
                let free: Vec<u32> = cluster.free_gpus().map(|g| g.0).collect();
                if running && free.len() >= n as usize {
                    // Scattered GPUs: every third free one, then the rest.
                    let mut pick: Vec<u32> = free.iter().copied().step_by(3).collect();
                    pick.extend(free.iter().copied().filter(|g| g % 3 != 0));
                    pick.sort_unstable();
                    pick.dedup();
                    pick.truncate(n as usize);
                    if pick.len() == n as usize {
                        add(&mut state, &mut cluster, j, &pick);
                        continue;
                    }
                }
                add(&mut state, &mut cluster, j, &[]);
            }
            // A priority order unrelated to arrival.
            let mut order: Vec<&Job> = state.runnable().collect();
            order.sort_by_key(|j| (jobs[j.id().0 as usize].2, j.id()));
            let schedule = Schedule::in_priority_order(order);
            for backfill in [false, true] {
                let params = WalkParams { backfill, preempt: true };
                let grouped = priority_walk(&params, &schedule, &state, &cluster, |f, _, n| fewest_nodes(f, n));
                let scanned = priority_walk(&params, &schedule, &state, &cluster, |f, _, n| fewest_nodes_by_scan(f, n));
                prop_assert_eq!(&grouped, &scanned);
            }
        }
    }
}
