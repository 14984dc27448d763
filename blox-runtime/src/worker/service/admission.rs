//! Admission of a launch: whether this worker takes it (its id, its lease,
//! its GPUs whole or shared by thousandths, its uid, the launches it
//! reports), and its reservation and spec once it does.

use super::*;

/// The ranks a launch runs here: one per GPU, or one for all.
pub(super) fn ranks(r: &LaunchRequest) -> u32 {
    if r.process_per_gpu {
        r.gpus.len() as u32
    } else {
        1
    }
}

/// The ranks of the launch's world (all its parts): this part's, alone.
pub(super) fn world_size(r: &LaunchRequest) -> u32 {
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
pub(super) fn check_and_reserve(
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
            Some(super::super::uids::account_for(
                range, r.job_uid, l.job_id, held,
            )?)
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
