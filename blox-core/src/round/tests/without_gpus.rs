//! Jobs that ask for no GPU through the loop: admitted only under a
//! placement that places them, launched on a node's CPUs and memory
//! (checked against what the node has left, beside jobs with GPUs), given
//! back when they end or their node goes.

use super::*;

/// Puts every queued job without GPUs on node `node` (the first online
/// node if that one is offline), and every other on the first free GPUs.
/// `gpus` names GPUs for a job without any (a broken placement).
struct OnNode {
    node: u32,
    gpus: Vec<GpuId>,
}

impl PlacementPolicy for OnNode {
    fn place(
        &mut self,
        _: &RoundInfo,
        s: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let mut p = Placement::default();
        let mut free: Vec<GpuId> = cluster.free_gpus().collect();
        free.reverse();
        for d in &s.entries {
            let Some(j) = jobs.get(d.job).filter(|j| !j.is_running()) else {
                continue;
            };
            if j.without_gpus() {
                let mut node = NodeId(self.node);
                if cluster.node(node).is_some_and(|n| !n.online) {
                    node = cluster
                        .nodes()
                        .iter()
                        .find(|n| n.online)
                        .map_or(node, |n| n.id);
                }
                let mut a = Assignment::on_node(d.job, node);
                a.gpus.clone_from(&self.gpus);
                p.launch.push(a);
            } else if free.len() >= d.gpus as usize {
                let gpus = (0..d.gpus).filter_map(|_| free.pop()).collect();
                p.launch.push(Assignment::new(d.job, gpus));
            }
        }
        p
    }

    fn places_jobs_without_gpus(&self) -> bool {
        true
    }
}

fn on_node(node: u32) -> Policies {
    Policies {
        admission: Box::new(Admit { hold: false }),
        scheduling: Box::new(Fifo { fixed: None }),
        placement: Box::new(OnNode {
            node,
            gpus: Vec::new(),
        }),
        names: PolicyNames::new("admit", "fifo", "on-node"),
    }
}

/// A job without GPUs asking `cpus` CPUs and `mem` GiB, for `run_s`.
fn host_job(id: u64, arrival: f64, cpus: f64, mem: f64, run_s: f64) -> JobSpec {
    let mut s = JobSpec::new(id, arrival, 0).with_duration(run_s);
    s.host_need = Some(HostShare {
        cpus_per_gpu: cpus,
        mem_gb_per_gpu: mem,
    });
    s
}

/// Two nodes of 2 GPUs, 8 CPUs and 64 GiB each.
fn small() -> ClusterState {
    let mut c = ClusterState::new();
    for _ in 0..2 {
        let mut n = NodeSpec::with_gpus(2);
        n.cpus = 8;
        n.host_mem_gb = 64.0;
        c.add_node(n);
    }
    c
}

fn lp_on(p: Policies) -> RoundLoop {
    RoundLoop::builder(p, small(), 10.0)
        .startup(StartupRules::off())
        .build()
}

#[test]
fn a_job_without_gpus_runs_on_its_nodes_cpus_and_gives_them_back() {
    let mut b = Fake::default();
    b.arrivals.push(host_job(1, 0.0, 3.0, 10.0, 25.0));
    let mut l = lp_on(on_node(1));
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(r.launched, vec![JobId(1)]);
    assert_eq!(b.launches, vec![(JobId(1), vec![])], "launched on no GPU");
    let j = l.jobs.get(JobId(1)).unwrap();
    assert!(j.is_running() && j.allocation.is_empty());
    assert_eq!(j.host_node, Some(NodeId(1)));
    assert_eq!(l.cluster.host_used(NodeId(1)), (3.0, 10.0));
    assert_eq!(l.cluster.host_free(NodeId(1)), (5.0, 54.0));
    assert_eq!(l.cluster.num_free(), 4, "no GPU taken");
    assert_eq!(r.running_jobs, 1);
    l.cluster.check_all(&l.jobs).unwrap();
    run(&mut l, &mut b, 10);
    assert!(l.jobs.get(JobId(1)).is_none_or(|j| j.status.is_terminal()));
    assert_eq!(l.cluster.host_used(NodeId(1)), (0.0, 0.0));
    assert!(l.cluster.host_holds().is_empty());
    l.cluster.check_all(&l.jobs).unwrap();
}

