//! The production-trace readers on the vendored format samples
//! (`data/samples/`): which rows become jobs, with what GPU count, arrival
//! and run time; which rows are counted as unmappable and why; and a whole
//! simulation from a `kind = "helios"` / `kind = "pai"` config.

use blox_sim::workload::stream::Tally;
use blox_sim::workload::{helios, pai, HeliosKeys, PaiKeys};
use blox_sim::{load_config, SimJob, Simulation};
use std::path::{Path, PathBuf};

use blox_policies as _;

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/samples")
}

/// (name, arrival, GPUs, run time) of every job.
fn view(jobs: &[SimJob]) -> Vec<(String, f64, u32, f64)> {
    jobs.iter()
        .map(|j| {
            (
                j.spec.name.clone(),
                j.spec.arrival_s,
                j.spec.requested_gpus,
                j.duration_s(),
            )
        })
        .collect()
}

fn skipped(t: &Tally) -> Vec<(&str, u64, u64)> {
    t.skipped
        .iter()
        .map(|(k, (n, line))| (k.as_str(), *n, *line))
        .collect()
}

fn s(x: &str) -> String {
    x.to_string()
}

#[test]
fn helios_rows_become_jobs_at_their_own_submit_times() {
    let path = samples().join("helios/cluster_log.csv");
    let (jobs, tally) = helios::read(&path, &HeliosKeys::default()).unwrap();
    assert_eq!(
        view(&jobs),
        vec![
            (s("jx01"), 0.0, 8, 7200.0),
            (s("jx06"), 110.0, 4, 10800.0),
            (s("jx02"), 170.0, 1, 600.0),
            (s("jx04"), 320.0, 16, 1800.0),
            (s("jx07"), 530.0, 1, 86400.0),
            (s("jx09"), 650.0, 32, 21600.0),
            (s("jx11"), 770.0, 2, 1800.0),
            (s("jx12"), 830.0, 8, 3600.0),
        ]
    );
    // Ids follow arrival order; users are kept; SRTF-style oracles see the run time.
    assert!(jobs
        .iter()
        .enumerate()
        .all(|(i, j)| j.spec.id.0 == i as u64));
    assert_eq!(jobs[0].spec.user.as_deref(), Some("u01"));
    assert_eq!(jobs[0].spec.expected_duration_s, Some(7200.0));
    assert_eq!((tally.rows, tally.jobs), (12, 8));
    assert_eq!(
        skipped(&tally),
        vec![
            ("CPU-only (gpu_num = 0)", 2, 4),
            ("no positive duration", 1, 6),
            ("unreadable submit_time", 1, 11),
        ]
    );
    assert_eq!(
        tally.rows,
        tally.jobs + tally.skipped_rows(),
        "every row is accounted for"
    );
}

#[test]
fn helios_states_filter_and_are_counted() {
    let path = samples().join("helios/cluster_log.csv");
    let keys = HeliosKeys {
        states: vec![s("COMPLETED")],
        jobs_per_hour: None,
    };
    let (jobs, tally) = helios::read(&path, &keys).unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j.spec.name.as_str()).collect();
    assert_eq!(names, ["jx01", "jx06", "jx02", "jx09", "jx11", "jx12"]);
    assert_eq!(tally.skipped["in state `FAILED` (not in `states`)"], (1, 5));
    assert_eq!(tally.rows, tally.jobs + tally.skipped_rows());
}

#[test]
fn pai_jobs_sum_gpus_over_tasks_and_run_from_first_launch_to_last_end() {
    let dir = samples().join("pai");
    let (jobs, tally) = pai::read(
        &dir.join("pai_job_table.csv"),
        &PaiKeys::default(),
        &dir.join("pai_task_table.csv"),
        None,
    )
    .unwrap();
    assert_eq!(
        view(&jobs),
        vec![
            // 2 workers x 100 % + a CPU parameter server.
            (s("a001"), 0.0, 2, 3595.0),
            (s("a004"), 30.0, 8, 7960.0),
            // Half a GPU rounds up to one.
            (s("a002"), 60.0, 1, 600.0),
            (s("a003"), 100.0, 4, 280.0),
            // 3 x 25 % = 0.75 GPU: one.
            (s("a007"), 350.0, 1, 640.0),
            // 2 instances x 200 %.
            (s("a009"), 500.0, 4, 7190.0),
        ]
    );
    assert_eq!((tally.rows, tally.jobs), (10, 6));
    assert_eq!(
        skipped(&tally),
        vec![
            ("CPU-only (no plan_gpu)", 1, 6),
            ("no positive run time (end <= start)", 1, 10),
            ("no run time", 1, 5),
            ("no task rows", 1, 8),
        ]
    );
    assert_eq!(tally.rows, tally.jobs + tally.skipped_rows());
}

