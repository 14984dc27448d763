//! What the cluster knows about its nodes' failures, and the two
//! mechanisms that act on it at the node level:
//!
//! - **Hot spares** (`[cluster] spares = k`): `k` nodes are kept out of the
//!   scheduler's reach. A job that loses GPUs to a failed node resumes at
//!   once on its surviving GPUs plus a spare's, after its restart cost,
//!   instead of going back to the queue; a repaired node refills the pool.
//!   (Kueue's `TASFailedNodeReplacement` replaces a failed node of a
//!   workload the same way.)
//! - **Lemon quarantine** (`[cluster.quarantine]`): a node that has failed
//!   more than `failures` times within `window_h` is kept out after its
//!   repair for `probation_h` (Kokolis et al., HPCA'25, arXiv 2410.21680,
//!   §V: detecting and removing "lemon" nodes).
//!
//! The loop also estimates the per-GPU mean time between failures from what
//! it has seen (failures over GPU-hours up), starting from a prior, for
//! `[run] checkpoint = "young-daly"` and failure-aware placement. Nothing
//! here reads the simulator's failure model: the same rules run on a live
//! cluster, where only the failures seen are known.

use crate::ids::NodeId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Per-GPU mean time between failures, hours, from Meta's Llama 3 report
/// (arXiv 2407.21783, §3.3.4): 419 unexpected interruptions in 54 days on
/// 16,384 GPUs, 419 / (16,384 × 54 × 24) = 1.97e-5 per GPU-hour.
pub const LLAMA3_GPU_MTBF_H: f64 = 50_700.0;

/// Failure times kept per node (the quarantine's window reads them).
const HISTORY: usize = 64;

/// `[cluster.quarantine]`: when a repaired node is kept out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuarantineRule {
    /// A node is quarantined after more than this many failures ...
    pub failures: u32,
    /// ... within this many seconds;
    pub window_s: f64,
    /// it stays out this long after its repair, seconds.
    pub probation_s: f64,
}

/// The failure state the loop keeps beside the cluster (module docs).
#[derive(Clone, Debug, Default)]
pub struct Health {
    /// How many spare nodes the pool should hold.
    pub spares_target: u32,
    /// Spare nodes, offline to the scheduler, up and ready, in id order.
    pub pool: BTreeSet<NodeId>,
    pub quarantine: Option<QuarantineRule>,
    /// Quarantined nodes and when their probation ends.
    pub held: BTreeMap<NodeId, f64>,
    /// Failed nodes not repaired yet.
    pub down: BTreeSet<NodeId>,
    /// Recent failure times by node.
    history: BTreeMap<NodeId, VecDeque<f64>>,
    /// Failures seen, and GPU-seconds of nodes up, since the loop started.
    pub failures_seen: u64,
    pub gpu_s_seen: f64,
    /// Until when `gpu_s_seen` was counted.
    counted_until_s: Option<f64>,
    /// Jobs spares were swapped in for, and quarantines begun.
    pub spare_swaps: u64,
    pub quarantines: u64,
}

impl Health {
    /// Notes a failure of `node` at `now_s`.
    pub fn note_failure(&mut self, node: NodeId, now_s: f64) {
        self.failures_seen += 1;
        self.down.insert(node);
        let h = self.history.entry(node).or_default();
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(now_s);
    }

    /// Failures of `node` in `(now_s − window_s, now_s]`.
    pub fn failures_within(&self, node: NodeId, now_s: f64, window_s: f64) -> usize {
        self.history.get(&node).map_or(0, |h| {
            h.iter()
                .rev()
                .take_while(|t| **t > now_s - window_s)
                .count()
        })
    }

    /// Counts `up_gpus` GPUs up from the last call to `now_s`.
    pub fn count_uptime(&mut self, now_s: f64, up_gpus: u32) {
        if let Some(from) = self.counted_until_s {
            self.gpu_s_seen += f64::from(up_gpus) * (now_s - from).max(0.0);
        }
        self.counted_until_s = Some(now_s);
    }

    /// The per-GPU mean time between failures, seconds: the prior counted
    /// as one failure in `prior_s` GPU-seconds, plus what was seen (a
    /// gamma-prior estimate of an exponential rate).
    pub fn gpu_mtbf_s(&self, prior_s: f64) -> f64 {
        (prior_s + self.gpu_s_seen) / (1.0 + self.failures_seen as f64)
    }

    /// Whether a node repaired at `now_s` goes into quarantine.
    pub fn quarantines(&self, node: NodeId, now_s: f64) -> Option<f64> {
        let q = self.quarantine?;
        (self.failures_within(node, now_s, q.window_s) > q.failures as usize)
            .then_some(now_s + q.probation_s)
    }

    /// Whether `node` is in the spare pool, held, or down: offline on
    /// purpose, not gone.
    pub fn keeps(&self, node: NodeId) -> bool {
        self.pool.contains(&node) || self.held.contains_key(&node) || self.down.contains(&node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_moves_from_the_prior_to_what_was_seen() {
        let mut h = Health::default();
        assert_eq!(h.gpu_mtbf_s(1000.0), 1000.0);
        h.count_uptime(0.0, 10);
        h.count_uptime(100_000.0, 10);
        for _ in 0..99 {
            h.note_failure(NodeId(0), 1.0);
        }
        // (1,000 + 1,000,000) / 100.
        assert!((h.gpu_mtbf_s(1000.0) - 10_010.0).abs() < 1e-9);
    }

    #[test]
    fn a_node_is_quarantined_after_more_than_k_failures_in_the_window() {
        let mut h = Health {
            quarantine: Some(QuarantineRule {
                failures: 2,
                window_s: 100.0,
                probation_s: 50.0,
            }),
            ..Health::default()
        };
        for t in [10.0, 60.0, 120.0] {
            h.note_failure(NodeId(3), t);
        }
        // At 125 the failure at 10 is out of the window: 2, not more than 2.
        assert_eq!(h.quarantines(NodeId(3), 125.0), None);
        h.note_failure(NodeId(3), 130.0);
        assert_eq!(h.quarantines(NodeId(3), 140.0), Some(190.0));
        assert_eq!(h.quarantines(NodeId(4), 140.0), None);
    }
}
