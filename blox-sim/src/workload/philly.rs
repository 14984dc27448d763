//! Workloads from the Philly digest (`timestamp,duration,num_gpus,gpu_time,cluster`,
//! 82,247 jobs of Microsoft's Philly cluster, Sept–Dec 2017).
//!
//! Arrivals are a Poisson process at λ jobs/hour: each inter-arrival time is
//! `ceil(−ln(1 − U) / λ · 3600)` seconds, drawn after the previous arrival, the
//! first from time 0 (the Blox simulator's recipe; see
//! `blox-sim-semantics.md`). Job ids are given in arrival order from 0. Draws come
//! from ChaCha8 seeded with `[run] seed`: statistically equal to, but not the same
//! stream as, Python's `random` that Blox uses.

use super::table::CsvTable;
use super::{PhillyKeys, SimJob, WorkModel, WorkloadError};
use blox_core::JobSpec;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Next Poisson inter-arrival, whole seconds.
fn inter_arrival_s(rng: &mut ChaCha8Rng, jobs_per_hour: f64) -> f64 {
    let u: f64 = rng.random();
    (-(1.0 - u).ln() / jobs_per_hour * 3600.0).ceil()
}

struct PhillyRow {
    timestamp: String,
    duration_s: f64,
    gpus: u32,
}

fn read_rows(t: &CsvTable) -> Result<Vec<PhillyRow>, WorkloadError> {
    t.require(&["timestamp", "duration", "num_gpus"])?;
    let mut rows = Vec::with_capacity(t.rows.len());
    for r in 0..t.rows.len() {
        rows.push(PhillyRow {
            timestamp: t.str(r, "timestamp")?.to_string(),
            duration_s: t.f64(r, "duration")?,
            gpus: t.u32(r, "num_gpus")?,
        });
    }
    // Submission order (ISO timestamps sort as text); stable for equal stamps.
    rows.sort_by(|a, b| a.timestamp.cmp(&b.timestamp));
    Ok(rows)
}

/// The digest's jobs in submission order, filtered by duration, re-timed with
/// Poisson arrivals; each job keeps its GPU count and duration (multi-GPU jobs,
/// unlike the Blox simulator).
pub fn retimed(
    t: &CsvTable,
    keys: &PhillyKeys,
    num_jobs: Option<usize>,
    seed: u64,
) -> Result<Vec<SimJob>, WorkloadError> {
    let jobs_per_hour = keys.jobs_per_hour;
    let min = keys.min_duration_s.unwrap_or(0.0);
    let max = keys.max_duration_s.unwrap_or(f64::INFINITY);
    let limit = num_jobs.unwrap_or(usize::MAX);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut now = 0.0;
    let mut jobs = Vec::new();
    for row in read_rows(t)? {
        if jobs.len() >= limit {
            break;
        }
        if row.duration_s <= 0.0 || row.duration_s < min || row.duration_s > max || row.gpus == 0 {
            continue;
        }
        now += inter_arrival_s(&mut rng, jobs_per_hour);
        let id = jobs.len() as u64;
        jobs.push(SimJob {
            startup_s: None,
            converge_at: None,
            spec: JobSpec::new(id, now, row.gpus).with_duration(row.duration_s),
            work: WorkModel::Duration {
                duration_s: row.duration_s,
            },
        });
    }
    Ok(jobs)
}

/// Lower and upper bound of the Blox recipe's duration filter: (10^1.5, 10^4) minutes.
pub const BLOX_MIN_DURATION_S: f64 = 1897.366596; // 60 · 10^1.5
pub const BLOX_MAX_DURATION_S: f64 = 600_000.0; // 60 · 10^4

/// Blox's "Philly-Trace" recipe (Blox, EuroSys'24, §6; semantics in
/// `blox-sim-semantics.md`): keep the jobs whose duration lies in
/// (31.6 min, 166.7 h); only their count matters — every duration is redrawn
/// Gavel-style (80 %: 60·10^U(1.5, 3) s, 20 %: 60·10^U(3, 4) s), every job asks for
/// one GPU, arrivals are Poisson at λ jobs/hour.
pub fn blox_recipe(
    t: &CsvTable,
    jobs_per_hour: f64,
    num_jobs: Option<usize>,
    seed: u64,
) -> Result<Vec<SimJob>, WorkloadError> {
    let kept = read_rows(t)?
        .iter()
        .filter(|r| r.duration_s > BLOX_MIN_DURATION_S && r.duration_s < BLOX_MAX_DURATION_S)
        .count();
    let n = num_jobs.map_or(kept, |n| n.min(kept));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut now = 0.0;
    let mut jobs = Vec::with_capacity(n);
    for id in 0..n as u64 {
        now += inter_arrival_s(&mut rng, jobs_per_hour);
        let exponent = if rng.random::<f64>() < 0.8 {
            rng.random_range(1.5..3.0)
        } else {
            rng.random_range(3.0..4.0)
        };
        let duration_s: f64 = 60.0 * 10f64.powf(exponent);
        jobs.push(SimJob {
            startup_s: None,
            converge_at: None,
            spec: JobSpec::new(id, now, 1).with_duration(duration_s),
            work: WorkModel::Duration { duration_s },
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_match_the_rate_and_are_whole_seconds() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let n = 100_000;
        let total: f64 = (0..n).map(|_| inter_arrival_s(&mut rng, 8.0)).sum();
        let mean = total / n as f64;
        // 3600/8 = 450 s, +0.5 s from the ceiling; 5 standard errors (450/sqrt(n) = 1.4 s).
        assert!((mean - 450.5).abs() < 7.0, "mean inter-arrival {mean}");
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        assert_eq!(inter_arrival_s(&mut rng, 8.0).fract(), 0.0);
    }
}
