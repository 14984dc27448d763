//! Faults a shared cluster meets against real processes: a
//! worker that hangs under its job, and a scheduler whose disk is full.

use super::*;

/// A FIFO scheduler (0.5 s rounds, 0.2 s heartbeats, a 2 s worker timeout,
/// `runtime` added to its `[runtime]`) and worker `a` with 1 GPU, both
/// processes; the scheduler's address and the (empty) client credentials.
fn scheduler_and_worker(d: &Path, runtime: &str) -> (Procs, String, Security) {
    let mut procs = Procs::default();
    let addr = procs.scheduler(
        &d.join("scheduler.toml"),
        &format!(
            "[run]\nround_s = 0.5\n[scheduling]\npolicy = \"fifo\"\n[placement]\npolicy = \"consolidated\"\n\
             [runtime]\nlisten = \"127.0.0.1:0\"\nstate = \"state.redb\"\n\
             heartbeat_s = 0.2\nworker_timeout_s = 2.0\n{runtime}"
        ),
    );
    let sec = Security::default();
    procs.worker(&addr, d, "a", 1, &[]);
    wait_for_workers(&addr, &sec, 1);
    (procs, addr, sec)
}

/// A toy job of `secs` that checkpoints every 5 iterations and writes its
/// launches' starts, checkpoints and ends to `journal`.
fn journaled(
    toy: &Path,
    name: &str,
    secs: f64,
    journal: &Path,
) -> blox_runtime::proto::JobSubmission {
    let mut job = toy_submission(toy, name, secs, None);
    job.command.extend([
        "--checkpoint-every".to_string(),
        "5".into(),
        "--journal".into(),
        journal.display().to_string(),
    ]);
    job
}

/// A worker that hangs (SIGSTOP) under a running job must not let
/// the job run beside its relaunch. The job holds the lease too: it stops
/// itself when its hung worker stops renewing it, before the scheduler
/// declares the worker gone and relaunches it elsewhere; the hung worker's
/// late report, once it wakes, neither ends the job nor frees its GPU.
#[cfg(target_os = "linux")]
#[test]
fn a_hung_worker_never_runs_its_job_beside_the_relaunch() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toy = toy_job();
    let journal = d.join("journal");
    let (mut procs, addr, sec) =
        scheduler_and_worker(d, "checkpoint_dir = \"checkpoints\"\ngrace_s = 2\n");
    let job = journaled(&toy, "steady", 8.0, &journal);
    let id = Ctl::connect(&addr, &sec).unwrap().submit(job).unwrap();
    wait_until("the job runs on a", Duration::from_secs(30), || {
        status(&addr, &sec)
            .iter()
            .any(|j| j.id == id && j.status == "running" && j.progress > 0.05)
    });
    // Somewhere to go, then a hangs for longer than the worker timeout.
    procs.worker(&addr, d, "b", 1, &[]);
    wait_for_workers(&addr, &sec, 2);
    procs.signal("a", "STOP");
    wait_until("the job runs again, on b", Duration::from_secs(20), || {
        status(&addr, &sec).iter().any(|j| {
            j.id == id && j.status == "running" && j.gpus.iter().any(|g| g.starts_with("b-"))
        })
    });
    std::thread::sleep(Duration::from_secs(2));
    procs.signal("a", "CONT");
    let mut last = Vec::new();
    wait_until("the job finished", Duration::from_secs(60), || {
        last = status(&addr, &sec);
        last.iter().any(|j| j.id == id && j.status == "finished")
    });
    let j = last.iter().find(|j| j.id == id).unwrap();
    assert!(j.launches >= 2, "{j:?}");
    // Never two launches at once, and no checkpoint went backwards.
    let seen = blox_harness::soak::journal::check(&journal).unwrap();
    assert!(seen.launches >= 2, "{seen:?}");
    assert!(seen.overlaps.is_empty(), "{seen:?}");
    assert!(seen.regressions.is_empty(), "{seen:?}");
    assert!(seen.bad_lines.is_empty(), "{seen:?}");
    // The job on a stopped itself at a boundary (its lease ran out),
    // checkpointed, and the launch on b resumed from there.
    let err = std::fs::read_to_string(keyed_dir(&d.join("a/jobs"), id).join("launch-1/stderr"))
        .unwrap_or_default();
    assert!(err.contains("lease revoked; checkpointed"), "{err}");
}

