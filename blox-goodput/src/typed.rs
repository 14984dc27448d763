//! Profiles per GPU type (Sia, SOSP'23, §3.2; the artifact's layout, see
//! `data/sia/NOTE.md`): the same model's step times measured on each type,
//! one shared set of training curves, and the per-model constants the Sia
//! simulator calibrates with.
//!
//! A profile folder is per-type when it holds `applications.csv`
//! (`application,restart_s,slowdown`); `per_type.csv`
//! (`application,gpu_type,max_atomic_bsz,pipeline_stages,microbatches`) lists
//! the exceptions of single (model, type) pairs. Each model's step times are
//! `<model>/placements-<type>.csv` and `<model>/scalability-<type>.csv`.

use crate::model::BatchConfig;
use crate::profile::{AppProfile, Pipeline, ProfileError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The marker file of a per-type profile folder.
pub const CONSTANTS_FILE: &str = "applications.csv";
/// The per-(model, type) exceptions of a per-type profile folder.
pub const EXCEPTIONS_FILE: &str = "per_type.csv";

/// True when `traces` is a per-type profile folder.
pub fn is_per_type(traces: &Path) -> bool {
    traces.join(CONSTANTS_FILE).is_file()
}

/// One model's profiles on every type measured for it.
#[derive(Clone, Debug)]
pub struct TypedProfiles {
    pub app: String,
    by_type: BTreeMap<String, Arc<AppProfile>>,
}

impl TypedProfiles {
    /// The profile measured on `gpu_type`.
    pub fn on(&self, gpu_type: &str) -> Option<&Arc<AppProfile>> {
        self.by_type.get(gpu_type)
    }

    /// Types with a profile, in name order.
    pub fn types(&self) -> impl Iterator<Item = &str> {
        self.by_type.keys().map(|s| s.as_str())
    }

    /// Any one of the profiles (they share training curves and limits on the
    /// global batch).
    pub fn any(&self) -> &Arc<AppProfile> {
        self.by_type
            .values()
            .next()
            .expect("a typed profile set is never empty")
    }

    /// Of `types` that have a profile, the slowest one (lowest one-replica
    /// throughput): what a job spread over several types runs at.
    pub fn slowest_of<'a>(&self, types: impl Iterator<Item = &'a str>) -> Option<&Arc<AppProfile>> {
        types.filter_map(|t| self.by_type.get(t)).min_by(|a, b| {
            let x = a.atomic_throughput().unwrap_or(0.0);
            let y = b.atomic_throughput().unwrap_or(0.0);
            x.total_cmp(&y)
        })
    }
}

/// How [`sia_fixed_batch`] splits a global batch: the Sia artifact uses
/// three variants of the fixed-batch rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixedRule {
    /// A running job (`Job.update_local_bsz`): one replica accumulates at
    /// least once above `M0`, and the atomic batch is capped by the largest
    /// measured at that replica count.
    Job,
    /// A throughput estimate (`get_throughput_with_accum`): as `Job` without
    /// the replica-count cap.
    Estimate,
    /// Gavel's throughput estimate (`gavel.py`): one replica always
    /// accumulates at least once.
    Gavel,
}

/// The Sia artifact's fixed-batch rule for global batch `m` on `per_node`:
/// the largest atomic batch is the placement's measured one
/// ([`AppProfile::max_atomic_for`]), not the model's.
pub fn sia_fixed_batch(p: &AppProfile, per_node: &[u32], m: f64, rule: FixedRule) -> BatchConfig {
    let eps = crate::model::EPS;
    let r = per_node.iter().sum::<u32>().max(1);
    let local = (m / r as f64 - eps).ceil();
    let max_local = p.max_atomic_for(per_node).unwrap_or(p.limits.bmax).max(1) as f64;
    let mut accum = ((local / max_local - eps).ceil() - 1.0).max(0.0);
    let alone = match rule {
        FixedRule::Gavel => r == 1,
        _ => r == 1 && m > p.limits.m0 as f64,
    };
    if alone {
        accum = accum.max(1.0);
    }
    let mut atomic = (local / (accum + 1.0) - eps).ceil().max(1.0) as u32;
    if rule == FixedRule::Job {
        if let Some(cap) = p.max_atomic_at_replicas(r) {
            atomic = atomic.min(cap);
        }
    }
    let count = r * (accum as u32 + 1);
    atomic = atomic.min(p.limits.mmax / count.max(1)).max(1);
    BatchConfig {
        atomic,
        accum: accum as u32,
    }
}

