//! What every RPC request must satisfy before a handler looks at the
//! cluster: required fields, ranges and size limits (documented in
//! `blox.proto`). Each error is `INVALID_ARGUMENT` naming the field. The
//! handlers call these first; [`check_rpc`] runs decoding and these checks
//! on raw bytes, as the services would, for the fuzz targets and their
//! regression tests.

use crate::proto::*;
use prost::Message;
use std::collections::HashSet;
use tonic::Status;

/// The longest idempotency key and metric key accepted, bytes.
pub const MAX_KEY_BYTES: usize = 128;
/// The longest name (job, user, model, worker, GPU) and address, bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// The most arguments of a command, and their bytes in all.
pub const MAX_ARGS: usize = 4096;
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;
/// The most metrics a submission may carry.
pub const MAX_METRICS: usize = 256;
/// The most GPUs a worker may register, and launches it may report.
pub const MAX_WORKER_GPUS: usize = 1024;
pub const MAX_WORKER_LAUNCHES: usize = 100_000;
/// The longest reason an exit report may give, bytes.
pub const MAX_REASON_BYTES: usize = 4096;
/// The most samples in one `PushMetrics` call.
pub const MAX_BATCH_SAMPLES: usize = 10_000;
/// The most job ids one `Status` call may name.
pub const MAX_STATUS_IDS: usize = 1000;
/// The longest path a launch may name, bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest grace a revocation may give a job (a day), seconds.
pub const MAX_GRACE_S: f64 = 86_400.0;

fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(msg.into())
}

fn too_long(field: &str, len: usize, max: usize) -> Result<(), Status> {
    if len > max {
        return Err(invalid(format!("{field}: {len} bytes, at most {max}")));
    }
    Ok(())
}

/// Most labels a worker registers with (levels of a topology).
pub const MAX_LABELS: usize = 16;

/// An argv: at least a program, no NUL bytes, within the size limits.
fn command(field: &str, argv: &[String]) -> Result<(), Status> {
    if argv.len() > MAX_ARGS {
        return Err(invalid(format!(
            "{field}: {} arguments, at most {MAX_ARGS}",
            argv.len()
        )));
    }
    too_long(field, argv.iter().map(String::len).sum(), MAX_COMMAND_BYTES)?;
    if argv.is_empty() || argv[0].trim().is_empty() {
        return Err(invalid(format!(
            "{field}: must name a program and its arguments (argv, no shell)"
        )));
    }
    if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
        return Err(invalid(format!("{field}[{i}]: contains a NUL byte")));
    }
    Ok(())
}

/// A submission on its own (the cluster's size is the handler's check).
pub fn submission(j: &JobSubmission) -> Result<(), Status> {
    too_long("name", j.name.len(), MAX_NAME_BYTES)?;
    too_long(
        "user",
        j.user.as_ref().map_or(0, String::len),
        MAX_NAME_BYTES,
    )?;
    too_long(
        "team",
        j.team.as_ref().map_or(0, String::len),
        MAX_NAME_BYTES,
    )?;
    too_long(
        "model",
        j.model.as_ref().map_or(0, String::len),
        MAX_NAME_BYTES,
    )?;
    too_long("idempotency_key", j.idempotency_key.len(), MAX_KEY_BYTES)?;
    command("command", &j.command)?;
    if j.metrics.len() > MAX_METRICS {
        return Err(invalid(format!(
            "metrics: {} entries, at most {MAX_METRICS}",
            j.metrics.len()
        )));
    }
    if let Some(k) = j.metrics.keys().find(|k| k.len() > MAX_KEY_BYTES) {
        return Err(invalid(format!(
            "metrics: a key of {} bytes, at most {MAX_KEY_BYTES}",
            k.len()
        )));
    }
    if let Some((k, _)) = j
        .metrics
        .iter()
        .find(|(k, v)| k.is_empty() || !v.is_finite())
    {
        return Err(invalid(format!(
            "metrics[{k:?}]: keys must be non-empty and values finite"
        )));
    }
    if j.gpus == 0 {
        return Err(invalid(
            "gpus: must be at least 1 (a job without GPUs runs in simulation only, `blox sim`)",
        ));
    }
    if let Some(m) = j.gpu_milli {
        if !(1..blox_core::GPU_MILLI).contains(&m) || j.gpus != 1 {
            return Err(invalid(format!(
                "gpu_milli: {m} with gpus = {}; a share is 1-999 thousandths of one GPU (gpus = 1)",
                j.gpus
            )));
        }
    }
    if j.batch_size == Some(0) {
        return Err(invalid("batch_size: must be at least 1"));
    }
    if let Some(d) = j.duration_s {
        if !(d > 0.0 && d.is_finite()) {
            return Err(invalid("duration_s: must be a positive number of seconds"));
        }
    }
    limits(j.memory_gb, j.max_processes)
}

