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

/// Why no node takes the task: what it asks for, the nearest a node comes,
/// and how many nodes each limit excludes (checked in the order the
/// reference filters: task count, CPU, memory, GPU model, GPU share).
pub fn why_no_node(nodes: &[NodeState], task: &TaskSpec) -> String {
    let (mut full, mut cpu, mut mem, mut model) = (0usize, 0usize, 0usize, 0usize);
    let wants_gpus = task.gpu_milli > 0 && task.num_gpu > 0;
    let mut nearest: Option<u32> = None;
    for n in nodes {
        if n.tasks + 1 > MAX_TASKS {
            full += 1;
        } else if task.cpu_milli > n.cpu_left {
            cpu += 1;
        } else if task.memory_mib > n.memory_left {
            mem += 1;
        } else if wants_gpus && !task.allows_model(&n.model) {
            model += 1;
        } else if wants_gpus {
            let best = if task.num_gpu == 1 {
                n.gpu_left.iter().copied().max().unwrap_or(0)
            } else {
                n.gpus_fitting(task.gpu_milli) as u32
            };
            nearest = Some(nearest.map_or(best, |b| b.max(best)));
        }
    }
    let models = if task.gpu_models.is_empty() {
        String::new()
    } else {
        format!(" ({})", task.gpu_models.join("|"))
    };
    let mut why = if !wants_gpus {
        format!(
            "waiting for {:.2} cores and {} MiB",
            task.cpu_milli as f64 / 1000.0,
            task.memory_mib
        )
    } else if task.num_gpu == 1 {
        let ask = if task.gpu_milli == GPU_MILLI {
            format!("a whole GPU{models}")
        } else {
            format!(
                "{:.2} of a GPU{models}",
                task.gpu_milli as f64 / GPU_MILLI as f64
            )
        };
        match nearest {
            Some(b) => format!(
                "waiting for {ask}: the largest free share on a node with its CPU and memory is {:.2}",
                b as f64 / GPU_MILLI as f64
            ),
            None => format!("waiting for {ask}: no node has its CPU and memory"),
        }
    } else {
        match nearest {
            Some(b) => format!(
                "waiting for {} whole GPUs{models}: at most {b} idle on a node with its CPU and memory",
                task.num_gpu
            ),
            None => format!("waiting for {} whole GPUs{models}: no node has its CPU and memory", task.num_gpu),
        }
    };
    let mut short = Vec::new();
    for (count, what) in [
        (cpu, "CPU"),
        (mem, "memory"),
        (model, "another GPU model"),
        (full, "task limit"),
    ] {
        if count > 0 {
            short.push(format!("{what}: {count}"));
        }
    }
    if !short.is_empty() {
        why.push_str(&format!(" (nodes excluded by {})", short.join(", ")));
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: i64, gpus: u32, model: &str) -> NodeState {
        NodeState::new(&NodeSpec {
            name: name.into(),
            cpu_milli: cpu,
            memory_mib: 4096,
            gpus,
            model: model.into(),
        })
    }

    fn task(num_gpu: u32, gpu_milli: u32, models: &[&str]) -> TaskSpec {
        TaskSpec {
            name: "t".into(),
            cpu_milli: 4000,
            memory_mib: 1024,
            num_gpu,
            gpu_milli,
            gpu_models: models.iter().map(|m| m.to_string()).collect(),
            creation_s: None,
            deletion_s: None,
        }
    }

    #[test]
    fn a_task_that_fits_nowhere_is_told_the_nearest_share_and_what_excludes_the_rest() {
        let mut t4 = node("a", 8000, 2, "T4");
        t4.gpu_left = vec![300, 0];
        let v100 = node("b", 2000, 4, "V100");
        let g2 = node("c", 8000, 8, "G2");
        let nodes = [t4, v100, g2];
        let share = task(1, 460, &["T4", "V100"]);
        assert!(nodes.iter().all(|n| !n.fits(&share)));
        assert_eq!(
            why_no_node(&nodes, &share),
            "waiting for 0.46 of a GPU (T4|V100): the largest free share on a node with its CPU and memory \
             is 0.30 (nodes excluded by CPU: 1, another GPU model: 1)"
        );
        let whole = task(4, 1000, &["T4"]);
        assert_eq!(
            why_no_node(&nodes, &whole),
            "waiting for 4 whole GPUs (T4): at most 0 idle on a node with its CPU and memory \
             (nodes excluded by CPU: 1, another GPU model: 1)"
        );
        assert_eq!(
            why_no_node(&nodes, &task(1, 1000, &[])),
            "waiting for a whole GPU: the largest free share on a node with its CPU and memory \
             is 1.00 (nodes excluded by CPU: 1)"
        );
        let mut cpu_only = task(0, 0, &[]);
        cpu_only.cpu_milli = 16_000;
        assert_eq!(
            why_no_node(&nodes, &cpu_only),
            "waiting for 16.00 cores and 1024 MiB (nodes excluded by CPU: 3)"
        );
    }
}
