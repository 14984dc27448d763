//! GPU clustering (`gpu_clustering_score.go`): keep tasks of one GPU kind
//! (a share, or k whole GPUs) together, then prefer fuller nodes.

use super::{tightest, Context, SharePolicy, MAX_SPEC_GPU};
use crate::node::gpu_kind;
use crate::openb::TaskSpec;

/// GPU clustering.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuClustering;

impl SharePolicy for GpuClustering {
    fn name(&self) -> &'static str {
        "gpu-clustering"
    }

    fn scores(&mut self, task: &TaskSpec, feasible: &[usize], cx: &mut Context<'_>) -> Vec<i64> {
        let Some(kind) = gpu_kind(task) else {
            return vec![0; feasible.len()];
        };
        feasible
            .iter()
            .map(|&n| {
                let node = &cx.nodes[n];
                let spec = MAX_SPEC_GPU as i64;
                let base = 25 * (spec - node.gpu_milli_left()) / spec;
                let kinds = node.kinds.len();
                if node.kinds.get(&kind).is_some_and(|&c| c > 0) {
                    if kinds == 1 {
                        base + 75
                    } else {
                        base + 50
                    }
                } else if kinds == 0 {
                    base + 25
                } else {
                    base
                }
            })
            .collect()
    }

    fn gpus(&mut self, task: &TaskSpec, node: usize, cx: &mut Context<'_>) -> Vec<u32> {
        tightest(task, &cx.nodes[node])
    }
}
