//! Synergy's resource-sensitive scheduling (Mohan et al., "Looking Beyond GPUs
//! for DNN Scheduling on Multi-Tenant Clusters", OSDI'22, §4; Blox, EuroSys'24,
//! Table 1, "resource sensitive FIFO").
//!
//! Synergy keeps the order of a GPU policy (FIFO, SRTF or LAS) and changes what
//! each job is given beyond GPUs:
//! - `mode = "proportional"`: every job gets CPUs and host memory in proportion to
//!   its GPUs (the baseline of the paper, §2);
//! - `mode = "tune"` (Synergy-TUNE, §4.3): every job asks for its *best* demand
//!   vector, the smallest CPU and memory share at which its profiled throughput
//!   peaks (optimistic profiling, §4.1), read from the job's metrics
//!   `best_cpus_per_gpu` and `best_mem_gb_per_gpu` (the simulator reports them
//!   from the host profiles; a real profiler pushes them). Jobs without them ask
//!   for the proportional share.
//!
//! Fitting those demands onto servers — falling back to the proportional share,
//! reclaiming from jobs above it — is the `synergy` placement's job
//! ([`crate::placement::synergy`]); pair the two.

use super::las::by_attained_service;
use super::srtf::by_remaining_time;
use blox_core::*;
use serde::Deserialize;

/// Which GPU policy orders the jobs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    #[default]
    Fifo,
    Srtf,
    Las,
}

/// What each job asks for beyond GPUs.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Proportional,
    #[default]
    Tune,
}

/// Parameters: `order` (`fifo`, `srtf`, `las`; default `fifo`), `mode`
/// (`tune`, `proportional`; default `tune`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Synergy {
    #[serde(default)]
    pub order: Order,
    #[serde(default)]
    pub mode: Mode,
}

/// A job's best demand vector from its metrics, if it reported one.
pub fn best_share(jobs: &JobState, job: JobId) -> Option<HostShare> {
    let m = jobs.metrics();
    Some(HostShare {
        cpus_per_gpu: m.get(job, metric::BEST_CPUS_PER_GPU)?,
        mem_gb_per_gpu: m.get(job, metric::BEST_MEM_GB_PER_GPU)?,
    })
}

impl SchedulingPolicy for Synergy {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, _round: &RoundInfo, jobs: &JobState, _c: &ClusterState) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        match self.order {
            Order::Fifo => super::fifo::sort_by_arrival(&mut order),
            Order::Las => order.sort_by(|a, b| by_attained_service(a, b)),
            Order::Srtf => order.sort_by(|a, b| by_remaining_time(a, b)),
        }
        let mut s = Schedule::in_priority_order(order);
        if self.mode == Mode::Tune {
            for d in &mut s.entries {
                d.host = best_share(jobs, d.job);
            }
        }
        s
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        vec![metric::BEST_CPUS_PER_GPU, metric::BEST_MEM_GB_PER_GPU]
    }
}

blox_core::register_scheduling!(
    "synergy",
    "Synergy (OSDI'22 §4): a FIFO/SRTF/LAS order; `tune` asks for each job's best CPU/memory share (pair with `synergy` placement)",
    |p| Ok(Box::new(p.parse::<Synergy>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn tune_asks_for_the_profiled_best_share_and_proportional_for_none() {
        let mut cluster = ClusterState::homogeneous(1, 8);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[]);
        add(&mut state, &mut cluster, job(2, 1.0, 1), &[]);
        state
            .metrics()
            .set(JobId(1), metric::BEST_CPUS_PER_GPU, 12.0);
        state
            .metrics()
            .set(JobId(1), metric::BEST_MEM_GB_PER_GPU, 125.0);
        let tune = Synergy::default().schedule(&info(0.0), &state, &cluster);
        assert_eq!(tune.job_order(), vec![JobId(1), JobId(2)]);
        assert_eq!(
            tune.entries[0].host,
            Some(HostShare {
                cpus_per_gpu: 12.0,
                mem_gb_per_gpu: 125.0
            })
        );
        assert_eq!(tune.entries[1].host, None, "no profile: proportional");
        let prop = Synergy {
            mode: Mode::Proportional,
            ..Default::default()
        }
        .schedule(&info(0.0), &state, &cluster);
        assert!(prop.entries.iter().all(|d| d.host.is_none()));
    }
}
