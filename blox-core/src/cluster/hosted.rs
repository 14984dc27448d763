//! A node's CPUs and memory held, and the jobs that ask for no GPU: each
//! such job holds CPU cores and host memory of one node, and nothing else.
//! With [`super::held`] and [`super::shares`], the
//! cluster's record of who holds what; a hosted job's allocation (its
//! GPUs) is empty, and its node is read from here.
//!
//! A node's sums are added up again from its holders, in the order they
//! came, whenever one comes or goes: the same holders give the same sums
//! whatever came and went before (no drift from subtracting).

use super::{ClusterError, ClusterState};
use crate::ids::{JobId, NodeId};
use crate::job_state::JobState;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// What a job without GPUs holds: CPU cores and host memory (GiB) of a node.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostHold {
    pub job: JobId,
    pub node: NodeId,
    pub cpus: f64,
    pub mem_gb: f64,
}

/// The ledger: holds by job, and each node's holders and their sums.
#[derive(Clone, Debug, Default)]
pub(crate) struct Hosted {
    by_job: FxHashMap<JobId, HostHold>,
    /// By node index: (CPUs, GiB, holders in the order they came); dense,
    /// as every node's sums are read every round the cluster changed.
    by_node: Vec<(f64, f64, SmallVec<[JobId; 4]>)>,
}

impl Hosted {
    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }

    pub fn of(&self, job: JobId) -> Option<HostHold> {
        self.by_job.get(&job).copied()
    }

    /// CPUs and GiB that jobs without GPUs hold on `node`.
    pub fn used(&self, node: NodeId) -> (f64, f64) {
        self.by_node
            .get(node.index())
            .map_or((0.0, 0.0), |e| (e.0, e.1))
    }

    /// The jobs without GPUs on `node`, in the order they came.
    pub fn on(&self, node: NodeId) -> &[JobId] {
        self.by_node
            .get(node.index())
            .map_or(&[], |e| e.2.as_slice())
    }

    pub fn push(&mut self, h: HostHold) {
        self.by_job.insert(h.job, h);
        let at = h.node.index();
        if self.by_node.len() <= at {
            self.by_node.resize_with(at + 1, Default::default);
        }
        self.by_node[at].2.push(h.job);
        self.resum(h.node);
    }

    pub fn remove(&mut self, job: JobId) -> Option<HostHold> {
        let h = self.by_job.remove(&job)?;
        if let Some(e) = self.by_node.get_mut(h.node.index()) {
            e.2.retain(|j| *j != job);
        }
        self.resum(h.node);
        Some(h)
    }

    fn resum(&mut self, node: NodeId) {
        let Some(e) = self.by_node.get_mut(node.index()) else {
            return;
        };
        let (mut c, mut m) = (0.0, 0.0);
        for j in &e.2 {
            if let Some(h) = self.by_job.get(j) {
                c += h.cpus;
                m += h.mem_gb;
            }
        }
        e.0 = c;
        e.1 = m;
    }

    /// Every hold, by job.
    pub fn sorted(&self) -> Vec<HostHold> {
        let mut out: Vec<HostHold> = self.by_job.values().copied().collect();
        out.sort_unstable_by_key(|h| h.job);
        out
    }

    /// The ledger from a list (a snapshot read back); refuses a job twice.
    pub fn of_list(list: &[HostHold]) -> Result<Self, String> {
        let mut out = Hosted::default();
        for h in list {
            if out.by_job.contains_key(&h.job) {
                return Err(format!("{} is listed twice among jobs without GPUs", h.job));
            }
            let ok = |x: f64| x.is_finite() && x >= 0.0;
            if !(ok(h.cpus) && ok(h.mem_gb)) {
                return Err(format!(
                    "{} holds {} CPUs and {} GiB of {}: both must be finite and non-negative",
                    h.job, h.cpus, h.mem_gb, h.node
                ));
            }
            out.push(*h);
        }
        Ok(out)
    }
}

/// Written as the list of holds by job.
impl Serialize for Hosted {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted())
    }
}

impl ClusterState {
    /// Gives `job`, which asks for no GPU, `cpus` cores and `mem_gb` GiB of
    /// host memory on `node`. The job must hold nothing else; the node must
    /// be online. Capacity is not checked here (the loop checks a whole
    /// placement first, [`check_invariants`](Self::check_invariants)
    /// after). All-or-nothing: on error nothing changed.
    pub fn assign_host(
        &mut self,
        job: JobId,
        node: NodeId,
        cpus: f64,
        mem_gb: f64,
    ) -> Result<(), ClusterError> {
        let n = self.node(node).ok_or(ClusterError::NoSuchNode { node })?;
        if !n.online {
            return Err(ClusterError::InvalidSpec(format!(
                "{job} cannot take CPUs of {node}: it is offline"
            )));
        }
        if !self.allocation_of(job).is_empty() || self.hosted.of(job).is_some() {
            return Err(ClusterError::Invariant(format!(
                "{job} already holds GPUs or CPUs; it cannot also take CPUs of {node}"
            )));
        }
        if !(cpus.is_finite() && cpus >= 0.0 && mem_gb.is_finite() && mem_gb >= 0.0) {
            return Err(ClusterError::InvalidSpec(format!(
                "{job} asks for {cpus} CPUs and {mem_gb} GiB: both must be finite and non-negative"
            )));
        }
        self.custom_host = true;
        self.hosted.push(HostHold {
            job,
            node,
            cpus,
            mem_gb,
        });
        self.changed.job(job, self.gpus.len());
        self.note_node(node);
        Ok(())
    }

