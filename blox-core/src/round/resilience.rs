//! Step 1's answers to failures ([`crate::health`]): a repaired node that
//! failed too often is quarantined; a job a failure stopped resumes on a
//! hot spare; a job without a checkpoint interval of its own gets Young and
//! Daly's for its size at each launch. The same code runs in the simulator
//! and on a cluster: it sees failures only as the backend reports them.

use super::events::What;
use super::*;
use crate::ids::NodeId;
use crate::metric::{CHECKPOINT_INTERVAL_S, CHECKPOINT_SAVE_S};

impl RoundLoop {
    /// A node failed: its jobs go back to their last checkpoint; a spare
    /// that failed leaves the pool until its repair.
    pub(super) fn on_node_failed(
        &mut self,
        info: &RoundInfo,
        node: NodeId,
    ) -> Result<(), LoopError> {
        let h = self.cluster.health_mut();
        h.note_failure(node, info.now_s);
        h.pool.remove(&node);
        let hit = self.cluster.remove_node(node)?;
        tracing::debug!(node = %node, jobs = hit.len(), "node failed; its jobs go back to the queue");
        self.events.other(What::NodeFailed { node: node.0 });
        self.requeue_lost(info, node, hit, "failed", true);
        Ok(())
    }

    /// A node is repaired: quarantined if it failed more often than
    /// `[cluster.quarantine]` allows, kept out while on probation, else
    /// back in service.
    pub(super) fn on_node_repaired(&mut self, now_s: f64, node: NodeId) -> Result<(), LoopError> {
        let h = self.cluster.health_mut();
        h.down.remove(&node);
        tracing::debug!(node = %node, "node repaired");
        self.events.other(What::NodeRepaired { node: node.0 });
        let h = self.cluster.health_mut();
        if let Some(until_s) = h.quarantines(node, now_s) {
            h.held.insert(node, until_s);
            h.quarantines += 1;
            tracing::info!(node = %node, until_s, "node quarantined: it fails too often");
            self.events.other(What::NodeQuarantined {
                node: node.0,
                until_s,
            });
            return Ok(());
        }
        if h.held.contains_key(&node) {
            return Ok(());
        }
        self.return_to_service(node)
    }

    /// Quarantined nodes whose probation is over (and that are up) come
    /// back into service.
    pub(super) fn end_probations(&mut self, now_s: f64) -> Result<(), LoopError> {
        let h = self.cluster.health();
        let due: Vec<NodeId> = h
            .held
            .iter()
            .filter(|(n, until)| **until <= now_s + 1e-9 && !h.down.contains(n))
            .map(|(n, _)| *n)
            .collect();
        for n in due {
            self.cluster.health_mut().held.remove(&n);
            tracing::info!(node = %n, "node back from quarantine");
            self.return_to_service(n)?;
        }
        Ok(())
    }

    /// A node back in service refills the spare pool if it is short, else
    /// goes online.
    fn return_to_service(&mut self, node: NodeId) -> Result<(), LoopError> {
        let h = self.cluster.health_mut();
        if h.pool.len() < h.spares_target as usize {
            h.pool.insert(node);
            return Ok(());
        }
        self.cluster.restore_node(node)?;
        Ok(())
    }

    /// A node that joined while the spare pool is short becomes a spare
    /// (unless no other node is online: a cluster's first node runs jobs).
    pub(super) fn maybe_spare(&mut self, node: NodeId) -> Result<(), LoopError> {
        let h = self.cluster.health();
        let own = self.cluster.node(node).map_or(0, |n| n.spec.gpus);
        if h.pool.len() < h.spares_target as usize && self.cluster.num_gpus() > own {
            self.cluster.to_pool(node)?;
            tracing::info!(node = %node, "node kept as a spare");
        }
        Ok(())
    }

    /// Notes the GPUs a job held when a failure stopped it (for the spares).
    pub(super) fn note_failed_out(&mut self, id: JobId, gpus: &[GpuId]) {
        if self.cluster.health().spares_target > 0 {
            self.failed_out.push((id, gpus.to_vec()));
        }
    }

