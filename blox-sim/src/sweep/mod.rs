//! Sweeps: many simulations from one file, in parallel on all cores, into one
//! table (`sweep.csv`) that `blox report` reads.
//!
//! Two kinds of sweep file feed the same engine:
//! - a config with a `[sweep]` section ([`matrix`]): its policies × loads ×
//!   seeds;
//! - a file of `[[grid]]`s ([`grid`]): whole configs × workloads × loads ×
//!   seeds, with sections and values replaced per grid.
//!
//! Every cell writes its tables (`jobs.csv`, `rounds.csv`, `summary.txt`) and
//! a one-row `cell.csv` into its own folder; a later run reuses a cell only if
//! the cell's config is unchanged (its fingerprint is in `cell.csv`), so a
//! sweep can be stopped and resumed. `sweep.csv` has one row per cell, in the
//! file's order, in the schema of [`SweepRow`]. A sweep can be split over
//! machines ([`shard`]: `--shard I/N`, then `blox sweep merge`).

pub mod grid;
pub mod matrix;
pub mod shard;

pub use shard::{merge, Merged, Shard};

use crate::report::ReportError;
use crate::run::SimError;
use crate::{Simulation, Summary};
use blox_config::{Config, ConfigError};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A sweep that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A cell's config or run failed; `cell` names it.
    #[error("{cell}")]
    Cell {
        cell: String,
        #[source]
        source: Box<SimError>,
    },
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("worker threads: {0}")]
    Threads(#[from] rayon::ThreadPoolBuildError),
}

impl SweepError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
        move |source| SweepError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// One row of `sweep.csv` (and of each cell's `cell.csv`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// The grid's name (a `[sweep]` config: the config file's stem).
    pub grid: String,
    /// What reports call the policy: the config's stem, a variant's name, or
    /// the `[sweep]` combination.
    pub policy: String,
    pub admission: String,
    pub scheduling: String,
    pub placement: String,
    /// The workload's label (file stem, made unique within the grid), or empty.
    pub workload: String,
    pub jobs_per_hour: Option<f64>,
    pub seed: Option<u64>,
    /// The cell's folder, relative to the sweep's output folder.
    pub dir: String,
    /// Fingerprint of the cell's complete config.
    pub config_hash: String,
    pub jobs: usize,
    pub finished: usize,
    pub rejected: usize,
    pub unfinished: usize,
    pub avg_jct_s: f64,
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    pub avg_responsiveness_s: f64,
    pub makespan_s: f64,
    pub gpu_utilisation: f64,
    pub preemptions: u64,
    pub rounds: u64,
    pub wall_s: f64,
    /// Node failures that stopped jobs (`[failures]`), and the ETTR of the
    /// finished jobs (GPU-time weighted), overall and by job size
    /// (`label:value` pairs joined by `;`, the summary's size buckets).
    #[serde(default)]
    pub interruptions: u64,
    #[serde(default)]
    pub ettr: Option<f64>,
    #[serde(default)]
    pub ettr_by_size: String,
}

impl SweepRow {
    /// The failure columns of a run's summary.
    pub fn failure_columns(s: &Summary) -> (u64, Option<f64>, String) {
        let by_size: Vec<String> = s
            .ettr_by_size
            .iter()
            .map(|(label, _, e)| format!("{label}:{e:.4}"))
            .collect();
        (s.interruptions, s.ettr, by_size.join(";"))
    }

    /// `ettr_by_size` read back: (size label, ETTR).
    pub fn ettr_sizes(&self) -> Vec<(String, f64)> {
        self.ettr_by_size
            .split(';')
            .filter_map(|p| {
                let (l, v) = p.rsplit_once(':')?;
                Some((l.to_string(), v.parse().ok()?))
            })
            .collect()
    }
}

/// One simulation of a sweep: its labels, folder and complete config.
#[derive(Clone, Debug)]
pub struct Cell {
    pub grid: String,
    pub policy: String,
    pub workload: String,
    pub jobs_per_hour: Option<f64>,
    pub seed: Option<u64>,
    /// Folder relative to the output folder.
    pub dir: PathBuf,
    pub config: Config,
}

impl Cell {
    /// `grid/policy/workload-load-seed`, for messages.
    pub fn name(&self) -> String {
        self.dir.display().to_string()
    }

