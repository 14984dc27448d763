//! A simulation turns its oldest ended jobs into table rows as it goes
//! (`Simulation::ended_kept`) instead of holding every ended `Job` whole
//! (ten million of them were 6 GB). The tables must not depend
//! on when that happens: never, or after every round, the rows, the rounds
//! and the event log are the same — also for a policy that learns from
//! the jobs that ended (ONES trains its predictor on them).

use blox_config::Override;
use blox_sim::{load_config, SimResult, Simulation};
use std::path::{Path, PathBuf};

// The policies register themselves when linked.
use blox_policies as _;

fn config(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The run's tables and its event log, keeping `kept` ended jobs whole.
fn run(path: &Path, sets: &[(&str, &str)], kept: usize) -> (SimResult, Vec<u8>, usize) {
    let overrides: Vec<Override> = sets.iter().map(|(k, v)| Override::set(k, v)).collect();
    let cfg = load_config(path, None, &overrides).unwrap();
    let mut sim = Simulation::from_config(&cfg).unwrap();
    sim.ended_kept = kept;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    sim.log_events(&log).unwrap();
    let mut most_held = 0;
    while sim.step().unwrap() {
        most_held = most_held.max(sim.round_loop.jobs.finished().len());
    }
    let events = std::fs::read(&log).unwrap();
    (sim.finish(), events, most_held)
}

fn same_tables(path: &Path, sets: &[(&str, &str)], jobs: usize) {
    let (whole, whole_log, held_whole) = run(path, sets, usize::MAX);
    let (rows, rows_log, held_rows) = run(path, sets, 1);
    assert_eq!(whole.jobs.len(), jobs);
    assert_eq!(held_whole, jobs, "nothing compacted when every job is kept");
    assert!(
        held_rows < jobs / 4,
        "ended jobs became rows as the run went ({held_rows} held at most of {jobs})"
    );
    assert!(whole.jobs == rows.jobs, "job rows differ");
    assert!(whole.rounds == rows.rounds, "round rows differ");
    assert_eq!(whole.summary.jobs_finished, rows.summary.jobs_finished);
    assert_eq!(
        whole.summary.avg_jct_s.to_bits(),
        rows.summary.avg_jct_s.to_bits()
    );
    assert!(!whole_log.is_empty());
    assert!(whole_log == rows_log, "event logs differ");
}

#[test]
fn rows_made_as_jobs_end_are_the_rows_made_at_the_end() {
    // A slice of the scale benchmark, overloaded so that jobs wait and end
    // in every round.
    same_tables(
        &config("examples/configs/scale-1m.toml"),
        &[
            ("workload.num_jobs", "3000"),
            ("cluster.nodes", "8"),
            ("workload.jobs_per_hour", "40"),
        ],
        3000,
    );
}

#[test]
fn a_policy_that_learns_from_ended_jobs_decides_the_same() {
    same_tables(&config("examples/configs/ones-sc21/ones.toml"), &[], 400);
}
