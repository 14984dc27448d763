//! Gang, topology-aware placement (`placement.policy = "topology"`): a job
//! gets all its GPUs or none, within the lowest level of the cluster's
//! topology that can hold it — one node, else one innermost domain (a
//! rack), else one domain of the level above, … — choosing the domain that
//! fits best (the fewest free GPUs that still hold it), so that large holes
//! stay free for large jobs; inside it, the nodes with the most free GPUs
//! first (fewest nodes). Its GPUs are handed to the job in ring order along
//! the tree (domain by domain, node by node, by local index), which is its
//! rank order. Consolidation after Tiresias (NSDI'19, §3.3, the skew rule):
//! jobs of the `sensitive` models (and jobs with the metric `max_span_level`)
//! wait rather than span beyond the `within` level; the others may span the
//! whole cluster. Preemption follows Blox's priority walk.
//!
//! ```toml
//! [placement]
//! policy = "topology"
//! sensitive = ["vgg", "alexnet"]   # model prefixes (default: Tiresias's skewed models)
//! within = "rack"                  # how far they may span (default: the innermost level)
//! backfill = false
//! preempt = true
//! ```
//!
//! A job's own `max_span_level` metric (0: within one node; 1: the innermost
//! level; 2: the one above, …) overrides the model rule. Without a
//! `[cluster.topology]`, nodes are the only level.

use blox_core::topology::{Span, Topology};
use blox_core::walk::{priority_walk, FreeGpus, WalkParams};
use blox_core::*;
use serde::Deserialize;

