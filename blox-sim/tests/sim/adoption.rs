//! `ClusterEvent::JobAdopted`: a job a backend finds already running (a
//! restarted scheduler's workers kept their jobs) joins the loop as running on
//! its GPUs, without a launch; the policies then treat it like any running
//! job. An adoption that cannot hold (GPUs taken, a job the loop knows) is an
//! error of the backend, and changes nothing.

use blox_core::*;
use blox_policies as _;

/// A backend that reports the given cluster events in round 0 and 1,
/// submits `submit` in round 1, and records what the loop asks of it.
#[derive(Default)]
struct Scripted {
    events: Vec<Vec<ClusterEvent>>,
    submit: Vec<JobSpec>,
    launched: Vec<(JobId, Vec<GpuId>)>,
    preempted: Vec<JobId>,
    now: f64,
    round: usize,
}

impl ClusterManager for Scripted {
    fn cluster_events(&mut self, _: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError> {
        let ev = self.events.get(self.round).cloned().unwrap_or_default();
        Ok(ev)
    }
}

impl MetricCollector for Scripted {
    fn collect_metrics(&mut self, _: &RoundInfo, _: &mut JobState) -> Result<(), BackendError> {
        Ok(())
    }
}

impl JobSource for Scripted {
    fn poll_submissions(&mut self, _: &RoundInfo) -> Result<Vec<JobSpec>, BackendError> {
        Ok(if self.round == 1 {
            std::mem::take(&mut self.submit)
        } else {
            Vec::new()
        })
    }
    fn exhausted(&self) -> bool {
        false
    }
}

impl PreemptionMechanism for Scripted {
    fn preempt(&mut self, _: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        self.preempted.push(job.id());
        Ok(())
    }
}

impl LaunchMechanism for Scripted {
    fn launch(
        &mut self,
        _: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        _: Option<u32>,
    ) -> Result<(), BackendError> {
        self.launched.push((job.id(), gpus.to_vec()));
        Ok(())
    }
    fn reconfigure(&mut self, _: &RoundInfo, job: &Job, _: u32) -> Result<(), BackendError> {
        Err(BackendError(format!(
            "{} cannot be reconfigured here",
            job.id()
        )))
    }
}

impl RoundClock for Scripted {
    fn now_s(&self) -> f64 {
        self.now
    }
    fn wait_round(&mut self, round_s: f64, _: bool) -> Result<(), BackendError> {
        self.now += round_s;
        self.round += 1;
        Ok(())
    }
}

fn adopt(id: u64, gpus: &[u32]) -> ClusterEvent {
    ClusterEvent::JobAdopted {
        spec: JobSpec::new(id, -100.0, gpus.len() as u32).with_duration(1000.0),
        gpus: gpus.iter().map(|g| GpuId(*g)).collect(),
        batch_size: Some(64),
        past_startup: true,
        share: None,
    }
}

fn looped(scheduling: &str) -> RoundLoop {
    let p = registry::build_named("accept-all", scheduling, "first-free").unwrap();
    RoundLoop::new(p, ClusterState::new(), 10.0)
}

#[test]
fn an_adopted_job_runs_on_its_gpus_without_a_launch_and_holds_them() {
    let mut lp = looped("fifo");
    let mut b = Scripted {
        events: vec![vec![
            ClusterEvent::NodeAdded(NodeSpec::with_gpus(4)),
            adopt(7, &[1, 2]),
        ]],
        submit: vec![
            JobSpec::new(8, 5.0, 2).with_duration(50.0),
            JobSpec::new(9, 5.0, 2).with_duration(50.0),
        ],
        ..Default::default()
    };
    let r = lp.run_round(&mut b).unwrap();
    assert_eq!(r.busy_gpus, 2);
    assert!(r.launched.is_empty(), "{r:?}");
    let j = lp.jobs.get(JobId(7)).unwrap();
    assert_eq!(j.status, JobStatus::Running);
    assert_eq!(j.allocation, vec![GpuId(1), GpuId(2)]);
    assert_eq!(j.current_batch_size, Some(64));
    assert!(!j.is_starting(), "past its start-up");
    // FIFO keeps it (the oldest) and fills the two free GPUs with job 8; job
    // 9 waits. Nothing is launched on the adopted job's GPUs.
    let r = lp.run_round(&mut b).unwrap();
    assert_eq!(r.busy_gpus, 4);
    assert_eq!(b.launched.len(), 1, "{:?}", b.launched);
    let (id, gpus) = &b.launched[0];
    assert_eq!(*id, JobId(8));
    assert!(gpus.iter().all(|g| *g == GpuId(0) || *g == GpuId(3)));
    assert!(b.preempted.is_empty());
    assert_eq!(lp.jobs.get(JobId(9)).unwrap().status, JobStatus::Queued);
}

#[test]
fn a_policy_may_preempt_an_adopted_job_like_any_other() {
    // LAS: job 7 attained service, the newcomers did not; with 2 GPUs the
    // newcomer takes its place.
    let mut lp = looped("las");
    let mut b = Scripted {
        events: vec![vec![
            ClusterEvent::NodeAdded(NodeSpec::with_gpus(2)),
            adopt(7, &[0, 1]),
        ]],
        submit: vec![JobSpec::new(8, 5.0, 2).with_duration(50.0)],
        ..Default::default()
    };
    lp.run_round(&mut b).unwrap();
    // Service only accrues through metric collection; give job 7 some.
    lp.jobs.get_mut(JobId(7)).unwrap().attained_service_gpu_s = 500.0;
    lp.run_round(&mut b).unwrap();
    assert_eq!(b.preempted, vec![JobId(7)]);
    assert_eq!(b.launched[0].0, JobId(8));
}

#[test]
fn an_adoption_that_cannot_hold_is_an_error_of_the_backend() {
    // Onto a GPU another adopted job holds.
    let mut lp = looped("fifo");
    let mut b = Scripted {
        events: vec![vec![
            ClusterEvent::NodeAdded(NodeSpec::with_gpus(2)),
            adopt(7, &[0]),
            adopt(8, &[0, 1]),
        ]],
        ..Default::default()
    };
    let e = lp.run_round(&mut b).unwrap_err();
    assert!(
        error_chain(&e).contains("already held"),
        "{}",
        error_chain(&e)
    );
    assert!(lp.jobs.get(JobId(8)).is_none());
    // A job the loop already knows.
    let mut lp = looped("fifo");
    let mut b = Scripted {
        events: vec![vec![
            ClusterEvent::NodeAdded(NodeSpec::with_gpus(2)),
            adopt(7, &[0]),
            adopt(7, &[1]),
        ]],
        ..Default::default()
    };
    let e = lp.run_round(&mut b).unwrap_err();
    assert!(
        error_chain(&e).contains("cannot be adopted: the loop already knows it"),
        "{}",
        error_chain(&e)
    );
    assert_eq!(lp.cluster.free_gpus().count(), 1);
}

/// Not an adoption, but the same scripted cluster: a node that leaves under a
/// job as large as the whole cluster leaves that job waiting for it, and the
/// policy that still lists it at its own size made no invalid decision, and
/// the walk goes past it (first-free does not backfill, but no wait for other
/// jobs would place it); the smaller jobs run. Before, every round's decision
/// was refused until the node came back: one lost worker stopped a live
/// cluster.
#[test]
fn a_job_larger_than_the_cluster_after_a_node_left_waits_and_blocks_no_one() {
    let mut lp = looped("las");
    let mut b = Scripted {
        events: vec![
            vec![
                ClusterEvent::NodeAdded(NodeSpec::with_gpus(4)),
                ClusterEvent::NodeAdded(NodeSpec::with_gpus(4)),
            ],
            vec![],
            vec![ClusterEvent::NodeRemoved(NodeId(1))],
        ],
        submit: vec![
            JobSpec::new(1, 0.0, 8).with_duration(1000.0),
            JobSpec::new(2, 0.0, 1).with_duration(1000.0),
        ],
        ..Default::default()
    };
    lp.run_round(&mut b).unwrap();
    lp.run_round(&mut b).unwrap();
    assert_eq!(lp.jobs.get(JobId(1)).unwrap().status, JobStatus::Running);
    for _ in 0..3 {
        let r = lp.run_round(&mut b).expect("no invalid decision");
        assert_eq!(r.busy_gpus, 1, "{r:?}");
    }
    assert_eq!(lp.jobs.get(JobId(1)).unwrap().status, JobStatus::Queued);
    assert_eq!(lp.jobs.get(JobId(2)).unwrap().status, JobStatus::Running);
    assert!(b.launched.iter().any(|(id, _)| *id == JobId(2)));
}