/// The most processes a launch may be allowed (the kernel's pid limit).
pub const MAX_PROCESSES: u32 = 4_194_304;

/// A job's limits (`memory_gb`, `max_processes`) on their own.
fn limits(memory_gb: Option<f64>, max_processes: Option<u32>) -> Result<(), Status> {
    if let Some(m) = memory_gb {
        if !(m > 0.0 && m.is_finite() && m <= 1e6) {
            return Err(invalid(format!(
                "memory_gb: {m}; must be a positive number of GB (at most 1000000)"
            )));
        }
    }
    if let Some(p) = max_processes {
        if p == 0 || p > MAX_PROCESSES {
            return Err(invalid(format!(
                "max_processes: {p}; must be from 1 to {MAX_PROCESSES}"
            )));
        }
    }
    Ok(())
}

pub fn submit(r: &SubmitRequest) -> Result<&JobSubmission, Status> {
    let j = r.job.as_ref().ok_or_else(|| invalid("job: missing"))?;
    submission(j)?;
    Ok(j)
}

pub fn status(r: &StatusRequest) -> Result<(), Status> {
    if r.job_ids.contains(&0) {
        return Err(invalid("job_ids: 0 is no job (job ids start at 1)"));
    }
    if r.job_ids.len() > MAX_STATUS_IDS {
        return Err(invalid(format!(
            "job_ids: {} ids, at most {MAX_STATUS_IDS}",
            r.job_ids.len()
        )));
    }
    if let Some(p) = r.phases.iter().find(|p| JobPhase::try_from(**p).is_err()) {
        return Err(invalid(format!("phases: {p} is no JobPhase")));
    }
    Ok(())
}

pub fn cancel(r: &CancelRequest) -> Result<(), Status> {
    if r.job_id == 0 {
        return Err(invalid("job_id: required (job ids start at 1)"));
    }
    Ok(())
}

