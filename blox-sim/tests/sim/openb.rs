//! The openb pod lists (Alibaba's 2023 GPU trace) through the round loop:
//! which rows become jobs, shares of one GPU under `fgd`, GPU models kept,
//! tasks without GPUs on a node's CPUs, the fragmentation columns, and
//! whole GPUs under a whole-GPU placement.

use blox_sim::workload::openb;
use blox_sim::{load_config, Simulation};

use blox_policies as _;

const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model
n0,32000,131072,2,T4
n1,32000,131072,2,V100M16
";

const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
half-a,4000,8192,1,500,,LS,Running,0,3600,0
half-b,4000,8192,1,500,,LS,Running,0,3600,0
pair,8000,16384,2,1000,,LS,Running,60,660,60
cpu,2000,4096,0,0,,LS,Running,0,100,0
v100,2000,4096,1,300,V100M16,LS,Running,120,720,120
untimed,2000,4096,1,300,,LS,Running,,,
toomuch,2000,4096,1,1200,,LS,Running,0,10,0
huge,64000,4096,2,1000,,LS,Running,0,10,0
";

fn files() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (n, p) = (dir.path().join("nodes.csv"), dir.path().join("pods.csv"));
    std::fs::write(&n, NODES).unwrap();
    std::fs::write(&p, PODS).unwrap();
    (dir, n, p)
}

#[test]
fn pod_list_rows_become_jobs_or_are_counted_by_reason() {
    let (_d, nodes, pods) = files();
    let (jobs, tally) = openb::read(&pods, &nodes).unwrap();
    let names: Vec<&str> = jobs.iter().map(|j| j.spec.name.as_str()).collect();
    assert_eq!(names, ["half-a", "half-b", "cpu", "pair", "v100"]);
    let half = &jobs[0].spec;
    assert_eq!((half.requested_gpus, half.gpu_milli), (1, Some(500)));
    let host = half.host_need.unwrap();
    assert_eq!((host.cpus_per_gpu, host.mem_gb_per_gpu), (4.0, 8.0));
    assert_eq!(jobs[0].duration_s(), 3600.0);
    // No GPU: its CPUs and memory in all.
    let cpu = &jobs[2].spec;
    assert_eq!((cpu.requested_gpus, cpu.gpu_milli), (0, None));
    let host = cpu.host_need.unwrap();
    assert_eq!((host.cpus_per_gpu, host.mem_gb_per_gpu), (2.0, 4.0));
    let pair = &jobs[3].spec;
    assert_eq!(
        (pair.requested_gpus, pair.gpu_milli, pair.arrival_s),
        (2, None, 60.0)
    );
    assert_eq!(pair.host_need.unwrap().cpus_per_gpu, 4.0, "per GPU");
    assert_eq!(jobs[4].spec.elasticity.gpu_types, ["V100M16"]);
    let skipped: Vec<(&str, u64, u64)> = (tally.skipped.iter())
        .map(|(k, (n, l))| (k.as_str(), *n, *l))
        .collect();
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    // 64 CPUs: more than any node has; the reference fails it, and here it
    // would wait for ever.
    assert!(
        skipped
            .iter()
            .any(|s| s.0.contains("no node could hold") && s.2 == 9),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|s| s.0.contains("over 1000") && s.2 == 8),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|s| s.0.contains("creation_time") && s.2 == 7),
        "{skipped:?}"
    );
    assert_eq!(tally.rows, tally.jobs + tally.skipped_rows());
}

/// The config of [`simulate`], written beside the lists; returns its path.
fn config_file(dir: &std::path::Path, placement: &str, workload: &str) -> std::path::PathBuf {
    let nodes = dir.join("nodes.csv");
    let pods = dir.join("pods.csv");
    let path = dir.join(format!("run-{placement}.toml"));
    let config = format!(
        r#"
[[cluster.node_groups]]
count = 1
gpus = 2
gpu_type = "T4"
cpus = 32
host_mem_gb = 128
[[cluster.node_groups]]
count = 1
gpus = 2
gpu_type = "V100M16"
cpus = 32
host_mem_gb = 128
[run]
round_s = 60
seed = 1
[sim]
launch_overhead_s = 0
restart_overhead_s = 0
[workload]
kind = "openb"
path = "{}"
nodes = "{}"
{workload}
[admission]
policy = "accept-all"
[scheduling]
policy = "fifo"
[placement]
policy = "{placement}"
"#,
        pods.display(),
        nodes.display()
    );
    std::fs::write(&path, config).unwrap();
    path
}

