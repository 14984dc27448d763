//! The soak's processes: `blox scheduler` and `blox worker` children that
//! are SIGKILLed and restarted on purpose, and are killed when dropped.

use super::{err, SoakError};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A child process killed when dropped.
pub(super) struct Proc {
    child: Option<Child>,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
}

impl Proc {
    pub(super) fn spawn(exe: &Path, args: &[String], log: &Path) -> Result<Proc, SoakError> {
        Proc::spawn_with_env(exe, args, &[], log)
    }

    /// [`Proc::spawn`] with `env` set too (kept for restarts).
    pub(super) fn spawn_with_env(
        exe: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Result<Proc, SoakError> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| err(format!("{}: {e}", log.display())))?;
        let child = Command::new(exe)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("BLOX_TOKEN_FILE")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().map_err(err)?)
            .stderr(out)
            .spawn()
            .map_err(|e| err(format!("{}: {e}", exe.display())))?;
        Ok(Proc {
            child: Some(child),
            argv: args.to_vec(),
            env: env.to_vec(),
            log: log.to_path_buf(),
        })
    }

    /// Its pid while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, and reap.
    pub(super) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, …) to the process, if it runs.
    pub(super) fn signal(&self, signal: i32) {
        if let Some(c) = &self.child {
            #[cfg(unix)]
            // SAFETY: kill(2) on our own child's pid; no memory is touched.
            unsafe {
                libc::kill(c.id() as libc::pid_t, signal);
            }
            #[cfg(not(unix))]
            let _ = (c, signal);
        }
    }

    pub(super) fn restart(&mut self, exe: &Path) -> Result<(), SoakError> {
        self.kill();
        *self = Proc::spawn_with_env(exe, &self.argv, &self.env, &self.log)?;
        Ok(())
    }

    /// An early exit (a port taken, a bad flag) is an error of the soak.
    pub(super) fn check_alive(&mut self, what: &str) -> Result<(), SoakError> {
        if let Some(c) = &mut self.child {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(err(format!(
                    "{what} exited ({st}); see {}{}",
                    self.log.display(),
                    log_tail(&self.log)
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Raises the open-file limit to its hard limit: a thousand clients and the
/// scheduler's side of their connections need more than the usual 1024.
/// The log's last lines, indented, for an error that is read where the
/// log is gone (a CI run's temporary directory).
fn log_tail(log: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(log) else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(5)..];
    if tail.is_empty() {
        return String::new();
    }
    let mut out = String::from("; its last lines:");
    for l in tail {
        out.push_str("\n  ");
        out.extend(l.chars().take(300));
    }
    out
}

pub(super) use blox_runtime::conn::raise_fd_limit;
