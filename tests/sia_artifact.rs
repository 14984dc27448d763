//! Sia's setting (Sia, SOSP'23, §4; `examples/configs/sia/`, `data/sia/`):
//! Gavel job for job against the artifact's own Gavel, Sia's defining
//! behaviour end to end, jobs of limited adaptivity, and bad input.

mod shared;

use shared::{blox_err, blox_ok};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Runs `blox sim` on a Sia-setting config; returns jobs.csv by job name
/// (column → value).
fn run(
    tag: &str,
    config: &str,
    workload: &str,
    extra: &[&str],
) -> HashMap<String, HashMap<String, String>> {
    let out = std::env::temp_dir().join(format!("blox-sia-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut args: Vec<String> = vec![
        "sim".into(),
        format!("examples/configs/sia/{config}.toml"),
        "--workload".into(),
        workload.into(),
        "--out".into(),
        out.display().to_string(),
        "--quiet".into(),
    ];
    for e in extra {
        args.push("--set".into());
        args.push(e.to_string());
    }
    blox_ok(&args);
    let jobs = read_csv(&out.join("jobs.csv"), "name");
    let _ = std::fs::remove_dir_all(&out);
    jobs
}

fn read_csv(path: &Path, key: &str) -> HashMap<String, HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            let row: HashMap<String, String> = header
                .iter()
                .zip(l.split(','))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect();
            (row[key].clone(), row)
        })
        .collect()
}

fn jct(row: &HashMap<String, String>) -> f64 {
    row["jct_s"].parse().unwrap()
}

fn mean_jct(jobs: &HashMap<String, HashMap<String, String>>) -> f64 {
    jobs.values().map(jct).sum::<f64>() / jobs.len() as f64
}

/// The artifact's Gavel (max-sum-throughput, 6-minute rounds) is
/// deterministic; its per-job JCTs on two workloads of each of two families
/// are in data/sia/results (produced by running the artifact, see the NOTE).
#[test]
fn gavel_matches_the_artifacts_gavel_job_for_job() {
    for (family, w) in [("philly", 2), ("saturn", 1)] {
        let ours = run(
            &format!("gavel-{family}-{w}"),
            "gavel",
            &format!("data/sia/workloads/{family}/workload-{w}.csv"),
            &[],
        );
        let want = read_csv(
            &PathBuf::from(format!("data/sia/results/gavel-{family}-{w}.csv")),
            "name",
        );
        assert_eq!(ours.len(), want.len());
        let close = want
            .iter()
            .filter(|(n, r)| (jct(&ours[*n]) - jct(r)).abs() <= 0.01 * jct(r))
            .count();
        assert!(
            close * 100 >= 99 * want.len(),
            "{family}-{w}: {close} of {} jobs within 1 %",
            want.len()
        );
        let (a, b) = (mean_jct(&ours), mean_jct(&want));
        assert!(
            (a - b).abs() <= 0.005 * b,
            "{family}-{w}: mean JCT {a} against {b}"
        );
    }
}

/// The artifact's own Sia (`multi_simulator.py --policy=sia`, the flags of
/// `run_experiment.sh`; data/sia/NOTE.md) on every workload whose per-job
/// JCTs are vendored (`data/sia/results/sia-<family>-<N>.csv`). Every job of
/// the workload runs and finishes, and the mean JCT is within 5 % of the
/// artifact's on each (−2.8 to +3.0 % measured).
///
/// Job for job, ours is as close to the artifact as the artifact is to
/// itself with another exact solver: the same code with GLPK (the paper's
/// solver; `data/sia/results/glpk/`) instead of CBC agrees with its CBC run
/// on 12 % of jobs within 1 % and moves the mean by −1.4 to +5.1 %, because
/// the program has many optima (a fresh job is worth one GPU of any type)
/// and each solver breaks the ties its own way (docs/REPRODUCTION.md, "Sia's
/// artifact: Sia"). So on the workloads run both ways, ours must lie within
/// the band the two solvers span (±2 %), and be within 5 % of the CBC run on
/// at least 80 % as many jobs as the GLPK run is.
///
/// Every workload takes 75 s in a debug build: the README's test command
/// runs one (Philly 1, run both ways); `.ci/run` runs all of them
/// (`cargo test --test sia_artifact -- --ignored`).
#[test]
fn sia_against_the_artifacts_sia_on_philly_1() {
    let within_5 = sia_case("philly", "1").expect("philly-1 has a GLPK run");
    assert!(
        within_5.0 as f64 >= 0.8 * within_5.1 as f64,
        "jobs within 5 % of the artifact's CBC run: ours {}, the artifact with GLPK {}",
        within_5.0,
        within_5.1
    );
}

