//! The checks every policy decision passes before any of it runs: a
//! schedule (the scheduling policy's contract) and a placement (the
//! placement policy's). A decision that breaks a rule is refused whole, with
//! an error naming the policy and the job.

use super::{LoopError, RoundLoop};
use crate::cluster::{ClusterState, GPU_MILLI};
use crate::ids::{GpuId, JobId, NodeId};
use crate::job::JobStatus;
use crate::job_state::JobState;
use crate::module::{Placement, Schedule};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

/// A mark per job id, scratch for checking a schedule in passes over its
/// entries and the admitted jobs instead of sorting its ids: ids are dense
/// from 0 in a trace, and a cluster numbers its jobs in order. (Marks are
/// cleared by moving to a new stamp.)
#[derive(Debug, Default)]
pub(super) struct IdMarks {
    marks: Vec<u32>,
    stamp: u32,
}

impl IdMarks {
    /// Ids at or beyond this are checked by sorting instead (their marks
    /// would cost memory by the id, not by the jobs).
    const MAX_ID: u64 = 1 << 24;

    /// A stamp no id carries yet, with room for every id up to `max_id`.
    fn fresh(&mut self, max_id: u64) -> u32 {
        if self.stamp == u32::MAX {
            self.marks.fill(0);
            self.stamp = 0;
        }
        self.stamp += 1;
        if max_id as usize >= self.marks.len() {
            self.marks.resize(max_id as usize + 1, 0);
        }
        self.stamp
    }
}

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
                    0 => &n.admission,
                    1 => &n.scheduling,
                    _ => &n.placement,
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
    pub(super) fn validate_schedule(&mut self, s: &Schedule) -> Result<(), LoopError> {
        let mut marks = std::mem::take(&mut self.id_marks);
        let checked = self.check_schedule(s, &mut marks);
        self.id_marks = marks;
        checked
    }

    fn check_schedule(&self, s: &Schedule, marks: &mut IdMarks) -> Result<(), LoopError> {
        let bad = |reason: String| LoopError::InvalidDecision {
            kind: "scheduling",
            module: self.policies.names.scheduling.clone(),
            reason,
        };
        let unknown = |verb: &str, id: JobId| -> String {
            if self.waiting.iter().any(|j| j.id() == id) {
                format!("{verb} {id}, which still waits for admission")
            } else if self.jobs.has_ended(id) {
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
        // Every job scheduled is admitted and unfinished. Where several
        // entries break a rule, the smallest id is the one reported.
        let check = |id: JobId, j: Option<&crate::Job>| match j {
            None => Err(bad(unknown("schedules", id))),
            Some(j) if !matches!(j.status, JobStatus::Queued | JobStatus::Running) => Err(bad(
                format!("schedules {id}, which is {}", j.status.as_str()),
            )),
            Some(_) => Ok(()),
        };
        let many = s.entries.len() * 8 >= self.jobs.num_active();
        let max_id = s.entries.iter().map(|d| d.job.0).max().unwrap_or(0);
        if max_id < IdMarks::MAX_ID {
            // Listed twice: an id met already this pass.
            let listed = marks.fresh(max_id);
            let mut twice: Option<JobId> = None;
            for d in &s.entries {
                let m = &mut marks.marks[d.job.0 as usize];
                if *m == listed {
                    twice = Some(twice.map_or(d.job, |t| t.min(d.job)));
                }
                *m = listed;
            }
            if let Some(id) = twice {
                return Err(bad(format!("lists {id} twice")));
            }
            // Runnable: marked in one walk of the admitted jobs when the
            // entries are many (no lookup per job), looked up when few.
            let mut wrong: Option<JobId> = None;
            if many {
                let runnable = marks.fresh(max_id);
                for j in self.jobs.active() {
                    if j.id().0 > max_id {
                        break;
                    }
                    if matches!(j.status, JobStatus::Queued | JobStatus::Running) {
                        marks.marks[j.id().0 as usize] = runnable;
                    }
                }
                for d in &s.entries {
                    if marks.marks[d.job.0 as usize] != runnable {
                        wrong = Some(wrong.map_or(d.job, |w| w.min(d.job)));
                    }
                }
            } else {
                for d in &s.entries {
                    if check(d.job, self.jobs.get(d.job)).is_err() {
                        wrong = Some(wrong.map_or(d.job, |w| w.min(d.job)));
                    }
                }
            }
            if let Some(id) = wrong {
                check(id, self.jobs.get(id))?;
            }
        } else {
            // Ids too large to mark: sorted, repeats adjacent.
            let mut ids: Vec<JobId> = s.entries.iter().map(|d| d.job).collect();
            ids.sort_unstable();
            if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
                return Err(bad(format!("lists {} twice", w[0])));
            }
            if many {
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

    /// Checks the placement policy's decision ([`PlacementCheck::check`]).
    pub(super) fn validate(&self, p: &Placement) -> Result<(), LoopError> {
        let module = &self.policies.names.placement;
        self.validate_as("placement", module, p)
    }

    /// Checks a placement that module `module` of extension point `kind`
    /// decided.
    pub(super) fn validate_as(
        &self,
        kind: &'static str,
        module: &str,
        p: &Placement,
    ) -> Result<(), LoopError> {
        self.placement_check()
            .check(p)
            .map_err(|reason| LoopError::InvalidDecision {
                kind,
                module: module.to_string(),
                reason,
            })
    }

    /// The placement check over this loop's state.
    pub(super) fn placement_check(&self) -> PlacementCheck<'_> {
        PlacementCheck {
            jobs: &self.jobs,
            cluster: &self.cluster,
        }
    }
}

/// The check a placement passes before any of it runs, over the state it
/// would change: what the loop applies to the placement policy's decision
/// and again to what start-up protection leaves of it, open to a
/// protection module that edits a placement and wants it to stay valid.
#[derive(Clone, Copy)]
pub struct PlacementCheck<'a> {
    pub jobs: &'a JobState,
    pub cluster: &'a ClusterState,
}

impl PlacementCheck<'_> {
    /// Checks a placement against the state before anything is executed: every
    /// job named exists and is runnable, and the allocations after the decision
    /// use existing, online GPUs at most once, within each node's host CPUs
    /// and memory.
    ///
    /// The cost is in what the placement touches (its launches' GPUs and
    /// nodes), not in the size of the cluster: jobs that keep their GPUs hold
    /// a valid allocation already ([`crate::ClusterState::check_invariants`]).
    pub fn check(&self, p: &Placement) -> Result<(), String> {
        let bad = |reason: String| reason;
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
            self.check_node(job, a)?;
            if !launched.insert(a.job) {
                return Err(bad(format!("launches {} twice", a.job)));
            }
            if let Some(m) = a.share {
                if a.gpus.len() != 1 || m == 0 || m > GPU_MILLI {
                    return Err(bad(format!(
                        "launches {} with a share of {m} thousandths of {} GPUs; a share is 1–{GPU_MILLI} thousandths of one GPU",
                        a.job,
                        a.gpus.len()
                    )));
                }
            }
            let e = &job.spec.elasticity;
            if !e.is_default() && !job.without_gpus() {
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
        self.check_gpus(p, &keeps)?;
        if let Some((node, c, m)) = self.host_overflow(p, &keeps).map_err(bad)? {
            let spec = &self.cluster.nodes()[node.index()].spec;
            return Err(bad(format!(
                "gives out {c:.2} CPUs and {m:.1} GiB on {node}, which has {} CPUs and {} GiB",
                spec.cpus, spec.host_mem_gb
            )));
        }
        Ok(())
    }

    /// A job with GPUs is launched on some and names no node; one that
    /// asks for none is launched on none, on an online node.
    fn check_node(&self, job: &crate::Job, a: &crate::module::Assignment) -> Result<(), String> {
        let id = a.job;
        match (job.without_gpus(), a.node) {
            (false, None) if a.gpus.is_empty() => Err(format!("launches {id} on no GPU")),
            (false, None) => Ok(()),
            (false, Some(n)) => Err(format!(
                "launches {id} on {n}, but it asks for GPUs (a node is named only for a job without)"
            )),
            (true, None) => Err(format!(
                "launches {id}, which asks for no GPU, on no node (`Assignment::node`)"
            )),
            (true, Some(_)) if !a.gpus.is_empty() || a.share.is_some() => Err(format!(
                "launches {id}, which asks for no GPU, on {} GPU(s)",
                a.gpus.len().max(1)
            )),
            (true, Some(n)) => match self.cluster.node(n) {
                None => Err(format!("launches {id} on {n}, which does not exist")),
                Some(x) if !x.online => Err(format!("launches {id} on {n}, which is offline")),
                Some(_) => Ok(()),
            },
        }
    }

    /// Every launched GPU exists, is online, and has one owner afterwards,
    /// or sharers whose thousandths add up to one GPU at most.
    fn check_gpus(&self, p: &Placement, keeps: &dyn Fn(JobId) -> bool) -> Result<(), String> {
        let bad = |reason: String| reason;
        let mut given: FxHashMap<GpuId, JobId> = FxHashMap::default();
        // Thousandths launches share out, by GPU, and one of those jobs.
        let mut shared: FxHashMap<GpuId, (u32, JobId)> = FxHashMap::default();
        let sharing = self.cluster.has_shares();
        let kept_shares = |g: GpuId| -> (u32, Option<JobId>) {
            if !sharing {
                return (0, None);
            }
            let on = self.cluster.shares_on(g);
            let kept = on.iter().filter(|s| keeps(s.job));
            let first = kept.clone().map(|s| s.job).next();
            (kept.map(|s| s.milli).sum(), first)
        };
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
                let (kept, sharer) = kept_shares(g);
                match a.share {
                    None => {
                        if let Some(other) = given.insert(g, job) {
                            return Err(bad(format!("gives {g} to both {other} and {job}")));
                        }
                        if let Some(other) = sharer.or(shared.get(&g).map(|x| x.1)) {
                            return Err(bad(format!(
                                "gives {g} to {job} whole, but {other} holds a share of it"
                            )));
                        }
                    }
                    Some(m) => {
                        let node = &self.cluster.nodes()[gpu.node.index()];
                        if node.spec.whole_gpus_only {
                            return Err(bad(format!(
                                "gives {job} a share of {g}, but {} gives its GPUs whole only (whole_gpus_only: its worker does not share GPUs)",
                                gpu.node
                            )));
                        }
                        if let Some(other) = given.get(&g) {
                            return Err(bad(format!(
                                "gives {job} a share of {g}, but gives {other} all of it"
                            )));
                        }
                        let e = shared.entry(g).or_insert((kept, job));
                        e.0 += m;
                        if e.0 > GPU_MILLI {
                            return Err(bad(format!(
                                "shares out {} thousandths of {g} with {job}'s {m}, over one GPU",
                                e.0
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Host CPUs and memory on every node a launch of `p` uses, after the
    /// decision: what the jobs that `keep` their GPUs there hold, plus what
    /// every launch asks for. The first node (by id) given more than it has,
    /// with what it would be given; `Err` names a negative share.
    pub fn host_overflow(
        &self,
        p: &Placement,
        keeps: &dyn Fn(JobId) -> bool,
    ) -> Result<Option<(NodeId, f64, f64)>, String> {
        let mut host: BTreeMap<NodeId, (f64, f64)> = BTreeMap::new();
        for a in &p.launch {
            if let Some(node) = a.node {
                let (c, m) = (self.jobs.get(a.job)).map_or((0.0, 0.0), |j| j.spec.host_in_all());
                if c < 0.0 || m < 0.0 {
                    return Err(format!(
                        "gives {} a negative host share ({c} CPUs, {m} GiB)",
                        a.job
                    ));
                }
                if self.cluster.node(node).is_some() {
                    let e = host
                        .entry(node)
                        .or_insert_with(|| self.kept_on(node, keeps));
                    e.0 += c;
                    e.1 += m;
                }
            }
            for g in &a.gpus {
                if let Some(gpu) = self.cluster.gpu(*g) {
                    let node = &self.cluster.nodes()[gpu.node.index()];
                    let share = match a.share {
                        Some(m) => a.host.unwrap_or_else(|| self.cluster.share_host(*g, m)),
                        None => a.host.unwrap_or_else(|| node.spec.proportional_share()),
                    };
                    if share.cpus_per_gpu < 0.0 || share.mem_gb_per_gpu < 0.0 {
                        return Err(format!("gives {} a negative host share {share:?}", a.job));
                    }
                    let e = host
                        .entry(gpu.node)
                        .or_insert_with(|| self.kept_on(gpu.node, keeps));
                    e.0 += share.cpus_per_gpu;
                    e.1 += share.mem_gb_per_gpu;
                }
            }
        }
        Ok(host.into_iter().find_map(|(node, (c, m))| {
            let spec = &self.cluster.nodes()[node.index()].spec;
            spec.over_host(c, m).then_some((node, c, m))
        }))
    }

    /// CPUs and memory of `node` that jobs which `keep` what they hold
    /// there hold after the decision: with their GPUs, with shares of
    /// them, and without GPUs.
    fn kept_on(&self, node: NodeId, keeps: &dyn Fn(JobId) -> bool) -> (f64, f64) {
        let mut held = (0.0, 0.0);
        let Some(n) = self.cluster.node(node) else {
            return held;
        };
        for x in &n.gpus {
            let Some(gx) = self.cluster.gpu(*x) else {
                continue;
            };
            if gx.job.is_some_and(keeps) {
                held.0 += gx.host_cpus;
                held.1 += gx.host_mem_gb;
            }
            if gx.job.is_none() && self.cluster.has_shares() {
                for s in self.cluster.shares_on(*x) {
                    if keeps(s.job) {
                        held.0 += s.cpus;
                        held.1 += s.mem_gb;
                    }
                }
            }
        }
        for &j in self.cluster.hosted_on(node) {
            if keeps(j) {
                if let Some(h) = self.cluster.host_hold_of(j) {
                    held.0 += h.cpus;
                    held.1 += h.mem_gb;
                }
            }
        }
        held
    }
}
