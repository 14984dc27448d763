//! The worker's side of the scheduler connection: registering, beating,
//! fencing its jobs when the lease runs out, and reporting exits and metrics.

use super::*;

/// Registers, then beats every `heartbeat_s`; registers again whenever the
/// scheduler does not know this worker (after revoking every job here).
/// When no heartbeat got through for the lease the scheduler gave, every job
/// here is fenced ([`fence`]).
pub(super) async fn heartbeat_loop(sh: Arc<Shared>, client: SchedulerClient) {
    let mut b = Beats {
        sh,
        client,
        period: Duration::from_secs(1),
        lease: None,
        probe_path: None,
        warned: false,
    };
    loop {
        let id = b.sh.lock().worker_id.clone();
        // A call never waits longer than a beat (or half the lease): a cut
        // network must not hold the loop past the lease.
        let call_timeout = (b.lease).map_or(Duration::from_secs(5), |(l, _)| (l / 2).max(b.period));
        let next = match id {
            None => b.register(call_timeout).await,
            Some(id) => b.beat(id, call_timeout).await,
        };
        match next {
            Next::Stop => return,
            Next::AtOnce => continue,
            Next::Retry => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Next::Beat => {}
        }
        b.fence_if_lapsed().await;
        tokio::time::sleep(b.period).await;
    }
}

/// What the heartbeat loop does after a call.
enum Next {
    /// Stops: the scheduler refused this worker for good.
    Stop,
    /// Calls again at once (registered: the first beat; or unknown to the
    /// scheduler: register again).
    AtOnce,
    /// Registers again after a short pause.
    Retry,
    /// Beats again after the period.
    Beat,
}

/// The heartbeat loop's state: what the scheduler's registration said.
struct Beats {
    sh: Arc<Shared>,
    client: SchedulerClient,
    period: Duration,
    /// The lease and the grace before fencing, as the scheduler gave them.
    lease: Option<(Duration, Duration)>,
    /// Where the checkpoint probe is read, until the scheduler accepts it.
    probe_path: Option<PathBuf>,
    /// A failure was logged: the same one is not logged again every beat.
    warned: bool,
}

impl Beats {
    /// Every job here is fenced when no heartbeat got through for the lease.
    async fn fence_if_lapsed(&self) {
        if let Some((l, grace)) = self.lease {
            if self.sh.lock().fenced() {
                fence(&self.sh, l, grace).await;
            }
        }
    }

