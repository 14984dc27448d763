//! `blox pack`: the FGD paper's packing experiment on the openb trace.

use crate::cli::PackArgs;
use crate::say;
use anyhow::{bail, Context, Result};
use blox_share::curve::{allocated_at, allocation_curve};
use blox_share::openb::{read_nodes, read_tasks};
use blox_share::packing::{run, PackingRun, PackingSetup};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The bundled openb folder: next to the sources, else under the working directory.
fn data_dir() -> PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/openb");
    if built.exists() {
        built
    } else {
        PathBuf::from("data/openb")
    }
}

/// A bundled pod list by name, or the path given.
fn trace_path(trace: &str) -> PathBuf {
    let bundled = data_dir().join(format!("openb_pod_list_{trace}.csv.gz"));
    if !trace.contains('/') && !trace.contains('.') && bundled.exists() {
        bundled
    } else {
        PathBuf::from(trace)
    }
}

/// The reference's folder name of each policy (`06-FGD`, …).
fn reference_name(policy: &str) -> &'static str {
    match policy {
        "random" => "01-Random",
        "dot-product" => "02-DotProd",
        "gpu-clustering" => "03-GpuClustering",
        "gpu-packing" => "04-GpuPacking",
        "best-fit" => "05-BestFit",
        _ => "06-FGD",
    }
}

/// The published allocation at 100 % and 130 % arrived, by (trace, policy folder, tune, seed).
fn published() -> HashMap<(String, String, String, String), (String, String)> {
    let path = data_dir().join("reference/published_allocation.csv");
    let Ok(text) = std::fs::read_to_string(path) else {
        return HashMap::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let v: Vec<&str> = l.split(',').collect();
            (v.len() == 6).then(|| {
                let key = (v[0].into(), v[1].into(), v[2].into(), v[3].into());
                (key, (v[4].into(), v[5].into()))
            })
        })
        .collect()
}

fn write_outputs(
    dir: &Path,
    policy: &str,
    seed: i64,
    r: &PackingRun,
    curve: &[(u32, f64)],
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{policy}-{seed}-placements.csv"));
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| path.display().to_string())?,
    );
    writeln!(
        f,
        "event,task,node,gpus,gpu_milli,arrived_gpu_milli,used_gpu_milli"
    )?;
    for (i, o) in r.outcomes.iter().enumerate() {
        let node = o.node.map(|n| r.nodes[n].as_str()).unwrap_or("");
        let gpus: Vec<String> = o.gpus.iter().map(u32::to_string).collect();
        writeln!(
            f,
            "{i},{},{node},{},{},{},{}",
            o.task,
            gpus.join("-"),
            o.gpu_milli,
            o.arrived_milli,
            o.used_milli
        )?;
    }
    f.flush()?;
    let path = dir.join(format!("{policy}-{seed}-curve.csv"));
    let mut text = String::from("arrived_percent,allocated_percent\n");
    for (r, v) in curve {
        text.push_str(&format!("{r},{v}\n"));
    }
    std::fs::write(&path, text).with_context(|| path.display().to_string())?;
    Ok(())
}

/// Runs `blox pack`.
pub fn pack(args: &PackArgs) -> Result<ExitCode> {
    if !(args.tune >= 0.0 && args.tune.is_finite()) {
        bail!(
            "--tune {}: give a multiple of the GPU capacity, 0 or more",
            args.tune
        );
    }
    let nodes_path = args
        .nodes
        .clone()
        .unwrap_or_else(|| data_dir().join("openb_node_list_gpu_node.csv"));
    let (nodes, skipped) = read_nodes(&nodes_path)?;
    if skipped.total() > 0 {
        say!("{}: skipped {}", nodes_path.display(), skipped)?;
    }
    let trace = trace_path(&args.trace);
    let (tasks, skipped) = read_tasks(&trace, &nodes)?;
    if skipped.total() > 0 {
        say!("{}: skipped {}", trace.display(), skipped)?;
    }
    let policies: Vec<_> = args
        .policy
        .iter()
        .map(|name| {
            blox_share::policy::by_name(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown policy `{name}`; known: {}",
                    blox_share::policy::NAMES.join(", ")
                )
            })
        })
        .collect::<Result<_>>()?;
    let published = published();
    let trace_name = args.trace.clone();
    let tune = format!("{}", args.tune);
    say!(
        "{}: {} tasks on {} nodes ({} GPUs); arrivals inflated to {tune} × GPU capacity",
        trace.display(),
        tasks.len(),
        nodes.len(),
        nodes.iter().map(|n| n.gpus).sum::<u32>()
    )?;
    say!("policy          seed  arrived  placed  failed  alloc@100%  alloc@{:.0}%  published (100%, {:.0}%)", args.tune * 100.0, args.tune * 100.0)?;
    for mut policy in policies {
        for &seed in &args.seed {
            let setup = PackingSetup {
                tune: args.tune,
                seed,
                ..PackingSetup::default()
            };
            let r = run(&nodes, &tasks, policy.as_mut(), &setup)?;
            let top = (args.tune * 100.0).round() as u32;
            let curve = allocation_curve(&r.outcomes, r.total_gpus, top.max(100));
            let placed = r.outcomes.iter().filter(|o| o.node.is_some()).count();
            let fmt = |v: Option<f64>| v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
            let key = (
                trace_name.clone(),
                reference_name(policy.name()).to_string(),
                tune.clone(),
                seed.to_string(),
            );
            let theirs = published
                .get(&key)
                .map(|(a, b)| format!("{a}, {b}"))
                .unwrap_or_else(|| "-".into());
            say!(
                "{:<15} {seed:>4}  {:>7}  {placed:>6}  {:>6}  {:>10}  {:>10}  {theirs}",
                policy.name(),
                r.outcomes.len(),
                r.outcomes.len() - placed,
                fmt(allocated_at(&curve, 100)),
                fmt(allocated_at(&curve, top))
            )?;
            if let Some(dir) = &args.out {
                write_outputs(dir, policy.name(), seed, &r, &curve)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
