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

use crate::frag::TargetWorkload;
use crate::gorand::GoRand;
use crate::node::NodeState;
use crate::openb::{NodeSpec, TaskSpec, GPU_MILLI};
use crate::placer::Placer;
use crate::policy::SharePolicy;

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
    /// For a task that failed: why no node took it.
    pub why: Option<String>,
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
    /// A task no policy can place (see [`TaskSpec::check`]).
    #[error("task `{task}`: {why}")]
    BadTask {
        /// The task.
        task: String,
        /// What is wrong with it.
        why: String,
    },
    /// The timed mode needs each task's creation time.
    #[error("task `{0}` has no creation time: the timed mode needs the pod list's `creation_time` column")]
    NoTimes(String),
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

/// The most copies of each task the inflation may add, on average.
pub const MAX_INFLATION: usize = 100;

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
            // Copies beyond this many times the list mean a target no
            // inflation of this list should reach (a tiny demand, a huge tune).
            let most = sorted.len().saturating_mul(MAX_INFLATION);
            let mut i = 0;
            loop {
                if i >= most {
                    return Err(PackingError::Tune(format!(
                        "{} × the GPU capacity needs more than {MAX_INFLATION} copies of each of the {} tasks (they ask for {total} GPU thousandths in all)",
                        setup.tune,
                        sorted.len()
                    )));
                }
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
    let (list, mut placer) = start(node_specs, tasks, policy, setup)?;
    let mut outcomes = Vec::with_capacity(list.len());
    let (mut arrived, mut used) = (0i64, 0i64);
    for task in &list {
        arrived += task.total_gpu_milli();
        let placed = placer.place(task)?;
        let why = match placed {
            Some(_) => {
                used += task.total_gpu_milli();
                None
            }
            None => Some(placer.why_not(task)),
        };
        let (frag_milli, frag_percent) = placer.frag();
        let (node, gpus) = placed
            .map(|(n, g)| (Some(n), g))
            .unwrap_or((None, Vec::new()));
        outcomes.push(Outcome {
            task: task.name.clone(),
            node,
            gpus,
            gpu_milli: task.gpu_milli,
            arrived_milli: arrived,
            used_milli: used,
            frag_milli,
            frag_percent,
            why,
        });
    }
    Ok(PackingRun {
        total_gpus: placer.total_gpus(),
        nodes: placer.node_names,
        ranked_names: placer.ranked_names,
        outcomes,
        final_nodes: placer.nodes,
    })
}

/// The arriving tasks and a placer, with Go's generator drawn as the
/// reference draws it before the first task.
pub(crate) fn start<'p>(
    node_specs: &[NodeSpec],
    tasks: &[TaskSpec],
    policy: &'p mut dyn SharePolicy,
    setup: &PackingSetup,
) -> Result<(Vec<TaskSpec>, Placer<'p>), PackingError> {
    if let Some((t, why)) = tasks.iter().find_map(|t| t.check().err().map(|w| (t, w))) {
        return Err(PackingError::BadTask {
            task: t.name.clone(),
            why,
        });
    }
    if !(setup.tune >= 0.0 && setup.tune.is_finite()) {
        return Err(PackingError::Tune(format!(
            "the tune {} is not a finite multiple, 0 or more",
            setup.tune
        )));
    }
    let target = TargetWorkload::popular(tasks, setup.popular_percent);
    let capacity: i64 = node_specs
        .iter()
        .map(|s| s.gpus as i64 * GPU_MILLI as i64)
        .sum();
    let mut rng = GoRand::new(setup.seed);
    let list = arrivals(tasks, capacity, setup, &mut rng)?;
    Ok((list, Placer::new(node_specs, target, rng, policy)))
}