pub fn register(r: &RegisterRequest) -> Result<(), Status> {
    if r.gpus.is_empty() {
        return Err(invalid("gpus: a worker needs at least 1"));
    }
    if r.gpus.len() > MAX_WORKER_GPUS {
        return Err(invalid(format!(
            "gpus: {} devices, at most {MAX_WORKER_GPUS}",
            r.gpus.len()
        )));
    }
    too_long("name", r.name.len(), MAX_NAME_BYTES)?;
    too_long("address", r.address.len(), MAX_NAME_BYTES)?;
    too_long("containment", r.containment.len(), 1024)?;
    if (r.job_uid_first == 0) != (r.job_uid_last == 0) || r.job_uid_first > r.job_uid_last {
        return Err(invalid(format!(
            "job_uid_first, job_uid_last: {}-{}; both 0 (no uids), or 0 < first <= last",
            r.job_uid_first, r.job_uid_last
        )));
    }
    if r.labels.len() > MAX_LABELS {
        return Err(invalid(format!(
            "labels: {} of them, at most {MAX_LABELS} (one per topology level)",
            r.labels.len()
        )));
    }
    for (k, v) in &r.labels {
        too_long("labels key", k.len(), MAX_NAME_BYTES)?;
        too_long("labels value", v.len(), MAX_NAME_BYTES)?;
    }
    for g in &r.gpus {
        too_long("gpus[].name", g.name.len(), MAX_NAME_BYTES)?;
        too_long("gpus[].uuid", g.uuid.len(), MAX_NAME_BYTES)?;
        if !(g.memory_gb.is_finite() && g.memory_gb >= 0.0) {
            return Err(invalid(format!(
                "gpus[{}].memory_gb: must be a non-negative number",
                g.index
            )));
        }
        if !(g.relative_time.is_finite() && g.relative_time >= 0.0) {
            return Err(invalid(format!(
                "gpus[{}].relative_time: must be a non-negative number (0: not measured)",
                g.index
            )));
        }
    }
    let mut seen = HashSet::new();
    if let Some(g) = r.gpus.iter().find(|g| !seen.insert(g.index)) {
        return Err(invalid(format!("gpus: index {} appears twice", g.index)));
    }
    if !(r.host_mem_gb.is_finite() && r.host_mem_gb >= 0.0) {
        return Err(invalid("host_mem_gb: must be a non-negative number"));
    }
    if r.address.is_empty() {
        return Err(invalid(
            "address: the worker's own service address is required",
        ));
    }
    running_launches(&r.running, r.gpus.len())
}

/// Launches a worker may run at once and report when it registers again:
/// one per GPU, or more where they share GPUs.
pub const MAX_REGISTERED_LAUNCHES: usize = MAX_WORKER_GPUS;

/// The launches a worker registering again reports: each on GPUs of its
/// own (none in two) or sharing one (their thousandths at most 1000, none
/// beside a whole holder), its ranks inside its world, one launch per job.
fn running_launches(running: &[RunningLaunch], gpus: usize) -> Result<(), Status> {
    let most = gpus.saturating_mul(blox_core::GPU_MILLI as usize);
    if running.len() > most.min(MAX_REGISTERED_LAUNCHES) {
        return Err(invalid(format!(
            "running: {} launches on {gpus} GPUs (each holds at least one, or a share of one; at most {MAX_WORKER_GPUS})",
            running.len()
        )));
    }
    let mut jobs = HashSet::new();
    let mut held = HashSet::new();
    // Thousandths of each shared GPU.
    let mut shared: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    for (i, l) in running.iter().enumerate() {
        let field = |f: &str| format!("running[{i}].{f}");
        let Some(lr) = l.launch.filter(|lr| lr.job_id > 0 && lr.launch > 0) else {
            return Err(invalid(format!(
                "{}: missing, or job 0 / launch 0",
                field("launch")
            )));
        };
        if !jobs.insert(lr.job_id) {
            return Err(invalid(format!(
                "{}: job {} appears twice",
                field("launch"),
                lr.job_id
            )));
        }
        if l.gpus.is_empty() {
            return Err(invalid(format!(
                "{}: a launch holds at least 1",
                field("gpus")
            )));
        }
        if let Some(g) = l.gpus.iter().find(|g| **g as usize >= gpus) {
            return Err(invalid(format!(
                "{}: this worker has {gpus} GPUs; there is no GPU {g}",
                field("gpus")
            )));
        }
        share(&field("gpu_milli"), l.gpu_milli, l.gpus.len())?;
        match l.gpu_milli {
            None => {
                if let Some(g) = l
                    .gpus
                    .iter()
                    .find(|g| !held.insert(**g) || shared.contains_key(g))
                {
                    return Err(invalid(format!("{}: GPU {g} is held twice", field("gpus"))));
                }
            }
            Some(m) => {
                let g = l.gpus[0];
                let e = shared.entry(g).or_insert(0);
                *e += m;
                if held.contains(&g) || *e > blox_core::GPU_MILLI {
                    return Err(invalid(format!(
                        "{}: GPU {g} is shared past 1000 thousandths, or also held whole",
                        field("gpu_milli")
                    )));
                }
            }
        }
        let end = l.first_rank.checked_add(l.ranks);
        if l.ranks == 0 || end.is_none_or(|e| e > l.world_size) {
            return Err(invalid(format!(
                "{}: ranks {} + {} do not fit a world of {}",
                field("first_rank"),
                l.first_rank,
                l.ranks,
                l.world_size
            )));
        }
        if l.batch_size == Some(0) {
            return Err(invalid(format!(
                "{}: must be at least 1",
                field("batch_size")
            )));
        }
        if !(l.running_s.is_finite() && l.running_s >= 0.0) {
            return Err(invalid(format!(
                "{}: must be a non-negative number",
                field("running_s")
            )));
        }
        if l.startup_s.is_some_and(|s| !(s.is_finite() && s >= 0.0)) {
            return Err(invalid(format!(
                "{}: must be a non-negative number",
                field("startup_s")
            )));
        }
    }
    Ok(())
}

