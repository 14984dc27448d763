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
use super::{PhillyKeys, Sample, SimJob, WorkModel, WorkloadError};
use blox_core::{JobSpec, NonNegative, Positive};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// Next Poisson inter-arrival, whole seconds: one uniform draw through the
/// inverse CDF, as Python's `random.expovariate` in the Blox simulator
/// does (kept rather than `rand_distr::Exp`, whose ziggurat draws a
/// different number of uniforms and would move every generated workload).
fn inter_arrival_s(rng: &mut ChaCha8Rng, jobs_per_hour: f64) -> f64 {
    let u: f64 = rng.random();
    (-(1.0 - u).ln() / jobs_per_hour * 3600.0).ceil()
}

struct PhillyRow {
    timestamp: String,
    duration_s: f64,
    gpus: u32,
    /// Its virtual cluster (the digest's `cluster` column), if given.
    vc: Option<String>,
}

fn read_rows(t: &CsvTable) -> Result<Vec<PhillyRow>, WorkloadError> {
    t.require(&["timestamp", "duration", "num_gpus"])?;
    let mut rows = Vec::with_capacity(t.rows.len());
    for r in 0..t.rows.len() {
        rows.push(PhillyRow {
            timestamp: t.str(r, "timestamp")?.to_string(),
            duration_s: t.f64(r, "duration")?,
            gpus: t.u32(r, "num_gpus")?,
            vc: t
                .opt_str(r, "cluster")
                .filter(|v| !v.is_empty())
                .map(str::to_string),
        });
    }
    // Submission order (ISO timestamps sort as text); stable for equal stamps.
    rows.sort_by(|a, b| a.timestamp.cmp(&b.timestamp));
    Ok(rows)
}

/// The digest's jobs, filtered by duration, re-timed with Poisson arrivals;
/// each job keeps its GPU count and duration (multi-GPU jobs, unlike the Blox
/// simulator). `sample = "in-order"` (default) takes the rows in submission
/// order, at most once each; `sample = "joint"` draws every job's (GPU count,
/// duration) pair uniformly from the kept rows, with replacement — the
/// digest's joint distribution, for workloads larger than the digest.
pub fn retimed(
    t: &CsvTable,
    keys: &PhillyKeys,
    num_jobs: Option<usize>,
    seed: u64,
) -> Result<Vec<SimJob>, WorkloadError> {
    let jobs_per_hour = keys.jobs_per_hour.get();
    let min = keys.min_duration_s.map_or(0.0, NonNegative::get);
    let max = keys.max_duration_s.map_or(f64::INFINITY, Positive::get);
    let kept: Vec<PhillyRow> = read_rows(t)?
        .into_iter()
        .filter(|r| r.duration_s > 0.0 && r.duration_s >= min && r.duration_s <= max && r.gpus > 0)
        .collect();
    let n = match keys.sample {
        Sample::InOrder => {
            let n = num_jobs.unwrap_or(kept.len());
            if n > kept.len() {
                return Err(WorkloadError::Invalid(format!(
                    "{}: num_jobs = {n} but only {} rows pass the duration filter; \
                     set `sample = \"joint\"` to draw {n} jobs from their joint \
                     distribution of GPU count and duration",
                    t.path.display(),
                    kept.len()
                )));
            }
            n
        }
        Sample::Joint => {
            if kept.is_empty() {
                return Err(WorkloadError::Invalid(format!(
                    "{}: no row passes the duration filter, so there is nothing to sample",
                    t.path.display()
                )));
            }
            num_jobs.unwrap_or(kept.len())
        }
    };
    // A second stream for the draws, so a sampled workload's arrival times
    // equal the in-order workload's with the same seed.
    let mut pick = ChaCha8Rng::seed_from_u64(seed ^ 0x9011_1e55);
    let mut jobs = Vec::with_capacity(n);
    for id in 0..n {
        let row = match keys.sample {
            Sample::InOrder => &kept[id],
            Sample::Joint => &kept[pick.random_range(0..kept.len())],
        };
        let mut spec = JobSpec::new(id as u64, 0.0, row.gpus).with_duration(row.duration_s);
        spec.team = row.vc.clone();
        jobs.push(SimJob {
            startup_s: None,
            converge_at: None,
            spec,
            work: WorkModel::Duration {
                duration_s: row.duration_s,
            },
        });
    }
    retime(&mut jobs, jobs_per_hour, seed);
    Ok(jobs)
}

