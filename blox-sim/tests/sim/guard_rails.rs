//! Guard rails for policy authors: each deliberately broken policy below gets
//! an error that names the policy that broke the contract and the job, before
//! anything of its decision runs; a run that can never end stops with an
//! error instead of spinning.

use blox_core::*;
use blox_sim::{SimConfig, SimError, SimJob, Simulation};

use blox_policies as _;

fn job(id: u64, arrival: f64, gpus: u32, duration: f64) -> SimJob {
    SimJob::of_duration(
        JobSpec::new(id, arrival, gpus).with_duration(duration),
        duration,
    )
}

/// A scheduling policy that returns whatever `f` makes of the jobs.
struct Broken<F>(F);

impl<F: FnMut(&JobState) -> Schedule + Send> SchedulingPolicy for Broken<F> {
    fn schedule(&mut self, _: &RoundInfo, jobs: &JobState, _: &ClusterState) -> Schedule {
        (self.0)(jobs)
    }
}

fn with_scheduling(s: Box<dyn SchedulingPolicy>) -> Policies {
    let mut p = registry::build_named("accept-all", "fifo", "first-free").unwrap();
    p.scheduling = s;
    p.names.scheduling = "broken".into();
    p
}

fn simulate(p: Policies, jobs: Vec<SimJob>, run: RunConfig) -> Result<Simulation, SimError> {
    let mut s = Simulation::new(
        p,
        ClusterState::homogeneous(2, 4),
        run,
        SimConfig::default(),
        jobs,
    )?;
    while s.step()? {}
    Ok(s)
}

fn run_config() -> RunConfig {
    RunConfig {
        round_s: Positive::of(60.0),
        ..RunConfig::default()
    }
}

/// The error text of a run with `f` as its scheduling policy.
fn error_of<F: FnMut(&JobState) -> Schedule + Send + 'static>(f: F, jobs: Vec<SimJob>) -> String {
    let e = simulate(with_scheduling(Box::new(Broken(f))), jobs, run_config())
        .err()
        .expect("the broken policy is stopped");
    error_chain(&e)
}

#[test]
fn a_job_scheduled_twice_is_blamed_on_the_scheduling_policy() {
    let e = error_of(
        |jobs| {
            let mut s = Schedule::in_priority_order(jobs.runnable());
            s.entries.extend(s.entries.clone());
            s
        },
        vec![job(0, 0.0, 1, 600.0)],
    );
    assert!(
        e.contains("scheduling policy `broken`") && e.contains("lists job-0 twice"),
        "{e}"
    );
}

#[test]
fn an_unknown_job_is_an_error_not_ignored() {
    let e = error_of(
        |_| {
            let mut s = Schedule::new();
            s.push(Demand::new(JobId(42), 1));
            s
        },
        vec![job(0, 0.0, 1, 600.0)],
    );
    assert!(
        e.contains("scheduling policy `broken`")
            && e.contains("job-42, which is not a job the scheduler knows"),
        "{e}"
    );
}

#[test]
fn a_job_that_ended_long_ago_is_named_as_ended() {
    // Job 0 ends at once; job 2 ends after it, and with one ended job kept
    // whole, job 0's record is a table row by then. The policy then
    // schedules job 0: it is told the job ended, not that it is unknown.
    let mut seen = false;
    let broken = Broken(move |jobs: &JobState| {
        let mut s = Schedule::in_priority_order(jobs.runnable());
        seen |= jobs.get(JobId(0)).is_some();
        let held = jobs.finished().iter().any(|j| j.id() == JobId(0));
        if seen && jobs.get(JobId(0)).is_none() && !held {
            s.push(Demand::new(JobId(0), 1));
        }
        s
    });
    let mut sim = Simulation::new(
        with_scheduling(Box::new(broken)),
        ClusterState::homogeneous(2, 4),
        run_config(),
        SimConfig::default(),
        vec![
            job(0, 0.0, 1, 30.0),
            job(1, 0.0, 1, 6000.0),
            job(2, 300.0, 1, 30.0),
        ],
    )
    .unwrap();
    sim.ended_kept = 1;
    let e = loop {
        match sim.step() {
            Ok(true) => {}
            Ok(false) => panic!("the policy was never stopped"),
            Err(e) => break error_chain(&e),
        }
    };
    assert!(
        e.contains("scheduling policy `broken`") && e.contains("job-0, which has already ended"),
        "{e}"
    );
    assert!(sim.round_loop.jobs.has_ended(JobId(2)));
    assert!(!sim.round_loop.jobs.has_ended(JobId(1)));
}

