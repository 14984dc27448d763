//! Plain traces: one row per job with its arrival, GPU count and duration.

use super::table::CsvTable;
use super::{SimJob, WorkModel, WorkloadError};
use blox_core::JobSpec;
use std::collections::HashMap;

fn finish(table: &CsvTable, mut jobs: Vec<(u64, SimJob)>) -> Result<Vec<SimJob>, WorkloadError> {
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for (line, j) in &jobs {
        if let Some(first) = seen.insert(j.spec.id.0, *line) {
            return Err(WorkloadError::Field {
                path: table.path.clone(),
                line: *line,
                column: "job_id".into(),
                message: format!("job id {} already used on line {first}", j.spec.id.0),
            });
        }
    }
    jobs.sort_by(|a, b| {
        a.1.spec
            .arrival_s
            .total_cmp(&b.1.spec.arrival_s)
            .then(a.1.spec.id.cmp(&b.1.spec.id))
    });
    Ok(jobs.into_iter().map(|(_, j)| j).collect())
}

/// `job_id,arrival_s,num_gpus,duration_s` with optional `model,batch_size,user`,
/// `name` and `startup_s` (seconds each launch of the job spends starting);
/// `duration_s` is the run time at `num_gpus` GPUs.
pub fn read_generic(t: &CsvTable) -> Result<Vec<SimJob>, WorkloadError> {
    t.require(&["job_id", "arrival_s", "num_gpus", "duration_s"])?;
    let mut jobs = Vec::with_capacity(t.rows.len());
    for r in 0..t.rows.len() {
        let id = t.u64(r, "job_id")?;
        let duration_s = t.f64(r, "duration_s")?;
        let mut spec = JobSpec::new(id, t.f64(r, "arrival_s")?, t.u32(r, "num_gpus")?)
            .with_duration(duration_s);
        spec.model = t.opt_str(r, "model").map(str::to_string);
        spec.user = t.opt_str(r, "user").map(str::to_string);
        spec.team = t
            .opt_str(r, "team")
            .filter(|v| !v.is_empty())
            .map(str::to_string);
        if let Some(name) = t.opt_str(r, "name").filter(|n| !n.is_empty()) {
            spec.name = name.to_string();
        }
        spec.batch_size = t.opt_u32(r, "batch_size")?;
        jobs.push((
            t.line(r),
            SimJob {
                startup_s: t.opt_f64(r, "startup_s")?,
                converge_at: None,
                spec,
                work: WorkModel::Duration { duration_s },
            },
        ));
    }
    finish(t, jobs)
}

/// Blox's own toy trace format: `job_id,num_gpus,submit_time,duration,model,batch_size`.
pub fn read_blox(
    t: &CsvTable,
    iteration_s: &std::collections::BTreeMap<String, blox_core::Positive>,
) -> Result<Vec<SimJob>, WorkloadError> {
    t.require(&["job_id", "num_gpus", "submit_time", "duration"])?;
    let mut jobs = Vec::with_capacity(t.rows.len());
    for r in 0..t.rows.len() {
        let mut duration_s = t.f64(r, "duration")?;
        if !iteration_s.is_empty() {
            // `duration` counts iterations of the model's time.
            let model = t.str(r, "model")?;
            let Some(s) = iteration_s.get(model) else {
                return Err(t.err(
                    t.line(r),
                    "model",
                    format!(
                        "`{model}` has no `iteration_s` (given for {})",
                        iteration_s.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            };
            duration_s *= s.get();
        }
        let mut spec = JobSpec::new(
            t.u64(r, "job_id")?,
            t.f64(r, "submit_time")?,
            t.u32(r, "num_gpus")?,
        )
        .with_duration(duration_s);
        spec.model = t.opt_str(r, "model").map(str::to_string);
        spec.batch_size = t.opt_u32(r, "batch_size")?;
        jobs.push((
            t.line(r),
            SimJob {
                startup_s: None,
                converge_at: None,
                spec,
                work: WorkModel::Duration { duration_s },
            },
        ));
    }
    finish(t, jobs)
}
