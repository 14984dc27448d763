//! openb pod lists with tasks without GPUs through the simulator and its
//! forks.

use super::*;

/// A small deterministic pod list: CPU-only tasks, shares and whole GPUs.
fn pods(n: usize, seed: u64) -> String {
    pods_with(n, seed, true)
}

fn pods_with(n: usize, seed: u64, cpu_only: bool) -> String {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = |m: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let mut s = String::from(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
    );
    let mut t = 0;
    for i in 0..n {
        t += next(90);
        let dur = 60 + next(3000);
        let (gpus, milli, cpu) = match next(4) {
            0 if cpu_only => (0, 0, 500 + next(12000)),
            0 => (1, 1000, 500 + next(12000)),
            1 => (1, 100 + next(800), 1000 + next(6000)),
            2 => (1, 1000, 2000 + next(8000)),
            _ => (2, 1000, 4000 + next(8000)),
        };
        let mem = 512 + next(16384);
        s += &format!(
            "t{i},{cpu},{mem},{gpus},{milli},,LS,Running,{t},{},{t}\n",
            t + dur
        );
    }
    s
}

const NODE_LIST: &str = "sn,cpu_milli,memory_mib,gpu,model
n0,16000,65536,2,T4
n1,16000,65536,2,T4
n2,24000,98304,4,T4
";

/// `[workload]` of the folder's `pods.csv` and `nodes.csv`, and `[placement]`.
fn openb_sections(dir: &Path, placement: &str) -> String {
    format!(
        "[workload]\nkind = \"openb\"\npath = \"{}\"\nnodes = \"{}\"\n[placement]\npolicy = \"{placement}\"\n",
        dir.join("pods.csv").display(),
        dir.join("nodes.csv").display()
    )
}

fn openb_cfg(dir: &Path, n: usize, extra: &str, placement: &str) -> blox_config::Config {
    std::fs::write(dir.join("nodes.csv"), NODE_LIST).unwrap();
    std::fs::write(dir.join("pods.csv"), pods(n, 7)).unwrap();
    let p = write_cfg(
        dir,
        &format!("openb-{placement}"),
        &[(2, 16, 64.0, 2), (4, 24, 96.0, 1)],
        &(openb_sections(dir, placement) + "[admission]\npolicy = \"accept-all\"\n" + extra),
    );
    load_config(&p, None, &[]).unwrap()
}

#[test]
fn an_openb_list_with_cpu_only_tasks_holds_the_invariants_every_round() {
    for placement in ["fgd", "share"] {
        let d = tempfile::tempdir().unwrap();
        let cfg = openb_cfg(d.path(), 400, "", placement);
        let s = Simulation::from_config(&cfg).unwrap();
        let r = run_checked(s).unwrap();
        let cpu = r.jobs.iter().filter(|j| j.num_gpus == 0).count();
        assert!(cpu > 50, "{cpu}");
        for j in &r.jobs {
            assert_eq!(j.status, JobStatus::Finished, "{placement}: {j:?}");
        }
    }
}

fn outputs(cfg: &blox_config::Config, dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let mut s = Simulation::from_config(cfg).unwrap();
    s.log_events(&dir.join("events.jsonl")).unwrap();
    let r = s.run_to_end().unwrap();
    r.write(dir).unwrap();
    (
        std::fs::read(dir.join("jobs.csv")).unwrap(),
        std::fs::read(dir.join("rounds.csv")).unwrap(),
    )
}

#[test]
fn the_same_openb_config_twice_gives_the_same_tables() {
    for (placement, extra) in [
        ("fgd", ""),
        ("share", ""),
        (
            "fgd",
            "[failures]\nmodel = \"exponential\"\ngpu_mtbf_h = 2\nrepair_h = 0.2\nseed = 5\n",
        ),
    ] {
        let d = tempfile::tempdir().unwrap();
        let cfg = openb_cfg(d.path(), 300, extra, placement);
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let x = outputs(&cfg, &a);
        let y = outputs(&cfg, &b);
        assert!(x.0 == y.0, "{placement} {extra}: jobs.csv differs");
        assert!(x.1 == y.1, "{placement} {extra}: rounds.csv differs");
        let ea = std::fs::read(a.join("events.jsonl")).unwrap();
        let eb = std::fs::read(b.join("events.jsonl")).unwrap();
        assert!(ea == eb, "{placement} {extra}: events differ");
    }
}

