//! Steps 3 and 4 of a round: finished jobs pruned (their GPUs freed; jobs a
//! backend sent back to the queue give theirs back), then the new
//! submissions taken in, requests that could never run rejected at once.

use super::events::What;
use super::startup::Stopped;
use super::{backend, LoopError, RoundLoop};
use crate::ids::JobId;
use crate::job::{Job, JobStatus};
use crate::module::{Backend, RoundInfo};

impl RoundLoop {
    /// Step 3: prunes the jobs that ended, freeing what they held, and
    /// returns them, in the order of their ended records.
    pub(super) fn prune(&mut self) -> Vec<JobId> {
        // Jobs a backend sent back to the queue while they held GPUs (a crashed
        // process to be retried) are found in the same pass, and give their
        // GPUs back below.
        let (ended, requeued) = self.jobs.prune_finished_and_requeued();
        // The pruned jobs are the newest ended records, in the same order.
        let records = self.jobs.finished();
        // (An ended record keeps its copy of the GPUs it held last.)
        for j in &records[records.len() - ended.len()..] {
            self.cluster.release_job(j.id());
        }
        self.events.ended(&self.jobs, &ended);
        for id in requeued {
            self.note_stopped(id, Stopped::Ended);
            if let Some(j) = self.jobs.get(id) {
                let reason = j.end_reason.clone().unwrap_or_else(|| "crashed".into());
                let what = What::Requeued { reason };
                self.events.job(j, what);
            }
            self.unhold(id);
        }
        ended
    }

    /// Step 4: takes in the backend's new submissions: a request that
    /// could never run is rejected, saying why; the others wait for
    /// admission.
    pub(super) fn take_submissions<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        b: &mut B,
    ) -> Result<(), LoopError> {
        for spec in b
            .poll_submissions(info)
            .map_err(backend("job submission"))?
        {
            let mut job = Job::new(spec);
            if self.events.on() {
                let spec = Box::new(job.spec.clone());
                self.events.job(&job, What::Submitted { spec });
            }
            let want = job.requested_gpus();
            let problem = job.spec.share_problem().or_else(|| match want {
                0 => self.without_gpus_problem(&job),
                w if w > self.cluster.max_gpus() => Some(format!(
                    "asks for {want} GPUs but the cluster has {}",
                    self.cluster.max_gpus()
                )),
                _ => None,
            });
            if let Some(reason) = problem {
                tracing::warn!(job = %job.id(), "rejected: {reason}");
                self.end_unadmitted(&mut job, info.now_s, reason);
                self.jobs.record_ended(job);
            } else {
                self.checkpoint_rules(&mut job);
                for (k, v) in &job.spec.metrics {
                    self.jobs.metrics().set(job.id(), k, *v);
                }
                self.waiting.push(job);
            }
        }
        Ok(())
    }

    /// Why `job`, which asks for no GPU, cannot run here, if so: it names
    /// no CPUs or memory, or the placement places only jobs with GPUs.
    fn without_gpus_problem(&self, job: &Job) -> Option<String> {
        if job.spec.host_need.is_none() {
            return Some(
                "asks for 0 GPUs and names no CPUs or memory (`host_need`): nothing to run on"
                    .to_string(),
            );
        }
        if !self.policies.placement.places_jobs_without_gpus() {
            return Some(format!(
                "asks for 0 GPUs, and placement `{}` places only jobs with GPUs (`fgd` and `share` place jobs without)",
                self.policies.names.placement
            ));
        }
        // As a job asking for more GPUs than the cluster has: no node of
        // the table (offline ones come back) could hold it even empty.
        let (cpus, mem) = job.spec.host_in_all();
        let nodes = self.cluster.nodes();
        if self.cluster.is_elastic()
            || nodes.is_empty()
            || nodes.iter().any(|n| !n.spec.over_host(cpus, mem))
        {
            return None;
        }
        let most = |f: fn(&crate::cluster::Node) -> f64| nodes.iter().map(f).fold(0.0, f64::max);
        Some(format!(
            "asks for 0 GPUs, {cpus} CPUs and {mem} GB of memory on one node, but no node has both (the most CPUs a node has: {}; the most memory: {} GB)",
            most(|n| n.spec.cpus as f64),
            most(|n| n.spec.host_mem_gb)
        ))
    }

    /// Rejects `job` (never admitted) for `reason`, and records it.
    pub(super) fn end_unadmitted(&mut self, job: &mut Job, now_s: f64, reason: String) {
        let what = What::Rejected {
            reason: reason.clone(),
        };
        self.events.job(job, what);
        job.status = JobStatus::Rejected;
        job.finish_s = Some(now_s);
        job.end_reason = Some(reason);
    }
}
