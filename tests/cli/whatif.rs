//! `blox whatif` on recorded history: a simulation's event log replayed
//! under the config that ran reproduces it decision for decision, from its
//! start and from the middle; under another config it runs and differs;
//! bad configs, a log cut short or rotated and an unreachable scheduler are
//! handled as the issue asks.

use super::{blox, tempdir, text};
use std::path::Path;

/// Runs `config` (`jobs` Philly jobs) with its event log into `dir`.
fn record(config: &str, jobs: usize, dir: &Path) -> String {
    let o = blox(&[
        "sim",
        config,
        "--set",
        &format!("workload.num_jobs={jobs}"),
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    dir.join("events.jsonl").display().to_string()
}

fn whatif(args: &[&str]) -> (bool, String) {
    let mut a = vec!["whatif"];
    a.extend_from_slice(args);
    let o = blox(&a);
    (o.status.success(), text(&o))
}

/// "(label): N decisions as in the log, M not" → (N, M).
fn matched(t: &str, label: &str) -> (usize, usize) {
    let line = t
        .lines()
        .find(|l| l.starts_with(&format!("{label}: ")) && l.contains("decisions"))
        .unwrap_or_else(|| panic!("no comparison for {label}: {t}"));
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    (nums[0], nums[1])
}

#[test]
fn a_log_replayed_under_its_own_config_is_reproduced_and_another_config_differs() {
    let dir = tempdir("whatif");
    // 60 jobs under LAS: 172,000 decisions (preemptions) in the log.
    let log = record("examples/configs/philly-las.toml", 60, &dir.join("sim"));
    for at in ["0", "150000"] {
        let out = dir.join(format!("out-{at}"));
        let (ok, t) = whatif(&[
            "--events",
            &log,
            "--at",
            at,
            "--config",
            "examples/configs/philly-las.toml",
            "--config",
            "examples/configs/philly-fifo.toml",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(ok, "{t}");
        let (m, d) = matched(&t, "philly-las");
        assert!(m > 100 && d == 0, "at {at}: {t}");
        let (_, d_fifo) = matched(&t, "philly-fifo");
        assert!(d_fifo > 0, "FIFO decides otherwise: {t}");
        // The replay under its own config has the log's JCTs.
        let row = |label: &str| -> Vec<String> {
            let l = t.lines().find(|l| l.starts_with(label)).unwrap();
            l.split_whitespace()
                .skip(1)
                .take(5)
                .map(String::from)
                .collect()
        };
        assert_eq!(row("actual "), row("philly-las "), "{t}");
        assert_ne!(row("actual "), row("philly-fifo "), "{t}");
        for f in ["whatif.csv", "predictions.csv", "sweep.csv", "summary.md"] {
            assert!(out.join(f).exists(), "{f}: {t}");
        }
        assert!(out.join("philly-fifo/jobs.csv").exists());
        let pred = std::fs::read_to_string(out.join("predictions.csv")).unwrap();
        assert!(pred.starts_with("job_id,name,arrival_s,config,start_s,finish_s,jct_s"));
        assert!(pred.lines().any(|l| l.contains(",philly-fifo,")), "{pred}");
    }
}

/// Work rolled back to a checkpoint is not work: a checkpointed LAS run
/// (jobs lose up to an hour at each preemption) replays decision for
/// decision, its JCTs as logged (its `finished` events carried the
/// lost work as work, and 25,325 decisions differed).
#[test]
fn a_checkpointed_run_is_replayed_decision_for_decision() {
    let dir = tempdir("whatif-ckpt");
    let sim = dir.join("sim");
    let o = blox(&[
        "sim",
        "examples/configs/philly-las.toml",
        "--set",
        "workload.num_jobs=120",
        "--set",
        "run.checkpoint_interval_s=3600",
        "--quiet",
        "--out",
        sim.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let jobs = std::fs::read_to_string(sim.join("jobs.csv")).unwrap();
    let header: Vec<&str> = jobs.lines().next().unwrap().split(',').collect();
    let lost = header
        .iter()
        .position(|h| *h == "lost_work_gpu_seconds")
        .unwrap();
    let total: f64 = jobs
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(lost).unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(total > 0.0, "no work was lost: the test would show nothing");
    let log = sim.join("events.jsonl");
    // From the start, and from the middle: there, each job's progress is
    // what it kept, less the work its stops rolled back (before, 20,404
    // decisions differed from 100,000 s on).
    for at in ["0", "100000", "300000"] {
        let (ok, t) = whatif(&[
            "--events",
            log.to_str().unwrap(),
            "--at",
            at,
            "--config",
            "examples/configs/philly-las.toml",
            "--set",
            "workload.num_jobs=120",
            "--set",
            "run.checkpoint_interval_s=3600",
        ]);
        assert!(ok, "{t}");
        let (m, d) = matched(&t, "philly-las");
        assert!(m > 100 && d == 0, "at {at}: {t}");
    }
}

/// `blox sim CONFIG --out DIR` then `blox whatif --events DIR/events.jsonl
/// --config CONFIG` (same `--set`s, `--at`): the (decisions as in the log,
/// decisions not) of the replay.
fn replay_own(config: &str, sets: &[&str], at: &str, dir: &Path) -> (usize, usize) {
    let sim = dir.join("sim");
    let mut a = vec!["sim", config, "--quiet", "--out", sim.to_str().unwrap()];
    for s in sets {
        a.extend(["--set", s]);
    }
    let o = blox(&a);
    assert!(o.status.success(), "{}", text(&o));
    let log = sim.join("events.jsonl");
    let mut a = vec![
        "--events",
        log.to_str().unwrap(),
        "--at",
        at,
        "--config",
        config,
    ];
    for s in sets {
        a.extend(["--set", s]);
    }
    let (ok, t) = whatif(&a);
    assert!(ok, "{t}");
    let label = Path::new(config).file_stem().unwrap().to_str().unwrap();
    matched(&t, label)
}

/// A Sia run on its heterogeneous cluster, replayed from its own log: its
/// profile-driven jobs keep the trace's work (model, batch, target) where
/// the config's workload has them as the log submitted them, and the log's
/// numbers read back to the bit (before: 80 decisions as in the log, 372
/// not, the replay's mean JCT 3.37 h against 0.47 h).
#[test]
fn a_sia_run_is_replayed_decision_for_decision() {
    let dir = tempdir("whatif-sia");
    let (m, d) = replay_own(
        "examples/configs/sia/sia.toml",
        &["workload.num_jobs=40"],
        "0",
        &dir,
    );
    assert!(m > 100 && d == 0, "{m} as in the log, {d} not");
    // From the middle, the jobs running then lose their goodput models'
    // state (the log does not keep it): the what-if says so.
    let log = dir.join("sim").join("events.jsonl");
    let (ok, t) = whatif(&[
        "--events",
        log.to_str().unwrap(),
        "--at",
        "7200",
        "--config",
        "examples/configs/sia/sia.toml",
        "--set",
        "workload.num_jobs=40",
    ]);
    assert!(ok, "{t}");
    assert!(
        t.contains("7 job(s) active at 7200 s ran on goodput profiles"),
        "{t}"
    );
}

/// Teams over LAS with gang placement on a two-level topology (Philly's
/// virtual clusters), replayed from the middle of its own log.
#[test]
fn a_teams_and_topology_run_is_replayed_decision_for_decision_from_the_middle() {
    let dir = tempdir("whatif-teams");
    let (m, d) = replay_own(
        "examples/configs/teams/philly-vc-teams-las.toml",
        &["workload.num_jobs=150"],
        "150000",
        &dir,
    );
    assert!(m > 100 && d == 0, "{m} as in the log, {d} not");
}

/// A run whose nodes fail (`[failures]`: 16 nodes, lemons, rack-wide
/// failures), replayed from the middle of its own log: the log's failures
/// and repairs come at their times (the config's model draws none), the
/// nodes down then start down, and each job's work leaves out what its
/// failures rolled back, a launch's first round included (before: 88,092
/// decisions differed with the failures ignored, 15,914 once they were
/// replayed, from a job's loss the loop had not counted).
#[test]
fn a_run_whose_nodes_fail_is_replayed_decision_for_decision_from_the_middle() {
    let dir = tempdir("whatif-failures");
    for at in ["200000", "2000000"] {
        let (m, d) = replay_own(
            "examples/configs/failures/philly-las.toml",
            &["workload.num_jobs=200"],
            at,
            &dir,
        );
        assert!(m > 1000 && d == 0, "from {at}: {m} as in the log, {d} not");
    }
}

#[test]
fn a_variant_of_the_first_config_is_replayed_beside_it() {
    let dir = tempdir("whatif-variant");
    let log = record("examples/configs/philly-fifo.toml", 120, &dir.join("sim"));
    let (ok, t) = whatif(&[
        "--events",
        &log,
        "--config",
        "examples/configs/philly-fifo.toml",
        "--variant",
        "scheduling.policy=srtf",
    ]);
    assert!(ok, "{t}");
    assert_eq!(matched(&t, "philly-fifo").1, 0, "{t}");
    assert!(t.contains("philly-fifo[scheduling.policy=srtf]"), "{t}");
    // A config without [cluster] is read (a live log's nodes are the
    // cluster: blox-runtime/tests/same_loop/las.rs), but a simulation's log
    // names no starting nodes: the replay says it needs the config's.
    let bare = dir.join("bare.toml");
    std::fs::write(&bare, "[scheduling]\npolicy = \"fifo\"\n").unwrap();
    let (ok, t) = whatif(&["--events", &log, "--config", bare.to_str().unwrap()]);
    assert!(!ok, "{t}");
    assert!(
        t.contains("bare.toml")
            && t.contains("missing [cluster] section: the history names no nodes"),
        "{t}"
    );
}

#[test]
fn a_bad_config_is_refused_before_anything_runs() {
    let dir = tempdir("whatif-bad");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[cluster]\nnodes = 1\ngpus_per_node = 4\n[scheduling]\npolicy = \"no-such\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let (ok, t) = whatif(&[
        "--events",
        "/nonexistent/events.jsonl",
        "--config",
        "examples/configs/philly-fifo.toml",
        "--config",
        bad.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!ok, "{t}");
    assert!(t.contains("bad.toml:5") && t.contains("no-such"), "{t}");
    assert!(!out.exists(), "nothing written");
    let (ok, t) = whatif(&["--events", "/nonexistent/events.jsonl"]);
    assert!(!ok && t.contains("--config"), "{t}");
}

#[test]
fn a_log_cut_short_or_rotated_is_replayed_as_far_as_it_goes() {
    let dir = tempdir("whatif-cut");
    let log = record("examples/configs/philly-fifo.toml", 120, &dir.join("sim"));
    let body = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = body.lines().collect();
    // Cut in the middle of a line.
    let half = lines.len() / 2;
    let mut cut = lines[..half].join("\n");
    cut.push('\n');
    cut.push_str(&lines[half][..lines[half].len() / 2]);
    let cut_path = dir.join("cut.jsonl");
    std::fs::write(&cut_path, cut).unwrap();
    let (ok, t) = whatif(&[
        "--events",
        cut_path.to_str().unwrap(),
        "--config",
        "examples/configs/philly-fifo.toml",
    ]);
    assert!(ok, "{t}");
    assert!(t.contains("cut short"), "{t}");
    // Its first part gone (rotated away): the jobs it held are missing.
    let tail = dir.join("tail.jsonl");
    std::fs::write(&tail, lines[half..].join("\n") + "\n").unwrap();
    let (ok, t) = whatif(&[
        "--events",
        tail.to_str().unwrap(),
        "--config",
        "examples/configs/philly-fifo.toml",
    ]);
    assert!(ok, "{t}");
    assert!(t.contains("no `submitted` event"), "{t}");
    // A scheduler restarted: its clock and rounds start again. The run
    // after the last restart is replayed, and reproduced.
    let twice = dir.join("twice.jsonl");
    std::fs::write(&twice, format!("{body}{body}")).unwrap();
    let (ok, t) = whatif(&[
        "--events",
        twice.to_str().unwrap(),
        "--config",
        "examples/configs/philly-fifo.toml",
    ]);
    assert!(ok, "{t}");
    assert!(t.contains("spans 1 scheduler restarts"), "{t}");
    assert_eq!(matched(&t, "philly-fifo").1, 0, "{t}");
}

#[test]
fn an_unreachable_scheduler_is_a_clear_error() {
    let (ok, t) = whatif(&[
        "--scheduler",
        "127.0.0.1:1",
        "--config",
        "examples/configs/philly-fifo.toml",
    ]);
    assert!(!ok, "{t}");
    assert!(t.contains("127.0.0.1:1"), "{t}");
}