    fn row(&self, s: &Summary, wall_s: f64) -> SweepRow {
        use crate::synth::module_label;
        let c = &self.config;
        let (interruptions, ettr, ettr_by_size) = SweepRow::failure_columns(s);
        SweepRow {
            grid: self.grid.clone(),
            policy: self.policy.clone(),
            admission: module_label(&c.admission),
            scheduling: module_label(&c.scheduling),
            placement: module_label(&c.placement),
            workload: self.workload.clone(),
            jobs_per_hour: self.jobs_per_hour,
            seed: self.seed,
            dir: dir_string(&self.dir),
            config_hash: fingerprint(c),
            jobs: s.jobs_total,
            finished: s.jobs_finished,
            rejected: s.jobs_rejected,
            unfinished: s.unfinished,
            avg_jct_s: s.avg_jct_s,
            p50_jct_s: s.p50_jct_s,
            p99_jct_s: s.p99_jct_s,
            avg_responsiveness_s: s.avg_responsiveness_s,
            makespan_s: s.makespan_s,
            gpu_utilisation: s.gpu_utilisation,
            preemptions: s.preemptions,
            rounds: s.rounds,
            wall_s,
            interruptions,
            ettr,
            ettr_by_size,
        }
    }
}

/// `/`-separated, whatever the platform.
fn dir_string(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// A stable fingerprint of everything a config says (FNV-1a, 64 bits, over
/// its canonical TOML with paths resolved): equal configs give equal
/// fingerprints on every machine and build.
pub fn fingerprint(cfg: &Config) -> String {
    let mut doc = toml::Table::new();
    for m in [&cfg.admission, &cfg.scheduling, &cfg.placement] {
        let mut t = blox_config::convert::to_toml(m.params.table());
        t.insert("policy".into(), toml::Value::String(m.policy.clone()));
        doc.insert(m.params.name().to_string(), toml::Value::Table(t));
    }
    // The loop's plugins count where a config names other than the
    // defaults (so the fingerprints of configs that name none stay as
    // they were).
    let defaults = [
        (&cfg.protection, "startup-aware"),
        (
            &cfg.checkpointing,
            blox_core::extension::default_checkpointing(&cfg.run),
        ),
        (&cfg.recovery, "hot-spares"),
    ];
    for (m, default) in defaults {
        if m.policy != default || !m.params.table().is_empty() {
            let mut t = blox_config::convert::to_toml(m.params.table());
            t.insert("policy".into(), toml::Value::String(m.policy.clone()));
            doc.insert(m.params.name().to_string(), toml::Value::Table(t));
        }
    }
    for s in cfg.sections() {
        let mut t = blox_config::convert::to_toml(s.table());
        t.insert(
            "(resolved against)".into(),
            toml::Value::String(s.resolve_path(Path::new("")).display().to_string()),
        );
        doc.insert(s.name().to_string(), toml::Value::Table(t));
    }
    let text = toml::to_string(&doc).unwrap_or_default();
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// A path segment made of safe characters (`[A-Za-z0-9._-]`, the rest `_`).
pub fn slug(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        "_".into()
    } else {
        out
    }
}

/// Labels of workload files, unique within one list: the file stem, or,
/// where two files share a stem, the stem with as many parent folders as it
/// takes to tell them apart.
pub fn workload_labels(paths: &[PathBuf]) -> Vec<String> {
    let parts: Vec<Vec<String>> = paths
        .iter()
        .map(|p| {
            let mut v: Vec<String> = p
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            v.reverse();
            v
        })
        .collect();
    let label = |i: usize, depth: usize| -> String {
        let mut v: Vec<&str> = parts[i].iter().take(depth).map(String::as_str).collect();
        v.reverse();
        v.join("-")
    };
    (0..paths.len())
        .map(|i| {
            let mut depth = 1;
            loop {
                let mine = label(i, depth);
                let clash = (0..paths.len()).any(|j| j != i && label(j, depth) == mine);
                if !clash || depth >= parts[i].len() {
                    break if clash { format!("{mine}-{i}") } else { mine };
                }
                depth += 1;
            }
        })
        .collect()
}

/// Folder names of cells that are unique (a clash gets `-2`, `-3`, …).
fn unique_dirs(cells: &mut [Cell]) {
    let mut seen = std::collections::HashMap::<PathBuf, usize>::new();
    for c in cells.iter_mut() {
        let n = seen.entry(c.dir.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            let name = format!(
                "{}-{}",
                c.dir.file_name().unwrap_or_default().to_string_lossy(),
                n
            );
            c.dir.set_file_name(name);
        }
    }
}

/// A callback for every cell that ran.
pub type OnCell = std::sync::Arc<dyn Fn(&SweepRow) + Send + Sync>;

/// How a sweep runs.
#[derive(Clone, Default)]
pub struct SweepOptions {
    /// Worker threads (`None`: all cores).
    pub threads: Option<usize>,
    /// Called after every cell that ran (for a progress bar).
    pub on_cell: Option<OnCell>,
    /// Run only this shard's cells ([`shard`]).
    pub shard: Option<Shard>,
}

/// What a sweep did.
#[derive(Clone, Debug)]
pub struct SweepOutcome {
    /// One row per cell, in the sweep file's order.
    pub rows: Vec<SweepRow>,
    /// Cells reused from an earlier run.
    pub reused: usize,
    /// Cells run now.
    pub ran: usize,
    /// `OUT/sweep.csv`.
    pub table: PathBuf,
}

/// Reads a cell's `cell.csv` if it is there and belongs to the same config.
fn reuse(cell: &Cell, out: &Path, hash: &str) -> Option<SweepRow> {
    let rows = read_rows(&out.join(&cell.dir).join("cell.csv")).ok()?;
    rows.into_iter()
        .next()
        .filter(|r| r.config_hash == hash && r.dir == dir_string(&cell.dir))
}

/// Runs (or resumes) `cells`; writes every cell's tables and `OUT/sweep.csv`.
pub fn run_cells(
    mut cells: Vec<Cell>,
    out: &Path,
    opts: &SweepOptions,
) -> Result<SweepOutcome, SweepError> {
    unique_dirs(&mut cells);
    let total = cells.len();
    if let Some(s) = &opts.shard {
        cells = s.select(cells);
    }
    // Every cell's policies are built before anything runs: a bad cell fails first.
    for c in &cells {
        blox_core::registry::build_policies(
            &c.config.admission,
            &c.config.scheduling,
            &c.config.placement,
        )?;
        c.config.profile()?;
    }
    let mut rows: Vec<Option<SweepRow>> = Vec::with_capacity(cells.len());
    let mut todo = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        let hash = fingerprint(&c.config);
        match reuse(c, out, &hash) {
            Some(r) => rows.push(Some(r)),
            None => {
                rows.push(None);
                todo.push(i);
            }
        }
    }
    let reused = cells.len() - todo.len();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads.unwrap_or(0))
        .build()?;
    let fresh: Vec<(usize, Result<SweepRow, SweepError>)> = pool.install(|| {
        todo.par_iter()
            .map(|&i| {
                let cell = &cells[i];
                let r = run_cell(cell, out);
                if let (Ok(row), Some(cb)) = (&r, &opts.on_cell) {
                    cb(row);
                }
                (i, r)
            })
            .collect()
    });
    for (i, r) in fresh {
        rows[i] = Some(r?);
    }
    let rows: Vec<SweepRow> = rows
        .into_iter()
        .map(|r| r.expect("every cell ran"))
        .collect();
    std::fs::create_dir_all(out).map_err(SweepError::io(out))?;
    let table = out.join("sweep.csv");
    write_rows(&table, &rows)?;
    if let Some(s) = &opts.shard {
        s.record(out, total)?;
    }
    Ok(SweepOutcome {
        ran: todo.len(),
        reused,
        rows,
        table,
    })
}

