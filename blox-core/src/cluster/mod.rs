//! `ClusterState`: the nodes and a per-GPU table (global id, node, local id, type,
//! free/busy, running job). Queries the hot path needs are plain Rust over dense
//! vectors; nothing here allocates per call beyond the returned collection.

use crate::ids::{GpuId, JobId, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod checks;
mod error;
mod free_index;
mod held;
mod hosted;
mod shares;
mod spec;
pub use error::ClusterError;
pub(crate) use free_index::FreeIndex;
use held::Held;
pub use hosted::HostHold;
use hosted::Hosted;
use shares::Shares;
pub use shares::{GpuShare, GPU_MILLI};
pub use spec::{HostShare, NodeSpec};

/// Slack for comparing host CPU and memory sums (fractional shares).
pub const HOST_EPS: f64 = 1e-6;

/// A node of the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub id: NodeId,
    pub spec: NodeSpec,
    /// Global ids of its GPUs, by local id.
    pub gpus: Vec<GpuId>,
    /// False once removed (failure or scale-down); its GPUs are then offline too.
    pub online: bool,
}

/// One row of the per-GPU table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub id: GpuId,
    pub node: NodeId,
    /// Index of the GPU inside its node (`CUDA_VISIBLE_DEVICES` on a real node).
    pub local_id: u32,
    /// Free memory, GiB (the whole GPU while no job holds it).
    pub free_mem_gb: f64,
    /// The job holding this GPU, if any.
    pub job: Option<JobId>,
    pub online: bool,
    /// CPU cores and host memory (GiB) of the node that its holder got with
    /// this GPU (see [`HostShare`]); 0 while free.
    #[serde(default)]
    pub host_cpus: f64,
    #[serde(default)]
    pub host_mem_gb: f64,
}

/// The cluster: nodes and GPUs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(try_from = "Wire")]
pub struct ClusterState {
    nodes: Vec<Node>,
    gpus: Vec<Gpu>,
    free: u32,
    online: u32,
    /// Most GPUs an elastic (cloud) cluster may grow to; `None`: fixed size.
    #[serde(default)]
    max_gpus: Option<u32>,
    /// Each holder's GPUs in the order it took them ([`held`]): with each
    /// GPU's `job`, the record of who holds what.
    #[serde(skip_serializing_if = "Held::is_empty")]
    held: Held,
    /// GPUs several jobs share ([`shares`]): the rest of that record.
    #[serde(skip_serializing_if = "Shares::is_empty")]
    shares: Shares,
    /// Jobs without GPUs and the node CPUs and memory they hold
    /// ([`hosted`]): the last part of that record.
    #[serde(skip_serializing_if = "Hosted::is_empty")]
    hosted: Hosted,
    /// Levels above the nodes (racks, blocks), if the config gives them.
    #[serde(skip)]
    topology: Option<std::sync::Arc<crate::topology::Topology>>,
    /// Failures seen, spares and quarantined nodes ([`crate::health`]).
    #[serde(skip)]
    health: crate::health::Health,
    /// Per-GPU slowdown factors by application class, if the config gives
    /// them ([`crate::variability`]).
    #[serde(skip)]
    variability: Option<std::sync::Arc<crate::variability::Variability>>,
    /// The factors come from the nodes' own `gpu_slowdown`.
    #[serde(skip)]
    measured_variability: bool,
    /// Some job got a host share other than its node's proportional one
    /// (read back from a snapshot: assumed so). Until then no node can give
    /// out more CPUs or memory than it has, and the invariant check skips
    /// adding them up.
    #[serde(skip)]
    custom_host: bool,
    /// Which GPUs are free, by GPU and by node, kept with the table.
    #[serde(skip)]
    index: FreeIndex,
    /// What changed since the last check, for the check of a round's
    /// changes ([`check_changes`](Self::check_changes)).
    #[serde(skip)]
    changed: checks::Changed,
    /// By node index: the revision at which the node's holders last
    /// changed ([`node_revision`](Self::node_revision)).
    #[serde(skip)]
    node_rev: Vec<u64>,
}

/// What a cluster is written as; read back, the rest is rebuilt from it.
#[derive(Deserialize)]
struct Wire {
    nodes: Vec<Node>,
    gpus: Vec<Gpu>,
    free: u32,
    online: u32,
    #[serde(default)]
    max_gpus: Option<u32>,
    /// Absent when no job holds a GPU, and in what was written before the
    /// lists were (each job's GPUs are then taken in GPU order).
    #[serde(default)]
    held: Option<Held>,
    /// Absent when no GPU is shared.
    #[serde(default)]
    shares: Vec<GpuShare>,
    /// Absent when no job without GPUs runs.
    #[serde(default)]
    hosted: Vec<HostHold>,
}

