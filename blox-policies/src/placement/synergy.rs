//! Synergy-TUNE's CPU- and memory-aware placement (Mohan et al., OSDI'22, §4.3;
//! Blox, EuroSys'24, Table 1 "greedy resource allocation").
//!
//! Jobs are visited in the schedule's order; each asks for GPUs plus a share of
//! CPUs and host memory per GPU (`Demand::host`; `None` is the GPU-proportional
//! share). For each job that is not already running as asked:
//!
//! 1. place it with the share it asks for, on one server if one fits it
//!    (fewest free GPUs that still fit), else over the servers that fit most;
//! 2. if that fails and it asked for more than the proportional share in some
//!    dimension, place it with the proportional share;
//! 3. if that fails, *reclaim*: jobs holding more than their proportional share
//!    are cut back to it, lowest priority first, until the job fits at the
//!    proportional share (so no job ever gets less than its proportional share
//!    because of another's extra — the paper's fairness guarantee, §4.3);
//! 4. if that fails and `preempt` is on, running jobs below it in the order are
//!    preempted from the bottom up until steps 1–3 succeed (none are if even
//!    all of them would not make room), as Blox's placement does;
//! 5. otherwise the job waits this round and, with `backfill` (default on, as
//!    Synergy schedules greedily), later jobs are still considered.
//!
//! Running jobs keep their GPUs and share unless cut back in step 3. With
//! `upgrade` (default on), a running job below its asked share afterwards gets
//! it where its own servers have room, at the cost of a restart. With every
//! demand `None` this is consolidated placement with host accounting.

use blox_core::*;
use serde::Deserialize;
use std::collections::HashMap;

/// Parameters: `backfill` (true), `preempt` (true), `upgrade` (true).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SynergyPlacement {
    #[serde(default = "yes")]
    pub backfill: bool,
    #[serde(default = "yes")]
    pub preempt: bool,
    #[serde(default = "yes")]
    pub upgrade: bool,
}

fn yes() -> bool {
    true
}

impl Default for SynergyPlacement {
    fn default() -> Self {
        SynergyPlacement {
            backfill: true,
            preempt: true,
            upgrade: true,
        }
    }
}

/// A job's allocation in the plan.
#[derive(Clone, Debug)]
struct Planned {
    gpus: Vec<GpuId>,
    share: Option<HostShare>,
    /// Place in the schedule (0 = highest priority).
    rank: usize,
}

/// The cluster as this round's decisions leave it.
#[derive(Clone)]
struct Plan<'a> {
    cluster: &'a ClusterState,
    gpu_free: Vec<bool>,
    free_gpus: Vec<u32>,
    cpus: Vec<f64>,
    mem: Vec<f64>,
    jobs: HashMap<JobId, Planned>,
}

const EPS: f64 = 1e-6;

impl<'a> Plan<'a> {
    /// Everything free: jobs are added back as they are kept or placed.
    fn empty(cluster: &'a ClusterState) -> Self {
        let nodes = cluster.nodes();
        let mut p = Plan {
            cluster,
            gpu_free: vec![false; cluster.gpus().len()],
            free_gpus: vec![0; nodes.len()],
            cpus: nodes.iter().map(|n| n.spec.cpus as f64).collect(),
            mem: nodes.iter().map(|n| n.spec.host_mem_gb).collect(),
            jobs: HashMap::new(),
        };
        for g in cluster.gpus() {
            if g.online {
                p.gpu_free[g.id.index()] = true;
                p.free_gpus[g.node.index()] += 1;
            }
        }
        p
    }

    fn node_of(&self, g: GpuId) -> NodeId {
        self.cluster.gpu(g).expect("GPU of this cluster").node
    }

    /// The share a job gets on `node`.
    fn per_gpu(&self, share: Option<HostShare>, node: NodeId) -> HostShare {
        share.unwrap_or_else(|| self.cluster.nodes()[node.index()].spec.proportional_share())
    }

    fn occupy(&mut self, job: JobId, p: Planned) {
        for &g in &p.gpus {
            let n = self.node_of(g);
            let s = self.per_gpu(p.share, n);
            self.gpu_free[g.index()] = false;
            self.free_gpus[n.index()] -= 1;
            self.cpus[n.index()] -= s.cpus_per_gpu;
            self.mem[n.index()] -= s.mem_gb_per_gpu;
        }
        self.jobs.insert(job, p);
    }