pub fn heartbeat(r: &HeartbeatRequest) -> Result<(), Status> {
    too_long("checkpoint_probe", r.checkpoint_probe.len(), MAX_NAME_BYTES)?;
    if r.running.len() > MAX_WORKER_LAUNCHES {
        return Err(invalid(format!(
            "running: {} launches, at most {MAX_WORKER_LAUNCHES}",
            r.running.len()
        )));
    }
    if r.busy_uids.len() > MAX_WORKER_LAUNCHES {
        return Err(invalid(format!(
            "busy_uids: {} uids, at most {MAX_WORKER_LAUNCHES}",
            r.busy_uids.len()
        )));
    }
    if r.kept.len() > MAX_WORKER_LAUNCHES {
        return Err(invalid(format!(
            "kept: {} launches, at most {MAX_WORKER_LAUNCHES}",
            r.kept.len()
        )));
    }
    Ok(())
}

pub fn report_exit(r: &ExitReport) -> Result<(), Status> {
    if r.launch.is_none() {
        return Err(invalid("launch: missing"));
    }
    too_long("reason", r.reason.len(), MAX_REASON_BYTES)?;
    if !(r.exited_s_ago >= 0.0 && r.exited_s_ago.is_finite()) {
        return Err(invalid("exited_s_ago: must be a non-negative number"));
    }
    Ok(())
}

pub fn push_metrics(r: &MetricBatch) -> Result<(), Status> {
    if r.samples.len() > MAX_BATCH_SAMPLES {
        return Err(invalid(format!(
            "samples: {} in one batch, at most {MAX_BATCH_SAMPLES}",
            r.samples.len()
        )));
    }
    for (i, s) in r.samples.iter().enumerate() {
        if s.launch.is_none() || s.key.is_empty() {
            return Err(invalid(format!("samples[{i}]: needs a launch and a key")));
        }
        if s.key.len() > MAX_KEY_BYTES {
            return Err(invalid(format!(
                "samples[{i}].key: {} bytes, at most {MAX_KEY_BYTES}",
                s.key.len()
            )));
        }
        if !s.value.is_finite() {
            return Err(invalid(format!(
                "samples[{i}].value: {} is not a finite number",
                s.value
            )));
        }
    }
    Ok(())
}

