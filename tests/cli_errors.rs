//! Mistakes a user makes, through the `blox` binary: each error is printed
//! once, names the user's own file and line (or the `--set` that caused it),
//! and the command exits non-zero; a closed pipe ends it quietly.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn blox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blox"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("blox runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

const TRACE: &str = "job_id,arrival_s,num_gpus,duration_s\n0,0,1,600\n1,10,2,300\n";

const CONFIG: &str = r#"[cluster]
nodes = 2
gpus_per_node = 4

[run]
round_s = 60

[workload]
path = "trace.csv"

[admission]
policy = "load-based"
k = 1.2

[scheduling]
policy = "fifo"
"#;

fn setup() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "trace.csv", TRACE);
    let c = write(d.path(), "c.toml", CONFIG);
    (d, c)
}

/// The one `error:` line, checked for repeated parts ("X: X").
fn error_line(o: &Output) -> String {
    assert!(!o.status.success(), "expected a failure: {}", stderr(o));
    let e = stderr(o);
    let lines: Vec<&str> = e.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "one error line: {e}");
    let parts: Vec<&str> = lines[0].split(": ").collect();
    for w in parts.windows(2) {
        assert_ne!(w[0], w[1], "printed twice: {}", lines[0]);
    }
    lines[0].to_string()
}

#[test]
fn a_bad_value_after_set_names_the_users_own_line() {
    let (_d, c) = setup();
    // The mistake is in the file (k is not a number); an unrelated --set must
    // not move the error to a re-serialised document.
    let bad = std::fs::read_to_string(&c)
        .unwrap()
        .replace("k = 1.2", "k = \"high\"");
    std::fs::write(&c, bad).unwrap();
    let o = blox(&["sim", "--quiet", c.to_str().unwrap(), "--set", "run.seed=2"]);
    let e = error_line(&o);
    assert!(
        e.contains("c.toml:13: [admission]") && e.contains("`k`"),
        "{e}"
    );
    assert!(!e.contains("after --set"), "{e}");
}

#[test]
fn a_bad_value_given_by_set_names_the_set() {
    let (_d, c) = setup();
    let o = blox(&[
        "sim",
        "--quiet",
        c.to_str().unwrap(),
        "--set",
        "run.round_s=-5",
    ]);
    let e = error_line(&o);
    assert!(
        e.contains("--set run.round_s=-5: [run] `round_s`: -5 is not a finite number above 0"),
        "{e}"
    );
}

