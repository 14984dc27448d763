//! The priority walk shared by rigid placements, as Blox's placement does it
//! (Blox, EuroSys'24, §3.1; round semantics in the Blox simulator):
//!
//! 1. running jobs the schedule dropped are preempted; running jobs whose demand
//!    changed are re-placed;
//! 2. scheduled jobs are visited in priority order; a running job keeps its GPUs;
//! 3. a job that is not running gets free GPUs chosen by the policy; if too few
//!    are free, running jobs *below it in the order* are preempted from the bottom
//!    up until it fits (none are preempted if even that would not make room);
//! 4. a job that still cannot be placed stops the walk (no backfilling), unless
//!    `backfill = true`, or unless it asks for more GPUs than are online at
//!    all (nodes away: a lost worker, a failed node): no amount of waiting
//!    for other jobs places it, so it waits for the nodes without holding
//!    the jobs behind it.
//!
//! A placement policy built on it only chooses GPUs:
//!
//! ```
//! use blox_core::*;
//!
//! /// Lowest free GPU ids first.
//! struct LowestIds;
//!
//! impl PlacementPolicy for LowestIds {
//!     fn place(&mut self, _: &RoundInfo, s: &Schedule, jobs: &JobState, c: &ClusterState) -> Placement {
//!         priority_walk(&WalkParams::default(), s, jobs, c, |free, _job, n| {
//!             Some(free.iter().take(n as usize).collect())
//!         })
//!     }
//! }
//! ```
//!
//! Running jobs that the schedule lists at the GPU count they hold keep their
//! GPUs (they appear in the placement only if their batch size changes);
//! running jobs it leaves out are preempted.

use crate::cluster::{ClusterState, FreeIndex};
use crate::ids::{GpuId, JobId, NodeId};
use crate::job::Job;
use crate::job_state::JobState;
use crate::module::{Assignment, Placement, Schedule};
use serde::Deserialize;

/// Free GPUs during the walk: a copy of the cluster's free index (a dense
/// bitmap, per-node counts, and the nodes grouped by how many GPUs they
/// have free, so a best fit costs the GPUs a node can hold, not a scan of
/// every node), changed as the walk takes and frees GPUs.
pub struct FreeGpus<'a> {
    pub cluster: &'a ClusterState,
    index: FreeIndex,
    count: u32,
}

impl<'a> FreeGpus<'a> {
    /// The cluster's free GPUs now: a copy of the index the cluster keeps
    /// as its table changes, not a scan of every GPU or node.
    pub fn new(cluster: &'a ClusterState) -> Self {
        FreeGpus {
            cluster,
            index: cluster.free_index().clone(),
            count: cluster.num_free(),
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn is_free(&self, g: GpuId) -> bool {
        self.index.free[g.index()]
    }

    /// Free GPUs on a node.
    pub fn on_node(&self, node: NodeId) -> u32 {
        self.index.per_node[node.index()]
    }

    /// The most GPUs any node has (the most one node can have free).
    pub fn node_size_max(&self) -> u32 {
        self.index.by_free.len() as u32
    }

    /// The nodes with exactly `c` free GPUs (`c` ≥ 1), in id order.
    pub fn nodes_with_free(&self, c: u32) -> impl Iterator<Item = NodeId> + '_ {
        let words: &[u64] = match c {
            0 => &[],
            c => self
                .index
                .by_free
                .get(c as usize - 1)
                .map_or(&[], |w| w.as_slice()),
        };
        words.iter().enumerate().flat_map(|(w, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    NodeId((w * 64 + b as usize) as u32)
                })
            })
        })
    }

    /// Free GPUs of a node, by local id.
    pub fn gpus_on(&self, node: NodeId) -> impl Iterator<Item = GpuId> + '_ {
        self.cluster.nodes()[node.index()]
            .gpus
            .iter()
            .copied()
            .filter(|g| self.index.free[g.index()])
    }

    /// All free GPUs in global id order.
    pub fn iter(&self) -> impl Iterator<Item = GpuId> + '_ {
        self.index
            .free
            .iter()
            .enumerate()
            .filter(|(_, f)| **f)
            .map(|(i, _)| GpuId(i as u32))
    }

    /// Whether jobs share `g`: a sharer that stops gives nothing back to
    /// whole-GPU placement (the GPU's other sharers stay), so such GPUs
    /// are left out of `take` and `put`.
    fn shared(&self, g: &GpuId) -> bool {
        self.cluster.is_shared(*g)
    }

    fn take(&mut self, gpus: &[GpuId]) {
        for g in gpus {
            if self.shared(g) {
                continue;
            }
            debug_assert!(self.index.free[g.index()]);
            let node = self.cluster.gpus()[g.index()].node.index();
            self.index.set(g.index(), node, false);
            self.count -= 1;
        }
    }

    fn put(&mut self, gpus: &[GpuId]) {
        for g in gpus {
            if !self.index.free[g.index()] && !self.shared(g) {
                let node = self.cluster.gpus()[g.index()].node.index();
                self.index.set(g.index(), node, true);
                self.count += 1;
            }
        }
    }
}