#[test]
fn what_if_from_the_middle_keeps_a_running_cpu_only_jobs_progress() {
    // t4 (no GPU, 713 s) runs from 120 s on node-1 and finishes at 833 s
    // (seen 840 s). A what-if from 600 s restores it with progress 0
    // (its work counted in GPU-seconds: none), so the replay runs it
    // again from the start: it finishes at 1313 s, and t8, which waits
    // for its CPUs, starts 480 s late.
    use blox_sim::whatif::{self, History};
    let d = tempfile::tempdir().unwrap();
    let cfg = openb_cfg(d.path(), 200, "", "fgd");
    let mut s = Simulation::from_config(&cfg).unwrap();
    s.keep_events();
    while s.step().unwrap() {}
    let log = s.take_events();
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    let h = History::from_events(&log, Some(600.0), &sim, 60.0).unwrap();
    let (t4, _) = h.active.iter().find(|(j, _)| j.spec.name == "t4").unwrap();
    assert!(t4.is_running() && t4.host_node.is_some());
    let r = whatif::replay(&h, &cfg, "same", None).unwrap();
    let replayed = r.result.jobs.iter().find(|j| j.name == "t4").unwrap();
    assert!(
        t4.progress > 0.5,
        "t4 ran 480 of its 713 s by 600 s, yet its progress is {} (replay finishes it at {:?}, the run at {:?})",
        t4.progress,
        replayed.finish_s,
        h.actual.get(&t4.id()).and_then(|a| a.finish_s)
    );
}

#[test]
fn forecasts_from_every_round_of_an_openb_run_with_cpu_only_jobs() {
    use blox_forecast::Forecaster;
    let d = tempfile::tempdir().unwrap();
    let cfg = openb_cfg(d.path(), 120, "[forecast]\nmax_wall_s = 600\n", "fgd");
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    let fc = blox_sim::forecast::SimForecaster::from_config(&cfg, &sim)
        .unwrap()
        .unwrap();
    let mut s = Simulation::from_config(&cfg).unwrap();
    let mut predicted: std::collections::HashMap<u64, f64> = Default::default();
    let mut rounds = 0;
    while s.step().unwrap() {
        rounds += 1;
        if rounds % 5 != 0 {
            continue;
        }
        let snap = s.snapshot();
        let f = fc.forecast(&snap).unwrap();
        for j in snap
            .jobs
            .active()
            .filter(|j| j.is_running() && j.without_gpus())
        {
            let p = f.get(j.id()).unwrap();
            let fin = p.finish_s.expect("a running job without GPUs finishes");
            // First prediction for a running job: remembered.
            predicted.entry(j.id().0).or_insert(fin);
        }
    }
    let r = s.finish();
    let mut off = Vec::new();
    for j in &r.jobs {
        if let Some(p) = predicted.get(&j.job_id) {
            let real = j.finish_s.unwrap();
            if (real - p).abs() > 60.0 + 1e-6 {
                off.push((j.name.clone(), *p, real));
            }
        }
    }
    assert!(!predicted.is_empty());
    // A running job without GPUs has nothing to wait for: its forecast
    // finish is its real one, within a round.
    assert!(off.is_empty(), "{off:?}");
}

