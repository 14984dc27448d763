//! Reduced versions of the Pollux reproduction experiments (docs/REPRODUCTION.md):
//! the shipped artifact configs on the first jobs of a workload, with a smaller
//! genetic search so they run in seconds in a debug build.

mod shared;

use shared::blox_ok;
use std::path::PathBuf;

fn sim(tag: &str, config: &str, workload: &str, extra: &[&str]) -> Vec<Vec<String>> {
    sim_tables(tag, config, workload, extra).0
}

/// Runs `blox sim` and returns (jobs.csv, rounds.csv) as rows of fields.
fn sim_tables(
    tag: &str,
    config: &str,
    workload: &str,
    extra: &[&str],
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let out = std::env::temp_dir().join(format!("blox-pollux-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut args: Vec<String> = vec![
        "sim".into(),
        format!("examples/configs/pollux-artifact/{config}.toml"),
        "--workload".into(),
        format!("data/pollux/{workload}"),
        "--out".into(),
        out.display().to_string(),
        "--quiet".into(),
        "--set".into(),
        "workload.num_jobs=12".into(),
    ];
    for e in extra {
        args.push("--set".into());
        args.push(e.to_string());
    }
    let text = blox_ok(&args);
    assert!(text.contains("12 finished of 12"), "{text}");
    let read = |name: &str| -> Vec<Vec<String>> {
        let csv = std::fs::read_to_string(PathBuf::from(&out).join(name)).unwrap();
        csv.lines()
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect()
    };
    let tables = (read("jobs.csv"), read("rounds.csv"));
    let _ = std::fs::remove_dir_all(&out);
    tables
}

fn col(rows: &[Vec<String>], name: &str) -> Vec<String> {
    let i = rows[0]
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("no column {name}"));
    rows[1..].iter().map(|r| r[i].clone()).collect()
}

/// JCTs are whole seconds (epoch crossings are rounded), jobs carry the
/// workload's names.
fn check(rows: &[Vec<String>]) {
    for name in col(rows, "name") {
        assert!(name.contains('-') && !name.starts_with("job"), "{name}");
    }
    for j in col(rows, "jct_s") {
        let v: f64 = j.parse().unwrap();
        assert!(v > 30.0 && v == v.round(), "{j}");
    }
}

const SMALL_GA: [&str; 2] = ["scheduling.population=16", "scheduling.generations=8"];

#[test]
fn baselines_run_the_artifact_experiment_deterministically() {
    for cfg in ["tiresias", "optimus-oracle"] {
        for wl in ["workloads/workload-3.csv", "workloads-0.5/workload-3.csv"] {
            let a = sim(&format!("{cfg}-a"), cfg, wl, &[]);
            check(&a);
            let b = sim(&format!("{cfg}-b"), cfg, wl, &[]);
            assert_eq!(a, b, "{cfg} is deterministic");
        }
    }
}

#[test]
fn pollux_runs_the_artifact_experiment_and_is_seeded() {
    let a = sim("pollux-a", "pollux", "workloads/workload-3.csv", &SMALL_GA);
    check(&a);
    let b = sim("pollux-b", "pollux", "workloads/workload-3.csv", &SMALL_GA);
    assert_eq!(a, b, "same seed, same result");
    check(&sim(
        "pollux-half",
        "pollux",
        "workloads-0.5/workload-3.csv",
        &SMALL_GA,
    ));
}

fn mean_jct_s(rows: &[Vec<String>]) -> f64 {
    let v: Vec<f64> = col(rows, "jct_s")
        .iter()
        .map(|j| j.parse().unwrap())
        .collect();
    v.iter().sum::<f64>() / v.len() as f64
}

/// Pollux §5.3 (scheduling interval): PolluxSched decides every interval —
/// rounds are exactly that far apart, fewer when longer — and the decisions
/// it makes depend on it.
#[test]
fn pollux_scheduling_interval_experiment() {
    let mut rounds = Vec::new();
    let mut jcts = Vec::new();
    for s in ["30", "120", "480"] {
        let mut extra = SMALL_GA.to_vec();
        let set = format!("run.round_s={s}");
        extra.push(&set);
        let (jobs, r) = sim_tables(
            &format!("interval-{s}"),
            "pollux",
            "workloads/workload-3.csv",
            &extra,
        );
        check(&jobs);
        let times: Vec<f64> = col(&r, "time_s")
            .iter()
            .map(|t| t.parse().unwrap())
            .collect();
        let step: f64 = s.parse().unwrap();
        for w in times.windows(2) {
            assert!(
                ((w[1] - w[0]) / step).fract().abs() < 1e-9 && w[1] > w[0],
                "rounds {} and {} are not whole {s} s intervals apart",
                w[0],
                w[1]
            );
        }
        rounds.push(times.len());
        jcts.push(mean_jct_s(&jobs));
    }
    assert!(rounds[0] > rounds[1] && rounds[1] > rounds[2], "{rounds:?}");
    assert!(
        jcts[0] != jcts[2],
        "the interval changes the schedule: {jcts:?}"
    );
}

