//! What becomes of the jobs a node failure stopped: they resume at once on
//! the GPUs they kept plus a hot spare's (`hot-spares`, the default; the
//! pool is `[cluster] spares`), or they wait in the queue like any other
//! job (`requeue`).

use super::{no_keys, Recovery, RecoveryInput, Resume};
use crate::ids::{GpuId, JobId, NodeId};
use crate::job::JobStatus;
use std::collections::BTreeSet;

/// Jobs a failure stopped resume on a spare of the GPU type they lost.
#[derive(Clone, Copy, Debug, Default)]
pub struct HotSpares;

/// Jobs a failure stopped wait in the queue.
#[derive(Clone, Copy, Debug, Default)]
pub struct Requeue;

crate::register_recovery!(
    "hot-spares",
    "a job a failure stopped resumes at once on the GPUs it kept plus a spare's ([cluster] spares)",
    |params, _run| {
        no_keys(params, "hot-spares")?;
        Ok(Box::new(HotSpares))
    }
);

crate::register_recovery!(
    "requeue",
    "a job a failure stopped waits in the queue like any other (no spares)",
    |params, _run| {
        no_keys(params, "requeue")?;
        Ok(Box::new(Requeue))
    }
);

impl Recovery for Requeue {
    fn name(&self) -> &str {
        "requeue"
    }

    fn recover(&self, _: &RecoveryInput<'_>, _: &[(JobId, Vec<GpuId>)]) -> Vec<Resume> {
        Vec::new()
    }
}

impl Recovery for HotSpares {
    fn name(&self) -> &str {
        "hot-spares"
    }

    fn uses_spares(&self) -> bool {
        true
    }

    /// Largest jobs first (a large gang waits longest for GPUs to free),
    /// then by id: each takes the GPUs it kept and enough spare nodes of the
    /// type it lost, in node order. A job the pool cannot cover waits in
    /// the queue like any other.
    fn recover(&self, input: &RecoveryInput<'_>, hit: &[(JobId, Vec<GpuId>)]) -> Vec<Resume> {
        let (jobs, cluster) = (input.jobs, input.cluster);
        let health = cluster.health();
        let mut hit: Vec<&(JobId, Vec<GpuId>)> = hit.iter().collect();
        hit.sort_by_key(|(id, gpus)| (std::cmp::Reverse(gpus.len()), *id));
        // Resumes run in order: a spare an earlier one called in is online
        // by then, and its GPUs that earlier one did not take are free.
        let mut called: BTreeSet<NodeId> = BTreeSet::new();
        let mut taken: BTreeSet<GpuId> = BTreeSet::new();
        let mut out = Vec::new();
        for (id, held) in hit {
            let Some(job) = jobs.get(*id) else {
                continue;
            };
            if job.status != JobStatus::Queued || !job.allocation.is_empty() {
                continue;
            }
            let free = |g: &GpuId| {
                cluster.gpu(*g).is_some_and(|x| {
                    x.job.is_none()
                        && !cluster.is_shared(*g)
                        && (x.online || called.contains(&x.node))
                        && !taken.contains(g)
                })
            };
            let kept: Vec<GpuId> = held.iter().copied().filter(free).collect();
            let missing = held.len() - kept.len();
            let Some(lost_type) = held
                .iter()
                .find(|g| !free(g))
                .and_then(|g| cluster.gpu_type(*g))
            else {
                continue;
            };
            if missing == 0 {
                continue;
            }
            let mut picked = Vec::new();
            let mut have = 0usize;
            for n in health.pool.iter().filter(|n| !called.contains(n)) {
                if have >= missing {
                    break;
                }
                let Some(node) = cluster.node(*n) else {
                    continue;
                };
                if node.spec.gpu_type == lost_type && !health.down.contains(n) {
                    picked.push(*n);
                    have += node.gpus.len();
                }
            }
            if have < missing {
                continue;
            }
            let mut gpus = kept;
            for n in &picked {
                called.insert(*n);
                let want = held.len() - gpus.len();
                let on = cluster.node(*n).map_or(&[][..], |x| &x.gpus[..]);
                gpus.extend(on.iter().copied().take(want));
            }
            taken.extend(gpus.iter().copied());
            out.push(Resume {
                job: *id,
                spares: picked,
                gpus,
            });
        }
        out
    }
}
