//! `blox pack`: the FGD paper's packing experiment on the openb trace.

pub mod report;
pub(crate) mod sweep_file;
mod timed;

use crate::cli::PackArgs;
use crate::say;
use anyhow::{bail, Context, Result};
use blox_share::curve::{allocated_at, allocation_curve};
use blox_share::openb::{read_nodes, read_tasks, NodeSpec, TaskSpec};
use blox_share::packing::{run, PackingRun, PackingSetup};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The highest `--tune` (100 × the GPU capacity).
const MAX_TUNE: f64 = 100.0;

/// The 17 pod lists of the FGD paper's experiments, as bundled.
pub const ALL_TRACES: [&str; 17] = [
    "default",
    "cpu050",
    "cpu100",
    "cpu200",
    "cpu250",
    "gpushare40",
    "gpushare60",
    "gpushare80",
    "gpushare100",
    "gpuspec10",
    "gpuspec20",
    "gpuspec25",
    "gpuspec33",
    "multigpu20",
    "multigpu30",
    "multigpu40",
    "multigpu50",
];

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
fn trace_path(trace: &str) -> Result<PathBuf> {
    if trace.contains('/') || trace.contains('.') {
        return Ok(PathBuf::from(trace));
    }
    let bundled = data_dir().join(format!("openb_pod_list_{trace}.csv.gz"));
    if bundled.exists() {
        return Ok(bundled);
    }
    bail!(
        "no bundled pod list `{trace}` in {} (this binary looks next to the sources it was built from, then in ./data/openb); bundled: {}; or give a path",
        data_dir().display(),
        ALL_TRACES.join(", ")
    )
}

/// The reference's folder name of each policy (`06-FGD`, …).
fn reference_name(policy: &str) -> &'static str {
    match policy {
        "random" => "01-Random",
        "dot-product" => "02-DotProd",
        "gpu-clustering" => "03-GpuClustering",
        "gpu-packing" => "04-GpuPacking",
        "best-fit" => "05-BestFit",
        "fgd" => "06-FGD",
        // A variant has no published run.
        _ => "-",
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

/// The reference's six policies, then the variants (`fgd-exact`).
pub(crate) fn known_policies() -> Vec<&'static str> {
    let mut all = blox_share::policy::NAMES.to_vec();
    all.extend(blox_share::policy::VARIANTS);
    all
}

/// Seeds from `42`, `42-51` and comma lists.
fn parse_seeds(items: &[String]) -> Result<Vec<i64>> {
    let mut seeds = Vec::new();
    for item in items {
        let bad = || anyhow::anyhow!("--seed `{item}`: give integers or ranges such as 42-51");
        match item.split_once('-').filter(|(a, _)| !a.is_empty()) {
            Some((a, b)) => {
                let (a, b): (i64, i64) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if b < a || b - a >= 100_000 {
                    return Err(bad());
                }
                seeds.extend(a..=b);
            }
            None => seeds.push(item.trim().parse().map_err(|_| bad())?),
        }
    }
    Ok(seeds)
}

/// One run of the grid and what it gave.
struct Cell {
    trace: usize,
    policy: &'static str,
    seed: i64,
}

pub(crate) struct Done {
    pub(crate) arrived: usize,
    pub(crate) placed: usize,
    pub(crate) at_100: Option<f64>,
    pub(crate) at_top: Option<f64>,
    /// The fragment ratio after the last task, percent.
    pub(crate) frag_end: f64,
    pub(crate) curve: Vec<(u32, f64)>,
    /// In the timed mode: mean and peak allocation, percent.
    pub(crate) timed: Option<(f64, f64)>,
}

/// A CSV field, quoted when it needs it.
pub(crate) fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

fn placements_csv(r: &PackingRun) -> String {
    let mut f = String::from(
        "event,task,node,gpus,gpu_milli,arrived_gpu_milli,used_gpu_milli,frag_gpu_milli,frag_percent,why\n",
    );
    for (i, o) in r.outcomes.iter().enumerate() {
        let node = o.node.map(|n| r.nodes[n].as_str()).unwrap_or("");
        let gpus: Vec<String> = o.gpus.iter().map(u32::to_string).collect();
        let _ = writeln!(
            f,
            "{i},{},{node},{},{},{},{},{:.2},{:.2},{}",
            o.task,
            gpus.join("-"),
            o.gpu_milli,
            o.arrived_milli,
            o.used_milli,
            o.frag_milli,
            o.frag_percent,
            csv_field(o.why.as_deref().unwrap_or(""))
        );
    }
    f
}

