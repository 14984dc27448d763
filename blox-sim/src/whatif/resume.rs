//! The jobs active at a replay's start, resumed: each with the checkpointing
//! plugin's settings and its metrics, a running one on the GPUs (or the
//! node's CPUs) it held where the replay's cluster has them free, else
//! queued.

use super::History;
use blox_core::round::events::GpuPlace;
use blox_core::*;

/// What resuming the active jobs reads.
pub(super) struct Resume<'a> {
    pub(super) h: &'a History,
    pub(super) profile: &'a Profile,
    /// Whether the replay's placement places jobs without GPUs.
    pub(super) hosts_jobs: bool,
    /// The replay's placement and config label, for the notes.
    pub(super) placement: &'a str,
    pub(super) label: &'a str,
}

impl Resume<'_> {
    /// The history's active jobs as the replay's loop takes them, their
    /// holds taken in `cluster`; what cannot be carried over is noted.
    pub(super) fn active_jobs(
        &self,
        cluster: &mut ClusterState,
        notes: &mut Vec<String>,
    ) -> JobState {
        let mut jobs = JobState::new();
        for (job, places) in &self.h.active {
            let mut job = job.clone();
            // As the loop's intake does for every job it takes in: the
            // checkpointing plugin's cost and interval for jobs that name
            // none, and the spec's metrics in the store the policies read.
            self.profile.checkpointing.at_submission(&mut job);
            for (k, v) in &job.spec.metrics {
                jobs.metrics().set(job.id(), k, *v);
            }
            if job.without_gpus() && !self.hosts_jobs {
                notes.push(format!(
                    "{} asks for no GPU, and placement `{}` places no such job: it is left out",
                    job.id(),
                    self.placement
                ));
                continue;
            }
            if job.is_running() && !self.take_again(&mut job, places, cluster) {
                notes.push(format!(
                    "{} ran on GPUs (or CPUs) the cluster of `{}` does not have free; it starts queued",
                    job.id(),
                    self.label
                ));
                job.status = JobStatus::Queued;
                job.allocation.clear();
                job.host_node = None;
            }
            jobs.insert(job);
        }
        jobs
    }

    /// A running job takes what it held again (`places`: its GPUs as
    /// (node, index in node); none for a job on a node's CPUs), within its
    /// nodes' CPUs and memory (another cluster may have fewer), or not at
    /// all: false.
    fn take_again(&self, job: &mut Job, places: &[GpuPlace], cluster: &mut ClusterState) -> bool {
        let gpus: Option<Vec<GpuId>> = places
            .iter()
            .map(|p| {
                let node = cluster.nodes().get(p.node as usize)?;
                node.gpus.get(p.gpu as usize).copied()
            })
            .collect();
        match gpus {
            // A job without GPUs takes its CPUs on its node again.
            Some(g) if g.is_empty() => self.host_again(job, places, cluster),
            Some(g) => {
                if !self.gpus_again(job, &g, cluster) {
                    return false;
                }
                job.gpu_share = cluster.share_of(job.id()).map(|s| s.milli);
                job.host_share = job.spec.host_need;
                job.allocation = g;
                true
            }
            None => false,
        }
    }

    /// `job`'s GPUs `g` again: its share of one, or them whole.
    fn gpus_again(&self, job: &Job, g: &[GpuId], cluster: &mut ClusterState) -> bool {
        let nodes: Vec<NodeId> = g.iter().filter_map(|x| cluster.node_of(*x)).collect();
        let ok = match (self.h.shares.get(&job.id()), g) {
            (Some(&m), &[gpu]) => {
                let host = job
                    .spec
                    .host_need
                    .unwrap_or_else(|| cluster.share_host(gpu, m));
                cluster.assign_share(job.id(), gpu, m, host).is_ok()
            }
            // A job with host needs of its own (the openb trace's) had them
            // from the placements that share GPUs, which give them; the log
            // does not say.
            _ => cluster
                .assign_with_host(job.id(), g, job.spec.host_need)
                .is_ok(),
        };
        within_host(job, &nodes, ok, cluster)
    }

    /// A job without GPUs on its node's CPUs and memory again.
    fn host_again(&self, job: &Job, places: &[GpuPlace], cluster: &mut ClusterState) -> bool {
        match (job.host_node, job.spec.host_need) {
            (Some(n), Some(h)) if places.is_empty() => {
                let ok = cluster
                    .assign_host(job.id(), n, h.cpus_per_gpu, h.mem_gb_per_gpu)
                    .is_ok();
                within_host(job, &[n], ok, cluster)
            }
            _ => false,
        }
    }
}

/// Whether `job`'s assignment (`ok`) holds within its `nodes`' CPUs and
/// memory; one over them is released.
fn within_host(job: &Job, nodes: &[NodeId], ok: bool, cluster: &mut ClusterState) -> bool {
    let fits = nodes.iter().all(|n| {
        let (c, m) = cluster.host_free(*n);
        c >= -blox_core::cluster::HOST_EPS && m >= -blox_core::cluster::HOST_EPS
    });
    if ok && !fits {
        cluster.release_job(job.id());
        return false;
    }
    ok
}
