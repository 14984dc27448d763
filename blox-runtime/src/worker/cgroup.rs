//! A cgroup per launch: the kernel, not a heuristic, says which processes
//! are a launch's, limits their memory and their number, and kills them all
//! when the launch ends, whatever session or process group they moved to.
//!
//! Detected when the worker starts ([`Containment::detect`]):
//! - cgroup v2 (the unified hierarchy), where the host mounts it and the
//!   worker may write it: every launch's processes join a cgroup of their
//!   own under this worker's directory there, and its end kills the
//!   cgroup (`cgroup.kill`, else freeze and kill each process). Its memory
//!   and process limits are set there where the hierarchy offers the
//!   `memory` and `pids` controllers;
//! - the v1 `memory`, `pids` and `freezer` hierarchies otherwise (or for
//!   the controllers a hybrid host binds to v1, as this project's CI
//!   machine does): the launch joins a cgroup in each.
//!
//! Each worker works in a directory of its own in each hierarchy (under
//! the cgroup the worker itself runs in), named after the node's name and
//! its work directory, so a worker started again finds the cgroups of the
//! launches its earlier run left and kills them before it registers
//! ([`Containment::sweep_stale`]). A job cannot leave its cgroup: moving a
//! process needs write access to cgroup files that are root's.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// `[worker] cgroup`: how launches are contained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CgroupSetting {
    /// The best the host offers, or none (logged).
    Auto,
    /// No cgroups: the uid sweeps of `--job-uids` only.
    Off,
    /// This cgroup v2 directory is the worker's to create launches under
    /// (a delegated cgroup; `memory` and `pids` enabled for it).
    Path(PathBuf),
}

impl CgroupSetting {
    pub fn parse(s: &str) -> CgroupSetting {
        match s {
            "auto" | "" => CgroupSetting::Auto,
            "off" | "none" => CgroupSetting::Off,
            p => CgroupSetting::Path(PathBuf::from(p)),
        }
    }
}

/// Limits of one launch's processes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    pub memory_bytes: Option<u64>,
    pub max_processes: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// The unified hierarchy, with what it offers this worker.
    V2 {
        memory: bool,
        pids: bool,
        kill: bool,
    },
    V1Memory,
    V1Pids,
    V1Freezer,
}

/// One hierarchy this worker uses: its kind and the worker's directory.
#[derive(Clone, Debug)]
struct Hier {
    kind: Kind,
    base: PathBuf,
}

/// How this worker contains its launches (detected at start).
#[derive(Debug)]
pub struct Containment {
    hiers: Vec<Hier>,
    /// In words, for the log and `status`.
    pub summary: String,
}

