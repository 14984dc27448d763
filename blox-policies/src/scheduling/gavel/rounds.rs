//! Gavel's rounds (§5): each round, job–type pairs are served by priority
//! `X_jk / (rounds on k / rounds so far)`; GPUs left over go to the jobs
//! still without any; then each job gets concrete GPUs (a job staying on its
//! type keeps its own, others are packed on the nodes with the most free).

use super::{speed, Gavel, MIXED};
use blox_core::*;
use std::collections::BTreeMap;

/// A job–type pair's priority: (priority, the job's index in the order, type).
pub(super) type Pair = (f64, usize, String);

impl Gavel {
    /// The Sia artifact's rounds (`rounds = "sia-artifact"`): its own
    /// mechanism over the types in the order the cluster lists them.
    pub(super) fn artifact_round(
        &mut self,
        round: &RoundInfo,
        order: &[&Job],
        jobs: &JobState,
        cluster: &ClusterState,
        types: &BTreeMap<String, u32>,
    ) -> Schedule {
        // Types in the order the cluster lists them, as the artifact does.
        let mut in_order: Vec<(String, u32)> = Vec::new();
        for n in cluster.nodes().iter().filter(|n| n.online) {
            if !in_order.iter().any(|t| t.0 == n.spec.gpu_type) {
                in_order.push((n.spec.gpu_type.clone(), types[&n.spec.gpu_type]));
            }
        }
        self.refresh(order, jobs, &in_order);
        let entries = self.artifact.schedule(
            self.params.objective,
            self.alloc.clone(),
            round,
            order,
            jobs,
            cluster,
            &in_order,
        );
        Schedule {
            entries,
            ..Schedule::default()
        }
    }

    /// Each job's pairs with the types its allocation gives time on, by
    /// priority `X_jk / (share of rounds received on k)` (a pair never
    /// served: infinite), highest first, ties to earlier jobs. Counts this
    /// round for every job in `order`.
    pub(super) fn priorities(&mut self, order: &[&Job]) -> Vec<Pair> {
        let mut pairs: Vec<Pair> = Vec::new();
        for (i, job) in order.iter().enumerate() {
            let (total, on) = self.rounds.entry(job.id()).or_default();
            *total += 1;
            let Some(x) = self.alloc.get(&job.id()) else {
                continue;
            };
            for (k, &xk) in x {
                if xk <= 1e-9 {
                    continue;
                }
                let got = on.get(k).copied().unwrap_or(0) as f64 / *total as f64;
                let p = if got == 0.0 { f64::INFINITY } else { xk / got };
                pairs.push((p, i, k.clone()));
            }
        }
        pairs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        pairs
    }

    /// Work-conserving: GPUs left over go to jobs still without any (in
    /// arrival order), each on its fastest type with room.
    pub(super) fn fill_idle(
        &self,
        order: &[&Job],
        jobs: &JobState,
        free: &mut BTreeMap<String, u32>,
        chosen: &mut [Option<String>],
    ) {
        for (i, job) in order.iter().enumerate() {
            if chosen[i].is_some() {
                continue;
            }
            let need = job.requested_gpus();
            let mut fits: Vec<(&String, f64)> = free
                .iter()
                .filter(|(_, f)| **f >= need)
                .map(|(k, _)| (k, speed(self.params.heterogeneity_aware, jobs, job.id(), k)))
                .collect();
            fits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
            if let Some(k) = fits.first().map(|f| f.0.clone()) {
                *free.get_mut(&k).expect("listed above") -= need;
                chosen[i] = Some(k);
            }
        }
    }

    /// The round each job that runs (`entries`) got on its type.
    pub(super) fn count_rounds(
        &mut self,
        order: &[&Job],
        chosen: &[Option<String>],
        entries: &[(usize, Vec<GpuId>)],
    ) {
        for (i, _) in entries {
            if let Some(k) = &chosen[*i] {
                let on = &mut self.rounds.get_mut(&order[*i].id()).expect("tracked").1;
                *on.entry(k.clone()).or_default() += 1;
            }
        }
    }
}

/// Serves `pairs` in order: a job gets its GPUs of the pair's type if that
/// type still has them free (the pseudo-type [`MIXED`]: any free GPUs, from
/// the types with the most free first). The type chosen per job.
pub(super) fn by_priority(
    order: &[&Job],
    pairs: Vec<Pair>,
    free: &mut BTreeMap<String, u32>,
) -> Vec<Option<String>> {
    let mut chosen: Vec<Option<String>> = vec![None; order.len()];
    for (_, i, k) in pairs {
        let need = order[i].requested_gpus();
        if chosen[i].is_some() {
            continue;
        }
        if k == MIXED {
            if free.values().sum::<u32>() >= need {
                // Take from the types with the most free GPUs first.
                let mut left = need;
                while left > 0 {
                    let f = free.values_mut().max().expect("some free GPUs");
                    let take = (*f).min(left);
                    *f -= take;
                    left -= take;
                }
                chosen[i] = Some(k);
            }
        } else if let Some(f) = free.get_mut(&k) {
            if *f >= need {
                *f -= need;
                chosen[i] = Some(k);
            }
        }
    }
    chosen
}

/// Concrete GPUs for the jobs with a type: stayers keep theirs, movers
/// pack by most-free node. (Index in `order`, GPUs), by index.
pub(super) fn concrete_gpus(
    order: &[&Job],
    chosen: &[Option<String>],
    cluster: &ClusterState,
) -> Vec<(usize, Vec<GpuId>)> {
    let type_of = |g: GpuId| {
        cluster
            .gpu(g)
            .and_then(|x| cluster.node(x.node))
            .map(|n| n.spec.gpu_type.clone())
    };
    let mut taken: std::collections::HashSet<GpuId> = Default::default();
    let mut entries = Vec::new();
    let mut movers = Vec::new();
    for (i, job) in order.iter().enumerate() {
        let Some(k) = &chosen[i] else { continue };
        let stays = job.is_running()
            && job.allocation.len() as u32 == job.requested_gpus()
            && (k == MIXED
                || job
                    .allocation
                    .iter()
                    .all(|g| type_of(*g).as_ref() == Some(k)));
        if stays {
            taken.extend(job.allocation.iter().copied());
            entries.push((i, job.allocation.clone()));
        } else {
            movers.push(i);
        }
    }
    for i in movers {
        let job = order[i];
        let k = chosen[i].as_ref().expect("chosen");
        let mut nodes: Vec<(usize, Vec<GpuId>)> = cluster
            .nodes()
            .iter()
            .filter(|n| n.online && (&n.spec.gpu_type == k || k == MIXED))
            .map(|n| {
                let f: Vec<GpuId> = n
                    .gpus
                    .iter()
                    .copied()
                    // Stayers' GPUs are taken; the rest are released or free.
                    .filter(|g| !taken.contains(g) && cluster.gpu(*g).is_some_and(|x| x.online))
                    .collect();
                (f.len(), f)
            })
            .collect();
        nodes.sort_by_key(|n| std::cmp::Reverse(n.0));
        let mut gpus = Vec::new();
        for (_, f) in nodes {
            for g in f {
                if gpus.len() as u32 >= job.requested_gpus() {
                    break;
                }
                gpus.push(g);
            }
        }
        if gpus.len() as u32 == job.requested_gpus() {
            taken.extend(gpus.iter().copied());
            entries.push((i, gpus));
        }
    }
    entries.sort_by_key(|e| e.0);
    entries
}