#[test]
fn a_snapshot_of_a_cluster_with_cpu_only_jobs_reads_back_the_same() {
    let d = tempfile::tempdir().unwrap();
    let cfg = openb_cfg(d.path(), 200, "", "fgd");
    let mut s = Simulation::from_config(&cfg).unwrap();
    let mut seen = 0;
    for _ in 0..40 {
        if !s.step().unwrap() {
            break;
        }
        let snap = s.snapshot();
        if snap.cluster.host_holds().is_empty() {
            continue;
        }
        seen += 1;
        let text = toml::to_string(&snap.cluster).unwrap();
        let mut back: blox_core::ClusterState = toml::from_str(&text).unwrap();
        assert_eq!(back.host_holds(), snap.cluster.host_holds());
        for n in snap.cluster.nodes() {
            assert_eq!(back.host_used(n.id), snap.cluster.host_used(n.id));
            assert_eq!(back.hosted_on(n.id), snap.cluster.hosted_on(n.id));
        }
        back.check_all(&snap.jobs).unwrap();
    }
    assert!(seen > 0);
}

#[test]
fn track_jobs_over_cpu_only_jobs_ends_when_they_end() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(
        d.path(),
        "track",
        &[(2, 8, 64.0, 1)],
        "track_jobs = [1, 2]\n",
    );
    let cfg = load_config(&p, None, &[]).unwrap();
    let jobs = vec![
        job(0, 0.0, 2, None, 1.0, 1.0, 10_000.0),
        cpu_job(1, 0.0, 2.0, 2.0, 300.0),
        cpu_job(2, 60.0, 2.0, 2.0, 300.0),
        cpu_job(3, 120.0, 2.0, 2.0, 30_000.0),
    ];
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    assert_eq!(row(&r, "j1").status, JobStatus::Finished);
    assert_eq!(row(&r, "j2").status, JobStatus::Finished);
    eprintln!("{}", r.summary);
    assert!(r.summary.to_string().contains("2"), "{}", r.summary);
}

