//! The loop's extension points on the scripted backend: the protection
//! plugin a profile names decides, and its result is checked.

use super::*;
use crate::extension::{Protection, ProtectionInput, Unprotected};
use std::sync::Arc;

/// Rounds until job 1 is first preempted (its time), at most 10.
fn first_preemption(l: &mut RoundLoop) -> Option<f64> {
    let mut b = Fake::with(&[(1, 0.0, 1, 1000.0), (2, 10.0, 1, 1000.0)]);
    for _ in 0..10 {
        let r = l.run_round(&mut b).unwrap();
        if r.preempted.contains(&JobId(1)) {
            return Some(r.time_s);
        }
    }
    None
}

#[test]
fn the_profiles_protection_plugin_decides_which_preemptions_run() {
    let rules = StartupRules {
        min_run_s: 60.0,
        ..StartupRules::off()
    };
    // The default profile of these rules keeps job 1 for its 60 s.
    let mut l = RoundLoop::builder(displacing(), ClusterState::homogeneous(1, 1), 10.0)
        .startup(rules)
        .build();
    assert_eq!(l.profile().protection.name(), "startup-aware");
    let t = first_preemption(&mut l).unwrap();
    assert!(t >= 60.0, "preempted at {t} s, inside its 60 s");
    // The same rules with `none` at the protection point: displaced at once.
    let profile = Profile {
        protection: Arc::new(Unprotected),
        ..Profile::of_rules(rules)
    };
    let mut l = RoundLoop::builder(displacing(), ClusterState::homogeneous(1, 1), 10.0)
        .profile(profile)
        .build();
    assert_eq!(first_preemption(&mut l), Some(10.0));
    // A loop rebuilt from this one keeps its profile.
    let l = l.into_builder().build();
    assert_eq!(l.profile().protection.name(), "none");
    assert_eq!(l.startup(), rules);
}

/// Hands a preempted job's GPU to a job that does not exist.
struct Broken;

impl Protection for Broken {
    fn name(&self) -> &str {
        "broken"
    }

    fn protect(&self, _: &ProtectionInput<'_>, mut p: Placement) -> Placement {
        if let Some(a) = p.launch.first().cloned() {
            p.launch.push(Assignment {
                job: JobId(99),
                ..a
            });
        }
        p
    }
}

#[test]
fn a_protection_plugins_invalid_result_is_refused_naming_it() {
    let profile = Profile {
        protection: Arc::new(Broken),
        ..Profile::of_rules(StartupRules::off())
    };
    let mut b = Fake::with(&[(1, 0.0, 1, 100.0)]);
    let mut l = RoundLoop::builder(plain(), ClusterState::homogeneous(1, 2), 10.0)
        .profile(profile.clone())
        .build();
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert_eq!(
        e,
        "protection policy `broken` returned an invalid decision: launches job-99, which is not an admitted job"
    );
    assert!(b.launches.is_empty(), "nothing of it ran: {:?}", b.launches);
    // A loop that goes on drops the round's decision and says why.
    let mut b = Fake::with(&[(1, 0.0, 1, 100.0)]);
    let mut l = RoundLoop::builder(plain(), ClusterState::homogeneous(1, 2), 10.0)
        .profile(profile)
        .on_invalid(OnInvalidDecision::SkipRound)
        .build();
    let r = l.run_round(&mut b).unwrap();
    assert!(r.launched.is_empty());
    assert!(r.invalid.unwrap().contains("protection policy `broken`"));
    assert!(b.launches.is_empty());
}

/// Three nodes of one GPU, the last a hot spare; job 1 runs on node 0,
/// which fails in the second round. Returns the loop after that round.
fn failing_under(recovery: Arc<dyn crate::extension::Recovery>) -> (RoundLoop, Fake) {
    let mut cluster = ClusterState::homogeneous(3, 1);
    cluster.set_spares(1).unwrap();
    let profile = Profile {
        recovery,
        ..Profile::of_rules(StartupRules::off())
    };
    let mut l = RoundLoop::builder(plain(), cluster, 10.0)
        .profile(profile)
        .build();
    let mut b = Fake::with(&[(1, 0.0, 1, 1000.0)]);
    l.run_round(&mut b).unwrap();
    assert_eq!(l.jobs.get(JobId(1)).unwrap().allocation, vec![GpuId(0)]);
    b.events.push(ClusterEvent::NodeFailed(NodeId(0)));
    (l, b)
}

#[test]
fn the_recovery_plugin_decides_where_a_job_a_failure_stopped_resumes() {
    use crate::extension::{HotSpares, Requeue};
    // Hot spares: it resumes at once on the spare (node 2).
    let (mut l, mut b) = failing_under(Arc::new(HotSpares));
    l.run_round(&mut b).unwrap();
    assert_eq!(l.jobs.get(JobId(1)).unwrap().allocation, vec![GpuId(2)]);
    assert_eq!(l.cluster.health().spare_swaps, 1);
    // Requeue: it goes back to the queue, and the placement gives it the
    // free GPU of node 1; the spare stays in the pool.
    let (mut l, mut b) = failing_under(Arc::new(Requeue));
    l.run_round(&mut b).unwrap();
    assert_eq!(l.jobs.get(JobId(1)).unwrap().allocation, vec![GpuId(1)]);
    assert_eq!(l.cluster.health().spare_swaps, 0);
    assert!(l.cluster.health().pool.contains(&NodeId(2)));
}

