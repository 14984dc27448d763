//! The shipped plugins' own decisions (choosing them by config is
//! `blox-config`'s tests).

use super::*;
use crate::job::JobSpec;

#[test]
fn hot_spares_decide_in_order_as_if_each_resume_had_run() {
    use crate::cluster::ClusterState;
    use crate::ids::{GpuId, NodeId};
    use crate::job::JobStatus;
    use crate::module::RoundInfo;
    // Four nodes of two GPUs; nodes 2 and 3 are spares, node 0 failed.
    // Job 1 held GPUs 0 and 2, job 2 GPUs 1 and 5 (5 is on spare node 2:
    // it failed there, and node 2 came back into the pool).
    let mut cluster = ClusterState::homogeneous(4, 2);
    cluster.set_spares(2).unwrap();
    cluster.remove_node(NodeId(0)).unwrap();
    let mut jobs = JobState::new();
    for id in [1, 2] {
        let mut j = Job::new(JobSpec::new(id, 0.0, 2));
        j.status = JobStatus::Queued;
        jobs.insert(j);
    }
    let hit = vec![
        (JobId(1), vec![GpuId(0), GpuId(2)]),
        (JobId(2), vec![GpuId(1), GpuId(5)]),
    ];
    let round = RoundInfo::new(0, 0.0, 60.0);
    let input = RecoveryInput {
        round: &round,
        jobs: &jobs,
        cluster: &cluster,
    };
    let r = HotSpares.recover(&input, &hit);
    // Job 1 keeps GPU 2 and calls node 2 for one more (GPU 4). Node 2 is
    // then online with GPU 5 free: job 2 keeps it and calls node 3 for
    // one GPU, as it would once job 1's resume had run.
    assert_eq!(
        r,
        vec![
            Resume {
                job: JobId(1),
                spares: vec![NodeId(2)],
                gpus: vec![GpuId(2), GpuId(4)],
            },
            Resume {
                job: JobId(2),
                spares: vec![NodeId(3)],
                gpus: vec![GpuId(5), GpuId(6)],
            },
        ]
    );
}
