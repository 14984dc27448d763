//! The Pollux artifact's measured per-application profiles (`pollux-data.md`
//! §1–4): true step times by placement and atomic batch, and training curves
//! (progress, iterations, gradient statistics) by global batch size.
//!
//! This is the ground truth of the profile-driven simulator and the oracle
//! knowledge of Optimus+Oracle. Files: `<traces>/<app>/placements.csv`,
//! `scalability.csv`, `validation-<B>.csv`.

use crate::model::{AppLimits, GradStats};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod delaunay;
mod derived;
pub use derived::{parse_derived, profiles_beside, Derived, ProfileCache};

/// A missing or malformed profile file.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{}: {message}", path.display())]
    Io { path: PathBuf, message: String },
    #[error("{}:{line}: column `{column}`: {message}", path.display())]
    Field {
        path: PathBuf,
        line: u64,
        column: String,
        message: String,
    },
    #[error("{0}")]
    Invalid(String),
}

/// A CSV file read whole: header index and (line, record) rows.
struct Table {
    path: PathBuf,
    index: HashMap<String, usize>,
    rows: Vec<(u64, csv::StringRecord)>,
}

impl Table {
    fn read(path: &Path, need: &[&str]) -> Result<Table, ProfileError> {
        let io = |e: csv::Error| ProfileError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_path(path)
            .map_err(io)?;
        let index: HashMap<String, usize> = rdr
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
        let mut rows = Vec::new();
        for rec in rdr.records() {
            let rec = rec.map_err(io)?;
            let line = rec.position().map(|p| p.line()).unwrap_or(0);
            rows.push((line, rec));
        }
        Ok(Table {
            path: path.to_path_buf(),
            index,
            rows,
        })
    }

    fn f64(&self, r: usize, col: &str) -> Result<f64, ProfileError> {
        let (line, rec) = &self.rows[r];
        let raw = rec.get(self.index[col]).unwrap_or("");
        raw.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| ProfileError::Field {
                path: self.path.clone(),
                line: *line,
                column: col.to_string(),
                message: format!("`{raw}` is not a number"),
            })
    }

    fn u64(&self, r: usize, col: &str) -> Result<u64, ProfileError> {
        let (line, rec) = &self.rows[r];
        let raw = rec.get(self.index[col]).unwrap_or("");
        raw.parse::<u64>().map_err(|_| ProfileError::Field {
            path: self.path.clone(),
            line: *line,
            column: col.to_string(),
            message: format!("`{raw}` is not a non-negative integer"),
        })
    }
}

/// (local batch, step time, sync time), sorted by local batch.
type StepCurve = Vec<(f64, f64, f64)>;

#[derive(Clone, Debug)]
struct EpochStats {
    progress: f64,
    iteration: f64,
    grad_sqr: f64,
    grad_var: f64,
    /// The validation metric at the end of the epoch (accuracy, F1, … as the
    /// application defines it).
    metric: f64,
}

/// Everything measured about one application.
#[derive(Clone, Debug)]
pub struct AppProfile {
    pub app: String,
    placements: HashMap<u64, StepCurve>,
    /// Step curves by (nodes, replicas): scalability.csv rows plus placements.csv
    /// rows averaged per (digit count, digit sum, local batch).
    by_shape: BTreeMap<(u32, u32), StepCurve>,
    /// Measured replica counts per node count (the keys of `by_shape`).
    shapes: BTreeMap<u32, Vec<u32>>,
    /// The artifact's tetrahedralisation of the `by_shape` points, where the
    /// profile ships it (see `delaunay.rs`); else the grid interpolation.
    tetrahedra: Option<Arc<delaunay::Tetrahedra>>,
    /// Largest atomic batch of each (nodes, replicas) pair of scalability.csv.
    scalability_bmax: BTreeMap<(u32, u32), u32>,
    /// Largest atomic batch of placements.csv by replica count (digit sum).
    placement_bmax_by_replicas: BTreeMap<u32, u32>,
    /// Validation curves by batch size, ascending.
    validation: Vec<(u32, Vec<EpochStats>)>,
    pub limits: AppLimits,
    pub max_epochs: usize,
    /// The GPU type the step times were measured on; `None` for the Pollux
    /// artifact's single type (`placements.csv`).
    pub gpu_type: Option<String>,
    /// Pipeline-parallel layout on this type (hybrid-parallel jobs, Sia §5.3);
    /// `None` for data-parallel models.
    pub pipeline: Option<Pipeline>,
    /// Factor on the true progress rate that calibrates simulated runs to
    /// measured ones (Sia's simulator divides by a per-model slowdown); 1 for
    /// the Pollux artifact.
    pub calibration: f64,
    /// Checkpoint-restore delay of every (re)allocation, seconds, when the
    /// profile set gives one per model (Sia's `applications.csv`).
    pub restart_s: Option<f64>,
}

