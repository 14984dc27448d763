//! A node whose GPUs tasks share: CPU, memory and each GPU's free thousandths.

use crate::openb::{NodeSpec, TaskSpec, GPU_MILLI};

/// What is left on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// Its name as the policies see it (ties go to the smallest).
    pub name: String,
    /// GPU model.
    pub model: String,
    /// CPU capacity, thousandths of a core.
    pub cpu_capacity: i64,
    /// CPU left.
    pub cpu_left: i64,
    /// Memory capacity, MiB.
    pub memory_capacity: i64,
    /// Memory left.
    pub memory_left: i64,
    /// Each GPU's free thousandths.
    pub gpu_left: Vec<u32>,
    /// Tasks on the node.
    pub tasks: u32,
    /// Tasks on the node by GPU kind: 0 for a share of one GPU, k for k
    /// whole GPUs (tasks without GPUs are not counted).
    pub kinds: std::collections::BTreeMap<u32, u32>,
}

/// Tasks a node may hold (Kubernetes' pod limit in the trace's node lists).
pub const MAX_TASKS: u32 = 1001;

/// A task's GPU kind for [`NodeState::kinds`]: `None` without GPUs, `Some(0)`
/// for a share of one GPU, `Some(k)` for k whole GPUs.
pub fn gpu_kind(task: &TaskSpec) -> Option<u32> {
    if task.num_gpu == 0 {
        None
    } else if task.num_gpu == 1 && task.gpu_milli < GPU_MILLI {
        Some(0)
    } else {
        Some(task.num_gpu)
    }
}

/// Which GPUs of a node a task takes, and how much of each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The node's index in the cluster.
    pub node: usize,
    /// GPU indices on it, ascending; empty for a task without GPUs.
    pub gpus: Vec<u32>,
    /// Thousandths taken of each of them.
    pub milli: u32,
}

/// A placement that breaks the node's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("node {node}: {what}")]
pub struct Overcommit {
    /// The node's name.
    pub node: String,
    /// What would go over.
    pub what: String,
}

impl NodeState {
    /// An empty node.
    pub fn new(spec: &NodeSpec) -> Self {
        NodeState {
            name: spec.name.clone(),
            model: spec.model.clone(),
            cpu_capacity: spec.cpu_milli,
            cpu_left: spec.cpu_milli,
            memory_capacity: spec.memory_mib,
            memory_left: spec.memory_mib,
            gpu_left: vec![GPU_MILLI; spec.gpus as usize],
            tasks: 0,
            kinds: Default::default(),
        }
    }

    /// GPUs with nothing on them.
    pub fn idle_gpus(&self) -> usize {
        self.gpu_left.iter().filter(|&&m| m == GPU_MILLI).count()
    }

    /// Free GPU thousandths in all.
    pub fn gpu_milli_left(&self) -> i64 {
        self.gpu_left.iter().map(|&m| m as i64).sum()
    }

    /// GPUs that could take `milli` thousandths.
    pub fn gpus_fitting(&self, milli: u32) -> usize {
        self.gpu_left.iter().filter(|&&m| m >= milli).count()
    }

    /// Whether the task fits: CPU, memory, model and enough GPUs with its
    /// share free (a whole-GPU task needs idle GPUs).
    pub fn fits(&self, task: &TaskSpec) -> bool {
        if self.tasks + 1 > MAX_TASKS {
            return false;
        }
        if task.cpu_milli > self.cpu_left || task.memory_mib > self.memory_left {
            return false;
        }
        if task.gpu_milli == 0 || task.num_gpu == 0 {
            return true;
        }
        task.allows_model(&self.model) && self.gpus_fitting(task.gpu_milli) >= task.num_gpu as usize
    }

    /// Takes the task's resources on the GPUs named.
    pub fn take(&mut self, task: &TaskSpec, gpus: &[u32]) -> Result<(), Overcommit> {
        let over = |what: String| Overcommit {
            node: self.name.clone(),
            what,
        };
        if task.cpu_milli > self.cpu_left {
            return Err(over(format!(
                "CPU {} > {} left",
                task.cpu_milli, self.cpu_left
            )));
        }
        if task.memory_mib > self.memory_left {
            return Err(over(format!(
                "memory {} MiB > {} left",
                task.memory_mib, self.memory_left
            )));
        }
        let wants_gpus = task.gpu_milli > 0 && task.num_gpu > 0;
        if wants_gpus && gpus.len() != task.num_gpu as usize {
            return Err(over(format!(
                "{} GPUs given for {} asked",
                gpus.len(),
                task.num_gpu
            )));
        }
        if !wants_gpus && !gpus.is_empty() {
            return Err(over("GPUs given to a task without GPUs".to_string()));
        }
        for (k, &g) in gpus.iter().enumerate() {
            let Some(&left) = self.gpu_left.get(g as usize) else {
                return Err(over(format!("no GPU {g}")));
            };
            if gpus[..k].contains(&g) {
                return Err(over(format!("GPU {g} given twice")));
            }
            if left < task.gpu_milli {
                return Err(over(format!(
                    "GPU {g}: {} thousandths > {left} left",
                    task.gpu_milli
                )));
            }
        }
        self.cpu_left -= task.cpu_milli;
        self.memory_left -= task.memory_mib;
        for &g in gpus {
            self.gpu_left[g as usize] -= task.gpu_milli;
        }
        self.tasks += 1;
        if let Some(kind) = gpu_kind(task) {
            *self.kinds.entry(kind).or_insert(0) += 1;
        }
        Ok(())
    }

    /// Gives back what `take` took.
    pub fn give_back(&mut self, task: &TaskSpec, gpus: &[u32]) {
        self.tasks = self.tasks.saturating_sub(1);
        if let Some(kind) = gpu_kind(task) {
            if let Some(n) = self.kinds.get_mut(&kind) {
                *n -= 1;
                if *n == 0 {
                    self.kinds.remove(&kind);
                }
            }
        }
        self.cpu_left = (self.cpu_left + task.cpu_milli).min(self.cpu_capacity);
        self.memory_left = (self.memory_left + task.memory_mib).min(self.memory_capacity);
        for &g in gpus {
            if let Some(left) = self.gpu_left.get_mut(g as usize) {
                *left = (*left + task.gpu_milli).min(GPU_MILLI);
            }
        }
    }
}
