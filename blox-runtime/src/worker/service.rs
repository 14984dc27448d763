//! The worker's service: what the scheduler asks of it (launch, revoke,
//! status of its launches).

use super::*;

fn reply(e: &crate::process::Exit, finished: bool) -> RevokeReply {
    RevokeReply {
        was_running: true,
        code: e.code,
        finished,
        exited_s_ago: e.at.elapsed().as_secs_f64(),
    }
}

pub(super) struct Service(pub(super) Arc<Shared>);

#[tonic::async_trait]
impl Worker for Service {
    async fn launch(&self, req: Request<LaunchRequest>) -> Result<Response<Ack>, Status> {
        let r = req.into_inner();
        let l = crate::validate::launch(&r)?;
        let sh = &self.0;
        let mut st = sh.lock();
        // A launch names the worker the scheduler chose; one that names
        // none (or another) is refused: the scheduler always names it.
        if r.worker_id.is_empty() || st.worker_id.as_deref() != Some(r.worker_id.as_str()) {
            return Err(Status::aborted(format!(
                "this launch is for worker `{}`; this is {}",
                r.worker_id,
                st.worker_id
                    .as_deref()
                    .map_or("a worker not registered yet".into(), |w| format!("`{w}`"))
            )));
        }
        if st.fenced() {
            return Err(Status::unavailable(
                "this worker's lease ran out (its heartbeats do not reach the scheduler): it runs no job until they do",
            ));
        }
        if r.lease_epoch != 0 && r.lease_epoch != st.lease_epoch {
            return Err(Status::unavailable(format!(
                "lease_epoch: this launch was sent under this worker's lease epoch {}, which ran out since (now {}): the scheduler may have placed the job elsewhere meanwhile",
                r.lease_epoch, st.lease_epoch
            )));
        }
        if let Some(g) = r.gpus.iter().find(|g| **g as usize >= sh.gpus.len()) {
            return Err(Status::invalid_argument(format!(
                "gpus: this worker has {} GPUs; there is no GPU {g}",
                sh.gpus.len()
            )));
        }
        if let Some(old) = st.launches.get(&l.job_id) {
            return Err(Status::already_exists(format!(
                "job {} already runs here (launch {})",
                l.job_id, old.launch
            )));
        }
        for (job, other) in &st.launches {
            if let Some(g) = r.gpus.iter().find(|g| other.gpus.contains(g)) {
                // Not this job's fault: the scheduler's view is behind.
                return Err(Status::resource_exhausted(format!(
                    "GPU {g} is held by job {job}"
                )));
            }
        }
        // Keyed by the job table it belongs to: a new table's job 1 never
        // meets an old one's files.
        let mut dir = sh.cfg.workdir.join("jobs");
        if !r.cluster.is_empty() {
            dir = dir.join(&r.cluster);
        }
        let dir = dir.join(l.job_id.to_string());
        let checkpoint = if r.checkpoint_dir.is_empty() {
            dir.join("checkpoint")
        } else {
            PathBuf::from(&r.checkpoint_dir)
        };
        let control = dir.join(format!("launch-{}", l.launch));
        let coord = (!r.coord_dir.is_empty()).then(|| PathBuf::from(&r.coord_dir));
        // A uid of its own (`--job-uids`), the one the scheduler gave the
        // launch; its checkpoints are handed over as it starts
        // (`Running::spawn`).
        let job_user = match sh.job_uids {
            Some(range) => {
                let held = st
                    .launches
                    .iter()
                    .filter_map(|(j, x)| x.uid.map(|u| (*j, u)));
                Some(super::uids::account_for(range, r.job_uid, l.job_id, held)?)
            }
            None => sh.job_user.clone(),
        };
        let uid = sh.job_uids.and(job_user.as_ref().map(|u| u.uid));
        let spec = LaunchSpec {
            job: l.job_id,
            argv: r.command.clone(),
            devices: r
                .gpus
                .iter()
                .map(|g| sh.gpus[*g as usize].index.to_string())
                .collect(),
            control,
            job_user,
            checkpoint,
            coord,
            resume: r.resume,
            batch_size: r.batch_size,
            master_addr: r.master_addr.clone(),
            worker_addr: sh.address.clone(),
            process_per_gpu: r.process_per_gpu,
            first_rank: r.first_rank,
            world_size: (r.world_size > 0).then_some(r.world_size),
            generation: r.generation,
            lease: st.lease_until.map(|u| (u, st.fence_grace)),
            pass_env: sh.cfg.pass_env.clone(),
            cgroup_procs: Vec::new(),
        };
        // Its cgroups, with the job's limits or this worker's defaults.
        let group = match &sh.containment {
            Some(c) => {
                let limits = super::cgroup::Limits {
                    memory_bytes: r.memory_gb.or(sh.cfg.memory_gb).map(|gb| (gb * 1e9) as u64),
                    max_processes: r
                        .max_processes
                        .or(sh.cfg.max_processes)
                        .or(Some(super::DEFAULT_MAX_PROCESSES)),
                };
                let name = format!("job-{}-launch-{}", l.job_id, l.launch);
                Some(c.create(&name, limits).map_err(|e| {
                    tracing::error!(job = l.job_id, "{e}");
                    Status::unavailable(format!("this node cannot make the launch's cgroup: {e}"))
                })?)
            }
            None => None,
        };
        let mut spec = spec;
        spec.cgroup_procs = group.as_ref().map(|g| g.procs.clone()).unwrap_or_default();
        let ranks = if r.process_per_gpu {
            r.gpus.len() as u32
        } else {
            1
        };
        let mut group = group;
        let spawned = Running::spawn(&spec);
        if spawned.is_err() {
            if let Some(g) = group.take() {
                super::cgroup::reap(g, uid);
            }
            let contained = sh.containment.is_some();
            st.sweep(uid, contained);
        }
        match spawned {
            Ok(run) => {
                tracing::info!(job = l.job_id, launch = l.launch, gpus = ?r.gpus, "launched");
                st.launches.insert(
                    l.job_id,
                    Launch {
                        launch: l.launch,
                        gpus: r.gpus,
                        run,
                        first_rank: r.first_rank,
                        ranks,
                        world_size: if r.world_size > 0 {
                            r.world_size
                        } else {
                            ranks
                        },
                        generation: r.generation,
                        batch_size: r.batch_size,
                        spawned: Instant::now(),
                        startup_s: None,
                        uid,
                        group,
                    },
                );
                Ok(Response::new(Ack {}))
            }
            // The lease ran out while the launch started (this worker was
            // stopped meanwhile): no process of it ran past `exec`, and it
            // is not the job's fault.
            Err(e) if st.fenced() => {
                tracing::warn!(job = l.job_id, "{e}: the lease ran out while it started");
                Err(Status::unavailable(format!(
                    "this worker's lease ran out while it started the launch (it was stopped or starved meanwhile): {e}"
                )))
            }
            // The node's: its directories cannot be made safely. Not held
            // against the job (the scheduler tries again).
            Err(e) if e.node => {
                tracing::error!(job = l.job_id, "{e}");
                Err(Status::unavailable(format!(
                    "this node cannot start the launch: {e}"
                )))
            }
            Err(e) => {
                tracing::warn!(job = l.job_id, "{e}");
                Err(Status::failed_precondition(e.to_string()))
            }
        }
    }

