//! How fast a job trains with more or fewer CPU cores and host memory per GPU:
//! the per-model sensitivity matrices that Synergy profiles (Mohan et al.,
//! "Looking Beyond GPUs for DNN Scheduling on Multi-Tenant Clusters", OSDI'22,
//! §2 and §4.1 "optimistic profiling").
//!
//! A profile is a 9 × 5 matrix of throughput relative to the GPU-proportional
//! share (3 CPUs and 62.5 GB per GPU on Synergy's 8-GPU, 24-CPU, 500 GB
//! servers, where the matrix reads 1.0): rows are CPU cores per GPU
//! [`CPU_LEVELS`], columns host memory per GPU [`MEM_LEVELS`] (the levels of the
//! Synergy simulator). Between levels a job runs at the speed of the largest
//! level it holds in each dimension. The file format is the one vendored in
//! `data/blox/derived/model_profiles__models_dir.csv` (see its `NOTE.md`): one row per model and
//! GPU count with `model,gpus,cpus,mem_gb,speedup,tput_matrix_rows_cpu_levels_x_cols_mem_levels`;
//! the 1-GPU row of each model is used for every GPU count, per GPU, as the
//! Synergy simulator does.

use super::table::CsvTable;
use super::WorkloadError;
use blox_core::HostShare;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// CPU cores per GPU of each matrix row.
pub const CPU_LEVELS: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0, 12.0, 24.0];
/// Host memory per GPU (GB) of each matrix column.
pub const MEM_LEVELS: [f64; 5] = [20.83, 62.5, 125.0, 187.5, 250.0];

/// One model's sensitivity to CPU cores and host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostProfile {
    pub model: String,
    /// The smallest share at which it reaches its best speed (Synergy's ideal
    /// demand vector).
    pub best: HostShare,
    /// Its speed at `best`, relative to the proportional share.
    pub best_speedup: f64,
    /// `speed[cpu level][mem level]`, relative to the proportional share.
    pub speed: [[f64; 5]; 9],
}

impl HostProfile {
    /// Relative speed with `share` per GPU.
    pub fn speed_at(&self, share: HostShare) -> f64 {
        let level =
            |levels: &[f64], v: f64| levels.iter().rposition(|l| v + 1e-9 >= *l).unwrap_or(0);
        let r = level(&CPU_LEVELS, share.cpus_per_gpu);
        let c = level(&MEM_LEVELS, share.mem_gb_per_gpu);
        self.speed[r][c]
    }
}

/// Host profiles by model name.
pub type HostProfiles = BTreeMap<String, Arc<HostProfile>>;

fn parse_matrix(text: &str) -> Result<[[f64; 5]; 9], String> {
    let inner = text.trim();
    let inner = inner
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or("expected a matrix like [[1, 1, 1, 1, 1], …]")?;
    let mut rows = Vec::new();
    for part in inner.split(']') {
        let part = part.trim().trim_start_matches(',').trim();
        if part.is_empty() {
            continue;
        }
        let part = part
            .strip_prefix('[')
            .ok_or("expected `[` at the start of a row")?;
        let row: Result<Vec<f64>, _> = part
            .split(',')
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|e| format!("`{}`: {e}", v.trim()))
            })
            .collect();
        rows.push(row?);
    }
    if rows.len() != CPU_LEVELS.len() || rows.iter().any(|r| r.len() != MEM_LEVELS.len()) {
        return Err(format!(
            "expected {} rows (CPU levels {:?}) of {} values (memory levels {:?} GB)",
            CPU_LEVELS.len(),
            CPU_LEVELS,
            MEM_LEVELS.len(),
            MEM_LEVELS
        ));
    }
    let mut m = [[0.0; 5]; 9];
    for (i, r) in rows.iter().enumerate() {
        for (j, v) in r.iter().enumerate() {
            if !(v.is_finite() && *v > 0.0) {
                return Err(format!("row {i}, column {j}: speed {v} must be positive"));
            }
            m[i][j] = *v;
        }
    }
    Ok(m)
}

