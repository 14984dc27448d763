//! The same round loop on real processes: a trace through the simulator and
//! through the local backend (compressed time: 1 s rounds, jobs of seconds)
//! with the same policies; crashes, bad commands and preemption with resume.

#[path = "suite/common/mod.rs"]
mod common;

use blox_core::*;
use blox_runtime::{LocalBackend, LocalConfig};
use common::{policies, preemption_trace, run_sim, toy, TOY};
use std::collections::BTreeMap;

fn spec(id: u64, arrival: f64, gpus: u32, dur: f64, argv: Vec<String>) -> JobSpec {
    let mut s = JobSpec::new(id, arrival, gpus).with_duration(dur);
    s.command = argv;
    s
}

/// Runs the loop on real processes until every job ended; returns the ended
/// jobs and the backend (for its launch counts).
fn run_real(
    scheduling: &str,
    jobs: Vec<JobSpec>,
    cluster: ClusterState,
    cfg: LocalConfig,
) -> (Vec<Job>, BTreeMap<JobId, u32>) {
    let n = jobs.len();
    let mut b = LocalBackend::new(cfg, &cluster, jobs).unwrap();
    let mut lp = RoundLoop::new(policies(scheduling), cluster, 1.0);
    let t = std::time::Instant::now();
    while !(b.exhausted() && lp.is_idle()) {
        let r = lp.run_round(&mut b).unwrap();
        if std::env::var("BLOX_TEST_TRACE").is_ok() {
            eprintln!(
                "real t={:.2} launched {:?} preempted {:?} ended {:?}",
                r.time_s, r.launched, r.preempted, r.ended
            );
        }
        assert!(t.elapsed().as_secs() < 120, "the run did not finish");
    }
    let ended = lp.jobs.finished().to_vec();
    assert_eq!(ended.len(), n, "every job ended");
    let launches = b.launches();
    (ended, launches)
}

#[test]
fn the_same_trace_and_policy_give_the_same_schedule_in_simulation_and_for_real() {
    // 2 nodes x 2 logical GPUs; LAS preempts, so jobs are suspended and resumed.
    // Durations end mid-round: a job ending exactly on a round boundary ends
    // a few ms late for real (process start and exit), which can flip a
    // decision taken at that boundary.
    let trace = preemption_trace();
    let dir = tempfile::tempdir().unwrap();
    let jobs = trace
        .iter()
        .enumerate()
        .map(|(id, &(a, g, d))| spec(id as u64, a, g, d, toy(d, &[])))
        .collect();
    let (real, launches) = run_real(
        "las",
        jobs,
        ClusterState::homogeneous(2, 2),
        LocalConfig::new(dir.path()),
    );
    let sim = run_sim("las", &trace, ClusterState::homogeneous(2, 2));
    let mut diffs = Vec::new();
    for j in &real {
        assert_eq!(j.status, JobStatus::Finished, "{:?}", j.end_reason);
        let r = j.jct_s().unwrap();
        let s = sim[j.id().0 as usize];
        diffs.push((r - s).abs() / s);
        eprintln!("{}: real {r:.2} s, simulated {s:.2} s", j.id());
    }
    let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
    eprintln!("mean |real - sim| / sim = {:.1} %", 100.0 * mean);
    assert!(
        mean < 0.05,
        "JCTs differ by {:.1} % on average",
        100.0 * mean
    );
    // Someone was preempted and resumed from its checkpoint.
    assert!(launches.values().any(|&n| n > 1), "{launches:?}");
}