fn default_models() -> Vec<String> {
    vec!["vgg".into(), "alexnet".into()]
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyPlacement {
    #[serde(default = "default_models")]
    pub sensitive: Vec<String>,
    /// The level sensitive jobs stay within (default: the innermost).
    pub within: Option<String>,
    #[serde(default)]
    pub backfill: bool,
    #[serde(default = "yes")]
    pub preempt: bool,
    /// Where `within` was set (`file:line`), for errors.
    #[serde(skip)]
    pub location: Option<String>,
}

/// The metric a job may set: how many levels up it may span.
pub const MAX_SPAN_LEVEL: &str = "max_span_level";

impl TopologyPlacement {
    /// How far `job` may span: `None` is anywhere.
    fn limit(&self, job: &Job, metric: Option<f64>, topo: Option<&Topology>) -> Option<Span> {
        let depth = topo.map_or(0, |t| t.levels().len());
        // Levels up from the node: 0 node, 1 innermost level, …
        let to_span = |up: usize| -> Span {
            if up == 0 {
                Span::Node
            } else if up > depth {
                Span::Cluster
            } else {
                Span::Level(depth - up)
            }
        };
        if let Some(v) = metric {
            return Some(to_span(v.max(0.0) as usize));
        }
        let model = job.spec.model.as_deref()?.to_ascii_lowercase();
        if !self
            .sensitive
            .iter()
            .any(|m| model.starts_with(&m.to_ascii_lowercase()))
        {
            return None;
        }
        let within = self
            .within
            .as_deref()
            .and_then(|w| topo.and_then(|t| t.level(w)));
        Some(match (within, depth) {
            (Some(l), _) => Span::Level(l),
            (None, 0) => Span::Node,
            (None, d) => Span::Level(d - 1),
        })
    }
}

/// `n` GPUs out of `free` within the lowest level that holds them (no
/// further than `limit`), in ring order; `None` if none does.
pub fn gang(free: &FreeGpus, n: u32, limit: Option<Span>) -> Option<Vec<GpuId>> {
    if free.count() < n {
        return None;
    }
    let c = free.cluster;
    let allowed = |s: Span| limit.is_none_or(|l| s_within(s, l));
    // One node: best fit.
    if let Some(node) = c
        .nodes()
        .iter()
        .filter(|node| free.on_node(node.id) >= n)
        .min_by_key(|node| (free.on_node(node.id), node.id))
    {
        return Some(free.gpus_on(node.id).take(n as usize).collect());
    }
    let topo = c.topology();
    if let Some(t) = topo {
        // Innermost level first: the best-fitting domain that holds it.
        for l in (0..t.levels().len()).rev() {
            if !allowed(Span::Level(l)) {
                return None;
            }
            let best = (0..t.domains(l) as u32)
                .map(|d| (t.free_under(l, d, |x| free.on_node(x)), d))
                .filter(|(f, _)| *f >= n)
                .min();
            if let Some((_, d)) = best {
                return Some(ring(free, t.members(l, d).to_vec(), n, topo));
            }
        }
    }
    if !allowed(Span::Cluster) {
        return None;
    }
    let nodes: Vec<NodeId> = c.nodes().iter().map(|x| x.id).collect();
    Some(ring(free, nodes, n, topo))
}

/// Is `s` no wider than `limit`?
fn s_within(s: Span, limit: Span) -> bool {
    match (s, limit) {
        (_, Span::Cluster) | (Span::Node, _) => true,
        // A deeper level index is a narrower domain.
        (Span::Level(a), Span::Level(b)) => a >= b,
        _ => false,
    }
}

/// `n` free GPUs of `nodes` (which hold at least `n`): the nodes with the
/// most free first, then handed out in ring order along the tree.
fn ring(free: &FreeGpus, mut nodes: Vec<NodeId>, n: u32, topo: Option<&Topology>) -> Vec<GpuId> {
    nodes.retain(|x| free.on_node(*x) > 0);
    nodes.sort_by_key(|x| (std::cmp::Reverse(free.on_node(*x)), *x));
    let mut taken: Vec<NodeId> = Vec::new();
    let mut left = n;
    for x in nodes {
        if left == 0 {
            break;
        }
        left = left.saturating_sub(free.on_node(x));
        taken.push(x);
    }
    taken.sort_by_key(|x| topo.map_or_else(|| vec![x.0], |t| t.path(*x)));
    let mut out = Vec::with_capacity(n as usize);
    for x in taken {
        for g in free.gpus_on(x) {
            if out.len() == n as usize {
                return out;
            }
            out.push(g);
        }
    }
    out
}

impl PlacementPolicy for TopologyPlacement {
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
        let params = WalkParams {
            backfill: self.backfill,
            preempt: self.preempt,
        };
        let topo = cluster.topology();
        priority_walk(&params, schedule, jobs, cluster, |free, job, n| {
            let metric = jobs.metrics().get(job.id(), MAX_SPAN_LEVEL);
            gang(free, n, self.limit(job, metric, topo))
        })
    }

    /// A job that must stay within a level whose largest domain (or node)
    /// has fewer GPUs than it asks, however empty the cluster.
    fn fits_cluster(&self, cluster: &ClusterState) -> Result<(), String> {
        let Some(w) = &self.within else {
            return Ok(());
        };
        let at = self.location.as_deref().unwrap_or("placement.within");
        match cluster.topology() {
            None => Err(format!(
                "within = `{w}` ({at}), but the cluster has no [cluster.topology]"
            )),
            Some(t) if t.level(w).is_none() => {
                let names: Vec<&str> = t.levels().iter().map(|l| l.name.as_str()).collect();
                Err(format!(
                    "within = `{w}` ({at}) names no level of the cluster's topology ({})",
                    names.join(", ")
                ))
            }
            Some(_) => Ok(()),
        }
    }

    fn never_places(&self, job: &Job, cluster: &ClusterState) -> Option<String> {
        let topo = cluster.topology();
        let metric = job.spec.metrics.get(MAX_SPAN_LEVEL).copied();
        let n = job.requested_gpus();
        let node_gpus = |x: NodeId| cluster.nodes()[x.index()].gpus.len() as u32;
        let (most, within) = match self.limit(job, metric, topo)? {
            Span::Cluster => return None,
            Span::Node => (
                cluster
                    .nodes()
                    .iter()
                    .map(|x| node_gpus(x.id))
                    .max()
                    .unwrap_or(0),
                "one node".to_string(),
            ),
            Span::Level(l) => {
                let t = topo?;
                let most = (0..t.domains(l) as u32)
                    .map(|d| t.members(l, d).iter().map(|x| node_gpus(*x)).sum::<u32>())
                    .max()
                    .unwrap_or(0);
                (most, format!("one {}", t.levels()[l].name))
            }
        };
        (n > most).then(|| {
            format!("it must stay within {within} and the largest has {most} GPUs; it asks for {n}")
        })
    }
}

