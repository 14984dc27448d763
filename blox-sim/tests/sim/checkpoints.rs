//! Checkpoints and lost work: a job that saves every so often goes back to
//! its last checkpoint when it is stopped, the loop counts the work lost,
//! and the same run without checkpoints (jobs save when stopped) loses none.

use blox_core::*;
use blox_sim::{SimConfig, SimJob, Simulation};
use proptest::prelude::*;

use blox_policies as _;

fn job(id: u64, arrival: f64, gpus: u32, duration: f64) -> SimJob {
    SimJob::of_duration(
        JobSpec::new(id, arrival, gpus).with_duration(duration),
        duration,
    )
}

fn module(kind: &str, policy: &str) -> ModuleConfig {
    ModuleConfig {
        policy: policy.to_string(),
        line: 0,
        params: Section::empty(kind),
    }
}

fn run(jobs: Vec<SimJob>, gpus: u32, scheduling: &str, every: Option<f64>) -> blox_sim::SimResult {
    let run = RunConfig {
        round_s: Positive::of(60.0),
        min_run_s: Some(NonNegative::new(0.0).unwrap()),
        checkpoint_interval_s: every.map(Positive::of),
        ..RunConfig::default()
    };
    let policies = registry::build_policies(
        &module("admission", "accept-all"),
        &module("scheduling", scheduling),
        &module("placement", "first-free"),
    )
    .unwrap();
    Simulation::new(
        policies,
        ClusterState::homogeneous(1, gpus),
        run,
        SimConfig::default(),
        jobs,
    )
    .unwrap()
    .run_to_end()
    .unwrap()
}

/// A (1,000 s) runs from 0; B (100 s) arrives at 600 s and SRTF preempts A
/// for it. B ends at 700 s; A starts again at the round at 720 s.
fn preempted_once(every: Option<f64>, own: Option<f64>) -> blox_sim::SimResult {
    let mut a = job(0, 0.0, 1, 1000.0);
    if let Some(i) = own {
        a.spec
            .metrics
            .insert(metric::CHECKPOINT_INTERVAL_S.into(), i);
    }
    run(vec![a, job(1, 600.0, 1, 100.0)], 1, "srtf", every)
}

#[test]
fn a_stop_goes_back_to_the_last_checkpoint_and_counts_the_loss() {
    // No checkpoints: A saves when stopped, loses nothing, ends at 720 + 400.
    let r = preempted_once(None, None);
    assert_eq!(r.jobs[0].preemptions, 1);
    assert_eq!(r.jobs[0].finish_s, Some(1120.0));
    assert_eq!(r.jobs[0].lost_work_gpu_seconds, 0.0);
    assert_eq!(r.summary.lost_work_gpu_s, 0.0);
    // Every 250 s past its first iteration: saved at 250 and 500, stopped at
    // 600; the 100 s since are lost and done again (ends 100 s later).
    let r = preempted_once(Some(250.0), None);
    assert_eq!(r.jobs[0].lost_work_gpu_seconds, 100.0);
    assert_eq!(r.jobs[0].finish_s, Some(1220.0));
    assert_eq!(r.summary.lost_work_gpu_s, 100.0);
    assert!(r.summary.to_string().contains("lost work"), "{}", r.summary);
    // A job's own interval wins over the run's.
    let r = preempted_once(Some(250.0), Some(120.0));
    assert_eq!(r.jobs[0].lost_work_gpu_seconds, 0.0, "saved at 600 itself");
    let r = preempted_once(None, Some(550.0));
    assert_eq!(r.jobs[0].lost_work_gpu_seconds, 50.0);
    assert_eq!(r.jobs[0].finish_s, Some(1170.0));
}

#[test]
fn a_job_reports_its_cost_of_stopping() {
    let mut j = Job::new(JobSpec::new(0, 0.0, 2));
    j.status = JobStatus::Running;
    j.allocation = vec![GpuId(0), GpuId(1)];
    assert_eq!(j.last_checkpoint_s(100.0), None, "still starting");
    j.reached_first_iteration(10.0, 10.0);
    // Saves when stopped: only the restart costs.
    assert_eq!(j.uncheckpointed_s(100.0), 0.0);
    assert_eq!(j.preemption_cost_gpu_s(100.0, 99.0), 2.0 * 10.0);
    j.spec
        .metrics
        .insert(metric::CHECKPOINT_INTERVAL_S.into(), 30.0);
    assert_eq!(j.last_checkpoint_s(100.0), Some(100.0));
    assert_eq!(j.last_checkpoint_s(99.0), Some(70.0));
    assert_eq!(j.preemption_cost_gpu_s(99.0, 0.0), 2.0 * (29.0 + 10.0));
    // A checkpoint a real job reported is what counts, late or early.
    j.checkpoint_s = Some(65.0);
    assert_eq!(j.uncheckpointed_s(99.0), 34.0);
    // Without an interval it saves when stopped: nothing is lost.
    j.spec.metrics.clear();
    assert_eq!(j.uncheckpointed_s(99.0), 0.0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Any mix under LAS: every job ends; the work lost is what checkpoints
    /// leave (none without them, never more than the GPU-time held), and
    /// lost work is done again, so no job ends sooner with checkpoints.
    #[test]
    fn lost_work_is_bounded_and_redone(
        spec in proptest::collection::vec((1u32..3, 60.0f64..2000.0, 0.0f64..3000.0), 1..16),
        every in 30.0f64..900.0,
    ) {
        let mut jobs: Vec<SimJob> = spec
            .iter()
            .enumerate()
            .map(|(i, (g, d, a))| job(i as u64, a.round(), *g, d.round()))
            .collect();
        jobs.sort_by(|a, b| a.spec.arrival_s.total_cmp(&b.spec.arrival_s));
        let plain = run(jobs.clone(), 4, "las", None);
        let saved = run(jobs, 4, "las", Some(every));
        prop_assert_eq!(plain.summary.lost_work_gpu_s, 0.0);
        for (j, p) in saved.jobs.iter().zip(&plain.jobs) {
            prop_assert!(j.is_finished() && p.is_finished());
            prop_assert!(j.lost_work_gpu_seconds >= 0.0);
            prop_assert!(j.lost_work_gpu_seconds <= j.productive_gpu_seconds + 1e-6);
            // The work done is the same: what was lost was done again.
            let k = f64::from(j.num_gpus);
            let need = spec[j.job_id as usize].1.round() * k;
            prop_assert!(
                (j.productive_gpu_seconds - j.lost_work_gpu_seconds - need).abs() < 1e-3,
                "job {}: productive {} lost {} need {}",
                j.job_id, j.productive_gpu_seconds, j.lost_work_gpu_seconds, need
            );
            if j.preemptions == 0 && j.lost_work_gpu_seconds == 0.0 {
                continue;
            }
            prop_assert!(j.lost_work_gpu_seconds < j.preemptions as f64 * every * k + 1e-6);
        }
    }
}
