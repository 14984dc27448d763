//! A uid of its own for every launch (`blox worker --job-uids FIRST-LAST`):
//! jobs run as different accounts, so one cannot read or write another's
//! directories (its report directory, its checkpoints), as jobs sharing
//! one `--job-user` can.
//!
//! The scheduler picks the uid (`LaunchRequest.job_uid`, from its
//! `[runtime] job_uids`), the same on every node a launch spans so its
//! ranks share its checkpoint and coordination directories, and gives a
//! uid to a new launch only once every node the last holder ran on
//! reported it free (`HeartbeatRequest.busy_uids`): no two launches that
//! may still have a process anywhere share a uid, on shared storage
//! either. A worker refuses (without blame; the scheduler retries) a
//! launch whose uid another launch here holds, a uid some process still
//! runs as, and a uid that is some account's. While the job runs, its
//! directories are its uid's (its checkpoints handed over when an earlier
//! launch ran as another uid); when its launch ends they go back to the
//! worker, so a later launch given the same uid cannot open them. A launch
//! on several workers shares its checkpoint and coordination directories:
//! a part that ends leaves those to the uid (reported busy meanwhile,
//! `HeartbeatRequest.kept`) until the scheduler says every part ended
//! (`HeartbeatReply.take_back`), and the job's next launch waits for that.
//! Without
//! cgroups, every process still running as its uid is then killed
//! ([`kill_all`]); with them, the launch's cgroup is.

use crate::process::JobUser;
use std::path::Path;
use tonic::Status;

/// The account of job `job`'s launch as `uid` (the scheduler's choice);
/// refused where the uid is not this worker's to use or is held (module
/// docs). `held`: the uid of each other job running here. Every refusal is
/// `UNAVAILABLE` or `RESOURCE_EXHAUSTED`: the node's or the scheduler's,
/// never held against the job.
pub(super) fn account_for(
    range: (u32, u32),
    uid: u32,
    job: u64,
    held: impl Iterator<Item = (u64, u32)>,
) -> Result<JobUser, Status> {
    if uid == 0 {
        return Err(Status::unavailable(
            "this worker runs each launch as a uid of its own (--job-uids), and the launch names none: set [runtime] job_uids in the scheduler's config",
        ));
    }
    if !(range.0..=range.1).contains(&uid) {
        return Err(Status::unavailable(format!(
            "job uid {uid} is outside this worker's --job-uids {}-{}: give every worker the scheduler's [runtime] job_uids",
            range.0, range.1
        )));
    }
    if let Some((other, _)) = held.into_iter().find(|(j, u)| *j != job && *u == uid) {
        return Err(Status::resource_exhausted(format!(
            "job uid {uid} is job {other}'s, which runs here"
        )));
    }
    if let Some(name) = account_name(uid) {
        return Err(Status::resource_exhausted(format!(
            "job uid {uid} belongs to the account `{name}`: give --job-uids a range no account uses"
        )));
    }
    if let Some(pid) = process_of(uid) {
        return Err(Status::resource_exhausted(format!(
            "process {pid} still runs as job uid {uid} (left by an earlier launch): the launch waits until it is gone"
        )));
    }
    Ok(JobUser {
        name: format!("blox-job-{uid}"),
        uid,
        gid: uid,
        home: None,
        takes_over: Some(range),
    })
}

