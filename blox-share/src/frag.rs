//! GPU fragmentation against a target workload ("Beware of Fragmentation",
//! §3: a node's free GPU share is a fragment for a task type that cannot use
//! it; the measure is its expectation over the task types' frequencies).
//!
//! The arithmetic follows the authors' simulator (`pkg/utils/frag.go`): the
//! target workload is the most popular task types covering 95 % of the
//! original trace's tasks, and a node's measure sums, type by type in that
//! order, the free thousandths the type cannot use.

use std::collections::HashMap;

use crate::node::NodeState;
use crate::openb::TaskSpec;

/// A task's resources as the policies compare them: CPU (a task asking for
/// none counts as 100 thousandths, as Kubernetes scores it), thousandths of
/// each GPU, GPUs, and the models allowed (`|`-joined, empty for any).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskShape {
    /// CPU, thousandths (never 0).
    pub cpu_milli: i64,
    /// Thousandths of each GPU (0 for a task without GPUs).
    pub gpu_milli: u32,
    /// GPUs.
    pub num_gpu: u32,
    /// Allowed models, `|`-joined.
    pub models: String,
}

impl TaskShape {
    /// The shape of a task.
    pub fn of(task: &TaskSpec) -> Self {
        TaskShape {
            cpu_milli: if task.cpu_milli == 0 {
                100
            } else {
                task.cpu_milli
            },
            gpu_milli: task.gpu_milli,
            num_gpu: task.num_gpu,
            models: task.gpu_models.join("|"),
        }
    }

    /// Whether a node of `model` may host it (any model when none is named).
    pub fn allows_model(&self, model: &str) -> bool {
        if self.models.is_empty() {
            return true;
        }
        if model.is_empty() {
            return false;
        }
        let mut named = 0;
        for m in self.models.split('|').filter(|m| !m.is_empty()) {
            named += 1;
            if m == model {
                return true;
            }
        }
        named == 0
    }
}

/// The target workload: task shapes with their frequencies, most popular first.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetWorkload {
    /// (shape, probability); probabilities sum to 1.
    pub types: Vec<(TaskShape, f64)>,
}

impl TargetWorkload {
    /// The most popular shapes of `tasks` covering `percent` of them (the
    /// reference uses 95), ordered by count then shape, both descending.
    pub fn popular(tasks: &[TaskSpec], percent: f64) -> Self {
        let mut counts: HashMap<TaskShape, f64> = HashMap::new();
        for t in tasks {
            *counts.entry(TaskShape::of(t)).or_insert(0.0) += 1.0;
        }
        Self::of_counts(counts, percent)
    }

    /// [`popular`](Self::popular) from the number of tasks of each shape.
    pub fn of_counts(counts: impl IntoIterator<Item = (TaskShape, f64)>, percent: f64) -> Self {
        let mut list: Vec<(TaskShape, f64)> = counts.into_iter().collect();
        list.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
        let total: f64 = list.iter().map(|x| x.1).sum();
        let expected = percent * total / 100.0;
        let (mut i, mut n, mut cum) = (0usize, 0usize, 0.0f64);
        while cum < expected {
            n += 1;
            while i < n && i < list.len() {
                cum += list[i].1;
                list[i].1 /= total;
                i += 1;
            }
            if i >= list.len() {
                break;
            }
        }
        if i < list.len() {
            list.truncate(i);
            for entry in &mut list {
                entry.1 /= cum / total;
            }
        }
        TargetWorkload { types: list }
    }

    /// The node's expected fragment: free GPU thousandths that each task
    /// type could not use, weighted by the type's frequency.
    pub fn node_frag(&self, cpu_left: i64, gpu_left: &[u32], model: &str) -> f64 {
        sum_except_q3(&self.node_parts(cpu_left, gpu_left, model))
    }

    /// The node's free GPU thousandths by the paper's classes (Fig. 5), each
    /// weighted by the task types' frequencies: [`Q1_LACK_BOTH`], Q2 lack
    /// GPU, [`Q3_SATISFIED`], Q4 lack CPU, XL (a CPU task fits), XR (it does
    /// not), no access (the model is not allowed). All but Q3 are fragments.
    pub fn node_parts(&self, cpu_left: i64, gpu_left: &[u32], model: &str) -> [f64; 7] {
        let mut data = [0.0f64; 7];
        let total: i64 = gpu_left.iter().map(|&m| m as i64).sum();
        for (shape, f) in &self.types {
            let cpu_ok = cpu_left >= shape.cpu_milli;
            let q = if shape.gpu_milli == 0 {
                if cpu_ok {
                    4
                } else {
                    5
                }
            } else if !shape.allows_model(model) {
                6
            } else if can_host(gpu_left, shape) {
                if cpu_ok {
                    2
                } else {
                    3
                }
            } else if cpu_ok {
                1
            } else {
                0
            };
            if q == 2 {
                let unusable: i64 = gpu_left
                    .iter()
                    .filter(|&&m| m < shape.gpu_milli)
                    .map(|&m| m as i64)
                    .sum();
                data[1] += f * unusable as f64;
                data[2] += f * (total - unusable) as f64;
            } else {
                data[q] += f * total as f64;
            }
        }
        data
    }

    /// [`Self::node_frag`] of a node's current state.
    pub fn frag_of(&self, node: &NodeState) -> f64 {
        self.node_frag(node.cpu_left, &node.gpu_left, &node.model)
    }
}

/// The first class of [`TargetWorkload::node_parts`]; the rest follow in order.
pub const Q1_LACK_BOTH: usize = 0;
/// The class whose share is usable: not a fragment.
pub const Q3_SATISFIED: usize = 2;

/// The fragment of a class vector: every class but Q3, summed in order.
pub fn sum_except_q3(data: &[f64; 7]) -> f64 {
    let mut out = 0.0;
    for (q, v) in data.iter().enumerate() {
        if q != Q3_SATISFIED {
            out += v;
        }
    }
    out
}

/// Whether `num_gpu` of the GPUs each have the shape's share free.
fn can_host(gpu_left: &[u32], shape: &TaskShape) -> bool {
    let mut need = shape.num_gpu as i64;
    for &m in gpu_left {
        if m >= shape.gpu_milli {
            need -= 1;
            if need <= 0 {
                return true;
            }
        }
    }
    false
}
