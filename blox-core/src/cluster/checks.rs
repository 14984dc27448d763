//! The GPU table's invariants, checked by the loop after every round: in
//! full, or over what the round changed.

use super::{ClusterError, ClusterState};
use crate::ids::{GpuId, JobId, NodeId};
use crate::job_state::JobState;

/// The GPUs whose holder or share changed since the last check, or that
/// anything else did (nodes joined, left or came back; a cluster read back
/// from a snapshot): then the next check is a full one.
#[derive(Clone, Debug, Default)]
pub(crate) struct Changed {
    /// Counts every change (never reset; see [`ClusterState::revision`]).
    pub revision: u64,
    pub gpus: Vec<u32>,
    /// Jobs whose list of GPUs changed (they took or gave back some).
    pub jobs: Vec<JobId>,
    pub everything: bool,
}

impl Changed {
    pub fn everything() -> Self {
        Changed {
            revision: 0,
            gpus: Vec::new(),
            jobs: Vec::new(),
            everything: true,
        }
    }

    pub fn set_everything(&mut self) {
        self.revision += 1;
        self.everything = true;
        self.gpus.clear();
        self.jobs.clear();
    }

    /// Notes that `job`'s list of GPUs changed (bounded as the GPUs are).
    pub fn job(&mut self, job: JobId, table: usize) {
        self.revision += 1;
        if !self.everything && !push_bounded(&mut self.jobs, job, table) {
            self.set_everything();
        }
    }

    /// Notes a change to `gpu` of a table of `table` GPUs. The list never
    /// grows past the table (a caller that never checks, or a round that
    /// moved every GPU): the next check is then a full one.
    pub fn gpu(&mut self, gpu: GpuId, table: usize) {
        self.revision += 1;
        if !self.everything && !push_bounded(&mut self.gpus, gpu.0, table) {
            self.set_everything();
        }
    }
}

/// Pushes `item` unless `list` holds as many as the table (at least 64)
/// already; false when it was full.
fn push_bounded<T>(list: &mut Vec<T>, item: T, table: usize) -> bool {
    let room = list.len() < table.max(64);
    if room {
        list.push(item);
    }
    room
}

impl ClusterState {
    /// The [`revision`](Self::revision) at which `node`'s GPUs, shares or
    /// host CPUs last changed (or any node joined, left or came back): a
    /// cache of figures per node is stale for the nodes whose revision
    /// moved. A node this cluster has no record for reads as changed now.
    pub fn node_revision(&self, node: NodeId) -> u64 {
        self.node_rev
            .get(node.index())
            .copied()
            .unwrap_or(self.changed.revision)
    }

    /// Notes a change to `gpu` (its holder, share or host share).
    pub(super) fn note_gpu(&mut self, gpu: GpuId) {
        self.changed.gpu(gpu, self.gpus.len());
        self.note_node(self.gpus[gpu.index()].node);
    }

    /// Notes a change to `node`'s holders, at the current revision.
    pub(super) fn note_node(&mut self, node: NodeId) {
        let at = node.index();
        if self.node_rev.len() <= at {
            self.node_rev.resize(at + 1, 0);
        }
        self.node_rev[at] = self.changed.revision;
    }

    /// Notes a change to the nodes themselves: every node reads as changed.
    pub(super) fn note_everything(&mut self) {
        self.changed.set_everything();
        self.node_rev.clear();
        self.node_rev
            .resize(self.nodes.len(), self.changed.revision);
    }

    /// [`check_invariants`](Self::check_invariants) over what changed since
    /// the last check: each changed GPU's entry in the free index, its
    /// node's count and row, its holder (running, with the GPU in its
    /// allocation, which is the cluster's list for it), the lists of jobs
    /// that gave back some GPUs, the changed nodes' host shares, and the
    /// free count's total. A round costs what it changed, not what runs.
    /// After nodes changed it checks everything.
    pub fn check_changes(&mut self, jobs: &JobState) -> Result<(), ClusterError> {
        let revision = self.changed.revision;
        let mut changed = std::mem::replace(
            &mut self.changed,
            Changed {
                revision,
                ..Default::default()
            },
        );
        let r = if changed.everything {
            self.check_invariants(jobs)
        } else {
            self.check_gpus(&mut changed.gpus, jobs)
                .and_then(|holders| self.check_lists(&mut changed.jobs, &holders, jobs))
        };
        changed.gpus.clear();
        changed.jobs.clear();
        changed.everything = false;
        self.changed = changed;
        r
    }

