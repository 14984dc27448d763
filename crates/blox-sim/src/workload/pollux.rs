//! The Pollux artifact's workloads (`name,time,application,num_replicas,batch_size`)
//! and per-application profiles (Pollux, OSDI'21, §5; file semantics in
//! `pollux-data.md` §1–4).
//!
//! Until the profile-driven job model arrives (the Pollux work item), a job here is
//! rigid: it runs at its tuned `num_replicas` GPUs and tuned global `batch_size` for
//! a fixed *duration derived from its profile*:
//!
//! 1. layout: `num_replicas` packed onto nodes of `gpus_per_node` (4) GPUs — full
//!    nodes first, e.g. 6 → (4, 2) — and canonicalised by rotation (§3.1);
//! 2. batch: atomic batch `b = M / (r·(s+1))` with the fewest accumulation steps `s`
//!    that keep `b ≤ bmax`, clamped to the measured range (§3.2);
//! 3. step time `T_iter = T_step + s·(T_step − T_sync)`, with `(T_step, T_sync)`
//!    linearly interpolated in `b` from `placements.csv` (≤ 4 nodes) or, for ≥ 5
//!    nodes, from `scalability.csv` at the same (nodes, replicas) — which exists
//!    for every packed layout of the shipped workloads — instead of the artifact's
//!    3-D Delaunay interpolation;
//! 4. duration `= Σ_e (P(e+1) − P(e)) · T_iter / g(M, e)` over epochs, where
//!    `g = (σ² + μ²) / (σ²/S + μ²)`, `S = M / M0` (§4.1–4.3): the time to reach the
//!    completion target `P*` with no restarts and no interference.

use super::table::CsvTable;
use super::{SimJob, WorkModel, WorkloadError};
use blox_core::JobSpec;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// (local batch, step time, sync time), sorted by local batch.
type StepCurve = Vec<(f64, f64, f64)>;

#[derive(Clone, Debug)]
struct EpochStats {
    progress: f64,
    iteration: f64,
    grad_sqr: f64,
    grad_var: f64,
}

