//! When will a job start: the forecaster forks the loop's state into the
//! simulator under the same policies. With every job known (no arrivals
//! after the snapshot, run times given or measured), the forecast is what
//! then happens, to the microsecond.

use blox_config::Config;
use blox_core::*;
use blox_forecast::{DurationFrom, Forecast, Forecaster, LaunchCosts};
use blox_sim::forecast::SimForecaster;
use blox_sim::{SimConfig, SimJob, Simulation, WorkModel};
use proptest::prelude::*;

use blox_policies as _;

fn job(id: u64, gpus: u32, duration: f64, known: bool) -> SimJob {
    let spec = JobSpec::new(id, 0.0, gpus);
    SimJob {
        startup_s: None,
        converge_at: None,
        spec: if known {
            spec.with_duration(duration)
        } else {
            spec
        },
        work: WorkModel::Duration {
            duration_s: duration,
        },
    }
}

fn config(scheduling: &str, extra: &str) -> Config {
    // The forecast's wall-clock bound is for live schedulers: here a loaded
    // machine must not cut a forecast short.
    let wall = if extra.contains("[forecast]") {
        ""
    } else {
        "[forecast]\nmax_wall_s = 600\n"
    };
    let text = format!(
        "[run]\nround_s = 60\n[cluster]\nnodes = 2\ngpus_per_node = 4\n\
         [admission]\npolicy = \"accept-all\"\n[scheduling]\npolicy = \"{scheduling}\"\n\
         [placement]\npolicy = \"first-free\"\n{extra}{wall}"
    );
    Config::parse(&text, "test.toml", std::path::Path::new("."), &[]).unwrap()
}

/// The config's forecaster, and a simulation of `jobs` under it.
fn forecaster_and_sim(cfg: &Config, jobs: Vec<SimJob>) -> (SimForecaster, Simulation) {
    let sim = SimConfig::from_section(&cfg.section("sim")).unwrap();
    let fc = SimForecaster::from_config(cfg, &sim).unwrap().unwrap();
    let policies =
        registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement).unwrap();
    let s = Simulation::new(
        policies,
        cfg.cluster_state().unwrap(),
        cfg.run.clone(),
        sim,
        jobs,
    )
    .unwrap();
    (fc, s)
}

/// Runs `rounds` rounds, forecasts, runs to the end; returns (job, predicted
/// start, actual start, predicted finish, actual finish) for the jobs that
/// had not started at the snapshot, and the forecast.
#[allow(clippy::type_complexity)]
fn predicted_and_actual(
    scheduling: &str,
    jobs: Vec<SimJob>,
    rounds: usize,
) -> (Vec<(u64, Option<f64>, f64, Option<f64>, f64)>, Forecast) {
    let (fc, mut s) = forecaster_and_sim(&config(scheduling, ""), jobs);
    for _ in 0..rounds {
        s.step().unwrap();
    }
    let snap = s.snapshot();
    let unstarted: Vec<JobId> = snap
        .jobs
        .active()
        .chain(&snap.waiting)
        .filter(|j| !j.is_running())
        .map(|j| j.id())
        .collect();
    let f = fc.forecast(&snap).unwrap();
    let started = run_out(&mut s, &unstarted);
    let result = s.finish();
    let out = unstarted
        .iter()
        .map(|id| {
            let row = result.jobs.iter().find(|r| r.job_id == id.0).unwrap();
            let p = f.get(*id).unwrap();
            (
                id.0,
                p.start_s,
                started[id],
                p.finish_s,
                row.finish_s.unwrap(),
            )
        })
        .collect();
    (out, f)
}

/// Runs `s` to its end; when each of `ids` next got GPUs.
fn run_out(s: &mut Simulation, ids: &[JobId]) -> std::collections::HashMap<JobId, f64> {
    let mut out = std::collections::HashMap::new();
    while !s.is_done() {
        s.step().unwrap();
        let lp = &s.round_loop;
        for id in ids {
            if out.contains_key(id) {
                continue;
            }
            let j = lp.jobs.get(*id).or_else(|| lp.jobs.finished_job(*id));
            if let Some(j) = j.filter(|j| j.is_running() || j.status.is_terminal()) {
                out.insert(*id, j.last_launch_s.unwrap());
            }
        }
    }
    out
}

