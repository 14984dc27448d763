//! Synergy in the simulator: job speed follows the CPUs and memory a job gets
//! (host profiles), and Synergy-TUNE uses that (OSDI'22 §4.3).

// The built-in policies, registered by name.
use blox_core::*;
use blox_policies as _;
use blox_sim::backend::SimConfig;
use blox_sim::host_profile::{self, HostProfiles};
use blox_sim::workload::SimJob;
use blox_sim::{SimBackend, Simulation};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn profiles() -> HostProfiles {
    host_profile::read(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../data/blox/derived/model_profiles__models_dir.csv"),
    )
    .unwrap()
}

/// Synergy's servers: 8 GPUs, 24 CPUs, 500 GB.
fn servers(n: u32) -> ClusterState {
    let mut c = ClusterState::new();
    for _ in 0..n {
        let mut s = NodeSpec::with_gpus(8);
        s.cpus = 24;
        s.host_mem_gb = 500.0;
        c.add_node(s);
    }
    c
}

fn job(id: u64, arrival: f64, gpus: u32, model: &str, duration_s: f64) -> SimJob {
    let mut spec = JobSpec::new(id, arrival, gpus).with_duration(duration_s);
    spec.model = Some(model.into());
    SimJob::of_duration(spec, duration_s)
}

fn synergy(mode: &str) -> Policies {
    let mut t = blox_core::config::Table::new();
    t.insert("mode".into(), mode.into());
    let sched = Section::from_table("scheduling", t);
    registry::build_policies(
        &ModuleConfig {
            policy: "accept-all".into(),
            line: 0,
            params: Section::empty("admission"),
        },
        &ModuleConfig {
            policy: "synergy".into(),
            line: 0,
            params: sched,
        },
        &ModuleConfig {
            policy: "synergy".into(),
            line: 0,
            params: Section::empty("placement"),
        },
    )
    .unwrap()
}

/// JCT by job id.
fn run(mode: &str, jobs: Vec<SimJob>, cluster: ClusterState) -> BTreeMap<u64, f64> {
    let run = RunConfig {
        round_s: Positive::of(60.0),
        ..RunConfig::default()
    };
    let mut s = Simulation::new(synergy(mode), cluster, run, SimConfig::default(), jobs).unwrap();
    s.backend = std::mem::replace(
        &mut s.backend,
        SimBackend::new(SimConfig::default(), 60.0, Vec::new(), &ClusterState::new()),
    )
    .with_host_profiles(profiles());
    let r = s.run_to_end().unwrap();
    r.jobs
        .iter()
        .map(|j| (j.job_id, j.jct_s.expect("finished")))
        .collect()
}

#[test]
fn a_cpu_hungry_job_runs_at_its_profiled_speedup_with_its_best_share() {
    // alexnet: 2.94x with 12 CPUs and 125 GB per GPU (its profile).
    let jobs = || vec![job(0, 0.0, 1, "alexnet", 3600.0)];
    let prop = run("proportional", jobs(), servers(1));
    let tune = run("tune", jobs(), servers(1));
    assert!((prop[&0] - 3600.0).abs() < 1e-6, "{prop:?}");
    assert!((tune[&0] - 3600.0 / 2.94).abs() < 1e-6, "{tune:?}");
    // A CPU-insensitive model gains nothing.
    let t = run(
        "tune",
        vec![job(0, 0.0, 1, "transformer", 3600.0)],
        servers(1),
    );
    assert!((t[&0] - 3600.0).abs() < 1e-6);
}

#[test]
fn tune_packs_cpu_light_and_cpu_hungry_jobs_and_no_job_runs_slower() {
    // One server, 24 CPUs: six language jobs that need only 1 CPU leave room
    // for alexnet's 12 and mobilenet's 6. Proportional gives everyone 3.
    let models = [
        "alexnet",
        "transformer",
        "gnmt",
        "mobilenet",
        "lstm",
        "bert",
        "vae",
        "transformer",
    ];
    let jobs = || {
        models
            .iter()
            .enumerate()
            .map(|(i, m)| job(i as u64, 0.0, 1, m, 7200.0))
            .collect::<Vec<_>>()
    };
    let prop = run("proportional", jobs(), servers(1));
    let tune = run("tune", jobs(), servers(1));
    for (id, t) in &prop {
        assert!((t - 7200.0).abs() < 1e-6, "job {id}: {t}");
    }
    assert!(
        (tune[&0] - 7200.0 / 2.94).abs() < 1e-6,
        "alexnet {}",
        tune[&0]
    );
    assert!(
        (tune[&3] - 7200.0 / 1.55).abs() < 1e-6,
        "mobilenet {}",
        tune[&3]
    );
    for (id, t) in &tune {
        assert!(*t <= prop[id] + 1e-6, "job {id}: {t} > {}", prop[id]);
    }
}

#[test]
fn a_job_whose_model_has_no_profile_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.csv");
    std::fs::write(
        &trace,
        "job_id,arrival_s,num_gpus,duration_s,model\n0,0,1,60,alexnet\n1,0,1,60,gpt5\n",
    )
    .unwrap();
    let profiles = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/blox/derived/model_profiles__models_dir.csv");
    let cfg = format!(
        "[cluster]\nnodes = 1\ngpus_per_node = 8\n[workload]\npath = {:?}\nhost_profiles = {:?}\n[scheduling]\npolicy = \"synergy\"\n[placement]\npolicy = \"synergy\"\n",
        trace.display().to_string(),
        profiles.display().to_string()
    );
    let c = dir.path().join("c.toml");
    std::fs::write(&c, cfg).unwrap();
    let config = blox_sim::load_config(&c, None, &[]).unwrap();
    let e = Simulation::from_config(&config)
        .err()
        .expect("fails")
        .to_string();
    assert!(e.contains("job-1: model `gpt5`"), "{e}");
    assert!(e.contains("c.toml:6:"), "the host_profiles line: {e}");
}

/// A placement that gives a job more CPUs than its server has.
struct Greedy;

impl PlacementPolicy for Greedy {
    fn place(&mut self, _: &RoundInfo, s: &Schedule, _: &JobState, _: &ClusterState) -> Placement {
        Placement {
            preempt: Vec::new(),
            launch: s
                .entries
                .iter()
                .map(|d| Assignment {
                    job: d.job,
                    gpus: vec![GpuId(0)],
                    batch_size: None,
                    host: Some(HostShare {
                        cpus_per_gpu: 30.0,
                        mem_gb_per_gpu: 10.0,
                    }),
                    share: None,
                    node: None,
                })
                .collect(),
        }
    }
}

#[test]
fn the_loop_refuses_a_placement_that_oversubscribes_a_servers_cpus() {
    let mut p = synergy("tune");
    p.placement = Box::new(Greedy);
    p.names.placement = "greedy".into();
    let run = RunConfig {
        round_s: Positive::of(60.0),
        ..RunConfig::default()
    };
    let mut s = Simulation::new(
        p,
        servers(1),
        run,
        SimConfig::default(),
        vec![job(0, 0.0, 1, "alexnet", 600.0)],
    )
    .unwrap();
    let e = loop {
        match s.step() {
            Ok(true) => continue,
            Ok(false) => panic!("the run finished"),
            Err(e) => break blox_core::error_chain(&e),
        }
    };
    assert!(
        e.contains("greedy") && e.contains("30.00 CPUs") && e.contains("24 CPUs"),
        "{e}"
    );
    assert!(s.round_loop.cluster.num_busy() == 0, "nothing was launched");
}