#[test]
fn a_crashed_job_resumes_from_its_checkpoint_and_a_bad_one_fails_with_its_status() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = vec![
        // Crashes at 50 % on its first launch, then resumes and finishes.
        spec(0, 0.0, 1, 2.0, toy(2.0, &["--fail-at", "0.5"])),
        // No duration: exits with status 2 every time.
        spec(1, 0.0, 1, 1.0, vec![TOY.to_string()]),
        // A program that does not exist.
        spec(2, 0.0, 1, 1.0, vec!["/nonexistent/blox-job".to_string()]),
        // An ordinary job beside them finishes.
        spec(3, 0.0, 1, 1.0, toy(1.0, &[])),
    ];
    let mut cfg = LocalConfig::new(dir.path());
    cfg.max_retries = 1;
    let (ended, launches) = run_real("fifo", jobs, ClusterState::homogeneous(1, 4), cfg);
    let by: BTreeMap<u64, &Job> = ended.iter().map(|j| (j.id().0, j)).collect();
    assert_eq!(by[&0].status, JobStatus::Finished);
    assert_eq!(launches[&JobId(0)], 2);
    // It resumed: the second launch started from the checkpointed iteration.
    let d0 = blox_runtime::local::job_dir(dir.path(), JobId(0));
    let err1 = std::fs::read_to_string(d0.join("launch-1/stderr")).unwrap();
    assert!(
        err1.contains("failing on purpose at iteration 50"),
        "{err1}"
    );
    let err2 = std::fs::read_to_string(d0.join("launch-2/stderr")).unwrap();
    // From its last checkpoint before the crash (every 25 iterations).
    assert!(err2.contains("resumed at iteration 25"), "{err2}");
    assert_eq!(by[&1].status, JobStatus::Failed);
    assert!(
        by[&1]
            .end_reason
            .as_deref()
            .unwrap()
            .contains("exit status 2"),
        "{:?}",
        by[&1].end_reason
    );
    assert_eq!(launches[&JobId(1)], 2, "retried once");
    assert_eq!(by[&2].status, JobStatus::Failed);
    assert!(
        by[&2]
            .end_reason
            .as_deref()
            .unwrap()
            .contains("cannot start"),
        "{:?}",
        by[&2].end_reason
    );
    assert_eq!(by[&3].status, JobStatus::Finished);
}

#[test]
fn a_job_without_a_command_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let e = LocalBackend::new(
        LocalConfig::new(dir.path()),
        &ClusterState::homogeneous(1, 1),
        vec![JobSpec::new(4, 0.0, 1)],
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("job-4: no command"), "{e}");
}

#[test]
fn the_ranks_of_a_preempted_job_stop_and_resume_at_the_same_iteration() {
    // One process per GPU: job 0 runs as ranks 0 and 1; LAS preempts it for
    // job 1, and both ranks must checkpoint the same step (two-phase revocation).
    let dir = tempfile::tempdir().unwrap();
    let jobs = vec![
        spec(0, 0.0, 2, 3.5, toy(3.5, &[])),
        spec(1, 1.2, 2, 1.3, toy(1.3, &[])),
    ];
    let mut cfg = LocalConfig::new(dir.path());
    cfg.process_per_gpu = true;
    let (ended, launches) = run_real("las", jobs, ClusterState::homogeneous(1, 2), cfg);
    assert!(ended.iter().all(|j| j.status == JobStatus::Finished));
    assert_eq!(launches[&JobId(0)], 2, "preempted once and resumed");
    let d0 = blox_runtime::local::job_dir(dir.path(), JobId(0)).join("launch-2");
    let r0 = std::fs::read_to_string(d0.join("stderr.rank0")).unwrap();
    let r1 = std::fs::read_to_string(d0.join("stderr.rank1")).unwrap();
    assert!(r0.contains("resumed at iteration"), "{r0}");
    assert_eq!(r0, r1, "both ranks resumed from the same step");
    let fixed = std::fs::read_to_string(
        blox_runtime::local::job_dir(dir.path(), JobId(0)).join("launch-1/job/exit_at"),
    )
    .unwrap();
    assert!(
        r0.contains(&format!("resumed at iteration {}", fixed.trim())),
        "{r0} vs exit_at {fixed}"
    );
}

