//! Whose the job's directories are: the account a job runs as
//! ([`JobUser`]), handing its directories to it and taking them back
//! ([`Running::hand_back`], [`Running::keep_shared`], [`SharedDirs`]), and
//! taking back what a killed worker never did ([`reclaim`], [`GIVEN_FILE`]).

use super::{Running, StartError, REPORT_DIR};
use crate::safe_fs::{Dir, Trust};
use std::path::{Path, PathBuf};

/// An unprivileged account jobs run as (`blox worker --job-user NAME`): it
/// cannot read the worker's token file (0600, the worker's), its
/// `/proc/<pid>/environ` or memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Set only where it is the account's own home (`--job-user`); a uid
    /// of its own (`--job-uids`) gets the launch's report directory.
    pub home: Option<PathBuf>,
    /// The uids whose files in the job's checkpoint directory become this
    /// launch's (`--job-uids`: the range; earlier launches of the job ran
    /// as other uids of it); `None`: only the directory itself changes
    /// owner.
    pub takes_over: Option<(u32, u32)>,
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
                home: Some(PathBuf::from(home)),
                takes_over: None,
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

/// Gives the job's directory `d` to its account (0700): with `takes_over`,
/// what earlier launches of the job left in it as other job uids too,
/// unless the directory's group says the last launch ran as this uid
/// already (see [`Running::hand_back`]).
pub(super) fn give(d: &Dir, u: &JobUser) -> Result<(), StartError> {
    let st = d.stat().map_err(StartError::node)?;
    match u.takes_over {
        Some((first, last)) if st.st_gid != u.gid => {
            let n = d
                .chown_tree(u.uid, u.gid, &|x| (first..=last).contains(&x))
                .map_err(|e| {
                    StartError::job(format!("cannot give the job its checkpoints: {e}"))
                })?;
            tracing::debug!(dir = %d.path().display(), uid = u.uid, entries = n, "handed over");
        }
        _ => d
            .chown(Some(u.uid), Some(u.gid))
            .map_err(StartError::node)?,
    }
    d.chmod(0o700).map_err(StartError::node)
}

impl Running {
    /// Takes the directories given to the job back for the worker (their
    /// top level only: nothing below can be reached through them then).
    /// Each keeps the job's group, which tells the next launch of the job
    /// whether it ran as the same uid (when it is given them again); mode 0700 gives that
    /// group nothing.
    pub fn hand_back(&self) {
        let me = rustix::process::geteuid().as_raw();
        let my_group = rustix::process::getegid().as_raw();
        for d in self.given.iter().chain([&self.report]) {
            if let Err(e) = d.chown(Some(me), None).and_then(|_| d.chmod(0o700)) {
                tracing::warn!("cannot take {} back from its job: {e}", d.path().display());
            }
        }
        if let Err(e) = self.control_dir.chown(None, Some(my_group)) {
            tracing::warn!(
                "cannot take {} back from its job: {e}",
                self.control.display()
            );
        }
        if !self.kept_shared {
            let _ = self.control_dir.remove(GIVEN_FILE);
        }
    }

    /// Moves the checkpoint and coordination directories out of this
    /// launch, for a part of a launch that spans several workers: they are
    /// shared with the other parts, which may still run when this one ends,
    /// so they stay the job's (`uid`'s) until the scheduler says every part
    /// ended ([`SharedDirs::take_back`]); [`Running::hand_back`] takes back
    /// the rest. `None` when they cannot be kept (the control directory's
    /// handle cannot be duplicated): they go back with the rest.
    pub fn keep_shared(&mut self, uid: u32) -> Option<SharedDirs> {
        let control = match self.control_dir.try_clone() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("{e}: the launch's shared directories are taken back at once");
                return None;
            }
        };
        self.kept_shared = true;
        Some(SharedDirs {
            dirs: std::mem::take(&mut self.given),
            control,
            uid,
        })
    }
}

/// The shared directories (checkpoints, coordination) of an ended part of a
/// launch on several workers, still the job's while other parts may run
/// ([`Running::keep_shared`]).
pub struct SharedDirs {
    dirs: Vec<Dir>,
    control: Dir,
    uid: u32,
}

impl SharedDirs {
    /// The job uid they were given to.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Takes them back for the worker, as [`Running::hand_back`] does; one
    /// that is no longer the uid's (a later launch of the job was given it
    /// meanwhile, on another worker) is left as it is.
    pub fn take_back(self) {
        let me = rustix::process::geteuid().as_raw();
        for d in &self.dirs {
            match d.stat() {
                Ok(st) if st.st_uid == self.uid => {
                    if let Err(e) = d.chown(Some(me), None).and_then(|_| d.chmod(0o700)) {
                        tracing::warn!("cannot take {} back from its job: {e}", d.path().display());
                    }
                }
                Ok(_) => tracing::debug!(
                    dir = %d.path().display(),
                    "no longer the ended launch's uid's: left to its holder"
                ),
                Err(e) => tracing::warn!("{e}"),
            }
        }
        let _ = self.control.remove(GIVEN_FILE);
    }
}

/// The file in a launch's control directory listing the directories the
/// launch was given, one path a line, until they are taken back: a worker
/// killed before it took them back does so when it starts again
/// ([`reclaim`]).
pub const GIVEN_FILE: &str = "given";

