//! Pollux-format workloads on per-GPU-type profiles: the Sia artifact's
//! setting (Sia, SOSP'23, §4; `data/sia/NOTE.md`).
//!
//! The file is a Pollux workload (`name,time,application,num_replicas,batch_size`)
//! with two optional columns: `category` (`adaptive`, the default;
//! `strong-scaling` or the artifact's `scale-gpus`: GPU count may change, the
//! batch may not; `rigid`: neither) and `min_gpus`. Its profile folder holds a
//! profile per (model, GPU type) ([`blox_goodput::typed`]). Each job:
//!
//! - runs on the GPU types its model is measured on (a hybrid-parallel model
//!   only in whole pipelines, [`blox_core::Elasticity::replica_gpus`]);
//! - restarts with its model's checkpoint-restore delay and progresses at its
//!   model's calibrated speed (the artifact's `rescale_time`, `SLOWDOWNS`);
//! - is submitted with what Sia's bootstrapping profiles each new job for, on
//!   one GPU of every type (Sia §3.2), as job metrics: `type.<t>.xput1` (samples
//!   per second of one replica at its largest batch), `type.<t>.bmin` and
//!   `type.<t>.bmax` (atomic batch limits), `type.<t>.rigid_xput` (samples per
//!   second at the requested GPUs and batch), `type.<t>.microbatches` (of a
//!   pipeline), and `speed.<t>` (optimizer steps
//!   per second there, as Gavel's artifact estimates it) — a real job would
//!   report the same from its profiling run;
//! - `ncf` runs rigid on one GPU at batch 32768, as in the artifact.

use super::pollux::{rigid_duration_s, PolluxOptions};
use super::table::CsvTable;
use super::{BatchAgent, SimJob, WorkModel, WorkloadError};
use blox_core::{Adaptivity, Elasticity, JobSpec};
use blox_goodput::typed::{iter_time, packed, sia_fixed_batch, FixedRule};
use blox_goodput::TypedCache;
use std::sync::Arc;

/// A GPU type of the cluster: name, GPUs per node, GPUs in all.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuTypeInfo {
    pub name: String,
    pub gpus_per_node: u32,
    pub gpus: u32,
}

