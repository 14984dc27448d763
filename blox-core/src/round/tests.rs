//! The loop on its own: a scripted backend (a clock, submissions by round,
//! jobs that need so many seconds on their GPUs, node events) and small
//! policies written here, so each step is tested without the simulator.

use super::*;
use crate::cluster::{ClusterState, HostShare, NodeSpec};
use crate::ids::NodeId;
use crate::job::{JobSpec, JobStatus};
use crate::module::*;
use crate::wait::WaitReason;
use std::collections::BTreeMap;

/// The runner and the loop's builder.
mod runner;

/// The extension points a profile fills.
mod profile;

/// Forks of a running loop.
mod fork;

/// Jobs that share a GPU.
mod shares;

/// Jobs without GPUs.
mod without_gpus;

/// A backend that runs jobs for their `expected_duration_s` of wall time
/// on any GPUs, on a clock that moves a round at a time.
#[derive(Default)]
struct Fake {
    now: f64,
    /// Submissions by arrival, taken at the first round at or after it.
    arrivals: Vec<JobSpec>,
    /// Cluster events for the next round.
    events: Vec<ClusterEvent>,
    /// Running jobs: when their launch began.
    running: BTreeMap<JobId, f64>,
    /// Seconds of work left, by job (kept across preemptions).
    left: BTreeMap<JobId, f64>,
    launches: Vec<(JobId, Vec<GpuId>)>,
    preempted: Vec<JobId>,
}

impl Fake {
    fn with(jobs: &[(u64, f64, u32, f64)]) -> Self {
        let mut f = Fake::default();
        for &(id, arrival, gpus, duration) in jobs {
            f.arrivals
                .push(JobSpec::new(id, arrival, gpus).with_duration(duration));
        }
        f.arrivals
            .sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        f
    }
}

impl ClusterManager for Fake {
    fn cluster_events(&mut self, _: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError> {
        Ok(std::mem::take(&mut self.events))
    }
}

impl MetricCollector for Fake {
    fn collect_metrics(&mut self, _: &RoundInfo, jobs: &mut JobState) -> Result<(), BackendError> {
        let now = self.now;
        let mut done = Vec::new();
        for (&id, &since) in &self.running {
            let Some(job) = jobs.get_mut(id) else {
                continue;
            };
            if job.first_iteration_s.is_none() {
                job.reached_first_iteration(since, 0.0);
            }
            let left = self.left[&id] - (now - since);
            job.attained_service_gpu_s = (now - since) * job.allocation.len() as f64;
            if left <= 1e-9 {
                job.status = JobStatus::Finished;
                job.finish_s = Some(since + self.left[&id]);
                job.progress = 1.0;
                done.push(id);
            }
        }
        for id in done {
            self.running.remove(&id);
            self.left.remove(&id);
        }
        Ok(())
    }
}

impl JobSource for Fake {
    fn poll_submissions(&mut self, _: &RoundInfo) -> Result<Vec<JobSpec>, BackendError> {
        let n = self
            .arrivals
            .iter()
            .take_while(|s| s.arrival_s <= self.now)
            .count();
        let out: Vec<JobSpec> = self.arrivals.drain(..n).collect();
        for s in &out {
            self.left.insert(s.id, s.expected_duration_s.unwrap_or(0.0));
        }
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.arrivals.is_empty()
    }
}

impl PreemptionMechanism for Fake {
    fn preempt(&mut self, _: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        if let Some(since) = self.running.remove(&job.id()) {
            *self.left.get_mut(&job.id()).unwrap() -= self.now - since;
        }
        self.preempted.push(job.id());
        Ok(())
    }
}

impl LaunchMechanism for Fake {
    fn launch(
        &mut self,
        _: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        _: Option<u32>,
    ) -> Result<(), BackendError> {
        self.running.insert(job.id(), self.now);
        self.launches.push((job.id(), gpus.to_vec()));
        Ok(())
    }

    fn reconfigure(&mut self, _: &RoundInfo, _: &Job, _: u32) -> Result<(), BackendError> {
        Ok(())
    }
}

impl RoundClock for Fake {
    fn now_s(&self) -> f64 {
        self.now
    }

