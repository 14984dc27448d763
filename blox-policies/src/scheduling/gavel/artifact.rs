//! Gavel as the Sia artifact runs it (`sia-simulator/gavel.py`, Sia §4.3:
//! "the max-sum-throughput scheduling policy for Gavel", 360 s rounds), so
//! Gavel can be compared with Sia on Sia's setting and checked job by job
//! against the artifact (`docs/REPRODUCTION.md`).
//!
//! Every round, with `X` Gavel's allocation (the program of [`super::Gavel`]
//! with the chosen objective):
//!
//! 1. a new job has been given half a round of time on every type, and so has
//!    the type; `f_jk` = the job's time on type `k` / the type's time;
//! 2. priority `X_jk / f_jk` (0 where `X_jk = 0`);
//! 3. every (job, type) pair, types in cluster order and jobs in arrival
//!    order within each, sorted by priority then `X_jk`, highest first
//!    (stable): a pair is served if the job is not served yet and the type
//!    still has the job's GPUs; zero-priority pairs come last, so GPUs left
//!    over still go to waiting jobs;
//! 4. per type, jobs in decreasing GPU count keep their GPUs if it ran there
//!    last round and none was taken yet; the others take free GPUs node by
//!    node, a pointer moving forward over the nodes;
//! 5. every served job, and its type, gain a round of time.
//!
//! With the max-sum objective, jobs whose throughputs and GPU counts are all
//! equal are interchangeable in the program; the artifact's interior-point
//! solver (ECOS) returns the centre of that face, so here their allocations
//! are averaged (a vertex solution would favour the first of them).

use super::{Objective, MIXED};
use blox_core::*;
use std::collections::{BTreeMap, HashMap};

/// The artifact's round state.
#[derive(Clone, Debug, Default)]
pub struct ArtifactRounds {
    /// Seconds each job has been served on each type (from R/2).
    job_time: HashMap<JobId, BTreeMap<String, f64>>,
    /// Seconds each type has served (Σ of its jobs' times).
    type_time: BTreeMap<String, f64>,
    /// Each job's type and workers last round, as the artifact assigned them.
    last: HashMap<JobId, (String, Vec<GpuId>)>,
    /// … and the GPUs it got here ([`relabel`]).
    physical: HashMap<JobId, (String, Vec<GpuId>)>,
}

/// Averages the allocations of interchangeable jobs (see the module docs).
pub fn centre_ties(
    order: &[&Job],
    jobs: &JobState,
    types: &[String],
    x: &mut HashMap<JobId, BTreeMap<String, f64>>,
) {
    let key = |j: &Job| -> Vec<u64> {
        let mut k = vec![j.requested_gpus() as u64];
        k.extend(
            types
                .iter()
                .map(|t| super::type_speed(jobs, j.id(), t).to_bits()),
        );
        k
    };
    let mut groups: BTreeMap<Vec<u64>, Vec<JobId>> = BTreeMap::new();
    for j in order {
        groups.entry(key(j)).or_default().push(j.id());
    }
    for ids in groups.values().filter(|g| g.len() > 1) {
        let mut mean: BTreeMap<String, f64> = BTreeMap::new();
        for id in ids {
            for (t, v) in x.get(id).into_iter().flatten() {
                *mean.entry(t.clone()).or_default() += v / ids.len() as f64;
            }
        }
        // The artifact rounds its solver's answer to 5 decimals.
        for v in mean.values_mut() {
            *v = (*v * 1e5).round() / 1e5;
        }
        for id in ids {
            x.insert(*id, mean.clone());
        }
    }
}

