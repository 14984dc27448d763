//! A launch's cgroups once made: their processes and out-of-memory kills,
//! killing and removing them, and the background reaper that removes them
//! once empty (a uid stays busy until then).

use super::{keyed, read, write, Kind, LaunchGroup};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

impl LaunchGroup {
    /// Every process in any of its cgroups.
    pub fn pids(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self
            .dirs
            .iter()
            .flat_map(|(_, d)| {
                read(&d.join("cgroup.procs"))
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// True when no process is left in it.
    pub fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    /// Times the kernel killed a process of it for want of memory.
    pub fn oom_kills(&self) -> u64 {
        self.dirs
            .iter()
            .filter_map(|(k, d)| match k {
                Kind::V2 { memory: true, .. } => keyed(&d.join("memory.events"), "oom_kill"),
                Kind::V1Memory => keyed(&d.join("memory.oom_control"), "oom_kill"),
                _ => None,
            })
            .sum()
    }

    /// Kills every process in it: `cgroup.kill` where v2 has it, else
    /// frozen (no process forks meanwhile) and killed one by one, else
    /// killed one by one in rounds.
    pub fn kill(&self) {
        for (k, d) in &self.dirs {
            if let Kind::V2 { kill: true, .. } = k {
                if write(&d.join("cgroup.kill"), "1").is_ok() {
                    return;
                }
            }
        }
        let freeze = self.dirs.iter().find_map(|(k, d)| match k {
            Kind::V2 { .. } => Some((d.join("cgroup.freeze"), "1", "0")),
            Kind::V1Freezer => Some((d.join("freezer.state"), "FROZEN", "THAWED")),
            _ => None,
        });
        for _ in 0..100 {
            // Frozen, nothing in it forks while it is read and killed;
            // killed frozen processes die once thawed.
            if let Some((file, on, _)) = &freeze {
                let _ = write(file, on);
            }
            let pids = self.pids();
            if pids.is_empty() {
                break;
            }
            for p in pids {
                if let Ok(p) = libc::pid_t::try_from(p) {
                    // SAFETY: a plain syscall; the pid is a member of
                    // this launch's cgroup.
                    unsafe {
                        libc::kill(p, libc::SIGKILL);
                    }
                }
            }
            if let Some((file, _, off)) = &freeze {
                let _ = write(file, off);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some((file, _, off)) = &freeze {
            let _ = write(file, off);
        }
    }

    /// Removes its cgroups once empty (waiting up to `wait`).
    pub fn remove(&self, wait: Duration) -> Result<(), String> {
        let t = Instant::now();
        while !self.is_empty() {
            if t.elapsed() > wait {
                return Err(format!(
                    "processes {:?} still in the launch's cgroup {} after {:.1} s",
                    self.pids(),
                    self.dirs
                        .first()
                        .map_or(String::new(), |(_, d)| d.display().to_string()),
                    wait.as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for (_, d) in &self.dirs {
            match std::fs::remove_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot remove the cgroup {}: {e}", d.display())),
            }
        }
        Ok(())
    }
}

/// Launch cgroups being emptied and removed, with the uid each ran as:
/// a uid stays busy until its cgroup is gone.
type Pending = Mutex<Vec<(LaunchGroup, Option<u32>)>>;

fn pending() -> &'static Pending {
    static PENDING: OnceLock<Pending> = OnceLock::new();
    PENDING.get_or_init(|| {
        std::thread::Builder::new()
            .name("blox-cgroup-reaper".into())
            .spawn(|| loop {
                std::thread::sleep(Duration::from_millis(50));
                let mut p = pending().lock().unwrap_or_else(|e| e.into_inner());
                p.retain(|(g, _)| {
                    if !g.is_empty() {
                        g.kill();
                        return true;
                    }
                    match g.remove(Duration::ZERO) {
                        Ok(()) => false,
                        Err(e) => {
                            tracing::debug!("{e}");
                            true
                        }
                    }
                });
            })
            .expect("cannot start the cgroup reaper thread");
        Mutex::new(Vec::new())
    })
}

/// Ends a launch's cgroup: kills what is in it now, and removes it (in the
/// background) once it is empty.
pub fn reap(group: LaunchGroup, uid: Option<u32>) {
    group.kill();
    pending()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((group, uid));
}

/// Uids whose launch cgroups are not gone yet.
pub fn draining_uids() -> Vec<u32> {
    let p = pending().lock().unwrap_or_else(|e| e.into_inner());
    p.iter().filter_map(|(_, u)| *u).collect()
}

/// Waits (up to `wait`) until every reaped cgroup is gone.
pub fn drain(wait: Duration) -> bool {
    let t = Instant::now();
    loop {
        if pending()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return true;
        }
        if t.elapsed() > wait {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
