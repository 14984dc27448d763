//! A job's whole process tree ends with it: each launch runs in
//! its own process group, killed as a group on cancel and revocation, and
//! what a job leaves behind in its group is killed when it exits.
#![cfg(target_os = "linux")]

use blox_runtime::process::{LaunchSpec, Running};
use std::time::{Duration, Instant};

fn spec(dir: &std::path::Path, script: &str) -> LaunchSpec {
    LaunchSpec {
        job: 1,
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        devices: vec!["0".into()],
        control: dir.join("control"),
        checkpoint: dir.join("checkpoint"),
        coord: None,
        resume: false,
        batch_size: None,
        master_addr: "127.0.0.1:0".into(),
        worker_addr: "127.0.0.1:0".into(),
        process_per_gpu: false,
        first_rank: 0,
        world_size: None,
        generation: 1,
        job_user: None,
        lease: None,
        pass_env: Vec::new(),
        cgroup_procs: Vec::new(),
        share: None,
    }
}

/// Live processes whose whole command line is `cmd` (arguments joined by
/// spaces; zombies not counted).
fn alive(cmd: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'));
            let line = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let line = String::from_utf8_lossy(&line).replace('\0', " ");
            !zombie && line.trim_end() == cmd
        })
        .count()
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A unique sleep length per test run, so that leftovers of other runs do
/// not count.
fn token(base: u32) -> String {
    format!("{}", base + std::process::id() % 1000)
}

#[test]
fn a_killed_job_takes_what_it_forked_with_it() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (token(61_000), token(62_000));
    let r = Running::spawn(&spec(d.path(), &format!("sleep {a} & sleep {b}"))).unwrap();
    wait_until("both sleeps run", Duration::from_secs(10), || {
        alive(&format!("sleep {a}")) == 1 && alive(&format!("sleep {b}")) == 1
    });
    r.kill();
    wait_until("the launch exits", Duration::from_secs(10), || {
        r.exit().is_some()
    });
    wait_until(
        "the forked sleep is gone too",
        Duration::from_secs(5),
        || alive(&format!("sleep {a}")) == 0 && alive(&format!("sleep {b}")) == 0,
    );
}

#[test]
fn what_a_job_leaves_running_in_its_group_ends_when_it_exits() {
    let d = tempfile::tempdir().unwrap();
    let a = token(63_000);
    let r = Running::spawn(&spec(d.path(), &format!("sleep {a} & sleep 0.3; exit 0"))).unwrap();
    wait_until("the launch exits", Duration::from_secs(10), || {
        r.exit().is_some()
    });
    assert_eq!(r.exit().unwrap().code, Some(0));
    wait_until(
        "its background sleep is gone",
        Duration::from_secs(5),
        || alive(&format!("sleep {a}")) == 0,
    );
}

/// A program that cannot start fails at once: nothing to wait for (it
/// held its worker for 2 s, and the worker's heartbeats with it).
#[test]
fn a_program_that_cannot_start_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(dir.path(), "true");
    s.argv = vec!["/nonexistent/blox-job".into()];
    let t = Instant::now();
    let e = Running::spawn(&s).err().expect("refused");
    assert!(e.to_string().contains("cannot start"), "{e}");
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
}

/// A launch whose worker's lease ran out before its process could
/// `exec` (the worker was stopped, hung, while it started the launch) runs
/// nothing; one within its lease finds the lease file in its control
/// directory from its first instruction on, so it stops itself on time even
/// if its worker hangs just after forking it.
#[test]
fn a_launch_past_its_lease_runs_nothing_and_one_within_it_holds_the_lease_file() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut late = spec(dir.path(), &format!("touch {}", ran.display()));
    let past = Instant::now()
        .checked_sub(Duration::from_millis(10))
        .unwrap();
    late.lease = Some((past, Duration::from_secs(1)));
    let e = Running::spawn(&late).err().expect("refused");
    assert!(e.to_string().contains("cannot start"), "{e}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ran.exists(), "the job ran past its lease");
    let script = format!(
        "cd \"$BLOX_CONTROL_DIR\" && test -f lease && touch {}",
        ran.display()
    );
    let mut fine = spec(&dir.path().join("b"), &script);
    fine.lease = Some((
        Instant::now() + Duration::from_secs(30),
        Duration::from_secs(1),
    ));
    let run = Running::spawn(&fine).unwrap();
    wait_until("the job ran", Duration::from_secs(10), || {
        run.exit().is_some()
    });
    assert!(ran.exists(), "no lease file when the job started");
}