    /// [`check_invariants`](Self::check_invariants), starting the next
    /// [`check_changes`](Self::check_changes) afresh.
    pub fn check_all(&mut self, jobs: &JobState) -> Result<(), ClusterError> {
        self.changed.gpus.clear();
        self.changed.jobs.clear();
        self.changed.everything = false;
        self.check_invariants(jobs)
    }

    /// The lists of the jobs that took or gave back GPUs and still hold
    /// some, beside the holders of changed GPUs (`checked`, sorted: their
    /// lists were compared with their allocations already): each GPU
    /// listed is the job's in the table, and the job runs with that
    /// allocation, in that order. (A list that emptied is not looked at:
    /// a job still running with GPUs it gave back is found by the full
    /// check, every 256th round and in debug builds.)
    fn check_lists(
        &self,
        changed: &mut Vec<JobId>,
        checked: &[JobId],
        jobs: &JobState,
    ) -> Result<(), ClusterError> {
        changed.sort_unstable();
        changed.dedup();
        for &j in changed.iter() {
            if !self.held.of(j).is_empty() && checked.binary_search(&j).is_err() {
                self.check_list(j, jobs)?;
            }
            if !self.hosted.is_empty() {
                self.check_hosted(j, jobs)?;
            }
        }
        Ok(())
    }

    /// [`check_lists`](Self::check_lists) for one job.
    fn check_list(&self, j: JobId, jobs: &JobState) -> Result<(), ClusterError> {
        let list = self.held.of(j);
        if let Some(g) = list
            .iter()
            .find(|g| self.gpus.get(g.index()).and_then(|x| x.job) != Some(j))
        {
            return Err(ClusterError::Invariant(format!(
                "the cluster lists {list:?} for {j}, but the GPU table does not give it {g}"
            )));
        }
        match jobs.get(j).filter(|job| job.is_running()) {
            Some(job) if job.allocation[..] == *list => Ok(()),
            Some(job) => Err(ClusterError::Invariant(format!(
                "{j} is running with allocation {:?} but the cluster gives it {list:?}",
                job.allocation
            ))),
            None if list.is_empty() => Ok(()),
            None => Err(ClusterError::Invariant(format!(
                "{j} holds {list:?} but is not a running job"
            ))),
        }
    }