    fn vacate(&mut self, job: JobId) -> Option<Planned> {
        let p = self.jobs.remove(&job)?;
        for &g in &p.gpus {
            let n = self.node_of(g);
            let s = self.per_gpu(p.share, n);
            self.gpu_free[g.index()] = true;
            self.free_gpus[n.index()] += 1;
            self.cpus[n.index()] += s.cpus_per_gpu;
            self.mem[n.index()] += s.mem_gb_per_gpu;
        }
        Some(p)
    }

    /// GPUs of `node` a job with `share` per GPU could take now.
    fn usable(&self, node: &Node, share: Option<HostShare>) -> u32 {
        if !node.online {
            return 0;
        }
        let i = node.id.index();
        let s = self.per_gpu(share, node.id);
        let by = |have: f64, per: f64| {
            if per <= 0.0 {
                u32::MAX
            } else {
                ((have + EPS) / per).floor().max(0.0) as u32
            }
        };
        self.free_gpus[i]
            .min(by(self.cpus[i], s.cpus_per_gpu))
            .min(by(self.mem[i], s.mem_gb_per_gpu))
    }

    /// `n` GPUs with `share` per GPU: one server if any fits (the one with the
    /// fewest free GPUs), else the servers that fit most first.
    fn fit(&self, n: u32, share: Option<HostShare>) -> Option<Vec<GpuId>> {
        let nodes = self.cluster.nodes();
        let usable: Vec<u32> = nodes.iter().map(|x| self.usable(x, share)).collect();
        if usable.iter().map(|&u| u as u64).sum::<u64>() < n as u64 {
            return None;
        }
        let free_on = |node: &Node, k: u32| -> Vec<GpuId> {
            node.gpus
                .iter()
                .copied()
                .filter(|g| self.gpu_free[g.index()])
                .take(k as usize)
                .collect()
        };
        if let Some(node) = nodes
            .iter()
            .filter(|x| usable[x.id.index()] >= n)
            .min_by_key(|x| (self.free_gpus[x.id.index()], x.id))
        {
            return Some(free_on(node, n));
        }
        let mut order: Vec<&Node> = nodes.iter().filter(|x| usable[x.id.index()] > 0).collect();
        order.sort_by_key(|x| (std::cmp::Reverse(usable[x.id.index()]), x.id));
        let mut out = Vec::with_capacity(n as usize);
        for node in order {
            let k = usable[node.id.index()].min(n - out.len() as u32);
            out.extend(free_on(node, k));
            if out.len() == n as usize {
                return Some(out);
            }
        }
        None
    }

    /// True if `share` is above the proportional share on some node the job
    /// holds.
    fn above_proportional(&self, p: &Planned) -> bool {
        match p.share {
            None => false,
            Some(s) => p.gpus.iter().any(|g| {
                let prop = self.per_gpu(None, self.node_of(*g));
                s.exceeds(&prop)
            }),
        }
    }

    /// Steps 1–3 for one job: its asked share, the proportional share, then
    /// cutting others back to proportional (lowest priority first). Returns the
    /// GPUs, the share, and the jobs cut back; on failure nothing changed.
    fn place(
        &mut self,
        n: u32,
        want: Option<HostShare>,
    ) -> Option<(Vec<GpuId>, Option<HostShare>, Vec<JobId>)> {
        // Every step below needs `n` free GPUs.
        if self.free_gpus.iter().sum::<u32>() < n {
            return None;
        }
        if let Some(g) = self.fit(n, want) {
            return Some((g, want, Vec::new()));
        }
        if want.is_some() {
            if let Some(g) = self.fit(n, None) {
                return Some((g, None, Vec::new()));
            }
        }
        // Reclaim: jobs above their proportional share, on servers with free
        // GPUs, lowest priority first.
        let mut over: Vec<(usize, JobId)> = self
            .jobs
            .iter()
            .filter(|(_, p)| self.above_proportional(p))
            .filter(|(_, p)| {
                p.gpus
                    .iter()
                    .any(|g| self.free_gpus[self.node_of(*g).index()] > 0)
            })
            .map(|(id, p)| (p.rank, *id))
            .collect();
        if over.is_empty() {
            return None;
        }
        over.sort_by_key(|&(rank, id)| (std::cmp::Reverse(rank), id));
        let before = self.clone_state();
        let mut cut = Vec::new();
        for (_, id) in over {
            let mut p = self.vacate(id).expect("planned job");
            p.share = None;
            self.occupy(id, p);
            cut.push(id);
            if let Some(g) = self.fit(n, None) {
                return Some((g, None, cut));
            }
        }
        self.restore(before);
        None
    }

