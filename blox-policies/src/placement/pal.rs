//! PAL (PAL, SC'24, §IV-B: a joint order over variability and locality, the
//! "L×V matrix"), as the authors' artifact runs it (`hal-uw/blox-pal`,
//! branch `artifact`, `placement/pal.py`), on the walk it shares with
//! PM-First ([`super::class_walk`]: not sticky, the head of the order by
//! class, no backfill).
//!
//! For each application class, every classed factor `sf` of its GPUs
//! ([`super::gpu_classes`]) gives two cells: within one node (cost `sf`)
//! and across nodes (cost `sf × locality_penalty`); the cells in order of
//! cost (ties in the order the factors first appear by GPU id, within before
//! across) are the order PAL tries allocations in. A job of 2 GPUs up to a
//! node's size takes, at the first cell that yields one:
//!
//! - within: the GPUs of one node whose factors are all at most `sf`; of
//!   all such sets on all nodes (nodes with the most such free GPUs first),
//!   the one whose slowest GPU is fastest (the first found on a tie);
//! - across: PM-First's choice among the free GPUs of factor at most `sf`.
//!
//! A 1-GPU job, or one larger than a node, takes PM-First's choice.
//!
//! Parameters: `locality_penalty` (1.7, the artifact's default; keep it
//! equal to `[sim] locality_penalty`), `clusters` (as PM-First's).

use super::class_walk::{class_walk, ClassedFactors};
use super::pm_first::fastest_first;
use blox_core::*;
use serde::Deserialize;
use std::collections::HashMap;

/// `[placement]` parameters of `pal`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default = "d_penalty")]
    locality_penalty: f64,
    clusters: Option<std::path::PathBuf>,
}

fn d_penalty() -> f64 {
    1.7
}

/// Variability- and locality-aware placement.
#[derive(Clone, Debug)]
pub struct Pal {
    classes: ClassedFactors,
    locality_penalty: f64,
}

/// One cell of a class's L×V order: GPUs of factor at most `sf`, on one
/// node (`within`) or any.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    pub sf: f64,
    pub within: bool,
}

/// The L×V order of a class whose GPUs have classed factors `sf` (by id).
pub fn lv_order(sf: &[f64], penalty: f64) -> Vec<Cell> {
    let mut seen: Vec<f64> = Vec::new();
    for f in sf {
        if !seen.iter().any(|s| s.to_bits() == f.to_bits()) {
            seen.push(*f);
        }
    }
    let mut cells: Vec<(Cell, f64)> = Vec::with_capacity(2 * seen.len());
    for s in seen {
        cells.push((
            Cell {
                sf: s,
                within: true,
            },
            s,
        ));
        cells.push((
            Cell {
                sf: s,
                within: false,
            },
            s * penalty,
        ));
    }
    // Stable: ties keep the order above.
    cells.sort_by(|a, b| a.1.total_cmp(&b.1));
    cells.into_iter().map(|(c, _)| c).collect()
}

/// The `n` GPUs (2 to a node's size) PAL gives a job; `free` by id.
pub fn pal_choice(
    free: &[GpuId],
    sf: &[f64],
    order: &[Cell],
    node_of: impl Fn(GpuId) -> NodeId + Copy,
    n: usize,
) -> Option<Vec<GpuId>> {
    for cell in order {
        let fit: Vec<GpuId> = free
            .iter()
            .copied()
            .filter(|g| sf[g.index()] <= cell.sf)
            .collect();
        if !cell.within {
            if fit.len() >= n {
                return fastest_first(&fit, sf, node_of, n);
            }
            continue;
        }
        // Nodes with at least n such GPUs: most first, then as they first
        // appear (by GPU id).
        let mut nodes: Vec<(NodeId, Vec<GpuId>)> = Vec::new();
        for g in &fit {
            let node = node_of(*g);
            match nodes.iter_mut().find(|(x, _)| *x == node) {
                Some((_, v)) => v.push(*g),
                None => nodes.push((node, vec![*g])),
            }
        }
        nodes.retain(|(_, v)| v.len() >= n);
        if nodes.is_empty() {
            continue;
        }
        nodes.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        // Every n-set of each node's GPUs, in lexicographic order; the
        // first whose slowest factor is least.
        let mut best: Option<(f64, Vec<GpuId>)> = None;
        for (_, gpus) in &nodes {
            for_each_combination(gpus.len(), n, |idx| {
                let worst = idx
                    .iter()
                    .map(|i| sf[gpus[*i].index()])
                    .fold(f64::NEG_INFINITY, f64::max);
                if best.as_ref().is_none_or(|(b, _)| worst < *b) {
                    best = Some((worst, idx.iter().map(|i| gpus[*i]).collect()));
                }
            });
        }
        return best.map(|(_, g)| g);
    }
    None
}