    /// Jobs a failure stopped this round resume at once on the GPUs they
    /// kept plus a spare's of the same type, largest jobs first (a large
    /// gang waits longest for GPUs to free), instead of queueing. A job the
    /// pool cannot cover waits in the queue like any other.
    pub(super) fn call_spares<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        b: &mut B,
    ) -> Result<(), LoopError> {
        let mut hit = std::mem::take(&mut self.failed_out);
        hit.sort_by_key(|(id, gpus)| (std::cmp::Reverse(gpus.len()), *id));
        for (id, held) in hit {
            let Some(job) = self.jobs.get(id) else {
                continue;
            };
            if job.status != JobStatus::Queued || !job.allocation.is_empty() {
                continue;
            }
            let free = |g: &GpuId| {
                self.cluster
                    .gpu(*g)
                    .is_some_and(|g| g.online && g.job.is_none())
            };
            let kept: Vec<GpuId> = held.iter().copied().filter(free).collect();
            let missing = held.len() - kept.len();
            let Some(lost_type) = held
                .iter()
                .find(|g| !free(g))
                .and_then(|g| self.cluster.gpu_type(*g))
                .map(str::to_string)
            else {
                continue;
            };
            if missing == 0 {
                continue;
            }
            let h = self.cluster.health();
            let mut picked = Vec::new();
            let mut have = 0usize;
            for n in &h.pool {
                if have >= missing {
                    break;
                }
                let Some(node) = self.cluster.node(*n) else {
                    continue;
                };
                if node.spec.gpu_type == lost_type && !h.down.contains(n) {
                    picked.push(*n);
                    have += node.gpus.len();
                }
            }
            if have < missing {
                continue;
            }
            let mut gpus = kept;
            for n in &picked {
                self.cluster.health_mut().pool.remove(n);
                self.cluster.restore_node(*n)?;
                self.cluster.health_mut().spare_swaps += 1;
                tracing::debug!(job = %id, node = %n, "spare called in");
                self.events.other(What::SpareCalled { node: n.0 });
                let on: Vec<GpuId> = self.cluster.free_gpus_on(*n).collect();
                let want = held.len() - gpus.len();
                gpus.extend(on.into_iter().take(want));
            }
            let batch_size = self.jobs.get(id).and_then(|j| j.current_batch_size);
            let a = crate::module::Assignment {
                job: id,
                gpus,
                batch_size,
                host: None,
            };
            self.start(info, b, a)?;
        }
        Ok(())
    }

    /// At admission: the run's checkpoint cost for a job that names none,
    /// and its interval (`[run] checkpoint_interval_s`), or Young/Daly's
    /// chosen at each launch.
    pub(super) fn checkpoint_rules(&self, job: &mut Job) {
        let m = &mut job.spec.metrics;
        if let Some(save) = self.startup.checkpoint_save_s {
            m.entry(CHECKPOINT_SAVE_S.to_string()).or_insert(save);
        }
        if let Some(every) = self.startup.checkpoint_interval_s {
            m.entry(CHECKPOINT_INTERVAL_S.to_string()).or_insert(every);
        }
        if self.startup.young_daly_prior_s.is_some() && !m.contains_key(CHECKPOINT_INTERVAL_S) {
            job.auto_checkpoint = true;
        }
    }

    /// Young/Daly's interval for a job launched on `gpus` GPUs: √(2δM) + δ,
    /// δ what a checkpoint costs it, M the per-GPU MTBF estimated so far
    /// over `gpus` (independent GPUs in series).
    pub(super) fn choose_checkpoint(&mut self, id: JobId, gpus: usize) {
        let Some(prior_s) = self.startup.young_daly_prior_s else {
            return;
        };
        let mtbf_s = self.cluster.health().gpu_mtbf_s(prior_s);
        let Some(job) = self.jobs.get_mut(id).filter(|j| j.auto_checkpoint) else {
            return;
        };
        let Some(save) = job
            .spec
            .metrics
            .get(CHECKPOINT_SAVE_S)
            .copied()
            .filter(|v| *v > 0.0)
        else {
            return;
        };
        let mttf_s = mtbf_s / gpus.max(1) as f64;
        let every = (2.0 * save * mttf_s).sqrt() + save;
        job.spec
            .metrics
            .insert(CHECKPOINT_INTERVAL_S.to_string(), every);
        self.jobs.metrics().set(id, CHECKPOINT_INTERVAL_S, every);
    }
}