#[test]
fn a_what_if_from_the_middle_of_a_run_restores_the_shares_and_decides_the_same() {
    use blox_sim::whatif::{self, History};
    let (dir, _, _) = files();
    let cfg = load_config(&config_file(dir.path(), "fgd", ""), None, &[]).unwrap();
    let mut s = Simulation::from_config(&cfg).unwrap();
    s.keep_events();
    while s.step().unwrap() {}
    let log = s.take_events();
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    // At 300 s both halves share their GPU and the pair holds two more.
    let h = History::from_events(&log, Some(300.0), &sim, 60.0).unwrap();
    assert_eq!(h.shares.len(), 2, "{:?}", h.shares);
    assert!(h.shares.values().all(|m| *m == 500));
    let r = whatif::replay(&h, &cfg, "same", None).unwrap();
    let d = r.against_history(&h, 0).unwrap();
    assert!(
        d.is_same(),
        "{:?}",
        &d.differences[..d.differences.len().min(5)]
    );
    assert!(
        r.notes.iter().all(|n| !n.contains("does not have free")),
        "{:?}",
        r.notes
    );
}

fn simulate(placement: &str, workload: &str) -> Result<blox_sim::SimResult, String> {
    let (dir, _, _) = files();
    let cfg = load_config(&config_file(dir.path(), placement, workload), None, &[]).unwrap();
    let sim = Simulation::from_config(&cfg).map_err(|e| e.to_string())?;
    Ok(sim.run_to_end().unwrap())
}

#[test]
fn under_fgd_two_halves_share_a_gpu_and_a_bound_job_runs_on_its_model() {
    let r = simulate("fgd", "").unwrap();
    assert_eq!(r.summary.jobs_finished, 5, "{}", r.summary);
    // The halves share one GPU (of the T4 node, the first of equal
    // scores), the pair takes both V100s (the T4 node has one idle GPU
    // left), and the V100-bound share waits for them: the loop would
    // refuse it anywhere else.
    let wait = |name: &str| r.jobs.iter().find(|j| j.name == name).unwrap().queueing_s;
    for name in ["half-a", "half-b", "pair"] {
        assert_eq!(wait(name), Some(0.0), "{name} waited");
    }
    assert_eq!(wait("v100"), Some(540.0));
    let first = &r.rounds[0];
    assert_eq!(first.busy_gpus, 1, "two halves on one GPU");
    assert!(first.figure("frag_percent").is_some());
    let names: Vec<&str> = r.summary.figures.iter().map(|f| f.0).collect();
    assert_eq!(names, ["frag_gpus", "frag_percent"]);
    assert!(r.summary.to_string().contains("frag_percent"));
}

#[test]
fn under_fgd_a_task_without_gpus_runs_on_a_nodes_cpus_and_holds_no_gpu() {
    let r = simulate("fgd", "").unwrap();
    let cpu = r.jobs.iter().find(|j| j.name == "cpu").unwrap();
    assert_eq!(cpu.queueing_s, Some(0.0));
    assert_eq!(cpu.jct_s, Some(100.0), "{cpu:?}");
    assert_eq!(cpu.num_gpus, 0);
    // Its CPUs are taken while it runs: the first round's free CPUs are
    // the nodes' 64 less the halves' 8 and its 2.
    let first = &r.rounds[0];
    assert_eq!(first.busy_gpus, 1);
    assert_eq!(first.running_jobs, 3);
}

#[test]
fn a_whole_gpu_placement_gives_each_share_its_own_gpu() {
    // first-free neither shares nor keeps jobs to their models: FIFO then
    // refuses the V100-bound job before the run, naming it.
    let e = simulate("first-free", "").err().unwrap();
    assert!(
        e.contains("refuses job job-4 (v100)") && e.contains("V100M16"),
        "{e}"
    );
    // Without it, the halves take a GPU each, and the task without GPUs
    // is rejected, saying why: first-free places only jobs with GPUs.
    let r = simulate("first-free", "num_jobs = 3").unwrap();
    let first = &r.rounds[0];
    assert_eq!(first.busy_gpus, 2);
    let cpu = r.jobs.iter().find(|j| j.name == "cpu").unwrap();
    let why = cpu.reason.as_str();
    assert!(
        why.contains("asks for 0 GPUs") && why.contains("`first-free` places only jobs with GPUs"),
        "{why}"
    );
    assert!(first.figures.is_empty());
    assert!(!r.summary.to_string().contains("frag_percent"));
}

#[test]
fn a_gzipped_pod_list_is_recognised_by_its_header() {
    use std::io::Write;
    let (dir, _, pods) = files();
    let gz = dir.path().join("pods.csv.gz");
    let mut w = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    w.write_all(PODS.as_bytes()).unwrap();
    w.finish().unwrap();
    assert_eq!(blox_sim::workload::detect_format(&gz).unwrap(), "openb");
    assert_eq!(blox_sim::workload::detect_format(&pods).unwrap(), "openb");
}

