//! Alibaba's PAI GPU trace of 2020 (Weng et al., NSDI'22;
//! `alibaba/clusterdata`, `cluster-trace-gpu-v2020`), three of its tables,
//! as released (no header line; one is accepted):
//!
//! - `pai_job_table`: `job_name,inst_id,user,status,start_time,end_time` —
//!   `start_time` is the submission;
//! - `pai_task_table`: `job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type`
//!   — `plan_gpu` is per instance, in percent of a GPU;
//! - `pai_instance_table` (optional):
//!   `job_name,task_name,inst_name,worker_name,inst_id,status,start_time,end_time,machine`.
//!
//! A job asks for `⌈Σ_tasks inst_num · plan_gpu / 100⌉` GPUs (fractional
//! GPUs round up to whole ones), arrives at its submission (relative to the
//! first kept job's) and runs from its first task's launch to its last
//! task's end — or, with the instance table, from its first instance's
//! launch to its last instance's end. Jobs without GPU tasks, without a run
//! time (still running or waiting when the trace ends), in a state not asked
//! for, or with unreadable fields are counted by reason ([`Tally`]).

use super::stream::{in_submit_order, Stream, Tally, TraceJob};
use super::{PaiKeys, SimJob, WorkloadError};
use std::collections::HashMap;
use std::path::Path;

pub const JOB_COLUMNS: &[&str] = &[
    "job_name",
    "inst_id",
    "user",
    "status",
    "start_time",
    "end_time",
];
pub const TASK_COLUMNS: &[&str] = &[
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
];
pub const INSTANCE_COLUMNS: &[&str] = &[
    "job_name",
    "task_name",
    "inst_name",
    "worker_name",
    "inst_id",
    "status",
    "start_time",
    "end_time",
    "machine",
];

/// What the task (or instance) tables say about one job.
#[derive(Default)]
struct Work {
    /// Σ inst_num · plan_gpu, percent of a GPU.
    gpu_percent: f64,
    first_start: Option<f64>,
    last_end: Option<f64>,
    /// A task or instance without a start or end time.
    open: bool,
    /// Task rows seen.
    tasks: u32,
}

impl Work {
    fn span(&mut self, start: Option<f64>, end: Option<f64>) {
        match (start, end) {
            (Some(s), Some(e)) => {
                self.first_start = Some(self.first_start.map_or(s, |x| x.min(s)));
                self.last_end = Some(self.last_end.map_or(e, |x| x.max(e)));
            }
            _ => self.open = true,
        }
    }
}

struct JobRow {
    line: u64,
    name: String,
    user: String,
    submit_s: f64,
}

/// Reads the job table at `path` and the task (and instance) tables `keys`
/// names; jobs are sorted by submission, ids `0..n` in that order, names the
/// trace's `job_name`.
pub fn read(
    path: &Path,
    keys: &PaiKeys,
    task_table: &Path,
    instance_table: Option<&Path>,
) -> Result<(Vec<SimJob>, Tally), WorkloadError> {
    let mut tally = Tally::default();
    let mut jobs: Vec<JobRow> = Vec::new();
    let mut known: HashMap<String, usize> = HashMap::new();
    Stream::open(path, JOB_COLUMNS)?.for_each(|row| {
        tally.rows += 1;
        let status = row.str("status");
        if !keys.states.is_empty() && !keys.states.iter().any(|s| s == status) {
            tally.skip(format!("in status `{status}` (not in `states`)"), row.line);
            return Ok(());
        }
        let name = row.str("job_name");
        if name.is_empty() {
            tally.skip("no job_name", row.line);
            return Ok(());
        }
        let submit_s = match row.opt_f64("start_time") {
            Ok(Some(t)) => t,
            Ok(None) => {
                tally.skip("no submission time (start_time)", row.line);
                return Ok(());
            }
            Err(why) => {
                tally.skip(why, row.line);
                return Ok(());
            }
        };
        if let Some(&first) = known.get(name) {
            return Err(row.error(
                "job_name",
                format!(
                    "job `{name}` is listed twice (first on line {})",
                    jobs[first].line
                ),
            ));
        }
        known.insert(name.to_string(), jobs.len());
        jobs.push(JobRow {
            line: row.line,
            name: name.to_string(),
            user: row.str("user").to_string(),
            submit_s,
        });
        Ok(())
    })?;

    let mut work: Vec<Work> = (0..jobs.len()).map(|_| Work::default()).collect();
    let mut orphan_tasks = 0u64;
    let mut bad_tasks: Vec<(String, u64)> = Vec::new();
    Stream::open(task_table, TASK_COLUMNS)?.for_each(|row| {
        let Some(&j) = known.get(row.str("job_name")) else {
            orphan_tasks += 1;
            return Ok(());
        };
        let w = &mut work[j];
        w.tasks += 1;
        match (row.opt_f64("inst_num"), row.opt_f64("plan_gpu")) {
            (Ok(n), Ok(g)) => {
                let (n, g) = (n.unwrap_or(0.0), g.unwrap_or(0.0));
                if n < 0.0 || g < 0.0 {
                    bad_tasks.push(("negative inst_num or plan_gpu".into(), row.line));
                    w.open = true;
                } else {
                    w.gpu_percent += n * g;
                }
            }
            (Err(why), _) | (_, Err(why)) => {
                bad_tasks.push((why, row.line));
                w.open = true;
            }
        }
        if instance_table.is_none() {
            match (row.opt_f64("start_time"), row.opt_f64("end_time")) {
                (Ok(s), Ok(e)) => w.span(s, e),
                _ => w.open = true,
            }
        }
        Ok(())
    })?;
    if orphan_tasks > 0 {
        tracing::warn!(
            "{}: {orphan_tasks} task rows name a job that is not in {} (or was not kept); ignored",
            task_table.display(),
            path.display()
        );
    }
    for (why, line) in bad_tasks {
        tracing::debug!("{}:{line}: {why}", task_table.display());
    }
    if let Some(inst) = instance_table {
        Stream::open(inst, INSTANCE_COLUMNS)?.for_each(|row| {
            if let Some(&j) = known.get(row.str("job_name")) {
                match (row.opt_f64("start_time"), row.opt_f64("end_time")) {
                    (Ok(s), Ok(e)) => work[j].span(s, e),
                    _ => work[j].open = true,
                }
            }
            Ok(())
        })?;
    }

    let mut kept: Vec<TraceJob> = Vec::new();
    for (job, w) in jobs.into_iter().zip(work) {
        let gpus = (w.gpu_percent / 100.0 - 1e-9).ceil();
        let run = match (w.first_start, w.last_end) {
            (Some(s), Some(e)) if !w.open => Some(e - s),
            _ => None,
        };
        if w.tasks == 0 {
            tally.skip("no task rows", job.line);
        } else if w.gpu_percent <= 0.0 {
            tally.skip("CPU-only (no plan_gpu)", job.line);
        } else if gpus > u32::MAX as f64 {
            tally.skip("too many GPUs", job.line);
        } else {
            match run {
                Some(r) if r > 0.0 => kept.push(TraceJob {
                    submit_s: job.submit_s,
                    line: job.line,
                    name: job.name,
                    team: job.user.clone(),
                    user: job.user,
                    gpus: gpus.max(1.0) as u32,
                    run_s: r,
                }),
                Some(_) => tally.skip("no positive run time (end <= start)", job.line),
                None => tally.skip("no run time", job.line),
            }
        }
    }
    let jobs = in_submit_order(kept, &mut tally);
    Ok((jobs, tally))
}