#[test]
fn every_scheduling_policy_that_starts_under_fgd_finishes_the_openb_list() {
    let mut bad = Vec::new();
    for entry in blox_core::registry::scheduling_entries() {
        let d = tempfile::tempdir().unwrap();
        let cfg0 = openb_cfg(d.path(), 150, "", "fgd");
        let _ = cfg0;
        let path = d.path().join("openb-fgd.toml");
        let set = [blox_config::Override::set(
            "scheduling.policy",
            &format!("\"{}\"", entry.name),
        )];
        let Ok(cfg) = load_config(&path, None, &set) else {
            continue;
        };
        let s = match Simulation::from_config(&cfg) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{}: refused: {e}", entry.name);
                continue;
            }
        };
        match run_checked(s) {
            Ok(r) => {
                let unfinished: Vec<_> = r
                    .jobs
                    .iter()
                    .filter(|j| j.status != JobStatus::Finished)
                    .map(|j| {
                        (
                            j.name.clone(),
                            j.num_gpus,
                            j.status.clone(),
                            j.reason.clone(),
                        )
                    })
                    .take(3)
                    .collect();
                eprintln!("{}: ran, unfinished {:?}", entry.name, unfinished);
                if !unfinished.is_empty() {
                    bad.push(format!("{}: {unfinished:?}", entry.name));
                }
            }
            Err(e) => {
                eprintln!("{}: FAILED mid-run: {e}", entry.name);
                bad.push(format!("{}: {e}", entry.name));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

fn one_node_cfg(dir: &Path, placement: &str) -> blox_config::Config {
    std::fs::write(
        dir.join("nodes.csv"),
        "sn,cpu_milli,memory_mib,gpu,model\nn0,16000,65536,2,T4\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("pods.csv"),
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
c,4000,1024,0,0,,LS,Running,0,3000,0
g1,8000,32768,1,1000,,LS,Running,60,2000,60
g2,8000,32768,1,1000,,LS,Running,60,2000,60
",
    )
    .unwrap();
    let p = write_cfg(
        dir,
        &format!("one-{placement}"),
        &[(2, 16, 64.0, 1)],
        &openb_sections(dir, placement),
    );
    load_config(&p, None, &[]).unwrap()
}

#[test]
fn what_if_under_a_whole_gpu_placement_of_an_fgd_run_with_a_cpu_only_job_running() {
    use blox_sim::whatif::{self, History};
    let d = tempfile::tempdir().unwrap();
    let fgd = one_node_cfg(d.path(), "fgd");
    let mut s = Simulation::from_config(&fgd).unwrap();
    s.keep_events();
    while s.step().unwrap() {}
    let log = s.take_events();
    let sim = blox_sim::SimConfig::from_section(&fgd.section("sim")).unwrap();
    let h = History::from_events(&log, Some(120.0), &sim, 60.0).unwrap();
    let ff = one_node_cfg(d.path(), "first-free");
    match whatif::replay(&h, &ff, "first-free", None) {
        Ok(r) => {
            eprintln!("notes {:?}", r.notes);
            for j in &r.result.jobs {
                eprintln!("{} {:?} {}", j.name, j.status, j.reason);
            }
        }
        Err(e) => panic!("the what-if failed: {}", chain(&e)),
    }
}

#[test]
fn cpu_only_jobs_with_spares_quarantine_and_failures() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(
        d.path(),
        "spares",
        &[(2, 8, 64.0, 5)],
        "checkpoint_interval_s = 120\n[failures]\nmodel = \"exponential\"\ngpu_mtbf_h = 1\nrepair_h = 0.3\nseed = 11\n",
    );
    let text = std::fs::read_to_string(&p).unwrap();
    let text = text.replacen(
        "[[cluster.node_groups]]",
        "[cluster]\nspares = 1\n[cluster.quarantine]\nfailures = 2\nwindow_h = 2\nprobation_h = 0.5\n[[cluster.node_groups]]",
        1,
    );
    std::fs::write(&p, text).unwrap();
    let cfg = match load_config(&p, None, &[]) {
        Ok(c) => c,
        Err(e) => panic!("{}", chain(&e)),
    };
    let mut jobs = Vec::new();
    for i in 0..80u64 {
        let at = (i / 4) as f64 * 90.0;
        jobs.push(match i % 4 {
            0 => cpu_job(i, at, 3.0, 20.0, 1500.0),
            1 => job(i, at, 1, Some(400), 1.0, 8.0, 900.0),
            2 => job(i, at, 2, None, 2.0, 8.0, 600.0),
            _ => cpu_job(i, at, 0.5, 1.0, 300.0),
        });
    }
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    eprintln!("{}", r.summary);
    assert!(r.jobs.iter().all(|j| j.status == JobStatus::Finished));
}

#[test]
fn a_node_without_gpus_hosts_cpu_only_jobs() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "nogpu", &[(0, 32, 128.0, 1), (1, 4, 16.0, 1)], "");
    let cfg = match load_config(&p, None, &[]) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("a node of 0 GPUs refused: {}", chain(&e));
            return;
        }
    };
    let jobs = vec![
        cpu_job(0, 0.0, 20.0, 64.0, 600.0),
        cpu_job(1, 0.0, 10.0, 32.0, 600.0),
        job(2, 0.0, 1, Some(500), 1.0, 1.0, 600.0),
    ];
    let s = match Simulation::with_jobs(&cfg, jobs) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("refused: {}", chain(&e));
            return;
        }
    };
    let r = run_checked(s).unwrap();
    for j in &r.jobs {
        assert_eq!(j.status, JobStatus::Finished, "{j:?}");
        assert_eq!(j.queueing_s, Some(0.0), "{j:?}");
    }
}