    /// Registers with the scheduler, reporting the jobs running here.
    async fn register(&mut self, call_timeout: Duration) -> Next {
        let sh = &self.sh;
        let req = RegisterRequest {
            name: sh.cfg.name.clone(),
            address: sh.address.clone(),
            gpus: sh.gpus.clone(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            host_mem_gb: host_mem_gb(),
            running: sh.lock().reports(),
            labels: sh.cfg.labels.clone().into_iter().collect(),
            containment: sh
                .containment
                .as_ref()
                .map_or_else(|| "none".to_string(), |c| c.summary.clone()),
            job_uid_first: sh.job_uids.map_or(0, |r| r.0),
            job_uid_last: sh.job_uids.map_or(0, |r| r.1),
            shares_gpus: true,
        };
        let sent = Instant::now();
        let r = tokio::time::timeout(call_timeout, self.client.register(req))
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("no reply")));
        match r {
            Ok(r) => self.registered(r.into_inner(), sent),
            Err(e) if unfixable(e.code()) => {
                refuse(&self.sh, "registering", &e);
                Next::Stop
            }
            Err(e) => {
                if !self.warned {
                    tracing::warn!(
                        "cannot register with {}: {}",
                        self.sh.cfg.scheduler,
                        e.message()
                    );
                    self.warned = true;
                }
                // Jobs kept from an earlier registration are fenced when
                // the lease it gave runs out.
                self.fence_if_lapsed().await;
                Next::Retry
            }
        }
    }

    /// Takes in the scheduler's registration (sent at `sent`): the period,
    /// the lease, the probe and the credential.
    fn registered(&mut self, r: RegisterReply, sent: Instant) -> Next {
        tracing::info!(worker = %r.worker_id, "registered with the scheduler");
        if let Ok(p) = Duration::try_from_secs_f64(r.heartbeat_s) {
            if !p.is_zero() {
                self.period = p.min(Duration::from_secs(3600));
            }
        }
        self.lease = match (
            Duration::try_from_secs_f64(r.lease_s),
            Duration::try_from_secs_f64(r.fence_grace_s),
        ) {
            (Ok(l), Ok(g)) if !l.is_zero() && l < Duration::from_secs(86_400) => {
                Some((l, g.min(Duration::from_secs(86_400))))
            }
            _ => None,
        };
        self.probe_path =
            (!r.checkpoint_probe_path.is_empty()).then(|| PathBuf::from(&r.checkpoint_probe_path));
        if r.worker_secret.is_empty() {
            refuse(
                &self.sh,
                "registering",
                &Status::failed_precondition(
                    "the scheduler issued no worker credential (an older scheduler): upgrade it",
                ),
            );
            return Next::Stop;
        }
        let mut st = self.sh.lock();
        st.worker_id = Some(r.worker_id);
        st.secret = Some(r.worker_secret);
        match self.lease {
            Some((l, _)) => st.renew_lease(sent + l),
            None => st.lease_until = None,
        }
        st.fence_grace = self.lease.map_or(Duration::ZERO, |(_, g)| g);
        st.publish_lease(st.fence_grace);
        self.warned = false;
        // Beat at once: the first heartbeat carries the checkpoint probe
        // that lets this worker in.
        Next::AtOnce
    }

    /// One heartbeat of registered worker `id`: what runs here, the probe,
    /// the lease's epoch; the reply's stops and take-backs carried out.
    async fn beat(&mut self, id: String, call_timeout: Duration) -> Next {
        let (running, secret, lease_epoch, busy_uids, kept) = {
            let mut st = self.sh.lock();
            (
                st.running(),
                st.secret.clone().unwrap_or_default(),
                st.lease_epoch,
                st.busy_uids(),
                st.kept_refs(),
            )
        };
        // Read on every beat until accepted: an operator may mount the
        // storage meanwhile.
        let checkpoint_probe = (self.probe_path.as_deref())
            .and_then(read_probe)
            .unwrap_or_default();
        let sent = Instant::now();
        let r = tokio::time::timeout(
            call_timeout,
            self.client.heartbeat(with_credential(
                HeartbeatRequest {
                    worker_id: id.clone(),
                    running,
                    checkpoint_probe,
                    lease_epoch,
                    busy_uids,
                    kept,
                },
                &secret,
            )),
        )
        .await
        .unwrap_or_else(|_| Err(Status::deadline_exceeded("no reply")));
        let sh = &self.sh;
        match r {
            Ok(r) => {
                if let Some((l, g)) = self.lease {
                    let mut st = sh.lock();
                    // Through again after the lease ran out: what the
                    // scheduler sent before is stale.
                    if st.fenced() {
                        st.lease_epoch += 1;
                        tracing::info!(epoch = st.lease_epoch, "heard from the scheduler again after the lease ran out: launches sent before are refused");
                    }
                    st.renew_lease(sent + l);
                    st.publish_lease(g);
                }
                // The scheduler checks the probe until it once matches; a
                // new registration names it again.
                self.probe_path = None;
                let r = r.into_inner();
                for l in r.stop {
                    stop_launch(sh, l).await;
                }
                take_back(sh, &r.take_back).await;
                self.warned = false;
            }
            Err(e) if e.code() == Code::NotFound => {
                let mut st = sh.lock();
                tracing::warn!(worker = %id, jobs = st.launches.len(), "the scheduler does not know this worker any more ({}); registering again with the jobs running here (it adopts them or revokes them)", e.message());
                // The jobs run on under the lease the last acknowledged
                // heartbeat renewed: if registering takes longer, they are
                // fenced.
                st.worker_id = None;
                st.secret = None;
                // Exits of launches before this point: the new
                // registration reports what still runs instead.
                st.exits.clear();
                return Next::AtOnce;
            }
            Err(e) if matches!(e.code(), Code::Unauthenticated | Code::PermissionDenied) => {
                // The token changed under a registered worker.
                refuse(sh, "a heartbeat", &e);
                return Next::Stop;
            }
            Err(e) if e.code() == Code::FailedPrecondition => {
                // Not taken into the cluster; beating still renews nothing,
                // so it runs no job meanwhile.
                if !self.warned {
                    tracing::error!("{}", e.message());
                    self.warned = true;
                }
            }
            Err(e) => {
                if !self.warned {
                    tracing::warn!("heartbeat to {} failed: {}", sh.cfg.scheduler, e.message());
                    self.warned = true;
                }
            }
        }
        Next::Beat
    }
}

