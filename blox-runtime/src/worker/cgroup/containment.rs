//! Detecting what the host offers (the cgroup mounts and this process's
//! own cgroups, v2 or v1), setting up the worker's directory in each
//! hierarchy, and making, limiting and sweeping launch cgroups there.

use super::{read, write, CgroupSetting, Containment, Hier, Kind, LaunchGroup, Limits};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
pub(super) fn unescape(s: &str) -> String {
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
pub(super) fn dir_of(point: &Path, root: &str, path: &str) -> PathBuf {
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