#[test]
fn every_share_scorer_places_cpu_only_tasks() {
    let mut bad = Vec::new();
    for scorer in [
        "fgd",
        "best-fit",
        "dot-product",
        "gpu-packing",
        "gpu-clustering",
        "random",
        "fgd-exact",
    ] {
        for placement in ["share", "fgd"] {
            let d = tempfile::tempdir().unwrap();
            let _ = openb_cfg(d.path(), 250, "", placement);
            let path = d.path().join(format!("openb-{placement}.toml"));
            let set = [blox_config::Override::set(
                "placement.scorer",
                &format!("\"{scorer}\""),
            )];
            let cfg = match load_config(&path, None, &set) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{placement}/{scorer}: config refused: {e}");
                    continue;
                }
            };
            let s = match Simulation::from_config(&cfg) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("{placement}/{scorer}: refused: {e}");
                    continue;
                }
            };
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_checked(s)));
            match r {
                Ok(Ok(r)) => {
                    let n = r
                        .jobs
                        .iter()
                        .filter(|j| j.status != JobStatus::Finished)
                        .count();
                    eprintln!("{placement}/{scorer}: {n} unfinished");
                    if n > 0 {
                        bad.push(format!("{placement}/{scorer}: {n} unfinished"));
                    }
                }
                Ok(Err(e)) => bad.push(format!("{placement}/{scorer}: {e}")),
                Err(_) => bad.push(format!("{placement}/{scorer}: panicked")),
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn a_snapshot_whose_hold_is_negative_or_not_the_jobs_need_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(d.path(), "neg", &[(2, 8, 64.0, 1)], "");
    let cfg = load_config(&p, None, &[]).unwrap();
    let jobs = vec![cpu_job(0, 0.0, 4.0, 8.0, 6000.0)];
    let mut s = Simulation::with_jobs(&cfg, jobs).unwrap();
    s.step().unwrap();
    let snap = s.snapshot();
    let text = toml::to_string(&snap.cluster).unwrap();
    eprintln!("{}", &text[text.find("[[hosted]]").unwrap_or(0)..]);
    let mut outcomes = Vec::new();
    for (from, to) in [
        ("cpus = 4.0", "cpus = -100.0"),
        ("cpus = 4.0", "cpus = 400.0"),
        ("cpus = 4.0", "cpus = 1.0"),
    ] {
        assert!(text.contains(from), "{text}");
        let bad = text.replace(from, to);
        let back: Result<blox_core::ClusterState, _> = toml::from_str(&bad);
        let outcome = match back {
            Err(e) => format!("{to}: refused on reading: {e}"),
            Ok(mut c) => match c.check_all(&snap.jobs) {
                Err(e) => format!("{to}: read, check_all refuses: {e}"),
                Ok(()) => format!(
                    "{to}: ACCEPTED, node-0 free {:?}",
                    c.host_free(blox_core::NodeId(0))
                ),
            },
        };
        eprintln!("{outcome}");
        outcomes.push(outcome);
    }
    // A hold below the job's need (1 of 4 CPUs) is read back too; only
    // the negative one is asserted on.
    assert!(!outcomes[0].contains("ACCEPTED"), "{outcomes:#?}");
}

#[test]
fn cpu_only_jobs_on_failing_nodes_with_start_ups_and_young_daly() {
    let d = tempfile::tempdir().unwrap();
    let p = write_cfg(
        d.path(),
        "yd",
        &[(2, 8, 64.0, 4)],
        "checkpoint = \"young-daly\"\ncheckpoint_save_s = 20\n[sim]\nlaunch_overhead_s = 45\nrestart_overhead_s = 90\n[failures]\nmodel = \"weibull\"\nweibull_shape = 0.7\ngpu_mtbf_h = 2\nrepair_h = 0.1\nseed = 9\n",
    );
    let cfg = match load_config(&p, None, &[]) {
        Ok(c) => c,
        Err(e) => panic!("{}", chain(&e)),
    };
    let mut jobs = Vec::new();
    for i in 0..60u64 {
        let at = (i / 3) as f64 * 200.0;
        jobs.push(match i % 3 {
            0 => cpu_job(i, at, 5.0, 30.0, 2400.0),
            1 => job(i, at, 1, Some(600), 1.5, 8.0, 1200.0),
            _ => job(i, at, 2, None, 1.0, 4.0, 900.0),
        });
    }
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    eprintln!("{}", r.summary);
    assert!(r.jobs.iter().all(|j| j.status == JobStatus::Finished));
    // A job without GPUs that a failure stopped waited only as long as it
    // had to: its JCT is at least its duration plus each restart's start-up.
    for j in r.jobs.iter().filter(|j| j.num_gpus == 0) {
        assert!(j.jct_s.unwrap() >= 2400.0 + 45.0 - 1e-6, "{j:?}");
    }
}

