//! `[[grid]]` sweep files: every `[[grid]]` is a cross product of complete
//! policy configs × workloads × loads × seeds.
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
//! Paths are relative to the sweep file. Each cell's folder is
//! `OUT/<grid>/<policy>/<workload or load>-s<seed>/`. Errors in a cell's
//! config name the config file's own lines, or the sweep file's line that
//! changed it.

use super::{slug, workload_labels, Cell, SweepError};
use crate::run::ConfigRequest;
use blox_config::{key_lines, Override, SectionSource};
use serde::Deserialize;
use std::collections::BTreeMap;
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

/// True when the file describes `[[grid]]` sweeps.
pub fn is_grid_file(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("grid"))
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The cells of a grid file, in order; every cell's config is read and
/// checked here.
pub fn cells(path: &Path, text: &str) -> Result<Vec<Cell>, SweepError> {
    let file: GridFile = toml::from_str(text).map_err(|e| SweepError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let lines = key_lines(text);
    let mut out = Vec::new();
    for (gi, g) in file.grid.iter().enumerate() {
        let ctx = GridCtx {
            path,
            lines: &lines,
            base: path.parent().unwrap_or(Path::new(".")),
            key: format!("grid.{gi}"),
            g,
        };
        ctx.cells(&mut out)?;
    }
    Ok(out)
}

/// One `[[grid]]` of a sweep file, its cells made.
struct GridCtx<'a> {
    path: &'a Path,
    lines: &'a blox_config::KeyLines,
    /// The sweep file's folder: paths are relative to it.
    base: &'a Path,
    /// The grid's key in the file (`grid.<i>`).
    key: String,
    g: &'a Grid,
}

