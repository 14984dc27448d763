//! First-free placement: a job gets the first free GPUs in global id order, across
//! nodes as needed (Blox, EuroSys'24, §4.1 "first free GPU" placement, the Blox
//! simulator's default), with Blox's preemption of lower-priority jobs.

use blox_core::walk::{priority_walk, WalkParams};
use blox_core::*;

/// First-fit placement. Parameters: `backfill` (false), `preempt` (true).
#[derive(Clone, Debug, Default)]
pub struct FirstFree {
    pub params: WalkParams,
}

impl PlacementPolicy for FirstFree {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        priority_walk(&self.params, schedule, jobs, cluster, |free, _job, n| {
            Some(free.iter().take(n as usize).collect())
        })
    }
}

blox_core::register_placement!(
    "first-free",
    "first free GPUs in id order, preempting from the bottom of the order (Blox §4.1)",
    |p| Ok(Box::new(FirstFree { params: p.parse()? }))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn takes_the_lowest_free_gpu_ids_across_nodes() {
        let mut cluster = ClusterState::homogeneous(2, 2);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[0]);
        add(&mut state, &mut cluster, job(2, 1.0, 2), &[]);
        let schedule = Schedule::in_priority_order([
            state.get(JobId(1)).unwrap(),
            state.get(JobId(2)).unwrap(),
        ]);
        let p = FirstFree::default().place(&info(0.0), &schedule, &state, &cluster);
        assert!(p.preempt.is_empty());
        assert_eq!(p.launch.len(), 1);
        assert_eq!(p.launch[0].gpus, vec![GpuId(1), GpuId(2)]);
    }

    #[test]
    fn higher_priority_job_preempts_from_the_bottom_of_the_order() {
        // 2 GPUs, both busy with jobs 1 (priority 2nd) and 2 (priority 3rd);
        // job 3 (priority 1st) needs one GPU: job 2, the lowest, is preempted.
        let mut cluster = ClusterState::homogeneous(1, 2);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[0]);
        add(&mut state, &mut cluster, job(2, 1.0, 1), &[1]);
        add(&mut state, &mut cluster, job(3, 2.0, 1), &[]);
        let order = [3, 1, 2].map(|i| state.get(JobId(i)).unwrap());
        let p = FirstFree::default().place(
            &info(0.0),
            &Schedule::in_priority_order(order),
            &state,
            &cluster,
        );
        assert_eq!(p.preempt, vec![JobId(2)]);
        assert_eq!(
            p.launch,
            vec![Assignment {
                job: JobId(3),
                gpus: vec![GpuId(1)],
                batch_size: None,
                host: None,
                share: None,
                node: None,
            }]
        );
    }

    #[test]
    fn job_that_cannot_fit_stops_the_walk_without_backfilling() {
        let mut cluster = ClusterState::homogeneous(1, 2);
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(1, 0.0, 1), &[0]);
        add(&mut state, &mut cluster, job(2, 1.0, 2), &[]);
        add(&mut state, &mut cluster, job(3, 2.0, 1), &[]);
        let order = [1, 2, 3].map(|i| state.get(JobId(i)).unwrap());
        let schedule = Schedule::in_priority_order(order);
        let p = FirstFree::default().place(&info(0.0), &schedule, &state, &cluster);
        assert!(p.launch.is_empty() && p.preempt.is_empty(), "{p:?}");
        let mut backfill = FirstFree {
            params: WalkParams {
                backfill: true,
                preempt: true,
            },
        };
        let p = backfill.place(&info(0.0), &schedule, &state, &cluster);
        assert_eq!(p.launch[0].job, JobId(3));
    }
}
