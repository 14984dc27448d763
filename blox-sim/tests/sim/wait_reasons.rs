//! Why a job waits, from the loop: each kind of reason in the situation that
//! produces it, in the modules' words, counted in `jobs.csv` and logged
//! when it changes.

use blox_core::*;
use blox_sim::{SimConfig, SimJob, Simulation};

use blox_policies as _;

fn job(id: u64, arrival: f64, gpus: u32, duration: f64) -> SimJob {
    SimJob::of_duration(
        JobSpec::new(id, arrival, gpus).with_duration(duration),
        duration,
    )
}

fn sim(p: Policies, cluster: ClusterState, jobs: Vec<SimJob>) -> Simulation {
    let run = RunConfig {
        round_s: Positive::of(60.0),
        ..RunConfig::default()
    };
    Simulation::new(p, cluster, run, SimConfig::default(), jobs).unwrap()
}

fn named(a: &str, s: &str, p: &str) -> Policies {
    registry::build_named(a, s, p).unwrap()
}

fn wait_of(s: &Simulation, id: u64) -> (Option<WaitReason>, String) {
    let lp = &s.round_loop;
    let j = lp
        .jobs
        .get(JobId(id))
        .or_else(|| lp.waiting().iter().find(|j| j.id() == JobId(id)))
        .expect("the job is known");
    (j.wait, lp.explain_wait(j).unwrap_or_default())
}

#[test]
fn a_job_behind_a_full_cluster_waits_for_gpus_in_the_policys_order() {
    let mut s = sim(
        named("accept-all", "fifo", "first-free"),
        ClusterState::homogeneous(1, 4),
        vec![job(0, 0.0, 4, 600.0), job(1, 0.0, 2, 60.0)],
    );
    let log = tempfile::NamedTempFile::new().unwrap();
    s.log_events(log.path()).unwrap();
    s.step().unwrap();
    let (w, text) = wait_of(&s, 1);
    assert_eq!(w, Some(WaitReason::WaitingForGpus { asked: 2 }));
    assert_eq!(s.round_loop.wait_position(JobId(1)), Some((2, 2)));
    assert_eq!(
        text,
        "waiting for 2 GPUs (0 free); `fifo`: 2nd of 2, arrived at 0 s"
    );
    assert_eq!(wait_of(&s, 0).0, None, "job 0 runs");
    let r = s.run_to_end().unwrap();
    let row = |id: u64| r.jobs.iter().find(|j| j.job_id == id).unwrap().clone();
    // Job 1 waited from round 0 until job 0 ended at 600 s, for GPUs only.
    assert_eq!(row(1).wait_s, [0.0, 600.0, 0.0, 0.0, 0.0]);
    assert_eq!(row(1).first_start_s, Some(600.0));
    assert_eq!(row(0).wait_s, [0.0; 5]);
    // One `waiting` event for job 1, not one per round.
    let events = std::fs::read_to_string(log.path()).unwrap();
    let waiting: Vec<&str> = events
        .lines()
        .filter(|l| l.contains("\"event\":\"waiting\""))
        .collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert!(
        waiting[0].contains("\"job\":1")
            && waiting[0].contains("waiting-for-gpus")
            && waiting[0].contains("`fifo`: 2nd of 2, arrived at 0 s"),
        "{}",
        waiting[0]
    );
}

#[test]
fn free_gpus_the_placement_will_not_use_block_by_placement() {
    // One GPU is free and job 2 asks for one, but the placement walks the
    // order without backfilling: job 1 (two GPUs) does not fit, so nothing
    // behind it is placed.
    let mut s = sim(
        named("accept-all", "fifo", "consolidated"),
        ClusterState::homogeneous(1, 4),
        vec![
            job(0, 0.0, 3, 6000.0),
            job(1, 0.0, 2, 60.0),
            job(2, 0.0, 1, 60.0),
        ],
    );
    s.step().unwrap();
    assert_eq!(s.round_loop.cluster.num_free(), 1);
    let (w, _) = wait_of(&s, 1);
    assert!(
        matches!(w, Some(WaitReason::WaitingForGpus { asked: 2, .. })),
        "{w:?}"
    );
    let (w, text) = wait_of(&s, 2);
    assert_eq!(w, Some(WaitReason::BlockedByPlacement { asked: 1 }));
    // The words name what it waits behind: job 1, ahead in the order.
    assert_eq!(
        text,
        "blocked behind job-1 (2nd of 3 in `fifo`'s order, 2 GPUs asked, 1 GPU free in all): `consolidated` did not place it, nor the 1 GPU asked after it"
    );
}

