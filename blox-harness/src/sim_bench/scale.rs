//! `blox bench scale`: `examples/configs/scale-1m.toml` (Philly-digest jobs
//! drawn from its joint GPU-count/duration distribution, Poisson arrivals at
//! 800 jobs/hour on 10,000 GPUs) at other sizes and under other policies.
//!
//! A cell is (scheduling policy, jobs, GPUs). The cluster is `GPUs / 4`
//! nodes of 4 GPUs and the arrival rate scales with it (800 jobs/hour per
//! 10,000 GPUs), so every cell offers the same load. A cell reports the
//! time to draw the workload, the time of the run itself, jobs/s and
//! rounds/s of the run, the process's peak memory, and how busy the cluster
//! was while jobs kept arriving (from a third of the arrival span to its end,
//! past the warm-up).

use super::{peak_rss_mib, BenchError, Result};
use blox_config::Override;
use blox_sim::{load_config, Simulation};
use std::path::Path;
use std::time::Instant;

/// The config every cell starts from, relative to `examples/configs`.
pub const CONFIG: &str = "scale-1m.toml";

/// Arrival rate of the reference cell, jobs/hour per 10,000 GPUs.
pub const JOBS_PER_HOUR_PER_10K_GPUS: f64 = 800.0;

/// GPUs per node in every cell.
pub const GPUS_PER_NODE: u32 = 4;

/// The default matrix: policies × jobs × GPUs.
pub const POLICIES: &[&str] = &["fifo", "las", "srtf", "tiresias"];
pub const JOBS: &[usize] = &[10_000, 100_000, 1_000_000];
pub const GPUS: &[u32] = &[1_000, 10_000];

/// One cell of the matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub policy: String,
    pub jobs: usize,
    pub gpus: u32,
}

impl Cell {
    /// `POLICY:JOBS:GPUS`, e.g. `las:1000000:10000`.
    pub fn parse(s: &str) -> std::result::Result<Cell, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let [policy, jobs, gpus] = parts[..] else {
            return Err(format!(
                "`{s}`: expected POLICY:JOBS:GPUS, e.g. las:1000000:10000"
            ));
        };
        let jobs: usize = jobs
            .parse()
            .map_err(|e| format!("`{s}`: jobs `{jobs}`: {e}"))?;
        let gpus: u32 = gpus
            .parse()
            .map_err(|e| format!("`{s}`: GPUs `{gpus}`: {e}"))?;
        if jobs == 0 || gpus < GPUS_PER_NODE || !gpus.is_multiple_of(GPUS_PER_NODE) {
            return Err(format!(
                "`{s}`: need at least one job and a positive multiple of {GPUS_PER_NODE} GPUs"
            ));
        }
        Ok(Cell {
            policy: policy.to_string(),
            jobs,
            gpus,
        })
    }

    /// `POLICY:JOBS:GPUS`.
    pub fn label(&self) -> String {
        format!("{}:{}:{}", self.policy, self.jobs, self.gpus)
    }

    /// Jobs per hour that offer this cell's cluster the reference load.
    pub fn jobs_per_hour(&self) -> f64 {
        JOBS_PER_HOUR_PER_10K_GPUS * self.gpus as f64 / 10_000.0
    }

    /// The `--set`s that turn the reference config into this cell.
    pub fn overrides(&self) -> Vec<Override> {
        vec![
            Override::set("scheduling.policy", &format!("\"{}\"", self.policy)),
            Override::set("workload.num_jobs", &self.jobs.to_string()),
            Override::set("workload.jobs_per_hour", &self.jobs_per_hour().to_string()),
            Override::set("cluster.nodes", &(self.gpus / GPUS_PER_NODE).to_string()),
            Override::set("cluster.gpus_per_node", &GPUS_PER_NODE.to_string()),
        ]
    }
}

