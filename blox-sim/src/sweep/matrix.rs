//! A config's `[sweep]` section: every combination of its lists.
//!
//! ```toml
//! [sweep]
//! admission = ["accept-all", { policy = "load-based", k = 1.4 }]
//! scheduling = ["fifo", "las"]
//! placement = ["first-free"]
//! jobs_per_hour = [2, 4, 8]     # sets workload.jobs_per_hour
//! seeds = [1, 2, 3]             # sets run.seed
//! ```
//!
//! A list left out keeps the config's own setting. Each entry is a policy name
//! (with the config's parameters if it names the config's own policy, none
//! otherwise) or a table with `policy` and its parameters (replacing that
//! module's section). The cells form one grid named after the config file;
//! each combination is a policy of its own in reports.

use super::{slug, Cell, SweepError};
use crate::run::ConfigRequest;
use crate::synth::module_label;
use blox_config::{Config, ModuleConfig, Override, Section, SectionSource, Value};
use std::path::{Path, PathBuf};

const KEYS: &[&str] = &[
    "admission",
    "scheduling",
    "placement",
    "jobs_per_hour",
    "seeds",
];

/// One entry of a module list: the section that replaces the config's.
#[derive(Clone)]
struct Entry {
    label: String,
    section: Option<SectionSource>,
}

fn list(sweep: &Section, key: &str) -> Result<Option<Vec<Value>>, SweepError> {
    match sweep.table().get(key) {
        None => Ok(None),
        Some(Value::Array(a)) if !a.is_empty() => Ok(Some(a.clone())),
        Some(_) => Err(sweep
            .error_at(key, format!("`{key}` must be a non-empty list"))
            .into()),
    }
}

fn entries(
    base: &Config,
    sweep: &Section,
    own: &ModuleConfig,
    key: &str,
    path: &Path,
) -> Result<Vec<Entry>, SweepError> {
    let Some(values) = list(sweep, key)? else {
        return Ok(vec![Entry {
            label: module_label(own),
            section: None,
        }]);
    };
    let file = path.display().to_string();
    let base_dir = base.base_dir.clone();
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let item = format!("{key}.{i}");
            let source = |table: toml::Table| SectionSource {
                name: key.to_string(),
                table,
                file: file.clone(),
                lines: Default::default(),
                line: sweep.line_of_key(&item).unwrap_or(sweep.header_line()),
                base_dir: base_dir.clone(),
            };
            match v {
                Value::String(name) if *name == own.policy => Ok(Entry {
                    label: module_label(own),
                    section: None,
                }),
                Value::String(name) => {
                    let mut t = toml::Table::new();
                    t.insert("policy".into(), toml::Value::String(name.clone()));
                    Ok(Entry {
                        label: name.clone(),
                        section: Some(source(t)),
                    })
                }
                Value::Table(t) => {
                    let mut m = sweep.subsection(key, &item, t.clone());
                    let Some(policy) = m.take_string("policy")? else {
                        return Err(sweep
                            .error_at(&item, format!("every table in `{key}` needs `policy`"))
                            .into());
                    };
                    let label = module_label(&ModuleConfig {
                        policy,
                        line: 0,
                        params: m,
                    });
                    Ok(Entry {
                        label,
                        section: Some(source(blox_config::convert::to_toml(t))),
                    })
                }
                _ => Err(sweep
                    .error_at(
                        &item,
                        format!("entries of `{key}` are policy names or tables"),
                    )
                    .into()),
            }
        })
        .collect()
}

/// The cells of a config's `[sweep]` section.
pub fn cells(path: &Path, overrides: &[Override]) -> Result<Vec<Cell>, SweepError> {
    let base = ConfigRequest::new(path)
        .overrides(overrides.to_vec())
        .load()
        .map_err(|source| SweepError::Cell {
            cell: format!("{}", path.display()),
            source: Box::new(source),
        })?;
    let sweep = base.section("sweep");
    if let Some(k) = sweep.table().keys().find(|k| !KEYS.contains(&k.as_str())) {
        let near = blox_core::config::closest(k, KEYS.iter().copied())
            .map(|n| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        return Err(sweep
            .error_at(
                k,
                format!(
                    "unknown key `{k}`{near}; expected one of {}",
                    KEYS.join(", ")
                ),
            )
            .into());
    }
    let adm = entries(&base, &sweep, &base.admission, "admission", path)?;
    let sch = entries(&base, &sweep, &base.scheduling, "scheduling", path)?;
    let pla = entries(&base, &sweep, &base.placement, "placement", path)?;
    let loads: Vec<Option<(usize, Value)>> = match list(&sweep, "jobs_per_hour")? {
        None => vec![None],
        Some(v) => v.into_iter().enumerate().map(Some).collect(),
    };
    let seeds: Vec<Option<(usize, u64)>> = match list(&sweep, "seeds")? {
        None => vec![None],
        Some(v) => v
            .iter()
            .enumerate()
            .map(|(i, s)| match s.as_integer() {
                Some(n) if n >= 0 => Ok(Some((i, n as u64))),
                _ => Err(SweepError::from(sweep.error_at(
                    &format!("seeds.{i}"),
                    "seeds must be non-negative integers",
                ))),
            })
            .collect::<Result<_, _>>()?,
    };
    let grid = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "sweep".into());
    let mut out = Vec::new();
    for a in &adm {
        for s in &sch {
            for p in &pla {
                let policy = format!("{}/{}/{}", a.label, s.label, p.label);
                for l in &loads {
                    for seed in &seeds {
                        let sections: Vec<SectionSource> =
                            [a, s, p].iter().filter_map(|e| e.section.clone()).collect();
                        let mut o = overrides.to_vec();
                        o.push(
                            Override::unset("sweep")
                                .with_origin(format!("{} [sweep]", path.display())),
                        );
                        let mut load = None;
                        if let Some((i, v)) = l {
                            load = v.as_float().or(v.as_integer().map(|x| x as f64));
                            o.push(
                                Override::set(
                                    "workload.jobs_per_hour",
                                    &blox_config::convert::value_to_toml(v).to_string(),
                                )
                                .with_origin(
                                    sweep.location(&format!("jobs_per_hour.{i}"))
                                        + " ([sweep] jobs_per_hour)",
                                ),
                            );
                        }
                        if let Some((i, n)) = seed {
                            o.push(Override::set("run.seed", &n.to_string()).with_origin(
                                sweep.location(&format!("seeds.{i}")) + " ([sweep] seeds)",
                            ));
                        }
                        let config = ConfigRequest::new(path)
                            .sections(sections)
                            .overrides(o)
                            .load()
                            .map_err(|source| SweepError::Cell {
                                cell: format!("[sweep] cell {policy}"),
                                source: Box::new(source),
                            })?;
                        let mut leaf = String::new();
                        if let Some(l) = load {
                            leaf.push_str(&format!("{l}jph"));
                        }
                        if leaf.is_empty() {
                            leaf.push_str("default");
                        }
                        if let Some((_, n)) = seed {
                            leaf.push_str(&format!("-s{n}"));
                        }
                        out.push(Cell {
                            grid: grid.clone(),
                            policy: policy.clone(),
                            workload: String::new(),
                            jobs_per_hour: load,
                            seed: seed.map(|(_, n)| n),
                            dir: PathBuf::from(slug(&grid))
                                .join(slug(&policy))
                                .join(slug(&leaf)),
                            config,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}
