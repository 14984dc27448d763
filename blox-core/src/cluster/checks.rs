//! The GPU table's invariants, checked by the loop after every round.

use super::{ClusterError, ClusterState, HOST_EPS};
use crate::job_state::JobState;

impl ClusterState {
    /// The loop's invariants: the counters and the free index match the
    /// table; every running job holds exactly its allocation; no GPU is held
    /// by a job that is not running; no node gives out more CPUs or memory
    /// than it has. (A GPU cannot be held by two jobs: the table has one
    /// holder slot per GPU, and `assign` refuses a busy GPU.)
    pub fn check_invariants(&self, jobs: &JobState) -> Result<(), ClusterError> {
        // One pass over the GPU table (this runs after every round).
        let (mut online, mut free, mut held) = (0u32, 0u32, 0usize);
        let mut index_ok = self.index.free.len() == self.gpus.len();
        for (g, &indexed) in self.gpus.iter().zip(&self.index.free) {
            let is_free = g.online && g.job.is_none();
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
        let mut allocated = 0usize;
        for job in jobs.running() {
            for g in &job.allocation {
                if self.gpus.get(g.index()).and_then(|x| x.job) != Some(job.id()) {
                    let held = self.holders().remove(&job.id()).unwrap_or_default();
                    return Err(ClusterError::Invariant(format!(
                        "{} is running with allocation {:?} but the GPU table gives it {:?}",
                        job.id(),
                        job.allocation,
                        held
                    )));
                }
            }
            allocated += job.allocation.len();
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
        for (n, &(c, m)) in self.nodes.iter().zip(&host) {
            if c > n.spec.cpus as f64 + HOST_EPS || m > n.spec.host_mem_gb + HOST_EPS {
                return Err(ClusterError::Invariant(format!(
                    "{} gives out {c} CPUs and {m} GiB of its {} CPUs and {} GiB",
                    n.id, n.spec.cpus, n.spec.host_mem_gb
                )));
            }
        }
        Ok(())
    }
}
