//! The checks every policy decision passes before any of it runs: a
//! schedule (the scheduling policy's contract) and a placement (the
//! placement policy's). A decision that breaks a rule is refused whole, with
//! an error naming the policy and the job.

use super::{LoopError, RoundLoop};
use crate::cluster::HOST_EPS;
use crate::ids::{GpuId, JobId, NodeId};
use crate::job::JobStatus;
use crate::module::{Placement, Schedule};
use std::collections::{BTreeMap, HashMap, HashSet};

impl RoundLoop {
    /// Checks a schedule before anything acts on it: every entry names an
    /// admitted, runnable job once, none is also terminated, and no demand
    /// exceeds the cluster.
    pub(super) fn validate_schedule(&self, s: &Schedule) -> Result<(), LoopError> {
        let bad = |reason: String| LoopError::InvalidDecision {
            kind: "scheduling",
            module: self.policies.names.1.clone(),
            reason,
        };
        let unknown = |verb: &str, id: JobId| -> String {
            if self.waiting.iter().any(|j| j.id() == id) {
                format!("{verb} {id}, which still waits for admission")
            } else if self.jobs.finished_job(id).is_some() {
                format!("{verb} {id}, which has already ended")
            } else {
                format!("{verb} {id}, which is not a job the scheduler knows")
            }
        };
        let mut terminated = HashSet::with_capacity(s.terminate.len());
        for (id, _) in &s.terminate {
            if self.jobs.get(*id).is_none() {
                return Err(bad(unknown("terminates", *id)));
            }
            terminated.insert(*id);
        }
        let cap = self.cluster.max_gpus();
        let mut seen = HashSet::with_capacity(s.entries.len());
        for d in &s.entries {
            let id = d.job;
            if !seen.insert(id) {
                return Err(bad(format!("lists {id} twice")));
            }
            match self.jobs.get(id) {
                None => return Err(bad(unknown("schedules", id))),
                Some(j) if !matches!(j.status, JobStatus::Queued | JobStatus::Running) => {
                    return Err(bad(format!(
                        "schedules {id}, which is {}",
                        j.status.as_str()
                    )))
                }
                Some(_) => {}
            }
            if terminated.contains(&id) {
                return Err(bad(format!("both terminates and schedules {id}")));
            }
            if d.gpus > cap {
                return Err(bad(format!(
                    "asks for {} GPUs for {id}, but the cluster has {cap}",
                    d.gpus
                )));
            }
            if d.batch_size == Some(0) {
                return Err(bad(format!("gives {id} a batch size of 0")));
            }
            if let Some(ids) = d.gpu_ids.as_ref().filter(|g| !g.is_empty()) {
                if ids.len() != d.gpus as usize {
                    return Err(bad(format!(
                        "names {} GPUs for {id} but asks for {}",
                        ids.len(),
                        d.gpus
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks a placement against the state before anything is executed: every
    /// job named exists and is runnable, and the allocations after the decision
    /// use existing, online GPUs at most once.
    pub(super) fn validate(&self, p: &Placement) -> Result<(), LoopError> {
        let bad = |reason: String| LoopError::InvalidDecision {
            kind: "placement",
            module: self.policies.names.2.clone(),
            reason,
        };
        let mut after: BTreeMap<JobId, &[GpuId]> = self
            .jobs
            .running()
            .map(|j| (j.id(), j.allocation.as_slice()))
            .collect();
        for id in &p.preempt {
            if after.remove(id).is_none() {
                return Err(bad(format!("asks to preempt {id}, which is not running")));
            }
        }
        let mut launched = HashSet::new();
        for a in &p.launch {
            let Some(job) = self.jobs.get(a.job) else {
                return Err(bad(format!(
                    "launches {}, which is not an admitted job",
                    a.job
                )));
            };
            if !matches!(job.status, JobStatus::Queued | JobStatus::Running) {
                return Err(bad(format!(
                    "launches {} in status {}",
                    a.job,
                    job.status.as_str()
                )));
            }
            if a.gpus.is_empty() {
                return Err(bad(format!("launches {} on no GPU", a.job)));
            }
            if !launched.insert(a.job) {
                return Err(bad(format!("launches {} twice", a.job)));
            }
            after.insert(a.job, &a.gpus);
        }
        // Host CPUs and memory per node after the decision: what jobs that keep
        // their allocation hold now, plus what every launch asks for.
        let mut host: HashMap<NodeId, (f64, f64)> = HashMap::new();
        let relaunched: HashSet<JobId> = p.launch.iter().map(|a| a.job).collect();
        for job in self.jobs.running() {
            if p.preempt.contains(&job.id()) || relaunched.contains(&job.id()) {
                continue;
            }
            for g in &job.allocation {
                if let Some(gpu) = self.cluster.gpu(*g) {
                    let e = host.entry(gpu.node).or_default();
                    e.0 += gpu.host_cpus;
                    e.1 += gpu.host_mem_gb;
                }
            }
        }
        for a in &p.launch {
            for g in &a.gpus {
                if let Some(gpu) = self.cluster.gpu(*g) {
                    let node = &self.cluster.nodes()[gpu.node.index()];
                    let share = a.host.unwrap_or_else(|| node.spec.proportional_share());
                    if share.cpus_per_gpu < 0.0 || share.mem_gb_per_gpu < 0.0 {
                        return Err(bad(format!(
                            "gives {} a negative host share {share:?}",
                            a.job
                        )));
                    }
                    let e = host.entry(gpu.node).or_default();
                    e.0 += share.cpus_per_gpu;
                    e.1 += share.mem_gb_per_gpu;
                }
            }
        }
        for (node, (c, m)) in &host {
            let spec = &self.cluster.nodes()[node.index()].spec;
            if *c > spec.cpus as f64 + HOST_EPS || *m > spec.host_mem_gb + HOST_EPS {
                return Err(bad(format!(
                    "gives out {c:.2} CPUs and {m:.1} GiB on {node}, which has {} CPUs and {} GiB",
                    spec.cpus, spec.host_mem_gb
                )));
            }
        }
        let mut owner: Vec<Option<JobId>> = vec![None; self.cluster.gpus().len()];
        for (job, gpus) in after {
            for &g in gpus {
                match self.cluster.gpu(g) {
                    None => return Err(bad(format!("gives {job} {g}, which does not exist"))),
                    Some(gpu) if !gpu.online => {
                        return Err(bad(format!("gives {job} {g}, which is offline")))
                    }
                    _ => {}
                }
                if let Some(other) = owner[g.index()].replace(job) {
                    return Err(bad(format!("gives {g} to both {other} and {job}")));
                }
            }
        }
        Ok(())
    }
}