#[test]
fn forecasts_every_round_of_a_failing_run_with_cpu_only_jobs_do_not_fail() {
    use blox_forecast::Forecaster;
    let d = tempfile::tempdir().unwrap();
    let cfg = openb_cfg(
        d.path(),
        100,
        "[forecast]\nmax_wall_s = 600\n[failures]\nmodel = \"exponential\"\ngpu_mtbf_h = 1\nrepair_h = 0.3\nseed = 2\n",
        "fgd",
    );
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    let fc = blox_sim::forecast::SimForecaster::from_config(&cfg, &sim)
        .unwrap()
        .unwrap();
    let mut s = Simulation::from_config(&cfg).unwrap();
    let mut n = 0;
    while s.step().unwrap() {
        n += 1;
        if n % 3 != 0 {
            continue;
        }
        let snap = s.snapshot();
        let f = fc
            .forecast(&snap)
            .unwrap_or_else(|e| panic!("round {n}: {e}"));
        for j in snap.jobs.active().filter(|j| j.without_gpus()) {
            let p = f.get(j.id()).unwrap();
            if j.is_running() {
                assert!(p.finish_s.is_some(), "round {n}: {p:?}");
            }
        }
    }
}

#[test]
fn what_if_on_a_cluster_whose_node_has_fewer_cpus_than_a_running_cpu_only_job_holds() {
    use blox_sim::whatif::{self, History};
    let d = tempfile::tempdir().unwrap();
    let fgd = one_node_cfg(d.path(), "fgd");
    // Only the task without GPUs runs at 120 s (the others come at 1200 s).
    std::fs::write(
        d.path().join("pods.csv"),
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
c,4000,1024,0,0,,LS,Running,0,3000,0
g1,8000,32768,1,1000,,LS,Running,1200,2000,1200
",
    )
    .unwrap();
    let mut s = Simulation::from_config(&fgd).unwrap();
    s.keep_events();
    while s.step().unwrap() {}
    let log = s.take_events();
    let sim = blox_sim::SimConfig::from_section(&fgd.section("sim")).unwrap();
    let h = History::from_events(&log, Some(120.0), &sim, 60.0).unwrap();
    assert_eq!(h.active.len(), 1);
    // The replay's node: 2 CPUs (the task without GPUs held 4).
    let small = write_cfg(
        d.path(),
        "small",
        &[(2, 2, 64.0, 1)],
        &format!(
            "[workload]\nkind = \"openb\"\npath = \"{}\"\nnodes = \"{}\"\n",
            d.path().join("pods.csv").display(),
            d.path().join("nodes.csv").display()
        ),
    );
    let small = load_config(&small, None, &[]).unwrap();
    // It starts queued (its node has too few CPUs) and can never run
    // there: the replay says so, and no invariant breaks.
    let e = whatif::replay(&h, &small, "small", None)
        .err()
        .map(|e| chain(&e))
        .unwrap_or_default();
    assert!(
        e.contains("no progress is possible")
            && e.contains("job-0 (0 GPUs")
            && !e.contains("invariant"),
        "{e}"
    );
}

#[test]
fn control_a_one_gpu_job_on_the_same_failing_nodes_finishes() {
    let d = tempfile::tempdir().unwrap();
    let cfg = failures_cfg(d.path(), "");
    let jobs = vec![job(1, 0.0, 1, None, 2.0, 8.0, 6.0 * 3600.0)];
    let s = Simulation::with_jobs(&cfg, jobs).unwrap();
    let r = run_checked(s).unwrap();
    let j = row(&r, "j1");
    eprintln!("{:?} interruptions {}", j.status, j.interruptions);
    assert_eq!(j.status, JobStatus::Finished);
    assert!(
        j.interruptions >= 50,
        "as many failures as the job without GPUs saw"
    );
}