/// The arrival percentage the table reports: the tune's, or where the
/// trace as it is ends.
fn top_of(tune: f64, r: &blox_share::packing::PackingRun) -> u32 {
    if tune > 0.0 {
        return (tune * 100.0).round() as u32;
    }
    let arrived = r.outcomes.last().map(|o| o.arrived_milli).unwrap_or(0);
    (arrived as f64 / r.total_gpus.max(1) as f64 / 10.0).round_ties_even() as u32
}

/// Runs the cells on `threads` threads; each cell's result, in cell order.
fn run_cells(
    cells: &[Cell],
    nodes: &[NodeSpec],
    traces: &[(String, Vec<TaskSpec>)],
    args: &PackArgs,
    threads: usize,
) -> Vec<Result<Done>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Done>>>> =
        Mutex::new((0..cells.len()).map(|_| None).collect());
    let bar = if cells.len() > 1 {
        indicatif::ProgressBar::new(cells.len() as u64)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let tune = args.tune();
    // The curve runs to the tune's arrival or 100 %, whichever is higher.
    let up_to = ((tune * 100.0).round() as u32).max(100);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, cells.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(cell) = cells.get(i) else { break };
                let (trace, tasks) = &traces[cell.trace];
                let done = (|| -> Result<Done> {
                    let mut policy =
                        blox_share::policy::by_name(cell.policy).expect("checked names");
                    let setup = PackingSetup {
                        tune,
                        seed: cell.seed,
                        ..PackingSetup::default()
                    };
                    if args.timed {
                        return timed::one(nodes, trace, tasks, policy.as_mut(), &setup, args);
                    }
                    let r = run(nodes, tasks, policy.as_mut(), &setup)
                        .with_context(|| format!("{trace}, {}, seed {}", cell.policy, cell.seed))?;
                    let curve = allocation_curve(&r.outcomes, r.total_gpus, up_to);
                    if let (Some(dir), true) = (&args.out, args.placements) {
                        let path = dir.join(format!(
                            "{trace}-{}-{}-placements.csv",
                            cell.policy, cell.seed
                        ));
                        std::fs::write(&path, placements_csv(&r))
                            .with_context(|| path.display().to_string())?;
                    }
                    Ok(Done {
                        arrived: r.outcomes.len(),
                        placed: r.outcomes.iter().filter(|o| o.node.is_some()).count(),
                        at_100: allocated_at(&curve, 100),
                        at_top: allocated_at(&curve, top_of(tune, &r)),
                        frag_end: r.outcomes.last().map(|o| o.frag_percent).unwrap_or(0.0),
                        curve,
                        timed: None,
                    })
                })();
                results.lock().expect("no panic holds it")[i] = Some(done);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results
        .into_inner()
        .expect("no panic holds it")
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("the run did not finish"))))
        .collect()
}

/// A short name for a trace given as a path (its file stem less `openb_pod_list_`).
fn trace_label(trace: &str) -> String {
    let stem = Path::new(trace)
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_else(|| trace.to_string());
    let stem = stem.trim_end_matches(".gz").trim_end_matches(".csv");
    stem.strip_prefix("openb_pod_list_")
        .unwrap_or(stem)
        .to_string()
}

/// `--policy` as names, `all` expanded to the reference's six.
fn parse_policies(names: &[String]) -> Result<Vec<&'static str>> {
    let mut policies: Vec<&'static str> = Vec::new();
    for name in names {
        if name == "all" {
            policies.extend(blox_share::policy::NAMES);
        } else if let Some(&known) = known_policies().iter().find(|n| *n == name) {
            policies.push(known);
        } else {
            bail!(
                "unknown policy `{name}`; known: {}, all",
                known_policies().join(", ")
            );
        }
    }
    Ok(policies)
}

/// The node list of `--nodes`, or the bundled one.
fn load_nodes(args: &PackArgs) -> Result<Vec<NodeSpec>> {
    let nodes_path = match &args.nodes {
        Some(p) => p.clone(),
        None => {
            let p = data_dir().join("openb_node_list_gpu_node.csv");
            if !p.exists() {
                bail!(
                    "the bundled node list is not at {} (this binary looks next to the sources it was built from, then in ./data/openb): give --nodes FILE",
                    p.display()
                );
            }
            p
        }
    };
    let (nodes, skipped) = read_nodes(&nodes_path)?;
    if skipped.total() > 0 {
        say!("{}: skipped {}", nodes_path.display(), skipped)?;
    }
    Ok(nodes)
}

