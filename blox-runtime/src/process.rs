//! Job processes on one machine: what the local backend and every worker
//! manager share.
//!
//! A launch of a job runs its argv directly (never through a shell), as one
//! process holding all its GPUs on this machine or one process per GPU, with
//! the environment of [`blox_client::env`]. It gets a control directory (the
//! job's `stdout`/`stderr`, its `metrics` log and the `revoked`, `exit_at`,
//! `done` and `batch_size` files of the lease protocol) and a checkpoint
//! directory shared by all its launches. A waiter thread per process records
//! when it exits.
//!
//! On Linux every job process gets `SIGKILL` when the process that started
//! it dies, so a worker that is killed takes its jobs with it (nothing keeps
//! writing a checkpoint that the job's next launch, elsewhere, reads).
//!
//! Each process starts its own process group (on Unix), and the group is
//! what is killed: a cancel, a revocation past its grace or a failed rank
//! ends whatever the job forked too, and when a job's process exits, what it
//! left running in its group is killed before the process is reaped (the
//! zombie keeps the group's id from being reused meanwhile). On Linux the
//! group is led by a small *guardian* (the forked child, before it would
//! `exec`: `guard`) that forks the job and waits for it: when the worker
//! dies, even by `SIGKILL`, the guardian kills the whole group, so nothing
//! the job forked outlives its worker. What a job moves into a process
//! group of its own (`setsid`) is beyond this; a cgroup per launch would
//! hold that too.

use blox_client::env;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What to run for one launch (or one node's part of it).
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub job: u64,
    pub argv: Vec<String>,
    /// This machine's device indices (`CUDA_VISIBLE_DEVICES`).
    pub devices: Vec<String>,
    pub control: PathBuf,
    pub checkpoint: PathBuf,
    /// Shared directory where the ranks of a job spanning nodes agree on
    /// their exit iteration; `None`: the control directory.
    pub coord: Option<PathBuf>,
    pub resume: bool,
    pub batch_size: Option<u32>,
    pub master_addr: String,
    pub worker_addr: String,
    /// One process per device instead of one with every device.
    pub process_per_gpu: bool,
    /// Rank of the first process started here.
    pub first_rank: u32,
    /// Processes in the whole job; `None`: those started here.
    pub world_size: Option<u32>,
    /// The launch's generation (`BLOX_GENERATION`): larger for every later
    /// launch of the job, also across scheduler restarts.
    pub generation: u64,
    /// The account the job runs as (`blox worker --job-user`); `None`: the
    /// worker's own.
    pub job_user: Option<JobUser>,
    /// The worker's lease (until, grace), where it holds one: written to the
    /// control directory before any process starts, and checked again in
    /// each forked process before `exec`. A worker stopped (hung) while it
    /// started the launch thereby starts no job once it wakes past its
    /// lease, and one started just before holds a lease that runs out.
    pub lease: Option<(std::time::Instant, std::time::Duration)>,
}

/// Writes a launch's lease file: `until` and `grace` in seconds of the
/// node's monotonic clock, replaced atomically (a job never reads half).
pub fn write_lease(control: &Path, until: std::time::Instant, grace: std::time::Duration) {
    let Some(now) = blox_client::monotonic_s() else {
        return;
    };
    let left = until
        .saturating_duration_since(std::time::Instant::now())
        .as_secs_f64();
    let tmp = control.join(".lease.tmp");
    let text = format!("{:.3} {:.3}\n", now + left, grace.as_secs_f64());
    if std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, control.join(blox_client::LEASE_FILE)))
        .is_err()
    {
        tracing::debug!(dir = %control.display(), "cannot write the lease file");
    }
}