    fn clone_state(&self) -> Snapshot {
        Snapshot {
            gpu_free: self.gpu_free.clone(),
            free_gpus: self.free_gpus.clone(),
            cpus: self.cpus.clone(),
            mem: self.mem.clone(),
            jobs: self.jobs.clone(),
        }
    }

    fn restore(&mut self, s: Snapshot) {
        self.gpu_free = s.gpu_free;
        self.free_gpus = s.free_gpus;
        self.cpus = s.cpus;
        self.mem = s.mem;
        self.jobs = s.jobs;
    }
}

struct Snapshot {
    gpu_free: Vec<bool>,
    free_gpus: Vec<u32>,
    cpus: Vec<f64>,
    mem: Vec<f64>,
    jobs: HashMap<JobId, Planned>,
}

impl PlacementPolicy for SynergyPlacement {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let mut out = Placement::default();
        let mut plan = Plan::empty(cluster);
        let rank: HashMap<JobId, usize> = schedule
            .entries
            .iter()
            .enumerate()
            .map(|(i, d)| (d.job, i))
            .collect();
        // Running jobs the schedule keeps at their GPU count stay as they are.
        let mut kept: std::collections::HashSet<JobId> = Default::default();
        for job in jobs.running() {
            match rank.get(&job.id()) {
                Some(&i) if schedule.entries[i].gpus as usize == job.allocation.len() => {
                    plan.occupy(
                        job.id(),
                        Planned {
                            gpus: job.allocation.clone(),
                            share: job.host_share,
                            rank: i,
                        },
                    );
                    kept.insert(job.id());
                }
                Some(_) => {} // demand changed: placed again below
                None => out.preempt.push(job.id()),
            }
        }
        let mut preempted: Vec<JobId> = Vec::new();
        // Jobs ranked below every kept job have nobody to preempt.
        let lowest_kept = kept.iter().map(|k| plan.jobs[k].rank).max();
        for (i, d) in schedule.entries.iter().enumerate() {
            if plan.jobs.contains_key(&d.job) || d.gpus == 0 {
                continue;
            }
            let mut placed = plan.place(d.gpus, d.host);
            if placed.is_none() && self.preempt && lowest_kept.is_some_and(|r| r > i) {
                let mut victims: Vec<(usize, JobId)> = plan
                    .jobs
                    .iter()
                    .filter(|(id, p)| p.rank > i && kept.contains(id))
                    .map(|(id, p)| (p.rank, *id))
                    .collect();
                // Not even all of them would free enough GPUs: preempt none.
                let could_free: usize = victims.iter().map(|(_, v)| plan.jobs[v].gpus.len()).sum();
                let free_now: u32 = plan.free_gpus.iter().sum();
                if (free_now as usize + could_free) < d.gpus as usize {
                    victims.clear();
                }
                victims.sort_by_key(|&(r, id)| (std::cmp::Reverse(r), id));
                let before = if victims.is_empty() {
                    None
                } else {
                    Some(plan.clone_state())
                };
                let mut gone = Vec::new();
                for (_, v) in victims {
                    plan.vacate(v);
                    gone.push(v);
                    placed = plan.place(d.gpus, d.host);
                    if placed.is_some() {
                        break;
                    }
                }
                if placed.is_some() {
                    kept.retain(|k| !gone.contains(k));
                    preempted.extend(gone);
                } else if let Some(before) = before {
                    plan.restore(before);
                }
            }
            match placed {
                Some((gpus, share, _cut)) => plan.occupy(
                    d.job,
                    Planned {
                        gpus,
                        share,
                        rank: i,
                    },
                ),
                None if self.backfill => continue,
                None => break,
            }
        }
        // Upgrade running jobs below their asked share where their servers allow.
        if self.upgrade {
            for d in &schedule.entries {
                let Some(want) = d.host else { continue };
                let Some(p) = plan.jobs.get(&d.job).cloned() else {
                    continue;
                };
                if p.share == Some(want) {
                    continue;
                }
                let mut q = plan.vacate(d.job).expect("planned");
                let fits = {
                    let mut need: HashMap<NodeId, u32> = HashMap::new();
                    for g in &q.gpus {
                        *need.entry(plan.node_of(*g)).or_default() += 1;
                    }
                    need.iter().all(|(n, k)| {
                        plan.cpus[n.index()] + EPS >= want.cpus_per_gpu * *k as f64
                            && plan.mem[n.index()] + EPS >= want.mem_gb_per_gpu * *k as f64
                    })
                };
                if fits {
                    q.share = Some(want);
                }
                plan.occupy(d.job, q);
            }
        }
        out.preempt.extend(preempted);
        // Launch whatever differs from what runs now.
        for d in &schedule.entries {
            let Some(p) = plan.jobs.get(&d.job) else {
                continue;
            };
            let job = jobs.get(d.job).expect("scheduled job exists");
            let unchanged = job.is_running()
                && job.allocation == p.gpus
                && job.host_share == p.share
                && !out.preempt.contains(&d.job);
            if !unchanged {
                out.launch.push(Assignment {
                    job: d.job,
                    gpus: p.gpus.clone(),
                    batch_size: d.batch_size,
                    host: p.share,
                    share: None,
                    node: None,
                });
            }
        }
        out
    }
}