#[test]
fn a_job_still_waiting_for_admission_cannot_be_scheduled() {
    // Admission never admits; the policy schedules the waiting job anyway.
    struct Never;
    impl AdmissionPolicy for Never {
        fn admit(
            &mut self,
            _: &RoundInfo,
            _: &[Job],
            _: &JobState,
            _: &ClusterState,
        ) -> AdmissionDecision {
            AdmissionDecision::default()
        }
    }
    let mut p = with_scheduling(Box::new(Broken(|_: &JobState| {
        let mut s = Schedule::new();
        s.push(Demand::new(JobId(0), 1));
        s
    })));
    p.admission = Box::new(Never);
    let e = simulate(p, vec![job(0, 0.0, 1, 600.0)], run_config())
        .err()
        .unwrap();
    let e = error_chain(&e);
    assert!(e.contains("job-0, which still waits for admission"), "{e}");
}

#[test]
fn a_job_both_terminated_and_scheduled_is_refused() {
    let e = error_of(
        |jobs| {
            let mut s = Schedule::in_priority_order(jobs.runnable());
            s.terminate(JobId(0), "done");
            s
        },
        vec![job(0, 0.0, 1, 600.0)],
    );
    assert!(e.contains("both terminates and schedules job-0"), "{e}");
}

#[test]
fn a_demand_larger_than_the_cluster_stops_at_once_instead_of_spinning() {
    // The case that kept `blox sim` at 99 % CPU: one job asked for 10,000 GPUs.
    let e = error_of(
        |jobs| {
            let mut s = Schedule::new();
            for j in jobs.runnable() {
                s.push(Demand::new(j.id(), 10_000));
            }
            s
        },
        vec![job(0, 0.0, 1, 600.0), job(1, 0.0, 1, 600.0)],
    );
    assert!(
        e.contains("scheduling policy `broken`")
            && e.contains("asks for 10000 GPUs for job-0, but the cluster has 8"),
        "{e}"
    );
}

#[test]
fn nothing_of_an_invalid_decision_runs() {
    let p = with_scheduling(Box::new(Broken(|jobs: &JobState| {
        let mut s = Schedule::in_priority_order(jobs.runnable());
        s.push(Demand::new(JobId(99), 1));
        s
    })));
    let mut s = Simulation::new(
        p,
        ClusterState::homogeneous(1, 4),
        run_config(),
        SimConfig::default(),
        vec![job(0, 0.0, 1, 600.0)],
    )
    .unwrap();
    let err = s.step().unwrap_err();
    // The round, then the reason (the error's source).
    let e = format!(
        "{err}: {}",
        std::error::Error::source(&err).map_or(String::new(), |s| s.to_string())
    );
    assert!(
        e.contains("at round 0") && e.contains("scheduling policy `broken`") && e.contains("99"),
        "{e}"
    );
    assert_eq!(s.round_loop.cluster.num_busy(), 0, "job 0 was not launched");
}

#[test]
fn a_live_loop_drops_an_invalid_decision_and_goes_on() {
    // Every other round the policy lists a job twice; in the rounds between
    // it is right, so the job runs and finishes.
    let mut n = 0;
    let p = with_scheduling(Box::new(Broken(move |jobs: &JobState| {
        n += 1;
        let mut s = Schedule::in_priority_order(jobs.runnable());
        if n % 2 == 1 {
            s.entries.extend(s.entries.clone());
        }
        s
    })));
    let mut s = Simulation::new(
        p,
        ClusterState::homogeneous(1, 4),
        run_config(),
        SimConfig::default(),
        vec![job(0, 0.0, 1, 600.0)],
    )
    .unwrap();
    s.round_loop.set_on_invalid(OnInvalidDecision::SkipRound);
    let r = s.run_to_end().unwrap();
    assert_eq!(r.summary.jobs_finished, 1);
    let first = &r.rounds[0];
    assert_eq!(first.busy_gpus, 0, "the first round's decision was dropped");
}

