//! Each holder's GPUs in the order it was given them: with the GPU table's
//! holder per GPU, the cluster's record of who holds what. Both change
//! together, in `ClusterState::assign_with_host` and `release` only; a
//! running job's `Job::allocation` is the loop's copy of its list, and the
//! invariant check compares the two.
//!
//! The order matters: it is the order of a job's ranks (replicas per node
//! in the simulator, `CUDA_VISIBLE_DEVICES` and ranks on a real cluster).

use crate::ids::{GpuId, JobId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;

/// A job's GPUs: up to four kept in place (most jobs), more on the heap.
type List = SmallVec<[GpuId; 4]>;

/// Holder → its GPUs, in the order it took them. Read by key only: the
/// map's order never reaches a caller (every listing is sorted by job).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Held {
    by_job: FxHashMap<JobId, List>,
    /// GPUs held in all (the sum of the lists' lengths).
    gpus: usize,
}

impl Held {
    /// `job`'s GPUs in order; empty if it holds none.
    pub fn of(&self, job: JobId) -> &[GpuId] {
        self.by_job.get(&job).map_or(&[], |l| l.as_slice())
    }

    /// `job` took `gpu` (after the ones it holds).
    pub fn push(&mut self, job: JobId, gpu: GpuId) {
        self.by_job.entry(job).or_default().push(gpu);
        self.gpus += 1;
    }

    /// `job` gave `n` of its GPUs back; `still(g)`: whether it still
    /// holds `g` (the table's word). Giving all back, the common case (a
    /// job ends or stops), drops the list unread.
    pub fn gave_back(&mut self, job: JobId, n: usize, still: impl Fn(GpuId) -> bool) {
        let Some(list) = self.by_job.get_mut(&job) else {
            return;
        };
        let before = list.len();
        if n < before {
            list.retain(|g| still(*g));
        } else {
            list.clear();
        }
        self.gpus -= before - list.len();
        if list.is_empty() {
            self.by_job.remove(&job);
        }
    }

    /// Holders and their GPUs, by job.
    pub fn sorted(&self) -> Vec<(JobId, &[GpuId])> {
        let mut out: Vec<(JobId, &[GpuId])> = self
            .by_job
            .iter()
            .map(|(j, g)| (*j, g.as_slice()))
            .collect();
        out.sort_unstable_by_key(|x| x.0);
        out
    }

    /// How many jobs hold GPUs.
    pub fn holders(&self) -> usize {
        self.by_job.len()
    }

    /// How many GPUs are held.
    pub fn gpus(&self) -> usize {
        self.gpus
    }

    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }

    /// Whether these lists are exactly what `gpus` (the table) gives each
    /// job; `Err` names the first difference (a cluster read back).
    pub fn matches_table(&self, gpus: &[super::Gpu]) -> Result<(), String> {
        for (j, list) in self.sorted() {
            for g in list {
                let holder = gpus.get(g.index()).map(|x| x.job);
                if holder != Some(Some(j)) {
                    let table = match holder {
                        None => "has no such GPU".to_string(),
                        Some(None) => format!("gives {g} to no job"),
                        Some(Some(k)) => format!("gives {g} to {k}"),
                    };
                    return Err(format!(
                        "`held` lists {g} for {j}, but the GPU table {table}"
                    ));
                }
            }
        }
        let in_table = gpus.iter().filter(|g| g.job.is_some()).count();
        if in_table != self.gpus {
            return Err(format!(
                "`held` lists {} held GPUs, but the GPU table has {in_table}",
                self.gpus
            ));
        }
        Ok(())
    }

    /// Rebuilt from a table that has only the holder of each GPU (a
    /// cluster written before the lists were): each job's GPUs in GPU order.
    pub fn of_table(gpus: &[super::Gpu]) -> Self {
        let mut held = Held::default();
        for g in gpus {
            if let Some(j) = g.job {
                held.push(j, g.id);
            }
        }
        held
    }
}

/// Written as `[[job, [gpu, …]], …]` by job.
impl Serialize for Held {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted())
    }
}

impl<'de> Deserialize<'de> for Held {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(JobId, Vec<GpuId>)> = Vec::deserialize(d)?;
        let mut held = Held::default();
        for (j, gpus) in pairs {
            for g in gpus {
                held.push(j, g);
            }
        }
        Ok(held)
    }
}