    async fn revoke(&self, req: Request<RevokeRequest>) -> Result<Response<RevokeReply>, Status> {
        let r = req.into_inner();
        let l = crate::validate::revoke(&r)?;
        let taken = {
            let mut st = self.0.lock();
            match st.launches.get(&l.job_id) {
                Some(x) if x.launch == l.launch => st.launches.remove(&l.job_id),
                _ => None,
            }
        };
        let Some(launch) = taken else {
            // Already exited; its exit is (or was) reported.
            return Ok(Response::new(RevokeReply::default()));
        };
        let grace = Duration::from_secs_f64(if r.kill { 0.0 } else { r.grace_s });
        let job = l.job_id;
        let out = tokio::task::spawn_blocking(move || {
            if grace.is_zero() {
                launch.run.kill();
            }
            let e = launch.run.revoke_and_wait(grace, job);
            let finished = launch.run.finished(&e);
            (e, finished, launch)
        })
        .await
        .map_err(|e| Status::internal(format!("revocation of job {job} failed: {e}")))?;
        let (e, finished, mut launch) = out;
        // Metrics written up to the exit (the last progress) still count.
        let mut samples = Vec::new();
        launch.run.read_metrics(job, |k, v| {
            samples.push(MetricSample {
                launch: Some(l),
                key: k.to_string(),
                value: v,
            })
        });
        {
            let mut st = self.0.lock();
            st.metrics.extend(samples);
            let contained = self.0.containment.is_some();
            st.sweep(launch.uid, contained);
        }
        tracing::info!(job, launch = l.launch, code = ?e.code, finished, "revoked");
        Ok(Response::new(reply(&e, finished)))
    }

    async fn reconfigure(&self, req: Request<ReconfigureRequest>) -> Result<Response<Ack>, Status> {
        let r = req.into_inner();
        let l = crate::validate::reconfigure(&r)?;
        let st = self.0.lock();
        match st.launches.get(&l.job_id) {
            Some(x) if x.launch == l.launch => x
                .run
                .set_batch_size(r.batch_size)
                .map(|_| Response::new(Ack {}))
                .map_err(|e| Status::internal(format!("job {}: {e}", l.job_id))),
            _ => Err(Status::not_found(format!(
                "job {} launch {} does not run here",
                l.job_id, l.launch
            ))),
        }
    }
}
