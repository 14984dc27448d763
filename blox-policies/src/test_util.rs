//! Small builders for policy tests.

use blox_core::*;

pub fn info(now_s: f64) -> RoundInfo {
    RoundInfo {
        round: 0,
        now_s,
        round_s: 300.0,
    }
}

/// A queued job.
pub fn job(id: u64, arrival_s: f64, gpus: u32) -> Job {
    let mut j = Job::new(JobSpec::new(id, arrival_s, gpus));
    j.status = JobStatus::Queued;
    j
}

/// Puts `job` into `state`, running on `gpus` if any are given.
pub fn add(state: &mut JobState, cluster: &mut ClusterState, mut j: Job, gpus: &[u32]) {
    if !gpus.is_empty() {
        let ids: Vec<GpuId> = gpus.iter().map(|g| GpuId(*g)).collect();
        cluster.assign(j.id(), &ids).unwrap();
        j.status = JobStatus::Running;
        j.allocation = ids;
    }
    state.insert(j);
}
