//! `blox pack --timed`: the tasks by the trace's own creation and deletion times.

use super::{csv_field, Done};
use crate::cli::PackArgs;
use crate::say;
use anyhow::{Context, Result};
use blox_share::openb::{NodeSpec, TaskSpec};
use blox_share::packing::PackingSetup;
use blox_share::policy::SharePolicy;
use blox_share::timed::{run_timed, TimedRun};
use std::fmt::Write as _;

fn events_csv(r: &TimedRun) -> String {
    let mut f = String::from("time_s,event,task,node,gpus,used_gpu_milli,frag_percent,why\n");
    for e in &r.events {
        let node = e.node.map(|n| r.nodes[n].as_str()).unwrap_or("");
        let gpus: Vec<String> = e.gpus.iter().map(u32::to_string).collect();
        let kind = if e.arrival { "arrive" } else { "leave" };
        let _ = writeln!(
            f,
            "{},{kind},{},{node},{},{},{:.2},{}",
            e.time_s,
            e.task,
            gpus.join("-"),
            e.used_milli,
            e.frag_percent,
            csv_field(e.why.as_deref().unwrap_or(""))
        );
    }
    f
}

/// One timed run.
pub(super) fn one(
    nodes: &[NodeSpec],
    trace: &str,
    tasks: &[TaskSpec],
    policy: &mut dyn SharePolicy,
    setup: &PackingSetup,
    args: &PackArgs,
) -> Result<Done> {
    let name = policy.name();
    let r = run_timed(nodes, tasks, policy, setup)
        .with_context(|| format!("{trace}, {name}, seed {}", setup.seed))?;
    if let (Some(dir), true) = (&args.out, args.placements) {
        let path = dir.join(format!("{trace}-{name}-{}-events.csv", setup.seed));
        std::fs::write(&path, events_csv(&r)).with_context(|| path.display().to_string())?;
    }
    Ok(Done {
        arrived: r.placed + r.failed,
        placed: r.placed,
        at_100: None,
        at_top: None,
        frag_end: r.events.last().map(|e| e.frag_percent).unwrap_or(0.0),
        curve: Vec::new(),
        timed: Some((r.mean_allocated_percent, r.peak_allocated_percent)),
    })
}

/// Prints the timed runs and writes `pack.csv`.
pub(super) fn report(
    args: &PackArgs,
    rows: &[(&str, &str, i64)],
    done: &[Done],
    took: std::time::Duration,
) -> Result<()> {
    say!(
        "{:<12} {:<15} {:>4}  {:>7}  {:>6}  {:>6}  {:>10}  {:>10}",
        "trace",
        "policy",
        "seed",
        "arrived",
        "placed",
        "failed",
        "mean alloc",
        "peak alloc"
    )?;
    let mut table = String::from(
        "trace,policy,seed,arrived,placed,failed,mean_alloc_percent,peak_alloc_percent\n",
    );
    for (&(trace, policy, seed), d) in rows.iter().zip(done) {
        let (mean, peak) = d.timed.unwrap_or_default();
        let failed = d.arrived - d.placed;
        say!(
            "{trace:<12} {policy:<15} {seed:>4}  {:>7}  {:>6}  {failed:>6}  {mean:>9.2}%  {peak:>9.2}%",
            d.arrived,
            d.placed
        )?;
        let _ = writeln!(
            table,
            "{trace},{policy},{seed},{},{},{failed},{mean:.2},{peak:.2}",
            d.arrived, d.placed
        );
    }
    say!("{} runs in {:.1} s", rows.len(), took.as_secs_f64())?;
    if let Some(dir) = &args.out {
        let path = dir.join("pack.csv");
        std::fs::write(&path, table).with_context(|| path.display().to_string())?;
    }
    Ok(())
}