/// A launch sent to a worker just as it hangs neither stalls the
/// rounds (the scheduler stops waiting once the worker is silent past its
/// lease, where it waited up to 10 s) nor runs when the worker wakes: the
/// worker refuses a launch sent before its lease ran out (its lease epoch),
/// and the job runs once, elsewhere.
#[cfg(target_os = "linux")]
#[test]
fn a_launch_sent_to_a_hanging_worker_stalls_no_round_and_never_runs_late() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toy = toy_job();
    let journal = d.join("journal");
    let (mut procs, addr, sec) =
        scheduler_and_worker(d, "checkpoint_dir = \"checkpoints\"\ngrace_s = 2\n");
    let rounds = || -> u64 {
        Ctl::connect(&addr, &sec)
            .and_then(|mut c| c.status(&[]))
            .map_or(0, |s| s.rounds)
    };
    procs.signal("a", "STOP");
    let job = journaled(&toy, "late", 2.0, &journal);
    let id = Ctl::connect(&addr, &sec).unwrap().submit(job).unwrap();
    let r0 = rounds();
    std::thread::sleep(Duration::from_secs(5));
    let r1 = rounds();
    // 0.5 s rounds: about 10 in 5 s; a round waiting on the hung worker's
    // launch until it wakes (below) would allow at most 2.
    assert!(r1 >= r0 + 4, "rounds {r0} -> {r1} in 5 s");
    procs.worker(&addr, d, "b", 1, &[]);
    wait_until("the job runs on b", Duration::from_secs(20), || {
        status(&addr, &sec).iter().any(|j| {
            j.id == id && j.status == "running" && j.gpus.iter().any(|g| g.starts_with("b-"))
        })
    });
    procs.signal("a", "CONT");
    let mut last = Vec::new();
    wait_until("the job finished", Duration::from_secs(60), || {
        last = status(&addr, &sec);
        last.iter().any(|j| j.id == id && j.status == "finished")
    });
    // a never started it: no launch of it there, one run in the journal.
    std::thread::sleep(Duration::from_secs(1));
    let on_a = keyed_dir(&d.join("a/jobs"), id);
    assert!(
        !on_a.join("launch-1/stderr").exists(),
        "the hung worker ran it: {}",
        on_a.display()
    );
    let seen = blox_harness::soak::journal::check(&journal).unwrap();
    assert_eq!(seen.launches, 1, "{seen:?}");
    assert!(
        seen.overlaps.is_empty() && seen.regressions.is_empty(),
        "{seen:?}"
    );
}

/// A job table that cannot grow (a full disk; here the
/// scheduler's file-size limit, set from outside with `prlimit`) refuses new
/// submissions with UNAVAILABLE and nothing else: the scheduler keeps
/// running, its running job keeps running, and once the disk takes writes
/// again, submissions are accepted and every job finishes.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_refuses_submissions_and_stops_nothing() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("skipped: no prlimit (util-linux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toy = toy_job();
    // (Submissions of 100 KB, over the default max_job_bytes.)
    let (mut procs, addr, sec) = scheduler_and_worker(
        d,
        "checkpoint_dir = \"checkpoints\"\nevents = \"events.jsonl\"\n\
         max_job_bytes = 200000\nmax_waiting_bytes_per_user = 67108864\n",
    );
    let mut ctl = Ctl::connect(&addr, &sec).unwrap();
    let long = ctl.submit(toy_submission(&toy, "long", 6.0, None)).unwrap();
    wait_until("the long job runs", Duration::from_secs(30), || {
        status(&addr, &sec)
            .iter()
            .any(|j| j.id == long && j.status == "running")
    });
    // The disk is full: no file of the scheduler grows any more.
    let pid = procs.pid("scheduler").to_string();
    let limit = |v: &str| {
        let ok = Command::new("prlimit")
            .args(["--pid", &pid, &format!("--fsize={v}:")])
            .status()
            .unwrap()
            .success();
        assert!(ok, "prlimit --fsize={v}:");
    };
    let size = std::fs::metadata(d.join("state.redb")).unwrap().len();
    limit(&size.to_string());
    // Submissions with 100 KB argvs until the table must grow.
    let big = |i: usize| {
        let mut j = toy_submission(&toy, &format!("big-{i}"), 0.5, None);
        // The toy job behind a shell that ignores its last, 100 KB argument.
        j.command = vec![
            "/bin/sh".into(),
            "-c".into(),
            "exec \"$0\" --duration-s 0.5 --iteration-s 0.02".into(),
            toy.display().to_string(),
            "x".repeat(100_000),
        ];
        j
    };
    let mut accepted = Vec::new();
    let mut refused = None;
    for i in 0..200 {
        match ctl.submit(big(i)) {
            Ok(id) => accepted.push(id),
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("a full job table refused a submission");
    assert_eq!(e.code(), Some(tonic::Code::Unavailable), "{e}");
    assert!(e.to_string().contains("job table"), "{e}");
    // Rounds go on: the scheduler lives, answers, and the long job runs on.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        procs.alive("scheduler"),
        "the scheduler died of a full disk"
    );
    let now = status(&addr, &sec);
    let l = now.iter().find(|j| j.id == long).unwrap();
    assert!(matches!(l.status.as_str(), "running" | "finished"), "{l:?}");
    // The disk has room again: submissions are accepted, every job ends.
    limit("unlimited");
    let mut again = None;
    wait_until(
        "a submission is accepted again",
        Duration::from_secs(20),
        || {
            again = Ctl::connect(&addr, &sec)
                .ok()
                .and_then(|mut c| c.submit(toy_submission(&toy, "after", 0.5, None)).ok());
            again.is_some()
        },
    );
    accepted.push(long);
    accepted.push(again.unwrap());
    let mut last = Vec::new();
    wait_until(
        "every accepted job finished",
        Duration::from_secs(120),
        || {
            last = status(&addr, &sec);
            accepted
                .iter()
                .all(|id| last.iter().any(|j| j.id == *id && j.status == "finished"))
        },
    );
    assert!(procs.alive("scheduler"));
}

