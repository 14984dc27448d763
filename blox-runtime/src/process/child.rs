//! Forking a launch's processes: the long-lived spawner thread, what the
//! forked child does before `exec` (cgroups, the job's account, the
//! guardian), and the waiter that reaps a process and kills its group.

use super::Exit;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

/// The error a forked child reports when it cannot join its launch's
/// cgroups (an errno nothing else before `exec` returns).
#[cfg(target_os = "linux")]
pub(super) const CGROUP_JOIN_FAILED: i32 = libc::EBADSLT;

/// Starts `cmd` from one long-lived thread. On Linux the child is killed when
/// the thread that forked it ends (`PR_SET_PDEATHSIG`), so children are
/// forked from a thread that lives as long as the process.
pub(super) fn spawn_child(
    mut cmd: Command,
    lease_until: Option<std::time::Instant>,
    cgroup_procs: Vec<std::ffi::CString>,
    drop_to: Option<(u32, u32)>,
) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Its own process group, killed as a whole (the module docs).
        cmd.process_group(0);
    }
    #[cfg(all(unix, not(target_os = "linux")))]
    if let Some((uid, gid)) = drop_to {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (&cgroup_procs, drop_to);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let worker = std::process::id() as libc::pid_t;
        // SAFETY: the closure and `guard` make only async-signal-safe calls
        // (open, write, close, setgroups, setresgid, setresuid, prctl, fork,
        // sigaction, waitpid, kill, _exit) on data prepared before the fork,
        // and allocate nothing; reading the monotonic clock
        // (clock_gettime) is safe too, and errors are built from errnos,
        // without allocating.
        unsafe {
            cmd.pre_exec(move || {
                if lease_until.is_some_and(|t| std::time::Instant::now() > t) {
                    return Err(std::io::Error::from_raw_os_error(libc::ETIME));
                }
                // Into the launch's cgroups while still root (moving a
                // process takes the worker's rights), then down to the job's
                // account before anything of the job's runs (the guardian
                // and what it forks inherit both).
                for procs in &cgroup_procs {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::from_raw_os_error(CGROUP_JOIN_FAILED));
                    }
                    let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                    libc::close(fd);
                    if !ok {
                        return Err(std::io::Error::from_raw_os_error(CGROUP_JOIN_FAILED));
                    }
                }
                if let Some((uid, gid)) = drop_to {
                    // No setuid program gives it anything back either (one
                    // a job left for whoever gets its uid next, say).
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setresgid(gid, gid, gid) != 0
                        || libc::setresuid(uid, uid, uid) != 0
                        || libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
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
pub(super) fn spawn_waiter(
    mut child: Child,
    exit: Arc<Mutex<Option<Exit>>>,
    kill: Arc<AtomicBool>,
) {
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
