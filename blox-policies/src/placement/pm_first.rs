//! PM-First (PAL, SC'24, §IV-A, "performance-variability-aware placement,
//! fastest GPUs first"), as the authors' artifact runs it
//! (`hal-uw/blox-pal`, branch `artifact`, `placement/pmfirst.py`), on the
//! walk it shares with PAL ([`super::class_walk`]: not sticky, the head of
//! the order by class, no backfill). Each job takes the free GPUs of lowest
//! classed factor for its class ([`super::gpu_classes`]); among equal
//! factors, those on a node where the number of such free GPUs is closest
//! to the job's size (best-match locality), then the lowest GPU ids.
//!
//! Parameters: `clusters` (a factor table in the cluster's layout whose
//! factors are already classed, e.g. the artifact's own clustering; default:
//! classes computed from the cluster's factors).

use super::class_walk::{class_walk, ClassedFactors};
use blox_core::*;
use serde::Deserialize;
use std::collections::HashMap;

/// `[placement]` parameters of `pm-first`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    clusters: Option<std::path::PathBuf>,
}

/// Fastest GPUs first, per application class.
#[derive(Clone, Debug, Default)]
pub struct PmFirst {
    classes: ClassedFactors,
}

/// The `n` free GPUs of lowest factor `sf` (by GPU id), best-match
/// locality among equals, then lowest ids.
pub fn fastest_first(
    free: &[GpuId],
    sf: &[f64],
    node_of: impl Fn(GpuId) -> NodeId,
    n: usize,
) -> Option<Vec<GpuId>> {
    if free.len() < n {
        return None;
    }
    let key = |g: GpuId| (sf[g.index()].to_bits(), node_of(g));
    let mut same: HashMap<(u64, NodeId), usize> = HashMap::new();
    for g in free {
        *same.entry(key(*g)).or_default() += 1;
    }
    let mut order: Vec<GpuId> = free.to_vec();
    order.sort_by(|a, b| {
        let la = same[&key(*a)].abs_diff(n);
        let lb = same[&key(*b)].abs_diff(n);
        sf[a.index()]
            .total_cmp(&sf[b.index()])
            .then(la.cmp(&lb))
            .then(a.cmp(b))
    });
    order.truncate(n);
    Some(order)
}

impl PlacementPolicy for PmFirst {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn requires_variability(&self) -> bool {
        true
    }

    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let classes = &mut self.classes;
        class_walk(schedule, jobs, cluster, |class, free, n| {
            let sf = classes.of(cluster, class);
            let node_of = |g: GpuId| cluster.node_of(g).unwrap_or(NodeId(0));
            fastest_first(free, &sf, node_of, n)
        })
    }
}

fn build(p: &Section) -> Result<Box<dyn PlacementPolicy>, ConfigError> {
    let params: Params = p.parse()?;
    Ok(Box::new(PmFirst {
        classes: ClassedFactors::from_param(p, params.clusters.as_deref())?,
    }))
}
blox_core::register_placement!(
    "pm-first",
    "fastest GPUs first for each job's class, the head of the order by class, not sticky (PAL SC'24 §IV-A; needs [cluster.variability])",
    build
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastest_gpus_first_then_the_best_matching_node_then_lowest_ids() {
        // Two nodes of 4. Factors: GPUs 1 and 6 fast (0.9), the rest 1.0.
        let sf = [1.0, 0.9, 1.0, 1.0, 1.0, 1.0, 0.9, 1.0];
        let node = |g: GpuId| NodeId(g.0 / 4);
        let all: Vec<GpuId> = (0..8).map(GpuId).collect();
        // One GPU: the fastest, lowest id.
        assert_eq!(fastest_first(&all, &sf, node, 1), Some(vec![GpuId(1)]));
        // Two: both fast ones, though on two nodes (speed before locality).
        assert_eq!(
            fastest_first(&all, &sf, node, 2),
            Some(vec![GpuId(1), GpuId(6)])
        );
        // Five: the fast two, then three slow ones. With GPU 4 taken, node 0
        // has three slow GPUs free and node 1 two; node 0's three are closer
        // to the job's size, so they come first.
        let free: Vec<GpuId> = all.iter().copied().filter(|g| g.0 != 4).collect();
        assert_eq!(
            fastest_first(&free, &sf, node, 5),
            Some(vec![GpuId(1), GpuId(6), GpuId(0), GpuId(2), GpuId(3)])
        );
        assert_eq!(fastest_first(&free, &sf, node, 8), None);
    }
}