/// A worker killed with SIGKILL takes its jobs' whole process
/// trees with it, also what they forked (`sh -c 'sleep … & sleep …'`): the
/// launch's guardian kills its group when the worker dies.
#[cfg(target_os = "linux")]
#[test]
fn a_killed_worker_leaves_nothing_its_jobs_forked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut procs, addr, sec) = scheduler_and_worker(d, "");
    let job = blox_runtime::proto::JobSubmission {
        name: "forks".into(),
        gpus: 1,
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "sleep 1111 & sleep 1112 & wait".into(),
        ],
        ..Default::default()
    };
    Ctl::connect(&addr, &sec).unwrap().submit(job).unwrap();
    // The shell and both sleeps run (they carry the launch's environment).
    wait_until(
        "the job and what it forked run",
        Duration::from_secs(30),
        || job_processes_under(&d.join("a")).len() >= 3,
    );
    procs.kill("a");
    wait_until(
        "nothing of the job outlives its worker",
        Duration::from_secs(5),
        || job_processes_under(&d.join("a")).is_empty(),
    );
}

/// What a job moved into a session of its own survives its worker's
/// SIGKILL (nothing is left to kill it) but not the worker's restart: a
/// worker started again kills the cgroups its earlier run's launches left
/// before it registers. Said and skipped where the host has no cgroup the
/// worker may write.
#[cfg(target_os = "linux")]
#[test]
fn a_restarted_worker_kills_what_its_killed_run_left() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut procs, addr, sec) = scheduler_and_worker(d, "");
    let log = std::fs::read_to_string(d.join("a.log")).unwrap_or_default();
    if !log.contains("a cgroup per launch") {
        eprintln!("skipped: the worker found no cgroups here: {log}");
        return;
    }
    let job = blox_runtime::proto::JobSubmission {
        name: "escapes".into(),
        gpus: 1,
        command: vec![
            "/bin/sh".into(),
            "-c".into(),
            "setsid sleep 1113 </dev/null >/dev/null 2>&1 & sleep 1114".into(),
        ],
        ..Default::default()
    };
    Ctl::connect(&addr, &sec).unwrap().submit(job).unwrap();
    // `sleep 1113` runs once `setsid` has left the job's group: counting
    // processes alone can see the forked shell before it got that far.
    let running = |what: &str| job_commands_under(&d.join("a")).iter().any(|c| c == what);
    wait_until(
        "the job and its escaped sleep run",
        Duration::from_secs(30),
        || running("sleep 1113") && running("sleep 1114"),
    );
    procs.kill("a");
    // The guardian took the job's group; the session of its own is left.
    wait_until(
        "the job's own group is gone",
        Duration::from_secs(10),
        || job_commands_under(&d.join("a")) == ["sleep 1113"],
    );
    procs.worker(&addr, d, "a", 1, &[]);
    wait_until(
        "the restarted worker killed what was left",
        Duration::from_secs(10),
        || job_processes_under(&d.join("a")).is_empty(),
    );
}