#[test]
fn a_policy_that_never_starts_anything_is_a_stall_not_a_hang() {
    let e = simulate(
        with_scheduling(Box::new(Broken(|_: &JobState| Schedule::new()))),
        vec![job(0, 0.0, 1, 600.0), job(1, 30.0, 2, 600.0)],
        run_config(),
    )
    .err()
    .expect("stops");
    assert!(matches!(e, SimError::Stalled { .. }), "{e:?}");
    let e = error_chain(&e);
    assert!(
        e.contains("no progress is possible")
            && e.contains("scheduling `broken`")
            && e.contains("job-0 (1 GPUs, admitted)")
            && e.contains("; job-0: "),
        "{e}"
    );
}

#[test]
fn an_admission_policy_that_defers_forever_is_a_stall() {
    struct Never;
    impl AdmissionPolicy for Never {
        fn admit(
            &mut self,
            _: &RoundInfo,
            _: &[Job],
            _: &JobState,
            _: &ClusterState,
        ) -> AdmissionDecision {
            AdmissionDecision::default()
        }
    }
    let mut p = registry::build_named("accept-all", "fifo", "first-free").unwrap();
    p.admission = Box::new(Never);
    p.names.admission = "never".into();
    let e = simulate(p, vec![job(0, 0.0, 1, 600.0)], run_config())
        .err()
        .unwrap();
    let e = error_chain(&e);
    assert!(
        e.contains("admission `never`") && e.contains("waiting for admission"),
        "{e}"
    );
}

#[test]
fn a_run_stopped_by_max_rounds_says_so_in_its_summary() {
    let run = RunConfig {
        round_s: Positive::of(60.0),
        max_rounds: Some(3),
        ..RunConfig::default()
    };
    let s = simulate(
        registry::build_named("accept-all", "fifo", "first-free").unwrap(),
        vec![job(0, 0.0, 1, 6000.0)],
        run,
    )
    .unwrap();
    let r = s.finish();
    assert!(r.summary.stopped_early());
    assert_eq!(r.summary.unfinished, 1);
    let text = r.summary.to_string();
    assert!(
        text.contains("warning")
            && text.contains("stopped by run.max_rounds = 3 with 1 of 1 jobs unfinished"),
        "{text}"
    );
}