/// Resumes every stopped job on GPU 0, whose node just failed.
struct OntoTheFailedNode;

impl crate::extension::Recovery for OntoTheFailedNode {
    fn name(&self) -> &str {
        "onto-the-failed-node"
    }

    fn recover(
        &self,
        _: &crate::extension::RecoveryInput<'_>,
        hit: &[(JobId, Vec<GpuId>)],
    ) -> Vec<crate::extension::Resume> {
        hit.iter()
            .map(|(job, _)| crate::extension::Resume {
                job: *job,
                spares: Vec::new(),
                gpus: vec![GpuId(0)],
            })
            .collect()
    }
}

#[test]
fn a_recovery_plugins_invalid_resume_is_refused_naming_it() {
    let (mut l, mut b) = failing_under(Arc::new(OntoTheFailedNode));
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(
        e.starts_with("recovery policy `onto-the-failed-node` returned an invalid decision: gives job-1 gpu-0"),
        "{e}"
    );
    // A loop that goes on leaves the job to the queue.
    let (l, b) = failing_under(Arc::new(OntoTheFailedNode));
    let mut l = l
        .into_builder()
        .on_invalid(OnInvalidDecision::SkipRound)
        .build();
    let mut b = b;
    let r = l.run_round(&mut b).unwrap();
    assert!(r.invalid.is_none());
    assert_eq!(l.jobs.get(JobId(1)).unwrap().allocation, vec![GpuId(1)]);
}

#[test]
fn a_move_that_waits_for_a_kept_job_holds_back_what_needed_the_movers_gpus() {
    // Two nodes of two GPUs. A (job 1) runs on GPU 0 since 0 s; C (job 2)
    // starts on GPU 2 at 190 s. At 200 s the placement stops C, moves A to
    // GPU 2 and gives GPU 0 to B (job 3): valid as decided. C is inside
    // its 100 s, so it stays; A's move waits for GPU 2, so A stays on GPU
    // 0; and B, which needed GPU 0, waits too (node 0's host CPUs would
    // cover both, so only the chain of GPUs holds it back). The launch
    // onto the mover's GPU used to fail the check, and every launch of the
    // round was dropped.
    struct Script;
    impl PlacementPolicy for Script {
        fn place(
            &mut self,
            _: &RoundInfo,
            _: &Schedule,
            jobs: &JobState,
            _: &ClusterState,
        ) -> Placement {
            let queued = |id: u64| jobs.get(JobId(id)).is_some_and(|j| !j.is_running());
            let running = |id: u64| jobs.get(JobId(id)).is_some_and(|j| j.is_running());
            let on = |job: u64, gpu: u32| Assignment::new(JobId(job), vec![GpuId(gpu)]);
            let mut p = Placement::default();
            if queued(1) {
                p.launch.push(on(1, 0));
            } else if queued(2) && jobs.get(JobId(3)).is_none() {
                p.launch.push(on(2, 2));
            } else if queued(3) && running(1) && running(2) {
                p.preempt.push(JobId(2));
                p.launch = vec![on(1, 2), on(3, 0)];
            }
            p
        }
    }
    let p = Policies {
        admission: Box::new(Admit { hold: false }),
        scheduling: Box::new(Fifo { fixed: None }),
        placement: Box::new(Script),
        names: PolicyNames::new("admit", "fifo", "script"),
    };
    let rules = StartupRules {
        min_run_s: 100.0,
        ..StartupRules::off()
    };
    let mut l = RoundLoop::builder(p, ClusterState::homogeneous(2, 2), 10.0)
        .startup(rules)
        .build();
    let mut b = Fake::with(&[
        (1, 0.0, 1, 10_000.0),
        (2, 190.0, 1, 10_000.0),
        (3, 200.0, 1, 10_000.0),
    ]);
    let gpus = |l: &RoundLoop, id: u64| l.jobs.get(JobId(id)).unwrap().allocation.clone();
    let mut moved_at = None;
    for _ in 0..40 {
        let r = l.run_round(&mut b).unwrap();
        if r.time_s >= 200.0 && r.time_s < 290.0 {
            assert!(r.preempted.is_empty() && r.launched.is_empty(), "{r:?}");
            assert_eq!(gpus(&l, 1), vec![GpuId(0)]);
            assert_eq!(gpus(&l, 2), vec![GpuId(2)]);
            assert!(gpus(&l, 3).is_empty());
        }
        if r.preempted.contains(&JobId(2)) {
            moved_at = Some(r.time_s);
            break;
        }
    }
    // Once C's 100 s are over, the whole decision runs.
    assert_eq!(moved_at, Some(290.0));
    assert_eq!(gpus(&l, 1), vec![GpuId(2)]);
    assert_eq!(gpus(&l, 3), vec![GpuId(0)]);
}