#[test]
#[ignore = "long (75 s in a debug build): .ci/run runs it with --ignored"]
fn sia_against_the_artifacts_sia() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sia/results");
    let mut cases: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let rest = name.strip_prefix("sia-")?.strip_suffix(".csv")?;
            let (family, n) = rest.rsplit_once('-')?;
            Some((family.to_string(), n.to_string()))
        })
        .collect();
    cases.sort();
    assert!(cases.len() >= 3, "vendored Sia results: {cases:?}");
    // Jobs within 5 % of the artifact's CBC run: ours, its GLPK run's.
    let mut within_5 = (0usize, 0usize);
    let mut solvers = 0;
    for (family, n) in cases {
        if let Some((a, b)) = sia_case(&family, &n) {
            within_5.0 += a;
            within_5.1 += b;
            solvers += 1;
        }
    }
    assert!(solvers >= 3, "workloads run with both solvers: {solvers}");
    assert!(
        within_5.0 as f64 >= 0.8 * within_5.1 as f64,
        "jobs within 5 % of the artifact's CBC run: ours {}, the artifact with GLPK {}",
        within_5.0,
        within_5.1
    );
}

/// One workload of [`sia_against_the_artifacts_sia`]: every job finished,
/// the mean JCT within 5 % of the artifact's and within its two solvers'
/// band. Where the artifact was also run with GLPK, how many jobs are
/// within 5 % of its CBC run: ours, and its GLPK run's.
fn sia_case(family: &str, n: &str) -> Option<(usize, usize)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sia/results");
    let ours = run(
        &format!("sia-art-{family}-{n}"),
        "sia",
        &format!("data/sia/workloads/{family}/workload-{n}.csv"),
        &[],
    );
    let want = read_csv(&dir.join(format!("sia-{family}-{n}.csv")), "name");
    assert_eq!(ours.len(), want.len(), "{family}-{n}");
    for name in want.keys() {
        assert_eq!(ours[name]["status"], "finished", "{family}-{n}: {name}");
    }
    let (a, b) = (mean_jct(&ours), mean_jct(&want));
    assert!(
        (a - b).abs() <= 0.05 * b,
        "{family}-{n}: mean JCT {a:.0} s against the artifact's {b:.0} s"
    );
    let glpk = dir.join(format!("glpk/sia-{family}-{n}.csv"));
    if !glpk.exists() {
        return None;
    }
    let other = read_csv(&glpk, "name");
    let g = mean_jct(&other);
    let (lo, hi) = (b.min(g) * 0.98, b.max(g) * 1.02);
    assert!(
        (lo..=hi).contains(&a),
        "{family}-{n}: mean JCT {a:.0} s outside the artifact's CBC and GLPK runs ({b:.0}, {g:.0} s) ±2 %"
    );
    let close = |x: &HashMap<String, HashMap<String, String>>| {
        want.iter()
            .filter(|(k, w)| (jct(&x[*k]) - jct(w)).abs() <= 0.05 * jct(w))
            .count()
    };
    Some((close(&ours), close(&other)))
}

/// Sia's direction on its own setting (Sia, Table 3): below Gavel+TunedJobs.
/// (Against Pollux, whose genetic search is slow in a debug build, see
/// docs/RESULTS.md.) The first 80 jobs of a Philly workload.
#[test]
fn sia_finishes_jobs_sooner_than_gavel_on_its_setting() {
    let w = "data/sia/workloads/philly/workload-3.csv";
    let sia = run("sia-p3", "sia", w, &["workload.num_jobs=80"]);
    let gavel = run("gavel-p3", "gavel", w, &["workload.num_jobs=80"]);
    let (s, g) = (mean_jct(&sia), mean_jct(&gavel));
    assert!(s < 0.8 * g, "Sia {s:.0} s against Gavel {g:.0} s");
}

