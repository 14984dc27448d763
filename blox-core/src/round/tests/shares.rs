//! Jobs that share a GPU through the loop: a placement's shares are
//! checked like whole GPUs (one GPU per share, never over a thousand
//! thousandths, never beside a whole holder), launched, and given back.

use super::*;

/// Puts every queued job on GPU `gpu`: a share of its `gpu_milli`, or
/// the whole GPU without one; `force` overrides the share asked.
struct OnOneGpu {
    gpu: u32,
    force: Option<u32>,
}

impl PlacementPolicy for OnOneGpu {
    fn place(
        &mut self,
        _: &RoundInfo,
        s: &Schedule,
        jobs: &JobState,
        _: &ClusterState,
    ) -> Placement {
        let mut p = Placement::default();
        for d in &s.entries {
            let Some(j) = jobs.get(d.job).filter(|j| !j.is_running()) else {
                continue;
            };
            p.launch.push(Assignment {
                share: self.force.or(j.spec.gpu_milli),
                ..Assignment::new(d.job, vec![GpuId(self.gpu)])
            });
        }
        p
    }
}

fn sharing(force: Option<u32>) -> Policies {
    Policies {
        admission: Box::new(Admit { hold: false }),
        scheduling: Box::new(Fifo { fixed: None }),
        placement: Box::new(OnOneGpu { gpu: 0, force }),
        names: PolicyNames::new("admit", "fifo", "one-gpu"),
    }
}

/// Jobs `(id, arrival, thousandths, duration)`, each asking part of one GPU.
fn shares(jobs: &[(u64, f64, u32, f64)]) -> Fake {
    let mut f = Fake::with(&jobs.iter().map(|j| (j.0, j.1, 1, j.3)).collect::<Vec<_>>());
    for s in &mut f.arrivals {
        s.gpu_milli = jobs.iter().find(|j| j.0 == s.id.0).map(|j| j.2);
    }
    f
}

#[test]
fn jobs_whose_shares_fit_run_together_on_one_gpu_and_give_it_back() {
    let mut b = shares(&[(1, 0.0, 460, 30.0), (2, 0.0, 300, 50.0)]);
    let mut l = lp(sharing(None), 1, 2);
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(r.launched, vec![JobId(1), JobId(2)]);
    assert_eq!(l.cluster.free_milli(GpuId(0)), 240);
    assert_eq!(l.cluster.num_free(), 1, "a shared GPU is not free");
    assert_eq!(l.jobs.get(JobId(2)).unwrap().allocation, vec![GpuId(0)]);
    assert_eq!(r.busy_gpus, 1);
    // The launch event says which share.
    for _ in 0..3 {
        l.run_round(&mut b).unwrap();
    }
    assert!(l.jobs.get(JobId(1)).is_none_or(|j| j.status.is_terminal()));
    assert_eq!(l.cluster.free_milli(GpuId(0)), 700);
    for _ in 0..3 {
        l.run_round(&mut b).unwrap();
    }
    assert_eq!(l.cluster.free_milli(GpuId(0)), 1000);
    assert_eq!(l.cluster.num_free(), 2);
    l.cluster.check_all(&l.jobs).unwrap();
}

