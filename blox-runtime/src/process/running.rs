//! A running launch ([`Running`]): making its control and report
//! directories, starting its processes with their environment, its lease
//! and revocation, and waiting for and killing its processes.

#[cfg(target_os = "linux")]
use super::child::CGROUP_JOIN_FAILED;
use super::child::{spawn_child, spawn_waiter};
use super::ownership::{give, GIVEN_FILE, UID_LINE};
use super::{argv_summary, passed_env, Exit, GpuShareEnv, LaunchSpec, StartError, REPORT_DIR};
use crate::safe_fs::{Dir, Trust};
use blox_client::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lease file's text: `until` and `grace` in seconds of the node's
/// monotonic clock.
fn lease_text(until: Instant, grace: Duration) -> Option<String> {
    let now = blox_client::monotonic_s()?;
    let left = until
        .saturating_duration_since(Instant::now())
        .as_secs_f64();
    Some(format!("{:.3} {:.3}\n", now + left, grace.as_secs_f64()))
}

struct Rank {
    exit: Arc<Mutex<Option<Exit>>>,
    kill: Arc<AtomicBool>,
}

/// A running launch: its processes and its directories.
pub struct Running {
    /// The control directory's path (messages).
    pub control: PathBuf,
    /// The control directory (the worker's; the job reads it) and the
    /// report directory (the job's; the worker reads it).
    pub(super) control_dir: Dir,
    pub(super) report: Dir,
    /// The uid the job runs as, when not the worker's: a file the worker
    /// reads from it must be that uid's own.
    pub(super) owner: Option<u32>,
    /// The directories given to the job (report, checkpoint, coordination),
    /// taken back by [`Running::hand_back`].
    pub(super) given: Vec<Dir>,
    /// Those of `given` that the launch's parts on other workers share
    /// were moved out ([`Running::keep_shared`]): the control directory
    /// still lists them ([`GIVEN_FILE`]) until they are taken back.
    pub(super) kept_shared: bool,
    ranks: Vec<Rank>,
    pub(super) metrics_offset: u64,
    /// Why a file the job gave the worker to read was refused (a link, a
    /// FIFO, another's file): the launch is ended for it, as the job's
    /// fault ([`Running::refusal`]).
    pub(super) refusal: std::sync::Mutex<Option<String>>,
}

/// `path`'s parent and last component.
fn split(path: &Path) -> Result<(PathBuf, &str), StartError> {
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        StartError::node(format!(
            "{}: not a directory a launch can use",
            path.display()
        ))
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((parent, name))
}

/// The job's own directory at `path` (checkpoint, coordination): its
/// parent reached safely (and made where missing), the directory itself
/// made where missing, never through a link.
fn job_dir(path: &Path, trust: Trust) -> Result<Dir, StartError> {
    let (parent, name) = split(path)?;
    Dir::open(&parent, true, trust)
        .and_then(|p| p.subdir(name, 0o700, false))
        .map_err(StartError::node)
}

impl Running {
    /// Creates the directories and starts the processes.
    pub fn spawn(spec: &LaunchSpec) -> Result<Running, StartError> {
        if spec.argv.is_empty() || spec.argv[0].is_empty() {
            return Err(StartError::job("no command to run"));
        }
        let user = spec.job_user.as_ref();
        // Jobs that run as another uid may plant links where the worker
        // works: every directory on the way is checked then.
        let trust = match user {
            Some(u) => Trust::Strict {
                uids: u.takes_over.unwrap_or((u.uid, u.uid)),
                gids: u.takes_over.unwrap_or((u.gid, u.gid)),
            },
            None => Trust::Same,
        };
        let (parent, name) = split(&spec.control)?;
        let parent = Dir::open(&parent, true, trust).map_err(StartError::node)?;
        // A launch directory left by a launch the scheduler never recorded
        // (it restarted meanwhile) is not this launch's: its `done` or
        // `revoked` must not speak for it.
        parent.remove(name).map_err(|e| {
            StartError::node(format!("cannot clear the stale launch directory: {e}"))
        })?;
        // The control directory: the worker's, the job's group may read.
        let control_dir = parent.subdir(name, 0o750, true).map_err(StartError::node)?;
        let report = control_dir
            .subdir(REPORT_DIR, 0o700, true)
            .map_err(StartError::node)?;
        let mut running = Running {
            control: spec.control.clone(),
            control_dir,
            report,
            owner: user.map(|u| u.uid),
            given: Vec::new(),
            kept_shared: false,
            ranks: Vec::new(),
            metrics_offset: 0,
            refusal: std::sync::Mutex::new(None),
        };
        match running.start(spec, trust) {
            Ok(()) => Ok(running),
            Err(e) => {
                // Nothing of it runs: what it was given goes back now.
                running.kill();
                if user.is_some() {
                    running.hand_back();
                }
                Err(e)
            }
        }
    }

