//! File operations a worker makes on a job's behalf, none of which a job
//! can turn against the node.
//!
//! A worker often runs as root, and its jobs as other uids write into some
//! of the directories it works in (their checkpoints, their report
//! directory, the coordination directory of a job on several nodes). A path
//! resolved by name inside such a directory is the job's to redirect: a
//! link planted where the worker will write makes root overwrite any file,
//! one planted where it will `chown` hands the job any directory. So:
//!
//! - every directory is reached from `/` one component at a time
//!   ([`Dir::open`]): with [`Trust::Strict`] (jobs run as other uids), no
//!   directory on the way may be a job's or writable by a job (by its
//!   group, or by all unless sticky, like `/tmp`, and there no entry on
//!   the way may be a job's): a link is followed only where no job could
//!   have put it;
//! - below that, every directory is created and opened relative to its
//!   parent's handle, refusing links (`mkdirat`, `openat` with
//!   `O_NOFOLLOW`), and is changed (`fchown`, `fchmod`) through its own
//!   handle, never by name;
//! - the worker writes only into directories no job can write
//!   ([`Dir::write`]: a new file, renamed into place), and reads a job's
//!   file ([`Dir::read_job_file`]) only as a plain file of the job's own
//!   (`O_NOFOLLOW`, not a hard link to someone else's), and only so many
//!   bytes;
//! - a tree handed from one job uid to the next ([`Dir::chown_tree`]) is
//!   walked through handles, and only entries of a job uid with one link
//!   change owner: a hard link to a file of root's stays root's whatever
//!   the host's `protected_hardlinks` says.

use rustix::fs::{
    fchmod, fchown, fstat, mkdirat, openat, readlinkat, renameat, statat, AtFlags, FileType, Gid,
    Mode, OFlags, Stat, Uid,
};
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// How much the directories a worker walks through are trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Jobs run as the worker's own uid: no boundary to guard on the way
    /// (links are still refused below the directories opened).
    Same,
    /// Jobs run as the uids `uids` with the groups `gids` (inclusive
    /// ranges): every directory on the way is checked against them.
    Strict { uids: (u32, u32), gids: (u32, u32) },
}

impl Trust {
    fn job_uid(&self, u: u32) -> bool {
        matches!(self, Trust::Strict { uids, .. } if (uids.0..=uids.1).contains(&u))
    }
    fn job_gid(&self, g: u32) -> bool {
        matches!(self, Trust::Strict { gids, .. } if (gids.0..=gids.1).contains(&g))
    }
}

/// The most links followed on the way to one directory (as the kernel's
/// `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// How deep [`Dir::chown_tree`] goes, and how many entries it visits.
const MAX_DEPTH: usize = 256;
const MAX_ENTRIES: u64 = 1_000_000;

/// An open directory, with the path it was reached by (for messages).
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn err(path: &Path, what: &str, e: impl std::fmt::Display) -> String {
    format!("{what} {}: {e}", path.display())
}

fn mode_bits(st: &Stat) -> u32 {
    #[allow(clippy::unnecessary_cast)] // u16 on some targets
    let m = st.st_mode as u32;
    m & 0o7777
}

fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode as _)
}

/// Why `st` (a directory reached on the way) is not to be trusted with
/// jobs of `trust`, if it is not: a job's, or one a job may write into (by
/// its group, or by all) unless sticky.
fn untrusted_dir(st: &Stat, trust: Trust) -> Option<String> {
    if trust.job_uid(st.st_uid) {
        return Some(format!("it belongs to job uid {}", st.st_uid));
    }
    let m = mode_bits(st);
    let sticky = m & 0o1000 != 0;
    if m & 0o002 != 0 && !sticky {
        return Some(format!(
            "anyone may write into it (mode {m:o}) and it is not sticky"
        ));
    }
    if m & 0o020 != 0 && trust.job_gid(st.st_gid) && !sticky {
        return Some(format!(
            "its group {} is a job's and may write into it (mode {m:o})",
            st.st_gid
        ));
    }
    None
}

