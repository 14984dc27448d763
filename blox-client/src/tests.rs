use super::*;
use std::collections::HashMap;

fn env_in(dir: &Path, resume: bool) -> JobEnv {
    let vars: HashMap<&str, String> = [
        (env::JOB_ID, "7".to_string()),
        (env::RANK, "0".into()),
        (env::WORLD_SIZE, "2".into()),
        (env::VISIBLE_DEVICES, "0,1".into()),
        (env::CHECKPOINT_DIR, dir.join("ckpt").display().to_string()),
        (env::CONTROL_DIR, dir.display().to_string()),
        (env::RESUME, if resume { "1" } else { "0" }.into()),
        (env::BATCH_SIZE, "64".into()),
    ]
    .into_iter()
    .collect();
    JobEnv::from_lookup(|k| vars.get(k).cloned()).unwrap()
}

#[test]
fn a_share_of_a_gpu_is_read_from_the_environment() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(env_in(d.path(), false).gpu_milli, None);
    let base = |k: &str| match k {
        env::JOB_ID => Some("7".to_string()),
        env::CHECKPOINT_DIR | env::CONTROL_DIR => Some(d.path().display().to_string()),
        _ => None,
    };
    let with = |v: &'static str| {
        JobEnv::from_lookup(|k| {
            if k == env::GPU_MILLI {
                Some(v.to_string())
            } else {
                base(k)
            }
        })
    };
    assert_eq!(with("460").unwrap().gpu_milli, Some(460));
    assert!(with("half")
        .unwrap_err()
        .to_string()
        .contains(env::GPU_MILLI));
}

#[test]
fn metrics_and_done_go_to_the_report_directory_where_one_is_set() {
    let d = tempfile::tempdir().unwrap();
    let (control, report) = (d.path().join("control"), d.path().join("control/job"));
    std::fs::create_dir_all(&report).unwrap();
    let vars: HashMap<&str, String> = [
        (env::JOB_ID, "7".to_string()),
        (
            env::CHECKPOINT_DIR,
            d.path().join("ckpt").display().to_string(),
        ),
        (env::CONTROL_DIR, control.display().to_string()),
        (env::REPORT_DIR, report.display().to_string()),
    ]
    .into_iter()
    .collect();
    let e = JobEnv::from_lookup(|k| vars.get(k).cloned()).unwrap();
    assert_eq!((&e.report_dir, &e.coord_dir), (&report, &report));
    let job = Job::attach(e).unwrap();
    job.push_metric("progress", 0.5).unwrap();
    job.finish().unwrap();
    assert!(report.join("done").is_file() && !control.join("done").exists());
    assert_eq!(
        std::fs::read_to_string(report.join("metrics")).unwrap(),
        "progress 0.5\n"
    );
    // The worker's files are read from the control directory.
    std::fs::write(control.join("revoked"), "").unwrap();
    assert!(job.lease_revoked());
}

#[test]
fn reads_the_documented_environment() {
    let d = tempfile::tempdir().unwrap();
    let e = env_in(d.path(), true);
    assert_eq!((e.job_id, e.rank, e.world_size), (7, 0, 2));
    assert_eq!(e.devices, vec!["0", "1"]);
    assert_eq!(e.batch_size, Some(64));
    assert!(e.resume);
    let err = JobEnv::from_lookup(|_| None).unwrap_err().to_string();
    assert!(err.contains("BLOX_JOB_ID"), "{err}");
    let err = JobEnv::from_lookup(|k| (k == env::JOB_ID).then(|| "x".into()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("BLOX_JOB_ID = `x`"), "{err}");
    // 32-bit values are not cut down, and a rank lies inside the world.
    let with = |k: &'static str, v: &str| {
        let d = d.path().display().to_string();
        let v = v.to_string();
        JobEnv::from_lookup(move |name| match name {
            n if n == k => Some(v.clone()),
            env::JOB_ID => Some("1".into()),
            env::CHECKPOINT_DIR | env::CONTROL_DIR => Some(d.clone()),
            _ => None,
        })
    };
    for (k, v) in [
        (env::RANK, "4294967297"),
        (env::WORLD_SIZE, "4294967296"),
        (env::BATCH_SIZE, "4294967296"),
        (env::RANK, "3"),
        (env::WORLD_SIZE, "0"),
    ] {
        let err = with(k, v).unwrap_err().to_string();
        assert!(err.contains("BLOX_"), "{k}={v}: {err}");
    }
    assert_eq!(with(env::BATCH_SIZE, "64").unwrap().batch_size, Some(64));
}

#[test]
fn iteration_stops_at_the_boundary_after_revocation() {
    let d = tempfile::tempdir().unwrap();
    let mut e = env_in(d.path(), false);
    e.world_size = 1;
    let job = Job::attach(e).unwrap();
    let mut it = job.iterate(0..100);
    assert_eq!(it.next(), Some(0));
    assert_eq!(it.next(), Some(1));
    std::fs::write(d.path().join("revoked"), b"").unwrap();
    assert_eq!(it.next(), None);
    assert!(it.revoked());
}