/// An unprivileged account jobs run as (`blox worker --job-user NAME`): it
/// cannot read the worker's token file (0600, the worker's), its
/// `/proc/<pid>/environ` or memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl JobUser {
    /// Looks the account up in the system's user database.
    pub fn lookup(name: &str) -> Result<JobUser, String> {
        #[cfg(unix)]
        {
            use std::ffi::{CStr, CString};
            let c = CString::new(name)
                .map_err(|_| format!("job user `{name}`: contains a NUL byte"))?;
            let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
            let mut buf = vec![0 as libc::c_char; 16 * 1024];
            let mut out: *mut libc::passwd = std::ptr::null_mut();
            // SAFETY: every pointer is valid for the call; `buf` outlives
            // the reads of `pw`'s strings below.
            let rc = unsafe {
                libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out)
            };
            if rc != 0 || out.is_null() {
                return Err(format!(
                    "job user `{name}`: no such account on this node{}",
                    if rc != 0 {
                        format!(" ({})", std::io::Error::from_raw_os_error(rc))
                    } else {
                        String::new()
                    }
                ));
            }
            if pw.pw_uid == 0 {
                return Err(format!(
                    "job user `{name}` is root: jobs must run unprivileged"
                ));
            }
            // SAFETY: getpwnam_r filled `pw_dir` with a NUL-terminated
            // string inside `buf`.
            let home = unsafe { CStr::from_ptr(pw.pw_dir) }
                .to_string_lossy()
                .into_owned();
            Ok(JobUser {
                name: name.to_string(),
                uid: pw.pw_uid,
                gid: pw.pw_gid,
                home: PathBuf::from(home),
            })
        }
        #[cfg(not(unix))]
        {
            Err(format!(
                "job user `{name}`: only Unix runs jobs as another account"
            ))
        }
    }
}

/// The worker's own environment variables a job never inherits: the
/// runtime's settings (`BLOX_*`: its token file, scheduler address) are the
/// worker's, and a job gets the `BLOX_*` variables of
/// [`blox_client::env`] set afresh.
fn scrubbed(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_none_or(|n| n.starts_with("BLOX_"))
}

/// How a launch (or one of its processes) ended.
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    pub at: Instant,
    /// Exit status; `None` when killed by a signal (or it could not be waited on).
    pub code: Option<i32>,
}

struct Rank {
    exit: Arc<Mutex<Option<Exit>>>,
    kill: Arc<AtomicBool>,
}

/// A running launch: its processes and its control directory.
pub struct Running {
    pub control: PathBuf,
    ranks: Vec<Rank>,
    metrics_offset: u64,
}

/// Why a launch could not start; the job's fault (a missing program), so it
/// is retried and then fails with this reason.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

