//! Fragmentation gradient descent ("Beware of Fragmentation", §4, Alg. 1;
//! `fgd_score.go`): place the task where the node's expected fragmentation
//! grows least. A share of one GPU tries each GPU that fits; whole GPUs take
//! the first idle ones. The score is sigmoid(Δfrag / 1000) as an integer
//! percentage, so nearby gradients tie and the node order decides.
//!
//! `fgd-exact` is the paper's rule without that rounding: the least growth
//! of fragmentation wins outright (to a millionth of a GPU thousandth), kept
//! to measure what the reference's integer scores change.

use rustc_hash::FxHashMap;

use super::{after_taking, first_idle, is_share, task_cpu, Context, SharePolicy};
use crate::openb::TaskSpec;

/// FGD. Remembers the GPU each node's score chose, for [`SharePolicy::gpus`].
#[derive(Debug, Clone, Default)]
pub struct Fgd {
    chosen: Vec<(usize, u32)>,
    /// Score the fragmentation's decrease itself, not the reference's
    /// integer sigmoid of it.
    exact: bool,
}

impl Fgd {
    /// The paper's rule with exact gradients (`fgd-exact`).
    pub fn exact() -> Self {
        Fgd {
            chosen: Vec::new(),
            exact: true,
        }
    }
}

/// What a node's score depends on: CPU left, each GPU's share left, model.
type NodeKey<'a> = (i64, &'a [u32], &'a str);

fn sigmoid_score(delta: f64) -> i64 {
    (1.0 / (1.0 + (-delta / 1000.0).exp()) * 100.0) as i64
}

/// The decrease of fragmentation in millionths of a GPU thousandth.
fn exact_score(delta: f64) -> i64 {
    (delta * 1e6).round() as i64
}

/// A node's score and, for a share of one GPU, the GPU that earned it.
fn score(task: &TaskSpec, node: usize, cx: &Context<'_>, exact: bool) -> (i64, Option<u32>) {
    let sigmoid_score = |delta: f64| {
        if exact {
            exact_score(delta)
        } else {
            sigmoid_score(delta)
        }
    };
    let n = &cx.nodes[node];
    let before = cx.target.frag_of(n);
    if !is_share(task) {
        let left = after_taking(task, &n.gpu_left);
        let after = cx
            .target
            .node_frag(n.cpu_left - task_cpu(task), &left, &n.model);
        return (sigmoid_score(before - after), None);
    }
    let (mut best, mut gpu) = (0i64, None);
    let mut left = n.gpu_left.clone();
    for g in 0..left.len() {
        if left[g] < task.gpu_milli {
            continue;
        }
        left[g] -= task.gpu_milli;
        let after = cx
            .target
            .node_frag(n.cpu_left - task_cpu(task), &left, &n.model);
        left[g] += task.gpu_milli;
        let s = sigmoid_score(before - after);
        if gpu.is_none() || s > best {
            best = s;
            gpu = Some(g as u32);
        }
    }
    (best, gpu)
}

impl SharePolicy for Fgd {
    fn name(&self) -> &'static str {
        if self.exact {
            "fgd-exact"
        } else {
            "fgd"
        }
    }

    fn scores(&mut self, task: &TaskSpec, feasible: &[usize], cx: &mut Context<'_>) -> Vec<i64> {
        self.chosen.clear();
        // Nodes in the same state score the same: score each state once.
        // (Looked up only, never iterated: its order reaches nothing.)
        let mut seen: FxHashMap<NodeKey<'_>, (i64, Option<u32>)> = FxHashMap::default();
        feasible
            .iter()
            .map(|&n| {
                let node = &cx.nodes[n];
                let key = (node.cpu_left, node.gpu_left.as_slice(), node.model.as_str());
                let (s, g) = *seen
                    .entry(key)
                    .or_insert_with(|| score(task, n, cx, self.exact));
                if let Some(g) = g {
                    self.chosen.push((n, g));
                }
                s
            })
            .collect()
    }

    fn gpus(&mut self, task: &TaskSpec, node: usize, cx: &mut Context<'_>) -> Vec<u32> {
        if !is_share(task) {
            return first_idle(task, &cx.nodes[node]);
        }
        let cached = self
            .chosen
            .iter()
            .find(|(n, _)| *n == node)
            .map(|&(_, g)| g);
        self.chosen.clear();
        if let Some(g) = cached {
            return vec![g];
        }
        // The only feasible node was not scored: its best GPU, as scoring picks it.
        score(task, node, cx, self.exact).1.into_iter().collect()
    }
}
