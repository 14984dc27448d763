//! Packed-Non-Sticky, a baseline of the PAL artifact (`hal-uw/blox-pal`,
//! branch `artifact`, `placement/packing_nonsticky.py`): every round each
//! job in the order is placed afresh, running or not, on as few nodes as
//! possible (Blox's consolidated choice: a node with exactly the GPUs it
//! needs, else the smallest that holds it, else the nodes with the most free
//! GPUs first), until the first that does not fit. A job that gets its own
//! GPUs back keeps running; one placed elsewhere is moved. Its sticky
//! counterpart is `consolidated`.

use super::class_walk::non_sticky_walk;
use blox_core::*;

/// Consolidated placement, re-made every round.
#[derive(Clone, Debug, Default)]
pub struct PackedNonSticky;

/// `n` of the free GPUs (by id) on the fewest nodes, as the artifact's
/// `_consolidated_placement` picks them.
pub fn packed_choice(
    free: &[GpuId],
    node_of: impl Fn(GpuId) -> NodeId,
    n: usize,
) -> Option<Vec<GpuId>> {
    // Free GPUs by node, nodes in id order.
    let mut by_node: Vec<(NodeId, Vec<GpuId>)> = Vec::new();
    for g in free {
        let node = node_of(*g);
        match by_node.iter_mut().find(|(x, _)| *x == node) {
            Some((_, v)) => v.push(*g),
            None => by_node.push((node, vec![*g])),
        }
    }
    by_node.sort_by_key(|(node, _)| *node);
    // A node with exactly n, else the smallest with more.
    if let Some((_, v)) = by_node
        .iter()
        .filter(|(_, v)| v.len() >= n)
        .min_by_key(|(node, v)| (v.len(), *node))
    {
        return Some(v[..n].to_vec());
    }
    if free.len() < n {
        return None;
    }
    // The most free first (the lowest id on a tie).
    by_node.sort_by_key(|(node, v)| (std::cmp::Reverse(v.len()), *node));
    let mut out = Vec::with_capacity(n);
    for (_, v) in by_node {
        let take = (n - out.len()).min(v.len());
        out.extend_from_slice(&v[..take]);
        if out.len() == n {
            break;
        }
    }
    Some(out)
}

impl PlacementPolicy for PackedNonSticky {
    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        non_sticky_walk(schedule, jobs, cluster, false, |_, free, n| {
            packed_choice(free, |g| cluster.node_of(g).unwrap_or(NodeId(0)), n)
        })
    }
}

blox_core::register_placement!(
    "packed-non-sticky",
    "fewest nodes per job, every job placed afresh each round (the PAL artifact's Packed-Non-Sticky baseline)",
    |p| {
        p.parse::<NoParams>()?;
        Ok(Box::new(PackedNonSticky))
    }
);

/// A placement without parameters.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_fit_then_smallest_that_holds_then_most_free_first() {
        // Nodes of 4; free: node 0 has 3, node 1 has 2, node 2 has 4.
        let free: Vec<GpuId> = [1, 2, 3, 6, 7, 8, 9, 10, 11].map(GpuId).to_vec();
        let node = |g: GpuId| NodeId(g.0 / 4);
        assert_eq!(
            packed_choice(&free, node, 2),
            Some(vec![GpuId(6), GpuId(7)])
        );
        assert_eq!(
            packed_choice(&free, node, 3),
            Some(vec![GpuId(1), GpuId(2), GpuId(3)])
        );
        assert_eq!(
            packed_choice(&free, node, 4),
            Some([8, 9, 10, 11].map(GpuId).to_vec())
        );
        // Six: node 2's four, then node 0's first two.
        assert_eq!(
            packed_choice(&free, node, 6),
            Some([8, 9, 10, 11, 1, 2].map(GpuId).to_vec())
        );
        assert_eq!(packed_choice(&free, node, 10), None);
    }
}