impl Running {
    /// Creates the directories and starts the processes.
    pub fn spawn(spec: &LaunchSpec) -> Result<Running, StartError> {
        if spec.argv.is_empty() || spec.argv[0].is_empty() {
            return Err(StartError("no command to run".into()));
        }
        // A launch directory left by a launch the scheduler never recorded
        // (it restarted meanwhile) is not this launch's: its `done` or
        // `revoked` must not speak for it.
        if spec.control.exists() {
            std::fs::remove_dir_all(&spec.control).map_err(|e| {
                StartError(format!(
                    "cannot clear the stale {}: {e}",
                    spec.control.display()
                ))
            })?;
        }
        for d in [
            Some(&spec.control),
            Some(&spec.checkpoint),
            spec.coord.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            std::fs::create_dir_all(d)
                .map_err(|e| StartError(format!("cannot create {}: {e}", d.display())))?;
            restrict(d);
            if let Some(u) = &spec.job_user {
                give_to(d, u)?;
            }
        }
        if let Some((until, grace)) = spec.lease {
            write_lease(&spec.control, until, grace);
        }
        let out = |name: &str| -> Result<std::fs::File, StartError> {
            let p = spec.control.join(name);
            std::fs::File::create(&p)
                .map_err(|e| StartError(format!("cannot create {}: {e}", p.display())))
        };
        let groups: Vec<Vec<String>> = if spec.process_per_gpu {
            spec.devices.iter().map(|d| vec![d.clone()]).collect()
        } else {
            vec![spec.devices.clone()]
        };
        let world = spec.world_size.unwrap_or(groups.len() as u32);
        let mut running = Running {
            control: spec.control.clone(),
            ranks: Vec::with_capacity(groups.len()),
            metrics_offset: 0,
        };
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
            let mut cmd = Command::new(&spec.argv[0]);
            for (k, _) in std::env::vars_os() {
                if scrubbed(&k) {
                    cmd.env_remove(k);
                }
            }
            #[cfg(unix)]
            if let Some(u) = &spec.job_user {
                use std::os::unix::process::CommandExt;
                // Dropping root also drops its supplementary groups (std
                // calls setgroups(0) before setuid).
                cmd.uid(u.uid)
                    .gid(u.gid)
                    .env("HOME", &u.home)
                    .env("USER", &u.name)
                    .env("LOGNAME", &u.name)
                    .current_dir(&spec.control);
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
                .env(env::COORD_DIR, spec.coord.as_ref().unwrap_or(&spec.control))
                .env(env::RESUME, if spec.resume { "1" } else { "0" })
                .env(env::LAUNCH_UNIX_S, &launched)
                .env(env::GENERATION, spec.generation.to_string())
                .env(
                    env::BATCH_SIZE,
                    spec.batch_size.map(|b| b.to_string()).unwrap_or_default(),
                )
                .stdin(Stdio::null())
                .stdout(out(&format!("stdout{suffix}"))?)
                .stderr(out(&format!("stderr{suffix}"))?);
            match spawn_child(cmd, spec.lease.map(|l| l.0)) {
                Ok(child) => {
                    let exit = Arc::new(Mutex::new(None));
                    let kill = Arc::new(AtomicBool::new(false));
                    spawn_waiter(child, exit.clone(), kill.clone());
                    running.ranks.push(Rank { exit, kill });
                }
                Err(e) => {
                    running.kill();
                    return Err(StartError(format!(
                        "cannot start {}: {e}",
                        argv_summary(&spec.argv)
                    )));
                }
            }
        }
        Ok(running)
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

    /// True when the job marked itself done and exited cleanly.
    pub fn finished(&self, exit: &Exit) -> bool {
        exit.code == Some(0) && self.control.join("done").exists()
    }

    /// Revokes the lease: the job checkpoints and exits at its next iteration
    /// boundary.
    pub fn revoke(&self) -> std::io::Result<()> {
        std::fs::write(self.control.join("revoked"), b"")
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
        std::fs::write(self.control.join("batch_size"), batch_size.to_string())
    }

    /// Feeds the metric lines written since the last call to `sink`; a line
    /// still being written is read next time, a malformed one is logged.
    pub fn read_metrics(&mut self, job: u64, mut sink: impl FnMut(&str, f64)) {
        let path = self.control.join("metrics");
        let Ok(mut f) = std::fs::File::open(&path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.metrics_offset)).is_err() {
            return;
        }
        let mut r = BufReader::new(&mut f);
        let mut line = String::new();
        while let Ok(n) = r.read_line(&mut line) {
            if n == 0 || !line.ends_with('\n') {
                break;
            }
            self.metrics_offset += n as u64;
            let mut it = line.split_whitespace();
            match (it.next(), it.next().map(str::parse::<f64>), it.next()) {
                (Some(k), Some(Ok(v)), None) => sink(k, v),
                _ => tracing::warn!(job, line = %line.trim(), "bad metric line ignored"),
            }
            line.clear();
        }
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

/// Owner-only permissions: other users cannot revoke, finish or read a job.
/// Hands a launch's directory to the account its job runs as.
fn give_to(dir: &Path, u: &JobUser) -> Result<(), StartError> {
    #[cfg(unix)]
    std::os::unix::fs::chown(dir, Some(u.uid), Some(u.gid)).map_err(|e| {
        StartError(format!(
            "cannot give {} to job user `{}`: {e}",
            dir.display(),
            u.name
        ))
    })?;
    Ok(())
}

fn restrict(dir: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
}

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

/// At most this many bytes of an argv go into a message (errors travel back
/// over gRPC and into logs; an argv can be megabytes).
const ARGV_SUMMARY_BYTES: usize = 200;

/// `argv` for a message: quoted, cut to 200 bytes, with what was left out
/// counted.
pub fn argv_summary(argv: &[String]) -> String {
    let full = format!("{argv:?}");
    if full.len() <= ARGV_SUMMARY_BYTES {
        return full;
    }
    let mut cut = ARGV_SUMMARY_BYTES;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let bytes: usize = argv.iter().map(String::len).sum();
    format!(
        "{}… ({} arguments, {bytes} bytes in all)",
        &full[..cut],
        argv.len()
    )
}

/// Starts `cmd` from one long-lived thread. On Linux the child is killed when
/// the thread that forked it ends (`PR_SET_PDEATHSIG`), so children are
/// forked from a thread that lives as long as the process.
fn spawn_child(
    mut cmd: Command,
    lease_until: Option<std::time::Instant>,
) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Its own process group, killed as a whole (the module docs).
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let worker = std::process::id() as libc::pid_t;
        // SAFETY: `guard` makes only async-signal-safe calls (prctl, fork,
        // sigaction, waitpid, kill, close, _exit) and allocates nothing;
        // reading the monotonic clock (clock_gettime) is safe too, and the
        // error is built from an errno, without allocating.
        unsafe {
            cmd.pre_exec(move || {
                if lease_until.is_some_and(|t| std::time::Instant::now() > t) {
                    return Err(std::io::Error::from_raw_os_error(libc::ETIME));
                }
                guard(worker)
            });
        }
    }
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, SpawnReply)>();
        std::thread::Builder::new()
            .name("blox-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("cannot start the spawner thread");
        Mutex::new(tx)
    });
    let (reply, rx) = mpsc::channel();
    tx.lock()
        .expect("not poisoned")
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// Runs in the forked child, before `exec` (Linux): the child becomes the
/// launch's *guardian* and forks the job, which goes on to `exec`. The
/// guardian leads the launch's process group and waits for the job, exiting
/// as it exits; when the worker dies (even by `SIGKILL`), the kernel sends
/// the guardian `SIGTERM` (`PR_SET_PDEATHSIG`), and it kills its whole
/// group, whatever the job forked into it. The job itself gets `SIGKILL`
/// if its guardian dies.
#[cfg(target_os = "linux")]
fn guard(worker: libc::pid_t) -> std::io::Result<()> {
    extern "C" fn worker_died(_: libc::c_int) {
        // SAFETY: kill(2) is async-signal-safe; 0 is this process group.
        unsafe {
            libc::kill(0, libc::SIGKILL);
        }
    }
    // SAFETY: every call below is async-signal-safe and touches only the
    // plain data on this stack.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = worker_died as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut()) != 0
            || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        // The worker died before the death signal was armed.
        if libc::getppid() != worker {
            libc::kill(0, libc::SIGKILL);
            libc::_exit(1);
        }
        let job = libc::fork();
        if job < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if job == 0 {
            // The job: default SIGTERM again, and killed with its guardian.
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() == 1 {
                libc::_exit(1);
            }
            return Ok(());
        }
        // The guardian holds no file of the worker's (the pipe that reports
        // a failed exec must close with the job's exec).
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..4096 {
                libc::close(fd);
            }
        }
        let mut status: libc::c_int = 0;
        loop {
            let r = libc::waitpid(job, &mut status, 0);
            if r == job {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = libc::WTERMSIG(status);
        // Dies as the job died (the worker reads the signal).
        libc::signal(sig, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}

/// `SIGKILL` to the process group led by `pid` (Unix; elsewhere nothing).
fn kill_group(pid: u32) {
    #[cfg(unix)]
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 0 {
            // SAFETY: a plain syscall on a group this process created.
            unsafe {
                libc::killpg(pid, libc::SIGKILL);
            }
        }
    }
    #[cfg(not(unix))]
    let _ = pid;
}

/// True once `pid` (our child) has exited, without reaping it: its zombie
/// keeps its process-group id from being reused.
fn exited_unreaped(pid: u32) -> bool {
    #[cfg(unix)]
    {
        // SAFETY: waitid on our own child with WNOWAIT leaves it waitable;
        // `info` is plain data the call fills.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            r == 0 && info.si_pid() != 0
        }
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        false
    }
}