/// Pollux §5.3 (interference): injected slowdown of co-located distributed
/// jobs raises JCT when PolluxSched ignores it, and its interference
/// avoidance (no two distributed jobs on one node) takes it back to the
/// interference-free JCT.
#[test]
fn pollux_interference_experiment() {
    let run = |tag: &str, extra: &[&str]| {
        let mut all = SMALL_GA.to_vec();
        all.extend(extra);
        let jobs = sim(tag, "pollux", "workloads/workload-3.csv", &all);
        check(&jobs);
        mean_jct_s(&jobs)
    };
    let none = run("interference-none", &["sim.interference=0"]);
    let ignored = run(
        "interference-off",
        &[
            "sim.interference=0.5",
            "scheduling.interference_avoidance=false",
        ],
    );
    let avoided = run("interference-avoid", &["sim.interference=0.5"]);
    assert!(
        ignored > 1.2 * avoided,
        "ignored {ignored} s vs avoided {avoided} s"
    );
    assert!(
        (avoided / none - 1.0).abs() < 0.1,
        "avoidance keeps JCT near the interference-free {none} s: {avoided} s"
    );
}

/// Cloud auto-scaling (Pollux §4.2.2) end to end: a lightly loaded 2-node
/// cluster is shrunk by PolluxSched through the simulator's cluster manager.
#[test]
fn pollux_autoscaling_resizes_the_simulated_cluster() {
    let mut extra = SMALL_GA.to_vec();
    extra.extend([
        "cluster.nodes=2",
        "cluster.max_nodes=16",
        "scheduling.autoscale={min_nodes=1, max_nodes=16}",
    ]);
    let (jobs, rounds) = sim_tables("autoscale", "pollux", "workloads/workload-3.csv", &extra);
    check(&jobs);
    let sizes: Vec<u32> = col(&rounds, "total_gpus")
        .iter()
        .map(|v| v.parse::<f64>().unwrap() as u32)
        .collect();
    assert_eq!(sizes[0], 8);
    assert!(sizes.iter().any(|&g| g != 8), "{sizes:?}");
    assert!(
        sizes.iter().all(|&g| g % 4 == 0 && (4..=64).contains(&g)),
        "{sizes:?}"
    );
}

