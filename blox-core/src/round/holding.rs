//! Launching and stopping: a job's GPUs (or, for a job without GPUs, its
//! node's CPUs) are written in the cluster's record first, and its
//! `allocation` (`host_node`) copied from it; every stop gives them back
//! through [`RoundLoop::unhold`].

use super::events::{GpuPlace, What};
use super::startup::Stopped;
use super::{backend, LoopError, RoundLoop};
use crate::cluster::ClusterState;
use crate::ids::{GpuId, JobId};
use crate::job::{Job, JobStatus};
use crate::module::{Backend, RoundInfo};
use tracing::debug;

impl RoundLoop {
    /// Launches `a` (a validated job that is not running) on its GPUs.
    pub(super) fn start<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        b: &mut B,
        a: crate::module::Assignment,
    ) -> Result<(), LoopError> {
        match (a.share, a.gpus.as_slice(), a.node) {
            (None, [], Some(node)) => {
                let (c, m) = self
                    .jobs
                    .get(a.job)
                    .map_or((0.0, 0.0), |j| j.spec.host_in_all());
                self.cluster.assign_host(a.job, node, c, m)?;
            }
            (Some(milli), &[gpu], _) => {
                let host = a
                    .host
                    .unwrap_or_else(|| self.cluster.share_host(gpu, milli));
                self.cluster.assign_share(a.job, gpu, milli, host)?;
            }
            _ => self.cluster.assign_with_host(a.job, &a.gpus, a.host)?,
        }
        self.choose_checkpoint(a.job, a.gpus.len());
        let j = self.jobs.get_mut(a.job).expect("validated");
        j.host_share = a.host;
        j.gpu_share = a.share;
        j.host_node = a.node;
        let job = self.jobs.get(a.job).expect("validated");
        b.launch(info, job, &a.gpus, a.batch_size)
            .map_err(backend("launch"))?;
        let job = self.jobs.get_mut(a.job).expect("validated");
        job.status = JobStatus::Running;
        job.first_iteration_s = None;
        job.checkpoint_s = None;
        job.first_start_s.get_or_insert(info.now_s);
        job.last_launch_s = Some(info.now_s);
        job.launches += 1;
        job.max_gpus_so_far = job.max_gpus_so_far.max(a.gpus.len() as u32);
        if a.batch_size.is_some() {
            job.current_batch_size = a.batch_size;
        }
        debug!(job = %a.job, gpus = ?a.gpus, node = ?a.node, "launch");
        if self.events.on() {
            let what = What::Launched {
                gpus: GpuPlace::of(&self.cluster, &a.gpus),
                batch_size: a.batch_size,
                share: a.share,
                node: a.node.map(|n| n.0),
            };
            self.events.job(job, what);
        }
        // (It held nothing before: the cluster's list is what it was given.)
        debug_assert_eq!(self.cluster.allocation_of(a.job), &a.gpus[..]);
        job.allocation = copy_of_holding(&self.cluster, a.job, a.gpus);
        Ok(())
    }

    /// Takes `id`'s GPUs back: the cluster's record, then the job's copy
    /// of it (with its host share).
    pub(super) fn unhold(&mut self, id: JobId) {
        self.cluster.release_job(id);
        if let Some(job) = self.jobs.get_mut(id) {
            job.allocation.clear();
            job.host_share = None;
            job.gpu_share = None;
            job.host_node = None;
        }
    }

    /// Stops `ids` (validated running jobs) through the backend, all at
    /// once, and sends them back to the queue.
    pub(super) fn suspend_all<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        ids: &[JobId],
        b: &mut B,
    ) -> Result<(), LoopError> {
        if ids.is_empty() {
            return Ok(());
        }
        let jobs: Vec<&Job> = ids
            .iter()
            .map(|id| self.jobs.get(*id).expect("validated"))
            .collect();
        for job in &jobs {
            debug!(job = %job.id(), attained_gpu_s = job.attained_service_gpu_s, "preempt");
        }
        let lost: Vec<f64> = jobs
            .iter()
            .map(|j| j.uncheckpointed_s(info.now_s) * j.allocation.len() as f64)
            .collect();
        b.preempt_all(info, &jobs).map_err(backend("preemption"))?;
        for (&id, lost) in ids.iter().zip(lost) {
            let round_after_launch = self
                .jobs
                .get(id)
                .and_then(|j| j.last_launch_s)
                .is_some_and(|l| info.now_s - l <= 1.5 * info.round_s);
            self.note_stopped(id, Stopped::Preempted { round_after_launch });
            let job = self.jobs.get_mut(id).expect("validated");
            job.lost_work_gpu_s += lost;
            job.status = JobStatus::Queued;
            self.unhold(id);
        }
        Ok(())
    }
}

/// A job's copy of the GPUs it holds, read from the cluster's record (the
/// record is written first; a job's copy only ever from it), in `buf`'s
/// buffer.
pub(super) fn copy_of_holding(
    cluster: &ClusterState,
    id: JobId,
    mut buf: Vec<GpuId>,
) -> Vec<GpuId> {
    buf.clear();
    buf.extend_from_slice(cluster.allocation_of(id));
    buf
}