#[test]
fn shares_over_one_gpu_or_beside_a_whole_holder_are_refused_naming_the_placement() {
    // 600 + 600 thousandths of GPU 0 in one decision.
    let mut b = shares(&[(1, 0.0, 600, 30.0), (2, 0.0, 600, 30.0)]);
    let mut l = lp(sharing(None), 1, 1);
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(e.contains("one-gpu") && e.contains("over one GPU"), "{e}");
    assert_eq!(l.cluster.free_milli(GpuId(0)), 1000, "nothing ran");
    // A whole-GPU job, then a share of the same GPU: refused.
    let mut b = Fake::with(&[(1, 0.0, 1, 30.0)]);
    let mut l = lp(sharing(None), 1, 1);
    l.run_round(&mut b).unwrap();
    b.arrivals.push({
        let mut s = JobSpec::new(2, 10.0, 1).with_duration(5.0);
        s.gpu_milli = Some(100);
        s
    });
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(e.contains("gives gpu-0 to both"), "{e}");
    // A share, then a whole-GPU job onto it.
    let mut b = shares(&[(1, 0.0, 100, 30.0)]);
    let mut l = lp(sharing(None), 1, 1);
    l.run_round(&mut b).unwrap();
    b.arrivals.push(JobSpec::new(2, 10.0, 1).with_duration(5.0));
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(e.contains("whole, but job-1 holds a share"), "{e}");
    // A share on a node whose GPUs go whole only (a worker that does not
    // share GPUs).
    let mut b = shares(&[(1, 0.0, 100, 30.0)]);
    let mut spec = NodeSpec::with_gpus(1);
    spec.whole_gpus_only = true;
    let mut cluster = ClusterState::new();
    cluster.add_node(spec);
    let mut l = RoundLoop::builder(sharing(None), cluster, 10.0)
        .startup(StartupRules::off())
        .build();
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(
        e.contains("one-gpu") && e.contains("gives its GPUs whole only"),
        "{e}"
    );
    assert!(l.cluster.largest_free_share().is_empty());
    // Thousandths out of range.
    for bad in [0, 1001] {
        let mut b = shares(&[(1, 0.0, 100, 30.0)]);
        let mut l = lp(sharing(Some(bad)), 1, 1);
        let e = l.run_round(&mut b).unwrap_err().to_string();
        assert!(
            e.contains("a share is 1–1000 thousandths of one GPU"),
            "{e}"
        );
    }
}

#[test]
fn a_share_of_two_gpus_is_refused() {
    struct Two;
    impl PlacementPolicy for Two {
        fn place(
            &mut self,
            _: &RoundInfo,
            _: &Schedule,
            jobs: &JobState,
            _: &ClusterState,
        ) -> Placement {
            let mut p = Placement::default();
            if jobs.get(JobId(1)).is_some_and(|j| !j.is_running()) {
                p.launch.push(Assignment {
                    share: Some(500),
                    ..Assignment::new(JobId(1), vec![GpuId(0), GpuId(1)])
                });
            }
            p
        }
    }
    let p = Policies {
        admission: Box::new(Admit { hold: false }),
        scheduling: Box::new(Fifo { fixed: None }),
        placement: Box::new(Two),
        names: PolicyNames::new("admit", "fifo", "two"),
    };
    let mut b = Fake::with(&[(1, 0.0, 2, 30.0)]);
    let e = lp(p, 1, 2).run_round(&mut b).unwrap_err().to_string();
    assert!(e.contains("of 2 GPUs"), "{e}");
}

#[test]
fn a_share_that_waits_says_how_much_it_asks_and_the_largest_free_share() {
    // 700 thousandths taken; a job asking 460 waits.
    let mut b = shares(&[(1, 0.0, 700, 1000.0), (2, 10.0, 460, 10.0)]);
    struct Fits;
    impl PlacementPolicy for Fits {
        fn place(
            &mut self,
            _: &RoundInfo,
            s: &Schedule,
            jobs: &JobState,
            c: &ClusterState,
        ) -> Placement {
            let mut p = Placement::default();
            for d in &s.entries {
                let Some(j) = jobs.get(d.job).filter(|j| !j.is_running()) else {
                    continue;
                };
                let m = j.spec.gpu_milli.unwrap_or(1000);
                if c.free_milli(GpuId(0)) >= m {
                    p.launch.push(Assignment {
                        share: Some(m),
                        ..Assignment::new(d.job, vec![GpuId(0)])
                    });
                }
            }
            p
        }
    }
    let p = Policies {
        admission: Box::new(Admit { hold: false }),
        scheduling: Box::new(Fifo { fixed: None }),
        placement: Box::new(Fits),
        names: PolicyNames::new("admit", "fifo", "fits"),
    };
    let mut l = lp(p, 1, 1);
    l.run_round(&mut b).unwrap();
    l.run_round(&mut b).unwrap();
    let j2 = l.jobs.get(JobId(2)).unwrap();
    assert_eq!(j2.wait, Some(WaitReason::WaitingForGpus { asked: 1 }));
    assert_eq!(
        l.explain_wait(j2).unwrap(),
        "waiting for 0.46 of a GPU: the largest free share is 0.3; `fifo`: 2nd of 2"
    );
}