/// The pod lists of `--trace`, each with its label, checked for `--timed`.
fn load_traces(args: &PackArgs, nodes: &[NodeSpec]) -> Result<Vec<(String, Vec<TaskSpec>)>> {
    let names: Vec<String> = args
        .trace
        .iter()
        .flat_map(|t| {
            if t == "all" {
                ALL_TRACES.iter().map(|s| s.to_string()).collect()
            } else {
                vec![t.clone()]
            }
        })
        .collect();
    let mut traces = Vec::new();
    for name in &names {
        let path = trace_path(name)?;
        let (tasks, skipped) = read_tasks(&path, nodes)?;
        say!(
            "{}: {} tasks on {} nodes ({} GPUs){}",
            path.display(),
            tasks.len(),
            nodes.len(),
            nodes.iter().map(|n| n.gpus).sum::<u32>(),
            if skipped.total() > 0 {
                format!("; skipped {skipped}")
            } else {
                String::new()
            }
        )?;
        if args.timed {
            if let Some(t) = tasks.iter().find(|t| t.creation_s.is_none()) {
                bail!(
                    "{}: task `{}` has no creation time; --timed needs the `creation_time` column",
                    path.display(),
                    t.name
                );
            }
        }
        let label = trace_label(name);
        if let Some(k) = traces.iter().position(|(l, _)| *l == label) {
            bail!(
                "two pod lists are both named `{label}` ({} and {}): their outputs would overwrite each other; rename one, or run them apart",
                names[k],
                name
            );
        }
        traces.push((label, tasks));
    }
    Ok(traces)
}