/// Polls the child every 2 ms; records its exit time; kills its process
/// group when asked, and what it left in its group when it exits.
fn spawn_waiter(mut child: Child, exit: Arc<Mutex<Option<Exit>>>, kill: Arc<AtomicBool>) {
    let pid = child.id();
    std::thread::spawn(move || loop {
        if kill.load(Ordering::Relaxed) {
            kill_group(pid);
            let _ = child.kill();
        }
        if exited_unreaped(pid) {
            kill_group(pid);
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                *exit.lock().expect("not poisoned") = Some(Exit {
                    at: Instant::now(),
                    code: status.code(),
                });
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => {
                *exit.lock().expect("not poisoned") = Some(Exit {
                    at: Instant::now(),
                    code: None,
                });
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_inherits_none_of_the_workers_blox_settings() {
        for name in ["BLOX_TOKEN_FILE", "BLOX_SCHEDULER", "BLOX_ANYTHING"] {
            assert!(scrubbed(std::ffi::OsStr::new(name)), "{name}");
        }
        for name in ["PATH", "HOME", "LD_LIBRARY_PATH", "CUDA_HOME", "XBLOX_Y"] {
            assert!(!scrubbed(std::ffi::OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn a_stale_launch_directory_is_cleared_before_a_launch_uses_it() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("launch-1");
        std::fs::create_dir_all(&control).unwrap();
        // What an unrecorded launch left: it finished.
        std::fs::write(control.join("done"), "").unwrap();
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
        assert!(!control.join("done").exists());
        assert!(!run.finished(&e), "the old launch's `done` spoke for it");
    }
}
