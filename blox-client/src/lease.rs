//! The lease a job holds (the control directory's `lease` file, renewed by
//! its worker; see the crate's docs): read at iteration boundaries, and
//! watched by a thread that ends the process once it ran out past its grace.

use std::path::{Path, PathBuf};

/// The control directory's lease file (see the crate's docs).
pub const LEASE_FILE: &str = "lease";

/// The exit status of a job whose lease ran out past its grace
/// (`EX_TEMPFAIL`): its worker could not reach the scheduler, which
/// relaunches the job elsewhere.
pub const LEASE_LOST_EXIT: i32 = 75;

/// Seconds of the node's monotonic clock (`CLOCK_MONOTONIC`, the same for
/// every process on the node, untouched by clock steps); `None` where there
/// is none.
pub fn monotonic_s() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec for the call to fill.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// A lease file's `(until_s, grace_s)`, if it holds a valid one.
pub fn read_lease(path: &Path) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut it = text.split_whitespace();
    let until: f64 = it.next()?.parse().ok()?;
    let grace: f64 = it.next().map_or(Some(0.0), |g| g.parse().ok())?;
    (until.is_finite() && grace.is_finite() && grace >= 0.0).then_some((until, grace))
}

/// Ends the process when the lease ran out more than its grace ago: a job
/// stuck in a long iteration (or one that never checks its lease) must not
/// run on beside its relaunch elsewhere. Idle while there is no lease file.
pub(crate) fn spawn_watchdog(lease: PathBuf, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("blox-lease".into())
        .spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let (Some(now), Some((until, grace))) = (monotonic_s(), read_lease(&lease)) {
                    if now >= until + grace {
                        eprintln!(
                            "blox: the lease ran out {:.1} s ago and its {grace:.1} s grace is over (the worker could not reach the scheduler): exiting",
                            now - until
                        );
                        std::process::exit(LEASE_LOST_EXIT);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        });
}