/// A launch on its own (its GPUs against the worker's are the handler's).
pub fn launch(r: &LaunchRequest) -> Result<LaunchRef, Status> {
    let l = r.launch.ok_or_else(|| invalid("launch: missing"))?;
    command("command", &r.command)?;
    if r.gpus.is_empty() {
        return Err(invalid("gpus: a launch needs at least 1"));
    }
    if r.gpus.len() > MAX_WORKER_GPUS {
        return Err(invalid(format!(
            "gpus: {} devices, at most {MAX_WORKER_GPUS}",
            r.gpus.len()
        )));
    }
    too_long("checkpoint_dir", r.checkpoint_dir.len(), MAX_PATH_BYTES)?;
    too_long("coord_dir", r.coord_dir.len(), MAX_PATH_BYTES)?;
    too_long("master_addr", r.master_addr.len(), MAX_NAME_BYTES)?;
    too_long("worker_id", r.worker_id.len(), MAX_NAME_BYTES)?;
    // A directory name the worker joins onto its workdir: nothing else.
    let key = |c: &str| {
        c.len() == 17 && c.starts_with('c') && c[1..].bytes().all(|b| b.is_ascii_hexdigit())
    };
    if !(r.cluster.is_empty() || key(&r.cluster)) {
        return Err(invalid(
            "cluster: must be `c` and 16 hex digits (the job table's identity), or empty",
        ));
    }
    for (field, path) in [
        ("checkpoint_dir", &r.checkpoint_dir),
        ("coord_dir", &r.coord_dir),
    ] {
        if path.contains('\0') {
            return Err(invalid(format!("{field}: contains a NUL byte")));
        }
    }
    if r.batch_size == Some(0) {
        return Err(invalid("batch_size: must be at least 1"));
    }
    share("gpu_milli", r.gpu_milli, r.gpus.len())?;
    limits(r.memory_gb, r.max_processes)?;
    Ok(l)
}

/// A launch's share: 1-1000 thousandths of exactly one GPU.
fn share(field: &str, milli: Option<u32>, gpus: usize) -> Result<(), Status> {
    match milli {
        Some(m) if !(1..=blox_core::GPU_MILLI).contains(&m) || gpus != 1 => Err(invalid(format!(
            "{field}: {m} thousandths of {gpus} GPUs; a share is 1-1000 thousandths of one GPU"
        ))),
        _ => Ok(()),
    }
}

pub fn revoke(r: &RevokeRequest) -> Result<LaunchRef, Status> {
    let l = r.launch.ok_or_else(|| invalid("launch: missing"))?;
    if !(r.grace_s >= 0.0 && r.grace_s <= MAX_GRACE_S) {
        return Err(invalid(format!(
            "grace_s: must be between 0 and {MAX_GRACE_S} seconds"
        )));
    }
    Ok(l)
}

pub fn reconfigure(r: &ReconfigureRequest) -> Result<LaunchRef, Status> {
    let l = r.launch.ok_or_else(|| invalid("launch: missing"))?;
    if r.batch_size == 0 {
        return Err(invalid("batch_size: must be at least 1"));
    }
    Ok(l)
}

/// Decodes `bytes` as the services' codec does: a message that cannot be
/// decoded is `INVALID_ARGUMENT` ([`crate::codec::StrictCodec`]).
pub fn decode<M: Message + Default>(bytes: &[u8]) -> Result<M, Status> {
    M::decode(bytes).map_err(|e| invalid(format!("the message cannot be decoded: {e}")))
}

/// The RPCs [`check_rpc`] knows, by number.
pub const RPCS: [&str; 10] = [
    "Submit",
    "Status",
    "Cancel",
    "Register",
    "Heartbeat",
    "ReportExit",
    "PushMetrics",
    "Launch",
    "Revoke",
    "Reconfigure",
];

/// Decodes `bytes` as the request of RPC `which` (modulo [`RPCS`]) and
/// checks it. Every error is `INVALID_ARGUMENT`; it never panics.
pub fn check_rpc(which: u8, bytes: &[u8]) -> Result<(), Status> {
    match which as usize % RPCS.len() {
        0 => submit(&decode(bytes)?).map(|_| ()),
        1 => status(&decode(bytes)?),
        2 => cancel(&decode(bytes)?),
        3 => register(&decode(bytes)?),
        4 => heartbeat(&decode(bytes)?),
        5 => report_exit(&decode(bytes)?),
        6 => push_metrics(&decode(bytes)?),
        7 => launch(&decode(bytes)?).map(|_| ()),
        8 => revoke(&decode(bytes)?).map(|_| ()),
        _ => reconfigure(&decode(bytes)?).map(|_| ()),
    }
}