    fn wait_round(&mut self, round_s: f64, _: bool) -> Result<(), BackendError> {
        self.now += round_s;
        Ok(())
    }
}

/// Admits everyone, or (`hold`) no one.
struct Admit {
    hold: bool,
}

impl AdmissionPolicy for Admit {
    fn admit(
        &mut self,
        _: &RoundInfo,
        waiting: &[Job],
        _: &JobState,
        _: &ClusterState,
    ) -> AdmissionDecision {
        if self.hold {
            AdmissionDecision::default()
        } else {
            AdmissionDecision::accept_all(waiting)
        }
    }
}

/// Every runnable job in id order, or the schedule a test gives it.
struct Fifo {
    fixed: Option<Schedule>,
}

impl SchedulingPolicy for Fifo {
    fn schedule(&mut self, _: &RoundInfo, jobs: &JobState, _: &ClusterState) -> Schedule {
        match &self.fixed {
            Some(s) => s.clone(),
            None => Schedule::in_priority_order(jobs.runnable()),
        }
    }
}

/// Queued jobs in schedule order on the first free GPUs; running jobs keep
/// theirs. `extra` is added to every decision (a broken placement).
struct FirstFree {
    extra: Option<Assignment>,
}

impl PlacementPolicy for FirstFree {
    fn place(
        &mut self,
        _: &RoundInfo,
        s: &Schedule,
        jobs: &JobState,
        c: &ClusterState,
    ) -> Placement {
        let mut free: Vec<GpuId> = c.free_gpus().collect();
        let mut out = Placement {
            preempt: Vec::new(),
            launch: launch_in_order(s, jobs, &mut free),
        };
        out.launch.extend(self.extra.clone());
        out
    }
}

/// The schedule's jobs that are not running, in its order, each on the
/// first of `free` while enough are left.
fn launch_in_order(s: &Schedule, jobs: &JobState, free: &mut Vec<GpuId>) -> Vec<Assignment> {
    let mut out = Vec::new();
    for d in &s.entries {
        if jobs.get(d.job).is_some_and(|j| !j.is_running()) && free.len() >= d.gpus as usize {
            out.push(Assignment::new(
                d.job,
                free.drain(..d.gpus as usize).collect(),
            ));
        }
    }
    out
}

fn policies(admission: Admit, scheduling: Fifo, placement: FirstFree) -> Policies {
    Policies {
        admission: Box::new(admission),
        scheduling: Box::new(scheduling),
        placement: Box::new(placement),
        names: PolicyNames::new("admit", "fifo", "first-free"),
    }
}

fn plain() -> Policies {
    policies(
        Admit { hold: false },
        Fifo { fixed: None },
        FirstFree { extra: None },
    )
}

/// A loop over `nodes` nodes of `gpus` GPUs with 10 s rounds, no start-up
/// protection.
fn lp(p: Policies, nodes: u32, gpus: u32) -> RoundLoop {
    RoundLoop::builder(p, ClusterState::homogeneous(nodes, gpus), 10.0)
        .startup(StartupRules::off())
        .build()
}

/// Runs rounds until the loop is idle and the trace is done (at most `n`).
fn run(l: &mut RoundLoop, b: &mut Fake, n: usize) -> Vec<RoundReport> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(l.run_round(b).unwrap());
        if l.is_idle() && b.exhausted() {
            break;
        }
    }
    out
}

#[test]
fn jobs_run_to_their_end_and_give_their_gpus_back() {
    // Three 2-GPU jobs of 25 s on 4 GPUs: two at once, the third after.
    let mut b = Fake::with(&[(1, 0.0, 2, 25.0), (2, 0.0, 2, 25.0), (3, 0.0, 2, 25.0)]);
    let mut l = lp(plain(), 2, 2);
    let reports = run(&mut l, &mut b, 20);
    assert!(l.is_idle());
    assert_eq!(l.cluster.num_free(), 4);
    let ended: Vec<JobId> = reports.iter().flat_map(|r| r.ended.clone()).collect();
    assert_eq!(ended, [JobId(1), JobId(2), JobId(3)]);
    assert!(reports
        .iter()
        .all(|r| r.busy_gpus <= 4 && r.running_jobs <= 2));
    // Job 3 started in the round after the first two ended (30 s), on GPUs
    // they gave back.
    let third = &b.launches[2];
    assert_eq!(third.0, JobId(3));
    let finished = l.jobs.finished();
    let f3 = finished.iter().find(|j| j.id() == JobId(3)).unwrap();
    assert_eq!(f3.first_start_s, Some(30.0));
    assert_eq!(f3.finish_s, Some(55.0));
    assert!(finished.iter().all(|j| j.status == JobStatus::Finished));
}