/// Reads a profile file; every model's 1-GPU row.
pub fn read(path: &Path) -> Result<HostProfiles, WorkloadError> {
    let t = CsvTable::read(path)?;
    const MATRIX: &str = "tput_matrix_rows_cpu_levels_x_cols_mem_levels";
    t.require(&["model", "gpus", "cpus", "mem_gb", "speedup", MATRIX])?;
    let mut out = HostProfiles::new();
    for r in 0..t.rows.len() {
        if t.u64(r, "gpus")? != 1 {
            continue;
        }
        let field = |column: &str, message: String| WorkloadError::Field {
            path: path.to_path_buf(),
            line: t.rows[r].0,
            column: column.into(),
            message,
        };
        let model = t.str(r, "model")?.to_string();
        let speed = parse_matrix(t.str(r, MATRIX)?).map_err(|m| field(MATRIX, m))?;
        let best = HostShare {
            cpus_per_gpu: t.f64(r, "cpus")?,
            mem_gb_per_gpu: t.f64(r, "mem_gb")?,
        };
        let best_speedup = t.f64(r, "speedup")?;
        if best.cpus_per_gpu <= 0.0 || best.mem_gb_per_gpu <= 0.0 {
            return Err(field("cpus", "cpus and mem_gb must be positive".into()));
        }
        if out.contains_key(&model) {
            return Err(field("model", format!("`{model}` has two 1-GPU rows")));
        }
        out.insert(
            model.clone(),
            Arc::new(HostProfile {
                model,
                best,
                best_speedup,
                speed,
            }),
        );
    }
    if out.is_empty() {
        return Err(WorkloadError::Invalid(format!(
            "{}: no 1-GPU rows",
            path.display()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vendored() -> HostProfiles {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../data/blox/derived/model_profiles__models_dir.csv");
        read(&path).unwrap()
    }

    #[test]
    fn every_vendored_model_runs_at_speed_one_on_the_proportional_share() {
        let p = vendored();
        assert_eq!(p.len(), 12);
        let prop = HostShare {
            cpus_per_gpu: 3.0,
            mem_gb_per_gpu: 62.5,
        };
        for (m, prof) in &p {
            assert_eq!(prof.speed_at(prop), 1.0, "{m}");
            // The best share really gives the stated speedup.
            assert!(
                (prof.speed_at(prof.best) - prof.best_speedup).abs() < 1e-9,
                "{m}: {} vs {}",
                prof.speed_at(prof.best),
                prof.best_speedup
            );
        }
        // CPU-hungry image models gain from more CPUs, language models do not.
        assert!(p["alexnet"].best_speedup > 2.5);
        assert_eq!(p["transformer"].best_speedup, 1.0);
    }

    #[test]
    fn between_levels_a_job_gets_the_speed_of_the_level_below() {
        let p = vendored();
        let a = &p["alexnet"];
        let at = |c, m| {
            a.speed_at(HostShare {
                cpus_per_gpu: c,
                mem_gb_per_gpu: m,
            })
        };
        assert_eq!(at(10.0, 62.5), at(9.0, 62.5));
        assert_eq!(at(0.5, 62.5), at(1.0, 62.5));
        assert!(at(12.0, 125.0) > at(3.0, 62.5));
    }

    #[test]
    fn a_malformed_matrix_names_file_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.csv");
        std::fs::write(
            &f,
            "model,gpus,cpus,mem_gb,speedup,tput_matrix_rows_cpu_levels_x_cols_mem_levels\n\
             x,1,3,62.5,1,\"[[1, 1], [1, 1]]\"\n",
        )
        .unwrap();
        let e = read(&f).unwrap_err().to_string();
        assert!(e.contains("p.csv:2") && e.contains("tput_matrix"), "{e}");
    }
}
