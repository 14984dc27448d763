//! From configurations to GPUs the way the Sia artifact's *simulator* does
//! it (`[placement] policy = "sia-artifact"`; `sia.py`'s
//! `alloc_to_placement_fast`, which its simulator runs, and `cluster.py` /
//! `job.py`'s rule for when a job restarts).
//!
//! Every round, per GPU type, the chosen jobs are laid out afresh on empty
//! nodes:
//! 1. jobs in the order the program listed them (jobs of fixed size first,
//!    then adaptive ones, each by arrival), sorted by GPU count, largest
//!    first (a stable sort);
//! 2. a pointer walks the nodes round-robin and carries over from one job to
//!    the next; a job first takes as many whole free nodes as it has whole
//!    nodes' worth of GPUs, checking each node once;
//! 3. the rest it takes from the next nodes with any free GPUs, as many as
//!    each has, even across nodes.
//!
//! A job's *shape* is its GPUs per node in the order it took them (a
//! 4-GPU job that took two of node 5 and two of node 0 has shape (2, 2)); a
//! shape over more nodes than the type's `max_nodes` is spread evenly over
//! that many (`cluster.py`'s fix for large clusters). The artifact restarts
//! a job only when it moves to another type or its shape changes; a job
//! whose shape is unchanged goes on running though its node numbers may
//! have changed (its simulator does not model which node is which).
//!
//! On a real cluster a job cannot change GPUs without a restart, so the
//! layout is carried out up to renaming the nodes of a type: a job the
//! artifact would not restart keeps its GPUs; the others get their shape,
//! each run of GPUs on a distinct node with room (the node the artifact
//! chose if it has room, else the one with the least room that fits).
//! Where the kept jobs' GPUs leave no such nodes, the job takes its GPUs
//! from the nodes with the most free GPUs instead and is counted as
//! reshaped (logged, in the decision); a job that finds no GPUs at all
//! (possible only when GPUs went offline since the program was built) is
//! left out.

use super::placement::{Placed, Want};
use blox_core::{ClusterState, GpuId, JobId, NodeId};
use std::collections::{BTreeMap, HashMap};

/// The artifact's record of each placed job: its GPU type (index) and shape.
pub type Shapes = BTreeMap<JobId, (usize, Vec<u32>)>;

/// `alloc_to_placement_fast` on GPU counts: `free` is each node's free GPUs
/// (all of them: the layout starts empty), `wants` in the program's order.
/// Returns, per job in `wants`' order, the node indices it took, one entry
/// per GPU, in the order taken. A job for which the nodes have too few GPUs
/// left gets an empty list (the program never asks for that).
pub fn lay_out(free: &mut [u32], wants: &[(JobId, u32)]) -> Vec<Vec<usize>> {
    let n = free.len();
    let mut out = vec![Vec::new(); wants.len()];
    if n == 0 {
        return out;
    }
    let per_node = free.iter().copied().max().unwrap_or(0);
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(wants[i].1));
    let mut cursor = 0usize;
    for i in order {
        let mut need = wants[i].1;
        if need == 0 || need > free.iter().sum::<u32>() || per_node == 0 {
            continue;
        }
        let taken = &mut out[i];
        let mut node = cursor;
        let mut whole = need / per_node;
        let mut checked = 0;
        while checked < n && whole > 0 {
            if free[node] == per_node {
                free[node] = 0;
                need -= per_node;
                taken.extend(std::iter::repeat_n(node, per_node as usize));
                whole -= 1;
            }
            node = (node + 1) % n;
            checked += 1;
        }
        while need > 0 {
            let take = need.min(free[node]);
            if take > 0 {
                free[node] -= take;
                need -= take;
                taken.extend(std::iter::repeat_n(node, take as usize));
            }
            node = (node + 1) % n;
        }
        cursor = node;
    }
    out
}

/// A job's shape: its GPUs per node, runs of the same node in the order
/// taken; spread evenly over `max_nodes` where it spans more.
pub fn shape_of(nodes: &[usize], max_nodes: Option<u32>) -> Vec<u32> {
    let mut shape: Vec<u32> = Vec::new();
    for (k, x) in nodes.iter().enumerate() {
        if k > 0 && nodes[k - 1] == *x {
            *shape.last_mut().expect("a run is open") += 1;
        } else {
            shape.push(1);
        }
    }
    if let Some(m) = max_nodes.filter(|&m| m > 0 && shape.len() > m as usize) {
        let mut left: u32 = shape.iter().sum();
        let each = left.div_ceil(m);
        shape.clear();
        while left > 0 {
            let k = each.min(left);
            shape.push(k);
            left -= k;
        }
    }
    shape
}

