//! GPUs that several jobs share: each sharing job holds thousandths of one
//! GPU's compute (and as large a part of its memory), beside the GPU table's
//! single holder slot. A GPU is held whole by one job (the table's `job`),
//! shared by one or more jobs (this ledger), or free; never two of these.
//! A GPU with any share out is not free to whole-GPU placement.
//!
//! With [`super::held`], this is the cluster's record of who holds what:
//! a sharing job's allocation is its one GPU, read from here.

use crate::ids::{GpuId, JobId};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

/// Thousandths in one GPU.
pub const GPU_MILLI: u32 = 1000;

/// One job's part of one GPU: thousandths of its compute and memory, and
/// the CPU cores and host memory (GiB) of the node it got with it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuShare {
    pub job: JobId,
    pub gpu: GpuId,
    /// 1–1000.
    pub milli: u32,
    #[serde(default)]
    pub cpus: f64,
    #[serde(default)]
    pub mem_gb: f64,
}

/// What one job holds: its GPU as a one-element list (its allocation).
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    gpu: [GpuId; 1],
    milli: u32,
    cpus: f64,
    mem_gb: f64,
}

/// The ledger: sharing jobs by job, and each shared GPU's holders and the
/// thousandths they hold. Read by key only; every listing is sorted.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Shares {
    by_job: FxHashMap<JobId, Entry>,
    /// Shared GPU → (thousandths held, holders in the order they came).
    by_gpu: FxHashMap<GpuId, (u32, SmallVec<[JobId; 4]>)>,
}

impl Shares {
    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }

    /// `job`'s share, if it holds one.
    pub fn of(&self, job: JobId) -> Option<GpuShare> {
        self.by_job.get(&job).map(|e| GpuShare {
            job,
            gpu: e.gpu[0],
            milli: e.milli,
            cpus: e.cpus,
            mem_gb: e.mem_gb,
        })
    }

    /// `job`'s GPU as a list (empty if it holds no share).
    pub fn gpus_of(&self, job: JobId) -> &[GpuId] {
        self.by_job.get(&job).map_or(&[], |e| &e.gpu[..])
    }

    /// Thousandths of `gpu` held by sharing jobs (0: none).
    pub fn used(&self, gpu: GpuId) -> u32 {
        self.by_gpu.get(&gpu).map_or(0, |x| x.0)
    }

    /// The jobs sharing `gpu`, in the order they came.
    pub fn holders_of(&self, gpu: GpuId) -> &[JobId] {
        self.by_gpu.get(&gpu).map_or(&[], |x| x.1.as_slice())
    }

    /// Records `s` (the caller checked it fits).
    pub fn push(&mut self, s: GpuShare) {
        self.by_job.insert(
            s.job,
            Entry {
                gpu: [s.gpu],
                milli: s.milli,
                cpus: s.cpus,
                mem_gb: s.mem_gb,
            },
        );
        let e = self.by_gpu.entry(s.gpu).or_default();
        e.0 += s.milli;
        e.1.push(s.job);
    }

    /// Drops `job`'s share; returns it.
    pub fn remove(&mut self, job: JobId) -> Option<GpuShare> {
        let s = self.of(job)?;
        self.by_job.remove(&job);
        if let Some(e) = self.by_gpu.get_mut(&s.gpu) {
            e.0 -= s.milli;
            e.1.retain(|j| *j != job);
            if e.1.is_empty() {
                self.by_gpu.remove(&s.gpu);
            }
        }
        Some(s)
    }

    /// Every share, by job.
    pub fn sorted(&self) -> Vec<GpuShare> {
        let mut out: Vec<GpuShare> = self.by_job.keys().filter_map(|j| self.of(*j)).collect();
        out.sort_unstable_by_key(|s| s.job);
        out
    }

    /// Shared GPUs, ascending.
    pub fn gpus(&self) -> Vec<GpuId> {
        let mut out: Vec<GpuId> = self.by_gpu.keys().copied().collect();
        out.sort_unstable();
        out
    }

    /// The ledger's own consistency: each GPU's total is its holders'
    /// thousandths, within one GPU; each holder is listed under its GPU.
    pub fn check(&self) -> Result<(), String> {
        for (g, (used, jobs)) in &self.by_gpu {
            let sum: u32 = jobs
                .iter()
                .filter_map(|j| self.by_job.get(j).filter(|e| e.gpu[0] == *g))
                .map(|e| e.milli)
                .sum();
            if sum != *used
                || jobs.len() != jobs.iter().filter(|j| self.by_job.contains_key(j)).count()
            {
                return Err(format!(
                    "the share ledger says {used} thousandths of {g} are held; its holders {jobs:?} hold {sum}"
                ));
            }
            if *used > GPU_MILLI {
                return Err(format!("{g} is shared {used} thousandths, over one GPU"));
            }
        }
        let listed: usize = self.by_gpu.values().map(|x| x.1.len()).sum();
        if listed != self.by_job.len() {
            return Err(format!(
                "the share ledger has {} sharing jobs but lists {listed} under their GPUs",
                self.by_job.len()
            ));
        }
        Ok(())
    }
}