blox_core::register_placement!(
    "topology",
    "gang placement within the lowest topology level that holds the job (best fit), ranks in ring order; sensitive models stay within a level (Tiresias's skew rule)",
    |p| {
        let mut t: TopologyPlacement = p.parse()?;
        t.location = Some(p.location("within"));
        Ok(Box::new(t))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use blox_core::topology::Level;
    use proptest::prelude::*;

    fn cluster(nodes: u32, gpus: u32, sizes: &[u32]) -> ClusterState {
        let mut c = ClusterState::homogeneous(nodes, gpus);
        let names = ["block", "rack", "pod"];
        let levels: Vec<Level> = (0..sizes.len())
            .map(|i| Level {
                name: names[i].into(),
                bandwidth_gbps: 10.0 * (i + 1) as f64,
            })
            .collect();
        c.set_topology(Some(
            Topology::regular(levels, sizes, nodes as usize).unwrap(),
        ));
        c
    }

    fn occupy(c: &mut ClusterState, id: u64, gpus: &[u32]) {
        let g: Vec<GpuId> = gpus.iter().map(|x| GpuId(*x)).collect();
        c.assign(JobId(id), &g).unwrap();
    }

    #[test]
    fn a_job_takes_the_best_fitting_rack_and_ranks_go_rack_by_rack() {
        // 2 racks of 2 nodes × 4 GPUs; rack 0 has 5 free, rack 1 has 8.
        let mut c = cluster(4, 4, &[2]);
        occupy(&mut c, 99, &[0, 1, 2]);
        let free = FreeGpus::new(&c);
        let g = gang(&free, 5, None).unwrap();
        let nodes: Vec<u32> = g.iter().map(|x| c.gpu(*x).unwrap().node.0).collect();
        assert_eq!(
            nodes,
            vec![0, 1, 1, 1, 1],
            "rack 0, best fit, in ring order"
        );
        // 6 GPUs: only rack 1 holds them.
        let g = gang(&free, 6, None).unwrap();
        assert!(g.iter().all(|x| c.gpu(*x).unwrap().node.0 >= 2), "{g:?}");
        // 12: spans both racks (13 free in all).
        assert_eq!(gang(&free, 12, None).unwrap().len(), 12);
        // A job held within one rack waits instead.
        assert_eq!(gang(&free, 12, Some(Span::Level(0))), None);
        assert_eq!(gang(&free, 14, None), None, "never part of a gang");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Any topology, any occupancy, any request: all of it or nothing,
        /// on free GPUs, in ring order, and no wider than it must be.
        #[test]
        fn gangs_are_whole_in_ring_order_and_as_narrow_as_the_free_gpus_allow(
            sizes in proptest::collection::vec(1u32..4, 1..3),
            racks in 1u32..4,
            gpus in 1u32..5,
            busy in proptest::collection::vec(any::<bool>(), 0..96),
            n in 1u32..20,
        ) {
            let per_top: u32 = sizes.iter().product();
            let nodes = per_top * racks;
            let mut c = cluster(nodes, gpus, &sizes);
            let busy_gpus: Vec<u32> = busy
                .iter()
                .enumerate()
                .filter(|(i, b)| **b && (*i as u32) < nodes * gpus)
                .map(|(i, _)| i as u32)
                .collect();
            if !busy_gpus.is_empty() {
                occupy(&mut c, 1, &busy_gpus);
            }
            let free = FreeGpus::new(&c);
            let t = c.topology().unwrap().clone();
            let got = gang(&free, n, None);
            prop_assert_eq!(got.is_some(), free.count() >= n);
            let Some(g) = got else { return Ok(()) };
            prop_assert_eq!(g.len(), n as usize);
            let mut seen = std::collections::HashSet::new();
            for x in &g {
                prop_assert!(free.is_free(*x) && seen.insert(*x));
            }
            let nodes_of: Vec<NodeId> = g.iter().map(|x| c.gpu(*x).unwrap().node).collect();
            let keys: Vec<(Vec<u32>, u32)> = g
                .iter()
                .map(|x| (t.path(c.gpu(*x).unwrap().node), c.gpu(*x).unwrap().local_id))
                .collect();
            prop_assert!(keys.windows(2).all(|w| w[0] <= w[1]), "ring order: {:?}", keys);
            // As narrow as possible: no narrower domain could hold it.
            let span = t.span(&nodes_of);
            let fits_node = c.nodes().iter().any(|x| free.on_node(x.id) >= n);
            if fits_node {
                prop_assert_eq!(span, Span::Node);
            }
            for l in 0..t.levels().len() {
                let fits = (0..t.domains(l) as u32)
                    .any(|d| t.free_under(l, d, |x| free.on_node(x)) >= n);
                if fits {
                    prop_assert!(s_within(span, Span::Level(l)), "{:?} fits in level {}", span, l);
                }
            }
        }
    }
}