#[test]
fn switching_a_policy_by_set_points_at_its_old_parameters_and_unset_removes_them() {
    let (_d, c) = setup();
    let c = c.to_str().unwrap();
    let o = blox(&["sim", "--quiet", c, "--set", "admission.policy=accept-all"]);
    let e = error_line(&o);
    assert!(
        e.contains("c.toml:13") && e.contains("unknown field `k`"),
        "{e}"
    );
    assert!(
        e.contains("--unset admission.k"),
        "the hint names the fix: {e}"
    );
    for removal in [
        vec![
            "--set",
            "admission.policy=accept-all",
            "--unset",
            "admission.k",
        ],
        vec![
            "--set",
            "admission.policy=accept-all",
            "--set",
            "admission.k=",
        ],
    ] {
        let mut args = vec!["sim", "--quiet", c];
        args.extend(removal);
        let o = blox(&args);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

#[test]
fn an_unknown_policy_suggests_a_near_name_and_how_to_link_one() {
    let (_d, c) = setup();
    let o = blox(&[
        "sim",
        "--quiet",
        c.to_str().unwrap(),
        "--set",
        "scheduling.policy=tiresais",
    ]);
    let e = error_line(&o);
    assert!(e.contains("--set scheduling.policy=tiresais"), "{e}");
    assert!(e.contains("did you mean `tiresias`?"), "{e}");
    assert!(e.contains("use my_policy as _;"), "{e}");
}

/// A joint policy names concrete GPUs; a placement other than `explicit`
/// would drop them, so the pair is refused before anything runs, naming both.
#[test]
fn a_joint_policy_with_a_placement_that_drops_its_gpus_is_refused() {
    let o = blox(&[
        "sim",
        "--quiet",
        "examples/configs/pollux-artifact/pollux.toml",
        "--set",
        "placement.policy=consolidated",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("--set placement.policy=consolidated"), "{e}");
    assert!(e.contains("scheduling policy `pollux`"), "{e}");
    assert!(e.contains("placement.policy = \"explicit\""), "{e}");
}

#[test]
fn a_workload_key_of_another_kind_is_an_error_not_ignored() {
    let (d, c) = setup();
    let cfg = std::fs::read_to_string(&c).unwrap().replace(
        "path = \"trace.csv\"",
        "path = \"trace.csv\"\njobs_per_hour = 4",
    );
    let c2 = write(d.path(), "c2.toml", &cfg);
    let e = error_line(&blox(&["sim", "--quiet", c2.to_str().unwrap()]));
    assert!(
        e.contains("c2.toml:10: [workload]")
            && e.contains("`jobs_per_hour` does not apply to a `csv` workload"),
        "{e}"
    );
}

#[test]
fn infinite_or_runaway_numbers_are_refused_where_they_are_typed() {
    let bursty = "examples/configs/synth-bursty.toml";
    for (set, says) in [
        (
            "workload.burst_max_duration_s=inf",
            "numbers in a config must be finite",
        ),
        (
            "workload.burst_jobs_per_hour=inf",
            "numbers in a config must be finite",
        ),
        (
            "workload.burst_length_s=nan",
            "numbers in a config must be finite",
        ),
        ("run.round_s=-inf", "numbers in a config must be finite"),
    ] {
        let e = error_line(&blox(&["sim", "--quiet", bursty, "--set", set]));
        assert!(e.contains(&format!("--set {set}")), "{set}: {e}");
        assert!(e.contains(says), "{set}: {e}");
    }
    // Finite but runaway: a window every 10 ms over the whole trace.
    let e = error_line(&blox(&[
        "sim",
        "--quiet",
        bursty,
        "--set",
        "workload.burst_every_s=0.01",
        "--set",
        "workload.burst_length_s=0.01",
    ]));
    assert!(e.contains("more than 2000000 in all"), "{e}");
    // In the file: its line.
    let (d, c) = setup();
    let cfg = std::fs::read_to_string(&c)
        .unwrap()
        .replace("round_s = 60", "round_s = 60\nmax_startup_s = inf");
    let c2 = write(d.path(), "c2.toml", &cfg);
    let e = error_line(&blox(&["sim", "--quiet", c2.to_str().unwrap()]));
    assert!(e.contains("c2.toml:7: [run]"), "{e}");
    assert!(e.contains("`max_startup_s` = inf"), "{e}");
}

/// Seconds, rates and sizes have one type each (positive, or non-negative):
/// a value out of range is refused as it is parsed, naming the key, and
/// its line in the file or the `--set` that gave it.
#[test]
fn amounts_out_of_range_are_refused_as_they_are_parsed() {
    let bursty = "examples/configs/synth-bursty.toml";
    for (set, says) in [
        (
            "workload.burst_max_duration_s=-5",
            "`burst_max_duration_s`: -5 is not a finite number above 0",
        ),
        (
            "workload.burst_every_s=0",
            "`burst_every_s`: 0 is not a finite number above 0",
        ),
        (
            "workload.jobs_per_hour=-1",
            "`jobs_per_hour`: -1 is not a finite number above 0",
        ),
        (
            "run.min_run_s=-2",
            "`min_run_s`: -2 is not a finite number of 0 or more",
        ),
        (
            "run.max_time_s=0",
            "`max_time_s`: 0 is not a finite number above 0",
        ),
        (
            "cluster.gpu_mem_gb=0",
            "`gpu_mem_gb`: 0 is not a finite number above 0",
        ),
    ] {
        let e = error_line(&blox(&["sim", "--quiet", bursty, "--set", set]));
        assert!(
            e.contains(&format!("--set {set}: ")) && e.contains(says),
            "{set}: {e}"
        );
    }
    let (d, c) = setup();
    let cfg = std::fs::read_to_string(&c).unwrap().replace(
        "round_s = 60",
        "round_s = 60
min_run_startup_factor = -1",
    );
    let c2 = write(d.path(), "c2.toml", &cfg);
    let e = error_line(&blox(&["sim", "--quiet", c2.to_str().unwrap()]));
    assert!(
        e.contains(
            "c2.toml:7: [run] `min_run_startup_factor`: -1 is not a finite number of 0 or more"
        ),
        "{e}"
    );
}

#[test]
fn a_zero_speed_would_never_finish_and_is_refused() {
    let (_d, c) = setup();
    let o = blox(&[
        "sim",
        "--quiet",
        c.to_str().unwrap(),
        "--set",
        "sim.type_speed.V100=0",
    ]);
    let e = error_line(&o);
    assert!(
        e.contains("type_speed") && e.contains("must be positive"),
        "{e}"
    );
}

#[test]
fn max_rounds_with_unfinished_jobs_warns_and_fails_unless_allowed() {
    let (d, c) = setup();
    let out = d.path().join("out");
    let args = [
        "sim",
        "--quiet",
        c.to_str().unwrap(),
        "--set",
        "run.max_rounds=2",
        "--out",
        out.to_str().unwrap(),
    ];
    let o = blox(&args);
    let e = error_line(&o);
    assert!(
        e.contains("run.max_rounds = 2 stopped the run with 2 of 2 jobs unfinished"),
        "{e}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("warning            stopped by run.max_rounds = 2"),
        "{stdout}"
    );
    assert!(
        out.join("jobs.csv").is_file(),
        "the tables are still written"
    );
    let mut allowed = args.to_vec();
    allowed.push("--allow-unfinished");
    assert!(blox(&allowed).status.success());
}

#[test]
fn a_grid_cell_error_names_the_users_config_not_a_temporary_file() {
    let (d, c) = setup();
    let typo = std::fs::read_to_string(&c)
        .unwrap()
        .replace("round_s = 60", "round_s = 60\nround_sec = 5");
    write(d.path(), "typo.toml", &typo);
    let grid = write(
        d.path(),
        "grid.toml",
        "[[grid]]\nname = \"g\"\nconfigs = [\"typo.toml\"]\nseeds = [1]\n",
    );
    let o = blox(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        d.path().join("o").to_str().unwrap(),
    ]);
    let e = error_line(&o);
    assert!(
        e.contains("typo.toml:7: [run]") && e.contains("round_sec"),
        "{e}"
    );
    assert!(!e.contains("blox-cell") && !e.contains("/tmp/blox"), "{e}");
    // A value the grid sets is blamed on the grid file's line.
    write(
        d.path(),
        "grid.toml",
        "[[grid]]\nname = \"g\"\nconfigs = [\"c.toml\"]\nset = { \"run.round_s\" = \"0\" }\n",
    );
    let e = error_line(&blox(&[
        "sweep",
        grid.to_str().unwrap(),
        "--out",
        d.path().join("o").to_str().unwrap(),
    ]));
    assert!(
        e.contains("grid.toml:4") && e.contains("`round_s`: 0 is not a finite number above 0"),
        "{e}"
    );
}

#[test]
fn sim_into_a_closed_pipe_exits_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_blox"))
        .args(["sim", "--quiet"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Like `| head -1`: read one line, then close the pipe.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("blox sim"), "{first}");
    let o = child.wait_with_output().unwrap();
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(!e.contains("panicked") && !e.contains("Broken pipe"), "{e}");
}

#[test]
fn logs_written_to_a_file_or_pipe_carry_no_colour_codes() {
    let (dir, config) = setup();
    // Debug logs name every launch: there is something to colour.
    let o = blox(&[
        "sim",
        config.to_str().unwrap(),
        "--log",
        "debug",
        "--out",
        dir.path().join("out").to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("launch"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "ANSI escape codes in a piped log: {err:?}"
    );
}

/// Sia's `p` and `lambda_n` that could never start a job (`p > 0`
/// with the config's positive `lambda_n` stalled with "no progress is
/// possible") are refused at load, naming the file, line and the rule; left
/// unset, `lambda_n` takes the artifact's value for the sign of `p` and runs.
#[test]
fn sia_parameters_that_cannot_start_a_job_are_refused_with_the_rule() {
    let e = error_line(&blox(&[
        "sim",
        "--quiet",
        "examples/configs/sia/sia.toml",
        "--set",
        "scheduling.p=0.5",
    ]));
    assert!(
        e.contains("sia.toml:") && e.contains("[scheduling]") && e.contains("lambda_n"),
        "{e}"
    );
    assert!(
        e.contains("must be below 1") && e.contains("lambda_n = -1"),
        "{e}"
    );
    let e = error_line(&blox(&[
        "sim",
        "--quiet",
        "examples/configs/sia/sia.toml",
        "--set",
        "scheduling.lambda_n=0.9",
    ]));
    assert!(e.contains("must be above 1"), "{e}");
    let d = tempfile::tempdir().unwrap();
    let o = blox(&[
        "sim",
        "--quiet",
        "examples/configs/sia/sia.toml",
        "--set",
        "scheduling.p=0.5",
        "--unset",
        "scheduling.lambda_n",
        "--set",
        "workload.num_jobs=20",
        "--out",
        d.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let jobs = std::fs::read_to_string(d.path().join("jobs.csv")).unwrap();
    assert_eq!(
        jobs.lines().filter(|l| l.contains(",finished,")).count(),
        20,
        "{jobs}"
    );
}

/// A worker's bad settings stop it before it starts, naming the setting
/// (and, from a config file, the file and line): a `pass_env` of the
/// worker's own `BLOX_*` settings, a memory limit above the node's.
#[test]
fn a_workers_bad_settings_are_refused_at_start_naming_them() {
    let d = tempfile::tempdir().unwrap();
    let o = blox(&[
        "worker",
        "--gpus",
        "1",
        "--pass-env",
        "PATH,BLOX_TOKEN_FILE",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("--pass-env") && e.contains("BLOX_TOKEN_FILE"),
        "{e}"
    );
    let cfg = write(
        d.path(),
        "w.toml",
        "[worker]\nmax_processes = 64\nmemory_gb = 1e9\n",
    );
    let o = blox(&["worker", "--gpus", "1", "--config", cfg.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("w.toml") && e.contains(":3") && e.contains("memory_gb"),
        "{e}"
    );
}

/// A negative run time is refused as one (not taken for a flag), and a job
/// is named as logs name it (`job-7`) or by its number.
#[test]
fn a_negative_duration_and_a_job_named_as_logs_name_it() {
    let o = blox(&["submit", "--duration-s", "-5", "--", "/bin/true"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("--duration-s -5") && e.contains("positive"),
        "{e}"
    );
    assert!(!e.contains("'-- -5'"), "{e}");
    let o = blox(&["cancel", "job-x"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("not a job id (a number, or job-N)"),
        "{}",
        stderr(&o)
    );
    // `job-7` parses (the call then fails: no scheduler listens here).
    let o = blox(&["cancel", "job-7", "--scheduler", "127.0.0.1:9"]);
    assert!(!stderr(&o).contains("not a job id"), "{}", stderr(&o));
}
