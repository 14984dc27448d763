//! The reduced soak of `blox bench soak` (docs/RELIABILITY.md): a scheduler
//! and 16 workers as real processes, 500 jobs from 100 concurrent clients,
//! two workers SIGKILLed, the scheduler SIGKILLed and restarted, one worker
//! cut off from the scheduler past its timeout — and nothing lost,
//! duplicated, run twice at once or resumed from an older checkpoint.
//! Its own test binary: it loads the machine, and the timing tests in the
//! other binaries do not run beside it. Each run takes about a minute of
//! real time: both are long tests, which the README's test command leaves
//! out and `.ci/run` runs (`cargo test --test soak -- --ignored`).

mod common;

use common::*;
use std::process::Command;

/// One soak at a time: each loads the machine on its own.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `blox bench soak --reduced` with `extra` arguments; its stdout.
fn soak(extra: &[&str]) -> String {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    toy_job();
    let dir = tempfile::tempdir().unwrap();
    // Run as root, the soak's jobs run as uids of their own, which must
    // reach its directory.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = Command::new(BLOX)
        .args(["bench", "soak", "--reduced"])
        .args(extra)
        .arg("--out")
        .arg(dir.path().join("soak"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}

/// Under teams with quotas and gang placement on racks (`--teams`), the
/// same faults lose, duplicate, overlap and regress nothing either, and a
/// team below its quota gets it back within seconds.
#[test]
#[ignore = "long (a minute of real time): .ci/run runs it with --ignored"]
fn the_reduced_soak_with_teams_keeps_its_invariants() {
    let stdout = soak(&["--teams"]);
    assert!(
        stdout.contains("accepted 500, finished 500, failed 0, lost 0, duplicated 0, overlapping runs 0, checkpoint regressions 0"),
        "{stdout}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("soak: teams:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    let longest: f64 = line
        .split("for at most ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // 1 s rounds, 1 s min_run_s, 2 s grace, and the faults' own seconds
    // (a scheduler restart, a 6 s cut): 9 s measured; a loop would be
    // minutes.
    assert!(longest <= 30.0, "{line}");
}

#[test]
#[ignore = "long (a minute of real time): .ci/run runs it with --ignored"]
fn the_reduced_soak_loses_duplicates_overlaps_and_regresses_nothing() {
    let stdout = soak(&[]);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("soak: accepted"))
        .unwrap_or_else(|| panic!("no result line:\n{stdout}"));
    assert!(
        line.contains("accepted 500, finished 500, failed 0"),
        "{line}"
    );
    for want in [
        "lost 0",
        "duplicated 0",
        "overlapping runs 0",
        "checkpoint regressions 0",
        "leftover job processes 0",
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
    assert!(faults.contains("stopped (SIGSTOP)"), "{faults}");
    assert!(faults.contains("disk full for 6 s"), "{faults}");
    // Through libfaketime, where it is installed (.ci/run installs it).
    assert!(
        faults.contains("clock stepped back 1 h across a restart")
            || faults.contains("clock step skipped: no libfaketime"),
        "{faults}"
    );
    // Attackers (when the soak, being root, runs jobs as their own uids)
    // stole and forged nothing, and no job counted finished skipped its
    // work.
    let attacks = stdout
        .lines()
        .find(|l| l.starts_with("soak: attackers") || l.starts_with("soak: no attackers"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        attacks.contains("finished without their work 0"),
        "{attacks}"
    );
    #[cfg(target_os = "linux")]
    if std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap()) == 0 {
        assert!(
            attacks.contains("credentials stolen 0, forged calls accepted 0 of"),
            "{attacks}"
        );
        // Against the node: no root-owned decoy changed, nothing outlived
        // its launch (through a worker's SIGKILL and restart), no bomb,
        // hog or huge submission got past its limit.
        assert!(
            attacks.contains("decoys changed 0, escaped processes 0, budgets exceeded 0"),
            "{attacks}"
        );
        let node: usize = attacks
            .split("node attacks ")
            .nth(1)
            .and_then(|s| s.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        // (Each attacker: its links, its escapes, its metrics link; one
        // stopped half-way counts what it did.)
        assert!(node >= 5 * 3, "{attacks}");
        let n: usize = attacks
            .strip_prefix("soak: attackers ")
            .and_then(|s| s.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(n >= 5, "{attacks}");
    }
    // The journal saw more launches than jobs (preemptions, faults).
    let launches: usize = faults
        .split(" launches")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(launches > 500, "{faults}");
}
