//! Jobs without GPUs: the ledger of the node CPUs and memory they hold,
//! its rules, a snapshot of it, and the invariant check over it.

use super::*;
use crate::job::{Job, JobSpec, JobStatus};
use crate::job_state::JobState;
use proptest::prelude::*;

/// Running jobs as the cluster has them: with their GPUs, or on their node.
fn jobs_of(c: &ClusterState) -> JobState {
    let mut s = JobState::new();
    for (j, gpus) in c.holders() {
        let mut job = Job::new(JobSpec::new(j.0, 0.0, gpus.len() as u32));
        job.status = JobStatus::Running;
        job.allocation = gpus;
        s.insert(job);
    }
    for h in c.host_holds() {
        let mut job = Job::new(JobSpec::new(h.job.0, 0.0, 0));
        job.status = JobStatus::Running;
        job.host_node = Some(h.node);
        s.insert(job);
    }
    s
}

fn cluster() -> ClusterState {
    let mut c = ClusterState::new();
    for _ in 0..2 {
        let mut n = NodeSpec::with_gpus(2);
        n.cpus = 8;
        n.host_mem_gb = 32.0;
        c.add_node(n);
    }
    c
}

#[test]
fn a_job_without_gpus_holds_cpus_of_its_node_and_no_gpu() {
    let mut c = cluster();
    c.assign_host(JobId(1), NodeId(1), 3.0, 10.0).unwrap();
    c.assign_host(JobId(2), NodeId(1), 1.5, 2.0).unwrap();
    assert_eq!(c.host_used(NodeId(1)), (4.5, 12.0));
    assert_eq!(c.host_free(NodeId(1)), (3.5, 20.0));
    assert_eq!(c.host_used(NodeId(0)), (0.0, 0.0));
    assert_eq!(c.hosted_on(NodeId(1)), &[JobId(1), JobId(2)]);
    assert!(c.allocation_of(JobId(1)).is_empty());
    assert_eq!(c.num_free(), 4, "no GPU taken");
    c.check_invariants(&jobs_of(&c)).unwrap();
    // A job with GPUs on that node adds its share.
    c.assign(JobId(3), &[GpuId(2)]).unwrap();
    assert_eq!(c.host_used(NodeId(1)), (8.5, 28.0));
    // Refused: a job that holds something already, an offline or absent
    // node, a negative need; nothing changes.
    let before = c.host_holds();
    assert!(c.assign_host(JobId(1), NodeId(0), 1.0, 1.0).is_err());
    assert!(c.assign_host(JobId(3), NodeId(0), 1.0, 1.0).is_err());
    assert!(c.assign_host(JobId(4), NodeId(9), 1.0, 1.0).is_err());
    assert!(c.assign_host(JobId(4), NodeId(0), -1.0, 1.0).is_err());
    assert!(c.assign_host(JobId(4), NodeId(0), f64::NAN, 1.0).is_err());
    assert_eq!(c.host_holds(), before);
    // Released: its CPUs come back; the rest stay.
    c.release_job(JobId(1));
    assert_eq!(c.host_used(NodeId(1)), (5.5, 18.0));
    assert_eq!(c.hosted_on(NodeId(1)), &[JobId(2)]);
    c.check_invariants(&jobs_of(&c)).unwrap();
}

#[test]
fn a_node_that_goes_takes_its_jobs_without_gpus_with_it() {
    let mut c = cluster();
    c.assign_host(JobId(1), NodeId(0), 1.0, 1.0).unwrap();
    c.assign(JobId(2), &[GpuId(0)]).unwrap();
    c.assign_host(JobId(3), NodeId(1), 1.0, 1.0).unwrap();
    let mut hit = c.remove_node(NodeId(0)).unwrap();
    hit.sort_unstable();
    assert_eq!(hit, vec![JobId(1), JobId(2)]);
    assert!(c.host_hold_of(JobId(1)).is_none());
    assert_eq!(c.host_hold_of(JobId(3)).map(|h| h.node), Some(NodeId(1)));
    // Taking CPUs of the offline node is refused.
    assert!(c.assign_host(JobId(4), NodeId(0), 1.0, 1.0).is_err());
    c.check_invariants(&jobs_of(&c)).unwrap();
}

