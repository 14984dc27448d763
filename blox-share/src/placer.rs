//! One task at a time onto the nodes, as the reference's scheduler does it:
//! the nodes that fit, the policy's scores, the highest score with ties to
//! the smallest ranked name, then the policy's GPUs on the node.

use crate::frag::{sum_except_q3, TargetWorkload};
use crate::gorand::GoRand;
use crate::node::NodeState;
use crate::openb::{NodeSpec, TaskSpec};
use crate::packing::PackingError;
use crate::policy::{Context, SharePolicy};

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

/// The nodes, the policy and the random source of one run.
pub struct Placer<'p> {
    /// Node state, in name order.
    pub nodes: Vec<NodeState>,
    /// Node names, in name order.
    pub node_names: Vec<String>,
    /// Each node's name as the reference prefixes it (ties go to the smallest).
    pub ranked_names: Vec<String>,
    target: TargetWorkload,
    rng: GoRand,
    policy: &'p mut dyn SharePolicy,
    report: FragReport,
    feasible: Vec<usize>,
}

impl<'p> Placer<'p> {
    /// Empty nodes, name-sorted, ranked by the reference's draws: ten
    /// `rand.Float64()` (the Kubernetes client's informers starting) and
    /// `rand.Perm(nodes)`, whose values prefix the names.
    pub fn new(
        node_specs: &[NodeSpec],
        target: TargetWorkload,
        mut rng: GoRand,
        policy: &'p mut dyn SharePolicy,
    ) -> Self {
        let mut specs: Vec<&NodeSpec> = node_specs.iter().collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        let nodes: Vec<NodeState> = specs.iter().map(|s| NodeState::new(s)).collect();
        for _ in 0..10 {
            rng.float64();
        }
        let prefix = rng.perm(nodes.len());
        let ranked_names: Vec<String> = specs
            .iter()
            .zip(&prefix)
            .map(|(s, p)| format!("{p:04}-{}", s.name))
            .collect();
        let report = FragReport::new(&nodes, &ranked_names, &target);
        Placer {
            node_names: specs.iter().map(|s| s.name.clone()).collect(),
            nodes,
            ranked_names,
            target,
            rng,
            policy,
            report,
            feasible: Vec::new(),
        }
    }

    /// GPUs in the cluster.
    pub fn total_gpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpu_left.len() as u32).sum()
    }

    /// The cluster's fragment amount and its share of the free GPU thousandths.
    pub fn frag(&self) -> (f64, f64) {
        self.report.now()
    }

    /// Places the task: its node and GPUs, or `None` where no node fits
    /// (drawing as the reference's scheduler draws: `rand.Intn(100)` per
    /// attempt, `rand.Int31n(nodes)` per failure).
    pub fn place(&mut self, task: &TaskSpec) -> Result<Option<(usize, Vec<u32>)>, PackingError> {
        let nodes = &self.nodes;
        self.rng.intn(100);
        self.feasible.clear();
        self.feasible
            .extend((0..nodes.len()).filter(|&n| nodes[n].fits(task)));
        let chosen = match self.feasible.len() {
            0 => {
                self.rng.int31n(nodes.len().max(1) as i32);
                return Ok(None);
            }
            1 => self.feasible[0],
            _ => {
                let mut cx = Context {
                    nodes,
                    target: &self.target,
                    rng: &mut self.rng,
                };
                let scores = self.policy.scores(task, &self.feasible, &mut cx);
                let (feasible, names) = (&self.feasible, &self.ranked_names);
                let mut best = 0;
                for k in 1..feasible.len() {
                    let (s, b) = (scores[k], scores[best]);
                    if s > b || (s == b && names[feasible[k]] < names[feasible[best]]) {
                        best = k;
                    }
                }
                feasible[best]
            }
        };
        let mut gpus = Vec::new();
        if task.gpu_milli > 0 && task.num_gpu > 0 {
            let mut cx = Context {
                nodes,
                target: &self.target,
                rng: &mut self.rng,
            };
            gpus = self.policy.gpus(task, chosen, &mut cx);
            gpus.sort_unstable();
        }
        self.nodes[chosen]
            .take(task, &gpus)
            .map_err(|e| PackingError::Invalid {
                policy: self.policy.name().to_string(),
                task: task.name.clone(),
                why: e.to_string(),
            })?;
        self.report
            .update(chosen, &self.nodes[chosen], &self.target);
        Ok(Some((chosen, gpus)))
    }

    /// Why no node takes the task now ([`crate::node::why_no_node`]).
    pub fn why_not(&self, task: &TaskSpec) -> String {
        crate::node::why_no_node(&self.nodes, task)
    }

    /// Gives back what a placed task holds.
    pub fn remove(&mut self, task: &TaskSpec, node: usize, gpus: &[u32]) {
        self.nodes[node].give_back(task, gpus);
        self.report.update(node, &self.nodes[node], &self.target);
    }
}