/// Settings shared by the walk-based placements.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WalkParams {
    /// Keep walking past a job that does not fit (Blox: false).
    #[serde(default)]
    pub backfill: bool,
    /// Preempt lower-priority running jobs to make room (Blox: true).
    #[serde(default = "yes")]
    pub preempt: bool,
}

impl Default for WalkParams {
    fn default() -> Self {
        WalkParams {
            backfill: false,
            preempt: true,
        }
    }
}

fn yes() -> bool {
    true
}

/// Runs the walk; `choose(free, job, n)` picks `n` GPUs for `job` out of `free`
/// (it is only called when at least `n` are free) or says it cannot.
pub fn priority_walk(
    params: &WalkParams,
    schedule: &Schedule,
    jobs: &JobState,
    cluster: &ClusterState,
    mut choose: impl FnMut(&FreeGpus, &Job, u32) -> Option<Vec<GpuId>>,
) -> Placement {
    let mut free = FreeGpus::new(cluster);
    let mut out = Placement::default();
    // Each running job's place in the order. An order by id (FIFO's, on
    // most traces) is merged with the running jobs, which come in id order;
    // any other is looked up in a table of places.
    let entries = &schedule.entries;
    let by_id = entries.is_sorted_by_key(|d| d.job);
    let position: rustc_hash::FxHashMap<JobId, usize> = if by_id {
        Default::default()
    } else {
        entries
            .iter()
            .enumerate()
            .map(|(i, d)| (d.job, i))
            .collect()
    };
    let mut next = 0;
    let mut place_of = |id: JobId| -> Option<usize> {
        if !by_id {
            return position.get(&id).copied();
        }
        while next < entries.len() && entries[next].job < id {
            next += 1;
        }
        // The last listing, as the table keeps (a repeat follows at once).
        let mut at = None;
        while next < entries.len() && entries[next].job == id {
            at = Some(next);
            next += 1;
        }
        at
    };

    // Running jobs that keep their GPUs, with their place in the order.
    let mut kept: Vec<(usize, JobId, &[GpuId])> = Vec::new();
    for job in jobs.running() {
        match place_of(job.id()).as_ref() {
            None => {
                out.preempt.push(job.id());
                free.put(&job.allocation);
            }
            Some(&i) => {
                let d = &schedule.entries[i];
                if d.gpus as usize == job.allocation.len() {
                    kept.push((i, job.id(), &job.allocation));
                } else {
                    // Demand changed: release and re-place below (a restart).
                    free.put(&job.allocation);
                }
            }
        }
    }
    if !kept.is_sorted_by_key(|k| k.0) {
        // Laid out by place (places are distinct), not sorted: one pass
        // over the order.
        let mut at_place = vec![None; schedule.entries.len()];
        for k in kept.drain(..) {
            at_place[k.0] = Some(k);
        }
        kept.extend(at_place.into_iter().flatten());
    }

    // By place in the order: does the job there keep its GPUs?
    let mut is_kept = vec![false; schedule.entries.len()];
    for k in &kept {
        is_kept[k.0] = true;
    }
    for (i, d) in schedule.entries.iter().enumerate() {
        if is_kept[i] {
            if let Some(bs) = d.batch_size {
                let at = kept.binary_search_by_key(&i, |k| k.0).expect("kept");
                let alloc = kept[at].2;
                out.launch.push(Assignment {
                    job: d.job,
                    gpus: alloc.to_vec(),
                    batch_size: Some(bs),
                    host: None,
                    share: None,
                    node: None,
                });
            }
            continue;
        }
        if d.gpus == 0 {
            continue;
        }
        // A job not placed: later ones may still start (backfill, or one
        // that could never fit), or the walk stops at it.
        let passed_over = params.backfill || d.gpus > cluster.num_gpus();
        if free.count() < d.gpus && !params.preempt {
            // Too few free GPUs and no one to preempt: not placed, without
            // looking up a job that cannot start.
            if passed_over {
                continue;
            }
            break;
        }
        let Some(job) = jobs.get(d.job) else {
            continue;
        };
        let mut chosen = if free.count() >= d.gpus {
            choose(&free, job, d.gpus)
        } else {
            None
        };
        if chosen.is_none() && params.preempt {
            // Lower-priority running jobs, bottom of the order first: the
            // kept jobs past `i` (`kept` is by place), found by a binary
            // search, not a scan of every kept job for each job that
            // waits.
            debug_assert!(kept.is_sorted_by_key(|k| k.0));
            let below = kept.partition_point(|k| k.0 <= i);
            let victims: Vec<usize> = (below..kept.len()).rev().collect();
            let whole = |gpus: &[GpuId]| gpus.iter().filter(|g| !free.shared(g)).count() as u32;
            let room: u32 = free.count() + victims.iter().map(|&k| whole(kept[k].2)).sum::<u32>();
            if room >= d.gpus {
                let mut taken = Vec::new();
                for k in victims {
                    free.put(kept[k].2);
                    taken.push(k);
                    if free.count() >= d.gpus {
                        chosen = choose(&free, job, d.gpus);
                        if chosen.is_some() {
                            break;
                        }
                    }
                }
                if chosen.is_some() {
                    taken.sort_unstable_by(|a, b| b.cmp(a));
                    for k in taken {
                        let (at, victim, _) = kept.remove(k);
                        is_kept[at] = false;
                        out.preempt.push(victim);
                    }
                } else {
                    for &k in &taken {
                        free.take(kept[k].2);
                    }
                }
            }
        }
        match chosen {
            Some(gpus) => {
                free.take(&gpus);
                out.launch.push(Assignment {
                    job: d.job,
                    gpus,
                    batch_size: d.batch_size,
                    host: None,
                    share: None,
                    node: None,
                });
            }
            None if passed_over => continue,
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, JobStatus};
    use crate::module::Demand;

    fn state(jobs: &[(u64, u32, &[u32])]) -> (JobState, ClusterState) {
        let mut c = ClusterState::homogeneous(1, 4);
        let mut s = JobState::new();
        for &(id, want, held) in jobs {
            let mut j = Job::new(JobSpec::new(id, id as f64, want));
            if !held.is_empty() {
                let gpus: Vec<GpuId> = held.iter().map(|g| GpuId(*g)).collect();
                c.assign(JobId(id), &gpus).unwrap();
                j.allocation = gpus;
                j.status = JobStatus::Running;
            }
            s.insert(j);
        }
        (s, c)
    }

    fn lowest(free: &FreeGpus, _: &Job, n: u32) -> Option<Vec<GpuId>> {
        Some(free.iter().take(n as usize).collect())
    }

    #[test]
    fn a_higher_priority_job_preempts_the_lowest_running_ones() {
        // Jobs 1 and 2 run on two GPUs each; job 3 (4 GPUs) comes first now.
        let (s, c) = state(&[(1, 2, &[0, 1]), (2, 2, &[2, 3]), (3, 4, &[])]);
        let order: Vec<&Job> = [3, 1, 2]
            .iter()
            .map(|i| s.get(JobId(*i)).unwrap())
            .collect();
        let p = priority_walk(
            &WalkParams::default(),
            &Schedule::in_priority_order(order),
            &s,
            &c,
            lowest,
        );
        assert_eq!(
            p.preempt,
            vec![JobId(2), JobId(1)],
            "bottom of the order first"
        );
        assert_eq!(p.launch.len(), 1);
        assert_eq!(p.launch[0].job, JobId(3));
    }

    #[test]
    fn a_job_that_cannot_fit_stops_the_walk_unless_backfilling() {
        let (s, c) = state(&[(1, 3, &[0, 1, 2]), (2, 2, &[]), (3, 1, &[])]);
        let order: Vec<&Job> = [1, 2, 3]
            .iter()
            .map(|i| s.get(JobId(*i)).unwrap())
            .collect();
        let sched = Schedule::in_priority_order(order);
        let p = priority_walk(&WalkParams::default(), &sched, &s, &c, lowest);
        assert!(p.launch.is_empty() && p.preempt.is_empty(), "{p:?}");
        let backfill = WalkParams {
            backfill: true,
            preempt: true,
        };
        let p = priority_walk(&backfill, &sched, &s, &c, lowest);
        assert_eq!(
            p.launch.iter().map(|a| a.job).collect::<Vec<_>>(),
            vec![JobId(3)]
        );
    }

    #[test]
    fn running_jobs_left_out_of_the_schedule_are_preempted() {
        let (s, c) = state(&[(1, 1, &[0]), (2, 1, &[1])]);
        let only2 = Schedule::in_priority_order([s.get(JobId(2)).unwrap()]);
        let p = priority_walk(&WalkParams::default(), &only2, &s, &c, lowest);
        assert_eq!(p.preempt, vec![JobId(1)]);
        assert!(p.launch.is_empty(), "job 2 keeps its GPU: {p:?}");
    }

    proptest::proptest! {
        // An order by id is merged with the running jobs instead of looked
        // up in a table of places: the same placement either way. (A
        // zero-GPU entry for an unknown job, last, makes the order
        // unsorted, so the table is used; the walk passes over it.)
        #[test]
        fn an_order_by_id_is_placed_as_any_other(
            jobs in proptest::collection::vec((1u32..5, proptest::bool::ANY, proptest::bool::ANY), 1..12),
            backfill in proptest::bool::ANY,
            preempt in proptest::bool::ANY,
        ) {
            let mut c = ClusterState::homogeneous(2, 4);
            let mut s = JobState::new();
            let mut listed = Vec::new();
            for (i, &(want, run, list)) in jobs.iter().enumerate() {
                let id = i as u64 + 1;
                let mut j = Job::new(JobSpec::new(id, id as f64, want));
                let free: Vec<GpuId> = c.free_gpus().take(want as usize).collect();
                if run && free.len() == want as usize {
                    c.assign(JobId(id), &free).unwrap();
                    j.allocation = free;
                    j.status = JobStatus::Running;
                }
                s.insert(j);
                if list {
                    listed.push(id);
                }
            }
            let order: Vec<&Job> = listed.iter().map(|i| s.get(JobId(*i)).unwrap()).collect();
            let sorted = Schedule::in_priority_order(order);
            let mut unsorted = sorted.clone();
            unsorted.entries.push(Demand {
                job: JobId(0),
                gpus: 0,
                batch_size: None,
                gpu_ids: None,
                host: None,
            });
            let params = WalkParams { backfill, preempt };
            let a = priority_walk(&params, &sorted, &s, &c, lowest);
            let b = priority_walk(&params, &unsorted, &s, &c, lowest);
            proptest::prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
    }
}
