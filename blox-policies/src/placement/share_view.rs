//! The cluster as the share scorers see it ([`blox_share::node::NodeState`]
//! per online node), kept between rounds and refreshed in place when the
//! cluster changed; and the paper's fragmentation over it.
//!
//! CPUs and memory are in the scorers' units (thousandths of a core, MiB),
//! rounded to the nearest; the exact figures are kept beside them
//! ([`Views::host_left`]) for the check a placement must pass to a
//! millionth.

use blox_core::*;
use blox_share::frag::{sum_except_q3, TargetWorkload};
use blox_share::node::NodeState;

/// Thousandths of a core in `cpus` (to the nearest).
pub fn cpu_milli(cpus: f64) -> i64 {
    (cpus * 1000.0).round().max(0.0) as i64
}

/// MiB in `gb` (to the nearest).
pub fn mib(gb: f64) -> i64 {
    (gb * 1024.0).round().max(0.0) as i64
}

/// Online nodes as the scorers see them.
#[derive(Clone, Debug, Default)]
pub struct Views {
    /// Their ids, by view index.
    pub ids: Vec<NodeId>,
    pub nodes: Vec<NodeState>,
    /// By view index: CPUs and host memory (GiB) free, exactly.
    pub host_left: Vec<(f64, f64)>,
    /// By node index: its view index, if online.
    at: Vec<Option<usize>>,
    /// The cluster revision they show; `None`: stale.
    revision: Option<u64>,
    /// By view index: the node's revision its view shows (`u64::MAX`:
    /// stale, e.g. changed by hand).
    seen: Vec<u64>,
    scratch: Vec<NodeId>,
}

impl Views {
    /// Brings the views up to the cluster (a no-op while it has not
    /// changed since the last refresh).
    pub fn refresh(&mut self, cluster: &ClusterState, jobs: &JobState) {
        if self.revision == Some(cluster.revision()) {
            return;
        }
        let online = || cluster.nodes().iter().filter(|n| n.online);
        let same = self.ids.len() == online().count()
            && online().zip(&self.ids).all(|(n, id)| n.id == *id);
        if !same {
            self.ids = online().map(|n| n.id).collect();
            self.nodes = online()
                .map(|n| NodeState {
                    name: format!("{:08}", n.id.0),
                    model: n.spec.gpu_type.clone(),
                    cpu_capacity: i64::from(n.spec.cpus) * 1000,
                    cpu_left: 0,
                    memory_capacity: mib(n.spec.host_mem_gb),
                    memory_left: 0,
                    gpu_left: Vec::with_capacity(n.gpus.len()),
                    tasks: 0,
                    kinds: Default::default(),
                })
                .collect();
            self.at = vec![None; cluster.nodes().len()];
            for (v, id) in self.ids.iter().enumerate() {
                self.at[id.index()] = Some(v);
            }
            self.seen = vec![u64::MAX; self.ids.len()];
            self.host_left = vec![(0.0, 0.0); self.ids.len()];
        }
        // Only the nodes that changed since they were read are read again.
        for (v, (id, view)) in self.ids.iter().zip(self.nodes.iter_mut()).enumerate() {
            let rev = cluster.node_revision(*id);
            if self.seen[v] != rev {
                let (cpus, mem) = cluster.host_free(*id);
                self.host_left[v] = (cpus, mem);
                view.cpu_left = cpu_milli(cpus);
                view.memory_left = mib(mem);
                view.gpu_left.clear();
                if let Some(n) = cluster.node(*id) {
                    view.gpu_left
                        .extend(n.gpus.iter().map(|g| cluster.free_milli(*g)));
                }
                self.seen[v] = rev;
            }
            view.tasks = 0;
            view.kinds.clear();
        }
        for job in jobs.running() {
            let kind = match job
                .gpu_share
                .or_else(|| cluster.share_of(job.id()).map(|s| s.milli))
            {
                Some(_) => 0,
                None => job.allocation.len() as u32,
            };
            self.scratch.clear();
            if let (Some(n), true) = (job.host_node, job.allocation.is_empty()) {
                // A job without GPUs: a task of its node, of no GPU kind.
                if let Some(v) = self.at.get(n.index()).copied().flatten() {
                    self.nodes[v].tasks += 1;
                }
                continue;
            }
            self.scratch
                .extend(job.allocation.iter().filter_map(|g| cluster.node_of(*g)));
            self.scratch.sort_unstable();
            self.scratch.dedup();
            for n in &self.scratch {
                if let Some(v) = self.at.get(n.index()).copied().flatten() {
                    self.nodes[v].tasks += 1;
                    *self.nodes[v].kinds.entry(kind).or_insert(0) += 1;
                }
            }
        }
        self.revision = Some(cluster.revision());
    }