/// The checkpoint probe's text (at most 256 bytes, a plain file: never
/// through a link or from a FIFO, whoever could write there).
fn read_probe(path: &std::path::Path) -> Option<String> {
    let dir = crate::safe_fs::Dir::open(path.parent()?, false, crate::safe_fs::Trust::Same).ok()?;
    let name = path.file_name()?.to_str()?;
    let bytes = dir.read_job_file(name, None, 0, 256).ok()??;
    String::from_utf8(bytes).ok()
}

/// Errors of registering that no retry fixes: a wrong or missing token (or
/// the users' instead of the workers'), and arguments the scheduler rejects.
/// Network errors, timeouts and an unavailable scheduler are retried.
fn unfixable(code: Code) -> bool {
    matches!(
        code,
        Code::Unauthenticated | Code::PermissionDenied | Code::InvalidArgument
    )
}

/// Gives up on the scheduler: logs why and tells the handle.
fn refuse(sh: &Shared, call: &str, e: &Status) {
    let why = format!(
        "the scheduler at {} refused {call} ({:?}): {}",
        sh.cfg.scheduler,
        e.code(),
        e.message()
    );
    tracing::error!("{why}");
    sh.refused.send_replace(Some(why));
}

/// The lease ran out: every job here is revoked, gets `grace` to checkpoint
/// and is killed after it; each is reported as fenced (queued again without
/// blame) once the scheduler can be reached. The scheduler declares this
/// worker gone only after the lease and the grace are over, so no job runs
/// here and on its next worker at once.
async fn fence(sh: &Arc<Shared>, lease: Duration, grace: Duration) {
    let taken: Vec<(u64, Launch)> = {
        let mut st = sh.lock();
        let jobs: Vec<u64> = st.launches.keys().copied().collect();
        jobs.into_iter()
            .filter_map(|j| st.take_launch(j).map(|l| (j, l)))
            .collect()
    };
    if taken.is_empty() {
        return;
    }
    tracing::warn!(
        jobs = taken.len(),
        "no heartbeat reached the scheduler for {:.1} s (the lease): stopping every job here",
        lease.as_secs_f64()
    );
    let waits: Vec<_> = taken
        .into_iter()
        .map(|(job, l)| {
            tokio::task::spawn_blocking(move || {
                let e = l.run.revoke_and_wait(grace, job);
                let finished = l.run.finished(&e);
                (job, l.launch, e, finished)
            })
        })
        .collect();
    for w in waits {
        let Ok((job, launch, e, finished)) = w.await else {
            continue;
        };
        tracing::info!(job, launch, finished, "fenced");
        sh.lock().exits.push((
            ExitReport {
                worker_id: String::new(),
                launch: Some(LaunchRef {
                    job_id: job,
                    launch,
                }),
                code: e.code,
                finished,
                reason: if finished {
                    String::new()
                } else {
                    format!(
                        "fenced: its worker could not reach the scheduler for {:.1} s",
                        lease.as_secs_f64()
                    )
                },
                exited_s_ago: 0.0,
                fenced: !finished,
            },
            e.at,
        ));
    }
}

