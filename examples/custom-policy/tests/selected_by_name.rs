//! The example policy is chosen by name from a config and changes the schedule.

use blox_core::{Config, JobId};
use blox_sim::Simulation;
use std::path::Path;

// Link both policy crates so their registrations are present.
use blox_policies as _;
use custom_policy as _;

const CONFIG: &str = r#"
[cluster]
nodes = 1
gpus_per_node = 4

[run]
round_s = 60

[workload]
path = "trace.csv"

[scheduling]
policy = "fewest-gpus-first"
"#;

fn run(dir: &Path, scheduling_override: &[(String, String)]) -> blox_sim::SimResult {
    // Job 0 (4 GPUs) and job 1 (1 GPU) arrive together; FIFO would start job 0.
    std::fs::write(
        dir.join("trace.csv"),
        "job_id,arrival_s,num_gpus,duration_s\n0,0,4,600\n1,0,1,600\n",
    )
    .unwrap();
    let cfg = Config::parse(CONFIG, "custom.toml", dir, scheduling_override).unwrap();
    Simulation::from_config(&cfg).unwrap().run_to_end().unwrap()
}

fn first_start(r: &blox_sim::SimResult, id: u64) -> f64 {
    r.jobs
        .iter()
        .find(|j| j.job_id == id)
        .unwrap()
        .first_start_s
        .unwrap()
}

#[test]
fn config_selects_the_example_policy_and_small_job_runs_first() {
    let dir = tempdir();
    let r = run(&dir, &[]);
    assert_eq!(r.summary.policies.1, "fewest-gpus-first");
    assert_eq!(first_start(&r, 1), 0.0);
    assert!(first_start(&r, 0) >= 600.0);
    let _ = JobId(0);
}

#[test]
fn its_parameters_come_from_the_config() {
    let dir = tempdir();
    let r = run(&dir, &[("scheduling.largest_first".into(), "true".into())]);
    assert_eq!(first_start(&r, 0), 0.0);
    assert!(first_start(&r, 1) >= 600.0);
}

#[test]
fn a_mistyped_parameter_is_reported_with_its_line() {
    let dir = tempdir();
    std::fs::write(
        dir.join("trace.csv"),
        "job_id,arrival_s,num_gpus,duration_s\n",
    )
    .unwrap();
    let src = format!("{CONFIG}largest_frist = true\n");
    let cfg = Config::parse(&src, "custom.toml", &dir, &[]).unwrap();
    let err = Simulation::from_config(&cfg)
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        err.contains("largest_frist") && err.contains("custom.toml:14"),
        "{err}"
    );
}

fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "custom-policy-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
