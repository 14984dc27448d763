//! Placement policies for tasks that share GPUs, scored as the FGD authors'
//! simulator scores them (`pkg/simulator/plugin/*.go` of
//! `hkust-adsl/kubernetes-scheduler-simulator`): each feasible node gets an
//! integer score, the highest wins, and ties go to the node whose name sorts
//! first. Then the policy picks the GPUs on that node.

mod best_fit;
mod dot_product;
mod fgd;
mod gpu_clustering;
mod gpu_packing;
mod random;

pub use best_fit::BestFit;
pub use dot_product::DotProduct;
pub use fgd::Fgd;
pub use gpu_clustering::GpuClustering;
pub use gpu_packing::GpuPacking;
pub use random::Random;

use crate::frag::TargetWorkload;
use crate::gorand::GoRand;
use crate::node::NodeState;
use crate::openb::{TaskSpec, GPU_MILLI};

/// The reference's largest node, by which CPU and GPU are normalised
/// (`MaxSpecCpu`, `MaxSpecGpu`): 128 cores, 8 GPUs.
pub const MAX_SPEC_CPU: f64 = 128_000.0;
/// See [`MAX_SPEC_CPU`].
pub const MAX_SPEC_GPU: f64 = 8_000.0;

/// What a policy sees while it places one task.
pub struct Context<'a> {
    /// Every node, in the cluster's order.
    pub nodes: &'a [NodeState],
    /// The target workload the fragmentation measure is taken against.
    pub target: &'a TargetWorkload,
    /// The run's random source (Go's, as the reference draws it).
    pub rng: &'a mut GoRand,
}

/// A placement policy for tasks that share GPUs.
pub trait SharePolicy: Send {
    /// The policy's name in configs and results.
    fn name(&self) -> &'static str;

    /// One integer score per feasible node (`feasible` holds node indices,
    /// ascending: two or more in the packing experiment, which skips
    /// scoring a lone feasible node as the reference does; one or more in
    /// the round loop's `share` placement). The highest wins.
    fn scores(&mut self, task: &TaskSpec, feasible: &[usize], cx: &mut Context<'_>) -> Vec<i64>;

    /// The GPUs the task takes on the chosen node (ascending); called only
    /// for a task with GPUs.
    fn gpus(&mut self, task: &TaskSpec, node: usize, cx: &mut Context<'_>) -> Vec<u32>;
}

/// A policy by its name (`fgd`, `best-fit`, `dot-product`, `gpu-packing`,
/// `gpu-clustering`, `random`).
pub fn by_name(name: &str) -> Option<Box<dyn SharePolicy>> {
    Some(match name {
        "fgd" => Box::new(Fgd::default()),
        "fgd-exact" => Box::new(Fgd::exact()),
        "best-fit" => Box::new(BestFit),
        "dot-product" => Box::new(DotProduct),
        "gpu-packing" => Box::new(GpuPacking),
        "gpu-clustering" => Box::new(GpuClustering),
        "random" => Box::new(Random),
        _ => return None,
    })
}

/// Variants kept to measure a choice of the reference against the paper's
/// rule (not part of `all`).
pub const VARIANTS: [&str; 1] = ["fgd-exact"];

/// The reference's six policies, in its numbering.
pub const NAMES: [&str; 6] = [
    "random",
    "dot-product",
    "gpu-clustering",
    "gpu-packing",
    "best-fit",
    "fgd",
];

/// CPU as the policies weigh a task (a task asking for none counts 100).
pub(crate) fn task_cpu(task: &TaskSpec) -> i64 {
    if task.cpu_milli == 0 {
        100
    } else {
        task.cpu_milli
    }
}

/// Whether the task takes whole GPUs (or none) rather than a share of one.
pub(crate) fn is_share(task: &TaskSpec) -> bool {
    task.num_gpu == 1 && task.gpu_milli < GPU_MILLI
}

/// The first `num_gpu` idle GPUs, ascending (whole-GPU tasks, every policy).
pub(crate) fn first_idle(task: &TaskSpec, node: &NodeState) -> Vec<u32> {
    (0..node.gpu_left.len() as u32)
        .filter(|&g| node.gpu_left[g as usize] == GPU_MILLI)
        .take(task.num_gpu as usize)
        .collect()
}

/// "best": the GPU whose free share fits tightest, the lowest index on ties;
/// whole-GPU tasks take the first idle GPUs.
pub(crate) fn tightest(task: &TaskSpec, node: &NodeState) -> Vec<u32> {
    if !is_share(task) {
        return first_idle(task, node);
    }
    let mut best: Option<usize> = None;
    for (g, &left) in node.gpu_left.iter().enumerate() {
        if left >= task.gpu_milli && best.is_none_or(|b| left < node.gpu_left[b]) {
            best = Some(g);
        }
    }
    best.map(|g| vec![g as u32]).unwrap_or_default()
}

/// The GPUs' free shares after the task takes the `num_gpu` fullest GPUs
/// that fit (the reference's `NodeResource.Sub`: a stable ascending sort by
/// free share).
pub(crate) fn after_taking(task: &TaskSpec, gpu_left: &[u32]) -> Vec<u32> {
    let mut left = gpu_left.to_vec();
    if task.num_gpu == 0 {
        return left;
    }
    let mut order: Vec<usize> = (0..left.len()).collect();
    order.sort_by_key(|&g| left[g]);
    let mut need = task.num_gpu;
    for g in order {
        if task.gpu_milli <= left[g] {
            left[g] -= task.gpu_milli;
            need -= 1;
            if need == 0 {
                break;
            }
        }
    }
    left
}