#[test]
fn jobs_out_of_arrival_order_are_refused() {
    let e = Simulation::new(
        registry::build_named("accept-all", "fifo", "first-free").unwrap(),
        ClusterState::homogeneous(1, 4),
        run_config(),
        SimConfig::default(),
        vec![job(0, 100.0, 1, 60.0), job(1, 50.0, 1, 60.0)],
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("not sorted by arrival"), "{e}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    // Whatever mix of repeats and unknown ids a schedule has, in any order,
    // the error names the smallest repeated id, or else the smallest
    // unknown one; a schedule of known ids once each runs. (Ids past 2^24
    // take the sorting path of the check; smaller ones its marks.)
    #[test]
    fn a_bad_schedule_is_refused_naming_its_smallest_bad_id(
        n in 1u64..8,
        picks in proptest::collection::vec(0u64..12, 0..14),
        huge in proptest::bool::ANY,
    ) {
        let mut ids: Vec<u64> = picks;
        if huge {
            ids.push(1 << 30);
        }
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let twice = sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
        let unknown = sorted.iter().copied().find(|&i| i >= n);
        let mut first = true;
        let listed = ids.clone();
        let policy = Broken(move |jobs: &JobState| {
            if !std::mem::take(&mut first) {
                return Schedule::in_priority_order(jobs.runnable());
            }
            let mut s = Schedule::default();
            for &id in &listed {
                s.entries.push(Demand {
                    job: JobId(id),
                    gpus: 1,
                    batch_size: None,
                    gpu_ids: None,
                    host: None,
                });
            }
            s
        });
        let jobs = (0..n).map(|i| job(i, 0.0, 1, 600.0)).collect();
        let got = simulate(with_scheduling(Box::new(policy)), jobs, run_config());
        match (twice, unknown) {
            (Some(id), _) => {
                let e = error_chain(&got.err().expect("refused"));
                proptest::prop_assert!(e.contains(&format!("lists job-{id} twice")), "{}", e);
            }
            (None, Some(id)) => {
                let e = error_chain(&got.err().expect("refused"));
                proptest::prop_assert!(
                    e.contains(&format!("schedules job-{id}, which is not a job")),
                    "{}",
                    e
                );
            }
            (None, None) => {
                proptest::prop_assert!(got.is_ok(), "{:?}", got.err().map(|e| error_chain(&e)));
            }
        }
    }
}

/// A placement that moves every job it places to the other node each
/// round (a policy bug of the kind that kept Pollux's job 144 of Sia's
/// Philly workload 3 from ever starting).
struct Flipping;

impl PlacementPolicy for Flipping {
    fn place(
        &mut self,
        round: &RoundInfo,
        s: &Schedule,
        jobs: &JobState,
        _: &ClusterState,
    ) -> Placement {
        let node = (round.round % 2) as u32;
        Placement {
            preempt: Vec::new(),
            launch: s
                .entries
                .iter()
                .filter_map(|e| jobs.get(e.job))
                .map(|j| {
                    let first = node * 4;
                    Assignment::new(
                        j.id(),
                        (first..first + j.spec.requested_gpus).map(GpuId).collect(),
                    )
                })
                .collect(),
        }
    }
}

/// A job the policies move before its first iteration round after round
/// (its restart takes longer than a round, and nothing protects it) stops
/// the run with an error naming the policies and the job, not a warning
/// every round; `livelock_after = 0` lets it spin as before, and start-up
/// protection alone keeps it from happening.
#[test]
fn a_job_moved_before_it_starts_round_after_round_stops_the_run() {
    let build = |livelock_after: Option<u32>, protect: bool| {
        let mut p = registry::build_named("accept-all", "fifo", "first-free").unwrap();
        p.placement = Box::new(Flipping);
        p.names.placement = "flipping".into();
        let run = RunConfig {
            round_s: Positive::of(60.0),
            max_rounds: Some(60),
            allow_unfinished: true,
            livelock_after,
            min_run_s: (!protect).then(|| NonNegative::of(0.0)),
            min_run_startup_factor: (!protect).then(|| NonNegative::of(0.0)),
            max_startup_s: (!protect).then(|| NonNegative::of(0.0)),
            ..RunConfig::default()
        };
        let sim = SimConfig {
            launch_overhead_s: 90.0,
            restart_overhead_s: 90.0,
            ..SimConfig::default()
        };
        let mut s = Simulation::new(
            p,
            ClusterState::homogeneous(2, 4),
            run,
            sim,
            vec![job(7, 0.0, 2, 600.0)],
        )?;
        while s.step()? {}
        Ok::<_, SimError>(s)
    };
    let e = error_chain(&build(None, false).err().expect("the livelock is stopped"));
    assert!(
        e.contains("flipping") && e.contains("job-7") && e.contains("20 rounds in a row"),
        "{e}"
    );
    // Off: the run spins to its round limit, the job never started.
    let s = build(Some(0), false).unwrap();
    let j = s.round_loop.jobs.get(JobId(7)).expect("still active");
    assert!(
        j.first_start_s.is_some() && j.attained_service_gpu_s == 0.0,
        "{j:?}"
    );
    // Start-up protection holds the job where it started: it finishes.
    let s = build(None, true).unwrap();
    assert!(
        s.round_loop
            .jobs
            .finished()
            .iter()
            .any(|j| j.id() == JobId(7) && j.status == JobStatus::Finished),
        "protected, it finishes"
    );
}
