//! What a submission is checked against: whom it runs as, a key used
//! before, the cluster as it is (its GPUs, the largest node's memory) and
//! what may wait (jobs and bytes, in all and per user); the job spec it
//! becomes, and how refusals read (a retry hint, a job table that cannot be
//! written).

use super::super::{Hub, RuntimeConfig};
use crate::auth::{Principal, Role};
use crate::proto::JobSubmission;
use blox_core::JobSpec;
use tonic::Status;

/// Whom a submission runs as: a tenant submits as themselves (an admin as
/// anyone, as themselves by default); a reader submits nothing.
pub(super) fn submit_as(who: &Principal, j: &mut JobSubmission) -> Result<(), Status> {
    match (&who.user, who.role) {
        (_, Role::Reader) => {
            return Err(Status::permission_denied(
                "a reader's token reads /metrics and the dashboard; it submits no job",
            ))
        }
        (Some(me), Role::User) => match j.user.as_deref() {
            Some(u) if !u.is_empty() && u != me => {
                return Err(Status::permission_denied(format!(
                    "user: this token is `{me}`'s; it submits as `{me}` only (leave `user` unset)"
                )))
            }
            _ => j.user = Some(me.clone()),
        },
        (Some(me), Role::Admin) => {
            if j.user.as_deref().is_none_or(str::is_empty) {
                j.user = Some(me.clone());
            }
        }
        (None, _) => {}
    }
    Ok(())
}

/// The answer to a submission whose idempotency key (`key`, the user's)
/// was used before: the same job's id, a refusal for a different
/// submission, or "retry" while the first is being written. `None`: a new
/// key.
pub(super) fn retried(h: &Hub, key: &str, j: &JobSubmission) -> Option<Result<u64, Status>> {
    let &id = h.keys.get(key)?;
    Some(match h.jobs.get(&id).and_then(|r| r.job.as_ref()) {
        Some(first) if first == j => {
            tracing::info!(job = id, "submission retried with the same idempotency key");
            Ok(id)
        }
        Some(_) => Err(Status::already_exists(format!(
            "idempotency_key: already used for job {id}, a different submission"
        ))),
        None => Err(retry_after(
            Status::unavailable(format!(
                "idempotency_key: job {id} with this key is being written; retry"
            )),
            20,
        )),
    })
}

/// What a submission is held to besides its own fields: the cluster as it
/// is, the size of one job, and what may wait, in all and per user, in
/// jobs and in bytes.
pub(super) struct Bounds<'a> {
    pub(super) cfg: &'a RuntimeConfig,
    /// The round's length: the retry hint of a refusal for what waits.
    pub(super) round_s: f64,
}

impl Bounds<'_> {
    /// Checks `j` against the hub as it is; the error names the bound.
    pub(super) fn check(&self, h: &Hub, j: &JobSubmission) -> Result<(), Status> {
        // Workers in the cluster (alive, and seeing the checkpoints).
        let alive = h.workers.values().filter(|w| w.alive && w.verified).count();
        let gpus: u32 = (h.workers.values())
            .filter(|w| w.alive && w.verified)
            .map(|w| w.gpus.len() as u32)
            .sum();
        check_submission(j, gpus, alive)?;
        let size = prost::Message::encoded_len(j);
        if size > self.cfg.max_job_bytes {
            let command: usize = j.command.iter().map(String::len).sum();
            return Err(Status::invalid_argument(format!(
                "job: {size} bytes ({command} of them its command's {} arguments), at most {} ([runtime] max_job_bytes)",
                j.command.len(),
                self.cfg.max_job_bytes
            )));
        }
        let largest = (h.workers.values())
            .filter(|w| w.alive && w.verified)
            .map(|w| w.host_mem_gb)
            .fold(0.0, f64::max);
        check_memory(j, largest)?;
        self.check_waiting(h, j, size)
    }

    /// Bounded: what waits, in all and per user (as of the last round,
    /// plus what arrived since), in jobs and in bytes (`size`: `j`'s).
    fn check_waiting(&self, h: &Hub, j: &JobSubmission, size: usize) -> Result<(), Status> {
        let cfg = self.cfg;
        let busy = |status: Status| retry_after(status, (self.round_s * 1e3) as u64);
        let total = h.waiting_total + h.submissions.len();
        if total >= cfg.max_waiting_jobs {
            return Err(busy(Status::resource_exhausted(format!(
                "{total} jobs wait already, the most this scheduler holds ([runtime] max_waiting_jobs = {}); retry once some have started (in a round: retry-after-ms)",
                cfg.max_waiting_jobs
            ))));
        }
        let user = j.user.as_deref().unwrap_or("");
        let (queued, queued_bytes) = h.submissions.of_user(user);
        let mine = h.waiting_by_user.get(user).copied().unwrap_or(0) + queued;
        if mine >= cfg.max_waiting_per_user {
            return Err(busy(Status::resource_exhausted(format!(
                "user `{user}` has {mine} jobs waiting already, the most one user may ([runtime] max_waiting_per_user = {}); retry once some have started (in a round: retry-after-ms)",
                cfg.max_waiting_per_user
            ))));
        }
        let my_bytes = h.waiting_bytes_by_user.get(user).copied().unwrap_or(0) + queued_bytes;
        let all_bytes = h.waiting_bytes + h.submissions.bytes();
        if my_bytes + size as u64 > cfg.max_waiting_bytes_per_user as u64 {
            return Err(busy(Status::resource_exhausted(format!(
                "user `{user}` has {my_bytes} bytes of submissions waiting already; this one ({size} bytes) would pass [runtime] max_waiting_bytes_per_user = {}; retry once some have started (in a round: retry-after-ms)",
                cfg.max_waiting_bytes_per_user
            ))));
        }
        if all_bytes + size as u64 > cfg.max_waiting_bytes as u64 {
            return Err(busy(Status::resource_exhausted(format!(
                "{all_bytes} bytes of submissions wait already; this one ({size} bytes) would pass [runtime] max_waiting_bytes = {}; retry once some have started (in a round: retry-after-ms)",
                cfg.max_waiting_bytes
            ))));
        }
        Ok(())
    }
}