/// The whole default matrix, biggest cells last.
pub fn default_cells() -> Vec<Cell> {
    let mut out = Vec::new();
    for &gpus in GPUS {
        for &jobs in JOBS {
            for p in POLICIES {
                out.push(Cell {
                    policy: p.to_string(),
                    jobs,
                    gpus,
                });
            }
        }
    }
    out
}

/// What one cell measured.
#[derive(Clone, Debug)]
pub struct Measured {
    pub cell: Cell,
    /// Reading the digest and drawing the jobs.
    pub workload_s: f64,
    /// The simulation, from the first round to the tables.
    pub run_s: f64,
    pub rounds: u64,
    pub jobs_finished: usize,
    pub preemptions: u64,
    /// Mean busy fraction while jobs kept arriving (past the first third).
    pub busy: f64,
    pub avg_jct_h: f64,
    /// Peak resident memory of this process, MiB (`None` off Linux).
    pub peak_rss_mib: Option<f64>,
}

impl Measured {
    /// One line of the benchmark's table.
    pub fn line(&self) -> String {
        format!(
            "scale {:<9} {:>9} jobs {:>6} GPUs  {:>7} rounds  run {:>7.2} s  {:>9.0} jobs/s  {:>7.0} rounds/s  workload {:>5.2} s  peak RSS {:>6.0} MiB  busy {:>4.1} %  {:>7} preemptions  avg JCT {:>5.2} h",
            self.cell.policy,
            self.cell.jobs,
            self.cell.gpus,
            self.rounds,
            self.run_s,
            self.cell.jobs as f64 / self.run_s,
            self.rounds as f64 / self.run_s,
            self.workload_s,
            self.peak_rss_mib.unwrap_or(f64::NAN),
            self.busy * 100.0,
            self.preemptions,
            self.avg_jct_h,
        )
    }
}

/// Runs one cell in this process.
pub fn run_cell(configs_dir: &Path, cell: &Cell) -> Result<Measured> {
    if blox_core::registry::find_scheduling(&cell.policy).is_none() {
        return Err(BenchError::Setup(format!(
            "the `{}` scheduling policy is not registered",
            cell.policy
        )));
    }
    let cfg = load_config(&configs_dir.join(CONFIG), None, &cell.overrides())?;
    let t = Instant::now();
    let sim = Simulation::from_config(&cfg)?;
    let workload_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let r = sim.run_to_end()?;
    let run_s = t.elapsed().as_secs_f64();
    let last_arrival = r.jobs.iter().map(|j| j.arrival_s).fold(0.0, f64::max);
    let from = last_arrival / 3.0;
    let (busy, n) = r
        .rounds
        .iter()
        .filter(|x| x.time_s >= from && x.time_s <= last_arrival && x.total_gpus > 0)
        .fold((0.0, 0usize), |(b, n), x| {
            (b + x.busy_gpus as f64 / x.total_gpus as f64, n + 1)
        });
    Ok(Measured {
        cell: cell.clone(),
        workload_s,
        run_s,
        rounds: r.summary.rounds,
        jobs_finished: r.summary.jobs_finished,
        preemptions: r.summary.preemptions,
        busy: if n > 0 { busy / n as f64 } else { f64::NAN },
        avg_jct_h: r.summary.avg_jct_s / 3600.0,
        peak_rss_mib: peak_rss_mib(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_parse_and_scale_the_arrival_rate_with_the_cluster() {
        let c = Cell::parse("las:1000000:10000").unwrap();
        assert_eq!(
            (c.policy.as_str(), c.jobs, c.gpus),
            ("las", 1_000_000, 10_000)
        );
        assert_eq!(c.jobs_per_hour(), 800.0);
        assert_eq!(Cell::parse("fifo:10:1000").unwrap().jobs_per_hour(), 80.0);
        assert_eq!(c.label(), "las:1000000:10000");
        for bad in [
            "las",
            "las:1:2:3",
            "las:x:1000",
            "las:0:1000",
            "las:10:6",
            "las:10:0",
        ] {
            assert!(Cell::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            default_cells().len(),
            POLICIES.len() * JOBS.len() * GPUS.len()
        );
    }
}
