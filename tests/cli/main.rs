//! End to end: the `blox` binary driven the way a user drives it.

mod pack;
#[path = "../shared/mod.rs"]
mod shared;
mod sweep;
mod whatif;

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

fn tempdir(tag: &str) -> shared::Scratch {
    shared::Scratch::new(&format!("cli-{tag}"))
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
        format!("[\"sh\", \"-c\", \"sleep {secs}; touch \\\"$BLOX_REPORT_DIR/done\\\"\"]")
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

/// A workload too large for memory is refused before it is
/// drawn, with the estimate and the limit, not killed by the kernel later.
#[test]
fn a_workload_too_large_for_memory_is_refused_up_front() {
    let t = std::time::Instant::now();
    let o = blox(&[
        "sim",
        "examples/configs/scale-1m.toml",
        "--set",
        "sim.memory_limit_gb=0.5",
        "--quiet",
    ]);
    let e = text(&o);
    assert!(!o.status.success(), "{e}");
    assert!(e.contains("1000000 jobs need about 0.58 GiB"), "{e}");
    assert!(
        e.contains("0.50 GiB is available ([sim] memory_limit_gb)"),
        "{e}"
    );
    assert!(
        e.contains("scale-1m.toml:"),
        "names where num_jobs was set: {e}"
    );
    // Without a limit of its own: what the machine has (a hundred billion
    // jobs fit nowhere), refused as fast.
    if std::path::Path::new("/proc/meminfo").exists() {
        let o = blox(&[
            "sim",
            "examples/configs/scale-1m.toml",
            "--set",
            "workload.num_jobs=100000000000",
            "--quiet",
        ]);
        let e = text(&o);
        assert!(!o.status.success(), "{e}");
        assert!(e.contains("100000000000 jobs need about"), "{e}");
        assert!(
            e.contains("GiB is available (MemAvailable") || e.contains("cgroup"),
            "{e}"
        );
    }
    assert!(
        t.elapsed().as_secs() < 30,
        "refused before drawing anything"
    );
}

/// The bundled openb config (jobs sharing GPUs under FGD) runs, and its
/// rounds carry the fragmentation (in long rounds, to keep the test quick).
#[test]
fn the_openb_config_runs_with_shares_and_reports_fragmentation() {
    let dir = tempdir("openb");
    let o = blox(&[
        "sim",
        "examples/configs/openb/fgd.toml",
        "--quiet",
        // Ten-hour rounds: the trace's five months in about 360 rounds.
        "--set",
        "run.round_s=36000",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("frag_percent") && t.contains("placement=fgd"),
        "{t}"
    );
    let rounds = std::fs::read_to_string(dir.join("rounds.csv")).unwrap();
    assert!(
        rounds
            .lines()
            .next()
            .unwrap()
            .ends_with(",note,frag_gpus,frag_percent"),
        "{}",
        rounds.lines().next().unwrap()
    );
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(events.contains("\"share\":"), "a launch of a share");
}
