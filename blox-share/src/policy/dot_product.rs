//! Dot product (`dot_product_score.go`, dimensions merged, max-normalised):
//! prefer the node whose free (CPU, GPU) vector is least aligned with the
//! task's; the GPU on it is the tightest fit.

use super::{task_cpu, tightest, Context, SharePolicy, MAX_SPEC_CPU, MAX_SPEC_GPU};
use crate::openb::TaskSpec;

/// Dot product.
#[derive(Debug, Clone, Copy, Default)]
pub struct DotProduct;

impl SharePolicy for DotProduct {
    fn name(&self) -> &'static str {
        "dot-product"
    }

    fn scores(&mut self, task: &TaskSpec, feasible: &[usize], cx: &mut Context<'_>) -> Vec<i64> {
        feasible
            .iter()
            .map(|&n| {
                let node = &cx.nodes[n];
                if node.cpu_left < task_cpu(task) {
                    return 0;
                }
                let free = [
                    node.cpu_left as f64 / MAX_SPEC_CPU,
                    node.gpu_milli_left() as f64 / MAX_SPEC_GPU,
                ];
                let ask = [
                    task_cpu(task) as f64 / MAX_SPEC_CPU,
                    task.total_gpu_milli() as f64 / MAX_SPEC_GPU,
                ];
                let mut dot = 0.0;
                dot += free[0] * ask[0];
                dot += free[1] * ask[1];
                (100.0 * (1.0 - dot / 2.0)) as i64
            })
            .collect()
    }

    fn gpus(&mut self, task: &TaskSpec, node: usize, cx: &mut Context<'_>) -> Vec<u32> {
        tightest(task, &cx.nodes[node])
    }
}
