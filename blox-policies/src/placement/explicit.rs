//! Explicit placement: pass through the concrete GPU ids a joint scheduling policy
//! chose (Pollux, OSDI'21, §4.2 decides allocations per node; ONES, SC'21, §3 maps
//! every GPU to a job). Running jobs the schedule drops are preempted; a running
//! job given other GPUs is restarted there; entries without GPU ids are skipped.

use blox_core::*;
use serde::Deserialize;

/// Pass-through placement. No parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Explicit {}

impl PlacementPolicy for Explicit {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        _cluster: &ClusterState,
    ) -> Placement {
        let mut out = Placement::default();
        let chosen: std::collections::HashMap<JobId, &Demand> = schedule
            .entries
            .iter()
            .filter(|d| d.gpu_ids.as_ref().is_some_and(|g| !g.is_empty()))
            .map(|d| (d.job, d))
            .collect();
        for job in jobs.running() {
            if !chosen.contains_key(&job.id()) {
                out.preempt.push(job.id());
            }
        }
        for d in &schedule.entries {
            if let Some(gpus) = d.gpu_ids.as_ref().filter(|g| !g.is_empty()) {
                let unchanged = jobs.get(d.job).is_some_and(|j| {
                    j.is_running()
                        && j.allocation == *gpus
                        && (d.batch_size.is_none() || d.batch_size == j.current_batch_size)
                });
                if !unchanged {
                    out.launch.push(Assignment {
                        job: d.job,
                        gpus: gpus.clone(),
                        batch_size: d.batch_size,
                        host: d.host,
                        share: None,
                        node: None,
                    });
                }
            }
        }
        out
    }
}

blox_core::register_placement!(
    "explicit",
    "use the GPU ids a joint scheduling policy chose (for Pollux/ONES-style policies)",
    |p| Ok(Box::new(p.parse::<Explicit>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn passes_chosen_gpus_through_and_preempts_dropped_jobs() {
        let mut cluster = ClusterState::homogeneous(1, 4);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[0]);
        add(&mut state, &mut cluster, job(2, 0.0, 1), &[]);
        let schedule = Schedule {
            desired_nodes: None,
            terminate: Vec::new(),
            min_run_s: None,
            note: None,
            entries: vec![Demand {
                job: JobId(2),
                gpus: 2,
                batch_size: Some(256),
                gpu_ids: Some(vec![GpuId(0), GpuId(3)]),
                host: None,
            }],
        };
        let p = Explicit {}.place(&info(0.0), &schedule, &state, &cluster);
        assert_eq!(p.preempt, vec![JobId(1)]);
        assert_eq!(
            p.launch,
            vec![Assignment {
                job: JobId(2),
                gpus: vec![GpuId(0), GpuId(3)],
                batch_size: Some(256),
                host: None,
                share: None,
                node: None,
            }]
        );
    }
}