/// Checks a submission against the cluster as it is (the handler has
/// checked it on its own with [`validate::submit`]); the error names the
/// field.
fn check_submission(j: &JobSubmission, cluster_gpus: u32, workers: usize) -> Result<(), Status> {
    if workers == 0 {
        return Err(Status::failed_precondition(
            "no worker has registered yet: the cluster has no GPUs",
        ));
    }
    if j.gpus > cluster_gpus {
        return Err(Status::invalid_argument(format!(
            "gpus: asks for {} but the cluster has {cluster_gpus} GPUs on {workers} workers",
            j.gpus
        )));
    }
    Ok(())
}

/// A job's memory against the largest node's (`max_node_gb`, 0: no worker
/// reported its memory).
fn check_memory(j: &JobSubmission, max_node_gb: f64) -> Result<(), Status> {
    match j.memory_gb {
        Some(m) if max_node_gb > 0.0 && m > max_node_gb => Err(Status::invalid_argument(format!(
            "memory_gb: asks for {m} GB on each node, but the largest node has {max_node_gb:.1} GB"
        ))),
        _ => Ok(()),
    }
}

pub(in crate::scheduler) fn spec_of(id: u64, j: &JobSubmission, arrival_s: f64) -> JobSpec {
    let mut s = JobSpec::new(id, arrival_s, j.gpus);
    s.name = if j.name.is_empty() {
        format!("job-{id}")
    } else {
        j.name.clone()
    };
    s.command = j.command.clone();
    s.batch_size = j.batch_size;
    s.user = j.user.clone();
    s.team = j.team.clone().filter(|t| !t.is_empty());
    s.model = j.model.clone();
    s.expected_duration_s = j.duration_s;
    s.metrics = j.metrics.iter().map(|(k, v)| (k.clone(), *v)).collect();
    s.gpu_milli = j.gpu_milli;
    s
}

/// `status` with a hint of how long to wait before retrying, milliseconds,
/// in its `retry-after-ms` metadata (clients that retry read it).
fn retry_after(mut status: Status, ms: u64) -> Status {
    status
        .metadata_mut()
        .insert("retry-after-ms", ms.max(1).into());
    status
}

/// A write the job table refused (a full disk): nothing was accepted.
pub(super) fn table_unavailable(e: crate::store::StoreError) -> Status {
    Status::unavailable(format!(
        "{e}: the job table cannot be written, so nothing was accepted; running jobs go on; retry later"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusal_carries_its_retry_hint_in_milliseconds() {
        let s = super::retry_after(tonic::Status::resource_exhausted("full"), 1500);
        assert_eq!(s.metadata().get("retry-after-ms").unwrap(), "1500");
        let s = super::retry_after(tonic::Status::unavailable("busy"), 0);
        assert_eq!(s.metadata().get("retry-after-ms").unwrap(), "1");
    }
}
