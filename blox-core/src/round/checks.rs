//! The checks every policy decision passes before any of it runs: a
//! schedule (the scheduling policy's contract) and a placement (the
//! placement policy's). A decision that breaks a rule is refused whole, with
//! an error naming the policy and the job.

use super::{LoopError, RoundLoop};
use crate::cluster::HOST_EPS;
use crate::ids::{GpuId, JobId, NodeId};
use crate::job::JobStatus;
use crate::module::{Placement, Schedule};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

impl RoundLoop {
    /// Fails if the policy just called (`which`: 0 admission, 1 scheduling,
    /// 2 placement) read a per-round metric the backend withheld because
    /// no policy declares it.
    pub(super) fn undeclared_read(&self, kind: &'static str, which: u8) -> Result<(), LoopError> {
        match self.jobs.metrics().take_undeclared_read() {
            None => Ok(()),
            Some((job, key)) => {
                let n = &self.policies.names;
                let module = match which {
                    0 => &n.0,
                    1 => &n.1,
                    _ => &n.2,
                };
                Err(LoopError::UndeclaredMetric {
                    kind,
                    module: module.clone(),
                    key,
                    job,
                })
            }
        }
    }

    /// Checks a schedule before anything acts on it: every entry names an
    /// admitted, runnable job once, none is also terminated, and no demand
    /// exceeds both the cluster and the job's own request.
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
        let mut terminated = FxHashSet::default();
        for (id, _) in &s.terminate {
            if self.jobs.get(*id).is_none() {
                return Err(bad(unknown("terminates", *id)));
            }
            terminated.insert(*id);
        }
        let cap = self.cluster.max_gpus();
        // Listed twice: adjacent once sorted (schedules are often in id
        // order already, which the sort finds in one pass).
        let mut ids: Vec<JobId> = s.entries.iter().map(|d| d.job).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(bad(format!("lists {} twice", w[0])));
        }
        // Every job scheduled is admitted and unfinished: a walk of the
        // admitted jobs beside the sorted ids when they are many (no lookup
        // per job), a lookup each when they are few.
        let check = |id: JobId, j: Option<&crate::Job>| match j {
            None => Err(bad(unknown("schedules", id))),
            Some(j) if !matches!(j.status, JobStatus::Queued | JobStatus::Running) => Err(bad(
                format!("schedules {id}, which is {}", j.status.as_str()),
            )),
            Some(_) => Ok(()),
        };
        if ids.len() * 8 >= self.jobs.num_active() {
            let mut active = self.jobs.active().peekable();
            for &id in &ids {
                while active.next_if(|j| j.id() < id).is_some() {}
                check(id, active.peek().copied().filter(|j| j.id() == id))?;
            }
        } else {
            for &id in &ids {
                check(id, self.jobs.get(id))?;
            }
        }
        for d in &s.entries {
            let id = d.job;
            if terminated.contains(&id) {
                return Err(bad(format!("both terminates and schedules {id}")));
            }
            // A job's own request was accepted when it fitted; asking for it
            // while nodes are away (a worker lost, a node failed) is no
            // error of the policy: the job waits for them to return.
            let own = || self.jobs.get(id).map_or(0, |j| j.requested_gpus());
            if d.gpus > cap && d.gpus > own() {
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
    /// use existing, online GPUs at most once, within each node's host CPUs
    /// and memory.
    ///
    /// The cost is in what the placement touches (its launches' GPUs and
    /// nodes), not in the size of the cluster: jobs that keep their GPUs hold
    /// a valid allocation already ([`crate::ClusterState::check_invariants`]).
    pub(super) fn validate(&self, p: &Placement) -> Result<(), LoopError> {
        let bad = |reason: String| LoopError::InvalidDecision {
            kind: "placement",
            module: self.policies.names.2.clone(),
            reason,
        };
        // Running jobs that give their GPUs up: preempted or launched again.
        let mut releasing: FxHashSet<JobId> = FxHashSet::default();
        for id in &p.preempt {
            let running = self.jobs.get(*id).is_some_and(|j| j.is_running());
            if !running || !releasing.insert(*id) {
                return Err(bad(format!("asks to preempt {id}, which is not running")));
            }
        }
        let mut launched: FxHashSet<JobId> = FxHashSet::default();
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
            let e = &job.spec.elasticity;
            if !e.is_default() {
                let mut types: Vec<&str> = a
                    .gpus
                    .iter()
                    .filter_map(|g| self.cluster.gpu(*g))
                    .map(|g| self.cluster.nodes()[g.node.index()].spec.gpu_type.as_str())
                    .collect();
                types.sort_unstable();
                types.dedup();
                let n = a.gpus.len() as u32;
                let why = match types[..] {
                    [t] => e.violation(job.requested_gpus(), n, t),
                    _ if !e.gpu_types.is_empty() || !e.replica_gpus.is_empty() => Some(format!(
                        "it spans GPU types {} but is bound to types or multi-GPU replicas",
                        types.join(", ")
                    )),
                    _ => e.violation(job.requested_gpus(), n, ""),
                };
                if let Some(why) = why {
                    return Err(bad(format!("launches {} on {n} GPUs, but {why}", a.job)));
                }
            }
        }
        let keeps = |holder: JobId| !releasing.contains(&holder) && !launched.contains(&holder);
        // Host CPUs and memory on every node a launch uses, after the
        // decision: what the jobs that keep their GPUs there hold, plus what
        // every launch asks for.
        let mut host: BTreeMap<NodeId, (f64, f64)> = BTreeMap::new();
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
                    let e = host.entry(gpu.node).or_insert_with(|| {
                        let mut held = (0.0, 0.0);
                        for x in &node.gpus {
                            let Some(gx) = self.cluster.gpu(*x) else {
                                continue;
                            };
                            if gx.job.is_some_and(keeps) {
                                held.0 += gx.host_cpus;
                                held.1 += gx.host_mem_gb;
                            }
                        }
                        held
                    });
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
        // Every launched GPU exists, is online, and has one owner afterwards.
        let mut given: FxHashMap<GpuId, JobId> = FxHashMap::default();
        for a in &p.launch {
            let job = a.job;
            for &g in &a.gpus {
                let gpu = match self.cluster.gpu(g) {
                    None => return Err(bad(format!("gives {job} {g}, which does not exist"))),
                    Some(gpu) if !gpu.online => {
                        return Err(bad(format!("gives {job} {g}, which is offline")))
                    }
                    Some(gpu) => gpu,
                };
                if let Some(other) = gpu.job.filter(|h| *h != job && keeps(*h)) {
                    return Err(bad(format!("gives {g} to both {other} and {job}")));
                }
                if let Some(other) = given.insert(g, job) {
                    return Err(bad(format!("gives {g} to both {other} and {job}")));
                }
            }
        }
        Ok(())
    }
}