#[test]
fn with_every_job_known_the_forecast_is_what_happens() {
    for policy in ["fifo", "srtf", "las", "tiresias"] {
        let jobs: Vec<SimJob> = (0..24)
            .map(|i| {
                job(
                    i,
                    [1, 2, 4, 1, 8][i as usize % 5],
                    300.0 + 170.0 * i as f64,
                    true,
                )
            })
            .collect();
        let (rows, f) = predicted_and_actual(policy, jobs, 2);
        assert!(rows.len() > 10, "{policy}: most jobs still wait");
        assert!(
            f.stopped.starts_with("every job"),
            "{policy}: {}",
            f.stopped
        );
        for (id, ps, s, pf, fin) in rows {
            let ps = ps.unwrap_or_else(|| panic!("{policy}: job {id} has a start"));
            let pf = pf.unwrap_or_else(|| panic!("{policy}: job {id} has a finish"));
            assert!(
                (ps - s).abs() < 1e-6,
                "{policy}: job {id} start {ps} vs {s}"
            );
            assert!(
                (pf - fin).abs() < 1e-6,
                "{policy}: job {id} finish {pf} vs {fin}"
            );
        }
    }
}

/// A relaunch on a live cluster first waits for the jobs it replaces to
/// checkpoint and exit. The wait the backend measured
/// (`Snapshot::launch_costs`) is charged to every relaunch the forecast
/// makes, before any job has measured a relaunch of its own. Truth here: a
/// simulation under LAS (which preempts every round) where a relaunch costs
/// 30 s; the forecaster's config knows nothing of it.
#[test]
fn a_forecast_charges_relaunches_the_wait_the_cluster_measured() {
    let jobs: Vec<SimJob> = (0..16)
        .map(|i| {
            job(
                i,
                [1, 2, 4, 1][i as usize % 4],
                400.0 + 150.0 * i as f64,
                true,
            )
        })
        .collect();
    let truth = config("las", "[sim]\nrestart_overhead_s = 30\n");
    let (_, mut s) = forecaster_and_sim(&truth, jobs);
    let fc = SimForecaster::from_config(&config("las", ""), &SimConfig::default())
        .unwrap()
        .unwrap();
    s.step().unwrap();
    let mut snap = s.snapshot();
    assert!(
        snap.jobs.active().all(|j| j.launches <= 1),
        "no job relaunched yet"
    );
    let blind = fc.forecast(&snap).unwrap();
    // As a live backend measures them: first launches onto free GPUs
    // waited for nothing, relaunches for the jobs they replaced.
    snap.launch_costs = LaunchCosts {
        launch_wait_s: Some(0.0),
        relaunch_wait_s: Some(30.0),
    };
    let told = fc.forecast(&snap).unwrap();
    while !s.is_done() {
        s.step().unwrap();
    }
    let result = s.finish();
    assert!(
        result.jobs.iter().map(|r| r.preemptions).sum::<u32>() > 16,
        "LAS relaunches jobs"
    );
    let mut blind_off = 0.0f64;
    for r in &result.jobs {
        let fin = r.finish_s.unwrap();
        let p = told.get(JobId(r.job_id)).unwrap().finish_s.unwrap();
        assert!((p - fin).abs() < 1e-6, "job {}: {p} vs {fin}", r.job_id);
        let b = blind.get(JobId(r.job_id)).unwrap().finish_s.unwrap();
        blind_off = blind_off.max(fin - b);
    }
    assert!(
        blind_off > 60.0,
        "without the wait, finishes come early ({blind_off} s at most)"
    );
}