#[test]
fn the_invariant_check_finds_a_job_whose_copy_disagrees_and_a_node_over_its_cpus() {
    let mut c = cluster();
    c.assign_host(JobId(1), NodeId(0), 2.0, 1.0).unwrap();
    // The job says it runs on node 1.
    let mut jobs = jobs_of(&c);
    jobs.get_mut(JobId(1)).unwrap().host_node = Some(NodeId(1));
    let e = c.check_invariants(&jobs).unwrap_err().to_string();
    assert!(e.contains("job-1") && e.contains("node-0"), "{e}");
    // Not running at all.
    let e = c
        .check_invariants(&JobState::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a running job without GPUs"), "{e}");
    // A node given more than it has (the loop's check refuses such a
    // placement; the ledger itself does not).
    c.assign_host(JobId(2), NodeId(0), 7.0, 1.0).unwrap();
    let e = c.check_invariants(&jobs_of(&c)).unwrap_err().to_string();
    assert!(e.contains("gives out 9 CPUs"), "{e}");
    let e = c.check_changes(&jobs_of(&c)).unwrap_err().to_string();
    assert!(e.contains("gives out 9 CPUs"), "{e}");
}

#[test]
fn a_snapshot_keeps_the_jobs_without_gpus_and_refuses_a_broken_list() {
    let mut c = cluster();
    c.assign_host(JobId(1), NodeId(1), 2.5, 4.0).unwrap();
    c.assign(JobId(2), &[GpuId(0), GpuId(1)]).unwrap();
    let text = serde_json::to_string(&c).unwrap();
    let back: ClusterState = serde_json::from_str(&text).unwrap();
    assert_eq!(back.host_holds(), c.host_holds());
    assert_eq!(back.host_used(NodeId(1)), (2.5, 4.0));
    back.check_invariants(&jobs_of(&back)).unwrap();
    // Without jobs like that, the snapshot names none (as written before).
    let plain = serde_json::to_string(&cluster()).unwrap();
    assert!(!plain.contains("hosted"), "{plain}");
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["hosted"][0]["node"] = serde_json::json!(9);
    let e = serde_json::from_value::<ClusterState>(v.clone()).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    v["hosted"][0]["node"] = serde_json::json!(1);
    let mut negative = v.clone();
    negative["hosted"][0]["cpus"] = serde_json::json!(-100.0);
    let e = serde_json::from_value::<ClusterState>(negative).unwrap_err();
    assert!(e.to_string().contains("non-negative"), "{e}");
    let h = v["hosted"][0].clone();
    v["hosted"].as_array_mut().unwrap().push(h);
    let e = serde_json::from_value::<ClusterState>(v).unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
}

proptest! {
    /// Under any mix of jobs without GPUs, whole GPUs, shares and
    /// releases: each node's sums are the sums of its holders as they are
    /// now (whatever came and went), and the full check passes.
    #[test]
    fn a_nodes_sums_are_its_holders_sums(
        ops in proptest::collection::vec((0u64..8, 0u32..4, 0u32..30, 0u8..4), 1..60),
    ) {
        let mut c = cluster();
        for (job, at, tenths, op) in ops {
            let job = JobId(job);
            let x = f64::from(tenths) / 10.0;
            match op {
                0 => { let _ = c.assign_host(job, NodeId(at % 2), x, 2.0 * x); }
                1 => { let _ = c.assign(job, &[GpuId(at)]); }
                2 => {
                    let h = HostShare { cpus_per_gpu: 0.1, mem_gb_per_gpu: 0.2 };
                    let _ = c.assign_share(job, GpuId(at), 100 + 10 * tenths, h);
                }
                _ => c.release_job(job),
            }
            for n in [NodeId(0), NodeId(1)] {
                let (mut cpus, mut mem) = (0.0, 0.0);
                for &j in c.hosted_on(n) {
                    let h = c.host_hold_of(j).unwrap();
                    prop_assert_eq!(h.node, n);
                    cpus += h.cpus;
                    mem += h.mem_gb;
                }
                for g in &c.node(n).unwrap().gpus {
                    let g = c.gpu(*g).unwrap();
                    cpus += g.host_cpus;
                    mem += g.host_mem_gb;
                }
                let (uc, um) = c.host_used(n);
                prop_assert!((uc - cpus).abs() < 1e-9 && (um - mem).abs() < 1e-9);
            }
            // A job holds one kind of thing at most.
            for h in c.host_holds() {
                prop_assert!(c.allocation_of(h.job).is_empty());
            }
            let jobs = jobs_of(&c);
            // (The ledger does not refuse overcommit; skip such states.)
            let over = [NodeId(0), NodeId(1)].iter().any(|n| c.host_free(*n).0 < -1e-6 || c.host_free(*n).1 < -1e-6);
            if !over {
                prop_assert!(c.check_invariants(&jobs).is_ok(), "{:?}", c.check_invariants(&jobs));
                prop_assert!(c.check_changes(&jobs).is_ok());
            }
        }
    }
}
