//! What a hostile job tries against its worker (which runs as root) and
//! against the other tenants, each as its own test: links planted where
//! the worker writes or reads, a planted coordination link, escaping its
//! launch (a session of its own, the worker's own binary), a fork bomb, a
//! memory hog, reading the worker's environment, and uids shared across
//! the cluster. Each needs root (jobs run as uids of their own) and is
//! skipped, saying so, without it.

use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A uid range of its own for each test: the tests run at once, and uids
/// are the machine's (a worker kills whatever runs as its jobs' uids, and
/// checks that nothing does before it hands one out).
const fn range(slot: u32) -> (u32, u32) {
    (1_900_000_100 + 64 * slot, 1_900_000_163 + 64 * slot)
}

fn root() -> bool {
    // SAFETY: reads this process's credentials only.
    let r = unsafe { libc::geteuid() } == 0;
    if !r {
        eprintln!("skipped: needs root to run jobs as other uids");
    }
    r
}

/// A scheduler with `[runtime] job_uids` = `range`, and `workers` workers
/// of 2 logical GPUs running jobs as those uids (`tune` adjusts each
/// worker's config).
fn uid_cluster(
    dir: &Path,
    range: (u32, u32),
    workers: usize,
    max_retries: u32,
    tune: impl Fn(&mut WorkerConfig),
) -> Cluster {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cfg = runtime_config(dir);
    cfg.job_uid_range = Some(range);
    cfg.max_retries = max_retries;
    let mut c = Cluster::start(dir, cfg, "fifo", 0);
    for i in 0..workers {
        let mut w = c.worker_config(dir, &format!("u{i}"));
        w.allow_root_jobs = false;
        w.job_uids = Some(range);
        tune(&mut w);
        let h = c.rt.block_on(blox_runtime::worker::start(w)).unwrap();
        c.workers.push(h);
    }
    c.wait_for_gpus(2 * workers);
    c
}

fn sh(script: &str) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), script.into()]
}

/// Processes whose real uid is `uid`.
fn processes_of(uid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let real = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            (real.split_whitespace().next()?.parse::<u32>().ok()? == uid).then_some(pid)
        })
        .collect()
}

