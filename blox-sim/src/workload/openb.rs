//! The Alibaba 2023 GPU trace's pod lists (`cluster-trace-gpu-v2023`, the
//! "openb" lists of the FGD paper, Weng et al., ATC'23) as jobs of the round
//! loop, in the reference simulator's time-driven mode: a task arrives at
//! its `creation_time` (relative to the first kept task's) and runs until
//! its `deletion_time`, on what it asks for:
//!
//! - `num_gpu` 1 and `gpu_milli` under 1000: a share of one GPU
//!   ([`JobSpec::gpu_milli`]); placements that share GPUs (`fgd`, `share`)
//!   give it that share, others a whole GPU;
//! - `num_gpu` k: k whole GPUs;
//! - `num_gpu` 0: no GPU, only CPUs and host memory of one node; the
//!   placements that share GPUs (`fgd`, `share`) place it, others reject
//!   it at submission, saying so;
//! - `cpu_milli` and `memory_mib`: its CPUs and host memory
//!   ([`JobSpec::host_need`], per GPU; in all without GPUs);
//! - `gpu_spec`: the GPU models it may run on (its elasticity's
//!   `gpu_types`).
//!
//! Rows the reader refuses ([`blox_share::openb::read_tasks_at`]: a share
//! over one GPU, a model no node has, a negative or absent field, …) and
//! tasks the round loop cannot run (no times: a packing list, for `blox
//! pack`; deleted when created; one
//! that no node of the list could hold even empty, which the reference
//! fails) are counted by reason with their first line. The node list (`nodes`,
//! default `openb_node_list_gpu_node.csv` beside the pod list) gives the
//! models that exist; the cluster itself is the config's `[cluster]`.

use super::stream::Tally;
use super::{SimJob, WorkModel, WorkloadError};
use blox_core::{Adaptivity, HostShare, JobSpec, GPU_MILLI};
use std::path::Path;

/// The node list a pod list's folder holds.
pub const NODE_LIST: &str = "openb_node_list_gpu_node.csv";

/// Reads a pod list: jobs sorted by creation time (then line), ids `0..n`
/// in that order, named as the trace names them.
pub fn read(path: &Path, nodes: &Path) -> Result<(Vec<SimJob>, Tally), WorkloadError> {
    let bad = |e: blox_share::openb::ReadError| WorkloadError::Invalid(e.to_string());
    let (node_specs, _) = blox_share::openb::read_nodes(nodes).map_err(bad)?;
    let (tasks, skipped) = blox_share::openb::read_tasks_at(path, &node_specs).map_err(bad)?;
    let mut tally = Tally {
        rows: (tasks.len() + skipped.total()) as u64,
        ..Tally::default()
    };
    for (why, (n, line)) in &skipped.by_reason {
        tally.skipped.insert(why.clone(), (*n as u64, *line as u64));
    }
    // A task no node of the list could hold even empty (several GPUs of a
    // model whose nodes have fewer, more CPUs than they have) would wait
    // for ever; the reference fails it.
    let empty: Vec<blox_share::node::NodeState> = node_specs
        .iter()
        .map(blox_share::node::NodeState::new)
        .collect();
    let mut kept = Vec::new();
    for (line, t) in tasks {
        let line = line as u64;
        let (Some(created), Some(deleted)) = (t.creation_s, t.deletion_s) else {
            tally.skip(
                "without creation_time and deletion_time (a packing list: `blox pack` places it)",
                line,
            );
            continue;
        };
        if deleted <= created {
            tally.skip("deleted when created", line);
            continue;
        }
        if !empty.iter().any(|n| n.fits(&t)) {
            tally.skip("that no node could hold even empty", line);
            continue;
        }
        kept.push((created, line, t, (deleted - created) as f64));
    }
    if kept.is_empty() && tally.rows > 0 {
        // Nothing to run: most likely a packing list (no times), which
        // `blox pack` replays; a run of no jobs would say nothing.
        tally.jobs = 0;
        return Err(WorkloadError::Invalid(format!(
            "{}: no row can run in the round loop ({}); a pod list without creation and deletion times is the packing experiment's: `blox pack --trace {}`",
            path.display(),
            tally.describe(),
            path.display()
        )));
    }
    kept.sort_by_key(|k| (k.0, k.1));
    let t0 = kept.first().map_or(0, |k| k.0);
    tally.jobs = kept.len() as u64;
    let jobs = kept
        .into_iter()
        .enumerate()
        .map(|(i, (created, _, t, run_s))| {
            // Per GPU; in all for a task without GPUs.
            let n = f64::from(t.num_gpu.max(1));
            let mut spec =
                JobSpec::new(i as u64, (created - t0) as f64, t.num_gpu).with_duration(run_s);
            spec.name = t.name;
            spec.gpu_milli = (t.num_gpu == 1 && t.gpu_milli < GPU_MILLI).then_some(t.gpu_milli);
            spec.host_need = Some(HostShare {
                cpus_per_gpu: t.cpu_milli as f64 / 1000.0 / n,
                mem_gb_per_gpu: t.memory_mib as f64 / 1024.0 / n,
            });
            spec.elasticity.adaptivity = Adaptivity::Rigid;
            spec.elasticity.gpu_types = t.gpu_models;
            SimJob {
                spec,
                work: WorkModel::Duration { duration_s: run_s },
                converge_at: None,
                startup_s: None,
            }
        })
        .collect();
    Ok((jobs, tally))
}
