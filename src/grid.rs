//! `blox sweep` over whole configs: every `[[grid]]` of a sweep file is a
//! cross product of complete policy configs × workloads × loads × seeds, run in
//! parallel on all cores, resumable (a cell whose `cell.csv` exists is read
//! back, not recomputed), with each cell's `jobs.csv` kept for plots.
//!
//! ```toml
//! [[grid]]
//! name = "pollux-workloads"
//! configs = ["pollux-workloads/fifo.toml", "pollux-workloads/ones.toml"]
//! workloads = ["../../data/pollux/workloads/workload-1.csv"]  # like `--workload`
//! seeds = [1]
//!
//! [[grid]]
//! name = "philly"
//! configs = ["pollux-workloads/las.toml"]
//! jobs_per_hour = [2, 4, 6, 8]
//! # Whole sections replaced in every config of this grid:
//! sections.workload = { kind = "philly", path = "../../data/pollux/traces/philly.csv", num_jobs = 400 }
//! sections.cluster = { nodes = 32, gpus_per_node = 4 }
//! # Dotted overrides, applied after; per config: `set_for."las.toml" = {...}`.
//! set = { "run.round_s" = "300" }
//! # Named override sets, each reported as a policy of its own:
//! variants = [{ name = "las", set = { "scheduling.policy" = "las" } }]
//! ```
//!
//! Paths are relative to the sweep file. Results: `OUT/sweep.csv` (one row
//! per cell) and `OUT/<grid>/<config>/<workload or load>-s<seed>/` with the
//! cell's `jobs.csv`, `rounds.csv`, `summary.txt` and `cell.csv`.