impl TryFrom<Wire> for ClusterState {
    type Error = String;

    /// Refuses lists of who holds what that the GPU table does not give.
    fn try_from(w: Wire) -> Result<Self, String> {
        let shares = Shares::of_list(&w.shares, &w.gpus)?;
        let hosted = Hosted::of_list(&w.hosted)?;
        if let Some(h) = w.hosted.iter().find(|h| h.node.index() >= w.nodes.len()) {
            return Err(format!(
                "{} holds CPUs of {}, which does not exist",
                h.job, h.node
            ));
        }
        let index = FreeIndex::of(&w.gpus, w.nodes.len(), |g| shares.used(g) > 0);
        let held = match w.held {
            Some(held) => {
                held.matches_table(&w.gpus)?;
                held
            }
            None => Held::of_table(&w.gpus),
        };
        Ok(ClusterState {
            held,
            shares,
            hosted,
            nodes: w.nodes,
            gpus: w.gpus,
            free: w.free,
            online: w.online,
            max_gpus: w.max_gpus,
            // Host shares are not known to be proportional: checked.
            custom_host: true,
            index,
            changed: checks::Changed::everything(),
            ..Default::default()
        })
    }
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    /// The topology above the nodes, if any ([`crate::topology`]).
    pub fn topology(&self) -> Option<&crate::topology::Topology> {
        self.topology.as_deref()
    }

    /// Sets the topology (shared by the cluster's copies).
    pub fn set_topology(&mut self, t: Option<crate::topology::Topology>) {
        self.topology = t.map(std::sync::Arc::new);
    }

    /// Per-GPU slowdown factors, if any ([`crate::variability`]).
    pub fn variability(&self) -> Option<&crate::variability::Variability> {
        self.variability.as_deref()
    }

    /// Sets the slowdown factors (shared by the cluster's copies).
    pub fn set_variability(&mut self, v: Option<crate::variability::Variability>) {
        self.variability = v.map(std::sync::Arc::new);
        self.measured_variability = false;
    }

    /// The most free GPUs under one domain of the topology's innermost
    /// level, or on one node without a topology: the largest job that can
    /// be placed without spanning further (a fragmentation figure).
    pub fn largest_placeable(&self) -> u32 {
        let per_node = &self.index.per_node;
        let Some(t) = self.topology() else {
            return per_node.iter().copied().max().unwrap_or(0);
        };
        let inner = t.levels().len() - 1;
        let best_domain = (0..t.domains(inner) as u32)
            .map(|d| t.free_under(inner, d, |n| per_node.get(n.index()).copied().unwrap_or(0)))
            .max()
            .unwrap_or(0);
        best_domain.max(per_node.iter().copied().max().unwrap_or(0))
    }

    /// Failures seen, the spare pool and quarantined nodes.
    pub fn health(&self) -> &crate::health::Health {
        &self.health
    }

    pub fn health_mut(&mut self) -> &mut crate::health::Health {
        &mut self.health
    }

    /// Keeps `k` nodes, the highest ids, as hot spares: offline to the
    /// scheduler until a failure calls one in ([`crate::health`]).
    pub fn set_spares(&mut self, k: u32) -> Result<(), ClusterError> {
        self.health.spares_target = k;
        let online: Vec<NodeId> = self
            .nodes
            .iter()
            .rev()
            .filter(|n| n.online)
            .map(|n| n.id)
            .take(k as usize)
            .collect();
        for n in online {
            self.to_pool(n)?;
        }
        Ok(())
    }

    /// Takes an idle node offline into the spare pool.
    pub fn to_pool(&mut self, node: NodeId) -> Result<(), ClusterError> {
        let hit = self.remove_node(node)?;
        debug_assert!(hit.is_empty(), "a spare must be idle");
        self.health.pool.insert(node);
        Ok(())
    }

    /// GPUs of nodes that are up: online, spare or quarantined.
    pub fn up_gpus(&self) -> u32 {
        let kept: u32 = self
            .health
            .pool
            .iter()
            .chain(self.health.held.keys())
            .filter(|n| !self.health.down.contains(n))
            .filter_map(|n| self.node(*n))
            .map(|n| n.spec.gpus)
            .sum();
        self.online + kept
    }

    /// `nodes` identical nodes of `gpus_per_node` GPUs each.
    pub fn homogeneous(nodes: u32, gpus_per_node: u32) -> Self {
        let mut c = ClusterState::new();
        for _ in 0..nodes {
            c.add_node(NodeSpec::with_gpus(gpus_per_node));
        }
        c
    }

