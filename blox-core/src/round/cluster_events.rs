//! Step 1 of a round: nodes joining and leaving, and jobs found running
//! when the scheduler (re)started.

use super::events::{GpuPlace, What};
use super::*;

impl RoundLoop {
    pub(super) fn apply_cluster_event(
        &mut self,
        info: &RoundInfo,
        ev: ClusterEvent,
    ) -> Result<(), LoopError> {
        match ev {
            ClusterEvent::NodeAdded(spec) => {
                let gpus = spec.gpus;
                let logged = self.events.on().then(|| Box::new(spec.clone()));
                let id = self.cluster.add_node(spec);
                tracing::info!(node = %id, "node joined");
                let what = What::NodeJoined {
                    node: id.0,
                    gpus,
                    worker: None,
                    spec: logged,
                };
                self.events.other(what);
                self.maybe_spare(id)?;
            }
            ClusterEvent::NodeRemoved(node) => {
                // Gone for good: no longer down, held or a spare.
                let h = self.cluster.health_mut();
                h.down.remove(&node);
                h.held.remove(&node);
                h.pool.remove(&node);
                let hit = self.cluster.remove_node(node)?;
                tracing::info!(node = %node, jobs = hit.len(), "node left; its jobs go back to the queue");
                self.events.other(What::NodeLeft { node: node.0 });
                self.requeue_lost(info, node, hit, "left", false);
            }
            ClusterEvent::NodeFailed(node) => self.on_node_failed(info, node)?,
            ClusterEvent::NodeRepaired(node) => self.on_node_repaired(info.now_s, node)?,
            ClusterEvent::JobAdopted {
                spec,
                gpus,
                batch_size,
                past_startup,
                share,
            } => {
                let id = spec.id;
                let known = self.jobs.get(id).is_some()
                    || self.waiting.iter().any(|j| j.id() == id)
                    || self.jobs.has_ended(id);
                if known || gpus.is_empty() {
                    return Err(LoopError::Backend {
                        step: "cluster management",
                        source: BackendError(format!(
                            "{id} cannot be adopted: {}",
                            if known {
                                "the loop already knows it"
                            } else {
                                "it holds no GPUs"
                            }
                        )),
                    });
                }
                match (share, gpus.as_slice()) {
                    (Some(m), &[gpu]) => {
                        let host = spec
                            .host_need
                            .unwrap_or_else(|| self.cluster.share_host(gpu, m));
                        self.cluster.assign_share(id, gpu, m, host)?;
                    }
                    _ => self.cluster.assign_with_host(id, &gpus, None)?,
                }
                let mut job = Job::new(spec);
                job.gpu_share = share.filter(|_| gpus.len() == 1);
                for (k, v) in &job.spec.metrics {
                    self.jobs.metrics().set(id, k, *v);
                }
                job.status = JobStatus::Running;
                job.first_start_s = Some(info.now_s);
                job.last_launch_s = Some(info.now_s);
                job.launches = 1;
                job.max_gpus_so_far = gpus.len() as u32;
                if batch_size.is_some() {
                    job.current_batch_size = batch_size;
                }
                if past_startup {
                    job.first_iteration_s = Some(info.now_s);
                }
                job.allocation = super::copy_of_holding(&self.cluster, id, gpus);
                tracing::info!(job = %id, gpus = job.allocation.len(), "adopted a running job");
                let gpus = GpuPlace::of(&self.cluster, &job.allocation);
                self.events.job(&job, What::Adopted { gpus });
                self.jobs.insert(job);
            }
        }
        Ok(())
    }
}

impl RoundLoop {
    /// Step 1 of a round: the backend's cluster events (nodes joining,
    /// leaving, failing, repaired), quarantines ending.
    pub(super) fn manage_cluster<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        b: &mut B,
    ) -> Result<(), LoopError> {
        let up = self.cluster.up_gpus();
        self.cluster.health_mut().count_uptime(info.now_s, up);
        let events = b
            .cluster_events(info)
            .map_err(super::backend("cluster management"))?;
        // A node lost under running jobs: what they reported since the last
        // round (a launch's first iteration, a checkpoint) is read before
        // the loop counts the work each loses.
        if events.iter().any(|e| {
            matches!(
                e,
                ClusterEvent::NodeFailed(_) | ClusterEvent::NodeRemoved(_)
            )
        }) {
            b.collect_metrics(info, &mut self.jobs)
                .map_err(super::backend("metric collection"))?;
        }
        for ev in events {
            self.apply_cluster_event(info, ev)?;
        }
        self.end_probations(info.now_s)
    }

    /// Jobs that lost their GPUs with `node` (it left, or `failed`) go back
    /// to the queue, each losing the work since its last checkpoint (one
    /// that saves when stopped is taken to lose nothing).
    pub(super) fn requeue_lost(
        &mut self,
        info: &RoundInfo,
        node: crate::NodeId,
        hit: Vec<JobId>,
        how: &str,
        failed: bool,
    ) {
        for id in hit {
            // A job that ended before its node went (the collection before
            // this reported it) is pruned as any ended job.
            if self.jobs.get(id).is_some_and(|j| j.status.is_terminal()) {
                continue;
            }
            // What it loses, read before its launch is forgotten (its first
            // iteration is where its checkpoints count from).
            let lost = self.jobs.get(id).map_or(0.0, |job| {
                let unsaved = if failed {
                    job.unsaved_at_failure_s(info.now_s)
                } else {
                    job.uncheckpointed_s(info.now_s)
                };
                unsaved * job.allocation.len() as f64
            });
            if failed {
                if let Some(held) = self.jobs.get(id).map(|j| j.allocation.clone()) {
                    self.note_failed_out(id, &held);
                }
            }
            self.note_stopped(id, Stopped::NodeLost);
            if let Some(job) = self.jobs.get(id) {
                let what = What::Requeued {
                    reason: format!("{node} {how}"),
                };
                self.events.job(job, what);
            }
            if let Some(job) = self.jobs.get_mut(id) {
                job.lost_work_gpu_s += lost;
                if failed {
                    job.interruptions += 1;
                    job.failure_lost_gpu_s += lost;
                }
                job.status = JobStatus::Queued;
                job.restarts += 1;
                job.last_launch_s = Some(info.now_s);
            }
            // (Its node's going took its GPUs from the cluster's record.)
            self.unhold(id);
        }
    }
}
