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

/// The ranks a launch runs here: one per GPU, or one for all.
fn ranks(r: &LaunchRequest) -> u32 {
    if r.process_per_gpu {
        r.gpus.len() as u32
    } else {
        1
    }
}

/// The ranks of the launch's world (all its parts): this part's, alone.
fn world_size(r: &LaunchRequest) -> u32 {
    if r.world_size > 0 {
        r.world_size
    } else {
        ranks(r)
    }
}

/// The launch `r` against this worker's state: refused (naming why) when
/// it is not this worker's, its lease ran out, its GPUs or uid are held or
/// the job runs here already; else reserved (`State::starting`) and its
/// spec returned.
fn check_and_reserve(
    sh: &Shared,
    st: &mut State,
    r: &LaunchRequest,
    l: LaunchRef,
) -> Result<LaunchSpec, Status> {
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
    if let Some(old) = st.starting.get(&l.job_id) {
        return Err(Status::already_exists(format!(
            "job {} is starting here (launch {})",
            l.job_id, old.launch
        )));
    }
    let held_gpus = st
        .launches
        .iter()
        .map(|(j, x)| (*j, &x.gpus, x.gpu_milli))
        .chain((st.starting.iter()).map(|(j, x)| (*j, &x.report.gpus, x.report.gpu_milli)));
    // Launches may share a GPU while their thousandths add up to 1000 at
    // most; a GPU held whole is nobody else's.
    let mut shared = 0u32;
    for (job, gpus, milli) in held_gpus {
        if let Some(g) = r.gpus.iter().find(|g| gpus.contains(g)) {
            match (milli, r.gpu_milli) {
                (Some(m), Some(_)) => shared += m,
                _ => {
                    // Not this job's fault: the scheduler's view is behind.
                    return Err(Status::resource_exhausted(format!(
                        "GPU {g} is held by job {job}"
                    )));
                }
            }
        }
    }
    let running = st.launches.len() + st.starting.len();
    if running >= crate::validate::MAX_REGISTERED_LAUNCHES {
        // What a registration may report: past it, a worker registering
        // again would be refused (and drain its node).
        return Err(Status::resource_exhausted(format!(
            "this worker runs {running} launches, the most it may report"
        )));
    }
    if let Some(m) = r.gpu_milli {
        if shared + m > blox_core::GPU_MILLI {
            return Err(Status::resource_exhausted(format!(
                "GPU {}: {shared} thousandths are shared out already; {m} more do not fit",
                r.gpus[0]
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
                .filter_map(|(j, x)| x.uid.map(|u| (*j, u)))
                .chain(
                    st.starting
                        .iter()
                        .filter_map(|(j, x)| x.uid.map(|u| (*j, u))),
                )
                .chain(st.kept.iter().map(|(l, d)| (l.job_id, d.uid())));
            Some(super::uids::account_for(range, r.job_uid, l.job_id, held)?)
        }
        None => sh.job_user.clone(),
    };
    let uid = sh.job_uids.and(job_user.as_ref().map(|u| u.uid));
    st.starting.insert(
        l.job_id,
        Starting {
            launch: l.launch,
            uid,
            revoked: false,
            report: RunningLaunch {
                launch: Some(l),
                gpus: r.gpus.clone(),
                first_rank: r.first_rank,
                ranks: ranks(r),
                world_size: world_size(r),
                generation: r.generation,
                batch_size: r.batch_size,
                running_s: 0.0,
                startup_s: None,
                gpu_milli: r.gpu_milli,
            },
            since: Instant::now(),
        },
    );
    Ok(LaunchSpec {
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
        share: r.gpu_milli.map(|m| {
            // Logical GPUs (`--gpus N`) have no memory to divide: their
            // 16 GB is a stand-in.
            let g = &sh.gpus[r.gpus[0] as usize];
            let memory_gb = if g.uuid.starts_with("logical-") {
                0.0
            } else {
                g.memory_gb
            };
            crate::process::GpuShareEnv::of(m, memory_gb)
        }),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A registered worker of two logical GPUs in `dir`, without cgroups.
    fn worker(dir: &std::path::Path) -> Arc<Shared> {
        Arc::new(Shared {
            cfg: WorkerConfig {
                workdir: dir.to_path_buf(),
                cgroup: super::super::cgroup::CgroupSetting::Off,
                ..WorkerConfig::default()
            },
            job_user: None,
            job_uids: None,
            containment: None,
            gpus: logical_gpus(2),
            address: "127.0.0.1:1".into(),
            state: Mutex::new(State {
                worker_id: Some("w".into()),
                lease_epoch: 1,
                ..State::default()
            }),
            refused: tokio::sync::watch::channel(None).0,
        })
    }

    fn launch(job: u64) -> LaunchRequest {
        LaunchRequest {
            launch: Some(LaunchRef {
                job_id: job,
                launch: 1,
            }),
            command: vec!["sleep".into(), "30".into()],
            gpus: vec![0, 1],
            worker_id: "w".into(),
            ..Default::default()
        }
    }

    fn revoke(job: u64) -> RevokeRequest {
        RevokeRequest {
            launch: Some(LaunchRef {
                job_id: job,
                launch: 1,
            }),
            grace_s: 0.0,
            kill: true,
        }
    }

    /// A runtime of two threads: the launch's task runs beside the test.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// Polls `call` once, as a caller that hangs up right after sending it
    /// does (a scheduler killed or restarted mid-call), then drops it.
    async fn hang_up<T>(call: impl std::future::Future<Output = T>) {
        tokio::pin!(call);
        tokio::select! {
            biased;
            _ = &mut call => {}
            _ = std::future::ready(()) => {}
        }
    }

    /// Before, a launch call dropped while its processes started left its
    /// reservation behind: the GPUs stayed "held" by a launch the worker
    /// never reported, so no scheduler could stop it, and every later
    /// launch onto them was refused (seen after a scheduler restart). Now
    /// the launch is recorded, stopped as soon as it runs (its caller took
    /// it as failed and may run the job elsewhere), and its GPUs are free
    /// once its exit is collected. A revocation whose caller hangs up still
    /// ends its launch.
    #[test]
    fn a_launch_or_revocation_whose_caller_hangs_up_still_completes() {
        let dir = tempfile::tempdir().unwrap();
        let sh = worker(dir.path());
        let rt = runtime();
        rt.block_on(async {
            let svc = Service(sh.clone());
            hang_up(svc.launch(Request::new(launch(1)))).await;
            let one = LaunchRef {
                job_id: 1,
                launch: 1,
            };
            // Starting or started, it is counted (its GPUs are held), but
            // never offered for adoption.
            {
                let st = sh.lock();
                assert_eq!(st.running(), vec![one]);
                if st.starting.contains_key(&1) {
                    assert!(st.reports().is_empty());
                }
            }
            let t = Instant::now();
            while sh.lock().starting.contains_key(&1) {
                assert!(t.elapsed() < Duration::from_secs(20), "still starting");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Recorded, and killed as it ran: it exits (the report loop
            // then reports the exit and frees its GPUs, as here).
            let t = Instant::now();
            while sh.lock().launches[&1].run.exit().is_none() {
                assert!(t.elapsed() < Duration::from_secs(20), "it runs on");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            {
                let mut st = sh.lock();
                let l = st.take_launch(1).unwrap();
                st.sweep(l.uid, false);
            }
            // A launch whose call is answered runs on; a revocation whose
            // caller hangs up still ends it, and its GPUs take the next.
            svc.launch(Request::new(launch(2))).await.unwrap();
            hang_up(svc.revoke(Request::new(revoke(2)))).await;
            assert!(sh.lock().launches.is_empty());
            let t = Instant::now();
            loop {
                match svc.launch(Request::new(launch(3))).await {
                    Ok(_) => break,
                    // The revoked launch's uid or leftovers may still drain.
                    Err(e) if t.elapsed() < Duration::from_secs(20) => {
                        assert_ne!(e.code(), Code::InvalidArgument, "{}", e.message());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => panic!("the freed GPUs refuse a launch: {}", e.message()),
                }
            }
            assert!(sh.lock().launches[&3].run.exit().is_none(), "it runs");
            svc.revoke(Request::new(revoke(3))).await.unwrap();
            assert!(sh.lock().launches.is_empty() && sh.lock().starting.is_empty());
        });
    }

    /// Launches share a GPU while their thousandths add up to 1000 at most,
    /// never beside a launch holding it whole; each is told its share.
    #[test]
    fn launches_share_a_gpu_up_to_a_thousand_thousandths() {
        let dir = tempfile::tempdir().unwrap();
        let sh = worker(dir.path());
        let rt = runtime();
        rt.block_on(async {
            let svc = Service(sh.clone());
            let on = |job: u64, gpu: u32, milli: Option<u32>| LaunchRequest {
                gpus: vec![gpu],
                gpu_milli: milli,
                ..launch(job)
            };
            svc.launch(Request::new(on(1, 0, Some(600)))).await.unwrap();
            svc.launch(Request::new(on(2, 0, Some(400)))).await.unwrap();
            let e = svc
                .launch(Request::new(on(3, 0, Some(1))))
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::ResourceExhausted, "{}", e.message());
            assert!(
                e.message()
                    .contains("1000 thousandths are shared out already"),
                "{}",
                e.message()
            );
            let e = svc.launch(Request::new(on(4, 0, None))).await.unwrap_err();
            assert_eq!(e.code(), Code::ResourceExhausted, "{}", e.message());
            svc.launch(Request::new(on(5, 1, None))).await.unwrap();
            let e = svc
                .launch(Request::new(on(6, 1, Some(100))))
                .await
                .unwrap_err();
            assert!(e.message().contains("held by job 5"), "{}", e.message());
            // A share of two GPUs, or of none of a GPU: refused outright.
            let two = LaunchRequest {
                gpu_milli: Some(500),
                ..launch(7)
            };
            let e = svc.launch(Request::new(two)).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
            let e = svc
                .launch(Request::new(on(8, 1, Some(0))))
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
            // What a restarted scheduler is told: both sharers, with shares.
            let reports = sh.lock().reports();
            let milli: Vec<Option<u32>> = reports.iter().map(|r| r.gpu_milli).collect();
            assert_eq!(milli, [Some(600), Some(400), None]);
            for job in [1, 2, 5] {
                svc.revoke(Request::new(revoke(job))).await.unwrap();
            }
        });
    }

    /// A launch being revoked is still reported as running until its
    /// processes exited (its grace, saving its last checkpoint): the
    /// scheduler must neither relaunch its job nor have its shared
    /// directories taken back meanwhile.
    #[test]
    fn a_launch_is_reported_running_until_its_revocation_ends() {
        let dir = tempfile::tempdir().unwrap();
        let sh = worker(dir.path());
        let rt = runtime();
        rt.block_on(async {
            let svc = Service(sh.clone());
            // `sleep` ignores the revocation: it is killed after its grace.
            svc.launch(Request::new(launch(5))).await.unwrap();
            let five = LaunchRef {
                job_id: 5,
                launch: 1,
            };
            let mut r = revoke(5);
            r.kill = false;
            r.grace_s = 1.0;
            let call = tokio::spawn({
                let svc = Service(sh.clone());
                async move { svc.revoke(Request::new(r)).await }
            });
            let t = Instant::now();
            while sh.lock().launches.contains_key(&5) {
                assert!(t.elapsed() < Duration::from_secs(5), "not taken");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(sh.lock().running(), vec![five], "during its grace");
            call.await.unwrap().unwrap();
            assert!(t.elapsed() >= Duration::from_millis(900));
            let st = sh.lock();
            assert!(st.running().is_empty() && st.stopping.is_empty());
        });
    }

    /// A launch that fails to start after its caller hung up is reported
    /// ended (a scheduler that restarted meanwhile may have adopted it), and
    /// leaves nothing held.
    #[test]
    fn a_launch_that_fails_to_start_unheard_is_reported_ended() {
        let dir = tempfile::tempdir().unwrap();
        let sh = worker(dir.path());
        let rt = runtime();
        rt.block_on(async {
            let svc = Service(sh.clone());
            let mut r = launch(4);
            r.command = vec!["/nonexistent/blox-job".into()];
            hang_up(svc.launch(Request::new(r))).await;
            let t = Instant::now();
            while !sh.lock().starting.is_empty() {
                assert!(t.elapsed() < Duration::from_secs(20), "still starting");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        let st = sh.lock();
        assert!(st.launches.is_empty() && st.running().is_empty());
        let (e, _) = st.exits.last().expect("its end is reported");
        assert_eq!(e.launch.map(|l| l.job_id), Some(4));
        assert!(!e.finished && e.reason.contains("nonexistent"), "{e:?}");
    }

    /// A launch still starting is reported, with its GPUs and ranks, and a
    /// scheduler's stop marks it to stop as soon as it runs.
    #[test]
    fn a_starting_launch_is_reported_and_can_be_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let sh = worker(dir.path());
        let mut r = launch(3);
        r.process_per_gpu = true;
        r.world_size = 4;
        r.first_rank = 2;
        let spec = check_and_reserve(&sh, &mut sh.lock(), &r, r.launch.unwrap()).unwrap();
        drop(spec);
        let reports = sh.lock().reports();
        assert_eq!(reports.len(), 1);
        let rep = &reports[0];
        assert_eq!(
            (rep.gpus.clone(), rep.first_rank, rep.ranks, rep.world_size),
            (vec![0, 1], 2, 2, 4)
        );
        assert_eq!(sh.lock().running(), vec![r.launch.unwrap()]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Another launch number of the job is not this one.
        let other = LaunchRef {
            job_id: 3,
            launch: 2,
        };
        rt.block_on(super::super::stop_launch_within(&sh, other, Duration::ZERO));
        assert!(!sh.lock().starting[&3].revoked);
        rt.block_on(super::super::stop_launch_within(
            &sh,
            r.launch.unwrap(),
            Duration::ZERO,
        ));
        assert!(sh.lock().starting[&3].revoked);
        // Revoked, it is killed as it runs: not one to adopt.
        assert!(sh.lock().reports().is_empty());
        assert_eq!(sh.lock().running().len(), 1);
    }
}
