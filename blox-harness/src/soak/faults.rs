//! The soak's faults: what is injected, when, and how.
//!
//! - a worker SIGKILLed and restarted a second later;
//! - the scheduler SIGKILLed and restarted on the same job table;
//! - a worker cut off from the scheduler both ways for 6 s ([`CutProxy`]);
//! - a worker hung (`SIGSTOP`) for 6 s under its running jobs;
//! - a full disk: no file of the scheduler may grow for 6 s (its
//!   `RLIMIT_FSIZE` set, from outside, to the job table's size);
//! - a clock step: the scheduler's wall clock goes back an hour and the
//!   scheduler is restarted on it (a clock stepped back across a restart),
//!   through libfaketime where it is installed.

use super::procs::Proc;
use super::proxy::CutProxy;
use super::run::Rng;
use super::SoakConfig;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy, Debug)]
pub(super) enum Fault {
    KillWorker(usize),
    RestartScheduler,
    Cut(usize),
    Hang(usize),
    FullDisk,
    ClockStep,
}

/// The processes faults act on.
pub(super) struct Cluster {
    pub scheduler: Proc,
    pub workers: Vec<Proc>,
    pub blox: PathBuf,
    /// The job table whose size a full disk freezes.
    pub state: PathBuf,
    /// The file libfaketime reads the scheduler's clock offset from
    /// (`None`: no libfaketime, no clock step).
    pub clock: Option<PathBuf>,
}

/// The faults to inject, in a random order: as many of each kind as `cfg`
/// asks for.
pub(super) fn plan(cfg: &SoakConfig, rng: &mut Rng) -> Vec<Fault> {
    let mut faults: Vec<Fault> = Vec::new();
    let worker = |rng: &mut Rng| (rng.next() * cfg.workers as f64) as usize;
    for _ in 0..cfg.worker_kills {
        faults.push(Fault::KillWorker(worker(rng)));
    }
    for _ in 0..cfg.scheduler_restarts {
        faults.push(Fault::RestartScheduler);
    }
    for _ in 0..cfg.cuts {
        faults.push(Fault::Cut(worker(rng)));
    }
    for _ in 0..cfg.hangs {
        faults.push(Fault::Hang(worker(rng)));
    }
    for _ in 0..cfg.disk_fulls {
        faults.push(Fault::FullDisk);
    }
    for _ in 0..cfg.clock_steps {
        faults.push(Fault::ClockStep);
    }
    for i in (1..faults.len()).rev() {
        let j = (rng.next() * (i + 1) as f64) as usize;
        faults.swap(i, j);
    }
    faults
}

/// Where libfaketime is installed (Debian's `faketime` package), if it is.
pub(super) fn libfaketime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BLOX_SOAK_LIBFAKETIME") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
        "/usr/local/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

/// The environment that puts the scheduler's wall clock at the offset in
/// `clock` (re-read every second; its monotonic clock stays true).
pub(super) fn faketime_env(lib: &Path, clock: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), lib.display().to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".into(),
            clock.display().to_string(),
        ),
        ("FAKETIME_CACHE_DURATION".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

/// Sets the largest file `pid` may write (`None`: unlimited).
#[cfg(target_os = "linux")]
fn limit_file_size(pid: u32, bytes: Option<u64>) -> std::io::Result<()> {
    let v = bytes.unwrap_or(libc::RLIM_INFINITY);
    let l = libc::rlimit {
        rlim_cur: v,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit(2) reads `l` and writes nothing (old limit: null).
    let r = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_FSIZE,
            &l,
            std::ptr::null_mut(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn limit_file_size(_: u32, _: Option<u64>) -> std::io::Result<()> {
    Err(std::io::Error::other("no prlimit here"))
}

fn restart_scheduler(c: &mut Cluster) -> Result<(), String> {
    let blox = c.blox.clone();
    c.scheduler.restart(&blox).map_err(|e| e.to_string())
}

/// Injects `f`; says what was done.
pub(super) async fn inject(
    f: Fault,
    cluster: &Arc<Mutex<Cluster>>,
    proxies: &Arc<Vec<(CutProxy, CutProxy)>>,
) -> String {
    let lock = || cluster.lock().expect("not poisoned");
    match f {
        Fault::KillWorker(i) => {
            lock().workers[i].kill();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut c = lock();
            let blox = c.blox.clone();
            match c.workers[i].restart(&blox) {
                Ok(()) => format!("worker w{i} killed"),
                Err(e) => format!("worker w{i} killed, not restarted: {e}"),
            }
        }
        Fault::RestartScheduler => {
            lock().scheduler.kill();
            tokio::time::sleep(Duration::from_secs(1)).await;
            match restart_scheduler(&mut lock()) {
                Ok(()) => "scheduler restarted".into(),
                Err(e) => format!("scheduler killed, not restarted: {e}"),
            }
        }
        Fault::Cut(i) => {
            let (up, down) = &proxies[i];
            up.cut();
            down.cut();
            // Longer than the worker timeout (4 s).
            tokio::time::sleep(Duration::from_secs(6)).await;
            up.restore();
            down.restore();
            format!("w{i} cut off for 6 s")
        }
        Fault::Hang(i) => {
            // Its jobs run on meanwhile and must stop themselves when their
            // lease runs out: the scheduler relaunches them after 4 s.
            #[cfg(unix)]
            {
                lock().workers[i].signal(libc::SIGSTOP);
                tokio::time::sleep(Duration::from_secs(6)).await;
                lock().workers[i].signal(libc::SIGCONT);
                format!("w{i} stopped (SIGSTOP) for 6 s")
            }
            #[cfg(not(unix))]
            format!("w{i}: no SIGSTOP here")
        }
        Fault::FullDisk => {
            let (pid, state) = {
                let c = lock();
                (c.scheduler.pid(), c.state.clone())
            };
            let size = std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0);
            let Some(pid) = pid else {
                return "full disk skipped: the scheduler was not running".into();
            };
            if let Err(e) = limit_file_size(pid, Some(size)) {
                return format!("full disk skipped: prlimit: {e}");
            }
            tokio::time::sleep(Duration::from_secs(6)).await;
            // A scheduler restarted meanwhile starts unlimited.
            if let Some(pid) = lock().scheduler.pid() {
                let _ = limit_file_size(pid, None);
            }
            format!("the scheduler's disk full for 6 s (job table frozen at {size} bytes)")
        }
        Fault::ClockStep => {
            let Some(clock) = lock().clock.clone() else {
                return "clock step skipped: no libfaketime (apt-get install faketime)".into();
            };
            // Back an hour, then a restart on that clock.
            if let Err(e) = std::fs::write(&clock, "-1h\n") {
                return format!("clock step skipped: {}: {e}", clock.display());
            }
            // Rounds on the stepped clock (libfaketime reads it each second).
            tokio::time::sleep(Duration::from_secs(3)).await;
            lock().scheduler.kill();
            tokio::time::sleep(Duration::from_secs(1)).await;
            match restart_scheduler(&mut lock()) {
                Ok(()) => "the scheduler's clock stepped back 1 h across a restart".into(),
                Err(e) => format!("clock stepped back, scheduler not restarted: {e}"),
            }
        }
    }
}
