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
//!
//! This file holds the settings and types; `containment` detects the
//! hierarchies and makes launch cgroups, `group` kills, removes and reaps
//! them.

use std::ffi::CString;
use std::path::{Path, PathBuf};

mod containment;
mod group;

pub use group::{drain, draining_uids, reap};

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
    use super::containment::{dir_of, unescape};
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
    use std::time::{Duration, Instant};

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