fn run_cell(cell: &Cell, out: &Path) -> Result<SweepRow, SweepError> {
    let failed = |source: SimError| SweepError::Cell {
        cell: format!("sweep cell {}", cell.name()),
        source: Box::new(source),
    };
    let t = std::time::Instant::now();
    let r = Simulation::from_config(&cell.config)
        .and_then(Simulation::run_to_end)
        .map_err(failed)?;
    let wall_s = t.elapsed().as_secs_f64();
    let dir = out.join(&cell.dir);
    // Written from a plain thread, not this rayon worker: polars' parquet
    // writer runs on its own pool, and a rayon worker waiting on another
    // pool steals work from its own meanwhile, so the write could sit
    // behind a whole other cell (observed: parquet files stuck at 0 bytes).
    std::thread::scope(|s| {
        s.spawn(|| r.write(&dir)).join().unwrap_or_else(|_| {
            Err(ReportError::Invalid {
                path: dir.clone(),
                message: "writing the tables panicked".into(),
            })
        })
    })?;
    let row = cell.row(&r.summary, wall_s);
    write_rows(&dir.join("cell.csv"), std::slice::from_ref(&row))?;
    Ok(row)
}

/// Writes rows in the `sweep.csv` schema.
pub fn write_rows(path: &Path, rows: &[SweepRow]) -> Result<(), SweepError> {
    let table = |e: csv::Error| {
        SweepError::Report(ReportError::Table {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    };
    let mut w = csv::Writer::from_path(path).map_err(table)?;
    for r in rows {
        w.serialize(r).map_err(table)?;
    }
    w.flush().map_err(SweepError::io(path))
}

/// Reads a `sweep.csv` (or `cell.csv`); errors name the file and line.
pub fn read_rows(path: &Path) -> Result<Vec<SweepRow>, SweepError> {
    let mut r = csv::Reader::from_path(path).map_err(|e| {
        SweepError::Report(ReportError::Table {
            path: path.to_path_buf(),
            source: Box::new(e),
        })
    })?;
    let mut rows = Vec::new();
    for (i, rec) in r.deserialize::<SweepRow>().enumerate() {
        rows.push(rec.map_err(|e| SweepError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "line {}: {e} (is it the output of `blox sweep` from this version?)",
                i + 2
            ),
        })?);
    }
    Ok(rows)
}