/// One type's layout: what [`place_type`] did, and each placed job's shape
/// as the artifact records it.
#[derive(Clone, Debug, Default)]
pub struct Laid {
    pub placed: Placed,
    pub shapes: Vec<(JobId, Vec<u32>)>,
    /// Jobs given GPUs on other nodes than their shape asks (see the module
    /// doc).
    pub reshaped: Vec<JobId>,
}

struct Slot {
    free: Vec<GpuId>,
}

/// Lays out `wants` (the program's order) on the nodes `nodes` of type
/// `ty`, in id order. `current` holds each running job's GPUs, `before` the
/// artifact's record of the last round.
pub fn place_type(
    cluster: &ClusterState,
    ty: usize,
    nodes: &[NodeId],
    max_nodes: Option<u32>,
    wants: &[Want],
    current: &HashMap<JobId, Vec<GpuId>>,
    before: &Shapes,
) -> Laid {
    let mut slots: Vec<Slot> = nodes
        .iter()
        .filter_map(|&id| cluster.node(id))
        .map(|n| Slot {
            free: n
                .gpus
                .iter()
                .copied()
                .filter(|g| cluster.gpu(*g).is_some_and(|x| x.online))
                .collect(),
        })
        .collect();
    let slot_of: HashMap<NodeId, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let node_of = |g: &GpuId| cluster.gpu(*g).and_then(|x| slot_of.get(&x.node).copied());
    let mut counts: Vec<u32> = slots.iter().map(|s| s.free.len() as u32).collect();
    let pairs: Vec<(JobId, u32)> = wants.iter().map(|w| (w.job, w.gpus)).collect();
    let taken = lay_out(&mut counts, &pairs);
    let mut laid = Laid::default();
    // Shapes first: the jobs the artifact would not restart keep their GPUs.
    let mut to_place: Vec<(usize, Vec<u32>)> = Vec::new();
    for (i, w) in wants.iter().enumerate() {
        if taken[i].is_empty() {
            laid.placed.left_out.push((w.job, w.gpus));
            continue;
        }
        let shape = shape_of(&taken[i], max_nodes);
        let kept = before.get(&w.job) == Some(&(ty, shape.clone()))
            && current.get(&w.job).is_some_and(|g| {
                g.len() as u32 == w.gpus && g.iter().all(|x| node_of(x).is_some())
            });
        if kept {
            let gpus = current[&w.job].clone();
            for g in &gpus {
                let s = &mut slots[node_of(g).expect("checked")];
                s.free.retain(|x| x != g);
            }
            laid.placed.gpus.insert(w.job, gpus);
            laid.shapes.push((w.job, shape));
        } else {
            to_place.push((i, shape));
        }
    }
    // The others, largest first as laid out, each run on its own node.
    to_place.sort_by_key(|(i, _)| std::cmp::Reverse(wants[*i].gpus));
    for (i, shape) in to_place {
        let w = wants[i];
        // The artifact's node for each run, in the order taken.
        let mut firsts: Vec<usize> = Vec::new();
        for (k, x) in taken[i].iter().enumerate() {
            if k == 0 || taken[i][k - 1] != *x {
                firsts.push(*x);
            }
        }
        let mut runs: Vec<(u32, Option<usize>)> = shape
            .iter()
            .enumerate()
            .map(|(k, c)| (*c, firsts.get(k).copied()))
            .collect();
        runs.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut used: Vec<usize> = Vec::new();
        let mut gpus: Vec<GpuId> = Vec::new();
        let mut fits = true;
        for (c, hint) in runs {
            let c = c as usize;
            let pick = hint
                .filter(|h| !used.contains(h) && slots.get(*h).is_some_and(|s| s.free.len() >= c))
                .or_else(|| {
                    (0..slots.len())
                        .filter(|k| !used.contains(k) && slots[*k].free.len() >= c)
                        .min_by_key(|k| (slots[*k].free.len(), *k))
                });
            let Some(k) = pick else {
                fits = false;
                break;
            };
            used.push(k);
            gpus.extend(slots[k].free.drain(..c));
        }
        if !fits {
            // Give back what this job took; take from the emptiest nodes.
            for g in gpus.drain(..) {
                let k = node_of(&g).expect("taken from a slot");
                slots[k].free.push(g);
                slots[k].free.sort_unstable();
            }
            let total: usize = slots.iter().map(|s| s.free.len()).sum();
            if total < w.gpus as usize {
                laid.placed.left_out.push((w.job, w.gpus));
                continue;
            }
            let mut by_room: Vec<usize> = (0..slots.len()).collect();
            by_room.sort_by_key(|k| (std::cmp::Reverse(slots[*k].free.len()), *k));
            for k in by_room {
                let c = (w.gpus as usize - gpus.len()).min(slots[k].free.len());
                gpus.extend(slots[k].free.drain(..c));
            }
            laid.reshaped.push(w.job);
        }
        laid.placed.gpus.insert(w.job, gpus);
        laid.shapes.push((w.job, shape));
    }
    laid
}