    /// Gives back what `job` holds without GPUs, if anything.
    pub(super) fn release_host(&mut self, job: JobId) {
        if let Some(h) = self.hosted.remove(job) {
            self.changed.job(job, self.gpus.len());
            self.note_node(h.node);
        }
    }

    /// CPU cores and host memory (GiB) of `node` held by jobs now (with
    /// their GPUs, and by jobs without GPUs).
    pub fn host_used(&self, node: NodeId) -> (f64, f64) {
        let Some(n) = self.nodes.get(node.index()) else {
            return (0.0, 0.0);
        };
        let on_gpus = n.gpus.iter().fold((0.0, 0.0), |(c, m), g| {
            let g = &self.gpus[g.index()];
            (c + g.host_cpus, m + g.host_mem_gb)
        });
        if self.hosted.is_empty() {
            return on_gpus;
        }
        let (c, m) = self.hosted_used(node);
        (on_gpus.0 + c, on_gpus.1 + m)
    }

    /// CPU cores and host memory (GiB) of `node` nobody holds.
    pub fn host_free(&self, node: NodeId) -> (f64, f64) {
        let Some(n) = self.nodes.get(node.index()) else {
            return (0.0, 0.0);
        };
        let (c, m) = self.host_used(node);
        (n.spec.cpus as f64 - c, n.spec.host_mem_gb - m)
    }

    /// What `job`, which holds no GPU, holds of a node's CPUs and memory.
    pub fn host_hold_of(&self, job: JobId) -> Option<HostHold> {
        self.hosted.of(job)
    }

    /// The jobs without GPUs on `node`, in the order they came.
    pub fn hosted_on(&self, node: NodeId) -> &[JobId] {
        self.hosted.on(node)
    }

    /// Every job that holds CPUs without a GPU, by job.
    pub fn host_holds(&self) -> Vec<HostHold> {
        self.hosted.sorted()
    }

    /// CPUs and GiB that jobs without GPUs hold on `node`.
    pub(super) fn hosted_used(&self, node: NodeId) -> (f64, f64) {
        self.hosted.used(node)
    }

    /// A hosted job of the ledger is a running job without GPUs, on an
    /// online node, whose copy of its node is this one.
    pub(super) fn check_hosted(&self, job: JobId, jobs: &JobState) -> Result<(), ClusterError> {
        let Some(h) = self.hosted.of(job) else {
            return Ok(());
        };
        let ok = jobs.get(job).is_some_and(|j| {
            j.is_running() && j.allocation.is_empty() && j.host_node == Some(h.node)
        });
        if !ok {
            return Err(ClusterError::Invariant(format!(
                "{job} holds CPUs of {} but is not a running job without GPUs on it",
                h.node
            )));
        }
        if !self.node(h.node).is_some_and(|n| n.online) {
            return Err(ClusterError::Invariant(format!(
                "{job} holds CPUs of {}, which is offline",
                h.node
            )));
        }
        self.check_node_host(h.node)
    }

    /// No node gives out more CPUs or memory than it has.
    pub(super) fn check_node_host(&self, node: NodeId) -> Result<(), ClusterError> {
        let Some(n) = self.node(node) else {
            return Err(ClusterError::NoSuchNode { node });
        };
        let (c, m) = self.host_used(node);
        if n.spec.over_host(c, m) {
            return Err(ClusterError::Invariant(format!(
                "{} gives out {c} CPUs and {m} GiB of its {} CPUs and {} GiB",
                n.id, n.spec.cpus, n.spec.host_mem_gb
            )));
        }
        Ok(())
    }

    /// Every hold of the ledger ([`check_hosted`](Self::check_hosted)),
    /// and every running job without GPUs that says it is on a node is in
    /// the ledger there.
    pub(super) fn check_all_hosted(&self, jobs: &JobState) -> Result<(), ClusterError> {
        for h in self.hosted.sorted() {
            self.check_hosted(h.job, jobs)?;
        }
        for j in jobs.running() {
            if let Some(node) = j.host_node {
                if self.hosted.of(j.id()).map(|h| h.node) != Some(node) {
                    return Err(ClusterError::Invariant(format!(
                        "{} runs without GPUs on {node}, but the cluster does not give it CPUs there",
                        j.id()
                    )));
                }
            }
        }
        Ok(())
    }
}
