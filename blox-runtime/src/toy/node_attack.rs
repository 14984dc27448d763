//! What the soak's attacker job tries against its node (beside the
//! credential thefts and forgeries of [`super::attack`]): to make its
//! worker, which runs as root, write or read through links it plants, or
//! hand it another directory; to outlive its launch; and to take more of
//! the node than its launch may.
//!
//! - links to the soak's *decoys* (root-owned files and a directory beside
//!   the journal, checksummed before and after the run: [`Decoys`]) where
//!   the worker writes (`lease`, `revoked`, `batch_size` and their
//!   temporary names in the control directory), where it reads (`metrics`
//!   in the report directory, swapped for a link for a moment), and where
//!   coordination directories used to be made (`.launch-N` in the
//!   checkpoint directory);
//! - processes in sessions of their own: a `sleep`, and the worker's own
//!   program (found from its command line) waiting on a speed probe;
//! - a fork bomb (bounded) and a memory hog (bounded), each reporting how
//!   far it got (`budget JOB processes N LIMIT`, `budget JOB memory MB
//!   LIMIT`) against the limits the soak gives its workers
//!   ([`MAX_PROCESSES`], [`MEMORY_MB`]).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The process limit the soak's workers give each launch
/// (`--max-processes`), and the memory limit (`--memory-gb`, in MB).
pub const MAX_PROCESSES: u32 = 128;
pub const MEMORY_MB: u64 = 256;

/// How far the bomb and the hog try (bounded, so that a node without
/// limits is not brought down by its own soak).
const BOMB_TRIES: u32 = 4 * MAX_PROCESSES;
const HOG_MB: u64 = 3 * MEMORY_MB;

/// The decoys' directory beside the journal.
pub const DECOYS: &str = "decoys";

/// The soak's decoy tree: root-owned files and a directory no job may
/// change, and what they were.
pub struct Decoys {
    before: Vec<(PathBuf, String)>,
}

fn describe(p: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(p) {
        Ok(m) => {
            let content = if m.is_file() {
                std::fs::read(p)
                    .map(|b| {
                        Sha256::digest(&b)
                            .iter()
                            .map(|x| format!("{x:02x}"))
                            .collect::<String>()
                    })
                    .unwrap_or_default()
            } else {
                String::new()
            };
            format!("{}:{}:{:o}:{content}", m.uid(), m.gid(), m.mode())
        }
        Err(e) => format!("gone: {e}"),
    }
}

impl Decoys {
    /// Makes the decoys in `dir` (the soak runs as root) and notes them.
    pub fn plant(dir: &Path) -> std::io::Result<Decoys> {
        use std::os::unix::fs::PermissionsExt;
        let d = dir.join(DECOYS);
        std::fs::create_dir_all(d.join("dir"))?;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(d.join("dir"), std::fs::Permissions::from_mode(0o700))?;
        std::fs::write(
            d.join("dir/keep"),
            "a root-owned file in a root-owned directory\n",
        )?;
        // What the worker would forward as a job's metrics, were it read.
        for (name, text) in [
            ("secret", "progress 0.99\n"),
            ("passwd", "root:x:0:0::/root:/bin/sh\n"),
        ] {
            std::fs::write(d.join(name), text)?;
            std::fs::set_permissions(d.join(name), std::fs::Permissions::from_mode(0o600))?;
        }
        Ok(Decoys {
            before: Self::paths(dir)
                .into_iter()
                .map(|p| {
                    let s = describe(&p);
                    (p, s)
                })
                .collect(),
        })
    }

    fn paths(dir: &Path) -> Vec<PathBuf> {
        let d = dir.join(DECOYS);
        ["", "secret", "passwd", "dir", "dir/keep"]
            .iter()
            .map(|n| if n.is_empty() { d.clone() } else { d.join(n) })
            .collect()
    }

    /// The decoys whose content, owner or mode changed since planted.
    pub fn changed(&self) -> Vec<String> {
        self.before
            .iter()
            .filter_map(|(p, s)| {
                let now = describe(p);
                (now != *s).then(|| format!("{}: {s} -> {now}", p.display()))
            })
            .collect()
    }
}

