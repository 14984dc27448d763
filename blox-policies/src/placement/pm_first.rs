//! PM-First (PAL, SC'24, §IV-A, "performance-variability-aware placement,
//! fastest GPUs first"), as the authors' artifact runs it
//! (`hal-uw/blox-pal`, branch `artifact`, `placement/pmfirst.py`):
//!
//! 1. every running job gives its GPUs back (the placement is not sticky: a
//!    job is moved when its best GPUs change; one that gets the same GPUs
//!    keeps running);
//! 2. the jobs at the head of the order that fit the cluster together (up
//!    to the first whose GPUs would exceed it) are re-ordered by their
//!    application class — the classes in the factor table's order, the
//!    most variability-sensitive first — and the rest follow in order;
//! 3. each job in turn takes the free GPUs of lowest classed factor for its
//!    class ([`super::gpu_classes`]); among equal factors, those on a node
//!    where the number of such free GPUs is closest to the job's size
//!    (best-match locality), then the lowest GPU ids;
//! 4. the first job that finds too few free GPUs ends the round's
//!    placement.
//!
//! Parameters: `clusters` (a factor table in the cluster's layout whose
//! factors are already classed, e.g. the artifact's own clustering; default:
//! classes computed from the cluster's factors).

use super::gpu_classes::class_factors;
use blox_core::variability::Variability;
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
    /// Classed factors given by the config, if any.
    given: Option<std::sync::Arc<Variability>>,
    /// Classed factors by class, for a cluster of this many GPUs.
    classed: Option<(usize, HashMap<String, Vec<f64>>)>,
}

impl PmFirst {
    /// Classed factors for `class` on `cluster` (computed once per size).
    fn factors(&mut self, cluster: &ClusterState, class: &str) -> Vec<f64> {
        let n = cluster.num_gpus() as usize;
        if self.classed.as_ref().is_none_or(|(m, _)| *m != n) {
            let mut by_class = HashMap::new();
            if let Some(v) = cluster.variability() {
                for c in v.classes() {
                    let given = self
                        .given
                        .as_ref()
                        .filter(|g| g.gpus() >= n)
                        .and_then(|g| g.column(c));
                    let f = match given {
                        Some(mut f) => {
                            f.truncate(n);
                            f
                        }
                        None => {
                            let mut raw = v.column(c).unwrap_or_default();
                            raw.resize(n, 1.0);
                            class_factors(&raw)
                        }
                    };
                    by_class.insert(c.clone(), f);
                }
            }
            self.classed = Some((n, by_class));
        }
        let (_, by_class) = self.classed.as_ref().expect("set above");
        by_class.get(class).cloned().unwrap_or_else(|| vec![1.0; n])
    }
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
        let mut out = Placement::default();
        let Some(v) = cluster.variability() else {
            // Refused when the simulation is built; a live cluster whose
            // workers report no speeds places nothing.
            return out;
        };
        // 1. Every GPU that is online and not held by a job the order
        // keeps out is free; running jobs give theirs back.
        let listed: std::collections::HashSet<JobId> =
            schedule.entries.iter().map(|d| d.job).collect();
        let mut free = vec![false; cluster.gpus().len()];
        for g in cluster.gpus() {
            free[g.id.index()] = g.online && cluster.node(g.node).is_some_and(|n| n.online);
        }
        for job in jobs.running() {
            if !listed.contains(&job.id()) {
                out.preempt.push(job.id());
            }
        }
        // (Listed running jobs give theirs back by re-placement, the others
        // by their preemption.)
        // 2. The head that fits the cluster, by class; then the rest.
        let total = u64::from(cluster.num_gpus());
        let class_rank = |job: JobId| {
            let class = v.class_of(jobs.get(job).and_then(|j| j.spec.model.as_deref()));
            v.classes()
                .iter()
                .position(|c| c == class)
                .unwrap_or(usize::MAX)
        };
        let mut sum = 0u64;
        let mut head = Vec::new();
        for d in &schedule.entries {
            sum += u64::from(d.gpus);
            if sum > total {
                break;
            }
            head.push(d);
        }
        let cut = head.len();
        head.sort_by_key(|d| class_rank(d.job));
        let order: Vec<&Demand> = head
            .into_iter()
            .chain(schedule.entries[cut..].iter())
            .collect();
        // 3. Fastest GPUs first.
        let mut placed: HashMap<JobId, Vec<GpuId>> = HashMap::new();
        for d in order {
            let Some(job) = jobs.get(d.job) else { continue };
            let class = v.class_of(job.spec.model.as_deref()).to_string();
            let sf = self.factors(cluster, &class);
            let candidates: Vec<GpuId> = cluster
                .gpus()
                .iter()
                .map(|g| g.id)
                .filter(|g| free[g.index()])
                .collect();
            let node_of = |g: GpuId| cluster.node_of(g).unwrap_or(NodeId(0));
            let Some(gpus) = fastest_first(&candidates, &sf, node_of, d.gpus as usize) else {
                // 4. No backfilling.
                break;
            };
            for g in &gpus {
                free[g.index()] = false;
            }
            placed.insert(d.job, gpus.clone());
            out.launch.push(Assignment {
                job: d.job,
                gpus,
                batch_size: d.batch_size,
                host: None,
            });
        }
        // Running jobs: the same GPUs keep running; others are moved (in
        // `launch`) or stopped.
        out.launch.retain(|a| {
            jobs.get(a.job).is_none_or(|j| {
                !(j.is_running() && {
                    let mut x = j.allocation.clone();
                    let mut y = a.gpus.clone();
                    x.sort();
                    y.sort();
                    x == y
                })
            })
        });
        for job in jobs.running() {
            if listed.contains(&job.id()) && !placed.contains_key(&job.id()) {
                out.preempt.push(job.id());
            }
        }
        out
    }
}

fn build(p: &Section) -> Result<Box<dyn PlacementPolicy>, ConfigError> {
    let params: Params = p.parse()?;
    let given = match params.clusters {
        None => None,
        Some(f) => {
            let path = p.resolve_path(&f);
            let t = Variability::read_table(&path).map_err(|e| p.error_at("clusters", e))?;
            Some(std::sync::Arc::new(t))
        }
    };
    Ok(Box::new(PmFirst {
        given,
        classed: None,
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