use anyhow::{bail, Context, Result};
use blox_core::Config;
use blox_sim::{load_config, Simulation, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Grid {
    name: String,
    configs: Vec<PathBuf>,
    #[serde(default)]
    workloads: Vec<PathBuf>,
    #[serde(default)]
    jobs_per_hour: Vec<f64>,
    #[serde(default)]
    seeds: Vec<u64>,
    #[serde(default)]
    sections: toml::Table,
    #[serde(default)]
    set: BTreeMap<String, String>,
    /// Extra overrides for one config, keyed by its file name.
    #[serde(default)]
    set_for: BTreeMap<String, BTreeMap<String, String>>,
    /// Named override sets, each a policy of its own in the results (e.g. the
    /// nine admission × scheduling combinations of one config).
    #[serde(default)]
    variants: Vec<Variant>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Variant {
    name: String,
    #[serde(default)]
    set: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GridFile {
    grid: Vec<Grid>,
}

/// One cell of a grid.
#[derive(Clone, Debug)]
pub struct Cell {
    pub grid: String,
    /// The config's file stem (the policy's name in reports).
    pub policy: String,
    /// Workload file stem, or empty.
    pub workload: String,
    pub jobs_per_hour: Option<f64>,
    pub seed: Option<u64>,
    dir: PathBuf,
    config: PathBuf,
    workload_path: Option<PathBuf>,
    overrides: Vec<(String, String)>,
    sections: toml::Table,
}

impl Cell {
    /// Path segment naming the cell inside its policy's folder.
    fn slug(&self) -> String {
        let mut s = String::new();
        if !self.workload.is_empty() {
            s.push_str(&self.workload);
        }
        if let Some(l) = self.jobs_per_hour {
            if !s.is_empty() {
                s.push('-');
            }
            s.push_str(&format!("{l}jph"));
        }
        if s.is_empty() {
            s.push_str("default");
        }
        if let Some(seed) = self.seed {
            s.push_str(&format!("-s{seed}"));
        }
        s
    }
}

/// True when the file describes `[[grid]]` sweeps.
pub fn is_grid_file(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("grid"))
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The cells of a grid file, in order.
fn cells(path: &Path, out: &Path) -> Result<Vec<Cell>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: GridFile = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out_cells = Vec::new();
    for g in &file.grid {
        if g.configs.is_empty() {
            bail!("{}: grid `{}` lists no configs", path.display(), g.name);
        }
        let workloads: Vec<Option<PathBuf>> = if g.workloads.is_empty() {
            vec![None]
        } else {
            g.workloads.iter().map(|w| Some(base.join(w))).collect()
        };
        let loads: Vec<Option<f64>> = if g.jobs_per_hour.is_empty() {
            vec![None]
        } else {
            g.jobs_per_hour.iter().map(|l| Some(*l)).collect()
        };
        let seeds: Vec<Option<u64>> = if g.seeds.is_empty() {
            vec![None]
        } else {
            g.seeds.iter().map(|s| Some(*s)).collect()
        };
        let variants: Vec<Option<&Variant>> = if g.variants.is_empty() {
            vec![None]
        } else {
            g.variants.iter().map(Some).collect()
        };
        for (c, v) in g
            .configs
            .iter()
            .flat_map(|c| variants.iter().map(move |v| (c, *v)))
        {
            let config = base.join(c);
            let name = c
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let policy = match v {
                None => stem(&config),
                Some(v) if g.configs.len() == 1 => v.name.clone(),
                Some(v) => format!("{}-{}", stem(&config), v.name),
            };
            for w in &workloads {
                for l in &loads {
                    for s in &seeds {
                        let mut overrides: Vec<(String, String)> =
                            g.set.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                        if let Some(extra) = g.set_for.get(&name) {
                            overrides.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
                        }
                        if let Some(v) = v {
                            overrides.extend(v.set.iter().map(|(k, v)| (k.clone(), v.clone())));
                        }
                        if let Some(l) = l {
                            overrides.push(("workload.jobs_per_hour".into(), l.to_string()));
                        }
                        if let Some(s) = s {
                            overrides.push(("run.seed".into(), s.to_string()));
                        }
                        let mut cell = Cell {
                            grid: g.name.clone(),
                            policy: policy.clone(),
                            workload: w.as_deref().map(stem).unwrap_or_default(),
                            jobs_per_hour: *l,
                            seed: *s,
                            dir: PathBuf::new(),
                            config: config.clone(),
                            workload_path: w.clone(),
                            overrides,
                            sections: g.sections.clone(),
                        };
                        cell.dir = out.join(&g.name).join(&cell.policy).join(cell.slug());
                        out_cells.push(cell);
                    }
                }
            }
        }
    }
    Ok(out_cells)
}

/// Builds a cell's config: its file with whole sections replaced (paths in
/// them resolved against the sweep file), its workload, then the overrides.
fn cell_config(cell: &Cell, sweep_base: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(&cell.config)
        .with_context(|| format!("reading {}", cell.config.display()))?;
    let mut doc: toml::Table =
        toml::from_str(&text).with_context(|| cell.config.display().to_string())?;
    let cfg_base = cell.config.parent().unwrap_or(Path::new("."));
    for (k, v) in &cell.sections {
        let mut v = v.clone();
        if let toml::Value::Table(t) = &mut v {
            // Paths given in the sweep file are relative to it.
            for key in PATH_KEYS {
                if let Some(toml::Value::String(p)) = t.get(key) {
                    let abs = std::path::absolute(sweep_base.join(p))?;
                    t.insert(key.into(), toml::Value::String(abs.display().to_string()));
                }
            }
        }
        doc.insert(k.clone(), v);
    }
    let merged = toml::to_string(&doc)?;
    let tmp = std::env::temp_dir().join(format!(
        "blox-cell-{}-{}.toml",
        std::process::id(),
        cell.dir
            .display()
            .to_string()
            .replace(['/', '\\', ' '], "_")
    ));
    // Relative paths in the config stay relative to the config's folder.
    let merged = rebase_paths(&merged, cfg_base)?;
    std::fs::write(&tmp, merged)?;
    let cfg = load_config(&tmp, cell.workload_path.as_deref(), &cell.overrides);
    let _ = std::fs::remove_file(&tmp);
    Ok(cfg?)
}

/// Config keys whose values are file paths relative to the config file.
const PATH_KEYS: [&str; 3] = ["path", "traces_dir", "host_profiles"];

/// Makes every relative `path` / `traces_dir` / `host_profiles` value absolute
/// against `base`.
fn rebase_paths(text: &str, base: &Path) -> Result<String> {
    let mut doc: toml::Table = toml::from_str(text)?;
    for (_, sec) in doc.iter_mut() {
        if let toml::Value::Table(t) = sec {
            for key in PATH_KEYS {
                if let Some(toml::Value::String(p)) = t.get(key) {
                    if Path::new(p).is_relative() {
                        let abs = std::path::absolute(base.join(p))?;
                        t.insert(key.into(), toml::Value::String(abs.display().to_string()));
                    }
                }
            }
        }
    }
    Ok(toml::to_string(&doc)?)
}

const HEADER: &str = "grid,policy,scheduling,placement,workload,jobs_per_hour,seed,jobs,finished,avg_jct_s,p50_jct_s,p99_jct_s,avg_responsiveness_s,makespan_s,gpu_utilisation,preemptions,rounds,wall_s";

/// One `sweep.csv` row.
#[derive(Clone, Debug)]
pub struct Row {
    pub cell: Cell,
    pub scheduling: String,
    pub placement: String,
    pub summary: Summary,
    pub wall_s: f64,
}

impl Row {
    fn line(&self) -> String {
        let c = &self.cell;
        let s = &self.summary;
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3}",
            c.grid,
            c.policy,
            self.scheduling,
            self.placement,
            c.workload,
            c.jobs_per_hour.map(|v| v.to_string()).unwrap_or_default(),
            c.seed.map(|v| v.to_string()).unwrap_or_default(),
            s.jobs_total,
            s.jobs_finished,
            s.avg_jct_s,
            s.p50_jct_s,
            s.p99_jct_s,
            s.avg_responsiveness_s,
            s.makespan_s,
            s.gpu_utilisation,
            s.preemptions,
            s.rounds,
            self.wall_s
        )
    }

    /// Reads back a finished cell's `cell.csv`.
    fn load(cell: &Cell) -> Option<Row> {
        let text = std::fs::read_to_string(cell.dir.join("cell.csv")).ok()?;
        let line = text.lines().nth(1)?;
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != HEADER.split(',').count() {
            return None;
        }
        let num = |i: usize| f[i].parse::<f64>().ok();
        let summary = Summary {
            policies: (String::new(), f[2].to_string(), f[3].to_string()),
            jobs_total: num(7)? as usize,
            jobs_finished: num(8)? as usize,
            jobs_rejected: 0,
            avg_jct_s: num(9)?,
            p50_jct_s: num(10)?,
            p99_jct_s: num(11)?,
            avg_responsiveness_s: num(12)?,
            makespan_s: num(13)?,
            gpu_utilisation: num(14)?,
            preemptions: num(15)? as u64,
            rounds: num(16)? as u64,
            sim_time_s: 0.0,
        };
        Some(Row {
            cell: cell.clone(),
            scheduling: f[2].to_string(),
            placement: f[3].to_string(),
            summary,
            wall_s: num(17)?,
        })
    }
}