    /// [`Running::spawn`]'s second half: gives the job its directories,
    /// writes its lease and starts its processes.
    fn start(&mut self, spec: &LaunchSpec, trust: Trust) -> Result<(), StartError> {
        let user = spec.job_user.as_ref();
        self.give_directories(spec, trust)?;
        if let Some((until, grace)) = spec.lease {
            if let Some(text) = lease_text(until, grace) {
                self.control_dir
                    .write(blox_client::LEASE_FILE, text.as_bytes())
                    .map_err(|e| {
                        StartError::node(format!(
                            "cannot write {}: {e}",
                            spec.control.join(blox_client::LEASE_FILE).display()
                        ))
                    })?;
            }
        }
        // (A job without GPUs is one process that sees none.)
        let groups: Vec<Vec<String>> = if spec.process_per_gpu && !spec.devices.is_empty() {
            spec.devices.iter().map(|d| vec![d.clone()]).collect()
        } else {
            vec![spec.devices.clone()]
        };
        let world = spec.world_size.unwrap_or(groups.len() as u32);
        // Start-up is measured from here (the job reports its first
        // iteration against it; `blox_client::STARTUP_METRIC`).
        let launched = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| format!("{:.3}", d.as_secs_f64()))
            .unwrap_or_default();
        for (i, devs) in groups.iter().enumerate() {
            let rank = spec.first_rank + i as u32;
            let suffix = if groups.len() > 1 {
                format!(".rank{rank}")
            } else {
                String::new()
            };
            let cmd = self.rank_command(spec, rank, devs, &suffix, world, &launched)?;
            match spawn_child(
                cmd,
                spec.lease.map(|l| l.0),
                spec.cgroup_procs.clone(),
                user.map(|u| (u.uid, u.gid)),
            ) {
                Ok(child) => {
                    let exit = Arc::new(Mutex::new(None));
                    let kill = Arc::new(AtomicBool::new(false));
                    spawn_waiter(child, exit.clone(), kill.clone());
                    self.ranks.push(Rank { exit, kill });
                }
                #[cfg(target_os = "linux")]
                Err(e) if e.raw_os_error() == Some(CGROUP_JOIN_FAILED) => {
                    return Err(StartError::node(format!(
                        "cannot put the launch into its cgroup ({})",
                        spec.cgroup_procs
                            .iter()
                            .map(|p| p.to_string_lossy())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                Err(e) => {
                    let mut err =
                        StartError::job(format!("cannot start {}: {e}", argv_summary(&spec.argv)));
                    err.permanent = matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                    );
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Gives the job its directories: the control directory to its group
    /// and the report directory to it (when it runs as another uid), then
    /// its checkpoint and coordination directories, listed in
    /// [`GIVEN_FILE`] before they are handed over.
    fn give_directories(&mut self, spec: &LaunchSpec, trust: Trust) -> Result<(), StartError> {
        let user = spec.job_user.as_ref();
        if let Some(u) = user {
            self.control_dir
                .chown(None, Some(u.gid))
                .and_then(|_| self.report.chown(Some(u.uid), Some(u.gid)))
                .map_err(StartError::node)?;
        }
        // Each is kept before it is given: a failed hand-over is taken
        // back with the rest. What is given is written down first, for a
        // worker killed before it takes them back (`reclaim`).
        let paths: Vec<&PathBuf> = std::iter::once(&spec.checkpoint)
            .chain(spec.coord.as_ref())
            .collect();
        if let Some(u) = user {
            // The uid first: once the report directory went back (a part
            // of a launch on several workers that ended), its owner no
            // longer says whose the listed directories are.
            let list: String = std::iter::once(format!("{UID_LINE}{}\n", u.uid))
                .chain(paths.iter().map(|p| {
                    format!(
                        "{}\n",
                        std::path::absolute(p)
                            .unwrap_or_else(|_| p.to_path_buf())
                            .display()
                    )
                }))
                .collect();
            self.control_dir
                .write(GIVEN_FILE, list.as_bytes())
                .map_err(|e| {
                    StartError::node(format!(
                        "cannot write {}: {e}",
                        spec.control.join(GIVEN_FILE).display()
                    ))
                })?;
        }
        for path in paths {
            self.given.push(job_dir(path, trust)?);
            if let Some(u) = user {
                give(self.given.last().expect("just pushed"), u)?;
            }
        }
        Ok(())
    }

    /// The command of rank `rank` on devices `devs`: the job's argv, the
    /// environment it passes on and the job's own, its output files
    /// (`stdout{suffix}`, `stderr{suffix}`) and its GPU share.
    fn rank_command(
        &self,
        spec: &LaunchSpec,
        rank: u32,
        devs: &[String],
        suffix: &str,
        world: u32,
        launched: &str,
    ) -> Result<Command, StartError> {
        let user = spec.job_user.as_ref();
        let report_path = self.report.path().to_path_buf();
        let out = |dir: &Dir, name: &str| -> Result<std::fs::File, StartError> {
            dir.create(name).map_err(|e| {
                StartError::node(format!(
                    "cannot create {}: {e}",
                    spec.control.join(name).display()
                ))
            })
        };
        let mut cmd = Command::new(&spec.argv[0]);
        cmd.env_clear();
        for (k, v) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| passed_env(k, &spec.pass_env)) {
                cmd.env(k, v);
            }
        }
        cmd.current_dir(&report_path);
        // The account is taken in the forked child (`spawn_child`),
        // after it joined the launch's cgroups, with no supplementary
        // group of the worker's.
        if let Some(u) = user {
            cmd.env("HOME", u.home.as_deref().unwrap_or(&report_path))
                .env("USER", &u.name)
                .env("LOGNAME", &u.name);
        }
        cmd.args(&spec.argv[1..])
            .env(env::JOB_ID, spec.job.to_string())
            .env(env::RANK, rank.to_string())
            .env(env::WORLD_SIZE, world.to_string())
            .env(env::VISIBLE_DEVICES, devs.join(","))
            .env(env::MASTER_ADDR, &spec.master_addr)
            .env(env::WORKER_ADDR, &spec.worker_addr)
            .env(env::CHECKPOINT_DIR, &spec.checkpoint)
            .env(env::CONTROL_DIR, &spec.control)
            .env(env::REPORT_DIR, &report_path)
            .env(env::COORD_DIR, spec.coord.as_ref().unwrap_or(&report_path))
            .env(env::RESUME, if spec.resume { "1" } else { "0" })
            .env(env::LAUNCH_UNIX_S, launched)
            .env(env::GENERATION, spec.generation.to_string())
            .env(
                env::BATCH_SIZE,
                spec.batch_size.map(|b| b.to_string()).unwrap_or_default(),
            )
            .stdin(Stdio::null())
            .stdout(out(&self.control_dir, &format!("stdout{suffix}"))?)
            .stderr(out(&self.control_dir, &format!("stderr{suffix}"))?);
        for (k, v) in spec.share.iter().flat_map(GpuShareEnv::vars) {
            cmd.env(k, v);
        }
        Ok(cmd)
    }

    /// The launch's exit once every process exited: the last exit time, and
    /// status 0 only if every process exited 0. A process that fails takes
    /// the others down.
    pub fn exit(&self) -> Option<Exit> {
        let exits: Vec<Option<Exit>> = self
            .ranks
            .iter()
            .map(|r| *r.exit.lock().expect("not poisoned"))
            .collect();
        if exits.iter().flatten().any(|e| e.code != Some(0)) {
            self.kill();
        }
        let all: Vec<Exit> = exits.into_iter().collect::<Option<_>>()?;
        let at = all.iter().map(|e| e.at).max()?;
        let code = all
            .iter()
            .map(|e| e.code)
            .find(|c| *c != Some(0))
            .unwrap_or(Some(0));
        Some(Exit { at, code })
    }

    /// Kills every process (they are reaped by their waiters).
    pub fn kill(&self) {
        for r in &self.ranks {
            r.kill.store(true, Ordering::Relaxed);
        }
    }

    /// Tells the job until when its lease holds (the control directory's
    /// `lease`, replaced whole; [`blox_client::LEASE_FILE`]).
    pub fn write_lease(&self, until: Instant, grace: Duration) {
        let Some(text) = lease_text(until, grace) else {
            return;
        };
        if let Err(e) = self
            .control_dir
            .write(blox_client::LEASE_FILE, text.as_bytes())
        {
            tracing::debug!(dir = %self.control.display(), "cannot write the lease file: {e}");
        }
    }

    /// Revokes the lease: the job checkpoints and exits at its next iteration
    /// boundary.
    pub fn revoke(&self) -> std::io::Result<()> {
        self.control_dir.write("revoked", b"")
    }

    /// Revokes the lease and waits for the exit; kills the job once `grace`
    /// has passed.
    pub fn revoke_and_wait(&self, grace: Duration, job: u64) -> Exit {
        if let Err(e) = self.revoke() {
            tracing::warn!(job, "cannot revoke the lease ({e}); killing the job");
            self.kill();
        }
        let deadline = Instant::now() + grace;
        let mut warned = false;
        loop {
            if let Some(e) = self.exit() {
                return e;
            }
            if Instant::now() >= deadline && !warned {
                tracing::warn!(
                    job,
                    "did not exit {:.1} s after revocation; killed",
                    grace.as_secs_f64()
                );
                warned = true;
                self.kill();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits up to `timeout` for every process to exit.
    pub fn wait(&self, timeout: Duration) -> Option<Exit> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.exit() {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Writes a new batch size for the job to apply at its next boundary.
    pub fn set_batch_size(&self, batch_size: u32) -> std::io::Result<()> {
        self.control_dir
            .write("batch_size", batch_size.to_string().as_bytes())
    }
}

impl Drop for Running {
    /// No job process outlives its handle.
    fn drop(&mut self) {
        // (A launch that could not start its first process has none to wait
        // for: it waited 2 s here, holding its worker meanwhile.)
        if !self.ranks.is_empty() && self.exit().is_none() {
            self.kill();
            let _ = self.wait(Duration::from_secs(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_launch_directory_is_cleared_before_a_launch_uses_it() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("launch-1");
        std::fs::create_dir_all(&control).unwrap();
        // What an unrecorded launch left: it finished.
        std::fs::create_dir_all(control.join(REPORT_DIR)).unwrap();
        std::fs::write(control.join(REPORT_DIR).join("done"), "").unwrap();
        let spec = LaunchSpec {
            job: 1,
            argv: vec!["/bin/sh".into(), "-c".into(), "exit 0".into()],
            devices: vec!["0".into()],
            control: control.clone(),
            checkpoint: dir.path().join("ck"),
            coord: None,
            resume: false,
            batch_size: None,
            master_addr: String::new(),
            worker_addr: String::new(),
            process_per_gpu: false,
            first_rank: 0,
            world_size: None,
            generation: 2,
            job_user: None,
            lease: None,
            pass_env: Vec::new(),
            cgroup_procs: Vec::new(),
            share: None,
        };
        let run = Running::spawn(&spec).unwrap();
        let t = Instant::now();
        let e = loop {
            if let Some(e) = run.exit() {
                break e;
            }
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(!control.join(REPORT_DIR).join("done").exists());
        assert!(!run.finished(&e), "the old launch's `done` spoke for it");
    }
}