#[test]
fn a_job_of_unknown_run_time_has_no_finish_and_blocks_what_waits_behind_it() {
    // FIFO: job 0 takes the whole cluster and says nothing of its run time.
    let jobs = vec![job(0, 8, 3600.0, false), job(1, 2, 600.0, true)];
    let (rows, f) = predicted_and_actual("fifo", jobs, 1);
    assert_eq!(rows.len(), 1);
    let (_, start, _, finish, _) = rows[0];
    assert_eq!(
        (start, finish),
        (None, None),
        "behind an unknown job: unknown"
    );
    let p0 = f.get(JobId(0)).unwrap();
    assert_eq!(p0.duration_from, DurationFrom::Unknown);
    assert_eq!(p0.finish_s, None);
    assert_eq!(
        f.get(JobId(1)).unwrap().duration_from,
        DurationFrom::Submitted
    );
}

#[test]
fn a_running_jobs_rate_stands_in_for_its_run_time() {
    // Job 0 reports progress; 20 minutes of a 60-minute job are 1/3 of it.
    let jobs = vec![job(0, 8, 3600.0, false), job(1, 2, 600.0, true)];
    let (fc, mut s) = forecaster_and_sim(&config("fifo", ""), jobs);
    for _ in 0..20 {
        s.step().unwrap();
    }
    let snap = s.snapshot();
    let f = fc.forecast(&snap).unwrap();
    let p0 = f.get(JobId(0)).unwrap();
    assert_eq!(p0.duration_from, DurationFrom::ProgressRate);
    let p1 = f.get(JobId(1)).unwrap().clone();
    let started = run_out(&mut s, &[JobId(1)]);
    let result = s.finish();
    let row = |id: u64| result.jobs.iter().find(|r| r.job_id == id).unwrap().clone();
    assert!((p0.finish_s.unwrap() - row(0).finish_s.unwrap()).abs() < 1e-6);
    assert!((p1.start_s.unwrap() - started[&JobId(1)]).abs() < 1e-6);
}

#[test]
fn forecast_config_errors_name_the_key() {
    let cfg = config("fifo", "[forecast]\nmax_wall_s = -1\n");
    let sim = SimConfig::default();
    let e = SimForecaster::from_config(&cfg, &sim)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("max_wall_s"), "{e}");
    let cfg = config("fifo", "[forecast]\nhorizon = 5\n");
    let e = SimForecaster::from_config(&cfg, &sim)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("horizon"), "{e}");
    let off = config("fifo", "[forecast]\nenabled = false\n");
    assert!(SimForecaster::from_config(&off, &sim).unwrap().is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Any mix of known jobs under FIFO: every predicted start and finish is
    /// what then happens.
    #[test]
    fn fifo_forecasts_hold_for_any_mix(
        spec in proptest::collection::vec((1u32..=8, 60.0f64..5000.0), 1..30),
        rounds in 0usize..4,
    ) {
        let jobs: Vec<SimJob> = spec
            .iter()
            .enumerate()
            .map(|(i, (g, d))| job(i as u64, *g, *d, true))
            .collect();
        let (rows, _) = predicted_and_actual("fifo", jobs, rounds);
        for (id, ps, s, pf, fin) in rows {
            prop_assert!(ps.is_some_and(|p| (p - s).abs() < 1e-6), "job {id}: {ps:?} vs {s}");
            prop_assert!(pf.is_some_and(|p| (p - fin).abs() < 1e-6), "job {id}: {pf:?} vs {fin}");
        }
    }
}

/// The greatest gap between a forecast made after `rounds` rounds and what
/// then happens, over every job's finish; `fresh`: the forecast builds its
/// policies afresh instead of continuing from the loop's (their state lost).
fn finish_gap(cfg: &Config, jobs: Vec<SimJob>, rounds: usize, fresh: bool) -> f64 {
    let (fc, mut s) = forecaster_and_sim(cfg, jobs);
    for _ in 0..rounds {
        if s.is_done() {
            break;
        }
        s.step().unwrap();
    }
    let mut snap = s.snapshot();
    if fresh {
        snap.policies = None;
    }
    let f = fc.forecast(&snap).unwrap();
    assert!(!f.stopped.contains("could not be forked"), "{}", f.stopped);
    let ids: Vec<JobId> = f.predictions.iter().map(|p| p.job).collect();
    while !s.is_done() {
        s.step().unwrap();
    }
    let result = s.finish();
    ids.iter()
        .map(|id| {
            let row = result.jobs.iter().find(|r| r.job_id == id.0).unwrap();
            let p = f.get(*id).unwrap().finish_s.unwrap_or(f64::INFINITY);
            (p - row.finish_s.unwrap()).abs()
        })
        .fold(0.0, f64::max)
}