/// Runs (or resumes) every cell of a grid file; writes `OUT/sweep.csv`.
pub fn run(path: &Path, out: &Path, threads: Option<usize>) -> Result<Vec<Row>> {
    let all = cells(path, out)?;
    let base = path.parent().unwrap_or(Path::new("."));
    // Validate every cell's config before running anything.
    let mut todo = Vec::new();
    let mut done = Vec::new();
    for cell in &all {
        match Row::load(cell) {
            Some(r) => done.push(r),
            None => {
                let cfg = cell_config(cell, base)
                    .with_context(|| format!("grid `{}`, {}", cell.grid, cell.config.display()))?;
                blox_core::registry::build_policies(
                    &cfg.admission,
                    &cfg.scheduling,
                    &cfg.placement,
                )?;
                todo.push((cell.clone(), cfg));
            }
        }
    }
    eprintln!(
        "{} cells: {} already done, {} to run",
        all.len(),
        done.len(),
        todo.len()
    );
    // Slow policies first, so the cores stay busy at the end.
    let weight = |c: &Config| match c.scheduling.policy.as_str() {
        "pollux" => 3,
        "ones" => 2,
        _ => 1,
    };
    todo.sort_by_key(|(_, c)| std::cmp::Reverse(weight(c)));
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()?;
    let bar = ProgressBar::new(todo.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "[{elapsed_precise}] {wide_bar} {pos}/{len} cells ({eta} left)",
        )
        .expect("valid template"),
    );
    let fresh: Vec<Result<Row>> = pool.install(|| {
        todo.par_iter()
            .map(|(cell, cfg)| {
                let t = std::time::Instant::now();
                let r = Simulation::from_config(cfg)?.run_to_end()?;
                let wall_s = t.elapsed().as_secs_f64();
                // Written from a plain thread, not this rayon worker: polars' parquet
                // writer runs on its own pool, and a rayon worker waiting on another
                // pool steals work from its own meanwhile, so the write could sit
                // behind a whole other cell (observed: parquet files stuck at 0 bytes).
                std::thread::scope(|s| {
                    s.spawn(|| r.write(&cell.dir))
                        .join()
                        .map_err(|_| anyhow::anyhow!("writing {} panicked", cell.dir.display()))?
                        .map_err(anyhow::Error::msg)
                })?;
                let row = Row {
                    cell: cell.clone(),
                    scheduling: cfg.scheduling.policy.clone(),
                    placement: cfg.placement.policy.clone(),
                    summary: r.summary,
                    wall_s,
                };
                std::fs::write(
                    cell.dir.join("cell.csv"),
                    format!("{HEADER}\n{}\n", row.line()),
                )?;
                bar.inc(1);
                Ok(row)
            })
            .collect()
    });
    bar.finish_and_clear();
    for r in fresh {
        done.push(r?);
    }
    // sweep.csv in the grid file's cell order.
    let order: BTreeMap<PathBuf, usize> = all
        .iter()
        .enumerate()
        .map(|(i, c)| (c.dir.clone(), i))
        .collect();
    done.sort_by_key(|r| order[&r.cell.dir]);
    std::fs::create_dir_all(out)?;
    let mut f = std::fs::File::create(out.join("sweep.csv"))?;
    writeln!(f, "{HEADER}")?;
    for r in &done {
        writeln!(f, "{}", r.line())?;
    }
    println!(
        "{:<18} {:<22} {:<14} {:>6} {:>10} {:>10} {:>10}",
        "grid", "policy", "workload", "jobs/h", "avg JCT h", "p99 JCT h", "util %"
    );
    for r in &done {
        println!(
            "{:<18} {:<22} {:<14} {:>6} {:>10.3} {:>10.2} {:>10.1}",
            r.cell.grid,
            r.cell.policy,
            r.cell.workload,
            r.cell
                .jobs_per_hour
                .map(|v| v.to_string())
                .unwrap_or_default(),
            r.summary.avg_jct_s / 3600.0,
            r.summary.p99_jct_s / 3600.0,
            100.0 * r.summary.gpu_utilisation
        );
    }
    println!("wrote {}", out.join("sweep.csv").display());
    Ok(done)
}