blox_core::register_placement!(
    "synergy",
    "Synergy-TUNE (OSDI'22 §4.3): GPUs plus CPU/memory per GPU; falls back to the proportional share, reclaims above-proportional shares",
    |p| Ok(Box::new(p.parse::<SynergyPlacement>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use proptest::prelude::*;

    /// Synergy's servers: 8 GPUs, 24 CPUs, 500 GB (3 CPUs, 62.5 GB per GPU).
    fn servers(n: u32) -> ClusterState {
        let mut c = ClusterState::new();
        for _ in 0..n {
            let mut s = NodeSpec::with_gpus(8);
            s.cpus = 24;
            s.host_mem_gb = 500.0;
            c.add_node(s);
        }
        c
    }

    fn share(c: f64, m: f64) -> Option<HostShare> {
        Some(HostShare {
            cpus_per_gpu: c,
            mem_gb_per_gpu: m,
        })
    }

    fn demand(job: u64, gpus: u32, host: Option<HostShare>) -> Demand {
        Demand {
            job: JobId(job),
            gpus,
            batch_size: None,
            gpu_ids: None,
            host,
        }
    }

    /// Applies a placement to the state the way the loop does.
    fn apply(p: &Placement, state: &mut JobState, cluster: &mut ClusterState) {
        let moving: Vec<JobId> = p
            .launch
            .iter()
            .map(|a| a.job)
            .filter(|j| state.get(*j).unwrap().is_running())
            .chain(p.preempt.iter().copied())
            .collect();
        for id in moving {
            let j = state.get_mut(id).unwrap();
            cluster.release(id, &j.allocation);
            j.allocation.clear();
            j.status = JobStatus::Queued;
            j.host_share = None;
        }
        for a in &p.launch {
            cluster.assign_with_host(a.job, &a.gpus, a.host).unwrap();
            let j = state.get_mut(a.job).unwrap();
            j.allocation = a.gpus.clone();
            j.status = JobStatus::Running;
            j.host_share = a.host;
        }
        cluster.check_invariants(state).unwrap();
    }

    #[test]
    fn a_job_gets_its_best_share_when_the_server_has_room() {
        let mut cluster = servers(1);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[]);
        let s = Schedule {
            entries: vec![demand(1, 1, share(12.0, 125.0))],
            ..Default::default()
        };
        let p = SynergyPlacement::default().place(&info(0.0), &s, &state, &cluster);
        assert_eq!(p.launch.len(), 1);
        assert_eq!(p.launch[0].host, share(12.0, 125.0));
    }

    #[test]
    fn a_job_falls_back_to_proportional_when_its_best_does_not_fit() {
        // Two 4-GPU CPU-hungry jobs on one 24-CPU server: the first gets 5 CPUs
        // per GPU (20), the second cannot get 5 per GPU (4 left) and the first
        // is cut back so the second gets the proportional 3 per GPU.
        let mut cluster = servers(1);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 4), &[]);
        add(&mut state, &mut cluster, job(2, 1.0, 4), &[]);
        let s = Schedule {
            entries: vec![
                demand(1, 4, share(5.0, 62.5)),
                demand(2, 4, share(5.0, 62.5)),
            ],
            ..Default::default()
        };
        let p = SynergyPlacement {
            upgrade: false,
            ..Default::default()
        }
        .place(&info(0.0), &s, &state, &cluster);
        let host: HashMap<JobId, Option<HostShare>> =
            p.launch.iter().map(|a| (a.job, a.host)).collect();
        assert_eq!(host.len(), 2, "both run: {p:?}");
        assert_eq!(host[&JobId(1)], None, "cut back to proportional");
        assert_eq!(host[&JobId(2)], None);
    }

    #[test]
    fn reclaiming_cuts_back_a_running_job_and_keeps_it_on_its_gpus() {
        let mut cluster = servers(1);
        let mut state = JobState::new();
        let mut j1 = job(1, 0.0, 4);
        j1.host_share = share(5.0, 62.5);
        state.insert(j1);
        let gpus: Vec<GpuId> = (0..4).map(GpuId).collect();
        cluster
            .assign_with_host(JobId(1), &gpus, share(5.0, 62.5))
            .unwrap();
        {
            let j = state.get_mut(JobId(1)).unwrap();
            j.status = JobStatus::Running;
            j.allocation = gpus.clone();
        }
        add(&mut state, &mut cluster, job(2, 1.0, 4), &[]);
        let s = Schedule {
            entries: vec![demand(1, 4, share(5.0, 62.5)), demand(2, 4, None)],
            ..Default::default()
        };
        let p = SynergyPlacement::default().place(&info(0.0), &s, &state, &cluster);
        assert!(p.preempt.is_empty());
        let a1 = p
            .launch
            .iter()
            .find(|a| a.job == JobId(1))
            .expect("job 1 relaunched");
        assert_eq!(a1.gpus, gpus, "same GPUs");
        assert_eq!(a1.host, None, "at the proportional share");
        assert!(p.launch.iter().any(|a| a.job == JobId(2)));
        apply(&p, &mut state, &mut cluster);
    }

    #[test]
    fn a_job_is_never_left_below_proportional_because_of_anothers_extra() {
        // A low-priority job holding 3x its share must give it back to a
        // higher-priority job that needs the proportional share.
        let mut cluster = servers(1);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 7), &[]);
        add(&mut state, &mut cluster, job(2, 1.0, 1), &[]);
        // Job 2 (lower priority) first holds 1 GPU with 18 CPUs.
        let p = SynergyPlacement::default().place(
            &info(0.0),
            &Schedule {
                entries: vec![demand(2, 1, share(18.0, 62.5))],
                ..Default::default()
            },
            &state,
            &cluster,
        );
        apply(&p, &mut state, &mut cluster);
        assert_eq!(state.get(JobId(2)).unwrap().host_share, share(18.0, 62.5));
        let p = SynergyPlacement::default().place(
            &info(300.0),
            &Schedule {
                entries: vec![demand(1, 7, None), demand(2, 1, share(18.0, 62.5))],
                ..Default::default()
            },
            &state,
            &cluster,
        );
        apply(&p, &mut state, &mut cluster);
        assert!(state.get(JobId(1)).unwrap().is_running());
        assert_eq!(state.get(JobId(2)).unwrap().host_share, None);
        assert!(
            state.get(JobId(2)).unwrap().is_running(),
            "cut back, not preempted"
        );
    }

    proptest! {
        /// Whatever is asked, the placement never gives out more CPUs, memory
        /// or GPUs than a server has, and every placed job gets at least its
        /// proportional share or what it asked for.
        #[test]
        fn host_resources_are_never_oversubscribed(
            asks in proptest::collection::vec((1u32..=8, 0usize..4), 1..12),
            rounds in 1usize..4,
        ) {
            let levels = [None, share(1.0, 20.83), share(6.0, 125.0), share(12.0, 250.0)];
            let mut cluster = servers(2);
            let mut state = JobState::new();
            for (i, (g, _)) in asks.iter().enumerate() {
                add(&mut state, &mut cluster, job(i as u64, i as f64, *g), &[]);
            }
            for r in 0..rounds {
                // Rotate priorities each round.
                let mut entries: Vec<Demand> = asks
                    .iter()
                    .enumerate()
                    .map(|(i, (g, l))| demand(i as u64, *g, levels[*l]))
                    .collect();
                entries.rotate_left(r % asks.len());
                let s = Schedule { entries, ..Default::default() };
                let p = SynergyPlacement::default().place(&info(r as f64), &s, &state, &cluster);
                for a in &p.launch {
                    let asked = s.entries.iter().find(|d| d.job == a.job).unwrap().host;
                    prop_assert!(a.host.is_none() || a.host == asked, "{a:?} asked {asked:?}");
                }
                apply(&p, &mut state, &mut cluster);
                for n in cluster.nodes() {
                    let (c, m) = cluster.host_used(n.id);
                    prop_assert!(c <= 24.0 + 1e-6 && m <= 500.0 + 1e-6, "{c} CPUs {m} GB");
                }
            }
        }
    }
}
