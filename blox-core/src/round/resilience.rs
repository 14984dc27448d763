//! Step 1's answers to failures ([`crate::health`]): a repaired node that
//! failed too often is quarantined; a job a failure stopped resumes as the
//! `recovery` plugin says (by default on a hot spare); a job without a checkpoint interval of its own gets the
//! `checkpointing` plugin's ([`crate::extension`]). The same code runs in the simulator
//! and on a cluster: it sees failures only as the backend reports them.

use super::events::What;
use super::*;
use crate::extension::RecoveryInput;
use crate::ids::NodeId;
use crate::metric::CHECKPOINT_INTERVAL_S;

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

    /// Notes the GPUs a job held when a failure stopped it (for the
    /// `recovery` plugin).
    pub(super) fn note_failed_out(&mut self, id: JobId, gpus: &[GpuId]) {
        self.failed_out.push((id, gpus.to_vec()));
    }

    /// Jobs a failure stopped this round: the `recovery` plugin resumes
    /// some at once (by default on the GPUs they kept plus a spare's); the
    /// rest wait in the queue like any other. Each resume is checked before
    /// it runs.
    pub(super) fn call_spares<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        b: &mut B,
    ) -> Result<(), LoopError> {
        let hit = std::mem::take(&mut self.failed_out);
        if hit.is_empty() {
            return Ok(());
        }
        let recovery = self.profile.recovery.clone();
        let input = RecoveryInput {
            round: info,
            jobs: &self.jobs,
            cluster: &self.cluster,
        };
        for r in recovery.recover(&input, &hit) {
            if let Err(reason) = self.check_resume(&r) {
                let e = LoopError::InvalidDecision {
                    kind: "recovery",
                    module: recovery.name().to_string(),
                    reason,
                };
                if self.on_invalid == OnInvalidDecision::Fail {
                    return Err(e);
                }
                tracing::error!(round = info.round, "{e}; that job waits in the queue");
                continue;
            }
            for n in &r.spares {
                self.cluster.health_mut().pool.remove(n);
                self.cluster.restore_node(*n)?;
                self.cluster.health_mut().spare_swaps += 1;
                tracing::debug!(job = %r.job, node = %n, "spare called in");
                self.events.other(What::SpareCalled { node: n.0 });
            }
            let batch_size = self.jobs.get(r.job).and_then(|j| j.current_batch_size);
            let a = crate::module::Assignment {
                job: r.job,
                gpus: r.gpus,
                batch_size,
                host: None,
                share: None,
                node: None,
            };
            self.start(info, b, a)?;
        }
        Ok(())
    }

    /// Whether `r` can run now: its job waits in the queue holding
    /// nothing, its spares are idle, up and in the pool, and its GPUs
    /// exist, each once, free now or on those spares.
    fn check_resume(&self, r: &crate::extension::Resume) -> Result<(), String> {
        let waits = self
            .jobs
            .get(r.job)
            .is_some_and(|j| j.status == JobStatus::Queued && j.allocation.is_empty());
        if !waits {
            return Err(format!(
                "resumes {}, which is not a queued job holding no GPUs",
                r.job
            ));
        }
        let h = self.cluster.health();
        for (i, n) in r.spares.iter().enumerate() {
            if !h.pool.contains(n) || h.down.contains(n) || r.spares[..i].contains(n) {
                return Err(format!(
                    "calls in {n} for {}, which is not a spare that is up (or twice)",
                    r.job
                ));
            }
        }
        if r.gpus.is_empty() {
            return Err(format!("resumes {} on no GPU", r.job));
        }
        let mut seen = rustc_hash::FxHashSet::default();
        for g in &r.gpus {
            let Some(gpu) = self.cluster.gpu(*g) else {
                return Err(format!("gives {} {g}, which does not exist", r.job));
            };
            let whole_free = gpu.job.is_none() && !self.cluster.is_shared(*g);
            let usable = if r.spares.contains(&gpu.node) {
                whole_free
            } else {
                gpu.online && whole_free
            };
            if !usable || !seen.insert(*g) {
                return Err(format!(
                    "gives {} {g}, which is neither free nor on a spare it calls in (or given twice)",
                    r.job
                ));
            }
        }
        Ok(())
    }

    /// At submission: the checkpoint cost and interval of a job that
    /// names none, or Young/Daly's chosen at each launch (the
    /// `checkpointing` plugin's).
    pub(super) fn checkpoint_rules(&self, job: &mut Job) {
        self.profile.checkpointing.at_submission(job);
    }

    /// The interval the `checkpointing` plugin chooses for a job launched
    /// on `gpus` GPUs, if it chooses at launch.
    pub(super) fn choose_checkpoint(&mut self, id: JobId, gpus: usize) {
        let Some(job) = self.jobs.get(id).filter(|j| j.auto_checkpoint) else {
            return;
        };
        let health = self.cluster.health();
        let Some(every) = self.profile.checkpointing.at_launch(job, gpus, health) else {
            return;
        };
        let job = self.jobs.get_mut(id).expect("found above");
        job.spec
            .metrics
            .insert(CHECKPOINT_INTERVAL_S.to_string(), every);
        self.jobs.metrics().set(id, CHECKPOINT_INTERVAL_S, every);
    }
}
