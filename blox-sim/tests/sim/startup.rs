//! Start-up-aware preemption (the loop's rule, so the same in simulation and
//! on a cluster): jobs that take 10 s to start, on rounds of 2 s, under a
//! policy that would hand the GPU to another job every round. Without the
//! rule nobody ever reaches a first iteration (the livelock seen on a real
//! H100 with PyTorch jobs) and the loop says so; with it, every job finishes
//! after a few launches, and policies see only productive service.

use blox_core::*;
use blox_sim::{SimConfig, SimJob, Simulation, WorkModel};

use blox_policies as _;

const STARTUP_S: f64 = 10.0;
const WORK_S: f64 = 30.0;

fn job(id: u64, startup: Option<f64>) -> SimJob {
    SimJob {
        startup_s: startup,
        converge_at: None,
        spec: JobSpec::new(id, 0.0, 1).with_duration(WORK_S),
        work: WorkModel::Duration { duration_s: WORK_S },
    }
}

/// Gives the GPU to the job that has waited longest (not running first,
/// then the oldest launch): a rotation every round.
struct Rotate {
    min_run_s: Option<f64>,
}

impl SchedulingPolicy for Rotate {
    fn schedule(&mut self, _: &RoundInfo, jobs: &JobState, _: &ClusterState) -> Schedule {
        let mut order: Vec<&Job> = jobs.runnable().collect();
        order.sort_by(|a, b| {
            (a.is_running(), a.last_launch_s.unwrap_or(-1.0), a.id())
                .partial_cmp(&(b.is_running(), b.last_launch_s.unwrap_or(-1.0), b.id()))
                .unwrap()
        });
        let mut s = Schedule::in_priority_order(order);
        s.min_run_s = self.min_run_s;
        s
    }
}

fn policies(scheduling: &str) -> Policies {
    registry::build_named("accept-all", scheduling, "first-free").unwrap()
}

fn rotate(min_run_s: Option<f64>) -> Policies {
    let mut p = policies("fifo");
    p.scheduling = Box::new(Rotate { min_run_s });
    p.names.scheduling = "rotate".into();
    p
}

/// Runs 3 jobs on one GPU for at most `limit_s`; returns the simulation.
fn run(p: Policies, run: RunConfig, jobs: Vec<SimJob>) -> Simulation {
    let mut s = Simulation::new(
        p,
        ClusterState::homogeneous(1, 1),
        run,
        SimConfig::default(),
        jobs,
    )
    .unwrap();
    while s.step().unwrap() {}
    s
}

fn rounds_of_2s(limit_s: f64) -> RunConfig {
    RunConfig {
        round_s: Positive::of(2.0),
        max_time_s: Some(Positive::new(limit_s).unwrap()),
        allow_unfinished: true,
        ..RunConfig::default()
    }
}

fn three_jobs() -> Vec<SimJob> {
    (0..3).map(|i| job(i, Some(STARTUP_S))).collect()
}

/// Every job of the loop, running or ended.
fn all_jobs(s: &Simulation) -> Vec<Job> {
    let lp = &s.round_loop;
    let mut v: Vec<Job> = lp.jobs.active().cloned().collect();
    v.extend(lp.jobs.finished().iter().cloned());
    v.sort_by_key(|j| j.id());
    v
}

#[test]
fn without_the_rule_jobs_preempted_while_starting_never_progress_and_are_reported() {
    let off = RunConfig {
        min_run_s: Some(NonNegative::of(0.0)),
        min_run_startup_factor: Some(NonNegative::of(0.0)),
        max_startup_s: Some(NonNegative::of(0.0)),
        // (The livelock it is stops the run by default: below.)
        livelock_after: Some(0),
        ..rounds_of_2s(600.0)
    };
    let s = run(rotate(None), off.clone(), three_jobs());
    let jobs = all_jobs(&s);
    assert_eq!(jobs.len(), 3);
    for j in &jobs {
        assert_ne!(j.status, JobStatus::Finished, "{j:?}");
        assert_eq!(j.attained_service_gpu_s, 0.0, "{j:?}");
        assert!(j.launches >= 50, "{j:?}");
        assert!(j.launches_without_progress >= 3, "{j:?}");
        let w = j.warning.as_deref().unwrap_or_default();
        assert!(w.contains("before its first iteration"), "{j:?}");
    }
    // By default the rotation is stopped as the livelock it is.
    let mut s = Simulation::new(
        rotate(None),
        ClusterState::homogeneous(1, 1),
        RunConfig {
            livelock_after: None,
            ..off
        },
        SimConfig::default(),
        three_jobs(),
    )
    .unwrap();
    let e = loop {
        match s.step() {
            Ok(true) => {}
            Ok(false) => panic!("the livelock ran to its end"),
            Err(e) => break error_chain(&e),
        }
    };
    assert!(
        e.contains("rotate") && e.contains("20 rounds in a row"),
        "{e}"
    );
}

