//! The status view: what `Status` answers (and `blox status` shows) — every
//! job's record as the job table holds it, the workers with their last
//! heartbeat, the rounds run, the active policies and the last invalid
//! decision a policy made.

use super::table::info_of;
use super::Hub;
use crate::proto::*;
use tonic::Status;

/// The reply to `req`: the jobs it names (all when it names none; an
/// unknown id is `NOT_FOUND`) and every worker.
pub(super) fn reply(h: &Hub, req: &StatusRequest) -> Result<StatusReply, Status> {
    let jobs = if req.job_ids.is_empty() {
        h.jobs.values().map(|r| info_of(r).clone()).collect()
    } else {
        if req.job_ids.contains(&0) {
            return Err(Status::invalid_argument(
                "job_ids: 0 is no job (job ids start at 1)",
            ));
        }
        req.job_ids
            .iter()
            .map(|id| {
                h.jobs
                    .get(id)
                    .map(|r| info_of(r).clone())
                    .ok_or_else(|| Status::not_found(format!("job {id} is not known")))
            })
            .collect::<Result<_, _>>()?
    };
    let workers = h
        .workers
        .iter()
        .map(|(id, w)| WorkerInfo {
            id: id.clone(),
            address: w.address.clone(),
            gpus: w.gpus.clone(),
            alive: w.alive,
            last_heartbeat_s_ago: w.last_seen.elapsed().as_secs_f64(),
        })
        .collect();
    Ok(StatusReply {
        jobs,
        workers,
        rounds: h.rounds,
        policy: h.policy.clone(),
        last_error: h.last_error.clone(),
    })
}