/// An admission policy that admits nobody, in its own words.
struct Quota;

impl AdmissionPolicy for Quota {
    fn admit(
        &mut self,
        _: &RoundInfo,
        _: &[Job],
        _: &JobState,
        _: &ClusterState,
    ) -> AdmissionDecision {
        AdmissionDecision::default()
    }

    fn why_waiting(&self, job: &Job, _: &JobState, _: &ClusterState) -> Option<String> {
        Some(format!(
            "quota of user ana: 8 of 8 GPUs in use ({})",
            job.spec.name
        ))
    }
}

#[test]
fn an_admission_policy_says_why_it_holds_a_job() {
    let mut p = named("accept-all", "fifo", "first-free");
    p.admission = Box::new(Quota);
    p.names.admission = "quota".into();
    let mut s = sim(
        p,
        ClusterState::homogeneous(1, 4),
        vec![job(0, 0.0, 1, 60.0)],
    );
    s.step().unwrap();
    let (w, text) = wait_of(&s, 0);
    assert_eq!(w, Some(WaitReason::NotAdmitted));
    assert_eq!(
        text,
        "not admitted by `quota`: quota of user ana: 8 of 8 GPUs in use (0)"
    );
    s.step().unwrap();
    let j = &s.round_loop.waiting()[0];
    assert_eq!(j.wait_s[0], 60.0, "a round under not-admitted");
}

#[test]
fn a_preempted_job_says_so_then_waits_in_las_order_by_attained_service() {
    let mut s = sim(
        named("accept-all", "las", "first-free"),
        ClusterState::homogeneous(1, 1),
        vec![job(0, 0.0, 1, 6000.0), job(1, 30.0, 1, 6000.0)],
    );
    s.step().unwrap();
    assert_eq!(wait_of(&s, 0).0, None);
    s.step().unwrap();
    let (w, text) = wait_of(&s, 0);
    assert_eq!(w, Some(WaitReason::Preempted), "{text}");
    assert_eq!(text, "preempted this round by `las` and `first-free`");
    s.step().unwrap();
    let (w, text) = wait_of(&s, 0);
    if w.is_some() {
        assert!(
            text.contains("`las`: ") && text.contains("attained 1.0 GPU-min"),
            "{text}"
        );
    }
}

/// A third-party policy that says nothing of its order.
struct Silent;

impl SchedulingPolicy for Silent {
    fn schedule(&mut self, _: &RoundInfo, jobs: &JobState, _: &ClusterState) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        order.sort_by_key(|j| j.id());
        Schedule::in_priority_order(order)
    }
}

#[test]
fn a_policy_that_gives_no_reason_still_gets_the_loops() {
    let mut p = named("accept-all", "fifo", "first-free");
    p.scheduling = Box::new(Silent);
    p.names.scheduling = "silent".into();
    let mut s = sim(
        p,
        ClusterState::homogeneous(1, 1),
        vec![job(0, 0.0, 1, 600.0), job(1, 0.0, 1, 600.0)],
    );
    s.step().unwrap();
    assert_eq!(
        wait_of(&s, 1).1,
        "waiting for 1 GPU (0 free); `silent`: 2nd of 2"
    );
}

#[test]
fn a_dropped_decision_holds_every_waiting_job() {
    struct Unknown;
    impl SchedulingPolicy for Unknown {
        fn schedule(&mut self, _: &RoundInfo, jobs: &JobState, _: &ClusterState) -> Schedule {
            let mut s = Schedule::in_priority_order(jobs.runnable());
            s.push(Demand::new(JobId(99), 1));
            s
        }
    }
    let mut p = named("accept-all", "fifo", "first-free");
    p.scheduling = Box::new(Unknown);
    let mut s = sim(
        p,
        ClusterState::homogeneous(1, 4),
        vec![job(0, 0.0, 1, 60.0)],
    );
    s.round_loop.set_on_invalid(OnInvalidDecision::SkipRound);
    s.step().unwrap();
    let (w, text) = wait_of(&s, 0);
    assert_eq!(
        w,
        Some(WaitReason::Held {
            cause: blox_core::wait::HoldCause::DecisionDropped
        })
    );
    assert!(
        text.starts_with("held: this round's decision was dropped (") && text.contains("99"),
        "{text}"
    );
}