/// A launch's cgroups (one per hierarchy in use).
#[derive(Debug)]
pub struct LaunchGroup {
    dirs: Vec<(Kind, PathBuf)>,
    /// Each cgroup's `cgroup.procs`, which the launch's first process
    /// writes itself into before `exec` ([`crate::process`]).
    pub procs: Vec<CString>,
    pub limits: Limits,
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    // cgroup files take one write each; no create, no truncate needed.
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The value of `key` in a flat-keyed cgroup file (`memory.events`,
/// `cgroup.events`, `memory.oom_control`).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    read(path).lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// `/proc/self/mountinfo`'s cgroup mounts: (mount point, root inside the
/// hierarchy, v2?, v1 controllers).
fn mounts() -> Vec<(PathBuf, String, bool, Vec<String>)> {
    let mut out = Vec::new();
    for line in read(Path::new("/proc/self/mountinfo")).lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let (root, point) = (l[3].to_string(), PathBuf::from(unescape(l[4])));
        match r[0] {
            "cgroup2" => out.push((point, root, true, Vec::new())),
            "cgroup" => {
                let ctl = r[2].split(',').map(str::to_string).collect();
                out.push((point, root, false, ctl))
            }
            _ => {}
        }
    }
    out
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let digits = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("x");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroup in each hierarchy: (v2 path, v1 controller →
/// path), from `/proc/self/cgroup`.
fn own_groups() -> (Option<String>, Vec<(String, String)>) {
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in read(Path::new("/proc/self/cgroup")).lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_), Some(ctl), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if ctl.is_empty() {
            v2 = Some(path.to_string());
        } else {
            for c in ctl.split(',') {
                v1.push((c.to_string(), path.to_string()));
            }
        }
    }
    (v2, v1)
}

/// The directory of cgroup `path` (as /proc/self/cgroup names it) in a
/// hierarchy mounted at `point` with root `root`.
fn dir_of(point: &Path, root: &str, path: &str) -> PathBuf {
    let rel = path.strip_prefix(root).unwrap_or(path);
    point.join(rel.trim_start_matches('/'))
}

/// Makes `dir` (and its parents) and checks it is a cgroup the worker may
/// use: `cgroup.procs` is there.
fn make(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if !dir.join("cgroup.procs").exists() {
        return Err(format!("{} is not a cgroup", dir.display()));
    }
    Ok(())
}

/// The leaf of a worker's v2 directory the worker moves itself into.
const SUPERVISOR: &str = "worker";

/// Whether `dir` (v2) is its hierarchy's root (which may hold processes
/// and still offer controllers to its children).
fn is_root(dir: &Path) -> bool {
    !dir.join("cgroup.type").exists()
}

/// Whether `dir` (v2) offers `controller` to its children now.
fn offers(dir: &Path, controller: &str) -> bool {
    read(&dir.join("cgroup.subtree_control"))
        .split_whitespace()
        .any(|c| c == controller)
}

/// Whether `dir` (v2) has `controller` to offer.
fn offers_any(dir: &Path, controller: &str) -> bool {
    read(&dir.join("cgroup.controllers"))
        .split_whitespace()
        .any(|c| c == controller)
}

/// Enables `memory` and `pids` for the children of `dir` where its parent
/// offers them; returns which are on.
fn enable(dir: &Path) -> (bool, bool) {
    let offered = read(&dir.join("cgroup.controllers"));
    let has = |c: &str| offered.split_whitespace().any(|x| x == c);
    let mut on = (false, false);
    for (c, flag) in [("memory", &mut on.0), ("pids", &mut on.1)] {
        if has(c) && write(&dir.join("cgroup.subtree_control"), &format!("+{c}")).is_ok() {
            *flag = true;
        }
    }
    on
}

impl Containment {
    /// What the host offers the worker named `key` (see the module docs);
    /// `Ok(None)`: no cgroups (off, or none usable: the reason is logged).
    pub fn detect(setting: &CgroupSetting, key: &str) -> Result<Option<Containment>, String> {
        if *setting == CgroupSetting::Off {
            tracing::warn!("cgroups off ([worker] cgroup = \"off\"): a job's processes are told apart by their uid only");
            return Ok(None);
        }
        if !cfg!(target_os = "linux") {
            return Ok(None);
        }
        let mounts = mounts();
        let (own_v2, own_v1) = own_groups();
        let mut hiers = Vec::new();
        let mut notes = Vec::new();
        // The unified hierarchy.
        let v2_base = match setting {
            CgroupSetting::Path(p) => Some(p.join(key)),
            _ => mounts.iter().find(|m| m.2).and_then(|(point, root, _, _)| {
                own_v2
                    .as_deref()
                    .map(|own| dir_of(point, root, own).join(key))
            }),
        };
        if let Some(base) = v2_base {
            match make(&base) {
                Ok(()) => {
                    let parent = base.parent().unwrap_or(&base).to_path_buf();
                    // The cgroup above offers the controllers to the
                    // worker's directory, which offers them to the
                    // launches. A cgroup holding processes may offer its
                    // children no domain controller (memory) unless it is
                    // the root: the worker moves itself into a leaf of its
                    // directory first (a systemd service with Delegate=yes
                    // holds only the worker).
                    if !is_root(&parent) && !offers(&parent, "memory") {
                        let leaf = base.join(SUPERVISOR);
                        match make(&leaf).and_then(|_| {
                            write(&leaf.join("cgroup.procs"), "0").map_err(|e| {
                                format!("cannot move the worker into {}: {e}", leaf.display())
                            })
                        }) {
                            Ok(()) => {
                                tracing::info!(cgroup = %leaf.display(), "the worker moved into a cgroup of its own, so its launches' cgroups can have memory limits")
                            }
                            Err(e) => tracing::debug!("{e}"),
                        }
                    }
                    let _ = enable(&parent);
                    let (memory, pids) = enable(&base);
                    if !memory && offers_any(&parent, "memory") {
                        tracing::warn!(
                            cgroup = %parent.display(),
                            "cgroup v2 cannot limit launches' memory here (the cgroup above the worker's holds other processes): run the worker in a cgroup of its own (systemd: Delegate=yes), or set [worker] cgroup to a delegated directory"
                        );
                    }
                    let kill = base.join("cgroup.kill").exists();
                    notes.push(format!(
                        "cgroup v2 {} (kill: {}{}{})",
                        base.display(),
                        if kill {
                            "cgroup.kill"
                        } else {
                            "freeze and kill"
                        },
                        if memory { ", memory" } else { "" },
                        if pids { ", pids" } else { "" }
                    ));
                    hiers.push(Hier {
                        kind: Kind::V2 { memory, pids, kill },
                        base,
                    });
                }
                Err(e) if matches!(setting, CgroupSetting::Path(_)) => {
                    return Err(format!("[worker] cgroup: {e}"))
                }
                Err(e) => tracing::debug!("cgroup v2 not used: {e}"),
            }
        }
        let v2 = hiers.first().map(|h| h.kind);
        let need_memory = !matches!(v2, Some(Kind::V2 { memory: true, .. }));
        let need_pids = !matches!(v2, Some(Kind::V2 { pids: true, .. }));
        let need_freezer = v2.is_none();
        // The v1 hierarchies, for what v2 does not give.
        for (ctl, kind, needed) in [
            ("memory", Kind::V1Memory, need_memory),
            ("pids", Kind::V1Pids, need_pids),
            ("freezer", Kind::V1Freezer, need_freezer),
        ] {
            if !needed {
                continue;
            }
            let Some((point, root, _, _)) =
                mounts.iter().find(|m| !m.2 && m.3.iter().any(|c| c == ctl))
            else {
                continue;
            };
            let own = own_v1
                .iter()
                .find(|(c, _)| c == ctl)
                .map_or("/", |(_, p)| p.as_str());
            let base = dir_of(point, root, own).join(key);
            match make(&base) {
                Ok(()) => {
                    if kind == Kind::V1Memory {
                        // Limits apply to what the launches fork too.
                        let _ = write(&base.join("memory.use_hierarchy"), "1");
                    }
                    notes.push(format!("v1 {ctl} {}", base.display()));
                    hiers.push(Hier { kind, base });
                }
                Err(e) => tracing::debug!("cgroup v1 {ctl} not used: {e}"),
            }
        }
        if hiers.is_empty() {
            tracing::warn!("no cgroup this worker may write (neither v2 nor the v1 memory, pids or freezer controllers): a job's processes are told apart by their uid only");
            return Ok(None);
        }
        let c = Containment {
            hiers,
            summary: notes.join("; "),
        };
        if !c.kills() {
            tracing::warn!("cgroups without a way to kill a launch whole (no v2, no v1 freezer or pids): processes are killed one by one");
        }
        Ok(Some(c))
    }