/// A hybrid pipeline/data-parallel layout (Sia §5.3, GPipe schedule): every
/// data-parallel replica spans `stages` GPUs and runs `microbatches`
/// micro-batches of one sample per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pipeline {
    pub stages: u32,
    pub microbatches: u32,
}

/// Rotation-canonical placement code: `(4,1,2) → 124`, `(4,2,1) → 142`.
pub fn canonical_placement(per_node: &[u32]) -> u64 {
    let n = per_node.len();
    (0..n)
        .map(|k| (0..n).map(|i| per_node[(k + i) % n]).collect::<Vec<u32>>())
        .min()
        .unwrap_or_default()
        .iter()
        .fold(0u64, |acc, d| acc * 10 + *d as u64)
}

/// The replicas of a placement code (its digit sum).
fn digit_sum(mut code: u64) -> u32 {
    let mut s = 0;
    while code > 0 {
        s += (code % 10) as u32;
        code /= 10;
    }
    s
}

/// Linear interpolation of a step curve at `b`; `None` outside its range.
fn interp_curve(curve: &StepCurve, b: f64) -> Option<(f64, f64)> {
    let (first, last) = (curve.first()?, curve.last()?);
    if b < first.0 - 1e-9 || b > last.0 + 1e-9 {
        return None;
    }
    let i = curve.partition_point(|p| p.0 < b);
    if i == 0 {
        return Some((first.1, first.2));
    }
    let (b0, s0, y0) = curve[i - 1];
    let (b1, s1, y1) = curve[i.min(curve.len() - 1)];
    if b1 == b0 {
        return Some((s1, y1));
    }
    let w = (b - b0) / (b1 - b0);
    Some((s0 + w * (s1 - s0), y0 + w * (y1 - y0)))
}

fn lerp2(a: (f64, f64), b: (f64, f64), w: f64) -> (f64, f64) {
    (a.0 + w * (b.0 - a.0), a.1 + w * (b.1 - a.1))
}

/// What a profile's placements file gives: its step curves per placement
/// code and per (nodes, replicas) shape, the artifact's interpolation points
/// (placements averaged per nodes, replicas and batch, sorted), and the
/// batch sizes' range.
struct Placements {
    placements: HashMap<u64, StepCurve>,
    by_shape: BTreeMap<(u32, u32), StepCurve>,
    points: Vec<delaunay::Point>,
    bmin: f64,
    bmax: f64,
}

/// Reads a placements file (`placement`, `local_bsz`, `step_time`,
/// `sync_time`).
fn read_placements(path: &Path) -> Result<Placements, ProfileError> {
    let mut placements: HashMap<u64, StepCurve> = HashMap::new();
    let t = Table::read(path, &["placement", "local_bsz", "step_time", "sync_time"])?;
    let (mut bmin, mut bmax) = (f64::INFINITY, 0.0f64);
    let mut sums: BTreeMap<(u32, u32, u64), (f64, f64, u32)> = BTreeMap::new();
    for r in 0..t.rows.len() {
        let b = t.f64(r, "local_bsz")?;
        let code = t.u64(r, "placement")?;
        let (step, sync) = (t.f64(r, "step_time")?, t.f64(r, "sync_time")?);
        bmin = bmin.min(b);
        bmax = bmax.max(b);
        placements.entry(code).or_default().push((b, step, sync));
        let digits: Vec<u32> = code
            .to_string()
            .bytes()
            .map(|d| (d - b'0') as u32)
            .collect();
        let key = (digits.len() as u32, digits.iter().sum(), b.to_bits());
        let e = sums.entry(key).or_insert((0.0, 0.0, 0));
        e.0 += step;
        e.1 += sync;
        e.2 += 1;
    }
    let mut by_shape: BTreeMap<(u32, u32), StepCurve> = BTreeMap::new();
    // The artifact's interpolation points, in its order: placements
    // averaged per (nodes, replicas, batch), sorted, then scalability rows.
    let mut points: Vec<delaunay::Point> = Vec::new();
    for (&(n, r, b), &(step, sync, k)) in &sums {
        points.push((
            [n as f64, r as f64, f64::from_bits(b)],
            (step / k as f64, sync / k as f64),
        ));
    }
    for ((n, r, b), (step, sync, k)) in sums {
        by_shape.entry((n, r)).or_default().push((
            f64::from_bits(b),
            step / k as f64,
            sync / k as f64,
        ));
    }
    Ok(Placements {
        placements,
        by_shape,
        points,
        bmin,
        bmax,
    })
}

