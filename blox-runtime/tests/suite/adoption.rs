//! Re-adoption after a scheduler restart: workers report what they still run
//! when they register again, and the restarted scheduler adopts those
//! launches (no checkpoint, no restore) or, when a rank is missing, revokes
//! the rest before it relaunches the job.

use super::common::*;
use blox_harness::soak::journal;
use std::path::Path;
use std::time::{Duration, Instant};

/// Lease 5 s: the workers keep their jobs through the restart.
fn config(dir: &Path) -> blox_runtime::scheduler::RuntimeConfig {
    let mut cfg = runtime_config(dir);
    cfg.worker_timeout_s = 10.0;
    cfg.max_retries = 0;
    cfg
}

/// Stops the scheduler (its jobs run on) and starts another on the same
/// address and job table.
fn restart_scheduler(c: &mut Cluster, mut cfg: blox_runtime::scheduler::RuntimeConfig) {
    let old = c.sched.take().unwrap();
    cfg.listen = old.address.to_string();
    old.shutdown().unwrap();
    c.sched = Some(blox_runtime::scheduler::start(cfg, policies("fifo"), ROUND_S).unwrap());
}

#[test]
fn a_restarted_scheduler_adopts_the_running_jobs_instead_of_restarting_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // Lease 15 s here: beside two CPU hogs the 1-GPU job was adopted and
    // then relaunched once (launches 2, no preemption, nothing lost), most
    // likely stopped by its own lease running out while the restart (slow
    // on a loaded machine) kept its worker from renewing a 5 s lease, which
    // fencing requires; this test is about adoption.
    cfg.worker_timeout_s = 30.0;
    let mut c = Cluster::start(dir.path(), cfg.clone(), "fifo", 2);
    let journal_file = dir.path().join("journal");
    let mut ctl = c.ctl();
    // One job on one GPU, one across both workers.
    let a = ctl
        .submit(job("one", 1, journaled_toy(6.0, &journal_file), None))
        .unwrap();
    let b = ctl
        .submit(job("wide", 3, journaled_toy(6.0, &journal_file), None))
        .unwrap();
    wait_running(&c, &[a, b]);
    restart_scheduler(&mut c, cfg);
    // Both run on under the new scheduler at once (no hold), as launch 1.
    let mut ctl = c.ctl();
    let t = Instant::now();
    loop {
        let s = ctl.status(&[a, b]).unwrap();
        if s.jobs.iter().all(|j| j.status == "running") {
            assert!(s.jobs.iter().all(|j| j.launches == 1), "{:?}", s.jobs);
            assert_eq!(s.jobs[1].gpus.len(), 3, "{:?}", s.jobs[1]);
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "not adopted before the restart hold ended: {:?}",
            s.jobs
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = c.wait_all(&[a, b], Duration::from_secs(60));
    for id in [a, b] {
        assert_eq!(r[&id].status, "finished", "{:?}", r[&id]);
        assert_eq!(r[&id].launches, 1, "relaunched: {:?}", r[&id]);
    }
    // Each rank started once: one launch per job in the journal.
    let seen = journal::check(&journal_file).unwrap();
    assert!(seen.overlaps.is_empty(), "{seen:?}");
    assert!(seen.regressions.is_empty(), "{seen:?}");
    assert_eq!(seen.launches, 2, "{seen:?}");
    // No launch after the first resumed.
    for id in [a, b] {
        let dirs: Vec<_> = ["w0", "w1"]
            .iter()
            .map(|w| job_dir(&dir.path().join(w), id))
            .collect();
        assert!(dirs.iter().any(|d| d.join("launch-1").exists()), "{dirs:?}");
        assert!(
            dirs.iter().all(|d| !d.join("launch-2").exists()),
            "{dirs:?}"
        );
    }
}

#[test]
fn a_launch_missing_a_rank_after_the_restart_is_revoked_and_its_job_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mut c = Cluster::start(dir.path(), cfg.clone(), "fifo", 2);
    let journal_file = dir.path().join("journal");
    let mut ctl = c.ctl();
    let b = ctl
        .submit(job("wide", 3, journaled_toy(8.0, &journal_file), None))
        .unwrap();
    wait_running(&c, &[b]);
    // w1 dies with the scheduler: job b's rank there is gone.
    let old = c.sched.take().unwrap();
    let mut cfg2 = cfg.clone();
    cfg2.listen = old.address.to_string();
    old.shutdown().unwrap();
    c.workers[1].shutdown();
    c.sched = Some(blox_runtime::scheduler::start(cfg2, policies("fifo"), ROUND_S).unwrap());
    // Room for it again.
    c.add_worker(dir.path(), "w2");
    let r = c.wait_all(&[b], Duration::from_secs(90));
    assert_eq!(r[&b].status, "finished", "{:?}", r[&b]);
    assert_eq!(r[&b].launches, 2, "{:?}", r[&b]);
    // w0's part was revoked (it checkpointed) before the job ran again, and
    // the new launch resumed from it.
    let seen = journal::check(&journal_file).unwrap();
    assert!(seen.overlaps.is_empty(), "{seen:?}");
    assert!(seen.regressions.is_empty(), "{seen:?}");
    let err = std::fs::read_to_string(job_dir(&dir.path().join("w0"), b).join("launch-2/stderr"))
        .or_else(|_| {
            std::fs::read_to_string(job_dir(&dir.path().join("w2"), b).join("launch-2/stderr"))
        })
        .unwrap();
    assert!(err.contains("resumed at iteration"), "{err}");
    assert!(!err.contains("resumed at iteration 0\n"), "{err}");
}