/// True when a job may create entries in a directory with this status (it
/// is then sticky, or [`untrusted_dir`] refused it): an entry on the way in
/// it must not be a job's.
fn shared_dir(st: &Stat, trust: Trust) -> bool {
    let m = mode_bits(st);
    m & 0o002 != 0 || (m & 0o020 != 0 && trust.job_gid(st.st_gid))
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Dir {
    /// The directory at `path`, reached from `/` one component at a time
    /// (a relative path from the working directory), created (mode 0755)
    /// where missing when `create`. With [`Trust::Strict`], no directory on
    /// the way and no link followed may be a job's, and no directory
    /// writable by a job unless sticky (module docs).
    pub fn open(path: &Path, create: bool, trust: Trust) -> Result<Dir, String> {
        let abs = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| err(path, "cannot resolve", e))?
                .join(path)
        };
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, &abs);
        let mut cur = openat(rustix::fs::CWD, "/", DIR_FLAGS, Mode::empty())
            .map_err(|e| err(path, "cannot open", e))?;
        let mut st = fstat(&cur).map_err(|e| err(path, "cannot read", e))?;
        let mut links = 0;
        let refuse = |why: String| {
            format!(
                "{}: refused: {why} (a worker that runs jobs as other uids works only in directories no job can change)",
                path.display()
            )
        };
        if let Some(why) = untrusted_dir(&st, trust) {
            return Err(refuse(format!("/: {why}")));
        }
        while let Some(name) = todo.pop() {
            if name == "." || name.is_empty() {
                continue;
            }
            let entry = match statat(&cur, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(s) => Some(s),
                Err(rustix::io::Errno::NOENT) if create && name != ".." => None,
                Err(e) => return Err(err(path, "cannot open", e)),
            };
            if shared_dir(&st, trust) {
                if let Some(e) = entry.as_ref().filter(|e| trust.job_uid(e.st_uid)) {
                    return Err(refuse(format!(
                        "`{}` belongs to job uid {} in a directory jobs may write",
                        name.to_string_lossy(),
                        e.st_uid
                    )));
                }
            }
            if entry.as_ref().is_some_and(|e| kind(e) == FileType::Symlink) {
                links += 1;
                if links > MAX_LINKS {
                    return Err(err(path, "cannot open", "too many links on the way"));
                }
                let target = readlinkat(&cur, name.as_os_str(), Vec::new())
                    .map_err(|e| err(path, "cannot read a link on the way to", e))?;
                let target = PathBuf::from(OsStr::from_bytes(target.to_bytes()));
                if target.is_absolute() {
                    cur = openat(rustix::fs::CWD, "/", DIR_FLAGS, Mode::empty())
                        .map_err(|e| err(path, "cannot open", e))?;
                    st = fstat(&cur).map_err(|e| err(path, "cannot read", e))?;
                }
                push_components(&mut todo, &target);
                continue;
            }
            if entry.is_none() {
                match mkdirat(&cur, name.as_os_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(err(path, "cannot create", e)),
                }
            }
            let next = openat(&cur, name.as_os_str(), DIR_FLAGS, Mode::empty())
                .map_err(|e| err(path, "cannot open", e))?;
            st = fstat(&next).map_err(|e| err(path, "cannot read", e))?;
            if let Some(why) = untrusted_dir(&st, trust) {
                return Err(refuse(format!("`{}`: {why}", name.to_string_lossy())));
            }
            cur = next;
        }
        Ok(Dir { fd: cur, path: abs })
    }

    /// Where it was reached (for messages and a job's environment).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its owner and mode.
    pub fn stat(&self) -> Result<Stat, String> {
        fstat(&self.fd).map_err(|e| err(&self.path, "cannot read", e))
    }

    /// The directory `name` inside, never through a link: created with
    /// `mode` when missing (and then, with `fresh`, it must not exist:
    /// a directory of an earlier launch is an error).
    pub fn subdir(&self, name: &str, mode: u32, fresh: bool) -> Result<Dir, String> {
        let path = self.path.join(name);
        match mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) if !fresh => {}
            Err(e) => return Err(err(&path, "cannot create", e)),
        }
        let fd = openat(&self.fd, name, DIR_FLAGS, Mode::empty()).map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => {
                err(&path, "refused", "it is not a directory (a link?)")
            }
            e => err(&path, "cannot open", e),
        })?;
        let d = Dir { fd, path };
        if fresh {
            // What mkdirat made: the umask may have taken bits away.
            d.chmod(mode)?;
        }
        Ok(d)
    }

    /// Gives it (not what it holds) to `uid`/`gid` (`None`: unchanged).
    pub fn chown(&self, uid: Option<u32>, gid: Option<u32>) -> Result<(), String> {
        fchown(&self.fd, uid.map(Uid::from_raw), gid.map(Gid::from_raw))
            .map_err(|e| err(&self.path, "cannot change the owner of", e))
    }

    /// A second handle on the same directory.
    pub fn try_clone(&self) -> Result<Dir, String> {
        Ok(Dir {
            fd: self
                .fd
                .try_clone()
                .map_err(|e| err(&self.path, "cannot duplicate the handle of", e))?,
            path: self.path.clone(),
        })
    }

    pub fn chmod(&self, mode: u32) -> Result<(), String> {
        fchmod(&self.fd, Mode::from_raw_mode(mode))
            .map_err(|e| err(&self.path, "cannot change the mode of", e))
    }

    /// Replaces the file `name` with `bytes` (readable by all who may
    /// enter the directory): written to a new file and renamed into
    /// place, so a reader never sees half. Only for a directory no job may
    /// write (the name is the worker's to choose).
    pub fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let tmp = format!(".{name}.tmp");
        // Whatever holds the name (a crashed write's leftover) goes first:
        // the file is always new, never one that was there.
        match rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = openat(
            &self.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes)?;
        drop(f);
        renameat(&self.fd, tmp.as_str(), &self.fd, name)?;
        Ok(())
    }

    /// A new file `name` for writing (`O_EXCL`: never one that exists,
    /// nor a link), owner-only.
    pub fn create(&self, name: &str) -> std::io::Result<std::fs::File> {
        let fd = openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(std::fs::File::from(fd))
    }

    /// Opens the job's file `name` for reading: `Ok(None)` when there is
    /// none; an error when it is not a plain file of `owner`'s (`None`:
    /// anyone's) with one link: a link, a FIFO, a device, a hard link to
    /// another's file are never read.
    pub fn open_job_file(
        &self,
        name: &str,
        owner: Option<u32>,
    ) -> Result<Option<(std::fs::File, Stat)>, String> {
        let path = self.path.join(name);
        let fd = match openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(rustix::io::Errno::LOOP) => {
                return Err(err(&path, "refused", "it is a link, not a file"))
            }
            Err(e) => return Err(err(&path, "cannot open", e)),
        };
        let st = fstat(&fd).map_err(|e| err(&path, "cannot read", e))?;
        if kind(&st) != FileType::RegularFile {
            return Err(err(&path, "refused", "it is not a plain file"));
        }
        if let Some(u) = owner {
            if st.st_uid != u || st.st_nlink != 1 {
                return Err(err(
                    &path,
                    "refused",
                    format!(
                        "it is not the job's own file (owner uid {}, {} links)",
                        st.st_uid, st.st_nlink
                    ),
                ));
            }
        }
        Ok(Some((std::fs::File::from(fd), st)))
    }

    /// At most `max` bytes of the job's file `name` from `offset` (see
    /// [`Dir::open_job_file`]); `Ok(None)` when there is none.
    pub fn read_job_file(
        &self,
        name: &str,
        owner: Option<u32>,
        offset: u64,
        max: usize,
    ) -> Result<Option<Vec<u8>>, String> {
        use std::io::{Seek, SeekFrom};
        let Some((mut f, st)) = self.open_job_file(name, owner)? else {
            return Ok(None);
        };
        let len = st.st_size as u64;
        if offset >= len {
            return Ok(Some(Vec::new()));
        }
        let want = (len - offset).min(max as u64) as usize;
        let mut buf = Vec::with_capacity(want);
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.take(want as u64).read_to_end(&mut buf))
            .map_err(|e| err(&self.path.join(name), "cannot read", e))?;
        Ok(Some(buf))
    }

    /// True when the job's plain file `name` exists (see
    /// [`Dir::open_job_file`]; a link or another's file does not count).
    pub fn has_job_file(&self, name: &str, owner: Option<u32>) -> bool {
        matches!(self.open_job_file(name, owner), Ok(Some(_)))
    }

    /// Removes the entry `name` and all it holds, if it exists, never
    /// following a link (std's `remove_dir_all` works through handles).
    pub fn remove(&self, name: &str) -> Result<(), String> {
        let path = self.path.join(name);
        let st = match statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(err(&path, "cannot remove", e)),
        };
        if kind(&st) == FileType::Directory {
            // The parent is this handle's; its path leads here as long as
            // no one but the worker may write on the way (Dir::open).
            std::fs::remove_dir_all(&path).map_err(|e| err(&path, "cannot remove", e))
        } else {
            rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
                .map_err(|e| err(&path, "cannot remove", e))
        }
    }

    /// Gives the tree to `uid`/`gid`: this directory and every entry in it
    /// that a job uid (`job_uid`) owns with one link (directories: any
    /// number), walked through handles, links themselves changed, never
    /// their targets. Entries of root or the worker, and hard links, keep
    /// their owner. Returns the number of entries changed.
    pub fn chown_tree(
        &self,
        uid: u32,
        gid: u32,
        job_uid: &dyn Fn(u32) -> bool,
    ) -> Result<u64, String> {
        let mut counts = (0, 0);
        let dev = self.stat()?.st_dev;
        self.chown_tree_at(uid, gid, job_uid, dev, 0, &mut counts)?;
        Ok(counts.0)
    }

    fn chown_tree_at(
        &self,
        uid: u32,
        gid: u32,
        job_uid: &dyn Fn(u32) -> bool,
        dev: u64,
        depth: usize,
        counts: &mut (u64, u64),
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(err(
                &self.path,
                "refused",
                format!("deeper than {MAX_DEPTH} directories"),
            ));
        }
        let st = self.stat()?;
        if st.st_uid != uid || st.st_gid != gid {
            self.chown(Some(uid), Some(gid))?;
            counts.0 += 1;
        }
        let dup = rustix::io::dup(&self.fd).map_err(|e| err(&self.path, "cannot list", e))?;
        let entries = rustix::fs::Dir::new(dup).map_err(|e| err(&self.path, "cannot list", e))?;
        for e in entries {
            let e = e.map_err(|e| err(&self.path, "cannot list", e))?;
            let name = OsStr::from_bytes(e.file_name().to_bytes()).to_owned();
            if name == "." || name == ".." {
                continue;
            }
            counts.1 += 1;
            if counts.1 > MAX_ENTRIES {
                return Err(err(
                    &self.path,
                    "refused",
                    format!("more than {MAX_ENTRIES} entries to hand over"),
                ));
            }
            let here = self.path.join(&name);
            let st = match statat(&self.fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(err(&here, "cannot read", e)),
            };
            // Root's, the worker's, an account's: not the job's to have.
            if !job_uid(st.st_uid) {
                continue;
            }
            if kind(&st) == FileType::Directory {
                let fd = match openat(&self.fd, name.as_os_str(), DIR_FLAGS, Mode::empty()) {
                    Ok(fd) => fd,
                    // Replaced meanwhile by something else: left as it is.
                    Err(
                        rustix::io::Errno::NOENT
                        | rustix::io::Errno::LOOP
                        | rustix::io::Errno::NOTDIR,
                    ) => continue,
                    Err(e) => return Err(err(&here, "cannot open", e)),
                };
                let now = fstat(&fd).map_err(|e| err(&here, "cannot read", e))?;
                // Replaced meanwhile, or another file system mounted here.
                if now.st_ino != st.st_ino || now.st_dev != dev {
                    continue;
                }
                Dir { fd, path: here }.chown_tree_at(uid, gid, job_uid, dev, depth + 1, counts)?;
            } else if st.st_nlink == 1 && (st.st_uid != uid || st.st_gid != gid) {
                // Through a handle to the very entry checked (a link is
                // its own entry): one swapped in meanwhile is left alone.
                let fd = match openat(
                    &self.fd,
                    name.as_os_str(),
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd) => fd,
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(err(&here, "cannot open", e)),
                };
                let now = fstat(&fd).map_err(|e| err(&here, "cannot read", e))?;
                if now.st_ino != st.st_ino
                    || now.st_dev != st.st_dev
                    || now.st_nlink != 1
                    || !job_uid(now.st_uid)
                {
                    continue;
                }
                rustix::fs::chownat(
                    &fd,
                    "",
                    Some(Uid::from_raw(uid)),
                    Some(Gid::from_raw(gid)),
                    AtFlags::EMPTY_PATH,
                )
                .map_err(|e| err(&here, "cannot change the owner of", e))?;
                counts.0 += 1;
            }
        }
        Ok(())
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Pushes `path`'s components onto `todo` so that the first pops first.
fn push_components(todo: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    todo.extend(parts.into_iter().rev());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    const JOBS: Trust = Trust::Strict {
        uids: (70000, 79999),
        gids: (70000, 79999),
    };

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn open_creates_the_way_and_follows_the_workers_own_links() {
        let t = tmp();
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        symlink(&real, t.path().join("via")).unwrap();
        let d = Dir::open(&t.path().join("via/a/b"), true, JOBS).unwrap();
        assert!(real.join("a/b").is_dir());
        d.write("lease", b"1 2\n").unwrap();
        assert_eq!(std::fs::read(real.join("a/b/lease")).unwrap(), b"1 2\n");
        // Missing, not created.
        assert!(Dir::open(&t.path().join("none"), false, Trust::Same).is_err());
    }

    #[test]
    fn a_directory_others_may_write_is_refused_on_the_way_when_strict() {
        let t = tmp();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Dir::open(&open.join("x"), true, JOBS).unwrap_err();
        assert!(e.contains("anyone may write"), "{e}");
        // Sticky (as /tmp): entries of the worker's own are fine.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        Dir::open(&open.join("x"), true, JOBS).unwrap();
        Dir::open(&open.join("y"), true, Trust::Same).unwrap();
        if rustix::process::geteuid().as_raw() == 0 {
            // A job's entry there, or a job's directory on the way: refused.
            std::os::unix::fs::lchown(open.join("x"), Some(70001), Some(70001)).unwrap();
            let e = Dir::open(&open.join("x/y"), true, JOBS).unwrap_err();
            assert!(e.contains("job uid 70001"), "{e}");
            // Writable by a job's group (not sticky): refused; by another
            // group: fine.
            let g = t.path().join("group");
            std::fs::create_dir(&g).unwrap();
            std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o775)).unwrap();
            std::os::unix::fs::lchown(&g, Some(0), Some(70002)).unwrap();
            let e = Dir::open(&g.join("z"), true, JOBS).unwrap_err();
            assert!(e.contains("group 70002"), "{e}");
            std::os::unix::fs::lchown(&g, Some(0), Some(5000)).unwrap();
            Dir::open(&g.join("z"), true, JOBS).unwrap();
        }
    }

    #[test]
    fn a_link_below_is_never_followed() {
        let t = tmp();
        let victim = t.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        let d = Dir::open(t.path(), false, JOBS).unwrap();
        symlink(&victim, t.path().join("ck")).unwrap();
        let e = d.subdir("ck", 0o700, false).unwrap_err();
        assert!(e.contains("not a directory"), "{e}");
        // A fresh directory must be new.
        std::fs::create_dir(t.path().join("old")).unwrap();
        assert!(d.subdir("old", 0o700, true).is_err());
        // A file planted where the worker writes is replaced, not followed.
        std::fs::write(victim.join("secret"), "keep").unwrap();
        symlink(victim.join("secret"), t.path().join(".lease.tmp")).unwrap();
        d.write("lease", b"x").unwrap();
        assert_eq!(
            std::fs::read_to_string(victim.join("secret")).unwrap(),
            "keep"
        );
        assert_eq!(
            std::fs::read_to_string(t.path().join("lease")).unwrap(),
            "x"
        );
    }

    #[test]
    fn a_job_file_is_read_only_when_it_is_a_plain_file_of_the_job() {
        let t = tmp();
        let d = Dir::open(t.path(), false, Trust::Same).unwrap();
        assert_eq!(d.read_job_file("metrics", None, 0, 10).unwrap(), None);
        std::fs::write(t.path().join("secret"), "token").unwrap();
        symlink(t.path().join("secret"), t.path().join("metrics")).unwrap();
        let e = d.read_job_file("metrics", None, 0, 10).unwrap_err();
        assert!(e.contains("link"), "{e}");
        std::fs::remove_file(t.path().join("metrics")).unwrap();
        std::fs::hard_link(t.path().join("secret"), t.path().join("metrics")).unwrap();
        let me = std::fs::metadata(t.path().join("secret")).unwrap().uid();
        let e = d.read_job_file("metrics", Some(me), 0, 10).unwrap_err();
        assert!(e.contains("2 links"), "{e}");
        std::fs::remove_file(t.path().join("metrics")).unwrap();
        std::fs::write(t.path().join("metrics"), "a 1\nb 2\n").unwrap();
        assert_eq!(
            d.read_job_file("metrics", Some(me), 4, 3).unwrap().unwrap(),
            b"b 2"
        );
        assert!(d.read_job_file("metrics", Some(me + 1), 0, 3).is_err());
        // A FIFO is refused without blocking.
        let fifo = t.path().join("done");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(!d.has_job_file("done", None));
    }

    #[test]
    fn chown_tree_changes_job_entries_and_leaves_links_and_others_files() {
        if rustix::process::geteuid().as_raw() != 0 {
            return; // changing owners needs root
        }
        let t = tmp();
        let ck = t.path().join("ck");
        std::fs::create_dir_all(ck.join("sub")).unwrap();
        std::fs::write(ck.join("sub/a"), "a").unwrap();
        std::fs::write(t.path().join("roots"), "r").unwrap();
        symlink(t.path().join("roots"), ck.join("link")).unwrap();
        std::fs::hard_link(t.path().join("roots"), ck.join("hard")).unwrap();
        for p in [&ck, &ck.join("sub"), &ck.join("sub/a")] {
            std::os::unix::fs::lchown(p, Some(70001), Some(70001)).unwrap();
        }
        std::os::unix::fs::lchown(ck.join("link"), Some(70001), Some(70001)).unwrap();
        let d = Dir::open(t.path(), false, JOBS)
            .unwrap()
            .subdir("ck", 0o700, false)
            .unwrap();
        let n = d
            .chown_tree(70002, 70002, &|u| (70000..80000).contains(&u))
            .unwrap();
        assert_eq!(n, 4);
        for p in [&ck, &ck.join("sub"), &ck.join("sub/a")] {
            assert_eq!(std::fs::symlink_metadata(p).unwrap().uid(), 70002, "{p:?}");
        }
        assert_eq!(
            std::fs::symlink_metadata(ck.join("link")).unwrap().uid(),
            70002
        );
        // The link's target and the hard link are root's still.
        assert_eq!(std::fs::metadata(t.path().join("roots")).unwrap().uid(), 0);
    }
}