    /// Whether a launch's end can kill every process in it at once (v2, or
    /// a v1 freezer).
    fn kills(&self) -> bool {
        self.hiers
            .iter()
            .any(|h| matches!(h.kind, Kind::V2 { .. } | Kind::V1Freezer))
    }

    /// Whether the memory / process limits can be set.
    pub fn limits_memory(&self) -> bool {
        self.hiers
            .iter()
            .any(|h| matches!(h.kind, Kind::V2 { memory: true, .. } | Kind::V1Memory))
    }
    pub fn limits_processes(&self) -> bool {
        self.hiers
            .iter()
            .any(|h| matches!(h.kind, Kind::V2 { pids: true, .. } | Kind::V1Pids))
    }

    /// Kills and removes every launch cgroup left under this worker's
    /// directories (by an earlier run of it); returns how many processes
    /// were killed.
    pub fn sweep_stale(&self) -> usize {
        let mut killed = 0;
        let mut names = std::collections::BTreeSet::new();
        for h in &self.hiers {
            for e in std::fs::read_dir(&h.base).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if e.file_type().is_ok_and(|t| t.is_dir()) && name != SUPERVISOR {
                    names.insert(name);
                }
            }
        }
        for name in names {
            let g = LaunchGroup {
                dirs: self
                    .hiers
                    .iter()
                    .map(|h| (h.kind, h.base.join(&name)))
                    .filter(|(_, d)| d.is_dir())
                    .collect(),
                procs: Vec::new(),
                limits: Limits::default(),
            };
            killed += g.pids().len();
            g.kill();
            if let Err(e) = g.remove(Duration::from_secs(5)) {
                tracing::warn!("{e}");
            }
        }
        killed
    }