/// Time of one optimizer step at `per_node` and `c` (step plus `accum`
/// accumulation-only micro-steps), from the measured profile.
pub fn iter_time(p: &AppProfile, per_node: &[u32], c: BatchConfig) -> Option<f64> {
    let (step, sync) = p.step_time_or_nearest(per_node, c.atomic as f64)?;
    Some(step + c.accum as f64 * (step - sync))
}

/// `r` replicas packed `per_node` to a node: `(4, 4, 2)` for 10 on 4-GPU nodes.
pub fn packed(r: u32, per_node: u32) -> Vec<u32> {
    let per_node = per_node.max(1);
    let mut out = vec![per_node; (r / per_node) as usize];
    if !r.is_multiple_of(per_node) {
        out.push(r % per_node);
    }
    out
}

#[derive(Clone, Copy, Debug, Default)]
struct Exception {
    max_atomic: Option<u32>,
    pipeline: Option<Pipeline>,
}

/// A per-type profile folder: its constants, and profiles loaded on first use.
#[derive(Clone, Debug)]
pub struct TypedCache {
    traces: PathBuf,
    /// Per model: (restart_s, slowdown).
    constants: BTreeMap<String, (f64, f64)>,
    exceptions: BTreeMap<(String, String), Exception>,
    apps: BTreeMap<String, Arc<TypedProfiles>>,
}

impl TypedCache {
    /// Reads the folder's constants; fails on a malformed row (file, line, column).
    pub fn open(traces: &Path) -> Result<Self, ProfileError> {
        let mut constants = BTreeMap::new();
        let file = SmallCsv::read(
            &traces.join(CONSTANTS_FILE),
            &["application", "restart_s", "slowdown"],
        )?;
        for row in file.rows() {
            let restart = row.f64("restart_s", |v| v >= 0.0)?;
            let slowdown = row.f64("slowdown", |v| v > 0.0)?;
            constants.insert(row.str("application").to_string(), (restart, slowdown));
        }
        let mut exceptions = BTreeMap::new();
        let path = traces.join(EXCEPTIONS_FILE);
        if path.is_file() {
            let file = SmallCsv::read(&path, &["application", "gpu_type"])?;
            for row in file.rows() {
                let opt = |c: &str| row.opt_u32(c);
                let stages = opt("pipeline_stages")?;
                let micro = opt("microbatches")?;
                let pipeline = match (stages, micro) {
                    (Some(s), Some(m)) if s >= 1 && m >= 1 => Some(Pipeline {
                        stages: s,
                        microbatches: m,
                    }),
                    (None, None) => None,
                    _ => {
                        return Err(row.error(
                            "pipeline_stages",
                            "`pipeline_stages` and `microbatches` go together, both at least 1",
                        ))
                    }
                };
                exceptions.insert(
                    (
                        row.str("application").to_string(),
                        row.str("gpu_type").to_string(),
                    ),
                    Exception {
                        max_atomic: opt("max_atomic_bsz")?,
                        pipeline,
                    },
                );
            }
        }
        Ok(TypedCache {
            traces: traces.to_path_buf(),
            constants,
            exceptions,
            apps: BTreeMap::new(),
        })
    }

    pub fn traces(&self) -> &Path {
        &self.traces
    }

    /// The file that holds `app`'s step times on `gpu_type`.
    pub fn placements_file(&self, app: &str, gpu_type: &str) -> PathBuf {
        self.traces
            .join(app)
            .join(format!("placements-{gpu_type}.csv"))
    }

