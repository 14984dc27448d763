//! GPUs that jobs share: the ledger beside the holder slot, its rules and
//! the invariant check over both.

use super::*;
use crate::job::{Job, JobSpec, JobStatus};
use crate::job_state::JobState;
use proptest::prelude::*;

fn host(cpus: f64, mem_gb: f64) -> HostShare {
    HostShare {
        cpus_per_gpu: cpus,
        mem_gb_per_gpu: mem_gb,
    }
}

fn running(id: u64, gpus: &[GpuId]) -> Job {
    let mut j = Job::new(JobSpec::new(id, 0.0, gpus.len() as u32));
    j.status = JobStatus::Running;
    j.allocation = gpus.to_vec();
    j
}

/// Running jobs with the allocations the cluster gives them.
fn jobs_of(c: &ClusterState) -> JobState {
    let mut s = JobState::new();
    for (j, gpus) in c.holders() {
        s.insert(running(j.0, &gpus));
    }
    s
}

#[test]
fn jobs_share_a_gpu_up_to_a_thousand_thousandths_and_it_is_never_free_meanwhile() {
    let mut c = ClusterState::homogeneous(1, 2);
    c.assign_share(JobId(1), GpuId(0), 460, host(2.0, 8.0))
        .unwrap();
    c.assign_share(JobId(2), GpuId(0), 300, host(1.0, 4.0))
        .unwrap();
    assert_eq!(c.free_milli(GpuId(0)), 240);
    assert_eq!(c.free_milli(GpuId(1)), 1000);
    assert_eq!(c.num_free(), 1);
    assert_eq!(c.free_gpus().collect::<Vec<_>>(), vec![GpuId(1)]);
    assert_eq!(c.free_per_node(), &[1]);
    // Too much, whole, or a second share: refused, nothing changed.
    let err = c.assign_share(JobId(3), GpuId(0), 250, host(0.0, 0.0));
    assert_eq!(
        err,
        Err(ClusterError::ShareTooLarge {
            gpu: GpuId(0),
            job: JobId(3),
            milli: 250,
            free: 240
        })
    );
    assert!(matches!(
        c.assign(JobId(3), &[GpuId(0)]),
        Err(ClusterError::Busy {
            holder: JobId(1),
            ..
        })
    ));
    assert!(c
        .assign_share(JobId(1), GpuId(1), 100, host(0.0, 0.0))
        .is_err());
    assert!(c.assign(JobId(1), &[GpuId(1)]).is_err());
    assert!(c
        .assign_share(JobId(3), GpuId(0), 0, host(0.0, 0.0))
        .is_err());
    assert_eq!(c.free_milli(GpuId(0)), 240);
    // The row adds up its sharers; memory in proportion.
    let g = c.gpu(GpuId(0)).unwrap();
    assert_eq!((g.host_cpus, g.host_mem_gb, g.job), (3.0, 12.0, None));
    assert_eq!(c.host_used(NodeId(0)), (3.0, 12.0));
    assert!((g.free_mem_gb - 0.24 * NodeSpec::with_gpus(2).gpu_mem_gb).abs() < 1e-9);
    // A sharing job's allocation is its one GPU.
    assert_eq!(c.allocation_of(JobId(2)), &[GpuId(0)]);
    assert_eq!(c.holders().len(), 2);
    c.check_invariants(&jobs_of(&c)).unwrap();
    // One leaves: still shared. Both: free again, whole.
    c.release_job(JobId(1));
    assert_eq!((c.free_milli(GpuId(0)), c.num_free()), (700, 1));
    c.check_invariants(&jobs_of(&c)).unwrap();
    c.release(JobId(2), &[GpuId(0)]);
    assert_eq!((c.free_milli(GpuId(0)), c.num_free()), (1000, 2));
    assert_eq!(c.host_used(NodeId(0)), (0.0, 0.0));
    assert!(!c.has_shares());
    c.assign(JobId(3), &[GpuId(0)]).unwrap();
    assert_eq!(c.free_milli(GpuId(0)), 0);
    assert!(c
        .assign_share(JobId(4), GpuId(0), 1, host(0.0, 0.0))
        .is_err());
    c.check_invariants(&jobs_of(&c)).unwrap();
}

