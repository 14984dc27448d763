//! End to end: the `blox` binary driven the way a user drives it.

mod shared;

use shared::sweep_table;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn blox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blox"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("blox runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("blox-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

const SMALL: &str = r#"
[cluster]
nodes = 2
gpus_per_node = 4

[run]
round_s = 60

[workload]
path = "trace.csv"

[scheduling]
policy = "fifo"
"#;

#[test]
fn sim_without_arguments_runs_the_bundled_default_and_prints_a_summary() {
    let o = blox(&["sim", "--quiet"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("160 finished of 160"), "{t}");
    for line in [
        "avg JCT",
        "p99 JCT",
        "avg responsiveness",
        "makespan",
        "GPU utilisation",
    ] {
        assert!(t.contains(line), "summary lacks {line}: {t}");
    }
}

#[test]
fn out_dir_gets_job_and_round_tables() {
    let dir = tempdir("out");
    let o = blox(&["sim", "--quiet", "--out", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let jobs = std::fs::read_to_string(dir.join("jobs.csv")).unwrap();
    assert!(jobs.starts_with(
        "job_id,arrival_s,first_start_s,finish_s,jct_s,queueing_s,responsiveness_s,preemptions,gpu_seconds,status"
    ));
    assert_eq!(jobs.lines().count(), 161);
    assert!(
        jobs.contains(",cifar10-0,"),
        "jobs are named by the workload's name column"
    );
    let rounds = std::fs::read_to_string(dir.join("rounds.csv")).unwrap();
    assert!(rounds.starts_with("time_s,busy_gpus,queued_jobs,running_jobs"));
    assert!(dir.join("jobs.parquet").exists() && dir.join("rounds.parquet").exists());
}

#[test]
fn unknown_policy_fails_before_running_and_lists_registered_names() {
    let o = blox(&["sim", "--quiet", "--set", "scheduling.policy=lass"]);
    let t = text(&o);
    assert!(!o.status.success());
    assert!(t.contains("unknown scheduling policy `lass`"), "{t}");
    assert!(
        t.contains("fifo") && t.contains("las") && t.contains("srtf"),
        "{t}"
    );
    assert!(!t.contains("avg JCT"), "nothing may run: {t}");
}

#[test]
fn mistyped_config_key_names_the_key_and_line() {
    let dir = tempdir("typo");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1,10\n",
    );
    let cfg = write(
        &dir,
        "c.toml",
        &SMALL.replace("round_s = 60", "round_s = 60\nround_secs = 5"),
    );
    let o = blox(&["sim", "--quiet", cfg.to_str().unwrap()]);
    let t = text(&o);
    assert!(!o.status.success());
    assert!(
        t.contains("round_secs") && t.contains("c.toml:8: [run]"),
        "{t}"
    );
}

#[test]
fn bad_trace_row_names_file_line_and_column() {
    let dir = tempdir("badrow");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1,10\n1,5,-2,10\n",
    );
    let cfg = write(&dir, "c.toml", SMALL);
    let o = blox(&["sim", "--quiet", cfg.to_str().unwrap()]);
    let t = text(&o);
    assert!(!o.status.success());
    assert!(t.contains("trace.csv:3: column `num_gpus`"), "{t}");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1,ten\n",
    );
    let t = text(&blox(&["sim", "--quiet", cfg.to_str().unwrap()]));
    assert!(
        t.contains("trace.csv:2: column `duration_s`: `ten` is not a number"),
        "{t}"
    );
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1\n",
    );
    let t = text(&blox(&["sim", "--quiet", cfg.to_str().unwrap()]));
    assert!(
        t.contains("trace.csv:2: column `duration_s`: missing value"),
        "{t}"
    );
}

#[test]
fn job_larger_than_the_cluster_is_rejected_and_the_run_goes_on() {
    let dir = tempdir("toobig");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1,100\n1,0,64,100\n2,10,2,100\n",
    );
    let cfg = write(&dir, "c.toml", SMALL);
    let out = dir.join("out");
    let o = blox(&[
        "sim",
        "--quiet",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("2 finished of 3 (1 rejected)"),
        "{}",
        text(&o)
    );
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    let row = jobs.lines().find(|l| l.starts_with("1,")).unwrap();
    assert!(
        row.contains("rejected") && row.contains("asks for 64 GPUs but the cluster has 8"),
        "{row}"
    );
}