#[test]
fn a_profiled_job_steps_at_the_model_profiles_speed_and_applies_a_new_batch_size() {
    // The toy job with the Pollux artifact's cifar10 profile (time compressed) on
    // 2 GPUs; halfway the scheduler doubles its batch size (ONES-style, no
    // restart) and the iteration time follows the profile.
    let traces = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/pollux/traces");
    let profile = blox_goodput::AppProfile::load(&traces, "cifar10").unwrap();
    let m0 = profile.limits.m0;
    let raw = |b: u32| {
        let local = (b as f64 / 2.0).max(profile.limits.bmin as f64);
        profile.step_time_or_nearest(&[2], local).unwrap().0
    };
    // Scaled so that an iteration at the initial batch takes 7.5 ms.
    let scale = 0.0075 / raw(m0);
    let step = |b: u32| raw(b) * scale;
    let dir = tempfile::tempdir().unwrap();
    let argv = vec![
        TOY.to_string(),
        "--profile".into(),
        traces.display().to_string(),
        "--model".into(),
        "cifar10".into(),
        "--iterations".into(),
        "400".into(),
        "--time-scale".into(),
        scale.to_string(),
    ];
    let cluster = ClusterState::homogeneous(1, 2);
    let mut b = LocalBackend::new(
        LocalConfig::new(dir.path()),
        &cluster,
        vec![spec(0, 0.0, 2, 1.0, argv)],
    )
    .unwrap();
    let mut lp = RoundLoop::new(policies("fifo"), cluster, 0.5);
    let mut reconfigured = false;
    let t = std::time::Instant::now();
    while !(b.exhausted() && lp.is_idle()) {
        let r = lp.run_round(&mut b).unwrap();
        if let Some(j) = lp.jobs.get(JobId(0)) {
            if !reconfigured && j.is_running() && j.progress > 0.1 {
                let info = RoundInfo {
                    round: r.round,
                    now_s: r.time_s,
                    round_s: 0.5,
                    wall_clock: false,
                };
                b.reconfigure(&info, j, 2 * m0).unwrap();
                reconfigured = true;
            }
        }
        assert!(t.elapsed().as_secs() < 60, "the job did not finish");
    }
    assert!(reconfigured);
    assert_eq!(lp.jobs.finished()[0].status, JobStatus::Finished);
    let err = std::fs::read_to_string(
        blox_runtime::local::job_dir(dir.path(), JobId(0)).join("launch-1/stderr"),
    )
    .unwrap();
    assert!(
        err.contains(&format!(
            "GPUs [2], batch {m0}: {:.6} s per iteration",
            step(m0)
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("batch {}", 2 * m0))
            && err.contains(&format!("{:.6} s per iteration", step(2 * m0))),
        "{err}"
    );
    assert!(
        step(2 * m0) > step(m0),
        "a larger batch takes longer per step"
    );
}

#[test]
fn a_job_without_gpus_runs_as_one_process_that_sees_no_gpu() {
    // Under `fgd`, which places jobs without GPUs on a node's CPUs: the
    // job without GPUs runs beside a one-GPU job, sees no device, and ends.
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let argv = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        // It notes what it sees, then trains as the toy job does.
        format!(
            "printf '[%s]' \"$CUDA_VISIBLE_DEVICES\" > '{}' && exec \"$0\" \"$@\"",
            seen.display()
        ),
    ]
    .into_iter()
    .chain(toy(1.0, &[]))
    .collect();
    let mut cpu = spec(0, 0.0, 0, 1.0, argv);
    cpu.host_need = Some(HostShare {
        cpus_per_gpu: 2.0,
        mem_gb_per_gpu: 1.0,
    });
    let jobs = vec![cpu, spec(1, 0.0, 1, 1.0, toy(1.0, &[]))];
    let cluster = ClusterState::homogeneous(1, 2);
    let mut b = LocalBackend::new(LocalConfig::new(dir.path()), &cluster, jobs).unwrap();
    let p = registry::build_named("accept-all", "fifo", "fgd").unwrap();
    let mut lp = RoundLoop::new(p, cluster, 1.0);
    let t = std::time::Instant::now();
    let mut on_node = None;
    while !(b.exhausted() && lp.is_idle()) {
        lp.run_round(&mut b).unwrap();
        if let Some(j) = lp.jobs.get(JobId(0)).filter(|j| j.is_running()) {
            on_node = j.host_node;
            assert!(j.allocation.is_empty());
        }
        assert!(t.elapsed().as_secs() < 60, "the run did not finish");
    }
    assert_eq!(on_node, Some(NodeId(0)));
    for j in lp.jobs.finished() {
        assert_eq!(
            j.status,
            JobStatus::Finished,
            "{}: {:?}",
            j.id(),
            j.end_reason
        );
    }
    assert_eq!(lp.jobs.finished().len(), 2);
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "[]",
        "no GPU visible"
    );
}
