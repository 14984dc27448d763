//! `blox status --start` and `blox whatif --scheduler` against a live
//! scheduler and worker (real processes).

use super::*;

#[test]
fn status_start_and_whatif_answer_on_a_live_scheduler() {
    // FIFO, one GPU: a long job runs, three short ones wait behind it.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toy = toy_job();
    let mut procs = Procs::default();
    let cfg = d.join("live.toml");
    let addr = procs.scheduler(
        &cfg,
        "[run]\nround_s = 0.5\n[scheduling]\npolicy = \"fifo\"\n[runtime]\nlisten = \"127.0.0.1:0\"\n\
         state = \"state.redb\"\nheartbeat_s = 0.2\nworker_timeout_s = 1.5\n",
    );
    procs.worker(&addr, d, "w", 1, &[]);
    let sec = Security::default();
    wait_for_workers(&addr, &sec, 1);
    let mut ctl = Ctl::connect(&addr, &sec).unwrap();
    ctl.submit(toy_submission(&toy, "long", 20.0, Some(20.0)))
        .unwrap();
    wait_until("the long job runs", Duration::from_secs(30), || {
        status(&addr, &sec).iter().any(|j| j.status == "running")
    });
    for i in 0..3 {
        ctl.submit(toy_submission(&toy, &format!("short-{i}"), 0.5, Some(0.5)))
            .unwrap();
    }
    let mut start = String::new();
    wait_until(
        "every queued job has a predicted start",
        Duration::from_secs(20),
        || {
            start = shared::blox_ok(&[
                Path::new("status"),
                Path::new("--scheduler"),
                Path::new(&addr),
                Path::new("--start"),
            ]);
            start
                .lines()
                .filter(|l| l.contains("short-") && l.contains(" in "))
                .count()
                == 3
        },
    );
    assert!(
        start.contains("forecast made") && start.contains("duration_s"),
        "{start}"
    );
    let out = d.join("whatif");
    let t = shared::blox_ok(&[
        Path::new("whatif"),
        Path::new("--scheduler"),
        Path::new(&addr),
        Path::new("--config"),
        &cfg,
        Path::new("--variant"),
        Path::new("scheduling.policy=srtf"),
        Path::new("--out"),
        &out,
    ]);
    assert!(t.contains("what if: 4 jobs"), "{t}");
    let csv = std::fs::read_to_string(out.join("whatif.csv")).unwrap();
    let wait_of = |label: &str| -> f64 {
        let l = csv
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("{csv}"));
        l.split(',')
            .nth(6)
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{l}"))
    };
    // Waits come from the jobs' real first starts (not a start at 0, which
    // gave negative waits): none below zero, in any row.
    for l in csv.lines().skip(1) {
        let w: f64 = l.split(',').nth(6).unwrap().parse().unwrap_or(0.0);
        assert!(w >= 0.0, "a negative wait: {l}\n{csv}");
    }
    // SRTF preempts the long job for the short ones: they wait less.
    assert!(
        wait_of("live[scheduling.policy=srtf]") < wait_of("live,"),
        "{csv}"
    );
}
