//! The packing experiment of "Beware of Fragmentation" (§6.1) as the
//! authors' simulator runs it: tasks arrive one by one in a shuffled order,
//! the trace inflated to a share of the cluster's GPU capacity, and never
//! leave; a task that fits nowhere fails and is not retried. The measure is
//! the share of GPU capacity allocated as the arrived demand grows.
//!
//! The order of draws from Go's generator is the reference's
//! (`pkg/simulator/core.go`, `simulator.go`): `rand.Seed(seed)`; one
//! `rand.Int()`; the name-sorted tasks shuffled; the inflation's draws
//! (`rand.Intn` over the name-sorted original tasks, copies appended after
//! the shuffled list); ten `rand.Float64()` that the Kubernetes client's
//! informers draw as they start; `rand.Perm(nodes)`, whose values prefix the
//! name-sorted nodes' names (`0042-openb-node-0007`) and so decide ties; then,
//! per task, the scheduler's `rand.Intn(100)` and, for a task that fails,
//! `rand.Int31n(nodes)` of its preemption step.

use crate::frag::{sum_except_q3, TargetWorkload};
use crate::gorand::GoRand;
use crate::node::NodeState;
use crate::openb::{NodeSpec, TaskSpec, GPU_MILLI};
use crate::policy::{Context, SharePolicy};

/// How a packing run is set up.
#[derive(Debug, Clone, PartialEq)]
pub struct PackingSetup {
    /// Arrived GPU demand as a multiple of the cluster's GPU capacity
    /// (the reference's `-tune`; 0 keeps the trace as it is).
    pub tune: f64,
    /// Go's seed (`-tuneseed`).
    pub seed: i64,
    /// Whether tasks arrive shuffled (`--shuffle-pod`); otherwise by name.
    pub shuffle: bool,
    /// The share of tasks whose shapes make the target workload (95).
    pub popular_percent: f64,
}

impl Default for PackingSetup {
    fn default() -> Self {
        PackingSetup {
            tune: 1.3,
            seed: 42,
            shuffle: true,
            popular_percent: 95.0,
        }
    }
}

/// What happened to one task.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The task's name (copies made by the inflation end in `-tuned-<i>`).
    pub task: String,
    /// The node's index in [`PackingRun::nodes`]; `None` if it failed.
    pub node: Option<usize>,
    /// GPU indices on the node.
    pub gpus: Vec<u32>,
    /// Thousandths of each GPU.
    pub gpu_milli: u32,
    /// GPU thousandths arrived so far, this task's included (failed too).
    pub arrived_milli: i64,
    /// GPU thousandths allocated after this task.
    pub used_milli: i64,
    /// The cluster's fragmented GPU thousandths after this task (the
    /// paper's fragment amount against the target workload).
    pub frag_milli: f64,
    /// That as a percentage of the free GPU thousandths.
    pub frag_percent: f64,
}

/// The cluster's fragment amount and ratio, summed node by node in the
/// order of their ranked names (as the reference lists them) and class by
/// class.
struct FragReport {
    parts: Vec<[f64; 7]>,
    order: Vec<usize>,
}

impl FragReport {
    fn new(nodes: &[NodeState], ranked_names: &[String], target: &TargetWorkload) -> Self {
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|&a, &b| ranked_names[a].cmp(&ranked_names[b]));
        let parts = nodes
            .iter()
            .map(|n| target.node_parts(n.cpu_left, &n.gpu_left, &n.model))
            .collect();
        FragReport { parts, order }
    }

    fn update(&mut self, node: usize, state: &NodeState, target: &TargetWorkload) {
        self.parts[node] = target.node_parts(state.cpu_left, &state.gpu_left, &state.model);
    }

    /// (fragment amount, its percentage of the free GPU thousandths).
    fn now(&self) -> (f64, f64) {
        let mut cluster = [0.0f64; 7];
        for &n in &self.order {
            for (c, p) in cluster.iter_mut().zip(&self.parts[n]) {
                *c += p;
            }
        }
        let frag = sum_except_q3(&cluster);
        let mut idle = 0.0;
        for v in &cluster {
            idle += v;
        }
        (frag, if idle > 0.0 { 100.0 * frag / idle } else { 0.0 })
    }
}

/// A finished packing run.
#[derive(Debug, Clone)]
pub struct PackingRun {
    /// Node names, name-sorted (the order of [`Outcome::node`]).
    pub nodes: Vec<String>,
    /// Each node's name as the reference prefixes it (ties go to the smallest).
    pub ranked_names: Vec<String>,
    /// One per arriving task, in arrival order.
    pub outcomes: Vec<Outcome>,
    /// GPUs in the cluster.
    pub total_gpus: u32,
    /// The final state of each node.
    pub final_nodes: Vec<NodeState>,
}

/// A run that cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PackingError {
    /// Nothing to tune: no GPU demand or no GPUs.
    #[error("cannot inflate the workload: {0}")]
    Tune(String),
    /// The policy chose GPUs the node cannot give.
    #[error("policy `{policy}` placed task `{task}` where it does not fit: {why}")]
    Invalid {
        /// The policy.
        policy: String,
        /// The task.
        task: String,
        /// What went over.
        why: String,
    },
}

