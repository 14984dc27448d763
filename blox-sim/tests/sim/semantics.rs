//! The simulator's time accounting, the Blox compatibility mode, and loop invariants
//! under random workloads and policy combinations.

use blox_config::Config;
use blox_core::*;
use blox_sim::{SimConfig, SimJob, Simulation};
use proptest::prelude::*;
use std::path::Path;

use blox_policies as _;

fn module(kind: &str, policy: &str) -> ModuleConfig {
    ModuleConfig {
        policy: policy.to_string(),
        line: 0,
        params: Section::empty(kind),
    }
}

fn policies(a: &str, s: &str, p: &str) -> Policies {
    blox_core::registry::build_policies(
        &module("admission", a),
        &module("scheduling", s),
        &module("placement", p),
    )
    .unwrap()
}

fn job(id: u64, arrival: f64, gpus: u32, duration: f64) -> SimJob {
    SimJob::of_duration(
        JobSpec::new(id, arrival, gpus).with_duration(duration),
        duration,
    )
}

fn run(
    jobs: Vec<SimJob>,
    nodes: u32,
    gpus: u32,
    round_s: f64,
    sim: SimConfig,
    pol: (&str, &str, &str),
) -> blox_sim::SimResult {
    let run = RunConfig {
        round_s: Positive::new(round_s).unwrap(),
        ..RunConfig::default()
    };
    Simulation::new(
        policies(pol.0, pol.1, pol.2),
        ClusterState::homogeneous(nodes, gpus),
        run,
        sim,
        jobs,
    )
    .unwrap()
    .run_to_end()
    .unwrap()
}

#[test]
fn exact_mode_finishes_jobs_at_their_true_completion_time() {
    let jobs = vec![job(0, 0.0, 2, 450.0), job(1, 10.0, 2, 100.0)];
    let r = run(
        jobs,
        1,
        2,
        300.0,
        SimConfig::default(),
        ("accept-all", "fifo", "first-free"),
    );
    let j0 = &r.jobs[0];
    assert_eq!(j0.first_start_s, Some(0.0));
    assert_eq!(j0.finish_s, Some(450.0));
    assert_eq!(j0.gpu_seconds, 900.0);
    // Job 1 arrived at 10 s, got GPUs at the first round after job 0 ended (600 s).
    let j1 = &r.jobs[1];
    assert_eq!(j1.first_start_s, Some(600.0));
    assert_eq!(j1.finish_s, Some(700.0));
    assert_eq!(j1.jct_s, Some(690.0));
    assert_eq!(j1.queueing_s, Some(590.0));
}

#[test]
fn restart_overhead_delays_progress_after_a_preemption() {
    // SRTF: job 1 (50 s) arrives while job 0 (200 s) runs; at the next round job 1
    // has less left, so job 0 is preempted and pays 30 s to come back.
    let sim = SimConfig {
        restart_overhead_s: 30.0,
        ..SimConfig::default()
    };
    let jobs = vec![job(0, 0.0, 1, 200.0), job(1, 50.0, 1, 50.0)];
    let r = run(jobs, 1, 1, 60.0, sim, ("accept-all", "srtf", "first-free"));
    assert_eq!(r.jobs[0].preemptions, 1);
    // Job 0: 60 s done in round 0, preempted at 60; job 1 runs 60..110, GPU back at 120.
    assert_eq!(r.jobs[1].finish_s, Some(110.0));
    // Job 0 relaunched at 120, progress from 150, 140 s left -> 290 s.
    assert_eq!(r.jobs[0].finish_s, Some(290.0));
    // The overhead is held GPU time: 60 + 30 + 140 GPU-seconds.
    assert_eq!(r.jobs[0].gpu_seconds, 230.0);
}

#[test]
fn round_quantized_mode_reproduces_blox_completion_times() {
    // blox-sim-semantics.md: finish = launch + ceil(duration / R) * R for every job,
    // first start reported one round after the launch.
    let cfg_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/configs/blox-recipe-fifo.toml"),
    )
    .unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/configs");
    let cfg = Config::parse(
        &cfg_text,
        "blox-recipe-fifo.toml",
        &base,
        &[
            ("workload.num_jobs".into(), "400".into()),
            ("run.track_jobs".into(), "[0, 399]".into()),
        ],
    )
    .unwrap();
    let trace = blox_sim::workload::load(&cfg.section("workload"), cfg.run.seed).unwrap();
    let r = Simulation::from_config(&cfg).unwrap().run_to_end().unwrap();
    let round = 300.0;
    let mut checked = 0;
    for (row, j) in r.jobs.iter().zip(&trace) {
        assert_eq!(row.job_id, j.spec.id.0);
        let launch = row.first_start_s.unwrap() - round;
        assert_eq!(launch % round, 0.0, "launches happen on round boundaries");
        let expected = launch + (j.duration_s() / round).ceil() * round;
        assert!(
            (row.finish_s.unwrap() - expected).abs() < 1e-6,
            "job {}: {row:?}",
            row.job_id
        );
        checked += 1;
    }
    assert_eq!(checked, 400);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    // Under any workload and any combination of shipped policies, every round keeps
    // the loop's invariants (a violation aborts the run), every job finishes, none
    // starts before it arrives, and without overheads each job receives exactly its
    // work in GPU-seconds.
    #[test]
    fn any_policy_combination_keeps_invariants_and_conserves_work(
        raw in proptest::collection::vec((0u32..4000, 1u32..9, 1u32..3000), 1..40),
        adm in prop::sample::select(vec!["accept-all", "load-based"]),
        sch in prop::sample::select(vec!["fifo", "las", "srtf"]),
        pla in prop::sample::select(vec!["first-free", "consolidated"]),
        quantized in any::<bool>(),
    ) {
        let jobs: Vec<SimJob> = raw
            .iter()
            .enumerate()
            .map(|(i, &(a, g, d))| job(i as u64, a as f64, g, d as f64))
            .collect();
        let mut sorted = jobs.clone();
        sorted.sort_by(|a, b| a.spec.arrival_s.total_cmp(&b.spec.arrival_s));
        let sim = SimConfig { round_quantized: quantized, ..SimConfig::default() };
        let r = run(sorted, 2, 4, 120.0, sim, (adm, sch, pla));
        prop_assert_eq!(r.jobs.len(), jobs.len());
        for row in &r.jobs {
            let j = &jobs[row.job_id as usize];
            prop_assert_eq!(row.status.as_str(), "finished");
            prop_assert!(row.first_start_s.unwrap() >= j.spec.arrival_s);
            prop_assert!(row.jct_s.unwrap() >= j.duration_s() - 1e-6);
            if !quantized {
                let work = j.duration_s() * j.spec.requested_gpus as f64;
                prop_assert!((row.gpu_seconds - work).abs() < 1e-6 * work.max(1.0),
                    "job {} got {} GPU-s for {} of work", row.job_id, row.gpu_seconds, work);
            }
        }
    }
}