#[test]
fn intake_rejects_impossible_requests_and_keeps_the_rest() {
    let mut b = Fake::with(&[(1, 0.0, 0, 5.0), (2, 0.0, 9, 5.0), (3, 0.0, 1, 5.0)]);
    let mut l = lp(plain(), 2, 2);
    let r = l.run_round(&mut b).unwrap();
    let rejected: BTreeMap<JobId, String> = l
        .jobs
        .finished()
        .iter()
        .map(|j| (j.id(), j.end_reason.clone().unwrap_or_default()))
        .collect();
    assert_eq!(rejected.len(), 2);
    assert!(rejected[&JobId(1)].contains("0 GPUs"), "{rejected:?}");
    assert!(
        rejected[&JobId(2)].contains("cluster has 4"),
        "{rejected:?}"
    );
    assert!(l
        .jobs
        .finished()
        .iter()
        .all(|j| j.status == JobStatus::Rejected));
    assert_eq!(r.launched, [JobId(3)]);
}

#[test]
fn admission_that_defers_keeps_jobs_waiting_with_a_reason() {
    let p = policies(
        Admit { hold: true },
        Fifo { fixed: None },
        FirstFree { extra: None },
    );
    let mut b = Fake::with(&[(1, 0.0, 1, 5.0)]);
    let mut l = lp(p, 1, 2);
    for _ in 0..3 {
        let r = l.run_round(&mut b).unwrap();
        assert!(r.launched.is_empty());
        assert_eq!(r.waiting_jobs, 1);
    }
    assert_eq!(l.waiting().len(), 1);
    assert!(l.jobs.is_empty());
    let job = &l.waiting()[0];
    assert_eq!(job.wait, Some(WaitReason::NotAdmitted));
    let why = l.explain_wait(job).unwrap_or_default();
    assert!(why.contains("admit"), "{why}");
}

/// Policies whose schedule names job 99, which does not exist.
fn scheduling_an_unknown_job() -> Policies {
    let mut fixed = Schedule::new();
    fixed.push(Demand::new(JobId(99), 1));
    policies(
        Admit { hold: false },
        Fifo { fixed: Some(fixed) },
        FirstFree { extra: None },
    )
}

#[test]
fn a_schedule_naming_an_unknown_job_is_refused_naming_the_policy() {
    let p = scheduling_an_unknown_job();
    let mut b = Fake::with(&[(1, 0.0, 1, 5.0)]);
    let mut l = lp(p, 1, 2);
    let e = l.run_round(&mut b).unwrap_err();
    let LoopError::InvalidDecision {
        kind,
        module,
        reason,
    } = &e
    else {
        panic!("{e}");
    };
    assert_eq!((*kind, module.as_str()), ("scheduling", "fifo"), "{e}");
    assert!(reason.contains("job-99"), "{reason}");
    assert!(b.launches.is_empty());
}

#[test]
fn a_placement_onto_a_busy_gpu_is_dropped_whole_when_the_loop_goes_on() {
    // Job 1 takes GPU 0; the placement then also puts job 2 on GPU 0.
    let p = policies(
        Admit { hold: false },
        Fifo { fixed: None },
        FirstFree {
            extra: Some(Assignment::new(JobId(2), vec![GpuId(0)])),
        },
    );
    let mut b = Fake::with(&[(1, 0.0, 1, 50.0), (2, 20.0, 1, 5.0)]);
    let mut l = lp(p, 1, 2);
    l.set_on_invalid(OnInvalidDecision::SkipRound);
    // Round 0: job 1 on GPU 0 (the extra launch of job 2, not submitted
    // yet, is refused with it: nothing runs).
    let r = l.run_round(&mut b).unwrap();
    let why = r.invalid.clone().unwrap_or_default();
    assert!(why.contains("first-free") && why.contains("job-2"), "{why}");
    assert!(r.launched.is_empty() && b.launches.is_empty());
    assert_eq!(l.cluster.num_free(), 2);
    // Under Fail, the same decision stops the round, naming the placement.
    l.set_on_invalid(OnInvalidDecision::Fail);
    let e = l.run_round(&mut b).unwrap_err();
    assert!(
        matches!(&e, LoopError::InvalidDecision { kind: "placement", module, .. } if module == "first-free"),
        "{e}"
    );
}