#[test]
fn a_whole_gpu_walk_never_hands_out_a_gpu_whose_sharers_stay() {
    // Jobs 1 and 2 share GPU 0 (300 each); job 3 wants two whole GPUs and
    // ranks first. Preempting job 1, the lowest, frees nothing whole: job
    // 2 stays on GPU 0. (Counting GPU 0 free, the walk gave it to job 3
    // beside job 2, a decision the loop refuses.)
    let mut c = ClusterState::homogeneous(1, 2);
    let mut jobs = JobState::new();
    for id in [1, 2] {
        let mut j = Job::new(JobSpec::new(id, 0.0, 1));
        c.assign_share(JobId(id), GpuId(0), 300, c.share_host(GpuId(0), 300))
            .unwrap();
        j.status = JobStatus::Running;
        j.allocation = vec![GpuId(0)];
        j.gpu_share = Some(300);
        jobs.insert(j);
    }
    let mut j3 = Job::new(JobSpec::new(3, 0.0, 2));
    j3.status = JobStatus::Queued;
    jobs.insert(j3);
    let mut s = Schedule::new();
    s.push(Demand::new(JobId(3), 2));
    s.push(Demand::new(JobId(2), 1));
    s.push(Demand::new(JobId(1), 1));
    let p = crate::walk::priority_walk(&Default::default(), &s, &jobs, &c, |free, _, n| {
        Some(free.iter().take(n as usize).collect())
    });
    // Two whole GPUs cannot be found: job 3 is not placed on GPU 0.
    assert!(
        p.launch.iter().all(|a| !a.gpus.contains(&GpuId(0))),
        "{p:?}"
    );
    let check = crate::round::PlacementCheck {
        jobs: &jobs,
        cluster: &c,
    };
    check.check(&p).unwrap();
    // With one GPU asked, job 3 gets GPU 1.
    let mut s = Schedule::new();
    s.push(Demand::new(JobId(3), 1));
    s.push(Demand::new(JobId(2), 1));
    s.push(Demand::new(JobId(1), 1));
    let p = crate::walk::priority_walk(&Default::default(), &s, &jobs, &c, |free, _, n| {
        Some(free.iter().take(n as usize).collect())
    });
    assert_eq!(
        p.launch.iter().find(|a| a.job == JobId(3)).unwrap().gpus,
        [GpuId(1)]
    );
    check.check(&p).unwrap();
}

#[test]
fn a_submission_asking_an_impossible_share_is_rejected_with_the_reason() {
    let mut b = shares(&[(1, 0.0, 0, 30.0), (2, 0.0, 1000, 30.0)]);
    b.arrivals.push({
        let mut s = JobSpec::new(3, 0.0, 2).with_duration(5.0);
        s.gpu_milli = Some(500);
        s
    });
    let mut l = lp(sharing(None), 1, 2);
    l.run_round(&mut b).unwrap();
    for id in [1, 2, 3] {
        let j = l
            .jobs
            .get(JobId(id))
            .or_else(|| l.jobs.finished_job(JobId(id)));
        let j = j.unwrap_or_else(|| panic!("job-{id} is known"));
        assert_eq!(j.status, JobStatus::Rejected, "job-{id}");
        assert!(j
            .end_reason
            .as_deref()
            .unwrap()
            .contains("a share is 1-999 thousandths"));
    }
}