/// Reads a scalability file (`num_nodes`, `num_replicas`, `local_bsz`,
/// `step_time`, `sync_time`) into the curves per shape and the
/// interpolation points (after the placements'); the largest batch per shape.
fn read_scalability(
    path: &Path,
    by_shape: &mut BTreeMap<(u32, u32), StepCurve>,
    points: &mut Vec<delaunay::Point>,
) -> Result<BTreeMap<(u32, u32), u32>, ProfileError> {
    let t = Table::read(
        path,
        &[
            "num_nodes",
            "num_replicas",
            "local_bsz",
            "step_time",
            "sync_time",
        ],
    )?;
    let mut scalability_bmax: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    for r in 0..t.rows.len() {
        let shape = (
            t.u64(r, "num_nodes")? as u32,
            t.u64(r, "num_replicas")? as u32,
        );
        let b = t.f64(r, "local_bsz")?;
        let m = scalability_bmax.entry(shape).or_default();
        *m = (*m).max(b as u32);
        let (step, sync) = (t.f64(r, "step_time")?, t.f64(r, "sync_time")?);
        by_shape.entry(shape).or_default().push((b, step, sync));
        points.push(([shape.0 as f64, shape.1 as f64, b], (step, sync)));
    }
    Ok(scalability_bmax)
}

/// The `validation-<batch>.csv` files of a profile's folder, by batch size.
fn read_validation(dir: &Path) -> Result<Vec<(u32, Vec<EpochStats>)>, ProfileError> {
    let mut validation = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| ProfileError::Io {
        path: dir.to_path_buf(),
        message: e.to_string(),
    })?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(bs) = name
            .strip_prefix("validation-")
            .and_then(|s| s.strip_suffix(".csv"))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let t = Table::read(
            &entry.path(),
            &["progress", "iteration", "grad_sqr", "grad_var"],
        )?;
        let mut rows = Vec::with_capacity(t.rows.len());
        for r in 0..t.rows.len() {
            rows.push(EpochStats {
                progress: t.f64(r, "progress")?,
                iteration: t.f64(r, "iteration")?,
                grad_sqr: t.f64(r, "grad_sqr")?,
                grad_var: t.f64(r, "grad_var")?,
                metric: if t.index.contains_key("metric") {
                    t.f64(r, "metric")?
                } else {
                    f64::NAN
                },
            });
        }
        validation.push((bs, rows));
    }
    validation.sort_by_key(|v| v.0);
    Ok(validation)
}

impl AppProfile {
    /// Loads `<traces>/<app>/{placements,scalability,validation-*}.csv`.
    pub fn load(traces: &Path, app: &str) -> Result<Self, ProfileError> {
        let mut p = Self::load_files(traces, app, "placements.csv", "scalability.csv")?;
        // pollux-data.md §2: yolov3's largest atomic batch is overridden to 8.
        if app == "yolov3" {
            p.limits.bmax = p.limits.bmax.min(8);
        }
        Ok(p)
    }

    /// Loads the step times measured on `gpu_type`
    /// (`<traces>/<app>/{placements,scalability}-<gpu_type>.csv`) with the
    /// application's shared `validation-*.csv` — the layout of the Sia
    /// artifact (`data/sia/NOTE.md`). No model-specific override is applied
    /// here ([`crate::typed`] applies the profile set's own).
    pub fn load_typed(traces: &Path, app: &str, gpu_type: &str) -> Result<Self, ProfileError> {
        let mut p = Self::load_files(
            traces,
            app,
            &format!("placements-{gpu_type}.csv"),
            &format!("scalability-{gpu_type}.csv"),
        )?;
        p.gpu_type = Some(gpu_type.to_string());
        Ok(p)
    }