#[test]
fn a_failed_node_sends_its_jobs_back_to_the_queue_and_they_run_elsewhere() {
    // Two nodes of 2 GPUs; a 2-GPU job of 100 s starts on node 0.
    let mut b = Fake::with(&[(1, 0.0, 2, 100.0)]);
    let mut l = lp(plain(), 2, 2);
    l.run_round(&mut b).unwrap();
    assert_eq!(b.launches[0].1, [GpuId(0), GpuId(1)]);
    // Node 0 fails: the backend stops the job (its process is gone).
    b.running.remove(&JobId(1));
    b.events.push(ClusterEvent::NodeFailed(NodeId(0)));
    let r = l.run_round(&mut b).unwrap();
    let job = l.jobs.get(JobId(1)).unwrap();
    assert_eq!(job.interruptions, 1);
    assert_eq!(job.restarts, 1);
    // Requeued in step 1 and placed again in the same round, on node 1.
    assert_eq!(r.launched, [JobId(1)]);
    assert_eq!(b.launches[1].1, [GpuId(2), GpuId(3)]);
    assert!(l
        .cluster
        .gpus()
        .iter()
        .filter(|g| g.node == NodeId(0))
        .all(|g| !g.online && g.job.is_none()));
    // Repaired, the node's GPUs are free again.
    b.events.push(ClusterEvent::NodeRepaired(NodeId(0)));
    l.run_round(&mut b).unwrap();
    assert_eq!(l.cluster.num_free(), 2);
}

#[test]
fn a_queued_job_is_told_what_it_waits_for() {
    // 2 GPUs: job 1 holds both; job 2 waits for them.
    let mut b = Fake::with(&[(1, 0.0, 2, 100.0), (2, 0.0, 1, 5.0)]);
    let mut l = lp(plain(), 1, 2);
    l.run_round(&mut b).unwrap();
    let job = l.jobs.get(JobId(2)).unwrap();
    assert_eq!(job.wait, Some(WaitReason::WaitingForGpus { asked: 1 }));
    // In words: what it asks, what is free, its place in the order.
    let why = l.explain_wait(job).unwrap_or_default();
    assert_eq!(why, "waiting for 1 GPU (0 free); `fifo`: 2nd of 2");
    // Without wait reasons (a throwaway fork) none is set.
    let mut b = Fake::with(&[(1, 0.0, 2, 100.0), (2, 0.0, 1, 5.0)]);
    let mut l = RoundLoop::builder(plain(), ClusterState::homogeneous(1, 2), 10.0)
        .startup(StartupRules::off())
        .fork()
        .build();
    l.run_round(&mut b).unwrap();
    assert!(l.jobs.get(JobId(2)).unwrap().wait.is_none());
}

/// Lists only the newest job, and preempts every running job it does not
/// list: a policy that would displace a starting job at once.
fn displacing() -> Policies {
    struct Newest;
    impl SchedulingPolicy for Newest {
        fn schedule(&mut self, _: &RoundInfo, jobs: &JobState, _: &ClusterState) -> Schedule {
            Schedule::in_priority_order(jobs.runnable().last())
        }
    }
    struct Preempting;
    impl PlacementPolicy for Preempting {
        fn place(
            &mut self,
            _: &RoundInfo,
            s: &Schedule,
            jobs: &JobState,
            c: &ClusterState,
        ) -> Placement {
            let keep: Vec<JobId> = s.job_order();
            let preempt: Vec<JobId> = jobs
                .running()
                .map(|j| j.id())
                .filter(|id| !keep.contains(id))
                .collect();
            let mut free: Vec<GpuId> = c.free_gpus().collect();
            for id in &preempt {
                free.extend(jobs.get(*id).unwrap().allocation.iter().copied());
            }
            free.sort();
            let launch = launch_in_order(s, jobs, &mut free);
            Placement { preempt, launch }
        }
    }
    Policies {
        admission: Box::new(Admit { hold: false }),
        scheduling: Box::new(Newest),
        placement: Box::new(Preempting),
        names: PolicyNames::new("admit", "newest", "preempting"),
    }
}

#[test]
fn start_up_protection_keeps_a_starting_job_on_its_gpus() {
    // A schedule that lists only the newest job: the running one should
    // stop, but within its protected time it keeps its GPUs.
    let make = |min_run_s: f64| {
        RoundLoop::builder(displacing(), ClusterState::homogeneous(1, 1), 10.0)
            .startup(StartupRules {
                min_run_s,
                ..StartupRules::off()
            })
            .build()
    };
    // Without protection, job 2 (arriving at 10 s) displaces job 1 at once.
    let mut b = Fake::with(&[(1, 0.0, 1, 1000.0), (2, 10.0, 1, 1000.0)]);
    let mut l = make(0.0);
    l.run_round(&mut b).unwrap();
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(
        (r.preempted.as_slice(), r.launched.as_slice()),
        (&[JobId(1)][..], &[JobId(2)][..])
    );
    // With 60 s of protection job 1 keeps its GPU until it has run that long.
    let mut b = Fake::with(&[(1, 0.0, 1, 1000.0), (2, 10.0, 1, 1000.0)]);
    let mut l = make(60.0);
    let mut first_preempted = None;
    for _ in 0..10 {
        let r = l.run_round(&mut b).unwrap();
        if r.preempted.contains(&JobId(1)) {
            first_preempted = Some(r.time_s);
            break;
        }
    }
    let t = first_preempted.expect("job 1 is preempted once its protection ends");
    assert!(t >= 60.0, "preempted at {t} s, inside its 60 s");
}

