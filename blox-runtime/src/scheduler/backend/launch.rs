//! Preemption and launch over gRPC: a launch is one part per worker; a
//! revoked launch's parts' replies settle the job's clock; a change of batch
//! size alone is applied to the running parts in place.

use super::*;

impl PreemptionMechanism for ClusterBackend {
    fn preempt(&mut self, round: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        self.preempt_all(round, &[job])
    }

    /// Revokes every job of the round at once: the round waits for the
    /// slowest to checkpoint (at most `grace_s`), not for the sum of them.
    fn preempt_all(&mut self, _round: &RoundInfo, jobs: &[&Job]) -> Result<(), BackendError> {
        let mut pending = Vec::new();
        for job in jobs {
            let id = job.id();
            // A job that already exited is folded in next round.
            if let Some(live) = self.running.remove(&id) {
                let calls = self.spawn_revokes(id, &live, false);
                pending.push((id, live, calls));
                self.metrics.preemptions.inc();
            }
        }
        for (id, live, calls) in pending {
            let replies = self.rt.block_on(async { futures_join(calls).await });
            self.forget_expected(id, &live);
            self.settle_revoked(id, live, replies);
        }
        Ok(())
    }
}

impl ClusterBackend {
    /// Accounts a revoked launch from its parts' replies.
    fn settle_revoked(&mut self, id: JobId, mut live: Live, replies: Vec<Option<RevokeReply>>) {
        let now = self.now();
        let mut last = live.clock.accounted_s;
        let mut finished = !replies.is_empty();
        for r in &replies {
            match r {
                Some(r) if r.was_running => {
                    last = last.max(now - r.exited_s_ago);
                    finished &= r.finished;
                }
                _ => {
                    last = last.max(now);
                    finished = false;
                }
            }
        }
        live.clock.advance(last);
        if finished {
            live.clock.finished();
        }
        self.records.entry(id).or_default().fold(&live.clock);
        if finished {
            self.ended.push(Ended::finished(id, last));
        }
    }
}

impl LaunchMechanism for ClusterBackend {
    fn launch(
        &mut self,
        round: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        batch_size: Option<u32>,
    ) -> Result<(), BackendError> {
        let id = job.id();
        if self.ended.iter().any(|e| e.job == id && e.finished) {
            return Ok(()); // finished as it was being moved
        }
        if self.waits_in_doubt(id) || self.waits_settling(id) {
            return Ok(());
        }
        let rec = self.records.entry(id).or_default();
        rec.launches += 1;
        let launch = rec.launches;
        let groups = self.group_by_node(gpus)?;
        if self.refuses_silent(id, &groups) {
            return Ok(());
        }
        // The parts, rank 0's host (for the job's collective library), the
        // job's limits and its uid.
        let LaunchParts {
            parts,
            master,
            limits,
            uid,
        } = self.place_parts(id, launch, groups)?;
        let Some(uid) = self.uid_or_wait(id, launch, &parts, uid) else {
            return Ok(());
        };
        let results = self.send_parts(job, launch, gpus, batch_size, &parts, (master, limits, uid));
        let live = Live {
            launch,
            parts_left: parts.len(),
            parts,
            // Its GPUs are its from the round's start: the wait for their
            // previous jobs to stop and the launch call count as start-up,
            // as a relaunch costs them (the forecast learns it from there).
            clock: LaunchClock::spawned(round.now_s, self.now(), gpus.len() as u32),
        };
        if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
            self.end_failed(id, &live, e);
            return Ok(());
        }
        self.waits
            .add(launch > 1, live.clock.spawned_s - live.clock.launched_s);
        tracing::info!(job = %id, launch, gpus = gpus.len(), "launched");
        self.metrics.launches.inc();
        self.running.insert(id, live);
        Ok(())
    }

    fn reconfigure(
        &mut self,
        _round: &RoundInfo,
        job: &Job,
        batch_size: u32,
    ) -> Result<(), BackendError> {
        let id = job.id();
        let live = self
            .running
            .get(&id)
            .ok_or_else(|| BackendError(format!("{id} is not running")))?;
        for p in &live.parts {
            let mut c = p.client.clone();
            let req = ReconfigureRequest {
                launch: Some(LaunchRef {
                    job_id: id.0,
                    launch: live.launch,
                }),
                batch_size,
            };
            let r = self.rt.block_on(async {
                tokio::time::timeout(RPC_SLACK, c.reconfigure(req))
                    .await
                    .unwrap_or_else(|_| Err(Status::deadline_exceeded("no reply")))
            });
            if let Err(e) = r {
                tracing::warn!(job = %id, worker = %p.worker, "reconfiguration failed: {}", e.message());
            }
        }
        Ok(())
    }
}