/// Runs a sweep file: a `[[grid]]` file or a config with a `[sweep]`
/// section (recognised from its contents). `overrides` apply to `[sweep]`
/// configs only.
pub fn run_file(
    path: &Path,
    out: &Path,
    overrides: &[blox_config::Override],
    opts: &SweepOptions,
) -> Result<SweepOutcome, SweepError> {
    let text = std::fs::read_to_string(path).map_err(SweepError::io(path))?;
    let cells = if grid::is_grid_file(&text) {
        if !overrides.is_empty() {
            return Err(SweepError::Invalid {
                path: path.to_path_buf(),
                message: "--set applies to [sweep] configs; a [[grid]] file sets values per grid (`set = { ... }`)".into(),
            });
        }
        grid::cells(path, &text)?
    } else {
        matrix::cells(path, overrides)?
    };
    run_cells(cells, out, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_sharing_a_stem_get_distinct_labels() {
        let p = |s: &str| PathBuf::from(s);
        let l = workload_labels(&[
            p("data/workloads/workload-1.csv"),
            p("data/workloads-0.5/workload-1.csv"),
            p("data/workloads/workload-2.csv"),
        ]);
        assert_eq!(
            l,
            [
                "workloads-workload-1",
                "workloads-0.5-workload-1",
                "workload-2"
            ]
        );
        let same = workload_labels(&[p("a/w.csv"), p("a/w.csv")]);
        assert_ne!(same[0], same[1]);
    }

    #[test]
    fn a_cell_fingerprint_counts_the_loops_plugins_only_where_named() {
        let of = |extra: &str| {
            let text = format!("[cluster]\nnodes = 2\ngpus_per_node = 2\n{extra}");
            fingerprint(&Config::parse(&text, "c.toml", Path::new("."), &[]).unwrap())
        };
        let plain = of("");
        // A config naming the defaults is the same config.
        assert_eq!(plain, of("[protection]\npolicy = \"startup-aware\"\n"));
        assert_eq!(plain, of("[recovery]\npolicy = \"hot-spares\"\n"));
        // Another plugin is another config: its cells do not reuse the
        // default's rows.
        assert_ne!(plain, of("[protection]\npolicy = \"none\"\n"));
        assert_ne!(plain, of("[recovery]\npolicy = \"requeue\"\n"));
        let yd = "[run]\ncheckpoint_save_s = 5\n";
        assert_ne!(
            of(yd),
            of(&format!("{yd}[checkpointing]\npolicy = \"young-daly\"\n"))
        );
    }

    #[test]
    fn slugs_keep_only_safe_characters() {
        assert_eq!(slug("load-based(k=1.0)/las"), "load-based_k_1.0__las");
        assert_eq!(slug(".."), "_");
    }
}
