//! The Pollux artifact's workloads (`name,time,application,num_replicas,batch_size`),
//! driven by the per-application profiles (Pollux, OSDI'21, §5; file semantics in
//! `pollux-data.md` §1–4; the profiles themselves live in `blox-goodput`).
//!
//! Each job is profile-driven by default (`model = "profile"`): the simulator
//! advances its statistical progress from the measured step times and gradient
//! statistics until the fixed target `P*` ([`crate::backend`]). Its batch size is
//! set by its `batch_agent`:
//!
//! - `fixed` (Tiresias, Optimus): the workload's tuned `batch_size` at whatever
//!   GPU count the job holds (fixed-batch rule, §6.6);
//! - `pollux`: a PolluxAgent per job tunes the batch for its allocation; ncf is
//!   pinned at batch 32768 and 1 GPU, as the artifact does (§6.1).
//!
//! `model = "duration"` keeps the rigid model of the foundation: a fixed duration
//! at the tuned GPUs and batch, packed 4 per node ([`rigid_duration_s`]).

use super::table::CsvTable;
use super::{BatchAgent, SimJob, WorkModel, WorkloadError};
use blox_core::JobSpec;
pub use blox_goodput::profile::{canonical_placement, AppProfile, ProfileCache};
use std::path::Path;

/// Run time to completion at `replicas` GPUs (packed `gpus_per_node` a node) and
/// global batch `batch`: `Σ_e (P(e+1) − P(e)) · T_iter / g(M, e)` over epochs with
/// the fixed-batch rule's `(b, s)` — no restarts, no interference.
pub fn rigid_duration_s(
    p: &AppProfile,
    replicas: u32,
    batch: u32,
    gpus_per_node: u32,
) -> Option<f64> {
    let r = replicas.max(1);
    let mut per_node = vec![gpus_per_node; (r / gpus_per_node) as usize];
    if !r.is_multiple_of(gpus_per_node) {
        per_node.push(r % gpus_per_node);
    }
    let c = p.limits.fixed_batch(r, batch as f64);
    let m = c.global(r) as f64;
    let (t_step, t_sync) = p.step_time_or_nearest(&per_node, c.atomic as f64)?;
    let t_iter = t_step + c.accum as f64 * (t_step - t_sync);
    let mut total = 0.0;
    for e in 0..p.max_epochs {
        let dp = p.epoch_boundary(e + 1) - p.epoch_boundary(e);
        total += dp * t_iter / p.gain(m, e);
    }
    Some(total)
}

/// How Pollux workload jobs are modelled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolluxOptions {
    pub profile_driven: bool,
    pub agent_pollux: bool,
    pub batch_search: blox_goodput::model::BatchSearch,
    /// scipy's `tol` of the agents' throughput fits (`None`: its defaults).
    pub fit_tol: Option<f64>,
    pub gpus_per_node: u32,
}

/// Reads a Pollux workload.
pub fn read_workload(
    t: &CsvTable,
    traces: &Path,
    opt: PolluxOptions,
) -> Result<Vec<SimJob>, WorkloadError> {
    t.require(&["name", "time", "application", "num_replicas", "batch_size"])?;
    let mut cache = ProfileCache::new(traces);
    let mut jobs = Vec::with_capacity(t.rows.len());
    for r in 0..t.rows.len() {
        let app = t.str(r, "application")?.to_string();
        let replicas = t.u32(r, "num_replicas")?;
        let batch = t.u32(r, "batch_size")?;
        let field = |column: &str, message: String| WorkloadError::Field {
            path: t.path.clone(),
            line: t.line(r),
            column: column.into(),
            message,
        };
        let profile = cache
            .get(&app)
            .map_err(|e| field("application", format!("no usable profile for `{app}`: {e}")))?;
        if replicas == 0 {
            return Err(field("num_replicas", "must be at least 1".into()));
        }
        let duration_s = rigid_duration_s(&profile, replicas, batch, opt.gpus_per_node)
            .ok_or_else(|| {
                field(
                    "num_replicas",
                    format!("no step-time profile for {replicas} replicas of `{app}`"),
                )
            })?;
        let mut spec =
            JobSpec::new(r as u64, t.f64(r, "time")?, replicas).with_duration(duration_s);
        spec.name = t.str(r, "name")?.to_string();
        spec.model = Some(app.clone());
        spec.batch_size = Some(batch);
        let work = if !opt.profile_driven {
            WorkModel::Duration { duration_s }
        } else {
            let agent = if !opt.agent_pollux {
                BatchAgent::Fixed { batch }
            } else if app == "ncf" {
                BatchAgent::Pollux {
                    fixed_batch: Some(32768),
                    replica_cap: Some(1),
                    search: opt.batch_search,
                    fit_tol: opt.fit_tol,
                }
            } else {
                BatchAgent::Pollux {
                    fixed_batch: None,
                    replica_cap: None,
                    search: opt.batch_search,
                    fit_tol: opt.fit_tol,
                }
            };
            WorkModel::Profile {
                app: profile,
                agent,
                types: None,
            }
        };
        jobs.push(SimJob {
            startup_s: None,
            spec,
            work,
            converge_at: None,
        });
    }
    jobs.sort_by(|a, b| {
        a.spec
            .arrival_s
            .total_cmp(&b.spec.arrival_s)
            .then(a.spec.id.cmp(&b.spec.id))
    });
    Ok(jobs)
}
