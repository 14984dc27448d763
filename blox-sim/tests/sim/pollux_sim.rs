//! Profile-driven simulation of Pollux workloads (pollux-data.md §3–4, §7).

// The built-in policies, registered by name.
use blox_core::*;
use blox_policies as _;
use blox_sim::backend::SimConfig;
use blox_sim::workload::pollux::{rigid_duration_s, AppProfile};
use blox_sim::workload::{BatchAgent, SimJob, WorkModel};
use blox_sim::Simulation;
use std::path::PathBuf;
use std::sync::Arc;

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/pollux/traces")
}

fn app(name: &str) -> Arc<AppProfile> {
    Arc::new(AppProfile::load(&traces(), name).unwrap())
}

fn job(id: u64, arrival: f64, gpus: u32, app: &Arc<AppProfile>, agent: BatchAgent) -> SimJob {
    let mut spec = JobSpec::new(id, arrival, gpus);
    spec.model = Some(app.app.clone());
    SimJob {
        startup_s: None,
        converge_at: None,
        spec,
        work: WorkModel::Profile {
            app: app.clone(),
            agent,
            types: None,
        },
    }
}

fn artifact_sim() -> SimConfig {
    SimConfig {
        launch_overhead_s: 30.0,
        restart_overhead_s: 30.0,
        start_after_first_round: true,
        ..SimConfig::default()
    }
}

fn policies(scheduling: &str, placement: &str) -> Policies {
    let module = |kind: &str, policy: &str| ModuleConfig {
        policy: policy.to_string(),
        line: 0,
        params: Section::empty(kind),
    };
    registry::build_policies(
        &module("admission", "accept-all"),
        &module("scheduling", scheduling),
        &module("placement", placement),
    )
    .unwrap()
}

fn run(
    jobs: Vec<SimJob>,
    scheduling: &str,
    placement: &str,
    sim: SimConfig,
) -> blox_sim::report::SimResult {
    let policies = policies(scheduling, placement);
    let run = RunConfig {
        round_s: Positive::of(60.0),
        ..RunConfig::default()
    };
    Simulation::new(policies, ClusterState::homogeneous(16, 4), run, sim, jobs)
        .unwrap()
        .run_to_end()
        .unwrap()
}

#[test]
fn rigid_duration_is_progress_target_over_goodput() {
    // One GPU at the initial batch: gain is 1 per step, so the duration is
    // P* x step time at the initial batch.
    let cifar = app("cifar10");
    let d = rigid_duration_s(&cifar, 1, cifar.limits.m0, 4).unwrap();
    let (step, _) = cifar.step_time(&[1], cifar.limits.m0 as f64).unwrap();
    assert!((d - cifar.target_progress() * step).abs() < 1e-6 * d, "{d}");
    let d8 = rigid_duration_s(&cifar, 8, 1024, 4).unwrap();
    assert!(d8 < d && d8 > d / 64.0);
}

/// A lone fixed-batch job at M0 on one GPU: seen at the first round boundary
/// (60 s), 30 s restart delay, then P* iterations of one step time each, up to
/// the whole-second rounding of each epoch crossing.
#[test]
fn lone_job_finishes_after_delay_plus_target_over_rate() {
    let cifar = app("cifar10");
    let jobs = vec![job(
        0,
        10.0,
        1,
        &cifar,
        BatchAgent::Fixed {
            batch: cifar.limits.m0,
        },
    )];
    let res = run(jobs, "fifo", "first-free", artifact_sim());
    let row = &res.jobs[0];
    let (step, _) = cifar.step_time(&[1], cifar.limits.m0 as f64).unwrap();
    let expect = 60.0 + 30.0 + cifar.target_progress() * step;
    let finish = row.finish_s.unwrap();
    assert_eq!(finish, finish.round(), "completion times are whole seconds");
    assert!(
        (finish - expect).abs() <= 0.5 * cifar.max_epochs as f64,
        "{finish} vs {expect}"
    );
    assert_eq!(row.jct_s.unwrap(), finish - 10.0);
    // Attained service: held from the launch at 60 s to the end, on one GPU.
    assert!((row.gpu_seconds - (finish - 60.0)).abs() < 1e-6);
}

/// Interference slows only distributed jobs sharing a node with another one.
#[test]
fn interference_slows_colocated_distributed_jobs() {
    let cifar = app("cifar10");
    let mk = || {
        vec![
            job(0, 0.0, 6, &cifar, BatchAgent::Fixed { batch: 1024 }),
            job(1, 0.0, 6, &cifar, BatchAgent::Fixed { batch: 1024 }),
        ]
    };
    // first-free on 4-GPU nodes puts job 0 on nodes 0–1 and job 1 on nodes 1–2.
    let base = run(mk(), "fifo", "first-free", artifact_sim());
    let slow = run(
        mk(),
        "fifo",
        "first-free",
        SimConfig {
            interference: 0.5,
            ..artifact_sim()
        },
    );
    for (a, b) in base.jobs.iter().zip(&slow.jobs) {
        let (ja, jb) = (a.jct_s.unwrap() - 90.0, b.jct_s.unwrap() - 90.0);
        assert!((jb / ja - 2.0).abs() < 0.02, "{ja} -> {jb}");
    }
}