    /// A new cgroup `name` in each hierarchy, with `limits` set.
    pub fn create(&self, name: &str, limits: Limits) -> Result<LaunchGroup, String> {
        let mut g = LaunchGroup {
            dirs: Vec::new(),
            procs: Vec::new(),
            limits,
        };
        for h in &self.hiers {
            let d = h.base.join(name);
            if d.exists() {
                // Left by a launch of the same name: it is not this one's.
                let old = LaunchGroup {
                    dirs: vec![(h.kind, d.clone())],
                    procs: Vec::new(),
                    limits: Limits::default(),
                };
                old.kill();
                old.remove(Duration::from_secs(2))?;
            }
            std::fs::create_dir(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
            g.dirs.push((h.kind, d.clone()));
            let set = |file: &str, v: String| {
                write(&d.join(file), &v)
                    .map_err(|e| format!("cannot set {} to {v}: {e}", d.join(file).display()))
            };
            match h.kind {
                Kind::V2 { memory, pids, .. } => {
                    if let (true, Some(m)) = (memory, limits.memory_bytes) {
                        set("memory.max", m.to_string())?;
                        // No swap beyond the limit, and an out-of-memory
                        // kill takes the launch whole.
                        let _ = write(&d.join("memory.swap.max"), "0");
                        let _ = write(&d.join("memory.oom.group"), "1");
                    }
                    if let (true, Some(p)) = (pids, limits.max_processes) {
                        set("pids.max", p.to_string())?;
                    }
                }
                Kind::V1Memory => {
                    if let Some(m) = limits.memory_bytes {
                        set("memory.limit_in_bytes", m.to_string())?;
                        let _ = write(&d.join("memory.memsw.limit_in_bytes"), &m.to_string());
                    }
                }
                Kind::V1Pids => {
                    if let Some(p) = limits.max_processes {
                        set("pids.max", p.to_string())?;
                    }
                }
                Kind::V1Freezer => {}
            }
            let procs = d.join("cgroup.procs");
            use std::os::unix::ffi::OsStrExt;
            g.procs.push(
                CString::new(procs.as_os_str().as_bytes())
                    .map_err(|_| format!("{}: a NUL in the path", procs.display()))?,
            );
        }
        Ok(g)
    }
}

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

/// The directory name of a worker's cgroups: its node name and a digest of
/// its work directory (several workers on one machine each have one).
pub fn worker_key(name: &str, workdir: &Path) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let abs = std::path::absolute(workdir).unwrap_or_else(|_| workdir.to_path_buf());
    use sha2::Digest;
    let h = sha2::Sha256::digest(abs.as_os_str().as_encoded_bytes());
    format!(
        "blox-worker-{clean}-{:02x}{:02x}{:02x}{:02x}",
        h[0], h[1], h[2], h[3]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_and_cgroup_paths() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(
            dir_of(Path::new("/sys/fs/cgroup"), "/", "/a/b"),
            PathBuf::from("/sys/fs/cgroup/a/b")
        );
        assert_eq!(
            dir_of(Path::new("/sys/fs/cgroup"), "/a", "/a/b"),
            PathBuf::from("/sys/fs/cgroup/b")
        );
        let k = worker_key("node 1/x", Path::new("/tmp/w"));
        assert!(k.starts_with("blox-worker-node_1_x-"), "{k}");
        assert_eq!(k, worker_key("node 1/x", Path::new("/tmp/w")));
        assert_ne!(k, worker_key("node 1/x", Path::new("/tmp/v")));
    }
}

#[cfg(test)]
mod timing {
    use super::*;

    /// What a launch's start costs the worker, with and without a cgroup
    /// and another uid (run by hand: `--ignored --nocapture`).
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn launch_start_cost() {
        let dir = tempfile::tempdir().unwrap();
        let c = Containment::detect(&CgroupSetting::Auto, "blox-worker-timing-0")
            .unwrap()
            .expect("cgroups here");
        for (label, contained, user) in [
            ("plain", false, false),
            ("uid", false, true),
            ("uid+cgroup", true, true),
        ] {
            let t = Instant::now();
            let n = 50;
            for i in 0..n {
                let group = contained.then(|| {
                    c.create(&format!("job-{i}-launch-1"), Limits::default())
                        .unwrap()
                });
                let spec = crate::process::LaunchSpec {
                    job: i,
                    argv: vec!["/bin/true".into()],
                    devices: vec!["0".into()],
                    control: dir.path().join(format!("{label}/{i}/launch-1")),
                    checkpoint: dir.path().join(format!("{label}/{i}/checkpoint")),
                    coord: None,
                    resume: false,
                    batch_size: None,
                    master_addr: String::new(),
                    worker_addr: String::new(),
                    process_per_gpu: false,
                    first_rank: 0,
                    world_size: None,
                    generation: 1,
                    job_user: user.then(|| crate::process::JobUser {
                        name: "t".into(),
                        uid: 1_900_000_500,
                        gid: 1_900_000_500,
                        home: None,
                        takes_over: Some((1_900_000_500, 1_900_000_600)),
                    }),
                    lease: None,
                    pass_env: Vec::new(),
                    cgroup_procs: group.as_ref().map(|g| g.procs.clone()).unwrap_or_default(),
                    share: None,
                };
                let run = crate::process::Running::spawn(&spec).unwrap();
                let _ = run.wait(Duration::from_secs(5));
                if let Some(g) = group {
                    reap(g, None);
                }
            }
            println!(
                "{label}: {:.2} ms a launch",
                t.elapsed().as_secs_f64() * 1e3 / n as f64
            );
        }
        drain(Duration::from_secs(5));
        let _ = std::fs::remove_dir(&c.hiers[0].base);
    }
}
