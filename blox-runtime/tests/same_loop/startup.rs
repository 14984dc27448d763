//! The same round loop in simulation and on the gRPC runtime, with jobs that
//! take seconds to start (issue: a job preempted before its first iteration
//! never progresses). The jobs of the sim-vs-real trace spend 0.6–2.5 s
//! starting at every launch (`blox-toy-job --startup-s`, the simulator's
//! per-job `startup_s`); the loop protects them until they have run as long
//! again past their first iteration.

use crate::common::*;
use crate::{submit_on_time, EARLY, ONE_AT_A_TIME};
use blox_core::*;
use std::time::Duration;

/// Start-up of each job of the trace, seconds, chosen (by searching the
/// simulated schedule) so that no decision is a near tie: at every decision
/// the jobs' attained services differ by at least 0.3 GPU-s, and no launch's
/// protection or job's end falls within 0.15 s of a round boundary, where a
/// few ms of real latency would flip the decision.
const STARTUP: [f64; 6] = [1.11, 2.1, 2.42, 0.62, 1.28, 1.35];

#[test]
#[ignore = "long (19 s of real time): the README's long tests, run by .ci/run with --ignored"]
fn jobs_with_start_up_get_the_same_schedule_in_simulation_and_on_the_grpc_cluster() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let trace = preemption_trace();
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start_on_1s_rounds(dir.path(), "las", 2);
    let ids = submit_on_time(&c, &trace, |i| {
        vec!["--startup-s".into(), STARTUP[i].to_string()]
    });
    let real = c.wait_all(&ids, Duration::from_secs(120));
    let sim = run_sim_with_startup("las", &trace, ClusterState::homogeneous(2, 2), &STARTUP);
    let mut diffs = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let j = &real[id];
        assert_eq!(j.status, "finished", "{}: {}", j.name, j.reason);
        let r = j.jct_s.unwrap() - EARLY;
        let s = sim[i];
        diffs.push((r - s).abs() / s);
        eprintln!(
            "{}: real {r:.2} s ({} launches, {:.2} s starting), simulated {s:.2} s",
            j.name, j.launches, j.startup_s
        );
        if STARTUP[i] > 0.0 {
            // Every launch's start-up was measured and kept apart from the
            // productive service.
            let per_launch = j.startup_s / j.launches as f64;
            assert!(
                (STARTUP[i]..STARTUP[i] + 0.5).contains(&per_launch),
                "{}: {per_launch:.2} s of start-up per launch",
                j.name
            );
        }
    }
    let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
    eprintln!("mean |real - sim| / sim = {:.1} %", 100.0 * mean);
    assert!(
        mean < 0.05,
        "JCTs differ by {:.1} % on average",
        100.0 * mean
    );
    // LAS still preempts: someone was preempted and resumed.
    assert!(
        real.values().any(|j| j.launches > 1 && j.preemptions > 0),
        "{real:?}"
    );
    // No launch was wasted: nobody was stopped before its first iteration.
    assert!(real.values().all(|j| j.warning.is_empty()), "{real:?}");
}
