//! Random (`random_score.go`): one feasible node drawn uniformly, and on it a
//! GPU drawn uniformly among those that fit (reservoir sampling), both from
//! Go's generator as the reference draws them. The reference draws the node
//! from a list its threads fill in no fixed order, so its choices cannot be
//! replayed one for one; this draws from the feasible nodes in cluster order.

use super::{first_idle, is_share, Context, SharePolicy};
use crate::openb::TaskSpec;

/// Random.
#[derive(Debug, Clone, Copy, Default)]
pub struct Random;

impl SharePolicy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn scores(&mut self, _task: &TaskSpec, feasible: &[usize], cx: &mut Context<'_>) -> Vec<i64> {
        let chosen = cx.rng.intn(feasible.len());
        (0..feasible.len())
            .map(|i| if i == chosen { 100 } else { 0 })
            .collect()
    }

    fn gpus(&mut self, task: &TaskSpec, node: usize, cx: &mut Context<'_>) -> Vec<u32> {
        let node = &cx.nodes[node];
        if !is_share(task) {
            return first_idle(task, node);
        }
        let (mut fitting, mut chosen) = (0usize, None);
        for (g, &left) in node.gpu_left.iter().enumerate() {
            if left >= task.gpu_milli {
                fitting += 1;
                if cx.rng.intn(fitting) == 0 {
                    chosen = Some(g as u32);
                }
            }
        }
        chosen.into_iter().collect()
    }
}