/// A launch's parts and what they share, as [`ClusterBackend::place_parts`] found them.
struct LaunchParts {
    parts: Vec<Part>,
    master: String,
    limits: (Option<f64>, Option<u32>),
    uid: Result<Option<u32>, String>,
}

impl ClusterBackend {
    /// Whether the job waits for its previous launch, which a worker may still run.
    fn waits_in_doubt(&mut self, id: JobId) -> bool {
        // Its previous launch may still run on a worker that did not answer
        // the revocation: never two at once. It waits, without blame.
        if let Some(parts) = lock(&self.hub).in_doubt.get(&id.0) {
            let workers: Vec<&str> = parts.iter().map(|(w, _)| w.as_str()).collect();
            let mut e = Ended::crashed(
                id,
                self.now(),
                None,
                Some(format!(
                    "waiting for its previous launch on {} to stop (the worker did not answer)",
                    workers.join(", ")
                )),
            );
            e.blame = false;
            self.ended.push(e);
            return true;
        }
        false
    }

    /// Whether the job waits for a node to take back its last launch's shared checkpoints.
    fn waits_settling(&mut self, id: JobId) -> bool {
        // Its last launch ran on several workers and one of them may still
        // keep its checkpoints the last launch's uid's, about to take them
        // back: given to this launch now, they could be taken from it. It
        // waits (a heartbeat or two), without blame; a worker that is gone
        // is not waited for.
        let settling = {
            let h = lock(&self.hub);
            let node = h.uids.settling(id.0).find_map(|nodes| {
                nodes
                    .iter()
                    .find(|n| h.workers.values().any(|w| w.alive && &w.name == *n))
                    .cloned()
            });
            node
        };
        if let Some(node) = settling {
            let mut e = Ended::crashed(
                id,
                self.now(),
                None,
                Some(format!(
                    "waiting for node {node} to take back its last launch's shared checkpoints"
                )),
            );
            e.blame = false;
            self.ended.push(e);
            return true;
        }
        false
    }

    /// The GPUs' worker indices grouped by node, in order.
    fn group_by_node(&self, gpus: &[GpuId]) -> Result<Vec<(usize, Vec<u32>)>, BackendError> {
        // Group the GPUs by node, in order.
        let mut groups: Vec<(usize, Vec<u32>)> = Vec::new();
        for g in gpus {
            let (node, idx) = *self
                .gpu_map
                .get(g.index())
                .ok_or_else(|| BackendError(format!("{g} is not a GPU of any worker")))?;
            match groups.iter_mut().find(|(n, _)| *n == node) {
                Some((_, v)) => v.push(idx),
                None => groups.push((node, vec![idx])),
            }
        }
        Ok(groups)
    }

    /// Whether the launch is refused because one of its workers is silent.
    fn refuses_silent(&mut self, id: JobId, groups: &[(usize, Vec<u32>)]) -> bool {
        // Nothing goes to a worker that has missed more than two heartbeats
        // (killed, hung or cut off, but not declared gone yet): the job
        // waits without blame, and this try is not one of its runs.
        let silent: Option<(String, f64)> = {
            let h = lock(&self.hub);
            // (At least a second: a loaded machine delays beats of 0.2 s.)
            let limit = (2.0 * self.cfg.heartbeat_s).max(1.0);
            groups.iter().find_map(|(node, _)| {
                let wid = &self.nodes[*node];
                let quiet = h
                    .workers
                    .get(wid)
                    .map_or(f64::INFINITY, |w| w.last_seen.elapsed().as_secs_f64());
                (quiet > limit).then(|| (wid.clone(), quiet))
            })
        };
        if let Some((worker, quiet)) = silent {
            tracing::debug!(job = %id, worker = %worker, "not launched: its worker has been silent for {quiet:.1} s");
            self.records.entry(id).or_default().refused += 1;
            let mut e = Ended::crashed(
                id,
                self.now(),
                None,
                Some(format!(
                    "not launched: worker {worker} has been silent for {quiet:.1} s (more than two heartbeats); the job waits"
                )),
            );
            e.blame = false;
            self.ended.push(e);
            return true;
        }
        false
    }

