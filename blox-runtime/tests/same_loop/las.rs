//! The same round loop in simulation and on the gRPC runtime (Blox §6.3):
//! one trace through the simulator and through a scheduler with 2 workers ×
//! 2 logical GPUs on loopback.

use crate::common::*;
use crate::{submit_on_time, EARLY, ONE_AT_A_TIME};
use blox_config::Config;
use blox_core::round::events::What;
use blox_core::*;
use std::time::Duration;

/// A replay config without `[cluster]`: the log's nodes are the cluster.
fn replay_config(scheduling: &str) -> Config {
    let text = format!(
        "[run]\nround_s = 1\n[scheduling]\npolicy = \"{scheduling}\"\n[placement]\npolicy = \"consolidated\"\n"
    );
    let mut input = blox_config::ConfigInput::new(&text, "replay.toml", std::path::Path::new("."));
    input.cluster_optional = true;
    Config::from_input(input).unwrap()
}

#[test]
fn the_same_trace_gives_the_same_schedule_in_simulation_and_on_the_grpc_cluster() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Blox §6.3: scheduler + 2 workers × 2 logical GPUs, LAS with preemption,
    // compressed time (1 s rounds, jobs of seconds); durations end mid-round.
    let trace = preemption_trace();
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start_on_1s_rounds(dir.path(), "las", 2);
    // Each job is submitted `EARLY` before its trace time, on the
    // scheduler's round boundaries; its JCT is counted from its trace time.
    let ids = submit_on_time(&c, &trace, |_| Vec::new());
    let real = c.wait_all(&ids, Duration::from_secs(60));
    let sim = run_sim("las", &trace, ClusterState::homogeneous(2, 2));
    let mut diffs = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let j = &real[id];
        assert_eq!(j.status, "finished", "{}: {}", j.name, j.reason);
        let r = j.jct_s.unwrap() - EARLY;
        let s = sim[i];
        diffs.push((r - s).abs() / s);
        eprintln!("{}: real {r:.2} s, simulated {s:.2} s", j.name);
    }
    let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
    eprintln!("mean |real - sim| / sim = {:.1} %", 100.0 * mean);
    assert!(
        mean < 0.05,
        "JCTs differ by {:.1} % on average",
        100.0 * mean
    );
    // The scheduler's event log and the simulation's show the same
    // decisions: every admission, launch (on as many GPUs), preemption and
    // end, in the same round give or take one.
    let sim_events = dir.path().join("sim-events.jsonl");
    run_sim_logging_events("las", &trace, ClusterState::homogeneous(2, 2), &sim_events);
    let live = blox_eventlog::read(&dir.path().join("events.jsonl"), true).unwrap();
    let simulated = blox_eventlog::read(&sim_events, false).unwrap();
    let d = blox_eventlog::diff(&live, &simulated, 1);
    assert!(d.is_same(), "{:#?}", d.differences);
    let kinds = |k: &str| live.iter().filter(|e| e.what.kind() == k).count();
    assert_eq!(kinds("finished"), trace.len());
    assert!(kinds("preempted") > 0 && kinds("launched") > trace.len());
    assert_eq!(kinds("node_joined"), 2);
    // Wait reasons come from the loop: matched above kind by kind (a
    // `waiting-for-gpus` of a job in one log is one in the other, within a
    // round), and jobs did wait for GPUs.
    let waited = |k: &str| {
        live.iter()
            .filter(|e| matches!(&e.what, What::Waiting { wait_kind, .. } if wait_kind == k))
            .count()
    };
    assert!(waited("waiting-for-gpus") > 0 && waited("preempted") > 0);
    // The same test on recorded history: the live log replayed by `blox
    // whatif` under the scheduler's policies gives its decisions again.
    let cfg = replay_config("las");
    let sim_cfg = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    let h = blox_sim::whatif::History::from_events(&live, None, &sim_cfg, 1.0).unwrap();
    assert!(h.notes.is_empty(), "{:?}", h.notes);
    assert_eq!(h.future.len(), trace.len());
    let r = blox_sim::whatif::replay(&h, &cfg, "las", None).unwrap();
    let d = r.against_history(&h, 1).unwrap();
    assert!(d.is_same(), "{:#?}", d.differences);
    // Someone was preempted and resumed from its checkpoint.
    assert!(
        real.values().any(|j| j.launches > 1 && j.preemptions > 0),
        "{real:?}"
    );
}

/// What an operator tried: jobs of whole seconds on 1 s rounds
/// under FIFO, submitted as fast as a shell submits them, so every job
/// ends a few milliseconds after a round boundary (its start-up) and a
/// 4-GPU job holds the queue. `blox whatif` over the scheduler's log,
/// under its own policies and a config without `[cluster]`, makes every
/// decision in the same round give or take one: the replay gives each
/// job's launches the start-up the log measured, keeps to the log's
/// round grid, and compares rounds by time. (Before, the replay's finishes
/// came a round early and FIFO chained the error: 24 of 132 decisions
/// differed on the operator's 24 jobs.)
#[test]
#[ignore = "long (22 s of real time): the README's long tests, run by .ci/run with --ignored"]
fn a_live_fifo_log_of_whole_second_jobs_replays_decision_for_decision() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start_on_1s_rounds(dir.path(), "fifo", 2);
    let mut ctl = c.ctl();
    let jobs: [(u32, f64); 10] = [
        (1, 3.0),
        (2, 4.0),
        (1, 2.0),
        (4, 2.0),
        (1, 3.0),
        (2, 2.0),
        (1, 4.0),
        (2, 3.0),
        (1, 2.0),
        (4, 3.0),
    ];
    let mut ids = Vec::new();
    for (i, &(g, d)) in jobs.iter().enumerate() {
        ids.push(
            ctl.submit(job(&format!("j{i}"), g, toy(d, &[]), Some(d)))
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let real = c.wait_all(&ids, Duration::from_secs(90));
    assert!(real.values().all(|j| j.status == "finished"), "{real:?}");
    let live = blox_eventlog::read(&dir.path().join("events.jsonl"), true).unwrap();
    let cfg = replay_config("fifo");
    let sim_cfg = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    let h = blox_sim::whatif::History::from_events(&live, None, &sim_cfg, 1.0).unwrap();
    assert!(h.notes.is_empty(), "{:?}", h.notes);
    assert_eq!(h.startup.len(), jobs.len(), "each job's measured start-up");
    let r = blox_sim::whatif::replay(&h, &cfg, "fifo", None).unwrap();
    let d = r.against_history(&h, 1).unwrap();
    assert!(d.is_same(), "{} matched; {:#?}", d.matched, d.differences);
    assert!(d.matched >= 3 * jobs.len(), "{}", d.matched);
}
