//! `blox events` on the event log `blox sim --out` writes: it agrees with
//! the job table, filters by job, compares two runs decision by decision,
//! follows a growing log and finds a scheduler's log from its config.

mod shared;

use blox_core::round::events::{Event, What};
use blox_eventlog::{self as event_log, EventLog};
use shared::{blox_err, blox_ok};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const BLOX: &str = env!("CARGO_BIN_EXE_blox");

fn sim(policy: &str, out: &std::path::Path) {
    blox_ok(&[
        "sim",
        "--quiet",
        "--set",
        &format!("scheduling.policy={policy}"),
        "--out",
        out.to_str().unwrap(),
    ]);
}

#[test]
fn a_simulations_event_log_agrees_with_its_job_table_and_tells_runs_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (las, fifo) = (dir.path().join("las"), dir.path().join("fifo"));
    sim("las", &las);
    sim("fifo", &fifo);
    let events = event_log::read(&las.join("events.jsonl"), false).unwrap();

    // Every job of jobs.csv: one admission, one end with its JCT, as many
    // policy preemptions as the table counts.
    let mut by_job: HashMap<u64, Vec<&Event>> = HashMap::new();
    for e in &events {
        if let Some(j) = e.job {
            by_job.entry(j.0).or_default().push(e);
        }
    }
    let mut rows = csv::Reader::from_path(las.join("jobs.csv")).unwrap();
    let head = rows.headers().unwrap().clone();
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let (id_c, jct_c, pre_c) = (col("job_id"), col("jct_s"), col("preemptions"));
    let mut preempted_somewhere = false;
    for r in rows.records() {
        let r = r.unwrap();
        let id: u64 = r[id_c].parse().unwrap();
        let evs = &by_job[&id];
        let count = |k: &str| evs.iter().filter(|e| e.what.kind() == k).count();
        assert_eq!(count("admitted"), 1, "job {id}: {evs:?}");
        assert_eq!(count("finished"), 1, "job {id}: {evs:?}");
        let jct: f64 = r[jct_c].parse().unwrap();
        let logged = evs.iter().find_map(|e| match &e.what {
            What::Finished { jct_s, .. } => *jct_s,
            _ => None,
        });
        assert!((logged.unwrap() - jct).abs() < 1e-6, "job {id}");
        let policy_preemptions = evs
            .iter()
            .filter(
                |e| matches!(&e.what, What::Preempted { reason } if reason.starts_with("not kept")),
            )
            .count();
        assert_eq!(
            policy_preemptions,
            r[pre_c].parse::<usize>().unwrap(),
            "job {id}"
        );
        preempted_somewhere |= policy_preemptions > 0;
        // What was submitted comes first (with its spec), then the
        // admission; a launch precedes every preemption and the end.
        assert!(
            matches!(&evs[0].what, What::Submitted { spec } if spec.id.0 == id),
            "job {id}: {evs:?}"
        );
        assert_eq!(evs[1].what.kind(), "admitted");
        assert_eq!(evs[2].what.kind(), "launched");
        assert_eq!(evs.last().unwrap().what.kind(), "finished");
    }
    assert!(preempted_somewhere, "LAS preempts in the default workload");

    // --job: that job's lines only.
    let path = las.join("events.jsonl");
    let p = path.to_str().unwrap();
    let out = blox_ok(&["events", p, "--job", "job-3"]);
    assert!(out.lines().count() >= 3, "{out}");
    assert!(out.lines().all(|l| l.contains("job-3 ")), "{out}");
    assert!(
        out.contains("launched on") && out.contains("finished, JCT"),
        "{out}"
    );
    let json = blox_ok(&["events", p, "--json", "--job", "3"]);
    assert_eq!(json.lines().count(), out.lines().count());

    // --diff: a run against itself matches; LAS against FIFO does not.
    // (Submissions are inputs, not decisions: a diff skips them.)
    let same = blox_ok(&["events", p, "--diff", p]);
    let decisions = events
        .iter()
        .filter(|e| e.what.kind() != "submitted")
        .count();
    assert!(
        same.contains(&format!("{decisions} decisions match, 0 differ")),
        "{same}"
    );
    let o = Command::new(BLOX)
        .args(["events", p, "--diff"])
        .arg(fifo.join("events.jsonl"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("only in the first") && text.contains("preempted"),
        "{text}"
    );
}

