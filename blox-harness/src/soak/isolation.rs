//! How the soak's jobs run: as root's soak, every job as a uid of its own
//! (`blox worker --job-uids`, as a secure shared cluster runs them), with
//! one job in [`ATTACKER_EVERY`] an attacker (`blox_runtime::toy::attack`); as
//! anyone else, as the soak's own user and with no attackers (a job that
//! runs as its worker's user can read whatever the worker can: that
//! cluster promises nothing against its jobs).

use super::{err, SoakError};
use std::path::{Path, PathBuf};

/// The uids the soak's jobs run as (no account holds them on the machines
/// it runs on; the worker refuses a range that holds one).
pub const JOB_UIDS: &str = "200000-265535";

/// One job in this many is an attacker (when jobs have uids of their own).
pub const ATTACKER_EVERY: usize = 50;

/// What the soak's setup chose.
pub(super) struct Isolation {
    /// Arguments every worker gets.
    pub worker_args: Vec<String>,
    /// Lines for the scheduler's `[runtime]`.
    pub runtime_lines: String,
    /// The toy job's binary, where every job's uid may run it.
    pub toy: PathBuf,
    /// Jobs run as uids of their own, and some attack.
    pub attackers: bool,
}

/// Prepares `dir` (already created) for jobs run as other uids when the
/// soak runs as root: the directory and the shared journal reachable by
/// them, the toy job copied where they may run it.
pub(super) fn prepare(dir: &Path, toy: &Path, journal: &Path) -> Result<Isolation, SoakError> {
    #[cfg(target_os = "linux")]
    // SAFETY: geteuid(2) reads this process's credentials only.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
                .map_err(|e| err(format!("{}: {e}", p.display())))
        };
        mode(dir, 0o755)?;
        for a in dir.ancestors().skip(1) {
            let m = std::fs::metadata(a)
                .map_err(|e| err(format!("{}: {e}", a.display())))?
                .permissions()
                .mode();
            if m & 0o001 == 0 {
                return Err(err(format!(
                    "the soak runs its jobs as uids of their own ({JOB_UIDS}), which cannot enter {} (mode {:04o}) above its directory {}: give --out a directory others may reach",
                    a.display(),
                    m & 0o7777,
                    dir.display()
                )));
            }
        }
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).map_err(|e| err(format!("{}: {e}", bin.display())))?;
        let copy = bin.join("blox-toy-job");
        std::fs::copy(toy, &copy).map_err(|e| err(format!("{}: {e}", copy.display())))?;
        mode(&copy, 0o755)?;
        for shared in [
            journal.to_path_buf(),
            dir.join(blox_runtime::toy::attack::ATTACKS_FILE),
        ] {
            std::fs::write(&shared, "").map_err(|e| err(format!("{}: {e}", shared.display())))?;
            mode(&shared, 0o666)?;
        }
        return Ok(Isolation {
            // Limits the attackers' fork bombs and memory hogs meet.
            worker_args: vec![
                "--job-uids".into(),
                JOB_UIDS.into(),
                "--max-processes".into(),
                blox_runtime::toy::node_attack::MAX_PROCESSES.to_string(),
                "--memory-gb".into(),
                format!(
                    "{}",
                    blox_runtime::toy::node_attack::MEMORY_MB as f64 / 1000.0
                ),
            ],
            runtime_lines: format!("job_uids = \"{JOB_UIDS}\"\n"),
            toy: copy,
            attackers: true,
        });
    }
    let _ = journal;
    Ok(Isolation {
        // Whoever runs the soak (root where uids are not available).
        worker_args: vec!["--allow-root-jobs".into()],
        runtime_lines: String::new(),
        toy: toy.to_path_buf(),
        attackers: false,
    })
}
