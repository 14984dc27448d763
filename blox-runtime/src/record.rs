//! What the real backends ([`crate::LocalBackend`],
//! [`crate::scheduler::ClusterBackend`]) keep per job, and how an ended
//! launch settles the job: finished, back to the queue to resume from its
//! checkpoint, or failed once it crashed more than `max_retries` times.

use blox_core::*;
use std::collections::HashMap;

/// Launches, crashes and service of one job.
#[derive(Clone, Debug, Default)]
pub(crate) struct Record {
    pub launches: u32,
    pub crashes: u32,
    pub run_time_s: f64,
    pub attained_gpu_s: f64,
}

/// How one launch ended.
#[derive(Clone, Debug)]
pub(crate) struct Ended {
    pub job: JobId,
    pub at_s: f64,
    pub code: Option<i32>,
    pub finished: bool,
    pub reason: String,
    /// The job's own fault (a crash, a program that cannot start), which
    /// counts against its retries; a lost worker does not.
    pub blame: bool,
}

impl Ended {
    pub fn finished(job: JobId, at_s: f64) -> Self {
        Ended {
            job,
            at_s,
            code: Some(0),
            finished: true,
            reason: String::new(),
            blame: false,
        }
    }

    /// A crash; the reason is the exit status unless one is given.
    pub fn crashed(job: JobId, at_s: f64, code: Option<i32>, reason: Option<String>) -> Self {
        let reason = reason.unwrap_or_else(|| match code {
            Some(c) => format!("exit status {c}"),
            None => "killed by a signal".into(),
        });
        Ended {
            job,
            at_s,
            code,
            finished: false,
            reason,
            blame: true,
        }
    }
}

/// Applies ended launches to their jobs, then every job's service so far.
pub(crate) fn settle(
    ended: Vec<Ended>,
    records: &mut HashMap<JobId, Record>,
    jobs: &mut JobState,
    max_retries: u32,
) {
    for e in ended {
        let Some(job) = jobs.get_mut(e.job) else {
            continue;
        };
        if job.status.is_terminal() {
            continue;
        }
        if e.finished {
            job.status = JobStatus::Finished;
            job.finish_s = Some(e.at_s);
            job.progress = 1.0;
            continue;
        }
        let rec = records.entry(e.job).or_default();
        if e.blame {
            rec.crashes += 1;
        }
        if rec.crashes > max_retries {
            tracing::warn!(job = %e.job, "failed after {} attempts: {}", rec.crashes, e.reason);
            job.status = JobStatus::Failed;
            job.finish_s = Some(e.at_s);
            job.end_reason = Some(format!("failed {} times; last: {}", rec.crashes, e.reason));
        } else {
            tracing::warn!(job = %e.job, code = ?e.code, "ended without finishing ({}); it goes back to the queue and resumes from its checkpoint", e.reason);
            job.status = JobStatus::Queued;
        }
    }
    for (id, rec) in records.iter() {
        if let Some(job) = jobs.get_mut(*id) {
            job.run_time_s = rec.run_time_s;
            job.attained_service_gpu_s = rec.attained_gpu_s;
        }
    }
}
