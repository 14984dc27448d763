//! The status view: what `Status` answers (and `blox status` shows) — every
//! job's record as the job table holds it, a page at a time, the workers
//! with their last heartbeat, the rounds run, the active policies and the
//! last invalid decision a policy made.

use super::jobs::info_of;
use super::Hub;
use crate::auth::Principal;
use crate::proto::*;
use prost::Message;
use tonic::Status;

/// The most jobs in one reply.
pub const MAX_PAGE_JOBS: usize = 1000;
/// Jobs are added to a reply until it holds about this many bytes (the
/// transport's default limit is 4 MiB).
pub const MAX_PAGE_BYTES: usize = 2 << 20;

/// The most workers in one reply, and about how many bytes of them.
pub const MAX_PAGE_WORKERS: usize = 1000;
pub const MAX_WORKER_BYTES: usize = 1 << 20;

/// The reply to `req` (see `StatusRequest` in blox.proto): the jobs it names
/// (an unknown id is `NOT_FOUND`), or a page of all jobs; every worker.
///
/// As `who` sees it: a tenant of role `user` sees only their own
/// jobs (another's named id is `NOT_FOUND`).
pub(super) fn reply_for(
    h: &Hub,
    req: &StatusRequest,
    who: &Principal,
) -> Result<StatusReply, Status> {
    reply_matching(h, req, None, who)
}

/// The user a job was submitted as.
fn owner(r: &JobRecord) -> Option<&str> {
    r.job.as_ref().and_then(|j| j.user.as_deref())
}

/// [`reply`], a page of only the jobs whose lower-cased name contains
/// `name` (the dashboard's filter), when given.
/// A job's command: its submission's (a record keeps it once), or what an
/// older record kept in its info.
fn command_of(r: &JobRecord) -> &[String] {
    match r.job.as_ref() {
        Some(j) if !j.command.is_empty() => &j.command,
        _ => r.info.as_ref().map_or(&[], |i| &i.command[..]),
    }
}

pub(super) fn reply_matching(
    h: &Hub,
    req: &StatusRequest,
    name: Option<&str>,
    who: &Principal,
) -> Result<StatusReply, Status> {
    let mine = |r: &JobRecord| who.role.sees_all() || who.may_touch(owner(r));
    let mut next_after_id = 0;
    let jobs = if req.workers_only {
        Vec::new()
    } else if req.job_ids.is_empty() {
        let limit = match req.limit as usize {
            0 => MAX_PAGE_JOBS,
            n => n.min(MAX_PAGE_JOBS),
        };
        let mut out = Vec::new();
        let mut bytes = 0;
        let from = req.after_id.saturating_add(1);
        // Through the phase index: only the jobs in the phases asked for.
        for (id, r) in h.jobs.walk_from(from, &req.phases) {
            if !mine(r) {
                continue;
            }
            let info = info_of(r);
            if name.is_some_and(|n| !info.name.to_lowercase().contains(n)) {
                continue;
            }
            let len = info.encoded_len() + command_of(r).iter().map(|a| a.len() + 2).sum::<usize>();
            if out.len() >= limit || (!out.is_empty() && bytes + len > MAX_PAGE_BYTES) {
                next_after_id = out.last().map_or(id - 1, |j: &JobInfo| j.id);
                break;
            }
            bytes += len;
            let mut info = info.clone();
            info.command = command_of(r).to_vec();
            info.prediction = h.forecasts.of(id);
            out.push(info);
        }
        out
    } else {
        // Checked by `validate::status` (no 0, at most 1000 ids).
        req.job_ids
            .iter()
            .map(|id| {
                h.jobs
                    .get(id)
                    .filter(|r| mine(r))
                    .map(|r| {
                        let mut info = info_of(r).clone();
                        info.command = command_of(r).to_vec();
                        info.prediction = h.forecasts.of(*id);
                        info
                    })
                    .ok_or_else(|| Status::not_found(format!("job {id} is not known")))
            })
            .collect::<Result<_, _>>()?
    };
    // A page of workers, in id order, after `workers_after`.
    let mut workers = Vec::new();
    let mut next_workers_after = String::new();
    if !req.no_workers {
        let from = std::ops::Bound::Excluded(req.workers_after.clone());
        let mut bytes = 0;
        let range = if req.workers_after.is_empty() {
            h.workers.range::<String, _>(..)
        } else {
            h.workers.range((from, std::ops::Bound::Unbounded))
        };
        // A worker declared gone whose address registered again reads as
        // that worker's earlier self (each registration gets a new id).
        let again: std::collections::HashMap<&str, &str> = h
            .workers
            .iter()
            .filter(|(_, w)| w.alive)
            .map(|(id, w)| (w.address.as_str(), id.as_str()))
            .collect();
        for (id, w) in range {
            let info = WorkerInfo {
                id: id.clone(),
                address: w.address.clone(),
                gpus: w.gpus.clone(),
                alive: w.alive && w.verified,
                last_heartbeat_s_ago: w.last_seen.elapsed().as_secs_f64(),
                problem: if w.alive && !w.verified {
                    "not in the cluster: it has not shown it sees the shared checkpoint storage (checkpoint_probe)".into()
                } else if w.alive && !w.reported.is_empty() {
                    format!("not in the cluster yet: it registered again with {} running launches, which are adopted once every rank of them is reported, or revoked when the restart hold ends", w.reported.len())
                } else if let Some(note) = w
                    .node
                    .filter(|_| w.alive)
                    .and_then(|n| h.node_notes.get(&n.0))
                {
                    format!("not in the cluster: {note}")
                } else if !w.alive {
                    match again.get(w.address.as_str()) {
                        Some(now) => format!("gone: registered again as {now}"),
                        None => "gone: no heartbeat within worker_timeout_s".into(),
                    }
                } else {
                    String::new()
                },
                labels: w.labels.clone().into_iter().collect(),
                cpus: w.cpus,
                host_mem_gb: w.host_mem_gb,
                node: w.node.map(|n| n.0),
                containment: w.containment.clone(),
                whole_gpus_only: !w.shares_gpus,
            };
            let len = info.encoded_len();
            if workers.len() >= MAX_PAGE_WORKERS
                || (!workers.is_empty() && bytes + len > MAX_WORKER_BYTES)
            {
                next_workers_after = workers
                    .last()
                    .map_or(String::new(), |w: &WorkerInfo| w.id.clone());
                break;
            }
            bytes += len;
            workers.push(info);
        }
    }
    Ok(StatusReply {
        jobs,
        workers,
        rounds: h.rounds,
        policy: h.policy.clone(),
        last_error: h.last_error.clone(),
        next_after_id,
        total_jobs: h.jobs.len() as u64,
        metrics_dropped: h.metrics_dropped,
        // Filled in by the caller, which holds the round timings.
        round_p50_s: 0.0,
        round_p99_s: 0.0,
        compacted_jobs: h.compacted,
        forecast: h.forecasts.info.clone(),
        next_workers_after,
        total_workers: h.workers.len() as u64,
    })
}