impl Shares {
    /// Rebuilt from a list read back, refusing one the GPU table does not
    /// allow (a GPU held whole or offline, a job twice, over one GPU).
    pub fn of_list(list: &[GpuShare], gpus: &[super::Gpu]) -> Result<Self, String> {
        let mut out = Shares::default();
        for s in list {
            match gpus.get(s.gpu.index()) {
                None => {
                    return Err(format!(
                        "`shares` gives {} {}, which does not exist",
                        s.job, s.gpu
                    ))
                }
                Some(g) if !g.online || g.job.is_some() => {
                    return Err(format!(
                        "`shares` gives {} part of {}, which is offline or held whole",
                        s.job, s.gpu
                    ))
                }
                Some(_) => {}
            }
            let host_ok =
                s.cpus >= 0.0 && s.mem_gb >= 0.0 && s.cpus.is_finite() && s.mem_gb.is_finite();
            if s.milli == 0 || s.milli > GPU_MILLI || out.by_job.contains_key(&s.job) || !host_ok {
                return Err(format!(
                    "`shares` gives {} {} thousandths of {} (or lists it twice, or a negative host share)",
                    s.job, s.milli, s.gpu
                ));
            }
            out.push(*s);
        }
        out.check()?;
        Ok(out)
    }
}

/// Written as the list of shares by job.
impl Serialize for Shares {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted())
    }
}

use super::{ClusterError, ClusterState, HostShare};

impl ClusterState {
    /// Gives `job` `milli` thousandths of `gpu` (and as large a part of its
    /// memory), with `host` CPUs and host memory. The job must hold nothing
    /// else; the GPU must be online, held whole by no job, and have the
    /// thousandths free. All-or-nothing: on error nothing changed.
    pub fn assign_share(
        &mut self,
        job: JobId,
        gpu: GpuId,
        milli: u32,
        host: HostShare,
    ) -> Result<(), ClusterError> {
        let g = self
            .gpus
            .get(gpu.index())
            .ok_or(ClusterError::NoSuchGpu { gpu })?;
        if !g.online {
            return Err(ClusterError::Offline { gpu });
        }
        if let Some(holder) = g.job {
            return Err(ClusterError::Busy { gpu, holder, job });
        }
        if !self.allocation_of(job).is_empty() || self.host_hold_of(job).is_some() {
            return Err(ClusterError::Invariant(format!(
                "{job} already holds GPUs; it cannot also take a share of {gpu}"
            )));
        }
        let used = self.shares.used(gpu);
        if milli == 0 || milli > GPU_MILLI - used {
            return Err(ClusterError::ShareTooLarge {
                gpu,
                job,
                milli,
                free: GPU_MILLI - used,
            });
        }
        if !(host.cpus_per_gpu >= 0.0 && host.mem_gb_per_gpu >= 0.0) {
            return Err(ClusterError::InvalidSpec(format!(
                "a negative host share {host:?} for {job}"
            )));
        }
        self.custom_host = true;
        self.shares.push(GpuShare {
            job,
            gpu,
            milli,
            cpus: host.cpus_per_gpu,
            mem_gb: host.mem_gb_per_gpu,
        });
        if used == 0 {
            self.free -= 1;
            let node = self.gpus[gpu.index()].node;
            self.index.set(gpu.index(), node.index(), false);
        }
        self.share_row(gpu);
        self.note_gpu(gpu);
        self.changed.job(job, self.gpus.len());
        Ok(())
    }

    /// Gives `job`'s share back, if it holds one.
    pub(super) fn release_share(&mut self, job: JobId) {
        let Some(s) = self.shares.remove(job) else {
            return;
        };
        let g = &self.gpus[s.gpu.index()];
        if self.shares.used(s.gpu) == 0 && g.online {
            self.free += 1;
            self.index.set(s.gpu.index(), g.node.index(), true);
        }
        self.share_row(s.gpu);
        self.note_gpu(s.gpu);
        self.changed.job(job, self.gpus.len());
    }