/// SIGKILLs every process that runs as `uid`: what a launch left behind,
/// whatever process group or session it moved to (`setsid`). A child
/// becomes `uid` and signals every process it may (`kill(-1)`), which the
/// kernel does in one pass, so a process that forks meanwhile cannot slip
/// out. Never for root (ranges exclude it).
pub(super) fn kill_all(uid: u32) {
    #[cfg(target_os = "linux")]
    if uid != 0 {
        // SAFETY: the child makes raw syscalls only (setgid, setuid, kill,
        // _exit), which are async-signal-safe and allocate nothing; the
        // parent waits for it.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                // Raw syscalls: this thread (the child's only one) changes.
                if libc::syscall(libc::SYS_setgid, uid) != 0
                    || libc::syscall(libc::SYS_setuid, uid) != 0
                {
                    libc::_exit(1);
                }
                libc::kill(-1, libc::SIGKILL);
                libc::_exit(0);
            }
            if pid > 0 {
                let mut status = 0;
                while libc::waitpid(pid, &mut status, 0) < 0
                    && *libc::__errno_location() == libc::EINTR
                {}
            } else {
                tracing::warn!(
                    "cannot sweep the processes of job uid {uid}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = uid;
}

/// Uids whose leftovers are being removed ([`cleanup`]).
static CLEANING: std::sync::Mutex<std::collections::BTreeSet<u32>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The uids [`cleanup`] is still working on (busy meanwhile).
pub(super) fn cleaning() -> Vec<u32> {
    CLEANING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .copied()
        .collect()
}

/// Removes, in the background, what a job uid whose launches have all
/// ended here left in the node's shared places, so the next launch given
/// the uid finds none of it: its entries in `/dev/shm`, `/tmp` and
/// `/var/tmp` (shared memory, files, a setuid copy of a shell), and its
/// System V shared memory, queues and semaphores. Nothing of the uid runs
/// by then (its cgroup is gone, or no process runs as it), so nothing it
/// owns changes meanwhile. Never root's or an account's uid (ranges
/// exclude them).
pub(super) fn cleanup(uid: u32) {
    if uid == 0 {
        return;
    }
    CLEANING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(uid);
    let spawned = std::thread::Builder::new()
        .name("blox-uid-cleanup".into())
        .spawn(move || {
            let removed = remove_leftovers(uid);
            if removed > 0 {
                tracing::info!(uid, removed, "removed what the job uid left on the node");
            }
            CLEANING
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
        });
    if spawned.is_err() {
        CLEANING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uid);
    }
}

/// [`cleanup`]'s work; returns how many things it removed.
fn remove_leftovers(uid: u32) -> usize {
    use crate::safe_fs::{Dir, Trust};
    use std::os::unix::fs::MetadataExt;
    let mut removed = 0;
    for place in ["/dev/shm", "/tmp", "/var/tmp"] {
        let Ok(dir) = Dir::open(Path::new(place), false, Trust::Same) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(place) else {
            continue;
        };
        for e in entries.flatten() {
            let owned = std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.uid() == uid);
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if owned && dir.remove(&name).is_ok() {
                removed += 1;
            }
        }
    }
    #[cfg(target_os = "linux")]
    for (file, kind) in [
        ("/proc/sysvipc/shm", 0),
        ("/proc/sysvipc/msg", 1),
        ("/proc/sysvipc/sem", 2),
    ] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let mut lines = text.lines();
        let Some(head) = lines.next() else { continue };
        let cols: Vec<&str> = head.split_whitespace().collect();
        let (Some(id_col), Some(uid_col)) = (
            cols.iter()
                .position(|c| matches!(*c, "shmid" | "msqid" | "semid")),
            cols.iter().position(|c| *c == "uid"),
        ) else {
            continue;
        };
        for l in lines {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (Some(id), Some(owner)) = (
                f.get(id_col).and_then(|v| v.parse::<i32>().ok()),
                f.get(uid_col).and_then(|v| v.parse::<u32>().ok()),
            ) else {
                continue;
            };
            if owner != uid {
                continue;
            }
            // SAFETY: plain syscalls removing an object by id.
            let r = unsafe {
                match kind {
                    0 => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    1 => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    _ => libc::semctl(id, 0, libc::IPC_RMID),
                }
            };
            removed += (r == 0) as usize;
        }
    }
    removed
}

/// Checks a `--job-uids` range when the worker starts: not root's, not
/// backwards, and no account's uid inside it (naming the first found).
pub(super) fn check_range(range: (u32, u32)) -> Result<(), String> {
    let (a, b) = range;
    if a == 0 || a > b {
        return Err(format!(
            "--job-uids {a}-{b}: give FIRST-LAST with 0 < FIRST <= LAST (uid 0 is root)"
        ));
    }
    #[cfg(unix)]
    {
        static WALK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = WALK.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the account database is walked by one thread at a time
        // (`WALK`), from
        // its start to its end; each entry is read before the next call.
        let mut found = None;
        unsafe {
            libc::setpwent();
            loop {
                let pw = libc::getpwent();
                if pw.is_null() {
                    break;
                }
                let uid = (*pw).pw_uid;
                if (a..=b).contains(&uid) {
                    let name = std::ffi::CStr::from_ptr((*pw).pw_name);
                    found = Some((uid, name.to_string_lossy().into_owned()));
                    break;
                }
            }
            libc::endpwent();
        }
        if let Some((uid, name)) = found {
            return Err(format!(
                "--job-uids {a}-{b}: uid {uid} is the account `{name}`'s; jobs must not run as a real account: choose a range no account uses"
            ));
        }
    }
    Ok(())
}

/// The account name of `uid`, if it has one.
fn account_name(uid: u32) -> Option<String> {
    #[cfg(unix)]
    {
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; `buf` outlives the
        // read of `pw_name` below.
        let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
        if rc == 0 && !out.is_null() {
            // SAFETY: getpwuid_r filled `pw_name` with a NUL-terminated
            // string inside `buf`.
            let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
            return Some(name.to_string_lossy().into_owned());
        }
    }
    let _ = uid;
    None
}

/// A process whose real or effective uid is `uid`, if any runs.
pub(super) fn process_of(uid: u32) -> Option<u32> {
    processes_of(uid).next()
}

