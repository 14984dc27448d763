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
    let invalid = |message: String| SweepError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file: GridFile = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let lines = key_lines(text);
    let at = |key: &str| format!("{}:{}", path.display(), lines.line(key).unwrap_or(0));
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (gi, g) in file.grid.iter().enumerate() {
        let gk = format!("grid.{gi}");
        if g.configs.is_empty() {
            return Err(invalid(format!("grid `{}` lists no configs", g.name)));
        }
        let names: Vec<String> = g
            .configs
            .iter()
            .map(|c| {
                c.file_name()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        if let Some(k) = g.set_for.keys().find(|k| !names.contains(k)) {
            return Err(invalid(format!(
                "{}: grid `{}`: set_for.\"{k}\" names no config of the grid (it has {})",
                at(&format!("{gk}.set_for.{k}")),
                g.name,
                names.join(", ")
            )));
        }
        let mut sections = Vec::new();
        for (name, v) in &g.sections {
            let Some(table) = v.as_table() else {
                return Err(invalid(format!(
                    "{}: sections.{name} must be a table",
                    at(&format!("{gk}.sections.{name}"))
                )));
            };
            let key = format!("{gk}.sections.{name}");
            sections.push(SectionSource {
                name: name.clone(),
                table: table.clone(),
                file: path.display().to_string(),
                lines: lines.under(&key),
                line: lines.line(&key).unwrap_or(0),
                base_dir: base.to_path_buf(),
            });
        }
        let workloads: Vec<PathBuf> = g.workloads.iter().map(|w| base.join(w)).collect();
        let labels = workload_labels(&workloads);
        let workload_axis: Vec<Option<usize>> = if workloads.is_empty() {
            vec![None]
        } else {
            (0..workloads.len()).map(Some).collect()
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
        let variants: Vec<Option<(usize, &Variant)>> = if g.variants.is_empty() {
            vec![None]
        } else {
            g.variants.iter().enumerate().map(Some).collect()
        };
        let set = |table: &BTreeMap<String, String>, key: &str| -> Vec<Override> {
            table
                .iter()
                .map(|(k, v)| {
                    Override::set(k, v).with_origin(format!(
                        "{} (grid `{}`, {key}.\"{k}\")",
                        at(&format!("{key}.{k}")),
                        g.name
                    ))
                })
                .collect()
        };
        for (ci, c) in g.configs.iter().enumerate() {
            let config = base.join(c);
            for v in &variants {
                let policy = match v {
                    None => stem(&config),
                    Some((_, v)) if g.configs.len() == 1 => v.name.clone(),
                    Some((_, v)) => format!("{}-{}", stem(&config), v.name),
                };
                for w in &workload_axis {
                    for l in &loads {
                        for s in &seeds {
                            let mut overrides = set(&g.set, &format!("{gk}.set"));
                            if let Some(extra) = g.set_for.get(&names[ci]) {
                                overrides
                                    .extend(set(extra, &format!("{gk}.set_for.{}", names[ci])));
                            }
                            if let Some((vi, v)) = v {
                                overrides.extend(set(&v.set, &format!("{gk}.variants.{vi}.set")));
                            }
                            if let Some(l) = l {
                                overrides.push(
                                    Override::set("workload.jobs_per_hour", &l.to_string())
                                        .with_origin(format!(
                                            "{} (grid `{}`, jobs_per_hour = {l})",
                                            at(&format!("{gk}.jobs_per_hour")),
                                            g.name
                                        )),
                                );
                            }
                            if let Some(s) = s {
                                overrides.push(
                                    Override::set("run.seed", &s.to_string()).with_origin(format!(
                                        "{} (grid `{}`, seeds)",
                                        at(&format!("{gk}.seeds")),
                                        g.name
                                    )),
                                );
                            }
                            let workload_origin = w.map(|i| {
                                format!(
                                    "{} (grid `{}`, workloads)",
                                    at(&format!("{gk}.workloads.{i}")),
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
                            let mut leaf = workload.clone();
                            if let Some(l) = l {
                                if !leaf.is_empty() {
                                    leaf.push('-');
                                }
                                leaf.push_str(&format!("{l}jph"));
                            }
                            if leaf.is_empty() {
                                leaf.push_str("default");
                            }
                            if let Some(s) = s {
                                leaf.push_str(&format!("-s{s}"));
                            }
                            let dir = PathBuf::from(slug(&g.name))
                                .join(slug(&policy))
                                .join(slug(&leaf));
                            let config = request.load().map_err(|source| SweepError::Cell {
                                cell: format!("grid `{}`, cell {}", g.name, dir.display()),
                                source: Box::new(source),
                            })?;
                            out.push(Cell {
                                grid: g.name.clone(),
                                policy: policy.clone(),
                                workload,
                                jobs_per_hour: *l,
                                seed: *s,
                                dir,
                                config,
                            });
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}