/// Revokes a launch the scheduler no longer expects, or every launch when
/// the scheduler forgot this worker (grace: 5 s).
async fn stop_launch(sh: &Arc<Shared>, l: LaunchRef) {
    stop_launch_within(sh, l, Duration::from_secs(5)).await
}

/// Revokes a launch and waits up to `grace` for it to exit (then kills it).
pub(super) async fn stop_launch_within(sh: &Arc<Shared>, l: LaunchRef, grace: Duration) {
    let taken = {
        let mut st = sh.lock();
        match st.launches.get(&l.job_id) {
            Some(x) if x.launch == l.launch => {
                st.stopping.insert((l.job_id, l.launch));
                st.take_launch(l.job_id)
            }
            _ => {
                // Still starting: it stops as soon as it runs, and its exit
                // is reported then.
                if let Some(s) = st.starting.get_mut(&l.job_id) {
                    s.revoked |= s.launch == l.launch;
                }
                None
            }
        }
    };
    if let Some(launch) = taken {
        tracing::info!(job = l.job_id, launch = l.launch, "revoking");
        let uid = launch.uid;
        let _ = tokio::task::spawn_blocking(move || {
            launch.run.revoke_and_wait(grace, l.job_id);
        })
        .await;
        let contained = sh.containment.is_some();
        let mut st = sh.lock();
        st.stopping.remove(&(l.job_id, l.launch));
        st.sweep(uid, contained);
    }
}