/// The processes that run as `uid` (real or effective).
fn processes_of(uid: u32) -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(move |e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let runs_as = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .is_some_and(|l| {
                    l.split_whitespace()
                        .take(2)
                        .any(|v| v.parse::<u32>().ok() == Some(uid))
                });
            runs_as.then_some(pid)
        })
}

/// Whether a process that runs as `uid` is another worker's on this
/// machine: its nearest ancestor running this program (`/proc/PID/exe`) is
/// not this process. Several workers on one machine (the soak's sixteen)
/// give the ranks of a job on each the same uid; a sweep then waits for the
/// last of them, whose own sweep kills what is left. A process cannot move
/// itself under another worker, and one orphaned (its worker gone) has no
/// such ancestor, so neither escapes the sweep this way.
pub(super) fn held_by_another_worker(uid: u32) -> bool {
    let Ok(me) = std::fs::read_link("/proc/self/exe") else {
        return false;
    };
    let own = std::process::id();
    processes_of(uid).any(|pid| nearest_running(pid, &me).is_some_and(|a| a != own))
}

/// The nearest ancestor of `pid` that runs the program `exe`.
fn nearest_running(pid: u32, exe: &Path) -> Option<u32> {
    let mut p = parent_of(pid);
    // Ancestry is finite; the bound guards against a racing reuse of pids.
    for _ in 0..64 {
        match p {
            None | Some(0) => return None,
            Some(a) => {
                if std::fs::read_link(format!("/proc/{a}/exe")).is_ok_and(|e| e == exe) {
                    return Some(a);
                }
                if a == 1 {
                    return None;
                }
                p = parent_of(a);
            }
        }
    }
    None
}

/// A process's parent, from `/proc/PID/stat` (the field after the command
/// name, which may hold spaces and parentheses itself).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run by the test below as a process of its own: starts a `sleep`,
    /// prints its pid, and waits for it.
    #[test]
    #[ignore = "a helper the next test runs as a child process"]
    fn helper_a_worker_with_a_job() {
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        println!("job pid {}", c.id());
        use std::io::Write;
        std::io::stdout().flush().unwrap();
        let _ = c.wait();
    }

    /// A sweep tells a process under this worker from one under another
    /// worker (a second process of this program) on the same machine.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_job_process_is_told_to_be_under_this_worker_or_another() {
        use std::io::BufRead;
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        // A job of ours: its nearest process of this program is us.
        let mut own = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(nearest_running(own.id(), &me), Some(std::process::id()));
        assert_eq!(parent_of(own.id()), Some(std::process::id()));
        // Another "worker" (this program again) with a job of its own.
        let mut other = std::process::Command::new(&me)
            .args([
                "--ignored",
                "--exact",
                "worker::uids::tests::helper_a_worker_with_a_job",
                "--nocapture",
                "--test-threads=1",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(other.stdout.take().unwrap());
        let job: u32 = out
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.split("job pid ").nth(1)?.trim().parse().ok())
            .expect("the helper prints its job's pid");
        assert_eq!(nearest_running(job, &me), Some(other.id()));
        for c in [&mut own, &mut other] {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::process::Command::new("kill")
            .arg(job.to_string())
            .status();
        // A process of no such program (pid 1's children) has none.
        assert_eq!(nearest_running(1, &me), None);
    }

    #[test]
    fn a_uid_another_running_job_holds_is_refused() {
        let held = || [(3u64, 70003u32)].into_iter();
        let e = account_for((70000, 70009), 70003, 13, held()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("job 3"), "{}", e.message());
        // Its own earlier launch is no obstacle.
        let u = account_for((70000, 70009), 70003, 3, held());
        assert!(u.is_ok() || process_of(70003).is_some(), "{u:?}");
        // None named, or one outside the range: the scheduler's config,
        // never the job's fault.
        for uid in [0, 69999, 70010] {
            let e = account_for((70000, 70009), uid, 13, std::iter::empty()).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable, "{uid}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_range_with_root_or_an_account_in_it_is_refused_at_start() {
        assert!(check_range((0, 10)).unwrap_err().contains("root"));
        assert!(check_range((20, 10)).unwrap_err().contains("FIRST <= LAST"));
        // `nobody` is an account on the machines this runs on (65534).
        if account_name(65534).is_some() {
            let e = check_range((65000, 65535)).unwrap_err();
            assert!(e.contains("65534"), "{e}");
        }
        assert!(check_range((1_900_000_000, 1_900_000_100)).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn a_uid_an_account_has_is_refused() {
        // Root's uid, 0, is every system's.
        let e = account_for((0, 0), 0, 5, std::iter::empty()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        let e = account_for((0, 1), 1, 5, std::iter::empty()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("account"), "{}", e.message());
    }
}