/// Pollux on Sia's three GPU types runs a whole Philly workload to its end.
/// Its agents fit throughput per type while the genetic search is
/// type-blind; a fit of the type a job was just moved to, reaching the
/// search before the job ran there, moved YOLOv3 jobs between a
/// single-type and a mixed allocation every round, never past their
/// 80 s restart (the loop's livelock guard stops such a run at
/// round 583 of this workload). A smaller search than the config's keeps
/// the debug build quick; it livelocked the same way.
#[test]
fn pollux_runs_a_philly_workload_to_its_end_on_sias_setting() {
    let w = "data/sia/workloads/philly/workload-3.csv";
    let jobs = run(
        "pollux-p3",
        "pollux",
        w,
        &["scheduling.population=20", "scheduling.generations=20"],
    );
    assert_eq!(jobs.len(), 160);
    let unfinished: Vec<&String> = jobs
        .iter()
        .filter(|(_, r)| r["jct_s"].parse::<f64>().is_err())
        .map(|(n, _)| n)
        .collect();
    assert!(unfinished.is_empty(), "never finished: {unfinished:?}");
}

/// The other families of Sia's setting under Pollux, each run to its end
/// (a smaller search still: a debug build; every workload of each family
/// ran to its end in a release build with the config's search,
/// docs/RESULTS.md): Philly 7 (the longest), Helios (`saturn`) 3, and the
/// first 240 jobs of newTrace 2.
#[test]
#[ignore = "long (18 s in a debug build): the README's long tests, run by .ci/run with --ignored"]
fn pollux_runs_each_sia_family_to_its_end() {
    for (tag, w, jobs) in [
        ("pollux-p7", "data/sia/workloads/philly/workload-7.csv", 160),
        ("pollux-s3", "data/sia/workloads/saturn/workload-3.csv", 160),
        (
            "pollux-n2",
            "data/sia/workloads/newtrace/workload-2.csv",
            240,
        ),
    ] {
        let n = format!("workload.num_jobs={jobs}");
        let out = run(
            tag,
            "pollux",
            w,
            &["scheduling.population=10", "scheduling.generations=10", &n],
        );
        assert_eq!(out.len(), jobs, "{w}");
        let unfinished = out
            .values()
            .filter(|r| r["jct_s"].parse::<f64>().is_err())
            .count();
        assert_eq!(unfinished, 0, "{w}: {unfinished} jobs never finished");
    }
}