/// Every 20 ms: reads the jobs' metric logs, notices exits, and delivers
/// both to the scheduler (undelivered ones are retried).
pub(super) async fn report_loop(sh: Arc<Shared>, mut client: SchedulerClient) {
    loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ((id, secret), exits, metrics) = {
            let mut st = sh.lock();
            let st = &mut *st;
            let mut ended = Vec::new();
            for (job, l) in st.launches.iter_mut() {
                let lref = LaunchRef {
                    job_id: *job,
                    launch: l.launch,
                };
                let startup = &mut l.startup_s;
                l.run.read_metrics(*job, |k, v| {
                    if k == blox_client::STARTUP_METRIC && startup.is_none() && v.is_finite() {
                        *startup = Some(v.max(0.0));
                    }
                    st.metrics.push(MetricSample {
                        launch: Some(lref),
                        key: k.to_string(),
                        value: v,
                    })
                });
                // A file it gave the worker to read was not its own plain
                // file (a link planted at root): the launch ends.
                if l.run.refusal().is_some() {
                    l.run.kill();
                }
                if let Some(e) = l.run.exit() {
                    ended.push((*job, e, l.run.finished(&e)));
                }
            }
            let contained = sh.containment.is_some();
            for (job, e, finished) in ended {
                let l = st.take_launch(job).expect("listed above");
                st.sweep(l.uid, contained);
                // Killed by the kernel at its cgroup's memory limit: the
                // job's own doing, said so.
                let oom = l.group.as_ref().filter(|g| g.oom_kills() > 0).map(|g| {
                    format!(
                        "out of memory: the launch reached its memory limit ({}) and the kernel killed it; ask for more (memory_gb) or use less",
                        g.limits
                            .memory_bytes
                            .map_or("the node's".into(), |b| format!("{:.2} GB", b as f64 / 1e9))
                    )
                });
                // It stopped itself because its lease ran out (this worker
                // could not renew it): not its fault.
                let lapsed = !finished && st.stopped_by_lease(e.at);
                tracing::info!(job, launch = l.launch, code = ?e.code, finished, lapsed, "exited");
                st.exits.push((
                    ExitReport {
                        worker_id: String::new(),
                        launch: Some(LaunchRef {
                            job_id: job,
                            launch: l.launch,
                        }),
                        code: e.code,
                        finished,
                        reason: if lapsed {
                            "fenced: it stopped itself when its lease ran out (its worker could not reach the scheduler)".into()
                        } else if finished {
                            String::new()
                        } else {
                            // Where to look: its output on this node.
                            oom.or(l.run.refusal()).unwrap_or_else(|| {
                                format!(
                                    "{}; its output: {}/stderr{} on {}",
                                    e.code.map_or("killed by a signal".into(), |c| format!("exit status {c}")),
                                    l.run.control.display(),
                                    if l.ranks > 1 { ".rank*" } else { "" },
                                    sh.cfg.name
                                )
                            })
                        },
                        exited_s_ago: 0.0,
                        fenced: lapsed,
                    },
                    e.at,
                ));
            }
            st.bound_metrics();
            let (Some(id), Some(secret)) = (st.worker_id.clone(), st.secret.clone()) else {
                continue;
            };
            (
                (id, secret),
                std::mem::take(&mut st.exits),
                std::mem::take(&mut st.metrics),
            )
        };
        // In batches the scheduler takes (at most 10,000 samples each).
        let mut metrics = metrics;
        while !metrics.is_empty() {
            let rest = metrics.split_off(metrics.len().min(crate::validate::MAX_BATCH_SAMPLES));
            let batch = MetricBatch {
                worker_id: id.clone(),
                samples: std::mem::replace(&mut metrics, rest),
            };
            match client
                .push_metrics(with_credential(batch.clone(), &secret))
                .await
            {
                Ok(_) => {}
                // Refused as it is: sending it again cannot help.
                Err(e) if e.code() == Code::InvalidArgument => {
                    tracing::warn!("metric batch refused and dropped: {}", e.message());
                }
                Err(e) => {
                    tracing::debug!("metric push failed: {}", e.message());
                    let mut st = sh.lock();
                    // Keep them for the next try, newest last.
                    let newer = std::mem::take(&mut st.metrics);
                    st.metrics = batch.samples;
                    st.metrics.append(&mut metrics);
                    st.metrics.extend(newer);
                    st.bound_metrics();
                    break;
                }
            }
        }
        let mut failed = Vec::new();
        for (mut r, at) in exits {
            r.worker_id = id.clone();
            r.exited_s_ago = at.elapsed().as_secs_f64();
            match client
                .report_exit(with_credential(r.clone(), &secret))
                .await
            {
                Ok(_) => {}
                // Refused as it is: sending it again cannot help.
                Err(e) if e.code() == Code::InvalidArgument => {
                    tracing::warn!("exit report refused: {}", e.message());
                }
                Err(e) => {
                    tracing::debug!("exit report failed: {}", e.message());
                    failed.push((r, at));
                }
            }
        }
        if !failed.is_empty() {
            let mut st = sh.lock();
            failed.extend(std::mem::take(&mut st.exits));
            st.exits = failed;
        }
    }
}

/// Takes back the kept shared directories of launches the scheduler says
/// ended on every worker, on a thread of its own (shared storage may be
/// slow: the heartbeats go on); their uids stay busy until they are back.
async fn take_back(sh: &Arc<Shared>, ended: &[LaunchRef]) {
    if ended.is_empty() {
        return;
    }
    let dirs = sh.lock().release_kept(ended);
    if dirs.is_empty() {
        return;
    }
    tracing::debug!(
        launches = dirs.len(),
        "taking back the shared directories of launches that ended on every worker"
    );
    let sh = sh.clone();
    tokio::task::spawn_blocking(move || {
        let uids: Vec<u32> = dirs.iter().map(SharedDirs::uid).collect();
        for d in dirs {
            d.take_back();
        }
        let mut st = sh.lock();
        for u in uids {
            if let Some(i) = st.returning.iter().position(|x| *x == u) {
                st.returning.swap_remove(i);
            }
        }
    });
}