/// The placement policy's registered name.
pub const NAME: &str = "sia-artifact";

/// `[placement] policy = "sia-artifact"`: carries out the GPUs Sia chose,
/// as `explicit` does, and tells Sia to choose them with its artifact
/// simulator's layout (this module). Works with Sia only. No parameters.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiaArtifact {
    #[serde(skip)]
    inner: crate::placement::explicit::Explicit,
}

impl blox_core::PlacementPolicy for SiaArtifact {
    fn fork(&self) -> blox_core::Fork<dyn blox_core::PlacementPolicy> {
        blox_core::Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        round: &blox_core::RoundInfo,
        schedule: &blox_core::Schedule,
        jobs: &blox_core::JobState,
        cluster: &ClusterState,
    ) -> blox_core::Placement {
        self.inner.place(round, schedule, jobs, cluster)
    }

    fn requires_scheduling(&self) -> Option<&'static str> {
        Some("sia")
    }
}

blox_core::register_placement!(
    "sia-artifact",
    "Sia's GPUs laid out as its artifact's simulator does (alloc_to_placement_fast: afresh each round, whole nodes first, the rest anywhere; a job restarts only when its shape changes); with `sia` scheduling only",
    |p| Ok(Box::new(p.parse::<SiaArtifact>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use blox_core::NodeSpec;

    fn cluster(nodes: u32, per_node: u32) -> (ClusterState, Vec<NodeId>) {
        let mut c = ClusterState::new();
        for _ in 0..nodes {
            c.add_node(NodeSpec::with_gpus(per_node));
        }
        let ids = c.nodes().iter().map(|n| n.id).collect();
        (c, ids)
    }

    fn want(job: u64, gpus: u32) -> Want {
        Want {
            job: JobId(job),
            gpus,
        }
    }

    /// The artifact's walk on a worked example (three 4-GPU nodes): the
    /// 8-GPU job takes nodes 0 and 1 whole; the pointer carries on to node
    /// 2 for the 2-GPU job, and the 1-GPU jobs, in the order listed, wrap
    /// past the full nodes back to node 2.
    #[test]
    fn the_walk_takes_whole_nodes_first_and_carries_its_pointer() {
        let mut free = vec![4, 4, 4];
        let got = lay_out(
            &mut free,
            &[(JobId(1), 1), (JobId(2), 8), (JobId(3), 2), (JobId(4), 1)],
        );
        assert_eq!(got[1], vec![0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(got[2], vec![2, 2]);
        assert_eq!(got[0], vec![2]);
        assert_eq!(got[3], vec![2]);
        assert_eq!(free, vec![0, 0, 0]);
    }

    /// A job takes GPUs anywhere, across nodes: two 3-GPU jobs and a 2-GPU
    /// one on two 4-GPU nodes leave the last one a GPU on each (shape
    /// (1, 1)), where Sia's own layout would leave it out.
    #[test]
    fn a_job_is_split_across_nodes_when_no_whole_node_is_free() {
        let mut free = vec![4, 4];
        let got = lay_out(&mut free, &[(JobId(1), 3), (JobId(2), 3), (JobId(3), 2)]);
        assert_eq!(got[0], vec![0, 0, 0]);
        assert_eq!(got[1], vec![1, 1, 1]);
        assert_eq!(got[2], vec![0, 1]);
        assert_eq!(shape_of(&got[2], None), vec![1, 1]);
    }

    #[test]
    fn shapes_are_runs_in_the_order_taken_and_spread_past_max_nodes() {
        assert_eq!(shape_of(&[3, 3, 0, 0, 0], None), vec![2, 3]);
        assert_eq!(shape_of(&[0, 1, 2, 3, 4], Some(2)), vec![3, 2]);
        assert_eq!(shape_of(&[0, 1, 2], Some(3)), vec![1, 1, 1]);
    }

    /// A job whose shape is unchanged keeps its GPUs though the fresh walk
    /// numbered its node differently; a job whose shape changes gets its new
    /// shape, each run on its own node, on GPUs no one else holds.
    #[test]
    fn unchanged_shapes_keep_their_gpus_and_changed_ones_get_their_shape() {
        let (c, ids) = cluster(2, 4);
        let a: Vec<GpuId> = c.nodes()[1].gpus[0..2].to_vec();
        let current = HashMap::from([(JobId(1), a.clone())]);
        // Last round job 1 had shape (2) on type 0.
        let before = Shapes::from([(JobId(1), (0, vec![2]))]);
        let laid = place_type(
            &c,
            0,
            &ids,
            None,
            &[want(1, 2), want(2, 4), want(3, 1)],
            &current,
            &before,
        );
        assert!(laid.placed.left_out.is_empty() && laid.reshaped.is_empty());
        // The walk gives job 2 node 0 whole, job 1 node 1 (2 GPUs): kept.
        assert_eq!(laid.placed.gpus[&JobId(1)], a);
        let node = |g: &GpuId| c.gpu(*g).unwrap().node;
        let two = &laid.placed.gpus[&JobId(2)];
        assert_eq!(two.len(), 4);
        assert!(two.iter().all(|g| node(g) == ids[0]));
        let three = &laid.placed.gpus[&JobId(3)];
        assert_eq!(three.len(), 1);
        assert!(!a.contains(&three[0]) && !two.contains(&three[0]));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
        /// Whatever the counts (within the type's GPUs) and whatever each job
        /// held and the artifact recorded: every job is placed with its count
        /// on distinct online GPUs of the type, and a job not reshaped gets
        /// exactly its shape's GPUs per node.
        #[test]
        fn every_job_gets_its_count_on_distinct_gpus(
            nodes in 1u32..5,
            per_node in proptest::sample::select(vec![4u32, 8]),
            sizes in proptest::collection::vec(1u32..17, 0..10),
            held in proptest::collection::vec(proptest::bool::ANY, 10),
        ) {
            let (c, ids) = cluster(nodes, per_node);
            let mut left = nodes * per_node;
            let mut wants = Vec::new();
            for (i, s) in sizes.iter().enumerate() {
                if *s <= left {
                    left -= s;
                    wants.push(want(i as u64, *s));
                }
            }
            // Last round's layout of the same jobs, in reverse order, as
            // what they hold, where `held` says so.
            let rev: Vec<Want> = wants.iter().rev().copied().collect();
            let first = place_type(&c, 0, &ids, None, &rev, &HashMap::new(), &Shapes::new());
            let current: HashMap<JobId, Vec<GpuId>> = first
                .placed
                .gpus
                .iter()
                .filter(|(j, _)| held[j.0 as usize] && !first.reshaped.contains(j))
                .map(|(j, g)| (*j, g.clone()))
                .collect();
            let before: Shapes = first.shapes.iter().map(|(j, s)| (*j, (0, s.clone()))).collect();
            let laid = place_type(&c, 0, &ids, None, &wants, &current, &before);
            proptest::prop_assert!(laid.placed.left_out.is_empty());
            let mut seen = std::collections::HashSet::new();
            let shapes: HashMap<JobId, Vec<u32>> = laid.shapes.iter().cloned().collect();
            for w in &wants {
                let g = &laid.placed.gpus[&w.job];
                proptest::prop_assert_eq!(g.len() as u32, w.gpus);
                for x in g {
                    proptest::prop_assert!(seen.insert(*x), "GPU {:?} given twice", x);
                }
                if !laid.reshaped.contains(&w.job) {
                    let mut per: BTreeMap<NodeId, u32> = BTreeMap::new();
                    for x in g {
                        *per.entry(c.gpu(*x).unwrap().node).or_default() += 1;
                    }
                    let mut got: Vec<u32> = per.into_values().collect();
                    let mut want_shape = shapes[&w.job].clone();
                    got.sort_unstable();
                    want_shape.sort_unstable();
                    proptest::prop_assert_eq!(got, want_shape);
                }
            }
        }
    }
}