#[test]
fn with_the_rule_every_job_finishes_after_a_few_launches() {
    let s = run(rotate(None), rounds_of_2s(600.0), three_jobs());
    for j in all_jobs(&s) {
        assert_eq!(j.status, JobStatus::Finished, "{j:?}");
        // Each launch runs at least its start-up again past the first
        // iteration: 10 s of the 30 s of work, so at most 3 launches.
        assert!(j.launches <= 3, "{j:?}");
        assert_eq!(j.warning, None);
        // Service is productive time only; start-up is kept beside it.
        assert!((j.attained_service_gpu_s - WORK_S).abs() < 1e-6, "{j:?}");
        assert!(
            (j.startup_s - STARTUP_S * j.launches as f64).abs() < 1e-6,
            "{j:?}"
        );
        assert!((j.run_time_s - j.startup_s - WORK_S).abs() < 1e-6, "{j:?}");
    }
}

#[test]
fn las_on_short_rounds_finishes_jobs_with_long_start_up() {
    let s = run(policies("las"), rounds_of_2s(600.0), three_jobs());
    for j in all_jobs(&s) {
        assert_eq!(j.status, JobStatus::Finished, "{j:?}");
        assert!(j.launches <= 3, "{j:?}");
        // At most half of each launch goes to starting.
        assert!(j.startup_s <= j.run_time_s / 2.0 + 1e-6, "{j:?}");
    }
}

#[test]
fn a_policy_may_ask_for_a_longer_minimum_run() {
    // The rotation asks for 25 s past the first iteration: each job then
    // needs at most 2 launches (25 s + 5 s).
    let s = run(rotate(Some(25.0)), rounds_of_2s(600.0), three_jobs());
    for j in all_jobs(&s) {
        assert_eq!(j.status, JobStatus::Finished, "{j:?}");
        assert!(j.launches <= 2, "{j:?}");
    }
    // And it cannot ask for less than the loop's rule.
    let s = run(rotate(Some(0.0)), rounds_of_2s(600.0), three_jobs());
    for j in all_jobs(&s) {
        assert!(j.launches <= 3, "{j:?}");
    }
}

#[test]
fn a_launch_that_never_reaches_its_first_iteration_loses_its_protection() {
    // A job that would start for an hour holds the GPU only `max_startup_s`
    // per launch; the rotation moves on, the others finish, and the hung
    // job is reported.
    let run_cfg = RunConfig {
        max_startup_s: Some(NonNegative::of(60.0)),
        ..rounds_of_2s(3600.0)
    };
    let jobs = vec![job(0, Some(3600.0)), job(1, Some(1.0)), job(2, Some(1.0))];
    let s = run(rotate(None), run_cfg, jobs);
    let jobs = all_jobs(&s);
    let hung = &jobs[0];
    assert_ne!(hung.status, JobStatus::Finished, "{hung:?}");
    assert!(hung.launches >= 3, "{hung:?}");
    assert!(hung.warning.is_some(), "{hung:?}");
    for j in &jobs[1..] {
        assert_eq!(j.status, JobStatus::Finished, "{j:?}");
    }
    // Until they finished, each launch of the hung job held the GPU for
    // 60 s (rounds of 2 s: at most 62 s), never longer.
    let end = jobs[1].finish_s.unwrap().max(jobs[2].finish_s.unwrap());
    let before_end = hung.launches as f64 - 1.0;
    assert!(end <= before_end * (62.0 + 2.0 * 2.0) + 62.0, "{hung:?}");
}

#[test]
fn the_start_up_of_a_model_and_of_a_trace_row() {
    // One job alone: JCT = start-up + work, whichever way start-up is set.
    let one = |startup: Option<f64>, model: Option<&str>, sim: SimConfig| {
        let mut j = job(0, startup);
        j.spec.model = model.map(str::to_string);
        let run = RunConfig {
            round_s: Positive::of(2.0),
            ..RunConfig::default()
        };
        let r = Simulation::new(
            policies("fifo"),
            ClusterState::homogeneous(1, 1),
            run,
            sim,
            vec![j],
        )
        .unwrap()
        .run_to_end()
        .unwrap();
        r.jobs[0].jct_s.unwrap()
    };
    let mut sim = SimConfig {
        launch_overhead_s: 3.0,
        ..SimConfig::default()
    };
    assert!((one(None, None, sim.clone()) - (3.0 + WORK_S)).abs() < 1e-6);
    sim.model_startup_s.insert("resnet".into(), 7.0);
    assert!((one(None, Some("resnet"), sim.clone()) - (7.0 + WORK_S)).abs() < 1e-6);
    assert!((one(Some(5.0), Some("resnet"), sim.clone()) - (5.0 + WORK_S)).abs() < 1e-6);
    assert!((one(None, Some("bert"), sim) - (3.0 + WORK_S)).abs() < 1e-6);
}