/// The first line of [`GIVEN_FILE`]: `uid=` and the uid they were given to.
pub(super) const UID_LINE: &str = "uid=";

/// Takes back what launches of an earlier run of the worker were given and
/// never returned (the worker was killed): under `workdir/jobs`, every
/// launch directory that still lists what it was given ([`GIVEN_FILE`])
/// has its report directory and those directories taken back where they
/// are still its uid's (the owner of its report directory). Run before the
/// worker registers: the scheduler gives none of those uids to a new launch
/// until this node reports them free. Returns how many were taken back.
pub fn reclaim(workdir: &Path) -> usize {
    let me = rustix::process::geteuid().as_raw();
    let mut taken = 0;
    let jobs = workdir.join("jobs");
    // jobs/<cluster>/<job>/launch-<n>, or jobs/<job>/launch-<n> (a table
    // older than identities).
    let mut launches = Vec::new();
    for a in std::fs::read_dir(&jobs).into_iter().flatten().flatten() {
        for b in std::fs::read_dir(a.path()).into_iter().flatten().flatten() {
            let p = b.path();
            if b.file_name().to_string_lossy().starts_with("launch-") {
                launches.push(p);
                continue;
            }
            for c in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                if c.file_name().to_string_lossy().starts_with("launch-") {
                    launches.push(c.path());
                }
            }
        }
    }
    for launch in launches {
        let Ok(control) = Dir::open(&launch, false, Trust::Same) else {
            continue;
        };
        let Ok(Some(list)) = control.read_job_file(GIVEN_FILE, Some(me), 0, 1 << 16) else {
            continue;
        };
        let Ok(report) = control.subdir(REPORT_DIR, 0o700, false) else {
            continue;
        };
        // The uid the list names (a file written before it named one: the
        // report directory's owner).
        let text = String::from_utf8_lossy(&list);
        let named = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix(UID_LINE))
            .and_then(|u| u.parse::<u32>().ok());
        let Some(uid) = named.or_else(|| report.stat().ok().map(|s| s.st_uid)) else {
            continue;
        };
        let mut dirs = vec![report];
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with(UID_LINE))
        {
            let path = Path::new(line);
            let (Some(parent), Some(name)) =
                (path.parent(), path.file_name().and_then(|n| n.to_str()))
            else {
                continue;
            };
            if let Ok(d) =
                Dir::open(parent, false, Trust::Same).and_then(|p| p.subdir(name, 0o700, false))
            {
                dirs.push(d);
            }
        }
        for d in dirs {
            if d.stat().is_ok_and(|s| s.st_uid == uid && uid != me)
                && d.chown(Some(me), None).and_then(|_| d.chmod(0o700)).is_ok()
            {
                taken += 1;
            }
        }
        let _ = control.chown(None, Some(rustix::process::getegid().as_raw()));
        let _ = control.remove(GIVEN_FILE);
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::LaunchSpec;
    use std::time::{Duration, Instant};

    /// A part of a launch on several workers ended and kept the shared
    /// directories its job's, then its worker was killed before taking
    /// them back: the restarted worker's `reclaim` takes them back, though
    /// the report directory (whose owner named the uid) went back already.
    #[test]
    fn a_killed_worker_takes_back_what_an_ended_part_kept() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if rustix::process::geteuid().as_raw() != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let uid = 1_900_000_700;
        let spec = LaunchSpec {
            job: 1,
            argv: vec!["/bin/sh".into(), "-c".into(), "exit 0".into()],
            devices: vec!["0".into()],
            control: dir.path().join("jobs/1/launch-1"),
            checkpoint: dir.path().join("ck"),
            coord: Some(dir.path().join("coord")),
            resume: false,
            batch_size: None,
            master_addr: String::new(),
            worker_addr: String::new(),
            process_per_gpu: false,
            first_rank: 0,
            world_size: Some(2),
            generation: 1,
            job_user: Some(JobUser {
                name: format!("blox-job-{uid}"),
                uid,
                gid: uid,
                home: None,
                takes_over: Some((uid, uid + 10)),
            }),
            lease: None,
            pass_env: Vec::new(),
            cgroup_procs: Vec::new(),
            share: None,
        };
        let mut run = Running::spawn(&spec).unwrap();
        let t = Instant::now();
        while run.exit().is_none() {
            assert!(t.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(10));
        }
        let owner = |p: &str| {
            let m = std::fs::metadata(dir.path().join(p)).unwrap();
            (m.uid(), m.mode() & 0o777)
        };
        // The part ends: the shared directories stay the job's.
        let kept = run.keep_shared(uid).unwrap();
        run.hand_back();
        assert_eq!(owner("ck"), (uid, 0o700));
        assert_eq!(owner("coord"), (uid, 0o700));
        // The worker dies before the scheduler says every part ended.
        drop(kept);
        drop(run);
        assert_eq!(reclaim(dir.path()), 2);
        assert_eq!(owner("ck"), (0, 0o700));
        assert_eq!(owner("coord"), (0, 0o700));
        assert!(!dir.path().join("jobs/1/launch-1").join(GIVEN_FILE).exists());
    }
}