#[test]
fn a_node_going_away_stops_its_sharers() {
    let mut c = ClusterState::homogeneous(2, 1);
    c.assign_share(JobId(1), GpuId(1), 500, host(0.0, 0.0))
        .unwrap();
    c.assign_share(JobId(2), GpuId(1), 500, host(0.0, 0.0))
        .unwrap();
    let hit = c.remove_node(NodeId(1)).unwrap();
    assert_eq!(hit, vec![JobId(1), JobId(2)]);
    assert!(!c.has_shares());
    assert_eq!((c.num_free(), c.num_gpus()), (1, 1));
    c.check_invariants(&JobState::new()).unwrap();
    c.restore_node(NodeId(1)).unwrap();
    assert_eq!(c.free_milli(GpuId(1)), 1000);
}

#[test]
fn the_invariant_check_finds_sharers_that_part_from_the_ledger() {
    let mut c = ClusterState::homogeneous(1, 2);
    c.assign_share(JobId(1), GpuId(0), 400, host(0.0, 0.0))
        .unwrap();
    // Not running, or running elsewhere.
    let e = c
        .check_invariants(&JobState::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("job-1 holds a share of gpu-0"), "{e}");
    let mut s = JobState::new();
    s.insert(running(1, &[GpuId(1)]));
    assert!(c.check_invariants(&s).is_err());
    // The check of changes finds it too.
    let e = c.check_changes(&JobState::new()).unwrap_err().to_string();
    assert!(e.contains("share"), "{e}");
    c.check_changes(&jobs_of(&c)).unwrap();
    c.assign_share(JobId(2), GpuId(0), 100, host(0.0, 0.0))
        .unwrap();
    let mut s = JobState::new();
    s.insert(running(1, &[GpuId(0)]));
    assert!(c.check_changes(&s).is_err());
}

#[test]
fn a_cluster_with_shares_reads_back_and_refuses_a_ledger_the_table_forbids() {
    let mut c = ClusterState::homogeneous(1, 2);
    c.assign_share(JobId(1), GpuId(0), 400, host(1.0, 2.0))
        .unwrap();
    c.assign(JobId(2), &[GpuId(1)]).unwrap();
    let text = serde_json::to_string(&c).unwrap();
    let back: ClusterState = serde_json::from_str(&text).unwrap();
    assert_eq!(back.share_of(JobId(1)), c.share_of(JobId(1)));
    assert_eq!((back.num_free(), back.free_milli(GpuId(0))), (0, 600));
    back.check_invariants(&jobs_of(&c)).unwrap();
    // A cluster without shares is written as before: no `shares` key.
    let plain = serde_json::to_string(&ClusterState::homogeneous(1, 1)).unwrap();
    assert!(!plain.contains("shares"), "{plain}");
    // A share of a GPU held whole, or over one GPU: refused.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["shares"][0]["gpu"] = serde_json::json!(1);
    let e = serde_json::from_value::<ClusterState>(v.clone()).unwrap_err();
    assert!(e.to_string().contains("held whole"), "{e}");
    v["shares"][0]["gpu"] = serde_json::json!(0);
    v["shares"][0]["milli"] = serde_json::json!(1001);
    assert!(serde_json::from_value::<ClusterState>(v).is_err());
}

proptest! {
    /// Under any mix of shares, whole assignments and releases: no GPU is
    /// shared over one GPU or both shared and held whole, the free count
    /// and index match, and the full check passes.
    #[test]
    fn shares_and_whole_gpus_never_overlap(
        ops in proptest::collection::vec((0u64..8, 0u32..6, 0u32..1100, 0u8..3), 1..60),
    ) {
        let mut c = ClusterState::homogeneous(2, 3);
        for (job, gpu, milli, op) in ops {
            let (job, gpu) = (JobId(job), GpuId(gpu));
            match op {
                0 => { let _ = c.assign_share(job, gpu, milli, host(0.5, 1.0)); }
                1 => { let _ = c.assign(job, &[gpu]); }
                _ => c.release_job(job),
            }
            for g in c.gpus() {
                let shared: u32 = c.shares_on(g.id).iter().map(|s| s.milli).sum();
                prop_assert!(shared <= GPU_MILLI);
                prop_assert!(shared == 0 || g.job.is_none());
                prop_assert_eq!(c.free_milli(g.id), if g.job.is_some() { 0 } else { GPU_MILLI - shared });
            }
            let free = c.gpus().iter().filter(|g| c.free_milli(g.id) == GPU_MILLI).count() as u32;
            prop_assert_eq!(free, c.num_free());
            prop_assert!(c.check_invariants(&jobs_of(&c)).is_ok());
        }
    }
}