/// Two teams of unequal quotas over LAS: a team's attained service, its
/// ended jobs' included, is the teams policy's own state.
fn teams_config() -> Config {
    let text = "[run]\nround_s = 60\n[cluster]\nnodes = 2\ngpus_per_node = 4\n\
         [scheduling]\npolicy = \"teams\"\nwithin = { policy = \"las\" }\n\
         teams = [ { name = \"a\", quota = 6 }, { name = \"b\", quota = 2 } ]\n\
         [placement]\npolicy = \"first-free\"\n[forecast]\nmax_wall_s = 600\n";
    Config::parse(text, "teams.toml", std::path::Path::new("."), &[]).unwrap()
}

fn mixed_jobs(spec: &[(u32, f64, bool)]) -> Vec<SimJob> {
    spec.iter()
        .enumerate()
        .map(|(i, (g, d, b))| {
            let mut j = job(i as u64, *g, *d, true);
            j.spec.team = Some(if *b { "b" } else { "a" }.to_string());
            j
        })
        .collect()
}

/// The policies' state goes into the forecast: a forecast made mid-run under
/// a stateful policy is what then happens. Made from fresh policies, it is
/// not: teams forget the service their ended jobs attained, Themis the
/// contention its jobs saw (cases found by searching random mixes; Tiresias
/// rebuilds its queues from the jobs' attained service, so a fresh one
/// agrees).
#[test]
fn a_forecast_continues_from_the_policies_state() {
    type Case<'a> = (Config, &'a [(u32, f64, bool)], usize);
    let cases: [Case; 2] = [
        (
            teams_config(),
            &[
                (1, 2003.0, false),
                (3, 785.0, false),
                (1, 2951.0, false),
                (2, 2522.0, true),
                (2, 198.0, true),
                (2, 1712.0, false),
                (4, 499.0, true),
                (3, 2244.0, false),
                (3, 2289.0, false),
            ],
            5,
        ),
        (
            config("themis", ""),
            &[
                (4, 126.0, false),
                (2, 1086.0, false),
                (1, 2605.0, false),
                (4, 260.0, true),
                (3, 111.0, false),
                (3, 78.0, false),
                (1, 2345.0, true),
                (1, 2652.0, true),
                (3, 227.0, true),
            ],
            9,
        ),
    ];
    for (cfg, spec, rounds) in &cases {
        let name = &cfg.scheduling.policy;
        let forked = finish_gap(cfg, mixed_jobs(spec), *rounds, false);
        assert!(forked < 1e-6, "{name}: {forked} s off");
        let fresh = finish_gap(cfg, mixed_jobs(spec), *rounds, true);
        assert!(fresh > 1.0, "{name} from scratch: {fresh} s off");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    /// Tiresias, Themis, teams over LAS and ONES, any mix of known jobs, a
    /// forecast made after any round: every finish is what then happens.
    /// (ONES's predictor learns from each job's epoch size, which the
    /// simulator reports the round after submission: the snapshot carries
    /// it, or the fork's predictor fits other features.)
    #[test]
    fn stateful_policies_forecast_what_happens(
        spec in proptest::collection::vec((1u32..=4, 60.0f64..3000.0, any::<bool>()), 1..16),
        rounds in 1usize..12,
    ) {
        for cfg in [config("tiresias", ""), config("themis", ""), teams_config(), explicit_config("ones")] {
            let gap = finish_gap(&cfg, mixed_jobs(&spec), rounds, false);
            prop_assert!(gap < 1e-6, "{}: {gap} s off", cfg.scheduling.policy);
        }
    }
}