/// The GPU types of `cluster` (online or not), in name order.
pub fn cluster_types(cluster: &blox_core::ClusterState) -> Vec<GpuTypeInfo> {
    let mut out: Vec<GpuTypeInfo> = Vec::new();
    for n in cluster.nodes() {
        let g = n.gpus.len() as u32;
        match out.iter_mut().find(|t| t.name == n.spec.gpu_type) {
            Some(t) => {
                t.gpus_per_node = t.gpus_per_node.max(g);
                t.gpus += g;
            }
            None => out.push(GpuTypeInfo {
                name: n.spec.gpu_type.clone(),
                gpus_per_node: g,
                gpus: g,
            }),
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Reads a Pollux-format workload whose profiles are per GPU type; `types`
/// are the cluster's (each must be profiled for some model).
pub fn read_workload(
    t: &CsvTable,
    cache: &mut TypedCache,
    types: &[GpuTypeInfo],
    opt: PolluxOptions,
) -> Result<Vec<SimJob>, WorkloadError> {
    t.require(&["name", "time", "application", "num_replicas", "batch_size"])?;
    let profiled = cache.profiled_types();
    for ty in types {
        if !profiled.contains(&ty.name) {
            return Err(WorkloadError::Invalid(format!(
                "the cluster's GPU type `{}` has no profile in {} (looked for <model>/placements-{}.csv); profiled types: {}",
                ty.name,
                cache.traces().display(),
                ty.name,
                profiled.join(", ")
            )));
        }
    }
    let names: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
    let mut jobs = Vec::with_capacity(t.rows.len());
    for r in 0..t.rows.len() {
        let field = |column: &str, message: String| WorkloadError::Field {
            path: t.path.clone(),
            line: t.line(r),
            column: column.into(),
            message,
        };
        let app = t.str(r, "application")?.to_string();
        let mut replicas = t.u32(r, "num_replicas")?;
        let mut batch = t.u32(r, "batch_size")?;
        if replicas == 0 {
            return Err(field("num_replicas", "must be at least 1".into()));
        }
        let mut adaptivity = match t.opt_str(r, "category") {
            Some(c) => c.parse::<Adaptivity>().map_err(|e| field("category", e))?,
            None => Adaptivity::Adaptive,
        };
        let min_gpus = t.opt_u32(r, "min_gpus")?.unwrap_or(0);
        if min_gpus > replicas && adaptivity == Adaptivity::Rigid {
            return Err(field(
                "min_gpus",
                format!("{min_gpus} is more than the {replicas} GPUs this rigid job asks for"),
            ));
        }
        let typed = cache
            .get(&app, &names)
            .map_err(|e| field("application", e.to_string()))?;
        if app == "ncf" {
            // cluster.py: ncf is rigid on one GPU at batch 32768.
            (replicas, batch, adaptivity) = (1, 32768, Adaptivity::Rigid);
        }
        let base = typed.any().clone();
        if batch < base.limits.m0 {
            return Err(field(
                "batch_size",
                format!(
                    "{batch} is below `{app}`'s smallest batch size {}",
                    base.limits.m0
                ),
            ));
        }
        let mut e = Elasticity {
            adaptivity,
            min_gpus,
            ..Elasticity::default()
        };
        let mut spec = JobSpec::new(r as u64, t.f64(r, "time")?, replicas);
        let mut duration = None;
        for ty in types {
            let Some(p) = typed.on(&ty.name) else {
                continue;
            };
            let k = &ty.name;
            let m = &mut spec.metrics;
            if let Some(pl) = p.pipeline {
                e.replica_gpus.insert(k.clone(), pl.stages);
                m.insert(format!("type.{k}.microbatches"), pl.microbatches as f64);
            }
            if let Some(x) = p.atomic_throughput() {
                m.insert(format!("type.{k}.xput1"), x);
            }
            m.insert(format!("type.{k}.bmin"), p.limits.bmin as f64);
            m.insert(format!("type.{k}.bmax"), p.limits.bmax as f64);
            let place = packed(replicas, ty.gpus_per_node);
            if p.pipeline.is_none() {
                let c = sia_fixed_batch(p, &place, batch as f64, FixedRule::Estimate);
                if let Some(t_iter) = iter_time(p, &place, c) {
                    m.insert(
                        format!("type.{k}.rigid_xput"),
                        batch as f64 / t_iter * p.calibration,
                    );
                }
                // gavel.py: a job larger than the type gets a token 0.1.
                let steps = if replicas > ty.gpus.min(64) {
                    Some(0.1)
                } else {
                    let c = sia_fixed_batch(p, &place, batch as f64, FixedRule::Gavel);
                    iter_time(p, &place, c).map(|t| p.calibration / t)
                };
                if let Some(s) = steps {
                    m.insert(format!("speed.{k}"), s);
                }
                if duration.is_none() {
                    duration = rigid_duration_s(p, replicas, batch, ty.gpus_per_node);
                }
            }
        }
        let allowed: Vec<String> = names
            .iter()
            .filter(|n| typed.on(n).is_some())
            .cloned()
            .collect();
        if allowed.len() < names.len() {
            e.gpu_types = allowed;
        }
        spec.name = t.str(r, "name")?.to_string();
        spec.model = Some(app.clone());
        spec.batch_size = Some(batch);
        spec.expected_duration_s = duration;
        spec.elasticity = e;
        let agent = if !opt.agent_pollux {
            BatchAgent::Fixed { batch }
        } else {
            BatchAgent::Pollux {
                fixed_batch: (adaptivity != Adaptivity::Adaptive).then_some(batch),
                replica_cap: (adaptivity == Adaptivity::Rigid).then_some(replicas),
                search: opt.batch_search,
                fit_tol: opt.fit_tol,
            }
        };
        jobs.push(SimJob {
            startup_s: base.restart_s,
            spec,
            work: WorkModel::Profile {
                app: base,
                agent,
                types: Some(Arc::clone(&typed)),
            },
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