#[test]
fn pai_instance_table_gives_run_times_and_statuses_filter() {
    let dir = samples().join("pai");
    let keys = PaiKeys {
        states: vec![s("Terminated")],
        ..Default::default()
    };
    let (jobs, tally) = pai::read(
        &dir.join("pai_job_table.csv"),
        &keys,
        &dir.join("pai_task_table.csv"),
        Some(&dir.join("pai_instance_table.csv")),
    )
    .unwrap();
    assert_eq!(
        view(&jobs),
        vec![
            (s("a001"), 0.0, 2, 3585.0),
            (s("a004"), 30.0, 8, 7750.0),
            (s("a002"), 60.0, 1, 550.0),
            (s("a007"), 350.0, 1, 620.0),
            (s("a009"), 500.0, 4, 7080.0),
            (s("a010"), 600.0, 1, 880.0),
        ]
    );
    assert_eq!(
        tally.skipped["in status `Failed` (not in `states`)"],
        (1, 3)
    );
    assert_eq!(tally.skipped["CPU-only (no plan_gpu)"], (1, 6));
    assert_eq!(tally.rows, tally.jobs + tally.skipped_rows());
}

#[test]
fn a_job_listed_twice_is_an_error_naming_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("pai_job_table.csv");
    std::fs::write(
        &jobs,
        "a,i,u,Terminated,1,2\nb,i,u,Terminated,1,2\na,i,u,Terminated,1,2\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("pai_task_table.csv"), "").unwrap();
    let e = pai::read(
        &jobs,
        &PaiKeys::default(),
        &dir.path().join("pai_task_table.csv"),
        None,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("pai_job_table.csv:3: column `job_name`"), "{e}");
    assert!(e.contains("listed twice (first on line 1)"), "{e}");
    // A missing table is an error naming it.
    std::fs::write(&jobs, "a,i,u,Terminated,1,2\n").unwrap();
    let e = pai::read(
        &jobs,
        &PaiKeys::default(),
        &dir.path().join("nope.csv"),
        None,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("nope.csv"), "{e}");
}

fn simulate(config: &str) -> blox_sim::SimResult {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.toml");
    std::fs::write(&path, config).unwrap();
    let cfg = load_config(&path, None, &[]).unwrap();
    Simulation::from_config(&cfg).unwrap().run_to_end().unwrap()
}

#[test]
fn a_helios_trace_runs_through_the_simulator_with_its_own_arrivals() {
    let log = samples().join("helios/cluster_log.csv");
    let r = simulate(&format!(
        r#"
[cluster]
nodes = 4
gpus_per_node = 8
[run]
round_s = 60
seed = 1
[workload]
path = "{}"
[admission]
policy = "accept-all"
[scheduling]
policy = "fifo"
[placement]
policy = "consolidated"
"#,
        log.display()
    ));
    assert_eq!(r.summary.jobs_finished, 8, "{}", r.summary);
    let first = r.jobs.iter().find(|j| j.name == "jx01").unwrap();
    assert_eq!(first.arrival_s, 0.0);
    assert!((first.finish_s.unwrap() - first.first_start_s.unwrap() - 7200.0).abs() < 1e-6);
}

#[test]
fn a_pai_trace_runs_and_can_be_retimed() {
    let dir = samples().join("pai");
    let config = |extra: &str| {
        format!(
            r#"
[cluster]
nodes = 2
gpus_per_node = 8
[run]
round_s = 60
seed = 1
[workload]
kind = "pai"
path = "{}"
{extra}
[admission]
policy = "accept-all"
[scheduling]
policy = "las"
[placement]
policy = "consolidated"
"#,
            dir.join("pai_job_table.csv").display()
        )
    };
    let own = simulate(&config(""));
    assert_eq!(own.summary.jobs_finished, 6);
    let arrivals = |r: &blox_sim::SimResult| r.jobs.iter().map(|j| j.arrival_s).collect::<Vec<_>>();
    assert_eq!(arrivals(&own), [0.0, 30.0, 60.0, 100.0, 350.0, 500.0]);
    let retimed = simulate(&config("jobs_per_hour = 2"));
    assert_eq!(retimed.summary.jobs_finished, 6);
    assert!(arrivals(&retimed).windows(2).all(|w| w[0] <= w[1]));
    assert!(arrivals(&retimed)[5] > 600.0, "{:?}", arrivals(&retimed));
}
