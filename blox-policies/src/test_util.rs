//! Small builders for policy tests.

use blox_core::*;

pub fn info(now_s: f64) -> RoundInfo {
    RoundInfo {
        round: 0,
        now_s,
        round_s: 300.0,
        wall_clock: false,
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

/// Applies a schedule as the loop and the `explicit` placement would: every
/// runnable job is released, then each demand runs on its named GPUs at its
/// batch.
pub fn apply(state: &mut JobState, cluster: &mut ClusterState, s: &Schedule) {
    let ids: Vec<JobId> = state.runnable().map(|j| j.id()).collect();
    for id in ids {
        let j = state.get_mut(id).unwrap();
        if !j.allocation.is_empty() {
            cluster.release_job(id);
        }
        j.allocation.clear();
        j.status = JobStatus::Queued;
    }
    for d in &s.entries {
        let gpus = d.gpu_ids.clone().unwrap();
        cluster.assign(d.job, &gpus).unwrap();
        let j = state.get_mut(d.job).unwrap();
        j.allocation = gpus;
        j.status = JobStatus::Running;
        j.launches += 1;
        if d.batch_size.is_some() {
            j.current_batch_size = d.batch_size;
        }
    }
}