    /// The changed GPUs' entries and holders; returns the holders, sorted.
    fn check_gpus(
        &self,
        changed: &mut Vec<u32>,
        jobs: &JobState,
    ) -> Result<Vec<JobId>, ClusterError> {
        changed.sort_unstable();
        changed.dedup();
        let mut nodes: Vec<u32> = Vec::new();
        let mut holders: Vec<JobId> = Vec::new();
        for &i in changed.iter() {
            let Some(g) = self.gpus.get(i as usize) else {
                return Err(ClusterError::Invariant(format!(
                    "gpu-{i} changed but the table has {} GPUs",
                    self.gpus.len()
                )));
            };
            let shared = match self.shares.is_empty() {
                true => &[][..],
                false => self.shares.holders_of(g.id),
            };
            let is_free = g.online && g.job.is_none() && shared.is_empty();
            if self.index.free.get(i as usize) != Some(&is_free) {
                return Err(ClusterError::Invariant(
                    "the free-GPU index does not match the table".into(),
                ));
            }
            nodes.push(g.node.0);
            if let Some(j) = g.job {
                let ok = jobs
                    .get(j)
                    .is_some_and(|job| job.is_running() && job.allocation.contains(&g.id));
                if !ok {
                    return Err(ClusterError::Invariant(format!(
                        "{j} holds {} but is not a running job with it in its allocation",
                        g.id
                    )));
                }
                holders.push(j);
            }
            for &j in shared {
                self.check_sharer(j, g.id, jobs)?;
            }
        }
        holders.sort_unstable();
        holders.dedup();
        // Their allocations are their lists, in order (each list holds
        // just the job's GPUs in the table: they change together, and the
        // full check compares them).
        for &j in &holders {
            let job = jobs.get(j).expect("checked above");
            let list = self.held.of(j);
            if job.allocation[..] != *list {
                return Err(ClusterError::Invariant(format!(
                    "{j} is running with allocation {:?} but the cluster gives it {list:?}",
                    job.allocation
                )));
            }
        }
        nodes.sort_unstable();
        nodes.dedup();
        let rows = self.index.by_free.len();
        for n in nodes {
            let node = &self.nodes[n as usize];
            let free = node
                .gpus
                .iter()
                .filter(|g| {
                    let x = &self.gpus[g.index()];
                    x.online && x.job.is_none() && !self.is_shared(**g)
                })
                .count() as u32;
            let (w, bit) = (n as usize / 64, 1u64 << (n % 64));
            let in_row = |r: usize| self.index.by_free[r].get(w).is_some_and(|x| x & bit != 0);
            let rows_ok = (0..rows).all(|r| in_row(r) == (free as usize == r + 1));
            if self.index.per_node.get(n as usize) != Some(&free) || !rows_ok {
                return Err(ClusterError::Invariant(
                    "the free-GPU index does not match the table".into(),
                ));
            }
            if self.custom_host {
                let (c, m) = self.host_used(node.id);
                if node.spec.over_host(c, m) {
                    return Err(ClusterError::Invariant(format!(
                        "{} gives out {c} CPUs and {m} GiB of its {} CPUs and {} GiB",
                        node.id, node.spec.cpus, node.spec.host_mem_gb
                    )));
                }
            }
        }
        let counted: u32 = self.index.per_node.iter().sum();
        if counted != self.free {
            return Err(ClusterError::Invariant(format!(
                "the counter says {} free, the nodes' counts {counted}",
                self.free
            )));
        }
        Ok(holders)
    }