    /// Each node's part of the launch, which its worker now expects, and what the parts share.
    fn place_parts(
        &self,
        id: JobId,
        launch: u32,
        groups: Vec<(usize, Vec<u32>)>,
    ) -> Result<LaunchParts, BackendError> {
        let mut h = lock(&self.hub);
        let mut parts = Vec::new();
        let mut master = None;
        for (node, idx) in groups {
            let wid = self.nodes[node].clone();
            let w = h
                .workers
                .get(&wid)
                .ok_or_else(|| BackendError(format!("worker {wid} is gone")))?;
            let addr = w.address.split("://").last().unwrap_or("");
            master.get_or_insert_with(|| {
                addr.rsplit_once(':')
                    .map_or(addr, |(host, _)| host)
                    .to_string()
            });
            parts.push(Part {
                worker: wid.clone(),
                client: w.client.clone(),
                gpus: idx,
                lease_epoch: w.lease_epoch,
            });
            h.expected.entry(wid).or_default().insert((id.0, launch));
        }
        let limits = h
            .jobs
            .get(&id.0)
            .and_then(|r| r.job.as_ref())
            .map_or((None, None), |j| (j.memory_gb, j.max_processes));
        let nodes: Vec<String> = parts
            .iter()
            .filter_map(|p| h.workers.get(&p.worker).map(|w| w.name.clone()))
            .collect();
        // Its parts share its checkpoints (each worker keeps them the
        // job's after its part ends, until every part did).
        let shared = parts.len() > 1 && self.cfg.checkpoint_dir.is_some();
        let uid = h.uids.take(id.0, launch, &nodes, shared);
        Ok(LaunchParts {
            parts,
            master: master.unwrap_or_default(),
            limits,
            uid,
        })
    }

    /// The launch's uid (0: none), or `None` when none is free and the job waits.
    fn uid_or_wait(
        &mut self,
        id: JobId,
        launch: u32,
        parts: &[Part],
        uid: Result<Option<u32>, String>,
    ) -> Option<u32> {
        let uid = match uid {
            Ok(u) => u.unwrap_or(0),
            Err(why) => {
                // Every uid may still be in use somewhere: the job waits,
                // without blame.
                tracing::warn!(job = %id, "{why}");
                {
                    let mut h = lock(&self.hub);
                    for p in parts {
                        if let Some(e) = h.expected.get_mut(&p.worker) {
                            e.remove(&(id.0, launch));
                        }
                    }
                }
                self.records.entry(id).or_default().refused += 1;
                let mut e = Ended::crashed(id, self.now(), None, Some(why));
                e.blame = false;
                self.ended.push(e);
                return None;
            }
        };
        Some(uid)
    }

    /// Counts a send and sends every part to its worker at once; returns the replies, in order.
    fn send_parts(
        &mut self,
        job: &Job,
        launch: u32,
        gpus: &[GpuId],
        batch_size: Option<u32>,
        parts: &[Part],
        (master, limits, uid): (String, (Option<f64>, Option<u32>), u32),
    ) -> Vec<Result<(), Status>> {
        let id = job.id();
        let world: u32 = if self.cfg.process_per_gpu {
            gpus.len() as u32
        } else {
            parts.len() as u32
        };
        let (ckpt, coord) = self.shared_dirs(id, launch, parts);
        let resume = {
            let r = self.records.entry(id).or_default();
            r.sent += 1;
            r.sent > 1
        } || self.restored.contains(&id);
        let mut first_rank = 0;
        let mut calls = Vec::new();
        for p in parts {
            let req = LaunchRequest {
                launch: Some(LaunchRef {
                    job_id: id.0,
                    launch,
                }),
                command: job.spec.command.clone(),
                gpus: p.gpus.clone(),
                batch_size: batch_size.or(job.current_batch_size),
                resume,
                checkpoint_dir: ckpt.clone(),
                master_addr: master.clone(),
                process_per_gpu: self.cfg.process_per_gpu,
                first_rank,
                world_size: world,
                coord_dir: coord.clone(),
                generation: self.generation_base + u64::from(launch).min(GENERATIONS_PER_RUN - 1),
                worker_id: p.worker.clone(),
                cluster: self.cluster_key.clone().unwrap_or_default(),
                lease_epoch: p.lease_epoch,
                memory_gb: limits.0,
                max_processes: limits.1,
                job_uid: uid,
                gpu_milli: job.gpu_share,
            };
            first_rank += if self.cfg.process_per_gpu {
                p.gpus.len() as u32
            } else {
                1
            };
            let mut c = p.client.clone();
            let (hub, worker, fresh) = (self.hub.clone(), p.worker.clone(), self.fresh());
            // A worker that stops beating (hung, cut off) is not waited for:
            // once it is silent past its lease it refuses this launch if the
            // request reaches it later (`lease_epoch`), and the failure
            // below leaves the launch in doubt until it shows what it runs.
            calls.push(self.rt.spawn(async move {
                super::while_beating(&hub, &worker, fresh, RPC_SLACK * 2, c.launch(req))
                    .await
                    .map(|_| ())
            }));
        }
        self.rt.block_on(async {
            let mut out = Vec::new();
            for c in calls {
                out.push(
                    c.await
                        .unwrap_or_else(|e| Err(Status::internal(e.to_string()))),
                );
            }
            out
        })
    }

