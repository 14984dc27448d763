//! Best fit (`best_fit_score.go`): prefer the node with the least CPU and GPU
//! left after the task, each normalised by the largest node and weighted
//! half; scores rescaled to 0–100 over the feasible nodes.

use super::{task_cpu, tightest, Context, SharePolicy, MAX_SPEC_CPU, MAX_SPEC_GPU};
use crate::openb::TaskSpec;

/// Best fit.
#[derive(Debug, Clone, Copy, Default)]
pub struct BestFit;

impl SharePolicy for BestFit {
    fn name(&self) -> &'static str {
        "best-fit"
    }

    fn scores(&mut self, task: &TaskSpec, feasible: &[usize], cx: &mut Context<'_>) -> Vec<i64> {
        let raw: Vec<i64> = feasible
            .iter()
            .map(|&n| {
                let node = &cx.nodes[n];
                let mut s = 0.0;
                s += (node.cpu_left as f64 - task_cpu(task) as f64) / MAX_SPEC_CPU * 0.5;
                s += (node.gpu_milli_left() as f64 - task.total_gpu_milli() as f64) / MAX_SPEC_GPU
                    * 0.5;
                ((1.0 - s) * 100.0) as i64
            })
            .collect();
        let hi = raw.iter().copied().max().unwrap_or(0);
        let lo = raw.iter().copied().min().unwrap_or(0);
        raw.iter()
            .map(|&r| {
                if hi == lo {
                    0
                } else {
                    (r - lo) * 100 / (hi - lo)
                }
            })
            .collect()
    }

    fn gpus(&mut self, task: &TaskSpec, node: usize, cx: &mut Context<'_>) -> Vec<u32> {
        tightest(task, &cx.nodes[node])
    }
}