/// The `fgd` run of the lists with a forecaster: (its folder, the
/// forecaster, the simulation at its start).
fn forecasting() -> (
    tempfile::TempDir,
    blox_sim::forecast::SimForecaster,
    Simulation,
) {
    let (dir, _, _) = files();
    let path = config_file(dir.path(), "fgd", "");
    let text = std::fs::read_to_string(&path).unwrap() + "[forecast]\nmax_wall_s = 600\n";
    std::fs::write(&path, text).unwrap();
    let cfg = load_config(&path, None, &[]).unwrap();
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    let fc = blox_sim::forecast::SimForecaster::from_config(&cfg, &sim)
        .unwrap()
        .unwrap();
    let s = Simulation::from_config(&cfg).unwrap();
    (dir, fc, s)
}

#[test]
fn a_forecast_from_a_cluster_with_shares_predicts_when_the_bound_job_starts() {
    use blox_forecast::Forecaster;
    let (_dir, fc, mut s) = forecasting();
    // At 180 s the halves share a GPU, the pair holds both V100s, and the
    // V100-bound job waits for them (it starts at 660 s).
    for _ in 0..4 {
        s.step().unwrap();
    }
    let snap = s.snapshot();
    assert!(snap.cluster.has_shares());
    let f = fc.forecast(&snap).unwrap();
    let v100 = (snap.jobs.active())
        .find(|j| j.spec.name == "v100")
        .map(|j| j.id())
        .unwrap();
    assert_eq!(
        f.get(v100).and_then(|p| p.start_s),
        Some(660.0),
        "{:?}",
        f.get(v100)
    );
}

#[test]
fn every_scheduling_policy_runs_a_task_without_gpus_under_fgd_or_refuses_it_by_name() {
    // Each registered scheduling policy, with `fgd` placing: the run
    // either ends with the task without GPUs finished, or is refused
    // before it starts, naming the policy (one that resizes jobs or needs
    // a model the trace does not give). Nothing panics or hangs.
    let (dir, _, _) = files();
    let mut ran = Vec::new();
    for entry in blox_core::registry::scheduling_entries() {
        let path = config_file(dir.path(), "fgd", "");
        let set = [blox_config::Override::set(
            "scheduling.policy",
            &format!("\"{}\"", entry.name),
        )];
        let Ok(cfg) = load_config(&path, None, &set) else {
            continue;
        };
        let sim = match Simulation::from_config(&cfg) {
            Ok(s) => s,
            Err(e) => {
                let e = e.to_string();
                eprintln!("{}: refused: {e}", entry.name);
                assert!(
                    e.contains(entry.name) || e.contains("[scheduling]"),
                    "{}: {e}",
                    entry.name
                );
                continue;
            }
        };
        let r = match sim.run_to_end() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{}: stopped: {e}", entry.name);
                continue;
            }
        };
        eprintln!("{}: {}", entry.name, r.summary.jobs_finished);
        let cpu = r.jobs.iter().find(|j| j.name == "cpu").unwrap();
        if cpu.status == blox_core::JobStatus::Finished {
            ran.push(entry.name);
        } else {
            assert!(!cpu.reason.is_empty(), "{}: {cpu:?}", entry.name);
        }
    }
    for name in ["fifo", "las", "srtf", "tiresias"] {
        assert!(ran.contains(&name), "{name} did not run it: {ran:?}");
    }
}

#[test]
fn a_pod_list_without_times_is_refused_pointing_to_blox_pack() {
    let dir = tempfile::tempdir().unwrap();
    let (n, p) = (dir.path().join("nodes.csv"), dir.path().join("pods.csv"));
    std::fs::write(&n, NODES).unwrap();
    std::fs::write(
        &p,
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\nb,1000,1024,2,1000\n",
    )
    .unwrap();
    let e = openb::read(&p, &n).err().unwrap().to_string();
    assert!(
        e.contains("pods.csv")
            && e.contains("2 rows: 0 jobs")
            && e.contains("without creation_time")
            && e.contains("blox pack --trace"),
        "{e}"
    );
}

#[test]
fn a_forecast_while_a_task_without_gpus_runs_keeps_it_on_its_node_until_its_end() {
    use blox_forecast::Forecaster;
    let (_dir, fc, mut s) = forecasting();
    // After the first round the task without GPUs (0–100 s) runs on a
    // node's CPUs.
    s.step().unwrap();
    let snap = s.snapshot();
    let cpu = (snap.jobs.active()).find(|j| j.spec.name == "cpu").unwrap();
    assert!(cpu.is_running() && cpu.allocation.is_empty());
    let node = cpu.host_node.expect("on a node");
    assert_eq!(
        snap.cluster.host_hold_of(cpu.id()).map(|h| h.node),
        Some(node)
    );
    let f = fc.forecast(&snap).unwrap();
    let p = f.get(cpu.id()).unwrap();
    assert_eq!((p.start_s, p.finish_s), (None, Some(100.0)), "{p:?}");
}
