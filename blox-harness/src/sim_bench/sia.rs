//! `blox bench sia`: Sia's decision time at 64, 512 and 2,048 GPUs (Sia,
//! SOSP'23, §5.6, Fig. 9): `examples/configs/sia/sia.toml` on the artifact's
//! heterogeneous cluster scaled 1×, 8× and 32× (node counts of every type
//! multiplied), with the artifact's `workloads/scale` jobs for that size
//! (Saturn workload 1 with every job submitted k times), for the first
//! `rounds` rounds that have jobs.

use super::{percentiles, NoSchedule, Out, Result, Timed};
use blox_sim::run::{load_config, Simulation};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Cluster scales and their workloads (relative to the repository).
const SCALES: &[(u32, &str)] = &[
    (1, "data/sia/workloads/saturn/workload-1.csv"),
    (8, "data/sia/workloads/scale/scale_8x/workload-1.csv"),
    (32, "data/sia/workloads/scale/scale_32x/workload-1.csv"),
];

pub(super) fn sia(dir: &Path, rounds: usize, out: Out) -> Result<()> {
    let config = dir.join("sia/sia.toml");
    for &(scale, workload) in SCALES {
        let workload = dir.join("../..").join(workload);
        let mut cfg = load_config(&config, Some(&workload), &[])?;
        let mut gpus = 0i64;
        for g in cfg.cluster.node_groups.iter_mut() {
            let count = g.get("count").and_then(|v| v.as_integer()).unwrap_or(0) * scale as i64;
            let per = g.get("gpus").and_then(|v| v.as_integer()).unwrap_or(0);
            gpus += count * per;
            g.insert("count".into(), blox_core::Value::Integer(count));
        }
        let t = Instant::now();
        let mut sim = Simulation::from_config(&cfg)?;
        let setup = t.elapsed().as_secs_f64();
        let times = Arc::new(Mutex::new(Vec::new()));
        let notes = Arc::new(Mutex::new(Vec::new()));
        let inner = std::mem::replace(
            &mut sim.round_loop.policies.scheduling,
            Box::new(NoSchedule),
        );
        sim.round_loop.policies.scheduling = Box::new(Timed {
            inner,
            times: times.clone(),
            notes: notes.clone(),
        });
        let t = Instant::now();
        while times.lock().expect("not poisoned").len() < rounds && sim.step()? {}
        let wall = t.elapsed().as_secs_f64();
        let mut v = times.lock().expect("not poisoned").clone();
        if v.is_empty() {
            continue;
        }
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n as f64 * 1000.0;
        let max = v.iter().copied().fold(0.0, f64::max) * 1000.0;
        let (p50, p95) = percentiles(&mut v);
        let jobs = sim.round_loop.jobs.runnable().count();
        let notes = notes.lock().expect("not poisoned");
        let kept = notes
            .iter()
            .filter(|n| n.contains("keeps its allocation"))
            .count();
        let left_out = notes.len() - kept;
        out(format!(
            "sia-{gpus:<5} {n:>4} decisions  mean {mean:>8.1} ms  p50 {p50:>8.1} ms  p95 {p95:>8.1} ms  max {max:>8.1} ms  ({jobs} jobs waiting or running at the end; {kept} decisions past the accepted gap kept every allocation, {left_out} left chosen jobs unplaced; setup {setup:.2} s, {wall:.1} s in all)"
        ));
    }
    Ok(())
}