/// Replaces the arrival times of `jobs` (in their order) by a Poisson
/// process at `jobs_per_hour`, as the Philly workloads are timed.
pub fn retime(jobs: &mut [SimJob], jobs_per_hour: f64, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut now = 0.0;
    for j in jobs {
        now += inter_arrival_s(&mut rng, jobs_per_hour);
        j.spec.arrival_s = now;
    }
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
    path: &Path,
    jobs_per_hour: f64,
    num_jobs: Option<usize>,
    seed: u64,
) -> Result<Vec<SimJob>, WorkloadError> {
    // Only how many rows pass the duration filter matters here: every row
    // is checked as it is read, none is kept.
    let mut kept = 0;
    CsvTable::scan(path, &["timestamp", "duration", "num_gpus"], |t| {
        t.str(0, "timestamp")?;
        t.u32(0, "num_gpus")?;
        let d = t.f64(0, "duration")?;
        if d > BLOX_MIN_DURATION_S && d < BLOX_MAX_DURATION_S {
            kept += 1;
        }
        Ok(())
    })?;
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

    fn digest() -> (tempfile::TempDir, CsvTable) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("philly.csv");
        std::fs::write(
            &path,
            "timestamp,duration,num_gpus,gpu_time,cluster\n\
             2017-10-01 00:00:00,100,1,100,a\n\
             2017-10-01 00:01:00,200,8,1600,a\n\
             2017-10-01 00:02:00,0,4,0,a\n\
             2017-10-01 00:03:00,300,2,600,a\n",
        )
        .unwrap();
        let t = CsvTable::read(&path).unwrap();
        (dir, t)
    }

    fn keys(sample: Sample) -> PhillyKeys {
        PhillyKeys {
            jobs_per_hour: Positive::of(60.0),
            min_duration_s: None,
            max_duration_s: None,
            sample,
        }
    }

    #[test]
    fn joint_sampling_draws_whole_rows_any_number_of_times() {
        let (_d, t) = digest();
        let jobs = retimed(&t, &keys(Sample::Joint), Some(30_000), 3).unwrap();
        assert_eq!(jobs.len(), 30_000);
        let mut count = std::collections::HashMap::new();
        for j in &jobs {
            // Only the kept rows' (GPUs, duration) pairs, never mixed.
            let pair = (j.spec.requested_gpus, j.duration_s() as u32);
            assert!([(1, 100), (8, 200), (2, 300)].contains(&pair), "{pair:?}");
            *count.entry(pair).or_insert(0) += 1;
        }
        for n in count.values() {
            // 1/3 each, within 5 standard deviations (sd = 82).
            assert!((*n as f64 - 10_000.0).abs() < 410.0, "{count:?}");
        }
        // The same arrival times as the in-order workload with this seed.
        let in_order = retimed(&t, &keys(Sample::InOrder), None, 3).unwrap();
        for (a, b) in in_order.iter().zip(&jobs) {
            assert_eq!(a.spec.arrival_s, b.spec.arrival_s);
        }
    }

    #[test]
    fn asking_for_more_rows_than_the_digest_has_is_an_error_that_names_the_fix() {
        let (_d, t) = digest();
        let e = retimed(&t, &keys(Sample::InOrder), Some(4), 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("num_jobs = 4 but only 3 rows"), "{e}");
        assert!(e.contains("sample = \"joint\""), "{e}");
        assert_eq!(
            retimed(&t, &keys(Sample::InOrder), Some(3), 1)
                .unwrap()
                .len(),
            3
        );
    }

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