    /// Sets a shared GPU's row from the ledger: free memory in proportion
    /// to the free thousandths, the sharers' host CPUs and memory.
    fn share_row(&mut self, gpu: GpuId) {
        let (mut cpus, mut mem) = (0.0, 0.0);
        for j in self.shares.holders_of(gpu) {
            if let Some(s) = self.shares.of(*j) {
                cpus += s.cpus;
                mem += s.mem_gb;
            }
        }
        let used = self.shares.used(gpu);
        let g = &mut self.gpus[gpu.index()];
        let full = self.nodes[g.node.index()].spec.gpu_mem_gb;
        g.free_mem_gb = full * f64::from(GPU_MILLI - used) / f64::from(GPU_MILLI);
        g.host_cpus = cpus;
        g.host_mem_gb = mem;
    }

    /// The host CPUs and memory a share of `milli` thousandths of `gpu`
    /// gets when its placement names none: that part of the GPU's
    /// proportional share of its node.
    pub fn share_host(&self, gpu: GpuId, milli: u32) -> HostShare {
        let p = self
            .node_spec_of(gpu)
            .map(|s| s.proportional_share())
            .unwrap_or(HostShare {
                cpus_per_gpu: 0.0,
                mem_gb_per_gpu: 0.0,
            });
        let f = f64::from(milli) / f64::from(GPU_MILLI);
        HostShare {
            cpus_per_gpu: p.cpus_per_gpu * f,
            mem_gb_per_gpu: p.mem_gb_per_gpu * f,
        }
    }

    /// Thousandths of `gpu` a new share could take: 1000 when free, 0 when
    /// held whole, offline or absent.
    pub fn free_milli(&self, gpu: GpuId) -> u32 {
        match self.gpu(gpu) {
            Some(_) if self.index.free[gpu.index()] => GPU_MILLI,
            Some(g) if g.online && g.job.is_none() => GPU_MILLI - self.shares.used(gpu),
            _ => 0,
        }
    }

    /// `job`'s share of a GPU, if it holds one.
    pub fn share_of(&self, job: JobId) -> Option<GpuShare> {
        self.shares.of(job)
    }

    /// The shares of `gpu`, in the order they were taken.
    pub fn shares_on(&self, gpu: GpuId) -> Vec<GpuShare> {
        (self.shares.holders_of(gpu).iter())
            .filter_map(|j| self.shares.of(*j))
            .collect()
    }

    /// GPUs several jobs may share that hold a share now, ascending.
    pub fn shared_gpus(&self) -> Vec<GpuId> {
        self.shares.gpus()
    }

    /// The largest share a new job could take of one GPU, by GPU type
    /// (thousandths; types whose GPUs are all held whole or offline are
    /// absent). Nodes that give their GPUs whole only
    /// ([`NodeSpec::whole_gpus_only`](super::NodeSpec::whole_gpus_only))
    /// are left out: no share goes there.
    pub fn largest_free_share(&self) -> std::collections::BTreeMap<&str, u32> {
        let mut out = std::collections::BTreeMap::new();
        for g in &self.gpus {
            let spec = &self.nodes[g.node.index()].spec;
            if spec.whole_gpus_only {
                continue;
            }
            let m = self.free_milli(g.id);
            if m > 0 {
                let t = spec.gpu_type.as_str();
                let e = out.entry(t).or_insert(0);
                *e = (*e).max(m);
            }
        }
        out
    }

    /// Whether jobs share `gpu` now (then it is nobody's whole GPU, even
    /// when one of its sharers stops: the others stay).
    pub fn is_shared(&self, gpu: GpuId) -> bool {
        !self.shares.is_empty() && self.shares.used(gpu) > 0
    }

    /// Whether any job holds a share of a GPU.
    pub fn has_shares(&self) -> bool {
        !self.shares.is_empty()
    }

    /// Jobs holding a share, and the ledger's consistency with the table:
    /// every shared GPU online and held whole by no job, and out of the
    /// free index. Returns the sharers.
    pub(super) fn check_shares(&self) -> Result<Vec<GpuShare>, ClusterError> {
        self.shares.check().map_err(ClusterError::Invariant)?;
        for gpu in self.shares.gpus() {
            let g = self.gpu(gpu).ok_or(ClusterError::NoSuchGpu { gpu })?;
            let bad = !g.online || g.job.is_some() || self.index.free[gpu.index()];
            if bad {
                return Err(ClusterError::Invariant(format!(
                    "{gpu} is shared but is offline, held whole or counted free"
                )));
            }
        }
        Ok(self.shares.sorted())
    }
}