/// The arriving tasks, in order, after the shuffle and the inflation.
fn arrivals(
    tasks: &[TaskSpec],
    capacity: i64,
    setup: &PackingSetup,
    rng: &mut GoRand,
) -> Result<Vec<TaskSpec>, PackingError> {
    let mut sorted: Vec<TaskSpec> = tasks.to_vec();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    rng.int63();
    let mut list = sorted.clone();
    if setup.shuffle {
        rng.shuffle(&mut list);
    }
    if setup.tune > 0.0 {
        let mut total: i64 = list.iter().map(TaskSpec::total_gpu_milli).sum();
        if total <= 0 || capacity <= 0 {
            return Err(PackingError::Tune(format!(
                "the tasks ask for {total} GPU thousandths and the nodes have {capacity}"
            )));
        }
        let target = setup.tune * capacity as f64;
        if (total as f64) < target {
            let mut i = 0;
            loop {
                let pick = &sorted[rng.intn(sorted.len())];
                if (total + pick.gpu_milli as i64) as f64 > target {
                    break;
                }
                total += pick.total_gpu_milli();
                let mut copy = pick.clone();
                copy.name = format!("{}-tuned-{i}", pick.name);
                list.push(copy);
                i += 1;
            }
        } else {
            while total as f64 > target && !list.is_empty() {
                let gone = list.remove(rng.intn(list.len()));
                total -= gone.total_gpu_milli();
            }
        }
    }
    Ok(list)
}

/// Runs the experiment: every task placed by `policy` or failed.
pub fn run(
    node_specs: &[NodeSpec],
    tasks: &[TaskSpec],
    policy: &mut dyn SharePolicy,
    setup: &PackingSetup,
) -> Result<PackingRun, PackingError> {
    let target = TargetWorkload::popular(tasks, setup.popular_percent);
    let mut specs: Vec<&NodeSpec> = node_specs.iter().collect();
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    let mut nodes: Vec<NodeState> = specs.iter().map(|s| NodeState::new(s)).collect();
    let total_gpus: u32 = specs.iter().map(|s| s.gpus).sum();
    let mut rng = GoRand::new(setup.seed);
    let list = arrivals(tasks, total_gpus as i64 * GPU_MILLI as i64, setup, &mut rng)?;
    for _ in 0..10 {
        rng.float64();
    }
    let prefix = rng.perm(nodes.len());
    let ranked_names: Vec<String> = specs
        .iter()
        .zip(&prefix)
        .map(|(s, p)| format!("{p:04}-{}", s.name))
        .collect();
    let mut report = FragReport::new(&nodes, &ranked_names, &target);
    let mut outcomes = Vec::with_capacity(list.len());
    let (mut arrived, mut used) = (0i64, 0i64);
    let mut feasible = Vec::new();
    for task in &list {
        arrived += task.total_gpu_milli();
        rng.intn(100);
        feasible.clear();
        feasible.extend((0..nodes.len()).filter(|&n| nodes[n].fits(task)));
        let chosen = match feasible.len() {
            0 => {
                rng.int31n(nodes.len().max(1) as i32);
                None
            }
            1 => Some(feasible[0]),
            _ => {
                let mut cx = Context {
                    nodes: &nodes,
                    target: &target,
                    rng: &mut rng,
                };
                let scores = policy.scores(task, &feasible, &mut cx);
                let mut best = 0;
                for k in 1..feasible.len() {
                    let (s, b) = (scores[k], scores[best]);
                    if s > b || (s == b && ranked_names[feasible[k]] < ranked_names[feasible[best]])
                    {
                        best = k;
                    }
                }
                Some(feasible[best])
            }
        };
        let mut gpus = Vec::new();
        if let Some(n) = chosen {
            if task.gpu_milli > 0 && task.num_gpu > 0 {
                let mut cx = Context {
                    nodes: &nodes,
                    target: &target,
                    rng: &mut rng,
                };
                gpus = policy.gpus(task, n, &mut cx);
                gpus.sort_unstable();
            }
            nodes[n]
                .take(task, &gpus)
                .map_err(|e| PackingError::Invalid {
                    policy: policy.name().to_string(),
                    task: task.name.clone(),
                    why: e.to_string(),
                })?;
            used += task.total_gpu_milli();
            report.update(n, &nodes[n], &target);
        }
        let (frag_milli, frag_percent) = report.now();
        outcomes.push(Outcome {
            task: task.name.clone(),
            node: chosen,
            gpus,
            gpu_milli: task.gpu_milli,
            arrived_milli: arrived,
            used_milli: used,
            frag_milli,
            frag_percent,
        });
    }
    Ok(PackingRun {
        nodes: specs.iter().map(|s| s.name.clone()).collect(),
        ranked_names,
        outcomes,
        total_gpus,
        final_nodes: nodes,
    })
}