/// Waits (up to 10 s) until no process runs as any uid of `range`.
fn assert_no_job_process_left(range: (u32, u32)) {
    let t = Instant::now();
    loop {
        let left: Vec<(u32, Vec<u32>)> = (range.0..=range.1)
            .map(|u| (u, processes_of(u)))
            .filter(|(_, p)| !p.is_empty())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "processes of ended jobs still run: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A root-owned file and directory, and their state to compare after.
struct Victims {
    file: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Victims {
    fn new(base: &Path) -> Victims {
        let v = base.join("victims");
        std::fs::create_dir(&v).unwrap();
        std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = v.join("secret");
        // What the worker would forward as the job's metrics if it read it.
        std::fs::write(&file, "progress 0.99\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let dir = v.join("dir");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        Victims { file, dir }
    }

    fn untouched(&self) {
        let f = std::fs::metadata(&self.file).unwrap();
        assert_eq!(
            std::fs::read_to_string(&self.file).unwrap(),
            "progress 0.99\n"
        );
        assert_eq!((f.uid(), f.gid(), f.mode() & 0o7777), (0, 0, 0o600));
        let d = std::fs::metadata(&self.dir).unwrap();
        assert_eq!((d.uid(), d.gid(), d.mode() & 0o7777), (0, 0, 0o700));
    }
}

/// The job plants links to a root-owned file wherever its worker writes
/// (`lease` every heartbeat, `revoked`, `batch_size`) or reads (`metrics`,
/// `done`): the control directory is not the job's to write, and the
/// worker reads only the job's own plain files.
#[test]
fn a_job_cannot_turn_its_workers_reads_and_writes_to_another_file() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let v = Victims::new(dir.path());
    let c = uid_cluster(dir.path(), range(0), 1, 0, |_| {});
    let f = v.file.display();
    let script = format!(
        "cd \"$BLOX_CONTROL_DIR\"; \
         for n in .lease.tmp lease revoked batch_size .revoked.tmp .batch_size.tmp stdout; do \
           ln -sfn {f} $n 2>>\"$BLOX_REPORT_DIR/denied\"; done; \
         cat \"$BLOX_REPORT_DIR/denied\"; \
         ln -sfn {f} \"$BLOX_REPORT_DIR/metrics\"; ln -sfn {f} \"$BLOX_REPORT_DIR/done\"; \
         sleep 2; echo END"
    );
    let mut ctl = c.ctl();
    let id = ctl.submit(job("links", 1, sh(&script), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(30));
    v.untouched();
    // The links pointed at "progress 0.99" and a `done`: neither counted,
    // and the launch ended for them, the job's fault, saying why.
    assert_eq!(r[&id].status, "failed", "{:?}", r[&id]);
    assert!(r[&id].progress < 0.5, "{:?}", r[&id]);
    assert!(
        r[&id].reason.contains("refused") && r[&id].reason.contains("link"),
        "{:?}",
        r[&id]
    );
    let out = std::fs::read_to_string(job_dir(&dir.path().join("u0"), id).join("launch-1/stdout"))
        .unwrap();
    assert_eq!(out.matches("Permission denied").count(), 7, "{out}");
}

/// A job on two nodes plants a link where its next launch's coordination
/// directory used to be (inside its checkpoint directory), and links and
/// directories in its checkpoints, then fails: its next launch is given
/// its checkpoints again, and the worker follows none of the links. (It
/// ends only on a run told to resume that finds its first run's files: a
/// first try the workers refuse, as a loaded machine's late heartbeats
/// can make them, is not one of its runs.)
#[test]
fn a_job_cannot_make_its_worker_hand_it_another_directory() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let v = Victims::new(dir.path());
    let c = uid_cluster(dir.path(), range(1), 2, 1, |_| {});
    let (d, f) = (v.dir.display(), v.file.display());
    let script = format!(
        "c=\"$BLOX_CHECKPOINT_DIR\"; g=$BLOX_GENERATION; \
         for n in 1 2 3 4; do ln -sfn {d} \"$c/.launch-$n\"; done; \
         ln -sfn {d} \"$c/link\"; ln -sfn {f} \"$c/file\"; mkdir -p \"$c/sub\"; ln -sfn {d} \"$c/sub/deep\"; \
         ln -sfn {d} \"$BLOX_COORD_DIR/evil\"; \
         [ \"$BLOX_RESUME\" = 1 ] && [ -e \"$c/gen.$BLOX_RANK\" ] && touch \"$BLOX_REPORT_DIR/done\"; \
         echo \"$g\" > \"$c/gen.$BLOX_RANK\"; exit 0"
    );
    let mut ctl = c.ctl();
    let id = ctl.submit(job("coord", 4, sh(&script), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(30));
    v.untouched();
    assert_eq!(r[&id].status, "finished", "{:?}", r[&id]);
    assert_eq!(r[&id].launches, 2, "{:?}", r[&id]);
    // The coordination directories are the workers', beside the
    // checkpoints: the planted `.launch-2` was never used.
    let ck = keyed_dir(&dir.path().join("checkpoints"), id);
    let coord = blox_runtime::scheduler::coord_dir(&ck, id, 2);
    assert!(coord.is_dir(), "{coord:?}");
    assert!(std::fs::symlink_metadata(ck.join(".launch-2"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// A job on two workers whose parts end apart: the part that ends first
/// leaves the shared checkpoints the job's, so the other still saves into
/// them (its write was refused once: the first part's worker took them
/// back), and they go back to the worker once both parts ended.
#[test]
fn a_part_that_ends_first_leaves_the_shared_checkpoints_to_the_others() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = uid_cluster(dir.path(), range(8), 2, 0, |_| {});
    let script = "c=\"$BLOX_CHECKPOINT_DIR\"; touch \"$BLOX_REPORT_DIR/done\"; \
         if [ \"$BLOX_RANK\" = 0 ]; then sleep 1.5; echo saved > \"$c/state.0\" || exit 3; fi; exit 0";
    let mut ctl = c.ctl();
    let id = ctl.submit(job("apart", 4, sh(script), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(30));
    assert_eq!(r[&id].status, "finished", "{:?}", r[&id]);
    let ck = keyed_dir(&dir.path().join("checkpoints"), id);
    assert_eq!(
        std::fs::read_to_string(ck.join("state.0")).unwrap(),
        "saved\n"
    );
    // Both workers took them back (root's, 0700) within a few beats.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = std::fs::metadata(&ck).unwrap();
        if (m.uid(), m.mode() & 0o777) == (0, 0o700) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the checkpoints stay uid {}'s, mode {:o}",
            m.uid(),
            m.mode() & 0o777
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run by the test below as a job's process: a copy of the worker's own
/// program that sleeps (once, a job that ran it escaped the sweep).
#[test]
#[ignore = "a helper the next test runs as a job"]
fn helper_sleeps_as_the_workers_program() {
    std::thread::sleep(Duration::from_secs(300));
}

/// The job leaves processes in sessions of their own, one of them running
/// the worker's own program: every one dies when its launch ends, and the
/// next job runs.
#[test]
fn nothing_a_job_starts_outlives_its_launch() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = uid_cluster(dir.path(), range(3), 1, 0, |_| {});
    let me = std::env::current_exe().unwrap();
    let script = format!(
        "setsid sleep 300 </dev/null >/dev/null 2>&1 & \
         setsid {} --ignored --exact attacks::helper_sleeps_as_the_workers_program </dev/null >/dev/null 2>&1 & \
         sleep 1; touch \"$BLOX_REPORT_DIR/done\"",
        me.display()
    );
    let mut ctl = c.ctl();
    let a = ctl.submit(job("escape", 1, sh(&script), None)).unwrap();
    let r = c.wait_all(&[a], Duration::from_secs(30));
    assert_eq!(r[&a].status, "finished", "{:?}", r[&a]);
    assert_no_job_process_left(range(3));
    let b = ctl.submit(job("next", 1, toy(0.5, &[]), None)).unwrap();
    let r = c.wait_all(&[b], Duration::from_secs(30));
    assert_eq!(r[&b].status, "finished", "{:?}", r[&b]);
    assert_eq!(r[&b].launches, 1, "{:?}", r[&b]);
}

/// A fork bomb meets its launch's process limit, and a memory hog its
/// memory limit (told "out of memory"); the worker and the other job go
/// on, and nothing of either is left.
#[test]
fn a_fork_bomb_and_a_memory_hog_stay_inside_their_launches() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = uid_cluster(dir.path(), range(4), 1, 0, |_| {});
    let mut ctl = c.ctl();
    let mut bomb = job(
        "bomb",
        1,
        // Builtins only past the bomb: a fork fails there.
        // (In a subshell of its own: dash exits when a fork fails.)
        sh(": > \"$BLOX_REPORT_DIR/done\"; (f() { f | f & }; f) || true; exec sleep 2"),
        None,
    );
    bomb.max_processes = Some(40);
    let mut hog = job(
        "hog",
        1,
        sh("dd if=/dev/zero of=/dev/null bs=400M count=1; exit 1"),
        None,
    );
    hog.memory_gb = Some(0.1);
    let ids = [ctl.submit(bomb).unwrap(), ctl.submit(hog).unwrap()];
    // At no time more processes of the bomb than its limit.
    let t = Instant::now();
    let mut most = 0;
    while t.elapsed() < Duration::from_secs(4) {
        let n: usize = (range(4).0..=range(4).1)
            .map(|u| processes_of(u).len())
            .max()
            .unwrap_or(0);
        most = most.max(n);
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = c.wait_all(&ids, Duration::from_secs(30));
    assert!(
        most <= 40,
        "{most} processes of one job at once, over its limit of 40"
    );
    assert_eq!(r[&ids[0]].status, "finished", "{:?}", r[&ids[0]]);
    assert_eq!(r[&ids[1]].status, "failed", "{:?}", r[&ids[1]]);
    assert!(
        r[&ids[1]].reason.contains("out of memory"),
        "{:?}",
        r[&ids[1]]
    );
    assert_no_job_process_left(range(4));
}

/// A job sees none of its worker's environment but the allowed variables
/// and what the operator passes.
#[test]
fn a_job_gets_only_the_allowed_and_passed_variables_of_its_worker() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 0);
    let mut w = c.worker_config(dir.path(), "env");
    // Cargo runs this test with CARGO_* set: the worker's own variables.
    w.pass_env = vec!["CARGO_PKG_NAME".into()];
    let h = c.rt.block_on(blox_runtime::worker::start(w)).unwrap();
    c.workers.push(h);
    c.wait_for_gpus(2);
    let mut ctl = c.ctl();
    let id = ctl
        .submit(job(
            "env",
            1,
            sh("env; touch \"$BLOX_REPORT_DIR/done\""),
            None,
        ))
        .unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(30));
    assert_eq!(r[&id].status, "finished");
    let out = std::fs::read_to_string(job_dir(&dir.path().join("env"), id).join("launch-1/stdout"))
        .unwrap();
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.split_once('=').map(|x| x.0))
        .collect();
    assert!(
        names.contains(&"CARGO_PKG_NAME") && names.contains(&"PATH"),
        "{out}"
    );
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    let leaked: Vec<&&str> = names
        .iter()
        .filter(|n| {
            !(n.starts_with("BLOX_")
                || n.starts_with("LC_")
                || n.starts_with("CUDA_")
                || n.starts_with("NVIDIA_")
                || [
                    "PATH",
                    "HOME",
                    "USER",
                    "LOGNAME",
                    "LANG",
                    "LANGUAGE",
                    "TZ",
                    "PWD",
                    "SHLVL",
                    "_",
                    "CARGO_PKG_NAME",
                ]
                .contains(n))
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "the worker's variables reached the job: {leaked:?}"
    );
}

/// Uids are the cluster's: no two running launches share one whatever
/// their job ids, a job waits (without blame) while every uid may still be
/// in use, and a uid is given again once its node beat without it.
#[test]
fn launch_uids_are_unique_across_the_cluster_and_reused_once_free() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Two uids for three jobs on four GPUs: the third waits.
    let range = (range(6).0, range(6).0 + 1);
    let c = uid_cluster(dir.path(), range, 2, 0, |_| {});
    let mut ctl = c.ctl();
    let script = "id -u; sleep 2; touch \"$BLOX_REPORT_DIR/done\"";
    let ids: Vec<u64> = (0..3)
        .map(|i| {
            ctl.submit(job(&format!("j{i}"), 1, sh(script), None))
                .unwrap()
        })
        .collect();
    let r = c.wait_all(&ids, Duration::from_secs(60));
    let mut uids = Vec::new();
    for id in &ids {
        assert_eq!(r[id].status, "finished", "{:?}", r[id]);
        // Refusals for want of a uid are not the job's runs.
        assert_eq!(r[id].launches, 1, "{:?}", r[id]);
        // (Its launch's number counts the tries a node refused.)
        let out = ["u0", "u1"]
            .iter()
            .flat_map(|w| {
                std::fs::read_dir(job_dir(&dir.path().join(w), *id))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .filter_map(|e| std::fs::read_to_string(e.path().join("stdout")).ok())
            .find(|t| !t.trim().is_empty())
            .unwrap();
        uids.push(out.trim().parse::<u32>().unwrap());
    }
    assert!(
        uids.iter().all(|u| (range.0..=range.1).contains(u)),
        "{uids:?}"
    );
    // The first two ran at once, as different uids.
    assert_ne!(uids[0], uids[1]);
}

/// A job cannot hand a later holder of its uid anything: what it leaves in
/// the node's shared places (a setuid copy of a shell in /tmp, a file in
/// /dev/shm) is removed before its uid is given again, and no job gains
/// privileges from a setuid program anyway (`no_new_privs`).
#[test]
fn a_job_leaves_nothing_for_the_next_holder_of_its_uid() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = uid_cluster(dir.path(), range(7), 1, 0, |_| {});
    let tag = format!("blox-attack-{}", std::process::id());
    let (suid, shm) = (format!("/tmp/{tag}-sh"), format!("/dev/shm/{tag}"));
    let a = format!(
        "cp /bin/sh {suid} && chmod 4755 {suid}; echo secret > {shm}; \
         grep NoNewPrivs /proc/self/status; touch \"$BLOX_REPORT_DIR/done\""
    );
    let mut ctl = c.ctl();
    let id = ctl.submit(job("leaves", 1, sh(&a), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(30));
    assert_eq!(r[&id].status, "finished", "{:?}", r[&id]);
    let out = std::fs::read_to_string(job_dir(&dir.path().join("u0"), id).join("launch-1/stdout"))
        .unwrap();
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    let t = Instant::now();
    while std::path::Path::new(&suid).exists() || std::path::Path::new(&shm).exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{suid} or {shm} outlived the launch"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
