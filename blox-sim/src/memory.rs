//! A workload too large for this machine is refused before it is drawn or
//! run, with the estimate and the limit, rather than killed by the kernel
//! hours in.
//!
//! The estimate is per job: a run keeps a table row and the metrics of
//! every ended job (the newest few thousand whole), and the trace's jobs
//! not yet submitted. Measured on the scale benchmark (`docs/PERFORMANCE.md`,
//! "Ten million jobs", 2026-11-30): 1,000,000 jobs peak at 465,824 KiB and
//! 10,000,000 at 4,097,764 KiB, 420–477 bytes a job; the estimate allows
//! 560 bytes a job and 64 MiB (a trace with long names, teams or models
//! holds more).

use crate::backend::SimConfig;

/// Bytes a run holds per job at its peak, with a margin.
pub const BYTES_PER_JOB: u64 = 560;
/// What a run holds whatever its size (the binary, the cluster, buffers).
pub const BASE_BYTES: u64 = 64 << 20;

const GIB: f64 = (1u64 << 30) as f64;

/// A run's estimated peak memory, bytes.
pub fn estimate_bytes(jobs: usize) -> u64 {
    BASE_BYTES + jobs as u64 * BYTES_PER_JOB
}

/// The memory this process may use and where that figure comes from:
/// `[sim] memory_limit_gb`, else the smaller of `MemAvailable` and a cgroup
/// limit; `None` where neither can be read.
pub fn limit(cfg: &SimConfig) -> Option<(u64, String)> {
    if let Some(gb) = cfg.memory_limit_gb {
        return Some(((gb * GIB) as u64, "[sim] memory_limit_gb".into()));
    }
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| mem_available(&t))
        .map(|b| (b, "MemAvailable in /proc/meminfo".to_string()));
    let cgroup = cgroup_room().map(|b| (b, "the cgroup's memory.max".to_string()));
    match (available, cgroup) {
        (Some(a), Some(c)) => Some(if c.0 < a.0 { c } else { a }),
        (a, c) => a.or(c),
    }
}

fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Room left under a cgroup v2 memory limit, if there is one.
fn cgroup_room() -> Option<u64> {
    let max = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?;
    let max: u64 = max.trim().parse().ok()?; // "max": no limit
    let used: u64 = std::fs::read_to_string("/sys/fs/cgroup/memory.current")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    Some(max.saturating_sub(used))
}

/// Refuses `jobs` jobs when their estimate exceeds the limit; `what` names
/// the workload in the message.
pub fn check(jobs: usize, what: &str, cfg: &SimConfig) -> Result<(), String> {
    let need = estimate_bytes(jobs);
    let Some((limit, source)) = limit(cfg) else {
        tracing::debug!("no memory limit could be read; {jobs} jobs not checked against one");
        return Ok(());
    };
    if need <= limit {
        return Ok(());
    }
    Err(format!(
        "{what}: {jobs} jobs need about {:.2} GiB ({BYTES_PER_JOB} bytes a job, measured on the scale benchmark, plus {} MiB) but {:.2} GiB is available ({source}): draw fewer jobs (`workload.num_jobs`), run on a larger machine, or set `[sim] memory_limit_gb` if the estimate is wrong for this workload",
        need as f64 / GIB,
        BASE_BYTES >> 20,
        limit as f64 / GIB,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_from_meminfo() {
        let t = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(t), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn a_workload_beyond_the_limit_is_refused_with_both_figures() {
        let cfg = SimConfig {
            memory_limit_gb: Some(1.0),
            ..SimConfig::default()
        };
        assert!(check(500_000, "w", &cfg).is_ok());
        let e = check(10_000_000, "workload.num_jobs", &cfg).unwrap_err();
        assert!(e.contains("10000000 jobs need about 5.28 GiB"), "{e}");
        assert!(
            e.contains("1.00 GiB is available ([sim] memory_limit_gb)"),
            "{e}"
        );
    }
}