#[test]
fn jobs_without_gpus_are_rejected_where_they_cannot_run_and_the_rest_go_on() {
    // Under a placement that places only jobs with GPUs.
    let mut b = Fake::with(&[(2, 0.0, 1, 10.0)]);
    b.arrivals.insert(0, host_job(1, 0.0, 1.0, 1.0, 10.0));
    let mut l = lp(plain(), 1, 2);
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(r.launched, vec![JobId(2)], "the job with a GPU runs");
    let rejected = l.jobs.finished();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].status, JobStatus::Rejected);
    let why = rejected[0].end_reason.clone().unwrap();
    assert!(
        why.contains("asks for 0 GPUs") && why.contains("places only jobs with GPUs"),
        "{why}"
    );
    // Naming no CPUs or memory: nothing to run on.
    let mut b = Fake::with(&[(1, 0.0, 0, 10.0)]);
    let mut l = lp_on(on_node(0));
    l.run_round(&mut b).unwrap();
    let why = l.jobs.finished()[0].end_reason.clone();
    assert!(why.unwrap().contains("names no CPUs or memory"));
}

#[test]
fn cpus_left_on_a_node_bound_jobs_without_gpus_and_jobs_with_them() {
    // 5 + 4 CPUs on an 8-CPU node in one decision: refused, naming it.
    let mut b = Fake::default();
    b.arrivals.push(host_job(1, 0.0, 5.0, 1.0, 30.0));
    b.arrivals.push(host_job(2, 0.0, 4.0, 1.0, 30.0));
    let mut l = lp_on(on_node(0));
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(
        e.contains("on-node") && e.contains("gives out 9.00 CPUs") && e.contains("node-0"),
        "{e}"
    );
    assert!(l.cluster.host_holds().is_empty(), "nothing ran");
    // A job without GPUs holding 5 CPUs leaves a whole-node GPU job (its
    // proportional share: 8 CPUs) no room there.
    let mut b = Fake::default();
    b.arrivals.push(host_job(1, 0.0, 5.0, 1.0, 30.0));
    let mut l = lp_on(on_node(1));
    l.run_round(&mut b).unwrap();
    b.now = 10.0;
    b.arrivals
        .push(JobSpec::new(2, 10.0, 4).with_duration(10.0));
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(
        e.contains("on-node") && e.contains("gives out 13.00 CPUs") && e.contains("node-1"),
        "refused as the placement's decision, before anything ran: {e}"
    );
    assert!(!l.jobs.get(JobId(2)).unwrap().is_running());
}

#[test]
fn a_broken_placement_of_a_job_without_gpus_is_refused_naming_the_policy() {
    let cases: Vec<(OnNode, &str)> = vec![
        (
            OnNode {
                node: 0,
                gpus: vec![GpuId(0)],
            },
            "which asks for no GPU, on 1 GPU(s)",
        ),
        (
            OnNode {
                node: 7,
                gpus: Vec::new(),
            },
            "on node-7, which does not exist",
        ),
    ];
    for (placement, words) in cases {
        let p = Policies {
            placement: Box::new(placement),
            ..on_node(0)
        };
        let mut b = Fake::default();
        b.arrivals.push(host_job(1, 0.0, 1.0, 1.0, 30.0));
        let mut l = lp_on(p);
        let e = l.run_round(&mut b).unwrap_err().to_string();
        assert!(e.contains("on-node") && e.contains(words), "{e}");
    }
    // A job with GPUs named on a node (no GPUs given).
    struct NodeForAll;
    impl PlacementPolicy for NodeForAll {
        fn place(
            &mut self,
            _: &RoundInfo,
            s: &Schedule,
            _: &JobState,
            _: &ClusterState,
        ) -> Placement {
            Placement {
                preempt: Vec::new(),
                launch: s
                    .entries
                    .iter()
                    .map(|d| Assignment::on_node(d.job, NodeId(0)))
                    .collect(),
            }
        }
    }
    let p = Policies {
        placement: Box::new(NodeForAll),
        ..on_node(0)
    };
    let mut b = Fake::with(&[(1, 0.0, 1, 10.0)]);
    let mut l = lp_on(p);
    let e = l.run_round(&mut b).unwrap_err().to_string();
    assert!(e.contains("but it asks for GPUs"), "{e}");
}