/// A policy that keeps state it cannot copy: the forecast starts it afresh
/// and says so in its status, rather than silently.
#[test]
fn a_policy_that_cannot_be_forked_is_named_in_the_forecast() {
    struct Opaque(Box<dyn SchedulingPolicy>);
    impl SchedulingPolicy for Opaque {
        fn fork(&self) -> Fork<dyn SchedulingPolicy> {
            Fork::Unforkable("it holds a socket".into())
        }
        fn schedule(&mut self, r: &RoundInfo, j: &JobState, c: &ClusterState) -> Schedule {
            self.0.schedule(r, j, c)
        }
    }
    let jobs = (0..6).map(|i| job(i, 2, 600.0, true)).collect();
    let (fc, mut s) = forecaster_and_sim(&config("fifo", ""), jobs);
    let inner = registry::build_scheduling(&config("fifo", "").scheduling).unwrap();
    s.round_loop.policies.scheduling = Box::new(Opaque(inner));
    s.step().unwrap();
    let f = fc.forecast(&s.snapshot()).unwrap();
    assert!(
        f.stopped
            .contains("`fifo` could not be forked (it holds a socket)"),
        "{}",
        f.stopped
    );
    // Still a forecast, from a fresh FIFO.
    assert!(f.predictions.iter().all(|p| p.finish_s.is_some()));
}

fn explicit_config(policy: &str) -> Config {
    let text = format!(
        "[run]\nround_s = 60\nseed = 1\n[cluster]\nnodes = 2\ngpus_per_node = 4\n\
         [admission]\npolicy = \"accept-all\"\n[scheduling]\npolicy = \"{policy}\"\n\
         [placement]\npolicy = \"explicit\"\n[forecast]\nmax_wall_s = 600\n"
    );
    Config::parse(&text, "t.toml", std::path::Path::new("."), &[]).unwrap()
}

/// Pollux's state (its fits, its genetic algorithm's population and seed)
/// is forked with it: a forecast made mid-run is what then happens. One
/// small case: Pollux's search is slow in a debug build.
#[test]
fn a_pollux_forecast_is_what_happens() {
    let spec: &[(u32, f64, bool)] = &[(1, 400.0, false), (2, 500.0, true), (4, 300.0, false)];
    let cfg = explicit_config("pollux");
    let gap = finish_gap(&cfg, mixed_jobs(spec), 2, false);
    assert!(gap < 1e-6, "pollux: {gap} s off");
}

/// A node down when the forecast is made: the forecast plans without it
/// and says that it takes it to stay down, since it knows no repair time.
#[test]
fn a_forecast_with_a_node_down_says_it_stays_down() {
    let jobs = (0..6).map(|i| job(i, 4, 600.0, true)).collect();
    let (fc, mut s) = forecaster_and_sim(&config("fifo", ""), jobs);
    s.step().unwrap();
    let mut snap = s.snapshot();
    let f = fc.forecast(&snap).unwrap();
    assert!(!f.stopped.contains("down"), "{}", f.stopped);
    let lost = snap.cluster.remove_node(NodeId(1)).unwrap();
    snap.cluster
        .health_mut()
        .note_failure(NodeId(1), snap.now_s);
    // The jobs that ran there go back to the queue, as the loop would.
    for id in lost {
        let j = snap.jobs.get_mut(id).unwrap();
        j.status = JobStatus::Queued;
        j.allocation.clear();
    }
    let down = fc.forecast(&snap).unwrap();
    assert!(
        down.stopped.contains("1 failed node(s) taken to stay down"),
        "{}",
        down.stopped
    );
    // Half the GPUs: the last job finishes later than with both nodes.
    let last = |f: &Forecast| {
        f.predictions
            .iter()
            .filter_map(|p| p.finish_s)
            .fold(0.0, f64::max)
    };
    assert!(
        last(&down) > last(&f) + 500.0,
        "{} vs {}",
        last(&down),
        last(&f)
    );
}