/// Rigid, strong-scaling, minimum-count and pipeline-parallel jobs: Sia
/// schedules them within their constraints (the loop refuses any decision
/// that breaks one); a policy that resizes jobs refuses them by name before
/// the run; one that ignores GPU types refuses the pipeline job.
#[test]
fn jobs_of_limited_adaptivity_run_under_sia_and_are_refused_elsewhere() {
    let dir = std::env::temp_dir().join(format!("blox-sia-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let w = dir.join("today.csv");
    std::fs::write(
        &w,
        "name,time,application,num_replicas,batch_size,category,min_gpus\n\
         cifar10-0,0,cifar10,4,512,rigid,\n\
         bert-1,30,bert,8,96,scale-gpus,\n\
         deepspeech2-2,60,deepspeech2,4,80,adaptive,2\n\
         gpt_pmp-3,90,gpt_pmp,8,384,adaptive,\n\
         cifar10-4,120,cifar10,2,256,,\n",
    )
    .unwrap();
    let traces = std::env::current_dir().unwrap().join("data/sia/traces");
    let traces_set = format!("workload.traces_dir=\"{}\"", traces.display());
    let wl = w.display().to_string();
    let jobs = run("today", "sia", &wl, &[&traces_set]);
    assert_eq!(jobs.len(), 5);
    for (name, r) in &jobs {
        assert_eq!(r["status"], "finished", "{name}: {r:?}");
    }
    // Resizing policies refuse by name, before anything runs.
    let err = blox_err(&[
        "sim",
        "examples/configs/sia/pollux.toml",
        "--workload",
        &wl,
        "--set",
        &traces_set,
    ]);
    assert!(
        err.contains("pollux") && err.contains("cifar10-0") && err.contains("rigid"),
        "{err}"
    );
    // A policy that runs requested counts on any type refuses the pipeline job.
    let err = blox_err(&[
        "sim",
        "examples/configs/sia/sia.toml",
        "--workload",
        &wl,
        "--set",
        &traces_set,
        "--set",
        "scheduling.policy=fifo",
        "--unset",
        "scheduling.p",
        "--unset",
        "scheduling.lambda_n",
        "--unset",
        "scheduling.max_nodes",
    ]);
    assert!(
        err.contains("gpt_pmp-3") && err.contains("only on"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cluster GPU type no profile covers is an error naming the type and the
/// file looked for; so is a model without any profile.
#[test]
fn unprofiled_gpu_types_and_models_fail_before_the_run() {
    let dir = std::env::temp_dir().join(format!("blox-sia-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let here = std::env::current_dir().unwrap();
    let config = std::fs::read_to_string("examples/configs/sia/sia.toml")
        .unwrap()
        .replace("\"aws\"", "\"h100\"")
        .replace("../../../data", &here.join("data").display().to_string());
    let h100 = dir.join("h100.toml");
    std::fs::write(&h100, config).unwrap();
    let err = blox_err(&["sim", &h100.display().to_string()]);
    assert!(
        err.contains("h100") && err.contains("placements-h100.csv"),
        "{err}"
    );
    let w = dir.join("bad.csv");
    std::fs::write(
        &w,
        "name,time,application,num_replicas,batch_size\nresnet-0,0,resnet,1,128\n",
    )
    .unwrap();
    let traces = std::env::current_dir().unwrap().join("data/sia/traces");
    let err = blox_err(&[
        "sim",
        "examples/configs/sia/sia.toml",
        "--workload",
        &w.display().to_string(),
        "--set",
        &format!("workload.traces_dir=\"{}\"", traces.display()),
    ]);
    assert!(err.contains("bad.csv:2") && err.contains("resnet"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[placement] policy = "sia-artifact"`: Sia laid out as its artifact's
/// simulator does (docs/REPRODUCTION.md, "Sia with its artifact's layout").
/// Its walk places every configuration the program chose, across nodes
/// where it must, so no round leaves a chosen job out (Sia's own layout
/// leaves some out in 0–10 rounds a workload); every job finishes, and the
/// mean JCT stays within 10 % of the artifact's (−7.9 to +3.7 % measured on
/// the eleven vendored workloads: the solver's ties, not the layout, decide
/// job-level agreement).
#[test]
fn sia_with_its_artifacts_layout_places_every_chosen_job() {
    let out = std::env::temp_dir().join(format!("blox-sia-layout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    blox_ok(&[
        "sim",
        "examples/configs/sia/sia.toml",
        "--workload",
        "data/sia/workloads/philly/workload-3.csv",
        "--set",
        "placement.policy=\"sia-artifact\"",
        "--out",
        &out.display().to_string(),
        "--quiet",
    ]);
    let ours = read_csv(&out.join("jobs.csv"), "name");
    let rounds = std::fs::read_to_string(out.join("rounds.csv")).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let want = read_csv(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sia/results/sia-philly-3.csv"),
        "name",
    );
    assert_eq!(ours.len(), want.len());
    for name in want.keys() {
        assert_eq!(ours[name]["status"], "finished", "{name}");
    }
    assert!(
        !rounds.contains("found no room"),
        "a round left a chosen job out"
    );
    let (a, b) = (mean_jct(&ours), mean_jct(&want));
    assert!(
        (a - b).abs() <= 0.10 * b,
        "mean JCT {a:.0} s against the artifact's {b:.0} s"
    );
}

/// `sia-artifact` carries out Sia's layout only: with another scheduling
/// policy the config is refused before the run, naming the key and both
/// policies.
#[test]
fn the_artifacts_layout_without_sia_is_refused() {
    let e = blox_err(&[
        "sim",
        "examples/configs/sia/gavel.toml",
        "--workload",
        "data/sia/workloads/philly/workload-3.csv",
        "--set",
        "placement.policy=\"sia-artifact\"",
        "--quiet",
    ]);
    assert!(e.contains("placement.policy"), "{e}");
    assert!(e.contains("`sia-artifact`"), "{e}");
    assert!(e.contains("`gavel`"), "{e}");
    assert!(e.contains("scheduling.policy = \"sia\""), "{e}");
}