    /// Adds a node and returns its id (cluster management: scale-up, a worker joins).
    pub fn add_node(&mut self, spec: NodeSpec) -> NodeId {
        let node = NodeId(self.nodes.len() as u32);
        let mut ids = Vec::with_capacity(spec.gpus as usize);
        for local in 0..spec.gpus {
            let id = GpuId(self.gpus.len() as u32);
            self.gpus.push(Gpu {
                id,
                node,
                local_id: local,
                free_mem_gb: spec.gpu_mem_gb,
                job: None,
                online: true,
                host_cpus: 0.0,
                host_mem_gb: 0.0,
            });
            ids.push(id);
        }
        self.free += spec.gpus;
        self.online += spec.gpus;
        self.index.add_node(spec.gpus as usize);
        self.note_everything();
        if !spec.labels.is_empty() {
            if let Some(t) = self.topology.as_mut() {
                // Checked when the worker registered; a node whose labels
                // do not fit stays outside the tree (its own domain).
                if let Err(e) = std::sync::Arc::make_mut(t).add_node(node, &spec.labels) {
                    tracing::warn!(node = node.0, "not placed in the topology: {e}");
                }
            }
        }
        let measured = !spec.gpu_slowdown.is_empty();
        self.nodes.push(Node {
            id: node,
            spec,
            gpus: ids,
            online: true,
        });
        if measured || self.measured_variability {
            self.measure_variability();
        }
        node
    }

    /// Rebuilds the slowdown factors from the nodes' `gpu_slowdown` (each
    /// over the median of all measured GPUs; unmeasured GPUs 1), unless a
    /// factor table was given.
    fn measure_variability(&mut self) {
        if self.variability.is_some() && !self.measured_variability {
            return;
        }
        let times: Vec<Option<f64>> = self
            .gpus
            .iter()
            .map(|g| {
                let spec = &self.nodes[g.node.index()].spec;
                spec.gpu_slowdown.get(g.local_id as usize).copied()
            })
            .collect();
        if let Some(v) = crate::variability::Variability::measured(&times) {
            self.variability = Some(std::sync::Arc::new(v));
            self.measured_variability = true;
        }
    }

    /// Brings a node that went offline (removed, failed) back, its GPUs
    /// free (a repaired node keeps its id, its place in the topology and
    /// its history). A node online already is left as it is.
    pub fn restore_node(&mut self, node: NodeId) -> Result<(), ClusterError> {
        let n = self
            .nodes
            .get_mut(node.index())
            .ok_or(ClusterError::NoSuchNode { node })?;
        if n.online {
            return Ok(());
        }
        n.online = true;
        let mem = n.spec.gpu_mem_gb;
        for gid in n.gpus.clone() {
            let g = &mut self.gpus[gid.index()];
            g.online = true;
            // (Nobody holds it: its holder let it go when it went offline.)
            debug_assert!(g.job.is_none(), "{gid} was held while offline");
            g.job = None;
            g.free_mem_gb = mem;
            g.host_cpus = 0.0;
            g.host_mem_gb = 0.0;
            self.free += 1;
            self.online += 1;
            self.index.set(gid.index(), node.index(), true);
        }
        self.note_everything();
        Ok(())
    }