impl GridCtx<'_> {
    fn invalid(&self, message: String) -> SweepError {
        SweepError::Invalid {
            path: self.path.to_path_buf(),
            message,
        }
    }

    /// `file:line` of `key` in the sweep file.
    fn at(&self, key: &str) -> String {
        format!(
            "{}:{}",
            self.path.display(),
            self.lines.line(key).unwrap_or(0)
        )
    }

    /// `table`'s overrides, each naming its line (`key`: the table's key).
    fn set(&self, table: &BTreeMap<String, String>, key: &str) -> Vec<Override> {
        (table.iter())
            .map(|(k, v)| {
                Override::set(k, v).with_origin(format!(
                    "{} (grid `{}`, {key}.\"{k}\")",
                    self.at(&format!("{key}.{k}")),
                    self.g.name
                ))
            })
            .collect()
    }

    /// The sections the grid replaces in every config.
    fn sections(&self) -> Result<Vec<SectionSource>, SweepError> {
        let mut sections = Vec::new();
        for (name, v) in &self.g.sections {
            let key = format!("{}.sections.{name}", self.key);
            let Some(table) = v.as_table() else {
                return Err(self.invalid(format!(
                    "{}: sections.{name} must be a table",
                    self.at(&key)
                )));
            };
            sections.push(SectionSource {
                name: name.clone(),
                table: table.clone(),
                file: self.path.display().to_string(),
                lines: self.lines.under(&key),
                line: self.lines.line(&key).unwrap_or(0),
                base_dir: self.base.to_path_buf(),
            });
        }
        Ok(sections)
    }

    /// Every cell of the grid: configs × variants × workloads × loads ×
    /// seeds, in that order.
    fn cells(&self, out: &mut Vec<Cell>) -> Result<(), SweepError> {
        let (g, gk) = (self.g, &self.key);
        if g.configs.is_empty() {
            return Err(self.invalid(format!("grid `{}` lists no configs", g.name)));
        }
        let names: Vec<String> = (g.configs.iter())
            .map(|c| {
                c.file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        if let Some(k) = g.set_for.keys().find(|k| !names.contains(k)) {
            return Err(self.invalid(format!(
                "{}: grid `{}`: set_for.\"{k}\" names no config of the grid (it has {})",
                self.at(&format!("{gk}.set_for.{k}")),
                g.name,
                names.join(", ")
            )));
        }
        let sections = self.sections()?;
        let workloads: Vec<PathBuf> = g.workloads.iter().map(|w| self.base.join(w)).collect();
        let labels = workload_labels(&workloads);
        let axis = |n: usize| -> Vec<Option<usize>> {
            match n {
                0 => vec![None],
                n => (0..n).map(Some).collect(),
            }
        };
        for (ci, c) in g.configs.iter().enumerate() {
            let config = self.base.join(c);
            for v in axis(g.variants.len()) {
                let policy = match v {
                    None => stem(&config),
                    Some(vi) if g.configs.len() == 1 => g.variants[vi].name.clone(),
                    Some(vi) => format!("{}-{}", stem(&config), g.variants[vi].name),
                };
                for w in axis(workloads.len()) {
                    for l in axis(g.jobs_per_hour.len())
                        .into_iter()
                        .map(|i| i.map(|i| g.jobs_per_hour[i]))
                    {
                        for s in axis(g.seeds.len())
                            .into_iter()
                            .map(|i| i.map(|i| g.seeds[i]))
                        {
                            let mut overrides = self.set(&g.set, &format!("{gk}.set"));
                            if let Some(extra) = g.set_for.get(&names[ci]) {
                                overrides.extend(
                                    self.set(extra, &format!("{gk}.set_for.{}", names[ci])),
                                );
                            }
                            if let Some(vi) = v {
                                overrides.extend(
                                    self.set(
                                        &g.variants[vi].set,
                                        &format!("{gk}.variants.{vi}.set"),
                                    ),
                                );
                            }
                            overrides.extend(self.axes_overrides(l, s));
                            let workload_origin = w.map(|i| {
                                format!(
                                    "{} (grid `{}`, workloads)",
                                    self.at(&format!("{gk}.workloads.{i}")),
                                    g.name
                                )
                            });
                            let request = ConfigRequest::new(&config)
                                .workload(
                                    w.map(|i| workloads[i].clone()),
                                    workload_origin.as_deref().unwrap_or(""),
                                )
                                .sections(sections.clone())
                                .overrides(overrides);
                            let workload = w.map(|i| labels[i].clone()).unwrap_or_default();
                            let dir = PathBuf::from(slug(&g.name))
                                .join(slug(&policy))
                                .join(slug(&leaf(&workload, l, s)));
                            let config = request.load().map_err(|source| SweepError::Cell {
                                cell: format!("grid `{}`, cell {}", g.name, dir.display()),
                                source: Box::new(source),
                            })?;
                            out.push(Cell {
                                grid: g.name.clone(),
                                policy: policy.clone(),
                                workload,
                                jobs_per_hour: l,
                                seed: s,
                                dir,
                                config,
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A cell's load and seed as overrides, naming the grid's lines.
    fn axes_overrides(&self, load: Option<f64>, seed: Option<u64>) -> Vec<Override> {
        let (g, gk) = (self.g, &self.key);
        let mut out = Vec::new();
        if let Some(l) = load {
            out.push(
                Override::set("workload.jobs_per_hour", &l.to_string()).with_origin(format!(
                    "{} (grid `{}`, jobs_per_hour = {l})",
                    self.at(&format!("{gk}.jobs_per_hour")),
                    g.name
                )),
            );
        }
        if let Some(s) = seed {
            out.push(
                Override::set("run.seed", &s.to_string()).with_origin(format!(
                    "{} (grid `{}`, seeds)",
                    self.at(&format!("{gk}.seeds")),
                    g.name
                )),
            );
        }
        out
    }
}

/// A cell's folder under its policy's: `<workload or load>-s<seed>`
/// (`default` with neither).
fn leaf(workload: &str, load: Option<f64>, seed: Option<u64>) -> String {
    let mut leaf = workload.to_string();
    if let Some(l) = load {
        if !leaf.is_empty() {
            leaf.push('-');
        }
        leaf.push_str(&format!("{l}jph"));
    }
    if leaf.is_empty() {
        leaf.push_str("default");
    }
    if let Some(s) = seed {
        leaf.push_str(&format!("-s{s}"));
    }
    leaf
}
