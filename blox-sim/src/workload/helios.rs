//! SenseTime's Helios traces (Hu et al., SC'21; `cluster_log.csv` of each of
//! its clusters): a Slurm-style job log,
//! `job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue`,
//! times as `YYYY-MM-DD HH:MM:SS`, `duration` the seconds the job ran.
//!
//! A row becomes a job asking for `gpu_num` GPUs that arrives at its
//! `submit_time` (relative to the first kept row's) and runs `duration`
//! seconds at that size. Rows without GPUs (CPU jobs), without a positive
//! run time, with unreadable fields or in a state not asked for are counted
//! by reason ([`Tally`]) and reported, not silently dropped.

use super::stream::{in_submit_order, parse_datetime, Stream, Tally, TraceJob};
use super::{HeliosKeys, SimJob, WorkloadError};
use std::path::Path;

/// The columns of `cluster_log.csv`.
pub const COLUMNS: &[&str] = &[
    "job_id",
    "user",
    "vc",
    "gpu_num",
    "cpu_num",
    "node_num",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "queue",
];

/// Reads a Helios `cluster_log.csv`; jobs are sorted by submission, ids
/// `0..n` in that order, names the trace's `job_id`.
pub fn read(path: &Path, keys: &HeliosKeys) -> Result<(Vec<SimJob>, Tally), WorkloadError> {
    let stream = Stream::open(path, COLUMNS)?;
    let mut tally = Tally::default();
    let mut kept: Vec<TraceJob> = Vec::new();
    stream.for_each(|row| {
        tally.rows += 1;
        let line = row.line;
        let state = row.str("state");
        if !keys.states.is_empty() && !keys.states.iter().any(|s| s == state) {
            tally.skip(format!("in state `{state}` (not in `states`)"), line);
            return Ok(());
        }
        let gpus = match row.opt_f64("gpu_num") {
            Ok(Some(g)) if g >= 1.0 && g.fract() == 0.0 && g <= u32::MAX as f64 => g as u32,
            Ok(Some(0.0)) => {
                tally.skip("CPU-only (gpu_num = 0)", line);
                return Ok(());
            }
            Ok(_) | Err(_) => {
                tally.skip("unreadable gpu_num", line);
                return Ok(());
            }
        };
        let duration_s = match row.opt_f64("duration") {
            Ok(Some(d)) if d > 0.0 => d,
            Ok(_) => {
                tally.skip("no positive duration", line);
                return Ok(());
            }
            Err(why) => {
                tally.skip(why, line);
                return Ok(());
            }
        };
        let Some(submit_s) = parse_datetime(row.str("submit_time")) else {
            tally.skip("unreadable submit_time", line);
            return Ok(());
        };
        kept.push(TraceJob {
            submit_s,
            line,
            name: row.str("job_id").to_string(),
            user: row.str("user").to_string(),
            team: row.str("vc").to_string(),
            gpus,
            run_s: duration_s,
        });
        Ok(())
    })?;
    let jobs = in_submit_order(kept, &mut tally);
    Ok((jobs, tally))
}