    /// View `v` was changed by hand (a tentative placement): the next
    /// refresh reads it again.
    pub fn touched(&mut self, v: usize) {
        self.revision = None;
        if let Some(s) = self.seen.get_mut(v) {
            *s = u64::MAX;
        }
    }
}

/// The fragmentation after a round, kept per node and recomputed for the
/// nodes whose free CPUs or GPU shares changed.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// The cluster revision and target generation they were taken at.
    at: Option<(u64, u64)>,
    /// By node index: CPU thousandths left, free thousandths per GPU, and
    /// its fragment by class.
    nodes: Vec<(i64, Vec<u32>, [f64; 7])>,
    /// By node index: the node's revision they were read at.
    seen: Vec<u64>,
    last: Vec<(&'static str, f64)>,
    scratch: Vec<u32>,
}

impl Figures {
    /// `frag_gpus` (the fragment amount in GPUs) and `frag_percent` (its
    /// share of the free GPU thousandths) against `target` (generation
    /// `target_gen`).
    pub fn measure(
        &mut self,
        cluster: &ClusterState,
        target: &TargetWorkload,
        target_gen: u64,
    ) -> Vec<(&'static str, f64)> {
        let now = (cluster.revision(), target_gen);
        if self.at == Some(now) {
            return self.last.clone();
        }
        let stale = self.at.is_none_or(|(_, g)| g != target_gen);
        self.nodes
            .resize_with(cluster.nodes().len(), Default::default);
        self.seen.resize(cluster.nodes().len(), u64::MAX);
        let mut sum = [0.0f64; 7];
        for ((n, (cpu, gpus, parts)), seen) in cluster
            .nodes()
            .iter()
            .zip(self.nodes.iter_mut())
            .zip(self.seen.iter_mut())
        {
            let rev = cluster.node_revision(n.id);
            if !stale && *seen == rev {
                // Unchanged since read: its parts stand.
                for (s, p) in sum.iter_mut().zip(parts.iter()) {
                    *s += p;
                }
                continue;
            }
            *seen = rev;
            self.scratch.clear();
            let cpu_now = match n.online {
                true => {
                    self.scratch
                        .extend(n.gpus.iter().map(|g| cluster.free_milli(*g)));
                    cpu_milli(cluster.host_free(n.id).0)
                }
                false => 0,
            };
            if stale || *cpu != cpu_now || *gpus != self.scratch {
                *parts = target.node_parts(cpu_now, &self.scratch, &n.spec.gpu_type);
                *cpu = cpu_now;
                gpus.clone_from(&self.scratch);
            }
            for (s, p) in sum.iter_mut().zip(parts.iter()) {
                *s += p;
            }
        }
        let frag = sum_except_q3(&sum);
        let idle: f64 = sum.iter().sum();
        self.last = vec![
            ("frag_gpus", frag / f64::from(GPU_MILLI)),
            (
                "frag_percent",
                if idle > 0.0 { 100.0 * frag / idle } else { 0.0 },
            ),
        ];
        self.at = Some(now);
        self.last.clone()
    }
}