/// Calls `f` with every k-subset of 0..n (ascending indices), in
/// lexicographic order.
fn for_each_combination(n: usize, k: usize, mut f: impl FnMut(&[usize])) {
    if k > n || k == 0 {
        return;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        f(&idx);
        // The rightmost index that can still move.
        let Some(i) = (0..k).rev().find(|&i| idx[i] < n - k + i) else {
            return;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
}

impl PlacementPolicy for Pal {
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
        // A node's size: the largest node (the artifact's
        // `get_num_gpus_per_node`).
        let per_node = cluster
            .nodes()
            .iter()
            .map(|n| n.gpus.len())
            .max()
            .unwrap_or(0);
        let penalty = self.locality_penalty;
        let classes = &mut self.classes;
        let mut orders: HashMap<String, Vec<Cell>> = HashMap::new();
        class_walk(schedule, jobs, cluster, |class, free, n| {
            let sf = classes.of(cluster, class);
            let node_of = |g: GpuId| cluster.node_of(g).unwrap_or(NodeId(0));
            if n > 1 && n <= per_node {
                let order = orders
                    .entry(class.to_string())
                    .or_insert_with(|| lv_order(&sf, penalty));
                pal_choice(free, &sf, order, node_of, n)
            } else {
                fastest_first(free, &sf, node_of, n)
            }
        })
    }
}

fn build(p: &Section) -> Result<Box<dyn PlacementPolicy>, ConfigError> {
    let params: Params = p.parse()?;
    if !(params.locality_penalty >= 1.0 && params.locality_penalty.is_finite()) {
        return Err(p.error_at(
            "locality_penalty",
            "`locality_penalty` must be a finite factor of at least 1",
        ));
    }
    Ok(Box::new(Pal {
        classes: ClassedFactors::from_param(p, params.clusters.as_deref())?,
        locality_penalty: params.locality_penalty,
    }))
}

blox_core::register_placement!(
    "pal",
    "variability and locality jointly: each class's GPUs by factor, within or across nodes, in order of cost (PAL SC'24 §IV-B; needs [cluster.variability])",
    build
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_go_by_cost_within_before_across_on_a_tie() {
        let sf = [1.0, 0.9, 1.2, 0.9];
        let o = lv_order(&sf, 1.5);
        let got: Vec<(f64, bool)> = o.iter().map(|c| (c.sf, c.within)).collect();
        // Costs: 1.0 w, 1.5 a, 0.9 w, 1.35 a, 1.2 w, 1.8 a.
        assert_eq!(
            got,
            vec![
                (0.9, true),
                (1.0, true),
                (1.2, true),
                (0.9, false),
                (1.0, false),
                (1.2, false)
            ]
        );
    }

    #[test]
    fn a_slower_node_of_its_own_beats_fast_gpus_across_nodes() {
        // Two nodes of 4: node 0 has two fast GPUs (0.9) free, node 1 two
        // fast ones too; node 1 also has two slow ones (1.0).
        let sf = [0.9, 1.3, 1.3, 0.9, 0.9, 1.0, 1.0, 0.9];
        let node = |g: GpuId| NodeId(g.0 / 4);
        let free: Vec<GpuId> = [0, 3, 4, 5, 6, 7].map(GpuId).to_vec();
        let order = lv_order(&sf, 1.7);
        // Two GPUs: node 0's fast pair (the first of the equal sets).
        assert_eq!(
            pal_choice(&free, &sf, &order, node, 2),
            Some(vec![GpuId(0), GpuId(3)])
        );
        // Three: no node has three fast ones; 1.0 within node 1 (cost 1.0)
        // comes before 0.9 across nodes (1.53). Every 3-set there has a
        // slow GPU: the first.
        let got = pal_choice(&free, &sf, &order, node, 3).unwrap();
        assert_eq!(got, vec![GpuId(4), GpuId(5), GpuId(6)]);
        // With a low penalty, fast GPUs across nodes win.
        let cheap = lv_order(&sf, 1.05);
        let got = pal_choice(&free, &sf, &cheap, node, 3).unwrap();
        assert!(got.iter().all(|g| sf[g.index()] == 0.9), "{got:?}");
    }

    #[test]
    fn combinations_are_lexicographic() {
        let mut all = Vec::new();
        for_each_combination(4, 2, |c| all.push(c.to_vec()));
        assert_eq!(
            all,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
        let mut n = 0;
        for_each_combination(8, 4, |_| n += 1);
        assert_eq!(n, 70);
    }
}