#[test]
fn protection_defers_only_the_launches_whose_host_share_no_longer_fits() {
    // Two nodes of 2 GPUs and 4 CPUs. Job 1 runs on node 0 with all 4 CPUs.
    // When jobs 2 and 3 arrive the placement preempts job 1 and gives job 2
    // node 0's CPUs, job 3 node 1's: valid as decided. Job 1 is still in its
    // protected time, so it keeps its GPU and CPUs: job 2 no longer fits
    // and waits, job 3 runs. (Before, every launch of the round was
    // dropped, without a word.)
    struct Script;
    impl PlacementPolicy for Script {
        fn place(
            &mut self,
            _: &RoundInfo,
            _: &Schedule,
            jobs: &JobState,
            _: &ClusterState,
        ) -> Placement {
            let all = Some(HostShare {
                cpus_per_gpu: 4.0,
                mem_gb_per_gpu: 1.0,
            });
            let on = |job: u64, gpu: u32| Assignment {
                host: all,
                share: None,
                ..Assignment::new(JobId(job), vec![GpuId(gpu)])
            };
            let queued = |id: u64| jobs.get(JobId(id)).is_some_and(|j| !j.is_running());
            let mut p = Placement::default();
            if queued(2) && queued(3) {
                p.preempt.extend(jobs.running().map(Job::id));
                p.launch = vec![on(2, 1), on(3, 2)];
            } else if queued(1) && jobs.running().next().is_none() {
                p.launch = vec![on(1, 0)];
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
    let mut cluster = ClusterState::new();
    for _ in 0..2 {
        let mut spec = NodeSpec::with_gpus(2);
        spec.cpus = 4;
        spec.host_mem_gb = 8.0;
        cluster.add_node(spec);
    }
    let mut l = RoundLoop::builder(p, cluster, 10.0)
        .startup(StartupRules {
            min_run_s: 60.0,
            ..StartupRules::off()
        })
        .build();
    let mut b = Fake::with(&[
        (1, 0.0, 1, 1000.0),
        (2, 10.0, 1, 1000.0),
        (3, 10.0, 1, 1000.0),
    ]);
    let r = l.run_round(&mut b).unwrap();
    assert_eq!(r.launched, vec![JobId(1)]);
    let r = l.run_round(&mut b).unwrap();
    assert!(r.invalid.is_none(), "{:?}", r.invalid);
    assert!(r.preempted.is_empty(), "{:?}", r.preempted);
    assert_eq!(r.launched, vec![JobId(3)]);
    assert!(l.jobs.get(JobId(1)).unwrap().is_running());
    assert!(!l.jobs.get(JobId(2)).unwrap().is_running());
    assert_eq!(l.cluster.num_free(), 2);
}

#[test]
fn the_words_of_a_wait_for_gpus_name_the_free_gpus_by_type_and_the_place() {
    // Two types, one GPU each; jobs of 2, 1 and 2 GPUs: job 1 takes both,
    // jobs 2 and 3 wait behind it.
    let mut cluster = ClusterState::new();
    for t in ["a100", "v100"] {
        let mut spec = NodeSpec::with_gpus(1);
        spec.gpu_type = t.into();
        cluster.add_node(spec);
    }
    let mut b = Fake::with(&[(1, 0.0, 2, 100.0), (2, 0.0, 1, 100.0), (3, 0.0, 2, 100.0)]);
    let mut l = RoundLoop::builder(plain(), cluster, 10.0)
        .startup(StartupRules::off())
        .build();
    l.run_round(&mut b).unwrap();
    let words = l.wait_explainer();
    let j2 = l.jobs.get(JobId(2)).unwrap();
    assert_eq!(
        words.explain(j2).unwrap(),
        "waiting for 1 GPU (0 free: 0 a100, 0 v100); `fifo`: 2nd of 3"
    );
    let j3 = l.jobs.get(JobId(3)).unwrap();
    let mut out = String::from("stale words from the last round");
    assert!(words.explain_into(j3, &mut out));
    assert_eq!(
        out,
        "waiting for 2 GPUs (0 free: 0 a100, 0 v100); `fifo`: 3rd of 3"
    );
    // A running job does not wait: no words, and the buffer is emptied.
    assert!(!words.explain_into(l.jobs.get(JobId(1)).unwrap(), &mut out));
    assert!(out.is_empty());
}