    /// The job's checkpoint directory and the launch's coordination directory (empty: none).
    fn shared_dirs(&self, id: JobId, launch: u32, parts: &[Part]) -> (String, String) {
        // The job's shared directory, under the job table's identity: a new
        // table's job 1 never resumes an old one's checkpoint.
        let shared = self.cfg.checkpoint_dir.as_ref().map(|d| {
            match &self.cluster_key {
                Some(k) => d.join(k),
                None => d.clone(),
            }
            .join(id.0.to_string())
        });
        let ckpt = shared
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        // Ranks on several nodes agree on where to stop through shared
        // storage: beside the job's checkpoints, never inside them (a job
        // could plant a link there for the workers to follow).
        let coord = match (&shared, parts.len() > 1) {
            (Some(d), true) => coord_dir(d, id.0, launch).display().to_string(),
            (None, true) => {
                tracing::warn!(job = %id, "runs on {} workers but [runtime] checkpoint_dir is unset: its ranks cannot agree on where to stop when revoked", parts.len());
                String::new()
            }
            _ => String::new(),
        };
        (ckpt, coord)
    }

    /// Ends a failed launch, blaming the job unless the failure is not its own.
    fn end_failed(&mut self, id: JobId, live: &Live, e: &Status) {
        // Every failed launch counts against the job's retries unless its
        // worker is gone (declared dead soon; its jobs go back without
        // blame): a launch that fails the same way every time must end,
        // whatever the transport made of the worker's reply.
        let workers_alive = {
            let fresh = Duration::from_secs_f64(self.cfg.heartbeat_s * 2.0);
            let h = lock(&self.hub);
            live.parts.iter().all(|p| {
                h.workers
                    .get(&p.worker)
                    .is_some_and(|w| w.alive && w.last_seen.elapsed() < fresh)
            })
        };
        let blame = match e.code() {
            // The job's own: its program, its GPUs, its arguments.
            tonic::Code::FailedPrecondition | tonic::Code::InvalidArgument => true,
            // Not the job's: its worker is fenced, restarted as
            // another worker, still runs an earlier launch or holds the
            // GPUs for another job, or no longer knows this scheduler.
            tonic::Code::Unavailable
            | tonic::Code::Aborted
            | tonic::Code::AlreadyExists
            | tonic::Code::ResourceExhausted
            | tonic::Code::Unauthenticated => false,
            _ => workers_alive,
        };
        // Bounded: the worker's message may carry a huge argv.
        let reason = bounded(e.message(), 300);
        tracing::warn!(job = %id, "launch failed: {reason}");
        self.metrics.launch_failures.inc();
        self.revoke_parts(id, live, true);
        let at_s = self.now();
        let permanent = e.code() == tonic::Code::NotFound;
        let mut e = Ended::crashed(id, at_s, None, Some(reason));
        e.blame = blame || permanent;
        e.permanent = permanent;
        if !e.blame {
            self.records.entry(id).or_default().refused += 1;
        }
        self.ended.push(e);
    }
}

/// The coordination directory of launch `launch` of job `job` whose
/// checkpoints are in `checkpoints`: `<its parent>/.coord/<job>.launch-<n>`,
/// a directory of the workers' beside the jobs' own.
pub fn coord_dir(checkpoints: &std::path::Path, job: u64, launch: u32) -> std::path::PathBuf {
    checkpoints
        .parent()
        .unwrap_or(checkpoints)
        .join(".coord")
        .join(format!("{job}.launch-{launch}"))
}