    /// Takes a node offline; returns the jobs that held GPUs on it (their GPUs are
    /// released here; the caller requeues them).
    pub fn remove_node(&mut self, node: NodeId) -> Result<Vec<JobId>, ClusterError> {
        let n = self
            .nodes
            .get_mut(node.index())
            .ok_or(ClusterError::NoSuchNode { node })?;
        if !n.online {
            return Ok(Vec::new());
        }
        n.online = false;
        // Its holders lose all their GPUs, here and on other nodes.
        let mut affected: Vec<JobId> = Vec::new();
        for gid in &n.gpus {
            let sharing = self.shares.holders_of(*gid).iter().copied();
            for j in self.gpus[gid.index()].job.into_iter().chain(sharing) {
                if !affected.contains(&j) {
                    affected.push(j);
                }
            }
        }
        for &j in self.hosted.on(node) {
            if !affected.contains(&j) {
                affected.push(j);
            }
        }
        for j in &affected {
            self.release_job(*j);
        }
        for gid in self.nodes[node.index()].gpus.clone() {
            let g = &mut self.gpus[gid.index()];
            debug_assert!(g.job.is_none(), "released above");
            debug_assert!(self.shares.used(gid) == 0, "released above");
            self.free -= 1;
            g.online = false;
            self.online -= 1;
            self.index.set(gid.index(), node.index(), false);
        }
        self.note_everything();
        Ok(affected)
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// Every GPU ever added, online or not, by global id.
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    pub fn gpu(&self, id: GpuId) -> Option<&Gpu> {
        self.gpus.get(id.index())
    }

    /// GPU type of a GPU (its node's).
    /// The node a GPU is on.
    pub fn node_of(&self, id: GpuId) -> Option<NodeId> {
        self.gpu(id).map(|g| g.node)
    }

    /// The spec of the node a GPU is on.
    pub fn node_spec_of(&self, id: GpuId) -> Option<&NodeSpec> {
        self.node_of(id).and_then(|n| self.node(n)).map(|n| &n.spec)
    }

    pub fn gpu_type(&self, id: GpuId) -> Option<&str> {
        self.gpu(id)
            .map(|g| self.nodes[g.node.index()].spec.gpu_type.as_str())
    }

    /// Online GPUs.
    pub fn num_gpus(&self) -> u32 {
        self.online
    }

    /// Declares the cluster elastic, able to grow to `gpus` GPUs.
    pub fn set_max_gpus(&mut self, gpus: Option<u32>) {
        self.max_gpus = gpus;
    }

    /// Whether the cluster may grow past its nodes ([`Self::set_max_gpus`]).
    pub fn is_elastic(&self) -> bool {
        self.max_gpus.is_some()
    }

    /// The most GPUs the cluster can have: its size now (counting nodes
    /// down for repair or in quarantine, which come back; not the spares),
    /// or more if elastic. A job asking for more can never run.
    pub fn max_gpus(&self) -> u32 {
        let h = &self.health;
        let returning: u32 = h
            .down
            .iter()
            .chain(h.held.keys().filter(|n| !h.down.contains(n)))
            .filter(|n| !h.pool.contains(n))
            .filter_map(|n| self.node(*n))
            .filter(|n| !n.online)
            .map(|n| n.spec.gpus)
            .sum();
        self.max_gpus.unwrap_or(0).max(self.online + returning)
    }

    /// A number that changes whenever who holds what, or the nodes, change
    /// (a cache of figures over the cluster is stale when it moved).
    pub fn revision(&self) -> u64 {
        self.changed.revision
    }

    /// Online GPUs held by no job.
    pub fn num_free(&self) -> u32 {
        self.free
    }

    pub fn num_busy(&self) -> u32 {
        self.online - self.free
    }

    /// Free online GPUs in global-id order.
    pub fn free_gpus(&self) -> impl Iterator<Item = GpuId> + '_ {
        self.index
            .free
            .iter()
            .enumerate()
            .filter(|(_, f)| **f)
            .map(|(i, _)| GpuId(i as u32))
    }

    /// By GPU index: whether the GPU is free (online, held by no job). Kept
    /// as the table changes; reading it costs nothing.
    pub fn free_mask(&self) -> &[bool] {
        &self.index.free
    }

    /// By node index: how many of the node's GPUs are free.
    pub fn free_per_node(&self) -> &[u32] {
        &self.index.per_node
    }

    /// The free index the table keeps (the walk starts from a copy).
    pub(crate) fn free_index(&self) -> &FreeIndex {
        &self.index
    }