    /// Types some model of the folder is measured on.
    pub fn profiled_types(&self) -> Vec<String> {
        let mut types = std::collections::BTreeSet::new();
        for app in self.constants.keys() {
            let Ok(dir) = std::fs::read_dir(self.traces.join(app)) else {
                continue;
            };
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(t) = name
                    .strip_prefix("placements-")
                    .and_then(|s| s.strip_suffix(".csv"))
                {
                    types.insert(t.to_string());
                }
            }
        }
        types.into_iter().collect()
    }

    /// `app` on each of `types` it is measured on; an error if it is
    /// measured on none of them, or the folder has no constants for it.
    pub fn get(&mut self, app: &str, types: &[String]) -> Result<Arc<TypedProfiles>, ProfileError> {
        if let Some(p) = self.apps.get(app) {
            if types.iter().any(|t| p.on(t).is_some()) {
                return Ok(p.clone());
            }
        }
        let &(restart, slowdown) = self.constants.get(app).ok_or_else(|| {
            ProfileError::Invalid(format!(
                "{}: no row for application `{app}`",
                self.traces.join(CONSTANTS_FILE).display()
            ))
        })?;
        let mut by_type = BTreeMap::new();
        for t in types {
            if !self.placements_file(app, t).is_file() {
                continue;
            }
            let mut p = AppProfile::load_typed(&self.traces, app, t)?;
            let ex = self
                .exceptions
                .get(&(app.to_string(), t.clone()))
                .copied()
                .unwrap_or_default();
            if let Some(b) = ex.max_atomic {
                p.limits.bmax = b;
            }
            p.pipeline = ex.pipeline;
            p.calibration = 1.0 / slowdown;
            p.restart_s = Some(restart);
            by_type.insert(t.clone(), Arc::new(p));
        }
        if by_type.is_empty() {
            let looked: Vec<String> = types
                .iter()
                .map(|t| self.placements_file(app, t).display().to_string())
                .collect();
            return Err(ProfileError::Invalid(format!(
                "application `{app}` has no profile for any GPU type of the cluster ({}); looked for {}",
                types.join(", "),
                looked.join(", ")
            )));
        }
        let p = Arc::new(TypedProfiles {
            app: app.to_string(),
            by_type,
        });
        self.apps.insert(app.to_string(), p.clone());
        Ok(p)
    }
}

/// A small CSV file read whole (header required).
struct SmallCsv {
    path: PathBuf,
    index: BTreeMap<String, usize>,
    records: Vec<(u64, csv::StringRecord)>,
}

impl SmallCsv {
    fn read(path: &Path, need: &[&str]) -> Result<Self, ProfileError> {
        let io = |e: csv::Error| ProfileError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_path(path)
            .map_err(io)?;
        let index: BTreeMap<String, usize> = rdr
            .headers()
            .map_err(io)?
            .iter()
            .enumerate()
            .map(|(i, h)| (h.trim_start_matches('\u{feff}').to_string(), i))
            .collect();
        for c in need {
            if !index.contains_key(*c) {
                return Err(ProfileError::Io {
                    path: path.to_path_buf(),
                    message: format!("missing column `{c}`"),
                });
            }
        }
        let mut records = Vec::new();
        for rec in rdr.records() {
            let rec = rec.map_err(io)?;
            records.push((rec.position().map(|p| p.line()).unwrap_or(0), rec));
        }
        Ok(SmallCsv {
            path: path.to_path_buf(),
            index,
            records,
        })
    }

    fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        self.records.iter().map(move |(line, rec)| Row {
            file: self,
            line: *line,
            rec,
        })
    }
}

/// One row of a [`SmallCsv`], with errors naming file, line and column.
struct Row<'a> {
    file: &'a SmallCsv,
    line: u64,
    rec: &'a csv::StringRecord,
}

impl Row<'_> {
    fn str(&self, c: &str) -> &str {
        self.file
            .index
            .get(c)
            .and_then(|&i| self.rec.get(i))
            .unwrap_or("")
    }

    fn error(&self, c: &str, m: &str) -> ProfileError {
        ProfileError::Field {
            path: self.file.path.clone(),
            line: self.line,
            column: c.to_string(),
            message: m.to_string(),
        }
    }

    fn f64(&self, c: &str, ok: impl Fn(f64) -> bool) -> Result<f64, ProfileError> {
        let raw = self.str(c);
        raw.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && ok(*v))
            .ok_or_else(|| self.error(c, &format!("`{raw}` is not a valid number here")))
    }

    fn opt_u32(&self, c: &str) -> Result<Option<u32>, ProfileError> {
        let raw = self.str(c);
        if raw.is_empty() {
            return Ok(None);
        }
        raw.parse::<u32>()
            .map(Some)
            .map_err(|_| self.error(c, &format!("`{raw}` is not a whole number")))
    }
}