    fn load_files(
        traces: &Path,
        app: &str,
        placements_file: &str,
        scalability_file: &str,
    ) -> Result<Self, ProfileError> {
        let dir = traces.join(app);
        let Placements {
            mut placements,
            mut by_shape,
            mut points,
            bmin,
            bmax,
        } = read_placements(&dir.join(placements_file))?;
        let scalability_bmax =
            read_scalability(&dir.join(scalability_file), &mut by_shape, &mut points)?;
        // Shipped for the artifact's own file names only (Sia's typed
        // profiles interpolate on the grid).
        let tetrahedra = if placements_file == "placements.csv" {
            delaunay::Tetrahedra::load(&dir, &points)?.map(Arc::new)
        } else {
            None
        };
        let mut placement_bmax_by_replicas: BTreeMap<u32, u32> = BTreeMap::new();
        for (code, c) in &placements {
            let m = placement_bmax_by_replicas
                .entry(digit_sum(*code))
                .or_default();
            *m = c.iter().fold(*m, |m, x| m.max(x.0 as u32));
        }
        for c in placements.values_mut().chain(by_shape.values_mut()) {
            c.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let validation = read_validation(&dir)?;
        if validation.is_empty() || placements.is_empty() {
            return Err(ProfileError::Invalid(format!(
                "{}: no validation-*.csv or placements.csv for application `{app}`",
                dir.display()
            )));
        }
        let max_epochs = validation.iter().map(|v| v.1.len()).min().unwrap_or(0);
        if max_epochs == 0 {
            return Err(ProfileError::Invalid(format!(
                "{}: validation files of `{app}` have no rows",
                dir.display()
            )));
        }
        let mut shapes: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &(n, r) in by_shape.keys() {
            shapes.entry(n).or_default().push(r);
        }
        Ok(AppProfile {
            app: app.to_string(),
            shapes,
            tetrahedra,
            scalability_bmax,
            placement_bmax_by_replicas,
            limits: AppLimits {
                m0: validation[0].0,
                mmax: validation[validation.len() - 1].0,
                bmin: bmin as u32,
                bmax: bmax as u32,
            },
            placements,
            by_shape,
            validation,
            max_epochs,
            gpu_type: None,
            pipeline: None,
            calibration: 1.0,
            restart_s: None,
        })
    }

    /// `P(e)`: progress at the end of epoch `e` (min over validation files); P(0) = 0.
    pub fn epoch_boundary(&self, e: usize) -> f64 {
        if e == 0 {
            return 0.0;
        }
        let e = e.min(self.max_epochs);
        self.validation
            .iter()
            .map(|(_, rows)| rows[e - 1].progress)
            .fold(f64::INFINITY, f64::min)
    }

    /// The completion target `P* = P(max_epochs)`.
    pub fn target_progress(&self) -> f64 {
        self.epoch_boundary(self.max_epochs)
    }

    /// `m` clamped to the validated range, and the indices of the adjacent validated
    /// batch sizes `B_lo <= m <= B_hi` (equal when `m` is validated), §4.1.
    fn bracket(&self, m: f64) -> (f64, usize, usize) {
        let m = m.clamp(self.limits.m0 as f64, self.limits.mmax as f64);
        let hi = self
            .validation
            .partition_point(|v| (v.0 as f64) < m)
            .min(self.validation.len() - 1);
        let lo = if self.validation[hi].0 as f64 == m {
            hi
        } else {
            hi.saturating_sub(1)
        };
        (m, lo, hi)
    }

    /// A column of row `e`, interpolated linearly in the global batch `m` (§4.1).
    fn interp_row(&self, m: f64, e: usize, col: impl Fn(&EpochStats) -> f64) -> f64 {
        let e = e.min(self.max_epochs - 1);
        let (m, lo, hi) = self.bracket(m);
        let (blo, xlo) = (self.validation[lo].0 as f64, col(&self.validation[lo].1[e]));
        let (bhi, xhi) = (self.validation[hi].0 as f64, col(&self.validation[hi].1[e]));
        if blo == bhi {
            xlo
        } else {
            ((m - blo) * xhi + (bhi - m) * xlo) / (bhi - blo)
        }
    }

    /// Gradient statistics at global batch `m` in epoch `e` (§4.1).
    pub fn grad_stats(&self, m: f64, e: usize) -> GradStats {
        GradStats {
            sqr: self.interp_row(m, e, |r| r.grad_sqr),
            var: self.interp_row(m, e, |r| r.grad_var),
        }
    }

    /// The validation metric after epoch row `e` at global batch `m`, if the
    /// profile records one.
    pub fn val_metric(&self, m: f64, e: usize) -> Option<f64> {
        let v = self.interp_row(m, e, |r| r.metric);
        v.is_finite().then_some(v)
    }

    /// Progress gained per optimizer step at global batch `m` in epoch `e`:
    /// `g = (σ² + μ²) / (σ²/S + μ²)`, `S = m / M0` (§4.1).
    pub fn gain(&self, m: f64, e: usize) -> f64 {
        self.grad_stats(m, e).gain(m, self.limits.m0 as f64)
    }

    /// Cumulative iterations at batch `m` by the end of epoch row `e` (§4.3).
    pub fn iterations(&self, m: f64, e: usize) -> f64 {
        self.interp_row(m, e, |r| r.iteration)
    }

    /// Iterations to finish at a fixed batch (Optimus's oracle knowledge, §4.3).
    pub fn iterations_to_finish(&self, m: f64) -> f64 {
        self.iterations(m, self.max_epochs - 1)
    }

    /// `(T_step, T_sync)` for replicas laid out as `per_node` (in allocation
    /// order) at atomic batch `b` (`pollux-data.md` §3.1). `None` where the
    /// measurements do not cover the query.
    ///
    /// A measured placement (after rotation to its canonical form; every
    /// placement of up to 4 nodes in the Pollux artifact) is the artifact's
    /// lookup: that placement's rows, linear in `b`. Other placements (≥ 5
    /// nodes there; 3 nodes of `rtx` in Sia's) the artifact interpolates over
    /// a 3-D Delaunay tetrahedralisation of (nodes, replicas, b): where the
    /// profile ships Qhull's tetrahedralisation of its points
    /// (`delaunay-*.csv`, the Pollux artifact's), on it, exactly as the
    /// artifact; otherwise on the same points as a grid: linear in `b` within
    /// a measured (nodes, replicas) pair, linear in replicas between the pairs
    /// of one node count that bracket it, and linear in nodes between the
    /// measured node counts that bracket `min(n, 16)`, querying each at the
    /// same replicas per node. The grid agrees with the artifact's to a few
    /// per cent (tested); exact agreement needs Qhull's tetrahedra.
    ///
    /// A pipeline-parallel profile ([`Pipeline`]) answers only for measured
    /// placements, with `b` the samples of one replica's step (see
    /// `pipeline_step_time`).
    pub fn step_time(&self, per_node: &[u32], b: f64) -> Option<(f64, f64)> {
        if per_node.is_empty() {
            return None;
        }
        if let Some(p) = self.pipeline {
            return self.pipeline_step_time(p, per_node, b);
        }
        if let Some(curve) = self.placements.get(&canonical_placement(per_node)) {
            return interp_curve(curve, b);
        }
        let r: u32 = per_node.iter().sum();
        let n = (per_node.len() as u32).min(16);
        if let Some(t) = &self.tetrahedra {
            return t.interpolate([n as f64, r as f64, b]);
        }
        let hi = *self.shapes.range(n..).next()?.0;
        let lo = *self.shapes.range(..=n).next_back()?.0;
        let density = r as f64 / per_node.len() as f64;
        let at = |k: u32| self.at_nodes(k, density * k as f64, b);
        if lo == hi {
            return self.at_nodes(lo, r as f64, b);
        }
        let (a, c) = (at(lo)?, at(hi)?);
        Some(lerp2(a, c, (n - lo) as f64 / (hi - lo) as f64))
    }

    /// A GPipe step of a pipeline-parallel job (Sia artifact,
    /// `PMPApplication`): `local` samples per data-parallel replica are
    /// `microbatches` micro-batches of `local / microbatches`; the measured
    /// `step_time` of that micro-batch size is one stage's forward pass `f`,
    /// and a step takes `3·((stages − 1)·f + microbatches·f)` of compute
    /// (forward and twice as long backward, with the pipeline's fill) plus
    /// the measured synchronisation. Returns (compute, sync): the step has no
    /// separate accumulation micro-steps.
    fn pipeline_step_time(&self, p: Pipeline, per_node: &[u32], local: f64) -> Option<(f64, f64)> {
        let curve = self.placements.get(&canonical_placement(per_node))?;
        let micro = (local / p.microbatches.max(1) as f64).floor();
        let &(_, fwd, sync) = curve.iter().find(|c| c.0 == micro)?;
        let compute = 3.0 * ((p.stages as f64 - 1.0) * fwd + p.microbatches as f64 * fwd);
        Some((compute, sync))
    }

    /// [`Self::step_time`], falling back to the nearest measured point where the
    /// query leaves the measurements (the artifact aborts there; the shipped
    /// experiments never get there, other workloads might): `b` clamped to the
    /// placement's measured range, or for an unmeasured placement the measured
    /// (nodes, replicas) pair closest to the query.
    pub fn step_time_or_nearest(&self, per_node: &[u32], b: f64) -> Option<(f64, f64)> {
        if let Some(t) = self.step_time(per_node, b) {
            return Some(t);
        }
        if self.pipeline.is_some() {
            return None;
        }
        let clamp = |c: &StepCurve| interp_curve(c, b.clamp(c[0].0, c[c.len() - 1].0));
        if let Some(curve) = self.placements.get(&canonical_placement(per_node)) {
            return clamp(curve);
        }
        let r: u32 = per_node.iter().sum();
        let n = (per_node.len() as u32).min(16);
        let key = self
            .by_shape
            .keys()
            .min_by_key(|(k, x)| (k.abs_diff(n), x.abs_diff(r)))?;
        clamp(&self.by_shape[key])
    }

    /// The largest atomic batch measured for a placement (Sia artifact,
    /// `get_max_local_bsz`): the measured placement's largest, or for an
    /// unmeasured one the largest of the scalability rows with at least as
    /// many nodes and replicas. `None` when nothing is measured there.
    pub fn max_atomic_for(&self, per_node: &[u32]) -> Option<u32> {
        if let Some(c) = self.placements.get(&canonical_placement(per_node)) {
            return c.last().map(|x| x.0 as u32);
        }
        let (n, r) = (per_node.len() as u32, per_node.iter().sum::<u32>());
        self.scalability_bmax
            .iter()
            .filter(|((k, x), _)| *k >= n && *x >= r)
            .map(|(_, b)| *b)
            .max()
    }

    /// The largest atomic batch measured at `r` replicas on any placement of
    /// up to the measured node counts (the Sia artifact's memory check), if
    /// any placement of `r` replicas is measured.
    pub fn max_atomic_at_replicas(&self, r: u32) -> Option<u32> {
        self.placement_bmax_by_replicas.get(&r).copied()
    }

    /// Samples per second of one replica (one pipeline for a hybrid-parallel
    /// model) at its largest measured batch: the "atomic throughput" the Sia
    /// artifact compares GPU types by (largest measured batch over largest
    /// measured step time of the one-replica rows).
    pub fn atomic_throughput(&self) -> Option<f64> {
        let unit = self.pipeline.map_or(1, |p| p.stages);
        let rows = self
            .placements
            .iter()
            .filter(|(code, _)| digit_sum(**code) == unit)
            .flat_map(|(_, c)| c.iter());
        let (b, t) = rows.fold((0.0f64, 0.0f64), |(b, t), x| (b.max(x.0), t.max(x.1)));
        (b > 0.0 && t > 0.0).then_some(b / t)
    }

    /// Step time at `k` nodes and (possibly fractional) `r` replicas, linear in
    /// replicas between the measured counts that bracket it.
    fn at_nodes(&self, k: u32, r: f64, b: f64) -> Option<(f64, f64)> {
        let reps = self.shapes.get(&k)?;
        // Nearest measured replica counts on each side whose batch range covers b.
        let covers = |x: &u32| interp_curve(&self.by_shape[&(k, *x)], b).is_some();
        let lo = reps
            .iter()
            .rev()
            .find(|&&x| x as f64 <= r + 1e-9 && covers(&x))
            .copied();
        let hi = reps
            .iter()
            .find(|&&x| x as f64 >= r - 1e-9 && covers(&x))
            .copied();
        let (lo, hi) = match (lo, hi) {
            (Some(lo), Some(hi)) => (lo, hi),
            (Some(x), None) | (None, Some(x)) => (x, x),
            (None, None) => return None,
        };
        let a = interp_curve(&self.by_shape[&(k, lo)], b)?;
        if lo == hi {
            return Some(a);
        }
        let c = interp_curve(&self.by_shape[&(k, hi)], b)?;
        Some(lerp2(a, c, (r - lo as f64) / (hi - lo) as f64))
    }
}