/// Runs every attack of the module docs as job `job`, with the soak's
/// directory `dir`, giving each line for the attacks file to `say` as it
/// goes: the last attack (a link where the worker reads) ends the launch.
pub fn run(job: u64, dir: &Path, say: &mut dyn FnMut(String)) {
    let decoys = dir.join(DECOYS);
    let (secret, target_dir) = (decoys.join("secret"), decoys.join("dir"));
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let (Some(control), Some(report), Some(ckpt)) = (
        var("BLOX_CONTROL_DIR"),
        var("BLOX_REPORT_DIR"),
        var("BLOX_CHECKPOINT_DIR"),
    ) else {
        return;
    };
    // Links where the worker writes.
    let mut planted = 0;
    for name in [
        ".lease.tmp",
        "lease",
        "revoked",
        "batch_size",
        ".revoked.tmp",
        ".batch_size.tmp",
    ] {
        let p = control.join(name);
        let _ = std::fs::remove_file(&p);
        planted += std::os::unix::fs::symlink(&secret, &p).is_ok() as u32;
    }
    say(format!("try {job} link-control {planted}-planted\n"));
    // Where coordination directories were once made, and a tree for its
    // next launch's worker to hand over.
    let mut planted = 0;
    for n in 1..=8 {
        let p = ckpt.join(format!(".launch-{n}"));
        let _ = std::fs::remove_file(&p);
        planted += std::os::unix::fs::symlink(&target_dir, &p).is_ok() as u32;
    }
    let _ = std::fs::create_dir_all(ckpt.join("attack"));
    for (name, to) in [("attack/dir", &target_dir), ("attack/file", &secret)] {
        let _ = std::fs::remove_file(ckpt.join(name));
        planted += std::os::unix::fs::symlink(to, ckpt.join(name)).is_ok() as u32;
    }
    let _ = std::fs::hard_link(&secret, ckpt.join("attack/hard"));
    say(format!("try {job} link-checkpoint {planted}-planted\n"));
    // Out of its launch: sessions of their own.
    let detached = |cmd: &mut std::process::Command| {
        use std::process::Stdio;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .is_ok()
    };
    let slept = detached(std::process::Command::new("setsid").args(["sleep", "3600"]));
    let worker = worker_program();
    let as_worker = worker.as_ref().is_some_and(|w| {
        detached(std::process::Command::new("setsid").arg(w).args([
            "worker",
            "--gpus",
            "1",
            "--speed-probe",
            "sleep 3600",
            "--scheduler",
            "127.0.0.1:9",
            "--name",
            "escaped",
            "--workdir",
            &report.join("w").display().to_string(),
        ]))
    });
    say(format!(
        "try {job} escape sleep-{} worker-{}\n",
        if slept { "started" } else { "failed" },
        if as_worker { "started" } else { "none" }
    ));
    if let Some(n) = fork_bomb() {
        say(format!("budget {job} processes {n} {MAX_PROCESSES}\n"));
    }
    if let Some(mb) = memory_hog() {
        say(format!("budget {job} memory {mb} {MEMORY_MB}\n"));
    }
    // Last: a link where the worker reads. It refuses the link and ends
    // this launch for it (the job's fault); the job is launched again.
    let metrics = report.join("metrics");
    let real = report.join("metrics.real");
    if std::fs::rename(&metrics, &real).is_ok() {
        let ok = std::os::unix::fs::symlink(&secret, &metrics).is_ok();
        say(format!(
            "try {job} link-metrics {}\n",
            if ok { "planted" } else { "denied" }
        ));
        std::thread::sleep(Duration::from_millis(500));
        let _ = std::fs::remove_file(&metrics);
        let _ = std::fs::rename(&real, &metrics);
    }
}

