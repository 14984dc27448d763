//! What a submission is checked against (the cluster as it is, the largest
//! node's memory), the job spec it becomes, and how refusals read (a retry
//! hint, a job table that cannot be written).

use crate::proto::JobSubmission;
use blox_core::JobSpec;
use tonic::Status;

/// Checks a submission against the cluster as it is (the handler has
/// checked it on its own with [`validate::submit`]); the error names the
/// field.
pub(in crate::scheduler) fn check_submission(
    j: &JobSubmission,
    cluster_gpus: u32,
    workers: usize,
) -> Result<(), Status> {
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
pub(in crate::scheduler) fn check_memory(
    j: &JobSubmission,
    max_node_gb: f64,
) -> Result<(), Status> {
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
pub(super) fn retry_after(mut status: Status, ms: u64) -> Status {
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