#[cfg(unix)]
#[test]
fn a_lease_the_worker_stopped_renewing_stops_the_job_at_its_next_boundary() {
    let d = tempfile::tempdir().unwrap();
    let mut e = env_in(d.path(), false);
    e.world_size = 1;
    let lease = d.path().join(LEASE_FILE);
    let now = monotonic_s().unwrap();
    // A long grace: the watchdog must not end the test process.
    std::fs::write(&lease, format!("{} 3600", now + 0.3)).unwrap();
    let job = Job::attach(e).unwrap();
    let mut it = job.iterate(0..1_000_000);
    assert_eq!(it.next(), Some(0));
    assert!(!job.lease_expired());
    // Renewed: it runs on past the first end.
    std::thread::sleep(std::time::Duration::from_millis(350));
    std::fs::write(&lease, format!("{} 3600", now + 0.8)).unwrap();
    assert_eq!(it.next(), Some(1));
    // Not renewed: the next boundary after the end stops it.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(it.next(), None);
    assert!(it.revoked());
    // A damaged or missing lease file holds (the local backend has none).
    std::fs::write(&lease, "soon").unwrap();
    let mut e = env_in(d.path(), false);
    e.world_size = 1;
    let other = Job::attach(e).unwrap();
    assert!(!other.lease_revoked());
    assert_eq!(read_lease(&lease), None);
    assert_eq!(read_lease(&d.path().join("none")), None);
    std::fs::write(&lease, "5 -1").unwrap();
    assert_eq!(read_lease(&lease), None, "a negative grace");
}

#[test]
fn ranks_of_a_multi_rank_job_stop_together_one_boundary_after_revocation() {
    let d = tempfile::tempdir().unwrap();
    let rank = |r: u32| {
        let mut e = env_in(d.path(), false);
        e.rank = r;
        Job::attach(e).unwrap()
    };
    let (a, b) = (rank(0), rank(1));
    let (mut ia, mut ib) = (a.iterate(0..100), b.iterate(0..100));
    // Lockstep for three iterations.
    for k in 0..3 {
        assert_eq!(ia.next(), Some(k));
        assert_eq!(ib.next(), Some(k));
    }
    std::fs::write(d.path().join("revoked"), b"").unwrap();
    // Rank 1 sees it first at boundary 3 and fixes the exit at 4: both run
    // iteration 3, then both stop at boundary 4.
    assert_eq!(ib.next(), Some(3));
    assert_eq!(ia.next(), Some(3));
    assert_eq!(ia.next(), None);
    assert_eq!(ib.next(), None);
    assert!(ia.revoked() && ib.revoked());
    assert_eq!(
        std::fs::read_to_string(d.path().join("exit_at")).unwrap(),
        "4"
    );
}

#[test]
fn a_stale_launch_cannot_replace_a_newer_launchs_checkpoint() {
    let d = tempfile::tempdir().unwrap();
    let launch = |g: u64| {
        let mut e = env_in(d.path(), true);
        e.generation = g;
        Job::attach(e).unwrap()
    };
    let (old, new) = (launch(5), launch(9));
    old.save_checkpoint("state", b"old-40").unwrap();
    // The newer launch resumes from the older one's checkpoint...
    assert_eq!(
        new.load_checkpoint("state").as_deref(),
        Some(&b"old-40"[..])
    );
    new.save_checkpoint("state", b"new-45").unwrap();
    // ...and the old one, cut off but still running, writes later.
    old.save_checkpoint("state", b"old-50").unwrap();
    // The next launch restores the newest generation's, not the last written.
    assert_eq!(
        launch(12).load_checkpoint("state").as_deref(),
        Some(&b"new-45"[..])
    );
    // The stale launch sees only its own lineage.
    assert_eq!(
        old.load_checkpoint("state").as_deref(),
        Some(&b"old-50"[..])
    );
    // A save removes every older generation's file, the stale one's too.
    launch(12).save_checkpoint("state", b"newest").unwrap();
    let mut left: Vec<String> = std::fs::read_dir(d.path().join("ckpt"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["state.gen-12"]);
    // A plain checkpoint (an older client, generation 0) is restored too.
    std::fs::write(d.path().join("ckpt").join("other"), b"plain").unwrap();
    assert_eq!(
        launch(3).load_checkpoint("other").as_deref(),
        Some(&b"plain"[..])
    );
    let bad = JobEnv::from_lookup(|k| match k {
        env::JOB_ID => Some("1".into()),
        env::GENERATION => Some("-1".into()),
        env::CHECKPOINT_DIR | env::CONTROL_DIR => Some("d".into()),
        _ => None,
    });
    let err = bad.unwrap_err().to_string();
    assert!(err.contains("BLOX_GENERATION"), "{err}");
}

#[test]
fn metrics_checkpoints_and_batch_changes_go_through_the_control_dir() {
    let d = tempfile::tempdir().unwrap();
    let job = Job::attach(env_in(d.path(), false)).unwrap();
    job.push_metric("loss", 0.5).unwrap();
    job.push_metric("progress", 0.25).unwrap();
    let e = job.push_metric("bad key", 1.0).unwrap_err().to_string();
    assert!(e.contains("bad key"), "{e}");
    let log = std::fs::read_to_string(d.path().join("metrics")).unwrap();
    assert_eq!(log, "loss 0.5\nprogress 0.25\n");
    job.save_checkpoint("state", b"42").unwrap();
    assert_eq!(job.load_checkpoint("state"), None, "not resuming");
    let resumed = Job::attach(env_in(d.path(), true)).unwrap();
    assert_eq!(
        resumed.load_checkpoint("state").as_deref(),
        Some(&b"42"[..])
    );
    // Two ranks checkpointing at the same time do not clobber each
    // other's temporary files.
    std::thread::scope(|s| {
        for r in 0..2u32 {
            let dir = d.path().to_path_buf();
            s.spawn(move || {
                let mut e = env_in(&dir, true);
                e.rank = r;
                let j = Job::attach(e).unwrap();
                for k in 0..2000 {
                    j.save_checkpoint("state", format!("{r}:{k}").as_bytes())
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(
        resumed.load_checkpoint("state").as_deref(),
        Some(&b"0:1999"[..])
    );
    assert_eq!(job.new_batch_size(), None);
    std::fs::write(d.path().join("batch_size"), "128").unwrap();
    assert_eq!(job.new_batch_size(), Some(128));
    job.applied_batch_size(128);
    assert_eq!(job.new_batch_size(), None);
}
