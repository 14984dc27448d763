//! The reduced soak of `blox bench soak` (docs/RELIABILITY.md): a scheduler
//! and 16 workers as real processes, 500 jobs from 100 concurrent clients,
//! two workers SIGKILLed, the scheduler SIGKILLed and restarted, one worker
//! cut off from the scheduler past its timeout — and nothing lost,
//! duplicated, run twice at once or resumed from an older checkpoint.
//! Its own test binary: it loads the machine, and the timing tests in the
//! other binaries do not run beside it.

mod common;

use common::*;
use std::process::Command;

#[test]
fn the_reduced_soak_loses_duplicates_overlaps_and_regresses_nothing() {
    toy_job();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BLOX)
        .args(["bench", "soak", "--reduced", "--out"])
        .arg(dir.path().join("soak"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("soak: accepted"))
        .unwrap_or_else(|| panic!("no result line:\n{stdout}\n{stderr}"));
    assert!(
        line.contains("accepted 500, finished 500, failed 0"),
        "{line}"
    );
    for want in [
        "lost 0",
        "duplicated 0",
        "overlapping runs 0",
        "checkpoint regressions 0",
    ] {
        assert!(line.contains(want), "{line}");
    }
    // Every fault happened.
    let faults = stdout
        .lines()
        .find(|l| l.contains("faults:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(faults.matches("killed").count(), 2, "{faults}");
    assert!(faults.contains("scheduler restarted"), "{faults}");
    assert!(faults.contains("cut off"), "{faults}");
    // The journal saw more launches than jobs (preemptions, faults).
    let launches: usize = faults
        .split(" launches")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(launches > 500, "{faults}");
}
