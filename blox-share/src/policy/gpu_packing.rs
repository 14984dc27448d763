//! GPU packing (`gpu_packing_score.go`): first GPUs already in use, then idle
//! GPUs on nodes in use, then idle nodes.

use super::{tightest, Context, SharePolicy};
use crate::openb::{TaskSpec, GPU_MILLI};

/// GPU packing.
#[derive(Debug, Clone, Copy, Default)]
pub struct GpuPacking;

impl SharePolicy for GpuPacking {
    fn name(&self) -> &'static str {
        "gpu-packing"
    }

    fn scores(&mut self, task: &TaskSpec, feasible: &[usize], cx: &mut Context<'_>) -> Vec<i64> {
        feasible
            .iter()
            .map(|&n| score(task, &cx.nodes[n].gpu_left))
            .collect()
    }

    fn gpus(&mut self, task: &TaskSpec, node: usize, cx: &mut Context<'_>) -> Vec<u32> {
        tightest(task, &cx.nodes[node])
    }
}

fn score(task: &TaskSpec, gpu_left: &[u32]) -> i64 {
    if task.gpu_milli == 0 {
        return 0;
    }
    let idle = gpu_left.iter().filter(|&&m| m == GPU_MILLI).count() as i64;
    if idle == gpu_left.len() as i64 {
        return (100 / 3 - idle).max(idle);
    }
    let mut order: Vec<usize> = (0..gpu_left.len()).collect();
    order.sort_by_key(|&g| gpu_left[g]);
    let mut need = task.num_gpu;
    let (mut used, mut idle_used) = (Vec::new(), 0i64);
    for g in order {
        if need == 0 {
            break;
        }
        if task.gpu_milli <= gpu_left[g] {
            need -= 1;
            used.push(g);
            if gpu_left[g] == GPU_MILLI {
                idle_used += 1;
            }
        }
    }
    if idle_used > 0 {
        return (50 - idle_used).max(100 / 3);
    }
    let left: i64 = used
        .iter()
        .map(|&g| gpu_left[g] as i64 * 100 / GPU_MILLI as i64)
        .sum();
    (100 - left / 10).max(50)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(milli: u32) -> TaskSpec {
        TaskSpec {
            name: "t".into(),
            cpu_milli: 1000,
            memory_mib: 0,
            num_gpu: 1,
            gpu_milli: milli,
            gpu_models: vec![],
            creation_s: None,
            deletion_s: None,
        }
    }

    #[test]
    fn a_used_gpu_beats_an_idle_gpu_beats_an_idle_node() {
        // The reference's own examples: a share landing on a GPU with 540
        // left scores 95; on a used node where only an idle GPU fits, 49; an
        // idle 8-GPU node 25 and an idle 2-GPU node 31.
        assert_eq!(score(&share(460), &[540, 0, 0, 0]), 95);
        assert_eq!(score(&share(460), &[100, 1000]), 49);
        assert_eq!(score(&share(460), &[1000; 8]), 25);
        assert_eq!(score(&share(460), &[1000; 2]), 31);
    }
}