#[test]
fn pollux_agent_reports_its_model_and_adapts_the_batch() {
    let cifar = app("cifar10");
    let jobs = vec![job(
        0,
        0.0,
        4,
        &cifar,
        BatchAgent::Pollux {
            fixed_batch: None,
            replica_cap: None,
            search: Default::default(),
            fit_tol: None,
        },
    )];
    let policies = policies("fifo", "first-free");
    let mut sim = Simulation::new(
        policies,
        ClusterState::homogeneous(1, 4),
        RunConfig {
            round_s: Positive::of(60.0),
            ..RunConfig::default()
        },
        artifact_sim(),
        jobs,
    )
    .unwrap();
    for _ in 0..5 {
        sim.step().unwrap();
    }
    let m = sim.round_loop.jobs.metrics().of_job(JobId(0));
    assert!(
        m.contains_key("pollux.alpha_c") && m.contains_key("pollux.grad_var"),
        "{m:?}"
    );
    assert_eq!(m["pollux.max_profiled_replicas"], 4.0);
    let bs = sim
        .round_loop
        .jobs
        .get(JobId(0))
        .unwrap()
        .current_batch_size
        .unwrap();
    assert!(bs > cifar.limits.m0 && bs <= cifar.limits.mmax, "{bs}");
}

fn pollux_agent() -> BatchAgent {
    BatchAgent::Pollux {
        fixed_batch: None,
        replica_cap: None,
        search: Default::default(),
        fit_tol: None,
    }
}

#[test]
fn ones_runs_jobs_at_the_batch_it_chooses_with_linear_lr_scaling() {
    let cifar = app("cifar10");
    let mut j = job(0, 0.0, 2, &cifar, pollux_agent());
    j.spec.batch_size = Some(256);
    let mut sim = Simulation::new(
        policies("ones", "explicit"),
        ClusterState::homogeneous(1, 4),
        RunConfig {
            round_s: Positive::of(60.0),
            ..RunConfig::default()
        },
        SimConfig {
            elastic_overhead_s: Some(1.0),
            ..artifact_sim()
        },
        vec![j],
    )
    .unwrap();
    sim.step().unwrap();
    // Start: one GPU at the per-GPU batch 256 / 2 = 128 (ONES §3.3.2).
    let job = sim.round_loop.jobs.get(JobId(0)).unwrap();
    assert_eq!(job.allocation.len(), 1);
    assert_eq!(job.current_batch_size, Some(128));
    // cifar10 epochs are short: after its warm-up epochs the job grew, and its
    // learning rate follows the batch linearly (reported a round later).
    for _ in 0..10 {
        sim.step().unwrap();
        let job = sim.round_loop.jobs.get(JobId(0)).unwrap();
        let m = sim.round_loop.jobs.metrics().of_job(JobId(0));
        if job.allocation.len() > 1 && m.get("lr_scale") == Some(&(job.allocation.len() as f64)) {
            break;
        }
    }
    let job = sim.round_loop.jobs.get(JobId(0)).unwrap();
    let m = sim.round_loop.jobs.metrics().of_job(JobId(0));
    let gpus = job.allocation.len() as u32;
    assert!(gpus > 1, "{job:?}");
    assert_eq!(job.current_batch_size, Some(128 * gpus));
    assert_eq!(m["lr_scale"], gpus as f64);
    assert!(
        m["samples_processed"] > 0.0 && m["throughput"] > 0.0,
        "{m:?}"
    );
    let r = sim.run_to_end().unwrap();
    assert_eq!(r.summary.jobs_finished, 1);
}

#[test]
fn an_elastic_move_costs_the_elastic_overhead_not_a_restart() {
    // Two cifar10 jobs under ONES: the first is scaled while the second runs;
    // with elastic scaling (1 s) the total is lower than with 30 s restarts.
    let cifar = app("cifar10");
    let jobs = || {
        (0..3)
            .map(|i| {
                let mut j = job(i, 600.0 * i as f64, 1, &cifar, pollux_agent());
                j.spec.batch_size = Some(128);
                j
            })
            .collect::<Vec<_>>()
    };
    let with = |elastic: Option<f64>| {
        run(
            jobs(),
            "ones",
            "explicit",
            SimConfig {
                elastic_overhead_s: elastic,
                ..artifact_sim()
            },
        )
    };
    let elastic = with(Some(1.0));
    let restart = with(None);
    assert_eq!(elastic.summary.jobs_finished, 3);
    assert!(
        elastic.summary.avg_jct_s < restart.summary.avg_jct_s,
        "elastic {} s vs restart {} s",
        elastic.summary.avg_jct_s,
        restart.summary.avg_jct_s
    );
}