/// Everything measured about one application.
#[derive(Clone, Debug)]
pub struct AppProfile {
    pub app: String,
    placements: HashMap<u64, StepCurve>,
    scalability: HashMap<(u32, u32), StepCurve>,
    /// Validation curves by batch size, ascending.
    validation: Vec<(u32, Vec<EpochStats>)>,
    /// Smallest validated batch size (initial batch).
    pub m0: u32,
    /// Largest validated batch size.
    pub mmax: u32,
    pub bmin: f64,
    pub bmax: f64,
    pub max_epochs: usize,
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

fn interp_curve(curve: &StepCurve, b: f64) -> (f64, f64) {
    let b = b.clamp(curve[0].0, curve[curve.len() - 1].0);
    let i = curve.partition_point(|p| p.0 < b);
    if i == 0 {
        return (curve[0].1, curve[0].2);
    }
    let (b0, s0, y0) = curve[i - 1];
    let (b1, s1, y1) = curve[i.min(curve.len() - 1)];
    if b1 == b0 {
        return (s1, y1);
    }
    let w = (b - b0) / (b1 - b0);
    (s0 + w * (s1 - s0), y0 + w * (y1 - y0))
}

impl AppProfile {
    /// Loads `<traces>/<app>/{placements,scalability,validation-*}.csv`.
    pub fn load(traces: &Path, app: &str) -> Result<Self, WorkloadError> {
        let dir = traces.join(app);
        let mut placements: HashMap<u64, StepCurve> = HashMap::new();
        let t = CsvTable::read(&dir.join("placements.csv"))?;
        t.require(&["placement", "local_bsz", "step_time", "sync_time"])?;
        let (mut bmin, mut bmax) = (f64::INFINITY, 0.0f64);
        for r in 0..t.rows.len() {
            let b = t.f64(r, "local_bsz")?;
            bmin = bmin.min(b);
            bmax = bmax.max(b);
            placements.entry(t.u64(r, "placement")?).or_default().push((
                b,
                t.f64(r, "step_time")?,
                t.f64(r, "sync_time")?,
            ));
        }
        let mut scalability: HashMap<(u32, u32), StepCurve> = HashMap::new();
        let t = CsvTable::read(&dir.join("scalability.csv"))?;
        t.require(&[
            "num_nodes",
            "num_replicas",
            "local_bsz",
            "step_time",
            "sync_time",
        ])?;
        for r in 0..t.rows.len() {
            scalability
                .entry((
                    t.u64(r, "num_nodes")? as u32,
                    t.u64(r, "num_replicas")? as u32,
                ))
                .or_default()
                .push((
                    t.f64(r, "local_bsz")?,
                    t.f64(r, "step_time")?,
                    t.f64(r, "sync_time")?,
                ));
        }
        for c in placements.values_mut().chain(scalability.values_mut()) {
            c.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let mut validation = Vec::new();
        let entries = std::fs::read_dir(&dir).map_err(|e| WorkloadError::Io {
            path: dir.clone(),
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
            let t = CsvTable::read(&entry.path())?;
            t.require(&["progress", "iteration", "grad_sqr", "grad_var"])?;
            let mut rows = Vec::with_capacity(t.rows.len());
            for r in 0..t.rows.len() {
                rows.push(EpochStats {
                    progress: t.f64(r, "progress")?,
                    iteration: t.f64(r, "iteration")?,
                    grad_sqr: t.f64(r, "grad_sqr")?,
                    grad_var: t.f64(r, "grad_var")?,
                });
            }
            validation.push((bs, rows));
        }
        validation.sort_by_key(|v| v.0);
        if validation.is_empty() || placements.is_empty() {
            return Err(WorkloadError::Invalid(format!(
                "{}: no validation-*.csv or placements.csv for application `{app}`",
                dir.display()
            )));
        }
        let max_epochs = validation.iter().map(|v| v.1.len()).min().unwrap_or(0);
        // pollux-data.md §2: yolov3's largest atomic batch is overridden to 8.
        if app == "yolov3" {
            bmax = bmax.min(8.0);
        }
        Ok(AppProfile {
            app: app.to_string(),
            m0: validation[0].0,
            mmax: validation[validation.len() - 1].0,
            placements,
            scalability,
            validation,
            bmin,
            bmax,
            max_epochs,
        })
    }

    /// `P(e)`: progress at the end of epoch `e` (min over validation files); P(0) = 0.
    pub fn epoch_boundary(&self, e: usize) -> f64 {
        if e == 0 {
            return 0.0;
        }
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
        let m = m.clamp(self.m0 as f64, self.mmax as f64);
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

    /// `(grad_sqr, grad_var)` at global batch `m` in epoch `e` (§4.1).
    pub fn grad_stats(&self, m: f64, e: usize) -> (f64, f64) {
        let (m, lo, hi) = self.bracket(m);
        let (blo, rlo) = (&self.validation[lo].0, &self.validation[lo].1[e]);
        let (bhi, rhi) = (&self.validation[hi].0, &self.validation[hi].1[e]);
        if blo == bhi {
            return (rlo.grad_sqr, rlo.grad_var);
        }
        let (blo, bhi) = (*blo as f64, *bhi as f64);
        let f = |xlo: f64, xhi: f64| ((m - blo) * xhi + (bhi - m) * xlo) / (bhi - blo);
        (f(rlo.grad_sqr, rhi.grad_sqr), f(rlo.grad_var, rhi.grad_var))
    }

    /// Progress gained per optimizer step at global batch `m` in epoch `e`:
    /// `g = (σ² + μ²) / (σ²/S + μ²)`, `S = m / M0` (§4.1).
    pub fn gain(&self, m: f64, e: usize) -> f64 {
        let (sqr, var) = self.grad_stats(m, e);
        let s = m / self.m0 as f64;
        let denom = var / s + sqr;
        if denom <= 0.0 {
            1.0
        } else {
            (var + sqr) / denom
        }
    }

    /// Iterations to finish at a fixed batch (Optimus's oracle knowledge, §4.3).
    pub fn iterations_to_finish(&self, m: f64) -> f64 {
        let e = self.max_epochs - 1;
        let (m, lo, hi) = self.bracket(m);
        let (blo, bhi) = (self.validation[lo].0 as f64, self.validation[hi].0 as f64);
        let (xlo, xhi) = (
            self.validation[lo].1[e].iteration,
            self.validation[hi].1[e].iteration,
        );
        if blo == bhi {
            xlo
        } else {
            ((m - blo) * xhi + (bhi - m) * xlo) / (bhi - blo)
        }
    }

    /// `(T_step, T_sync)` for replicas laid out as `per_node` at atomic batch `b`.
    pub fn step_time(&self, per_node: &[u32], b: f64) -> Option<(f64, f64)> {
        if per_node.len() <= 4 {
            let curve = self.placements.get(&canonical_placement(per_node))?;
            return Some(interp_curve(curve, b));
        }
        let r: u32 = per_node.iter().sum();
        let n = per_node.len() as u32;
        let key = self
            .scalability
            .keys()
            .filter(|(nodes, _)| *nodes >= n.min(16))
            .min_by_key(|(nodes, reps)| (*nodes, reps.abs_diff(r)))
            .copied()?;
        Some(interp_curve(&self.scalability[&key], b))
    }

    /// Run time to completion at `replicas` GPUs (packed `gpus_per_node` a node) and
    /// global batch `batch`, as described in the module doc.
    pub fn duration_s(&self, replicas: u32, batch: u32, gpus_per_node: u32) -> Option<f64> {
        let r = replicas.max(1);
        let mut per_node = vec![gpus_per_node; (r / gpus_per_node) as usize];
        if r % gpus_per_node != 0 {
            per_node.push(r % gpus_per_node);
        }
        let m = (batch as f64).clamp(self.m0 as f64, self.mmax as f64);
        let steps = ((m / (r as f64 * self.bmax)).ceil() - 1.0).max(0.0);
        let b = (m / (r as f64 * (steps + 1.0))).clamp(self.bmin, self.bmax);
        let m_eff = r as f64 * b * (steps + 1.0);
        let (t_step, t_sync) = self.step_time(&per_node, b)?;
        let t_iter = t_step + steps * (t_step - t_sync);
        let mut total = 0.0;
        for e in 0..self.max_epochs {
            let dp = self.epoch_boundary(e + 1) - self.epoch_boundary(e);
            total += dp * t_iter / self.gain(m_eff, e);
        }
        Some(total)
    }
}

/// Profiles by application, loaded on first use.
pub struct ProfileCache {
    traces: PathBuf,
    apps: BTreeMap<String, AppProfile>,
}

impl ProfileCache {
    pub fn new(traces: &Path) -> Self {
        ProfileCache {
            traces: traces.to_path_buf(),
            apps: BTreeMap::new(),
        }
    }

    pub fn get(&mut self, app: &str) -> Result<&AppProfile, WorkloadError> {
        if !self.apps.contains_key(app) {
            let p = AppProfile::load(&self.traces, app)?;
            self.apps.insert(app.to_string(), p);
        }
        Ok(&self.apps[app])
    }
}

/// Reads a Pollux workload; each job's duration is derived from its profile.
pub fn read_workload(
    t: &CsvTable,
    traces: &Path,
    gpus_per_node: u32,
) -> Result<Vec<SimJob>, WorkloadError> {
    t.require(&["name", "time", "application", "num_replicas", "batch_size"])?;
    let mut cache = ProfileCache::new(traces);
    let mut jobs = Vec::with_capacity(t.rows.len());
    for r in 0..t.rows.len() {
        let app = t.str(r, "application")?.to_string();
        let replicas = t.u64(r, "num_replicas")? as u32;
        let batch = t.u64(r, "batch_size")? as u32;
        let profile = cache.get(&app).map_err(|e| WorkloadError::Field {
            path: t.path.clone(),
            line: t.line(r),
            column: "application".into(),
            message: format!("no usable profile for `{app}`: {e}"),
        })?;
        let duration_s = profile
            .duration_s(replicas, batch, gpus_per_node)
            .ok_or_else(|| WorkloadError::Field {
                path: t.path.clone(),
                line: t.line(r),
                column: "num_replicas".into(),
                message: format!("no step-time profile for {replicas} replicas of `{app}`"),
            })?;
        let mut spec =
            JobSpec::new(r as u64, t.f64(r, "time")?, replicas).with_duration(duration_s);
        spec.name = t.str(r, "name")?.to_string();
        spec.model = Some(app);
        spec.batch_size = Some(batch);
        jobs.push(SimJob {
            spec,
            work: WorkModel::Duration { duration_s },
        });
    }
    jobs.sort_by(|a, b| {
        a.spec
            .arrival_s
            .total_cmp(&b.spec.arrival_s)
            .then(a.spec.id.cmp(&b.spec.id))
    });
    Ok(jobs)
}
