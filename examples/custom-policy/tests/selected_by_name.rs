//! The example policy is chosen by name from a config and changes the schedule.

use blox_config::Config;
use blox_core::JobId;
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
    let r = run(dir.path(), &[]);
    assert_eq!(r.summary.policies.scheduling, "fewest-gpus-first");
    assert_eq!(first_start(&r, 1), 0.0);
    assert!(first_start(&r, 0) >= 600.0);
    let _ = JobId(0);
}

#[test]
fn its_parameters_come_from_the_config() {
    let dir = tempdir();
    let r = run(
        dir.path(),
        &[("scheduling.largest_first".into(), "true".into())],
    );
    assert_eq!(first_start(&r, 0), 0.0);
    assert!(first_start(&r, 1) >= 600.0);
}

#[test]
fn a_mistyped_parameter_is_reported_with_its_line() {
    let dir = tempdir();
    std::fs::write(
        dir.path().join("trace.csv"),
        "job_id,arrival_s,num_gpus,duration_s\n",
    )
    .unwrap();
    let src = format!("{CONFIG}largest_frist = true\n");
    let cfg = Config::parse(&src, "custom.toml", dir.path(), &[]).unwrap();
    let err = Simulation::from_config(&cfg)
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        err.contains("largest_frist") && err.contains("custom.toml:14"),
        "{err}"
    );
}

/// A scratch directory, removed when the test is done with it.
fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("custom-policy-test-")
        .tempdir()
        .unwrap()
}

#[test]
fn spread_takes_each_gpu_from_the_emptiest_node() {
    use blox_core::*;
    use custom_policy::spread::Spread;
    let mut cluster = ClusterState::homogeneous(2, 4);
    let mut jobs = JobState::new();
    // Job 0 holds three GPUs of node 0; job 1 (3 GPUs) arrives.
    let held = vec![GpuId(0), GpuId(1), GpuId(2)];
    cluster.assign(JobId(0), &held).unwrap();
    let mut j0 = Job::new(JobSpec::new(0, 0.0, 3));
    j0.status = JobStatus::Running;
    j0.allocation = held;
    jobs.insert(j0);
    jobs.insert(Job::new(JobSpec::new(1, 1.0, 3)));
    let order: Vec<&Job> = jobs.runnable().collect();
    let round = RoundInfo {
        round: 0,
        now_s: 0.0,
        round_s: 60.0,
        wall_clock: false,
    };
    let p = Spread::default().place(&round, &Schedule::in_priority_order(order), &jobs, &cluster);
    assert!(p.preempt.is_empty());
    let gpus = &p.launch[0].gpus;
    let on_node1 = gpus
        .iter()
        .filter(|g| cluster.node_of(**g) == Some(NodeId(1)))
        .count();
    // Node 1 has 4 free GPUs, node 0 one: node 1 stays the emptiest for all three.
    assert_eq!((gpus.len(), on_node1), (3, 3), "{gpus:?}");
    // With both nodes empty, a 2-GPU job spans both.
    let empty = ClusterState::homogeneous(2, 4);
    let mut jobs = JobState::new();
    jobs.insert(Job::new(JobSpec::new(5, 0.0, 2)));
    let order: Vec<&Job> = jobs.runnable().collect();
    let p = Spread::default().place(&round, &Schedule::in_priority_order(order), &jobs, &empty);
    assert_eq!(empty.nodes_spanned(&p.launch[0].gpus), 2);
}

#[test]
fn max_waiting_defers_beyond_its_limit_and_rejects_large_jobs() {
    use blox_core::*;
    let cfg = Config::parse(
        "[cluster]\nnodes = 1\ngpus_per_node = 4\n[admission]\npolicy = \"max-waiting\"\nlimit = 2\nmax_gpus = 2\n",
        "a.toml",
        Path::new("."),
        &[],
    )
    .unwrap();
    let mut adm = blox_core::registry::build_admission(&cfg.admission).unwrap();
    let waiting: Vec<Job> = [(0, 1), (1, 4), (2, 1), (3, 1)]
        .iter()
        .map(|&(id, g)| Job::new(JobSpec::new(id, 0.0, g)))
        .collect();
    let round = RoundInfo {
        round: 0,
        now_s: 0.0,
        round_s: 60.0,
        wall_clock: false,
    };
    let d = adm.admit(
        &round,
        &waiting,
        &JobState::new(),
        &ClusterState::homogeneous(1, 4),
    );
    assert_eq!(
        d.accept,
        vec![JobId(0), JobId(2)],
        "two admitted, job 3 waits"
    );
    assert_eq!(d.reject.len(), 1);
    assert_eq!(d.reject[0].0, JobId(1));
}
