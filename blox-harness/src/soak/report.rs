//! What `blox bench soak` runs ([`SoakConfig`]) and what it found
//! ([`SoakReport`], printed as the one line the issue asks for).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// What the soak runs; [`SoakConfig::new`] is the full size of the issue,
/// [`SoakConfig::reduced`] the CI one.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    pub jobs: usize,
    pub clients: usize,
    pub workers: usize,
    pub gpus_per_worker: u32,
    pub worker_kills: usize,
    pub scheduler_restarts: usize,
    pub cuts: usize,
    /// Workers stopped (SIGSTOP) for 6 s, longer than the worker timeout,
    /// then continued (SIGCONT): a hung node under running jobs.
    pub hangs: usize,
    /// Times no file of the scheduler may grow for 6 s (a full disk).
    pub disk_fulls: usize,
    /// Times the scheduler's wall clock steps back an hour across a
    /// restart (needs libfaketime; said and skipped without it).
    pub clock_steps: usize,
    pub seed: u64,
    /// Scheduling policy of the scheduler (`las` preempts, `fifo` does not).
    pub policy: String,
    /// The run stops by itself after this long (`None`: from the job mix).
    pub max_time_s: Option<f64>,
    /// Jobs in four teams with quotas around `policy`, gang placement on
    /// racks of two workers ([`super::teams`]).
    pub teams: bool,
    /// The `blox` and `blox-toy-job` binaries.
    pub blox: PathBuf,
    pub toy: PathBuf,
    /// Working directory (job table, logs, checkpoints, journal); emptied.
    pub dir: PathBuf,
}

impl SoakConfig {
    /// 10,000 jobs from 1,000 clients on 16 workers × 8 GPUs, with 10 worker
    /// kills, 3 scheduler restarts, 2 cuts and 2 hangs.
    pub fn new(blox: PathBuf, toy: PathBuf, dir: PathBuf) -> Self {
        SoakConfig {
            jobs: 10_000,
            clients: 1_000,
            workers: 16,
            gpus_per_worker: 8,
            worker_kills: 10,
            scheduler_restarts: 3,
            cuts: 2,
            hangs: 2,
            disk_fulls: 2,
            clock_steps: 1,
            seed: 1,
            policy: "las".into(),
            max_time_s: None,
            teams: false,
            blox,
            toy,
            dir,
        }
    }

    /// The CI run: 500 jobs from 100 clients, 2 worker kills, 1 scheduler
    /// restart, 1 cut, 1 hang, 1 full disk and 1 clock step.
    pub fn reduced(mut self) -> Self {
        self.jobs = 500;
        self.clients = 100;
        self.worker_kills = 2;
        self.scheduler_restarts = 1;
        self.cuts = 1;
        self.hangs = 1;
        self.disk_fulls = 1;
        self.clock_steps = 1;
        self
    }
}

/// The soak's findings.
#[derive(Clone, Debug, Default)]
pub struct SoakReport {
    pub accepted: usize,
    pub finished: usize,
    pub failed: usize,
    /// Why jobs failed (reason → jobs).
    pub failed_reasons: BTreeMap<String, usize>,
    /// Accepted jobs the scheduler did not know at the end.
    pub lost: usize,
    /// Jobs that had not ended when the run stopped (its time bound).
    pub unfinished: usize,
    /// Jobs the scheduler counts finished of which no launch did all its
    /// work (the journal's `done`): an end someone forged.
    pub finished_undone: usize,
    /// What the attacker jobs achieved (`None`: none ran, the soak not
    /// being root; docs of `isolation`).
    pub attacks: Option<AttackReport>,
    /// Submissions that became more than one job (extra jobs).
    pub duplicated: usize,
    pub overlapping_runs: usize,
    pub checkpoint_regressions: usize,
    /// Job processes (or what they forked) still alive once every worker
    /// was killed at the end.
    pub leftover_processes: usize,
    pub launches: usize,
    pub submit_p50_s: f64,
    pub submit_p99_s: f64,
    /// Over the scheduler runs (the largest p99 seen, the last p50).
    pub round_p50_s: f64,
    pub round_p99_s: f64,
    pub faults: Vec<String>,
    pub wall_s: f64,
    /// With teams: how long teams waited below their quota.
    pub quota_waits: Option<super::teams::QuotaWaits>,
}

impl SoakReport {
    /// True when nothing was lost, duplicated, run twice at once or
    /// regressed, and every job ended.
    pub fn sound(&self) -> bool {
        self.lost == 0
            && self.unfinished == 0
            && self.duplicated == 0
            && self.overlapping_runs == 0
            && self.checkpoint_regressions == 0
            && self.leftover_processes == 0
            && self.finished_undone == 0
            && self.attacks.as_ref().is_none_or(|a| {
                a.stolen == 0
                    && a.accepted == 0
                    && a.budgets_exceeded == 0
                    && a.decoys_changed == 0
                    && a.escaped == 0
            })
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reasons = if self.failed_reasons.is_empty() {
            String::new()
        } else {
            let r: Vec<String> = self
                .failed_reasons
                .iter()
                .map(|(k, v)| format!("{v}× {k}"))
                .collect();
            format!(" ({})", r.join("; "))
        };
        writeln!(
            f,
            "soak: accepted {}, finished {}, failed {}{reasons}, lost {}, duplicated {}, overlapping runs {}, checkpoint regressions {}, leftover job processes {}",
            self.accepted,
            self.finished,
            self.failed,
            self.lost,
            self.duplicated,
            self.overlapping_runs,
            self.checkpoint_regressions,
            self.leftover_processes
        )?;
        match &self.attacks {
            Some(a) => writeln!(
                f,
                "soak: attackers {}, credentials stolen {}, forged calls accepted {} of {}, finished without their work {}; node attacks {}: decoys changed {}, escaped processes {}, budgets exceeded {}",
                a.attempts,
                a.stolen,
                a.accepted,
                a.calls,
                self.finished_undone,
                a.node_attacks,
                a.decoys_changed,
                a.escaped,
                a.budgets_exceeded
            )?,
            None => writeln!(
                f,
                "soak: no attackers (jobs run as the soak's own user, who is not root: they could read its tokens), finished without their work {}",
                self.finished_undone
            )?,
        }
        if self.unfinished > 0 {
            writeln!(
                f,
                "soak: {} jobs had not ended when the run stopped",
                self.unfinished
            )?;
        }
        write!(
            f,
            "soak: submit latency p50 {:.1} ms, p99 {:.1} ms; round overhead p50 {:.1} ms, p99 {:.1} ms; {} launches in {:.0} s; faults: {}",
            self.submit_p50_s * 1e3,
            self.submit_p99_s * 1e3,
            self.round_p50_s * 1e3,
            self.round_p99_s * 1e3,
            self.launches,
            self.wall_s,
            self.faults.join(", ")
        )?;
        if let Some(q) = &self.quota_waits {
            write!(
                f,
                "\nsoak: teams: a team waited below its quota while another borrowed for at most {:.0} s ({:.0} team-s in all, {} samples)",
                q.longest_s, q.total_s, q.samples
            )?;
        }
        Ok(())
    }
}

pub use blox_runtime::toy::attack::AttackReport;