#[test]
fn workload_flag_replaces_the_trace_and_keeps_other_settings() {
    let o = blox(&[
        "sim",
        "--quiet",
        "--workload",
        "data/pollux/workloads-0.5/workload-2.csv",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("80 finished of 80"), "{t}");
    assert!(t.contains("scheduling=las"), "{t}");
}

#[test]
fn workload_flag_swaps_a_generator_for_a_trace_and_drops_the_generators_keys() {
    let dir = tempdir("swap");
    let trace = write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,4,600\n1,0,1,60\n2,30,2,300\n",
    );
    let trace = trace.to_str().unwrap();
    let cfg = "examples/configs/blox-recipe-fifo.toml";
    // The recipe measures jobs 3000-4000, which a 3-job trace does not have.
    let o = blox(&["sim", cfg, "--workload", trace]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("selects none of the workload's 3 jobs") && t.contains("--set run.track_jobs="),
        "{t}"
    );
    let o = blox(&[
        "sim",
        "--log",
        "info",
        cfg,
        "--workload",
        trace,
        "--set",
        "run.track_jobs=",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("3 finished of 3"), "{t}");
    assert!(t.contains("dropping `workload.jobs_per_hour`"), "{t}");
    // A key of the old kind set on the same command line is still an error.
    let o = blox(&[
        "sim",
        "--quiet",
        cfg,
        "--workload",
        trace,
        "--set",
        "workload.jobs_per_hour=4",
    ]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("`jobs_per_hour` does not apply to a `csv` workload"),
        "{t}"
    );
}

#[test]
fn policies_lists_every_registered_module() {
    let t = text(&blox(&["policies"]));
    for name in [
        "accept-all",
        "load-based",
        "fifo",
        "las",
        "srtf",
        "first-free",
        "consolidated",
        "explicit",
    ] {
        assert!(t.contains(name), "{name} missing from: {t}");
    }
}

#[test]
fn sweep_runs_every_cell_and_writes_one_table() {
    let dir = tempdir("sweep");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,4,600\n1,0,1,60\n2,30,2,300\n3,90,8,120\n",
    );
    let cfg = write(
        &dir,
        "s.toml",
        &format!("{SMALL}\n[sweep]\nscheduling = [\"fifo\", \"las\", \"srtf\"]\nadmission = [\"accept-all\", {{ policy = \"load-based\", k = 1.0 }}]\nseeds = [1, 2]\n"),
    );
    let out = dir.join("out");
    let o = blox(&[
        "sweep",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let table = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 3 * 2 * 2, "{table}");
    assert!(table.contains("load-based(k=1.0)"), "{table}");
}

#[test]
fn deterministic_for_a_seed() {
    let run = |seed: &str, tag: &str| {
        let out = tempdir(tag);
        let o = blox(&[
            "sim",
            "--quiet",
            "examples/configs/blox-recipe-fifo.toml",
            "--set",
            "workload.num_jobs=300",
            "--set",
            "run.track_jobs=[0, 299]",
            "--set",
            &format!("run.seed={seed}"),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
        std::fs::read_to_string(out.join("jobs.csv")).unwrap()
    };
    assert_eq!(run("5", "det-a"), run("5", "det-b"));
    assert_ne!(run("5", "det-c"), run("6", "det-d"));
}

/// Loss-based termination (Blox §5.3): with converging jobs, wrapping FIFO in
/// `loss-termination` ends jobs early and lowers the average JCT.
#[test]
fn loss_based_termination_ends_converged_jobs_early() {
    let dir = tempdir("loss");
    let (a, b) = (dir.join("loss"), dir.join("fifo"));
    let common = ["--quiet", "--set", "workload.num_jobs=300"];
    let o = blox(
        &[
            &[
                "sim",
                "examples/configs/philly-loss-termination.toml",
                "--out",
                a.to_str().unwrap(),
            ],
            &common[..],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o2 = blox(
        &[
            &[
                "sim",
                "examples/configs/philly-loss-termination.toml",
                "--out",
                b.to_str().unwrap(),
            ],
            &common[..],
            &["--set", "scheduling.threshold=-1"],
        ]
        .concat(),
    );
    // A negative threshold is refused with its line.
    assert!(
        !o2.status.success() && text(&o2).contains("threshold"),
        "{}",
        text(&o2)
    );
    let jobs = std::fs::read_to_string(a.join("jobs.csv")).unwrap();
    let converged = jobs.lines().filter(|l| l.contains("converged")).count();
    assert!(converged > 100, "{converged} jobs ended early");
    let avg = |t: &str| -> f64 {
        let line = t.lines().find(|l| l.starts_with("avg JCT")).unwrap();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let fifo = blox(&[
        "sim",
        "examples/configs/philly-fifo.toml",
        "--quiet",
        "--set",
        "workload.jobs_per_hour=7",
        "--set",
        "workload.num_jobs=300",
    ]);
    assert!(
        avg(&text(&o)) < avg(&text(&fifo)),
        "{} vs {}",
        text(&o),
        text(&fifo)
    );
}

#[test]
fn grid_sweep_is_resumable_and_report_draws_its_plots() {
    let dir = tempdir("grid");
    // Two policy configs sharing the Philly digest, two loads.
    for (name, policy) in [("fifo.toml", "fifo"), ("las.toml", "las")] {
        write(
            &dir,
            name,
            &format!("[cluster]\nnodes = 2\ngpus_per_node = 4\n\n[run]\nround_s = 300\n\n[workload]\nkind = \"philly\"\npath = \"{}/data/pollux/traces/philly.csv\"\nnum_jobs = 30\n\n[scheduling]\npolicy = \"{policy}\"\n", env!("CARGO_MANIFEST_DIR")),
        );
    }
    let grid = write(
        &dir,
        "grid.toml",
        "[[grid]]\nname = \"small\"\nconfigs = [\"fifo.toml\", \"las.toml\"]\njobs_per_hour = [2, 6]\nseeds = [1]\nsections.cluster = { nodes = 1, gpus_per_node = 8 }\n",
    );
    let out = dir.join("out");
    let run = || {
        blox(&[
            "sweep",
            grid.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = run();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("4 cells: 0 already done, 4 to run"),
        "{}",
        text(&o)
    );
    let table = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 4, "{table}");
    assert!(out.join("small/las/6jph-s1/jobs.csv").is_file());
    // The section replacement took effect: 8 GPUs on one node.
    let first = std::fs::read_to_string(out.join("small/fifo/2jph-s1/rounds.csv")).unwrap();
    assert!(
        first.lines().nth(1).unwrap().contains(",8,accept-all/"),
        "{first}"
    );
    // Run again: nothing is recomputed, the table is the same.
    let o = run();
    assert!(
        text(&o).contains("4 cells: 4 already done, 0 to run"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("sweep.csv")).unwrap(),
        table
    );
    let o = blox(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    for f in [
        "small-jct-cdf.svg",
        "small-jct-vs-load.svg",
        "small-resp-vs-load.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("fifo") && svg.contains("las"),
            "{f}"
        );
        assert!(
            svg.contains("load (jobs per hour)") || f.contains("cdf"),
            "{f}"
        );
    }
    // Every plot also as PNG, and the time series at the highest load.
    for f in [
        "small-jct-cdf.png",
        "small-jct-vs-load.png",
        "small-util-over-time.png",
        "small-queue-over-time.png",
    ] {
        let png = std::fs::read(out.join(f)).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{f}");
    }
    let svg = std::fs::read_to_string(out.join("small-util-over-time.svg")).unwrap();
    assert!(svg.contains("time (hours)") && svg.contains("6 jobs/hour"));
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("| fifo |") && md.contains("| las |"), "{md}");
}

#[test]
fn synergy_configs_run_and_tune_beats_proportional() {
    // The shipped Synergy pair on the first 300 jobs of the Blox Philly recipe
    // at 8 jobs/hour: job models and CPU/memory sensitivities from the vendored
    // profiles; Tune gives CPU-hungry models more and finishes jobs sooner.
    let avg = |mode: &str| -> f64 {
        let o = blox(&[
            "sim",
            &format!("examples/configs/synergy/{mode}.toml"),
            "--set",
            "workload.num_jobs=300",
            "--set",
            "run.track_jobs=[0, 299]",
        ]);
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(t.contains("300 finished of 300"), "{t}");
        let line = t
            .lines()
            .find(|l| l.starts_with("avg JCT"))
            .expect("summary");
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let (p, t) = (avg("proportional"), avg("tune"));
    assert!(t < 0.95 * p, "tune {t} h vs proportional {p} h");
}

#[test]
fn local_runs_real_processes_under_the_configured_policy() {
    let dir = tempdir("local");
    let cfg = write(
        &dir,
        "c.toml",
        "[cluster]\nnodes = 1\ngpus_per_node = 2\n[run]\nround_s = 0.5\n[scheduling]\npolicy = \"fifo\"\n",
    );
    // Jobs that speak the control-directory protocol with a plain shell.
    let done = |secs: &str| {
        format!("[\"sh\", \"-c\", \"sleep {secs}; touch \\\"$BLOX_CONTROL_DIR/done\\\"\"]")
    };
    let jobs = write(
        &dir,
        "jobs.toml",
        &format!(
            "[[job]]\nname = \"a\"\narrival_s = 0\ngpus = 2\ncommand = {}\n\n[[job]]\nname = \"b\"\narrival_s = 0\ngpus = 1\ncommand = {}\n\n[[job]]\nname = \"too-big\"\narrival_s = 0\ngpus = 3\ncommand = [\"true\"]\n",
            done("0.6"),
            done("0.3")
        ),
    );
    let out = dir.join("out");
    let o = blox(&[
        "local",
        cfg.to_str().unwrap(),
        "--jobs",
        jobs.to_str().unwrap(),
        "--workdir",
        dir.join("work").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // FIFO: b waits for a (which holds both GPUs); too-big is rejected.
    let rows = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    let line = |name: &str| {
        rows.lines()
            .find(|l| l.split(',').nth(10) == Some(name))
            .unwrap_or_else(|| panic!("{name} in {rows}"))
            .to_string()
    };
    assert!(line("a").contains(",finished,"), "{rows}");
    assert!(line("b").contains(",finished,"), "{rows}");
    assert!(
        line("too-big").contains(",rejected,") && line("too-big").contains("asks for 3 GPUs"),
        "{rows}"
    );
    let jct = |name: &str| -> f64 { line(name).split(',').nth(4).unwrap().parse().unwrap() };
    assert!(jct("b") > jct("a"), "b ran after a: {rows}");
    // The event log tells the same story: a launched before b, too-big
    // rejected with its reason, both others finished.
    let events = std::fs::read_to_string(out.join("events.jsonl")).unwrap();
    let at = |needle: &str| {
        events
            .lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} in {events}"))
    };
    assert!(
        at("\"name\":\"a\",\"event\":\"launched\"") < at("\"name\":\"b\",\"event\":\"launched\"")
    );
    assert!(
        events.contains("\"name\":\"too-big\",\"event\":\"rejected\",\"reason\":\"asks for 3 GPUs")
    );
    assert_eq!(
        events.matches("\"event\":\"finished\"").count(),
        2,
        "{events}"
    );
    // A bad jobs file names the job and field.
    let bad = write(
        &dir,
        "bad.toml",
        "[[job]]\nname = \"x\"\narrival_s = 0\ngpus = 0\ncommand = [\"true\"]\n",
    );
    let t = text(&blox(&[
        "local",
        cfg.to_str().unwrap(),
        "--jobs",
        bad.to_str().unwrap(),
    ]));
    assert!(
        t.contains("job 1 (x)") && t.contains("`gpus` must be at least 1"),
        "{t}"
    );
}

#[test]
fn sweep_labels_with_commas_survive_the_table_and_report_reads_it() {
    let dir = tempdir("sweep-commas");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s,user\n0,0,4,600,a\n1,0,1,60,b\n2,30,2,300,a\n",
    );
    // A policy with two parameters is labelled `quota(max_gpus=4,max_jobs=2)`.
    let cfg = write(
        &dir,
        "s.toml",
        &format!("{SMALL}\n[sweep]\nadmission = [\"accept-all\", {{ policy = \"quota\", max_jobs = 2, max_gpus = 4 }}]\n"),
    );
    let out = dir.join("out");
    let o = blox(&[
        "sweep",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let mut rdr = csv::Reader::from_path(out.join("sweep.csv")).unwrap();
    let header = rdr.headers().unwrap().clone();
    let admission = header.iter().position(|h| h == "admission").unwrap();
    let labels: Vec<String> = rdr
        .records()
        .map(|r| r.unwrap()[admission].to_string())
        .collect();
    assert!(labels.iter().any(|l| l.contains(',')), "{labels:?}");
    let o = blox(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("summary.md").is_file());
}

#[test]
fn a_grid_cell_is_recomputed_when_its_config_changes_and_stems_do_not_collide() {
    let dir = tempdir("grid-hash");
    for sub in ["a", "b"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        // Same file name in two folders, different jobs.
        write(
            &dir.join(sub),
            "trace.csv",
            &format!(
                "job_id,arrival_s,num_gpus,duration_s\n0,0,1,{}\n",
                if sub == "a" { 600 } else { 60 }
            ),
        );
    }
    let cfg = write(&dir, "fifo.toml", SMALL);
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1,10\n",
    );
    let grid = write(
        &dir,
        "grid.toml",
        "[[grid]]\nname = \"g\"\nconfigs = [\"fifo.toml\"]\nworkloads = [\"a/trace.csv\", \"b/trace.csv\"]\n",
    );
    let out = dir.join("out");
    let run = || {
        blox(&[
            "sweep",
            grid.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = run();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("2 cells: 0 already done, 2 to run"),
        "{}",
        text(&o)
    );
    let table = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert!(
        table.contains("a-trace") && table.contains("b-trace"),
        "{table}"
    );
    // Each cell ran its own trace (jobs of 600 s and of 60 s).
    let mut rdr = csv::Reader::from_path(out.join("sweep.csv")).unwrap();
    let jct = rdr
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "avg_jct_s")
        .unwrap();
    let jcts: Vec<f64> = rdr
        .records()
        .map(|r| r.unwrap()[jct].parse().unwrap())
        .collect();
    assert_eq!(jcts, vec![600.0, 60.0], "{table}");
    // Unchanged: both reused. Changed config: both run again.
    assert!(text(&run()).contains("2 cells: 2 already done, 0 to run"));
    std::fs::write(&cfg, SMALL.replace("round_s = 60", "round_s = 30")).unwrap();
    assert!(text(&run()).contains("2 cells: 0 already done, 2 to run"));
}

/// `--shard I/N` runs cells I, I+N, …; merging every shard gives the table
/// and cell folders of the unsharded sweep (all but the wall times), and
/// `blox report` reads it. Incomplete or mixed shards are refused.
#[test]
fn a_sharded_and_merged_sweep_equals_the_unsharded_one() {
    let dir = tempdir("shards");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,4,600\n1,0,1,60\n2,30,2,300\n3,90,8,120\n",
    );
    let cfg = write(
        &dir,
        "s.toml",
        &format!(
            "{SMALL}\n[sweep]\nscheduling = [\"fifo\", \"las\", \"srtf\"]\nseeds = [1, 2, 3]\n"
        ),
    );
    let run = |extra: &[&str], out: &Path| {
        let mut args = vec![
            "sweep",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = blox(&args);
        assert!(o.status.success(), "{}", text(&o));
    };
    let whole = dir.join("whole");
    run(&[], &whole);
    // 9 cells over 4 shards: 3, 2, 2, 2.
    let shards: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("shard-{i}"))).collect();
    for (i, s) in shards.iter().enumerate() {
        run(&["--shard", &format!("{i}/4")], s);
        let rows = std::fs::read_to_string(s.join("sweep.csv")).unwrap();
        assert_eq!(rows.lines().count() - 1, if i == 0 { 3 } else { 2 });
    }
    let merged = dir.join("merged");
    let merge = |dirs: &[PathBuf], out: &Path| {
        let mut args = vec!["sweep".to_string(), "merge".to_string()];
        args.extend(dirs.iter().rev().map(|d| d.display().to_string()));
        args.extend(["--out".to_string(), out.display().to_string()]);
        blox(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let o = merge(&shards, &merged);
    assert!(o.status.success(), "{}", text(&o));
    // Same rows in the same order; only the wall time differs.
    assert_eq!(sweep_table(&whole), sweep_table(&merged));
    let dirs: Vec<String> = {
        let mut r = csv::Reader::from_path(whole.join("sweep.csv")).unwrap();
        let i = r
            .headers()
            .unwrap()
            .iter()
            .position(|h| h == "dir")
            .unwrap();
        r.records().map(|rec| rec.unwrap()[i].to_string()).collect()
    };
    assert_eq!(dirs.len(), 9);
    for d in &dirs {
        assert_eq!(
            std::fs::read_to_string(whole.join(d).join("jobs.csv")).unwrap(),
            std::fs::read_to_string(merged.join(d).join("jobs.csv")).unwrap(),
            "{d}"
        );
    }
    let o = blox(&["report", merged.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    // A missing shard, or one of another split, is refused.
    let o = merge(&shards[..3], &dir.join("bad"));
    assert!(!o.status.success());
    assert!(text(&o).contains("shard 3/4 is missing"), "{}", text(&o));
    let other = dir.join("other");
    run(&["--shard", "0/3"], &other);
    let o = merge(
        &[
            shards[1].clone(),
            shards[2].clone(),
            shards[3].clone(),
            other,
        ],
        &dir.join("bad2"),
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("does not belong"), "{}", text(&o));
    let o = blox(&["sweep", cfg.to_str().unwrap(), "--shard", "4/4"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("0 <= I < N"), "{}", text(&o));
}
