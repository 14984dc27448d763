//! The worker's service: what the scheduler asks of it (launch, revoke,
//! status of its launches). A launch is checked and reserved against the
//! worker's state in `admission`, then started here outside the lock.

use super::*;

mod admission;
#[cfg(test)]
mod tests;

use admission::{check_and_reserve, ranks, world_size};

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
        let sh = self.0.clone();
        // Checked and reserved under the state's lock; the directories,
        // the cgroup and the processes are made without it (a job's large
        // checkpoint tree to hand over must not hold up heartbeats).
        let (spec, uid) = {
            let mut st = sh.lock();
            let spec = check_and_reserve(&sh, &mut st, &r, l)?;
            let uid = spec
                .job_user
                .as_ref()
                .filter(|_| sh.job_uids.is_some())
                .map(|u| u.uid);
            (spec, uid)
        };
        // The rest runs as a task of its own: a scheduler that hangs up
        // mid-launch (killed, restarted, timed out) drops this call, and a
        // dropped call must not leave its reservation behind, holding the
        // GPUs for a launch that never runs or is never reported. The task
        // ends what it began: the launch is recorded or undone. One whose
        // caller hung up is stopped as soon as it runs (`CallerGone`): the
        // caller took the launch as failed and may have placed the job
        // elsewhere.
        let job = l.job_id;
        let mut gone = CallerGone {
            sh: sh.clone(),
            l,
            armed: true,
        };
        let r = tokio::spawn(finish_launch(sh, r, l, spec, uid))
            .await
            .map_err(|e| Status::internal(format!("launch of job {job}: {e}")))?;
        gone.armed = false;
        r
    }

    async fn revoke(&self, req: Request<RevokeRequest>) -> Result<Response<RevokeReply>, Status> {
        let r = req.into_inner();
        let l = crate::validate::revoke(&r)?;
        // One still starting is revoked once it runs (within a minute).
        let t = Instant::now();
        let taken = loop {
            {
                let mut st = self.0.lock();
                match st.launches.get(&l.job_id) {
                    Some(x) if x.launch == l.launch => {
                        st.stopping.insert((l.job_id, l.launch));
                        break st.take_launch(l.job_id);
                    }
                    _ => {}
                }
                match st.starting.get_mut(&l.job_id) {
                    Some(s) if s.launch == l.launch => {
                        // Stopped as soon as it runs (it has done nothing
                        // to save yet), also if this call is dropped; its
                        // exit is reported then.
                        s.revoked = true;
                        if t.elapsed() > Duration::from_secs(60) {
                            break None;
                        }
                    }
                    _ => break None,
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let Some(launch) = taken else {
            // Already exited; its exit is (or was) reported.
            return Ok(Response::new(RevokeReply::default()));
        };
        let grace = Duration::from_secs_f64(if r.kill { 0.0 } else { r.grace_s });
        let job = l.job_id;
        // As a task of its own, like a launch: a caller that hangs up
        // mid-revocation does not leave the launch's uid and leftovers
        // unswept.
        let sh = self.0.clone();
        tokio::spawn(async move {
            let out = tokio::task::spawn_blocking(move || {
                if grace.is_zero() {
                    launch.run.kill();
                }
                let e = launch.run.revoke_and_wait(grace, job);
                let finished = launch.run.finished(&e);
                (e, finished, launch)
            })
            .await;
            sh.lock().stopping.remove(&(job, l.launch));
            let out =
                out.map_err(|e| Status::internal(format!("revocation of job {job} failed: {e}")))?;
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
                let mut st = sh.lock();
                st.metrics.extend(samples);
                let contained = sh.containment.is_some();
                st.sweep(launch.uid, contained);
            }
            tracing::info!(job, launch = l.launch, code = ?e.code, finished, "revoked");
            Ok(Response::new(reply(&e, finished)))
        })
        .await
        .map_err(|e| Status::internal(format!("revocation of job {job} failed: {e}")))?
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

/// Dropped while armed (the launch call was dropped: its caller hung up):
/// the launch stops as soon as it runs, or at once if it runs already; its
/// exit is reported as any launch's.
struct CallerGone {
    sh: Arc<Shared>,
    l: LaunchRef,
    armed: bool,
}

impl Drop for CallerGone {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut st = self.sh.lock();
        if let Some(s) = st.starting.get_mut(&self.l.job_id) {
            s.revoked |= s.launch == self.l.launch;
        }
        if let Some(x) = st.launches.get(&self.l.job_id) {
            if x.launch == self.l.launch {
                x.run.kill();
            }
        }
    }
}

/// Starts a reserved launch (the directories, the cgroup, the processes;
/// outside the state's lock) and records it, or undoes the reservation.
async fn finish_launch(
    sh: Arc<Shared>,
    r: LaunchRequest,
    l: LaunchRef,
    spec: LaunchSpec,
    uid: Option<u32>,
) -> Result<Response<Ack>, Status> {
    let job = l.job_id;
    let limits = super::cgroup::Limits {
        memory_bytes: r.memory_gb.or(sh.cfg.memory_gb).map(|gb| (gb * 1e9) as u64),
        max_processes: r
            .max_processes
            .or(sh.cfg.max_processes)
            .or(Some(super::DEFAULT_MAX_PROCESSES)),
    };
    let started = {
        let sh = sh.clone();
        tokio::task::spawn_blocking(move || start_launch(&sh, spec, l, limits, uid))
            .await
            .map_err(|e| Status::internal(format!("launch of job {job}: {e}")))
    };
    let mut st = sh.lock();
    let reserved = st.starting.remove(&job);
    let (run, group) = match started.and_then(|r| r) {
        Ok(x) => x,
        Err(e) => {
            let contained = sh.containment.is_some();
            st.sweep(uid, contained);
            // Its end is also reported as any launch's: a scheduler that
            // restarted meanwhile may have adopted it as it started (one
            // that got this error ignores the report: the launch is not
            // its job's current one).
            st.exits.push((
                ExitReport {
                    worker_id: String::new(),
                    launch: Some(l),
                    code: None,
                    finished: false,
                    reason: e.message().to_string(),
                    exited_s_ago: 0.0,
                    fenced: e.code() == Code::Unavailable,
                },
                Instant::now(),
            ));
            return Err(e);
        }
    };
    // Revoked while it started (or the lease ran out, or the worker shuts
    // down meanwhile): it stops at once, its exit reported as for any
    // launch.
    if reserved.is_some_and(|s| s.revoked) || st.fenced() || st.closing {
        run.kill();
    }
    tracing::info!(job, launch = l.launch, gpus = ?r.gpus, "launched");
    let (ranks, world_size) = (ranks(&r), world_size(&r));
    st.launches.insert(
        job,
        Launch {
            launch: l.launch,
            gpus: r.gpus,
            gpu_milli: r.gpu_milli,
            run,
            first_rank: r.first_rank,
            ranks,
            world_size,
            generation: r.generation,
            batch_size: r.batch_size,
            spawned: Instant::now(),
            startup_s: None,
            uid,
            shared: !r.coord_dir.is_empty(),
            group,
        },
    );
    Ok(Response::new(Ack {}))
}

/// Makes the launch's cgroups and starts it (outside the state's lock).
fn start_launch(
    sh: &Shared,
    mut spec: LaunchSpec,
    l: LaunchRef,
    limits: super::cgroup::Limits,
    uid: Option<u32>,
) -> Result<(Running, Option<super::cgroup::LaunchGroup>), Status> {
    let group = match &sh.containment {
        Some(c) => {
            let name = format!("job-{}-launch-{}", l.job_id, l.launch);
            Some(c.create(&name, limits).map_err(|e| {
                tracing::error!(job = l.job_id, "{e}");
                Status::unavailable(format!("this node cannot make the launch's cgroup: {e}"))
            })?)
        }
        None => None,
    };
    spec.cgroup_procs = group.as_ref().map(|g| g.procs.clone()).unwrap_or_default();
    match Running::spawn(&spec) {
        Ok(run) => Ok((run, group)),
        Err(e) => {
            if let Some(g) = group {
                super::cgroup::reap(g, uid);
            }
            // The lease ran out while the launch started (this worker was
            // stopped meanwhile): no process of it ran past `exec`, and it
            // is not the job's fault.
            if sh.lock().fenced() {
                tracing::warn!(job = l.job_id, "{e}: the lease ran out while it started");
                Err(Status::unavailable(format!(
                    "this worker's lease ran out while it started the launch (it was stopped or starved meanwhile): {e}"
                )))
            } else if e.node {
                // The node's: its directories cannot be made safely. Not
                // held against the job (the scheduler tries again).
                tracing::error!(job = l.job_id, "{e}");
                Err(Status::unavailable(format!(
                    "this node cannot start the launch: {e}"
                )))
            } else if e.permanent {
                // NOT_FOUND: the job fails at once (a retry cannot help).
                tracing::warn!(job = l.job_id, "{e}");
                Err(Status::not_found(e.to_string()))
            } else {
                tracing::warn!(job = l.job_id, "{e}");
                Err(Status::failed_precondition(e.to_string()))
            }
        }
    }
}