/// Every policy config of `examples/configs/pollux-workloads/` runs a Pollux
/// workload to the end.
#[test]
fn every_pollux_workload_config_runs() {
    for p in [
        "fifo", "las", "srtf", "themis", "tiresias", "optimus", "pollux", "synergy",
    ] {
        let out = std::env::temp_dir().join(format!("blox-pw-{p}-{}", std::process::id()));
        let mut args: Vec<String> = vec![
            "sim".into(),
            format!("examples/configs/pollux-workloads/{p}.toml"),
            "--workload".into(),
            "data/pollux/workloads-0.5/workload-2.csv".into(),
            "--out".into(),
            out.display().to_string(),
            "--quiet".into(),
            "--set".into(),
            "workload.num_jobs=10".into(),
        ];
        if p == "pollux" {
            for s in SMALL_GA {
                args.extend(["--set".to_string(), s.to_string()]);
            }
        }
        let text = blox_ok(&args);
        assert!(text.contains("10 finished of 10"), "{p}: {text}");
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// The artifact's Tiresias is deterministic and its per-job JCTs on the eight
/// load-1.0 workloads are published with it (`data/pollux/results/`): ours
/// matches at least 90 % of its 1,280 jobs within 1 % (92.5 % when this was
/// written; docs/REPRODUCTION.md), two workloads job for job, and the mean
/// within 1 %. Most differences start at jobs placed on five or more nodes,
/// where the artifact interpolates step times over a Delaunay triangulation.
/// Our `policy` (`tiresias`, `optimus`) against the artifact's own per-job
/// JCTs at job load `load` on `workloads`: (jobs within 1 %, jobs, sum of
/// ours, sum of theirs, workloads matched job for job).
fn against_the_artifact(
    policy: &str,
    load: &str,
    workloads: &[u32],
) -> (usize, usize, f64, f64, Vec<u32>) {
    let reference = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("data/pollux/results/{policy}-{load}.csv")),
    )
    .unwrap();
    let mut theirs: std::collections::HashMap<(String, String), f64> = Default::default();
    for l in reference.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        theirs.insert((f[0].into(), f[1].into()), f[2].parse().unwrap());
    }
    let dir = if load == "1.0" {
        "workloads".to_string()
    } else {
        format!("workloads-{load}")
    };
    let (mut close, mut all, mut sum_ours, mut sum_theirs) = (0, 0, 0.0, 0.0);
    let mut exact_workloads = Vec::new();
    for &w in workloads {
        let out =
            std::env::temp_dir().join(format!("blox-{policy}-{load}-w{w}-{}", std::process::id()));
        let config = match policy {
            "optimus" => "optimus-oracle",
            p => p,
        };
        blox_ok(&[
            "sim",
            &format!("examples/configs/pollux-artifact/{config}.toml"),
            "--workload",
            &format!("data/pollux/{dir}/workload-{w}.csv"),
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ]);
        let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        let rows: Vec<Vec<String>> = jobs
            .lines()
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect();
        let (names, jcts) = (col(&rows, "name"), col(&rows, "jct_s"));
        let mut here = 0;
        for (n, j) in names.iter().zip(&jcts) {
            let ours: f64 = j.parse().unwrap();
            let t = theirs[&(format!("workload-{w}"), n.clone())];
            if (ours - t).abs() <= 0.01 * t {
                here += 1;
            }
            sum_ours += ours;
            sum_theirs += t;
        }
        let expected = theirs
            .keys()
            .filter(|(k, _)| *k == format!("workload-{w}"))
            .count();
        assert_eq!(names.len(), expected, "load {load} workload {w}");
        if here == names.len() {
            exact_workloads.push(w);
        }
        close += here;
        all += names.len();
    }
    (close, all, sum_ours, sum_theirs, exact_workloads)
}

#[test]
fn tiresias_matches_the_artifacts_own_results_job_for_job() {
    let (close, all, sum_ours, sum_theirs, exact_workloads) =
        against_the_artifact("tiresias", "1.0", &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(all, 1280);
    assert_eq!(close, all, "jobs within 1 % of the artifact's JCT");
    assert_eq!(exact_workloads.len(), 8, "{exact_workloads:?}");
    let rel = (sum_ours - sum_theirs).abs() / sum_theirs;
    assert!(
        rel < 0.01,
        "mean JCT {:.1} s vs the artifact's {:.1} s",
        sum_ours / all as f64,
        sum_theirs / all as f64
    );
}

/// At the other published loads too (two workloads each here; all 24 in
/// docs/REPRODUCTION.md): every job within 1 %. Placements on five or more
/// nodes are common at loads 1.5 and 2.0, so this holds only with the
/// artifact's own tetrahedra for them.
#[test]
fn tiresias_matches_the_artifact_at_every_published_load() {
    for (load, workloads) in [("0.5", [2, 6]), ("1.5", [2, 7]), ("2.0", [1, 4])] {
        let (close, all, ..) = against_the_artifact("tiresias", load, &workloads);
        assert_eq!(
            close, all,
            "load {load}: jobs within 1 % of the artifact's JCT"
        );
    }
}

/// Optimus+Oracle, also deterministic in the artifact: ≥ 97 % of jobs within
/// 1 % and the mean within 0.5 % at every load.
#[test]
#[ignore = "long (27 s in a debug build): the README's long tests, run by .ci/run with --ignored"]
fn optimus_matches_the_artifacts_own_results() {
    for load in ["0.5", "1.0", "1.5", "2.0"] {
        let workloads = [1, 2, 3, 4, 5, 6, 7, 8];
        let (close, all, ours, theirs, _) = against_the_artifact("optimus", load, &workloads);
        assert!(
            close * 100 >= all * 97,
            "load {load}: {close} of {all} within 1 %"
        );
        assert!(
            (ours - theirs).abs() < 0.005 * theirs,
            "load {load}: {ours} vs {theirs}"
        );
    }
}