    /// The loop's invariants: the counters and the free index match the
    /// table; every running job holds exactly its allocation; no GPU is held
    /// by a job that is not running; no node gives out more CPUs or memory
    /// than it has. (A GPU cannot be held by two jobs: the table has one
    /// holder slot per GPU, and `assign` refuses a busy GPU.)
    pub fn check_invariants(&self, jobs: &JobState) -> Result<(), ClusterError> {
        // One pass over the GPU table (this runs after every round).
        let (mut online, mut free, mut held) = (0u32, 0u32, 0usize);
        let mut index_ok = self.index.free.len() == self.gpus.len();
        let sharing = !self.shares.is_empty();
        for (g, &indexed) in self.gpus.iter().zip(&self.index.free) {
            let shared = sharing && self.shares.used(g.id) > 0;
            let is_free = g.online && g.job.is_none() && !shared;
            online += u32::from(g.online);
            free += u32::from(is_free);
            held += usize::from(g.job.is_some());
            index_ok &= indexed == is_free;
        }
        if online != self.online || free != self.free {
            return Err(ClusterError::Invariant(format!(
                "counters say {} online/{} free, table says {online}/{free}",
                self.online, self.free
            )));
        }
        // The per-node counts move with the mask in one place
        // (`FreeIndex::set`); their total is checked here, each count by
        // the tests.
        let counted: u32 = self.index.per_node.iter().sum();
        // So do the rows of nodes by free count: as many nodes marked as
        // have a GPU free, and their counts add up to the free GPUs.
        let with_free = self.index.per_node.iter().filter(|&&c| c > 0).count() as u64;
        let (mut marked, mut marked_free) = (0u64, 0u64);
        for (r, row) in self.index.by_free.iter().enumerate() {
            let n: u64 = row.iter().map(|w| u64::from(w.count_ones())).sum();
            marked += n;
            marked_free += n * (r as u64 + 1);
        }
        if !index_ok
            || counted != free
            || self.index.per_node.len() != self.nodes.len()
            || marked != with_free
            || marked_free != u64::from(free)
        {
            return Err(ClusterError::Invariant(
                "the free-GPU index does not match the table".into(),
            ));
        }
        // Every running job holds exactly its allocation, and nobody else holds
        // a GPU: the GPUs held in the table are exactly the allocations.
        let sharers = self.check_shares()?;
        for s in &sharers {
            self.check_sharer(s.job, s.gpu, jobs)?;
        }
        let (mut allocated, mut holding) = (0usize, 0usize);
        for job in jobs.running() {
            if sharing && self.shares.of(job.id()).is_some() {
                continue;
            }
            for g in &job.allocation {
                if self.gpus.get(g.index()).and_then(|x| x.job) != Some(job.id()) {
                    let held: Vec<GpuId> = (self.gpus.iter())
                        .filter(|x| x.job == Some(job.id()))
                        .map(|x| x.id)
                        .collect();
                    return Err(ClusterError::Invariant(format!(
                        "{} is running with allocation {:?} but the GPU table gives it {:?}",
                        job.id(),
                        job.allocation,
                        held
                    )));
                }
            }
            allocated += job.allocation.len();
            self.check_list(job.id(), jobs)?;
            holding += usize::from(!job.allocation.is_empty());
        }
        if held != allocated {
            for (j, gpus) in &self.holders() {
                let ok = jobs
                    .get(*j)
                    .is_some_and(|job| job.is_running() && job.allocation.len() == gpus.len());
                if !ok {
                    return Err(ClusterError::Invariant(format!(
                        "{j} holds {gpus:?} but is not a running job with that allocation"
                    )));
                }
            }
            return Err(ClusterError::Invariant(format!(
                "{held} GPUs are held but running jobs' allocations add up to {allocated}"
            )));
        }
        if self.held.gpus() != held || self.held.holders() != holding {
            return Err(ClusterError::Invariant(format!(
                "the cluster lists {} GPUs of {} jobs; the table has {held} held, running jobs hold GPUs in {holding}",
                self.held.gpus(),
                self.held.holders()
            )));
        }
        self.check_all_hosted(jobs)?;
        if !self.custom_host {
            // Proportional shares only: a node's GPUs add up to its size.
            return Ok(());
        }
        let mut host = vec![(0.0f64, 0.0f64); self.nodes.len()];
        for g in &self.gpus {
            if let Some(h) = host.get_mut(g.node.index()) {
                h.0 += g.host_cpus;
                h.1 += g.host_mem_gb;
            }
        }
        for (n, h) in self.nodes.iter().zip(host.iter_mut()) {
            let (c, m) = self.hosted_used(n.id);
            h.0 += c;
            h.1 += m;
        }
        for (n, &(c, m)) in self.nodes.iter().zip(&host) {
            if n.spec.over_host(c, m) {
                return Err(ClusterError::Invariant(format!(
                    "{} gives out {c} CPUs and {m} GiB of its {} CPUs and {} GiB",
                    n.id, n.spec.cpus, n.spec.host_mem_gb
                )));
            }
        }
        Ok(())
    }
}

impl ClusterState {
    /// `j`, holding a share of `gpu`, is a running job with that GPU as its
    /// allocation.
    fn check_sharer(&self, j: JobId, gpu: GpuId, jobs: &JobState) -> Result<(), ClusterError> {
        let ok = jobs
            .get(j)
            .is_some_and(|job| job.is_running() && job.allocation[..] == [gpu]);
        if ok {
            Ok(())
        } else {
            Err(ClusterError::Invariant(format!(
                "{j} holds a share of {gpu} but is not a running job with that GPU as its allocation"
            )))
        }
    }
}