/// Runs `blox pack`.
pub fn pack(args: &PackArgs) -> Result<ExitCode> {
    let tune = args.tune();
    if !(0.0..=MAX_TUNE).contains(&tune) {
        bail!("--tune {tune}: give a multiple of the GPU capacity from 0 to {MAX_TUNE}");
    }
    if args.placements && args.out.is_none() {
        bail!("--placements writes files under --out: give --out DIR too");
    }
    let seeds = parse_seeds(&args.seed)?;
    let policies = parse_policies(&args.policy)?;
    let nodes = load_nodes(args)?;
    let traces = load_traces(args, &nodes)?;
    let mut cells = Vec::new();
    for trace in 0..traces.len() {
        for &policy in &policies {
            for &seed in &seeds {
                cells.push(Cell {
                    trace,
                    policy,
                    seed,
                });
            }
        }
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if args.timed {
        say!("timed mode: tasks arrive at their creation times and leave at their deletion times")?;
    }
    let started = std::time::Instant::now();
    // A run that fails is reported; the others are kept and written.
    let mut ok_cells = Vec::new();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let results = run_cells(&cells, &nodes, &traces, args, threads);
    for (cell, result) in cells.into_iter().zip(results) {
        match result {
            Ok(d) => {
                ok_cells.push(cell);
                done.push(d);
            }
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    if args.timed {
        let rows: Vec<_> = ok_cells
            .iter()
            .map(|c| (traces[c.trace].0.as_str(), c.policy, c.seed))
            .collect();
        timed::report(args, &rows, &done, started.elapsed())?;
    } else {
        report(args, &ok_cells, &done, &traces, started.elapsed())?;
    }
    if let Some(first) = failed.first() {
        for f in &failed {
            say!("failed: {f}")?;
        }
        bail!(
            "{} of {} runs failed; first: {first}",
            failed.len(),
            failed.len() + done.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A run's allocation at the top arrival, ours and the published one.
type OursAndTheirs = (Option<f64>, Option<f64>);

fn fmt2(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

/// Prints the table and the means, and writes the files of `--out`.
fn report(
    args: &PackArgs,
    cells: &[Cell],
    done: &[Done],
    traces: &[(String, Vec<TaskSpec>)],
    took: std::time::Duration,
) -> Result<()> {
    let published = published();
    let tune = format!("{}", args.tune());
    let top = if args.tune() > 0.0 {
        (args.tune() * 100.0).round() as u32
    } else {
        0
    };
    let top_label = if top > 0 {
        format!("alloc@{top}%")
    } else {
        "alloc@end".to_string()
    };
    let theirs = |c: &Cell| {
        let key = (
            traces[c.trace].0.clone(),
            reference_name(c.policy).to_string(),
            tune.clone(),
            c.seed.to_string(),
        );
        published.get(&key).cloned()
    };
    say!(
        "{:<12} {:<15} {:>4}  {:>7}  {:>6}  {:>6}  {:>10}  {:>10}  published (100%, {})",
        "trace",
        "policy",
        "seed",
        "arrived",
        "placed",
        "failed",
        "alloc@100%",
        top_label,
        if top > 0 {
            format!("{top}%")
        } else {
            "end".to_string()
        }
    )?;
    let mut table = String::from(
        "trace,policy,seed,arrived,placed,failed,alloc_100,alloc_top,published_100,published_top,frag_percent_end\n",
    );
    let mut curves = String::from("trace,policy,seed,arrived_percent,allocated_percent\n");
    // (trace, policy) → (ours at top, published at top) per seed.
    let mut groups: BTreeMap<(usize, usize), Vec<OursAndTheirs>> = BTreeMap::new();
    for (c, d) in cells.iter().zip(done) {
        let pub_ = theirs(c);
        let label = &traces[c.trace].0;
        let (p, seed, arrived, placed) = (c.policy, c.seed, d.arrived, d.placed);
        let (failed, a100, atop) = (arrived - placed, fmt2(d.at_100), fmt2(d.at_top));
        let shown = pub_.as_ref().map(|(a, b)| format!("{a}, {b}"));
        say!(
            "{label:<12} {p:<15} {seed:>4}  {arrived:>7}  {placed:>6}  {failed:>6}  {a100:>10}  {atop:>10}  {}",
            shown.as_deref().unwrap_or("-")
        )?;
        let (p100, ptop) = pub_.clone().unwrap_or_default();
        let _ = writeln!(
            table,
            "{label},{p},{seed},{arrived},{placed},{failed},{a100},{atop},{p100},{ptop},{:.2}",
            d.frag_end
        );
        for (r, v) in &d.curve {
            let _ = writeln!(curves, "{label},{},{},{r},{v}", c.policy, c.seed);
        }
        groups
            .entry((
                c.trace,
                known_policies()
                    .iter()
                    .position(|n| *n == c.policy)
                    .unwrap_or(0),
            ))
            .or_default()
            .push((d.at_top, pub_.and_then(|(_, t)| t.parse().ok())));
    }
    let means = means_over_seeds(&groups, traces, top)?;
    say!("{} runs in {:.1} s", cells.len(), took.as_secs_f64())?;
    let Some(dir) = &args.out else { return Ok(()) };
    for (name, text) in [
        ("pack.csv", &table),
        ("means.csv", &means),
        ("curves.csv", &curves),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| path.display().to_string())?;
    }
    for f in report::report_dir(dir)? {
        say!("wrote {}", f.display())?;
    }
    Ok(())
}

/// Per pod list and policy, the mean over seeds at the top arrival, ours and
/// the published one: printed when there are several seeds, as `means.csv`.
fn means_over_seeds(
    groups: &BTreeMap<(usize, usize), Vec<OursAndTheirs>>,
    traces: &[(String, Vec<TaskSpec>)],
    top: u32,
) -> Result<String> {
    let mut means =
        String::from("trace,policy,seeds,mean_alloc_top,published_mean_top,difference\n");
    let many = groups.values().any(|v| v.len() > 1);
    if many {
        say!(
            "means over seeds at {} arrived: trace, policy, seeds, ours, published, difference",
            if top > 0 {
                format!("{top}%")
            } else {
                "the end".to_string()
            }
        )?;
    }
    for ((trace, order), v) in groups {
        let ours: Vec<f64> = v.iter().filter_map(|(o, _)| *o).collect();
        let theirs: Vec<f64> = v.iter().filter_map(|(_, t)| *t).collect();
        let mean = |x: &[f64]| {
            (x.len() == v.len() && !x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64)
        };
        let (o, t) = (mean(&ours), mean(&theirs));
        let diff = o
            .zip(t)
            .map(|(o, t)| format!("{:+.2}", o - t))
            .unwrap_or_else(|| "-".into());
        let policy = known_policies()[*order];
        let label = &traces[*trace].0;
        if many {
            say!(
                "  {label:<12} {policy:<15} {:>3}  {:>6}  {:>6}  {diff}",
                v.len(),
                fmt2(o),
                fmt2(t)
            )?;
        }
        let _ = writeln!(
            means,
            "{label},{policy},{},{},{},{diff}",
            v.len(),
            fmt2(o),
            fmt2(t)
        );
    }
    Ok(means)
}