/// The scheduler down longer than the workers' lease: they stop their jobs
/// (each checkpoints within the grace) and register again with nothing
/// running once it is back. The restarted scheduler knows which workers
/// ran each job (the job table records the cluster's workers), so it queues
/// the job again as soon as they are back without it, not at the end of
/// its restart hold (a worker timeout, 30 s here): the GPUs do not sit idle.
/// Meanwhile the job reads as held, not as a new submission.
#[test]
fn jobs_whose_leases_lapsed_are_relaunched_once_their_workers_are_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.worker_timeout_s = 30.0;
    // A lease of 2 s: at 1 s, beside two CPU hogs, the job's lease once
    // lapsed a second time, without the restart (a third launch).
    cfg.lease_s = Some(2.0);
    cfg.fence_grace_s = Some(2.0);
    let mut c = Cluster::start(dir.path(), cfg.clone(), "fifo", 1);
    let journal_file = dir.path().join("journal");
    let mut ctl = c.ctl();
    let a = ctl
        .submit(job("long", 2, journaled_toy(12.0, &journal_file), None))
        .unwrap();
    wait_running(&c, &[a]);
    // Past its first checkpoint (its journal says so), then the scheduler
    // goes for longer than the lease and its grace.
    let t = Instant::now();
    while !std::fs::read_to_string(&journal_file)
        .is_ok_and(|j| j.lines().any(|l| l.starts_with("ckpt ")))
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no checkpoint in the journal"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let old = c.sched.take().unwrap();
    cfg.listen = old.address.to_string();
    old.shutdown().unwrap();
    // Down for longer than the lease and its grace (4 s).
    std::thread::sleep(Duration::from_secs(6));
    let t = Instant::now();
    c.sched = Some(blox_runtime::scheduler::start(cfg, policies("fifo"), ROUND_S).unwrap());
    let mut ctl = c.ctl();
    let mut saw_held = false;
    loop {
        let s = ctl.status(&[a]).unwrap();
        let j = &s.jobs[0];
        if j.status == "running" {
            assert_eq!(j.launches, 2, "{j:?}");
            break;
        }
        saw_held |= j.wait.as_ref().is_some_and(|w| w.kind == "held");
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "not relaunched well before the 30 s hold ended: {j:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let relaunched = t.elapsed();
    let r = c.wait_all(&[a], Duration::from_secs(90));
    assert_eq!(r[&a].status, "finished", "{:?}", r[&a]);
    assert_eq!(r[&a].launches, 2, "{:?}", r[&a]);
    let seen = journal::check(&journal_file).unwrap();
    assert!(seen.overlaps.is_empty(), "{seen:?}");
    assert!(seen.regressions.is_empty(), "{seen:?}");
    eprintln!("relaunched {relaunched:?} after the restart (held seen: {saw_held})");
}