impl ArtifactRounds {
    #[allow(clippy::too_many_arguments)]
    pub fn schedule(
        &mut self,
        objective: Objective,
        mut x: HashMap<JobId, BTreeMap<String, f64>>,
        round: &RoundInfo,
        order: &[&Job],
        jobs: &JobState,
        cluster: &ClusterState,
        types: &[(String, u32)],
    ) -> Vec<Demand> {
        let half = round.round_s / 2.0;
        let live: std::collections::HashSet<JobId> = order.iter().map(|j| j.id()).collect();
        self.job_time.retain(|id, _| live.contains(id));
        self.last.retain(|id, _| live.contains(id));
        self.physical.retain(|id, _| live.contains(id));
        for j in order {
            if let std::collections::hash_map::Entry::Vacant(e) = self.job_time.entry(j.id()) {
                e.insert(types.iter().map(|(k, _)| (k.clone(), half)).collect());
                for (k, _) in types {
                    *self.type_time.entry(k.clone()).or_default() += half;
                }
            }
        }
        let names: Vec<String> = types.iter().map(|t| t.0.clone()).collect();
        if objective == Objective::MaxSumThroughput {
            centre_ties(order, jobs, &names, &mut x);
        }
        // Pairs in the artifact's order, then sorted (stable) by priority and X.
        let mut pairs: Vec<(f64, f64, usize, usize)> = Vec::new();
        for (k, (t, _)) in types.iter().enumerate() {
            let spent = self.type_time.get(t).copied().unwrap_or(0.0);
            for (i, j) in order.iter().enumerate() {
                let xk = x
                    .get(&j.id())
                    .and_then(|a| a.get(t))
                    .copied()
                    .unwrap_or(0.0);
                let f = if spent > 0.0 {
                    self.job_time[&j.id()].get(t).copied().unwrap_or(0.0) / spent
                } else {
                    0.0
                };
                let priority = if xk <= 0.0 {
                    0.0
                } else if f > 0.0 {
                    xk / f
                } else {
                    xk * 1e9
                };
                pairs.push((priority, xk, k, i));
            }
        }
        for &(p, xk, k, i) in &pairs {
            tracing::trace!(job = %order[i].id(), gpu_type = %types[k].0, x = xk, priority = p, "gavel pair");
        }
        pairs.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
        let mut left: Vec<u32> = types.iter().map(|t| t.1).collect();
        let mut served: Vec<Option<usize>> = vec![None; order.len()];
        // Jobs in the order they were served (the artifact lays them out so).
        let mut serve_order: Vec<usize> = Vec::new();
        for &(_, _, k, i) in &pairs {
            let need = order[i].requested_gpus();
            let allowed = order[i].spec.elasticity.allows_type(&types[k].0);
            if left[k] == 0 || served[i].is_some() || need > left[k] || !allowed {
                continue;
            }
            left[k] -= need;
            served[i] = Some(k);
            serve_order.push(i);
        }
        // Workers per type: nodes in id order, each node's online GPUs.
        let mut out = Vec::new();
        let mut now: HashMap<JobId, (String, Vec<GpuId>)> = HashMap::new();
        for (k, (t, _)) in types.iter().enumerate() {
            let mut servers: Vec<Vec<GpuId>> = cluster
                .nodes()
                .iter()
                .filter(|n| n.online && (n.spec.gpu_type == *t || t == MIXED))
                .map(|n| {
                    n.gpus
                        .iter()
                        .copied()
                        .filter(|g| cluster.gpu(*g).is_some_and(|x| x.online))
                        .collect()
                })
                .collect();
            let mut mine: Vec<usize> = serve_order
                .iter()
                .copied()
                .filter(|&i| served[i] == Some(k))
                .collect();
            mine.sort_by_key(|&i| std::cmp::Reverse(order[i].requested_gpus()));
            let mut sizes: Vec<u32> = mine.iter().map(|&i| order[i].requested_gpus()).collect();
            sizes.dedup();
            let mut assigned: std::collections::HashSet<GpuId> = Default::default();
            let mut ptr = 0usize;
            for size in sizes {
                let group: Vec<usize> = mine
                    .iter()
                    .copied()
                    .filter(|&i| order[i].requested_gpus() == size)
                    .collect();
                for &i in &group {
                    let id = order[i].id();
                    if let Some((lt, gpus)) = self.last.get(&id) {
                        if lt == t
                            && gpus.len() as u32 == size
                            && gpus.iter().all(|g| !assigned.contains(g))
                        {
                            assigned.extend(gpus.iter().copied());
                            now.insert(id, (t.clone(), gpus.clone()));
                        }
                    }
                }
                for &i in &group {
                    let id = order[i].id();
                    if now.contains_key(&id) {
                        continue;
                    }
                    let mut gpus = Vec::new();
                    while (gpus.len() as u32) < size && ptr < servers.len() {
                        if servers[ptr].is_empty() {
                            ptr += 1;
                            continue;
                        }
                        let g = servers[ptr].remove(0);
                        if assigned.insert(g) {
                            gpus.push(g);
                        }
                    }
                    if gpus.len() as u32 == size {
                        now.insert(id, (t.clone(), gpus));
                    } else {
                        tracing::warn!(job = %id, "gavel: no workers left for a served job");
                    }
                }
            }
        }
        let physical = relabel(cluster, &self.last, &self.physical, &now);
        for j in order {
            let Some((t, gpus)) = physical.get(&j.id()) else {
                continue;
            };
            out.push(Demand {
                job: j.id(),
                gpus: gpus.len() as u32,
                batch_size: None,
                gpu_ids: Some(gpus.clone()),
                host: None,
            });
            if let Some(v) = self.job_time.get_mut(&j.id()).and_then(|m| m.get_mut(t)) {
                *v += round.round_s;
            }
            *self.type_time.entry(t.clone()).or_default() += round.round_s;
        }
        self.last = now;
        self.physical = physical;
        out
    }
}