    /// Free GPUs of one node, by local id.
    pub fn free_gpus_on(&self, node: NodeId) -> impl Iterator<Item = GpuId> + '_ {
        self.nodes[node.index()]
            .gpus
            .iter()
            .copied()
            .filter(|g| self.index.free[g.index()])
    }

    /// Number of distinct nodes a set of GPUs spans.
    pub fn nodes_spanned(&self, gpus: &[GpuId]) -> usize {
        let mut nodes: Vec<NodeId> = gpus
            .iter()
            .filter_map(|g| self.gpu(*g).map(|g| g.node))
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len()
    }

    /// Checks that `job` may take exactly `gpus` (exist, online, free or already its
    /// own, no duplicates) without changing anything.
    pub fn check_assignable(&self, job: JobId, gpus: &[GpuId]) -> Result<(), ClusterError> {
        if let Some(h) = self.hosted.of(job).filter(|_| !gpus.is_empty()) {
            return Err(ClusterError::Invariant(format!(
                "{job} holds CPUs of {} without GPUs; it cannot also take GPUs",
                h.node
            )));
        }
        // Duplicates: a scan for the few GPUs of most jobs, a set beyond.
        let mut seen = std::collections::HashSet::new();
        for (i, &gpu) in gpus.iter().enumerate() {
            let g = self.gpu(gpu).ok_or(ClusterError::NoSuchGpu { gpu })?;
            if !g.online {
                return Err(ClusterError::Offline { gpu });
            }
            if let Some(holder) = g.job {
                if holder != job {
                    return Err(ClusterError::Busy { gpu, holder, job });
                }
            }
            if let Some(&holder) = self.shares.holders_of(gpu).first() {
                return Err(ClusterError::Busy { gpu, holder, job });
            }
            if let Some(s) = self.shares.of(job) {
                return Err(ClusterError::Invariant(format!(
                    "{job} holds a share of {}; it cannot also take {gpu} whole",
                    s.gpu
                )));
            }
            let twice = if gpus.len() <= 16 {
                gpus[..i].contains(&gpu)
            } else {
                !seen.insert(gpu)
            };
            if twice {
                return Err(ClusterError::Duplicate { gpu, job });
            }
        }
        Ok(())
    }

    /// Gives `gpus` to `job` with the GPU-proportional share of CPUs and host
    /// memory. All-or-nothing: on error nothing changed.
    pub fn assign(&mut self, job: JobId, gpus: &[GpuId]) -> Result<(), ClusterError> {
        self.assign_with_host(job, gpus, None)
    }

    /// Gives `gpus` to `job` with `host` CPUs and memory per GPU (`None`: each
    /// node's proportional share). All-or-nothing: on error nothing changed.
    /// Host capacity is not checked here; the loop validates a whole placement
    /// first and [`check_invariants`](Self::check_invariants) checks after.
    pub fn assign_with_host(
        &mut self,
        job: JobId,
        gpus: &[GpuId],
        host: Option<HostShare>,
    ) -> Result<(), ClusterError> {
        self.check_assignable(job, gpus)?;
        self.custom_host |= host.is_some();
        let mut took = false;
        for &gpu in gpus {
            let node = self.gpus[gpu.index()].node;
            let share = host.unwrap_or_else(|| self.nodes[node.index()].spec.proportional_share());
            let g = &mut self.gpus[gpu.index()];
            if g.job.is_none() {
                g.job = Some(job);
                g.free_mem_gb = 0.0;
                self.free -= 1;
                self.index.set(gpu.index(), node.index(), false);
                self.held.push(job, gpu);
                took = true;
            }
            g.host_cpus = share.cpus_per_gpu;
            g.host_mem_gb = share.mem_gb_per_gpu;
            self.note_gpu(gpu);
        }
        if took {
            self.changed.job(job, self.gpus.len());
        }
        Ok(())
    }

    /// Frees the given GPUs if `job` holds them (whole or a share).
    pub fn release(&mut self, job: JobId, gpus: &[GpuId]) {
        if self
            .shares
            .gpus_of(job)
            .first()
            .is_some_and(|g| gpus.contains(g))
        {
            self.release_share(job);
            return;
        }
        let mut gone = 0;
        for &gpu in gpus {
            if let Some(g) = self.gpus.get_mut(gpu.index()) {
                if g.job == Some(job) {
                    g.job = None;
                    g.host_cpus = 0.0;
                    g.host_mem_gb = 0.0;
                    g.free_mem_gb = self.nodes[g.node.index()].spec.gpu_mem_gb;
                    if g.online {
                        self.free += 1;
                        self.index.set(gpu.index(), g.node.index(), true);
                    }
                    self.note_gpu(gpu);
                    gone += 1;
                }
            }
        }
        if gone > 0 {
            let table = &self.gpus;
            self.held
                .gave_back(job, gone, |g| table[g.index()].job == Some(job));
            self.changed.job(job, self.gpus.len());
        }
    }

    /// Frees every GPU held by `job` (and the CPUs of a job without GPUs).
    pub fn release_job(&mut self, job: JobId) {
        let held = self.allocation_of(job).to_vec();
        self.release(job, &held);
        if !self.hosted.is_empty() {
            self.release_host(job);
        }
    }

    /// The GPUs `job` holds, in the order it was given them (the order of
    /// its ranks); empty if it holds none.
    pub fn allocation_of(&self, job: JobId) -> &[GpuId] {
        match self.held.of(job) {
            [] => self.shares.gpus_of(job),
            whole => whole,
        }
    }

    /// Jobs holding GPUs and which GPUs (each in the order it took them;
    /// a sharing job its one GPU).
    pub fn holders(&self) -> BTreeMap<JobId, Vec<GpuId>> {
        let shares = self
            .shares
            .sorted()
            .into_iter()
            .map(|s| (s.job, vec![s.gpu]));
        self.held
            .sorted()
            .into_iter()
            .map(|(j, g)| (j, g.to_vec()))
            .chain(shares)
            .collect()
    }
}

#[cfg(test)]
mod hosted_tests;
#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod tests;