/// `blox events --follow --json PATH`, its stdout's lines sent as they come.
fn follow(path: &std::path::Path) -> (Child, Receiver<String>) {
    let mut child = Command::new(BLOX)
        .args(["events", "--follow", "--json"])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

#[test]
fn follow_prints_what_is_appended_across_rotations_and_config_finds_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run").join("events.jsonl");
    // A scheduler config whose job table is in run/: the log is beside it.
    let cfg = dir.path().join("scheduler.toml");
    std::fs::write(&cfg, "[runtime]\nstate = \"run/state.redb\"\n").unwrap();
    let mut log = EventLog::append(&path, 300, 3).unwrap();
    let ev = |round: u64| Event {
        round,
        time_s: round as f64,
        unix_s: Some(1.8e9 + round as f64),
        job: Some(blox_core::JobId(round)),
        name: Some(format!("j{round}")),
        what: What::Admitted,
    };
    log.write(&[ev(0)]).unwrap();
    let out = blox_ok(&["events", "--config", cfg.to_str().unwrap()]);
    assert!(
        out.contains("2027-01-15T08:00:00Z") && out.contains("job-0 (j0)  admitted"),
        "{out}"
    );

    let (mut child, rx) = follow(&path);
    let mut seen: Vec<Event> = Vec::new();
    let next = |seen: &mut Vec<Event>, want: usize| {
        let t = Instant::now();
        while seen.len() < want && t.elapsed() < Duration::from_secs(20) {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
                seen.push(serde_json::from_str(&l).unwrap());
            }
        }
    };
    next(&mut seen, 1);
    // Appended one round at a time, rotating every few lines.
    for r in 1..12 {
        log.write(&[ev(r)]).unwrap();
        next(&mut seen, r as usize + 1);
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(event_log::rotated(&path, 1).exists(), "the log rotated");
    let rounds: Vec<u64> = seen.iter().map(|e| e.round).collect();
    assert_eq!(rounds, (0..12).collect::<Vec<_>>());
}

#[test]
fn follow_waits_for_a_log_that_is_not_there_yet() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("later").join("events.jsonl");
    let (mut child, rx) = follow(&path);
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        child.try_wait().unwrap().is_none(),
        "--follow on a missing log waits rather than exiting"
    );
    let mut log = EventLog::append(&path, 1 << 20, 2).unwrap();
    let ev = Event {
        round: 3,
        time_s: 3.0,
        unix_s: None,
        job: Some(blox_core::JobId(3)),
        name: Some("j3".into()),
        what: What::Admitted,
    };
    log.write(std::slice::from_ref(&ev)).unwrap();
    let line = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let seen: Event = serde_json::from_str(&line.expect("the event, once written")).unwrap();
    assert_eq!(seen, ev);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not there yet; waiting"), "{err}");
}

#[test]
fn a_missing_log_and_a_bad_line_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let p = path.to_str().unwrap();
    let err = blox_err(&["events", p]);
    assert!(err.contains("no event log here"), "{err}");
    std::fs::write(
        &path,
        "{\"round\":0,\"time_s\":0,\"event\":\"admitted\"}\nnot json\n",
    )
    .unwrap();
    let err = blox_err(&["events", p]);
    assert!(err.contains("events.jsonl:2: not an event"), "{err}");
    let err = blox_err(&["events", "--job", "seven", p]);
    assert!(err.contains("--job seven"), "{err}");
}

/// A scheduler restart in a live log: the text view says where it
/// restarted, and that the jobs it submitted and admitted again came from
/// its job table (read as the same jobs submitted twice).
#[test]
fn a_restart_and_the_jobs_it_queued_again_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("events.jsonl");
    let line = |round: u64, t: f64, unix: f64, what: &str| {
        format!(r#"{{"round":{round},"time_s":{t},"unix_s":{unix},"job":3,"name":"a",{what}}}"#)
    };
    let spec =
        r#""event":"submitted","spec":{"id":3,"name":"a","arrival_s":0.5,"requested_gpus":1}"#;
    let log = [
        line(1, 1.0, 1001.0, spec),
        line(1, 1.0, 1001.0, r#""event":"admitted""#),
        line(
            4,
            4.0,
            1004.0,
            r#""event":"waiting","wait_kind":"waiting-for-gpus","reason":"r""#,
        ),
        line(1, 1.0, 1010.0, &spec.replace("0.5", "-9.5")),
        line(1, 1.0, 1010.0, r#""event":"admitted""#),
    ]
    .join("\n");
    std::fs::write(&p, log + "\n").unwrap();
    let out = blox_ok(&["events", p.to_str().unwrap()]);
    assert_eq!(
        out.matches("-- the scheduler restarted").count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.matches("(again: the restarted scheduler took it from its job table)")
            .count(),
        2,
        "{out}"
    );
    let first = out.lines().position(|l| l.contains("submitted")).unwrap();
    assert!(!out.lines().nth(first).unwrap().contains("again"), "{out}");
    // The JSON view is the log's lines as they are.
    let json = blox_ok(&["events", p.to_str().unwrap(), "--json"]);
    assert!(
        !json.contains("again") && !json.contains("restarted"),
        "{json}"
    );
}