/// The artifact restarts a job only when its type or its per-node shape
/// changes: to it, nodes of a type are interchangeable. Here a job that moves
/// restarts. So the artifact's assignment (`now`, evolving from `last` exactly
/// as the artifact's does) is carried out on renamed nodes: a job the artifact
/// does not restart (same type, same counts per node in order) sends its new
/// nodes to the nodes it runs on here (`physical`), when no other job's
/// renaming contradicts it; the other nodes keep their names where free, or
/// take the nodes left. Every node gets the jobs and counts the artifact gave
/// its counterpart, so throughputs are the artifact's, and jobs the artifact
/// keeps running keep their GPUs.
fn relabel(
    cluster: &ClusterState,
    last: &HashMap<JobId, (String, Vec<GpuId>)>,
    physical: &HashMap<JobId, (String, Vec<GpuId>)>,
    now: &HashMap<JobId, (String, Vec<GpuId>)>,
) -> HashMap<JobId, (String, Vec<GpuId>)> {
    let node_of = |g: &GpuId| cluster.gpu(*g).map(|x| x.node);
    // Run lengths of nodes in allocation order.
    let runs = |gpus: &[GpuId]| -> Vec<(NodeId, usize)> {
        let mut out: Vec<(NodeId, usize)> = Vec::new();
        for g in gpus {
            let Some(n) = node_of(g) else { continue };
            match out.iter_mut().find(|(x, _)| *x == n) {
                Some((_, c)) => *c += 1,
                None => out.push((n, 1)),
            }
        }
        out
    };
    let mut map: HashMap<NodeId, NodeId> = HashMap::new();
    let mut taken: std::collections::HashSet<NodeId> = Default::default();
    let mut ids: Vec<JobId> = now.keys().copied().collect();
    ids.sort();
    for id in &ids {
        let (t, gpus) = &now[id];
        let (Some((lt, old)), Some((_, here))) = (last.get(id), physical.get(id)) else {
            continue;
        };
        let (a, b, h) = (runs(gpus), runs(old), runs(here));
        let same_shape = |x: &[(NodeId, usize)], y: &[(NodeId, usize)]| {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.1 == q.1)
        };
        if lt != t || !same_shape(&a, &b) || !same_shape(&a, &h) {
            continue;
        }
        let consistent = a.iter().zip(&h).all(|((n, _), (m, _))| match map.get(n) {
            Some(x) => x == m,
            None => !taken.contains(m),
        });
        if consistent {
            for ((n, _), (m, _)) in a.iter().zip(&h) {
                if map.insert(*n, *m).is_none() {
                    taken.insert(*m);
                }
            }
        }
    }
    // Complete the renaming within each type: unmapped nodes keep their
    // name if it is free, else take a free one of the same type.
    let mut by_type: Vec<(&str, Vec<NodeId>)> = Vec::new();
    for n in cluster.nodes() {
        match by_type.iter_mut().find(|(t, _)| *t == n.spec.gpu_type) {
            Some((_, v)) => v.push(n.id),
            None => by_type.push((n.spec.gpu_type.as_str(), vec![n.id])),
        }
    }
    for (_, nodes) in &by_type {
        let unmapped: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|n| !map.contains_key(n))
            .collect();
        let mut free: Vec<NodeId> = nodes
            .iter()
            .copied()
            .filter(|n| !taken.contains(n))
            .collect();
        for n in &unmapped {
            if let Some(i) = free.iter().position(|m| m == n) {
                free.remove(i);
                map.insert(*n, *n);
            }
        }
        for n in unmapped {
            if let std::collections::hash_map::Entry::Vacant(e) = map.entry(n) {
                e.insert(free.remove(0));
            }
        }
    }
    // GPUs on each renamed node: a job keeps the GPUs it has there when the
    // count is the same; the others take the node's remaining GPUs in order.
    let mut want: Vec<(NodeId, JobId, usize)> = Vec::new();
    for id in &ids {
        for (n, c) in runs(&now[id].1) {
            want.push((map[&n], *id, c));
        }
    }
    let mut out: HashMap<JobId, (String, Vec<GpuId>)> = ids
        .iter()
        .map(|id| (*id, (now[id].0.clone(), Vec::new())))
        .collect();
    let mut free: HashMap<NodeId, Vec<GpuId>> = HashMap::new();
    let mut rest = Vec::new();
    for &(node, id, c) in &want {
        let Some(nd) = cluster.node(node) else {
            continue;
        };
        let f = free.entry(node).or_insert_with(|| nd.gpus.clone());
        let had: Vec<GpuId> = physical
            .get(&id)
            .map(|(_, g)| {
                g.iter()
                    .copied()
                    .filter(|g| node_of(g) == Some(node))
                    .collect()
            })
            .unwrap_or_default();
        if had.len() == c && had.iter().all(|g| f.contains(g)) {
            f.retain(|g| !had.contains(g));
            out.get_mut(&id).expect("listed").1.extend(had);
        } else {
            rest.push((node, id, c));
        }
    }
    for (node, id, c) in rest {
        let f = free.get_mut(&node).expect("seen above");
        let take: Vec<GpuId> = f.drain(..c.min(f.len())).collect();
        out.get_mut(&id).expect("listed").1.extend(take);
    }
    for (id, (_, gpus)) in out.iter_mut() {
        // The same GPUs as now keep their order (no move for the loop).
        if let Some((_, g)) = physical.get(id) {
            let (mut a, mut b) = (g.clone(), gpus.clone());
            a.sort();
            b.sort();
            if a == b {
                *gpus = g.clone();
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> ClusterState {
        let mut c = ClusterState::new();
        for _ in 0..3 {
            c.add_node(NodeSpec::with_gpus(4));
        }
        c
    }

    fn on(c: &ClusterState, node: usize, gpus: std::ops::Range<usize>) -> Vec<GpuId> {
        c.nodes()[node].gpus[gpus].to_vec()
    }

    /// The artifact moves job 1 from node 0 to node 1 with the same shape (no
    /// restart there); here it keeps its GPUs on node 0, and node 1's other job
    /// goes where node 0's would have been.
    #[test]
    fn a_job_the_artifact_keeps_running_keeps_its_gpus() {
        let c = cluster();
        let t = "default".to_string();
        let last = HashMap::from([(JobId(1), (t.clone(), on(&c, 0, 0..2)))]);
        let physical = last.clone();
        let now = HashMap::from([
            (JobId(1), (t.clone(), on(&c, 1, 0..2))),
            (JobId(2), (t.clone(), on(&c, 0, 0..4))),
        ]);
        let p = relabel(&c, &last, &physical, &now);
        assert_eq!(p[&JobId(1)].1, on(&c, 0, 0..2));
        // Job 2 gets a whole node, not node 0.
        let n2: Vec<NodeId> = p[&JobId(2)]
            .1
            .iter()
            .map(|g| c.gpu(*g).unwrap().node)
            .collect();
        assert!(n2.iter().all(|n| *n == n2[0]) && n2[0] != c.nodes()[0].id);
        assert_eq!(p[&JobId(2)].1.len(), 4);
    }

    /// A job whose shape changes is not renamed back.
    #[test]
    fn a_job_whose_shape_changes_moves() {
        let c = cluster();
        let t = "default".to_string();
        let mut old = on(&c, 0, 0..2);
        old.extend(on(&c, 1, 0..2));
        let last = HashMap::from([(JobId(1), (t.clone(), old.clone()))]);
        let now = HashMap::from([(JobId(1), (t.clone(), on(&c, 2, 0..4)))]);
        let p = relabel(&c, &last, &last, &now);
        let nodes: std::collections::BTreeSet<NodeId> = p[&JobId(1)]
            .1
            .iter()
            .map(|g| c.gpu(*g).unwrap().node)
            .collect();
        assert_eq!(nodes.len(), 1);
    }
}