/// The worker's program, from the command line of the nearest ancestor
/// that runs `… worker …` (readable by anyone unless `/proc` is mounted
/// with `hidepid`).
fn worker_program() -> Option<String> {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..4 {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.get(1).is_some_and(|a| a == "worker") {
            return args.first().cloned();
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        pid = stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
    }
    None
}

/// Forks processes (in a process group of their own, each waiting) until a
/// fork fails or [`BOMB_TRIES`]; returns how many ran at once (the group's
/// leader with them), then kills them all.
fn fork_bomb() -> Option<u32> {
    let mut fds = [0; 2];
    // SAFETY: a pipe into a plain array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the child makes only async-signal-safe calls (setpgid, fork,
    // write, pause, _exit) and allocates nothing.
    let leader = unsafe { libc::fork() };
    if leader == 0 {
        unsafe {
            libc::close(fds[0]);
            libc::setpgid(0, 0);
            let mut n: u32 = 1;
            let mut failures = 0;
            for _ in 0..BOMB_TRIES {
                let c = libc::fork();
                if c == 0 {
                    loop {
                        libc::pause();
                    }
                }
                if c < 0 {
                    failures += 1;
                    if failures > 8 {
                        break;
                    }
                } else {
                    n += 1;
                }
            }
            let b = n.to_le_bytes();
            libc::write(fds[1], b.as_ptr().cast(), 4);
            loop {
                libc::pause();
            }
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    if leader < 0 {
        unsafe { libc::close(fds[0]) };
        return None;
    }
    let n = read_u32(fds[0], Duration::from_secs(10));
    // SAFETY: the group is the leader's, which this process made.
    unsafe {
        libc::killpg(leader, libc::SIGKILL);
        libc::kill(leader, libc::SIGKILL);
        let mut st = 0;
        libc::waitpid(leader, &mut st, 0);
        libc::close(fds[0]);
    }
    n
}

/// Touches memory 16 MiB at a time, up to [`HOG_MB`], in a child that
/// reports each step; returns the most it held (MB) when it was killed or
/// done.
fn memory_hog() -> Option<u64> {
    let mut fds = [0; 2];
    // SAFETY: a pipe into a plain array.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return None;
    }
    const STEP: usize = 16 << 20;
    // SAFETY: the child makes only async-signal-safe calls (mmap, write,
    // _exit) and touches only memory it mapped.
    let child = unsafe { libc::fork() };
    if child == 0 {
        unsafe {
            libc::close(fds[0]);
            let mut held: u32 = 0;
            while u64::from(held) < HOG_MB {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    STEP,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    break;
                }
                let bytes = p.cast::<u8>();
                for off in (0..STEP).step_by(4096) {
                    *bytes.add(off) = 1;
                }
                held += (STEP >> 20) as u32;
                let b = held.to_le_bytes();
                libc::write(fds[1], b.as_ptr().cast(), 4);
            }
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copy of the write end.
    unsafe { libc::close(fds[1]) };
    if child < 0 {
        unsafe { libc::close(fds[0]) };
        return None;
    }
    let mut most = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(v) = read_u32(fds[0], deadline.saturating_duration_since(Instant::now())) {
        most = most.max(u64::from(v));
    }
    // SAFETY: our child.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        let mut st = 0;
        libc::waitpid(child, &mut st, 0);
        libc::close(fds[0]);
    }
    Some(most)
}

/// A little-endian u32 from `fd` within `wait`; `None` at its end.
fn read_u32(fd: i32, wait: Duration) -> Option<u32> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd; a read into a 4-byte array.
    unsafe {
        if libc::poll(&mut pfd, 1, wait.as_millis().min(i32::MAX as u128) as i32) <= 0 {
            return None;
        }
        let mut b = [0u8; 4];
        (libc::read(fd, b.as_mut_ptr().cast(), 4) == 4).then(|| u32::from_le_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_decoy_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = Decoys::plant(dir.path()).unwrap();
        assert!(d.changed().is_empty());
        std::fs::write(dir.path().join(DECOYS).join("secret"), "x").unwrap();
        let c = d.changed();
        assert_eq!(c.len(), 1);
        assert!(c[0].contains("secret"), "{c:?}");
    }

    #[test]
    fn the_bomb_and_the_hog_report_how_far_they_got() {
        // Unlimited here (a test process): they reach their bounds.
        let n = fork_bomb().unwrap();
        assert!(n > 1, "{n}");
        let mb = memory_hog().unwrap();
        assert!(mb >= 16, "{mb}");
    }
}