#[test]
fn a_job_without_gpus_goes_back_to_the_queue_when_its_node_fails() {
    let mut b = Fake::default();
    b.arrivals.push(host_job(1, 0.0, 2.0, 4.0, 100.0));
    let mut l = lp_on(on_node(1));
    l.run_round(&mut b).unwrap();
    assert_eq!(l.cluster.hosted_on(NodeId(1)), &[JobId(1)]);
    b.now = 10.0;
    b.events.push(ClusterEvent::NodeFailed(NodeId(1)));
    let r = l.run_round(&mut b).unwrap();
    // Requeued as its node failed, and placed again on the other node.
    assert_eq!(r.launched, vec![JobId(1)]);
    let j = l.jobs.get(JobId(1)).unwrap();
    assert!(j.is_running());
    assert_eq!(j.host_node, Some(NodeId(0)));
    assert_eq!(j.interruptions, 1);
    assert!(l.cluster.hosted_on(NodeId(1)).is_empty());
    assert_eq!(l.cluster.host_used(NodeId(1)), (0.0, 0.0));
    assert_eq!(l.cluster.host_used(NodeId(0)), (2.0, 4.0));
    l.cluster.check_all(&l.jobs).unwrap();
}

#[test]
fn a_waiting_job_without_gpus_is_told_what_it_waits_for() {
    let mut b = Fake::default();
    b.arrivals.push(host_job(1, 0.0, 6.0, 1.0, 100.0));
    b.arrivals.push(host_job(2, 0.0, 6.0, 1.0, 100.0));
    b.arrivals.push(host_job(3, 0.0, 9.0, 1.0, 100.0));
    // Jobs 1 and 2 on node 0 (6 + 6 > 8): place them one a round.
    struct OneARound(OnNode);
    impl PlacementPolicy for OneARound {
        fn place(
            &mut self,
            r: &RoundInfo,
            s: &Schedule,
            j: &JobState,
            c: &ClusterState,
        ) -> Placement {
            let mut p = self.0.place(r, s, j, c);
            p.launch.truncate(1);
            p
        }
        fn places_jobs_without_gpus(&self) -> bool {
            true
        }
    }
    let p = Policies {
        placement: Box::new(OneARound(OnNode {
            node: 0,
            gpus: Vec::new(),
        })),
        ..on_node(0)
    };
    let mut l = lp_on(p);
    l.run_round(&mut b).unwrap();
    assert!(l.jobs.get(JobId(1)).unwrap().is_running());
    // Job 2 fits node 1 (8 CPUs free): the placement did not place it.
    let w = l.explain_wait(l.jobs.get(JobId(2)).unwrap()).unwrap();
    assert!(
        w.starts_with("waiting for 6.00 CPUs and 1.0 GiB of one node, without GPUs: the most CPUs free on a node are 8.00")
            && w.contains("`on-node` did not place it")
            && w.contains("`fifo`: 2nd of 2"),
        "{w}"
    );
    // Job 3 asks for more CPUs than any node has (9 > 8): rejected at
    // submission, as a job asking for more GPUs than the cluster has.
    assert!(l.jobs.has_ended(JobId(3)) && l.jobs.get(JobId(3)).is_none());
}

#[test]
fn a_job_without_gpus_that_its_backend_sends_back_gives_its_cpus_back_and_runs_again() {
    // A backend requeues a crashed launch by setting it queued (as the
    // local backend does): the loop finds it holding CPUs, takes them
    // back, and the placement launches it again.
    let mut b = Fake::default();
    b.arrivals.push(host_job(1, 0.0, 3.0, 10.0, 100.0));
    let mut l = lp_on(on_node(1));
    l.run_round(&mut b).unwrap();
    l.jobs.get_mut(JobId(1)).unwrap().status = JobStatus::Queued;
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(r.launched, vec![JobId(1)]);
    assert_eq!(b.launches.len(), 2);
    assert_eq!(l.cluster.host_used(NodeId(1)), (3.0, 10.0), "held once");
    l.cluster.check_all(&l.jobs).unwrap();
}
