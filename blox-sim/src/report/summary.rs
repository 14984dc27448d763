//! The headline numbers of a run (`summary.txt`, what `blox sim` prints):
//! JCTs, utilisation, lost work and, when nodes fail, interruptions and
//! the effective training time ratio (ETTR) by job size.

use super::tables::{JobRow, StopReason};
use blox_core::stats::{mean, quantile_sorted};
use blox_core::JobStatus;
use std::fmt;

/// Headline numbers of a run (over the tracked jobs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub policies: blox_core::PolicyNames,
    pub jobs_total: usize,
    pub jobs_finished: usize,
    pub jobs_rejected: usize,
    pub avg_jct_s: f64,
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    pub avg_responsiveness_s: f64,
    pub makespan_s: f64,
    pub gpu_utilisation: f64,
    pub preemptions: u64,
    /// GPU-seconds of work lost to stops after the last checkpoint, and
    /// held while starting (every launch's start-up), over all jobs.
    pub lost_work_gpu_s: f64,
    pub startup_gpu_s: f64,
    pub rounds: u64,
    pub sim_time_s: f64,
    /// Tracked jobs that had not ended when the run stopped.
    pub unfinished: usize,
    /// The limit that stopped the run early, if one did.
    pub stopped_by: Option<String>,
    /// Node failures that stopped jobs, and the GPU-seconds of work they
    /// lost (the rest of `lost_work_gpu_s` was lost to preemptions).
    pub interruptions: u64,
    pub failure_lost_gpu_s: f64,
    /// ETTR over the tracked finished jobs, weighted by GPU-time (their
    /// useful GPU-seconds over GPUs × time since submission), and by job
    /// size: (sizes, jobs, ETTR) for each size bucket that has jobs.
    pub ettr: Option<f64>,
    pub ettr_by_size: Vec<(String, usize, f64)>,
    /// Spare nodes called in for jobs a failure stopped, and nodes put in
    /// quarantine (`[cluster] spares`, `[cluster.quarantine]`).
    pub spare_swaps: u64,
    pub quarantines: u64,
    /// The placement's figures (`rounds.csv`'s extra columns): each one's
    /// mean over the rounds and its largest value.
    pub figures: Vec<(&'static str, f64, f64)>,
}

/// Job sizes the summary gives ETTR for: (label, fewest, most GPUs).
pub const SIZE_BUCKETS: [(&str, u32, u32); 6] = [
    ("1 GPU", 1, 1),
    ("2-8", 2, 8),
    ("9-64", 9, 64),
    ("65-512", 65, 512),
    ("513-4096", 513, 4096),
    ("4097+", 4097, u32::MAX),
];

/// GPU-time-weighted ETTR of `jobs` (finished ones; `None` without any).
fn weighted_ettr<'a>(jobs: impl Iterator<Item = &'a &'a JobRow>) -> (usize, Option<f64>) {
    let (mut n, mut useful, mut held) = (0usize, 0.0, 0.0);
    for j in jobs {
        if let (Some(e), Some(wall)) = (j.ettr, j.jct_s) {
            let w = f64::from(j.num_gpus.max(1)) * wall;
            n += 1;
            useful += e * w;
            held += w;
        }
    }
    (n, (held > 0.0).then(|| useful / held))
}

impl Summary {
    pub fn compute(
        tracked: &[&JobRow],
        all: &[JobRow],
        gpus: u32,
        now_s: f64,
        rounds: u64,
        policies: blox_core::PolicyNames,
        stop: Option<StopReason>,
    ) -> Self {
        let mut jcts: Vec<f64> = tracked.iter().filter_map(|j| j.jct_s).collect();
        jcts.sort_by(f64::total_cmp);
        // The mean of the responsiveness, summed in the same order as a
        // collected list would be, without the list.
        let resp_n = tracked
            .iter()
            .filter(|j| j.responsiveness_s.is_some())
            .count();
        let resp_mean = if resp_n == 0 {
            f64::NAN
        } else {
            tracked
                .iter()
                .filter_map(|j| j.responsiveness_s)
                .sum::<f64>()
                / resp_n as f64
        };
        let makespan_s = all.iter().filter_map(|j| j.finish_s).fold(0.0, f64::max);
        let gpu_s: f64 = all.iter().map(|j| j.gpu_seconds).sum();
        // Utilisation over [0, makespan]: attained GPU-seconds / (GPUs × makespan);
        // over [0, now] when a job that held GPUs has not ended (a run stopped
        // early), whose GPU-seconds run past the makespan.
        let cut_short = all
            .iter()
            .any(|j| j.finish_s.is_none() && j.gpu_seconds > 0.0);
        let horizon = if cut_short {
            makespan_s.max(now_s)
        } else {
            makespan_s
        };
        Summary {
            policies,
            jobs_total: tracked.len(),
            jobs_finished: tracked.iter().filter(|j| j.is_finished()).count(),
            jobs_rejected: tracked
                .iter()
                .filter(|j| j.status == JobStatus::Rejected)
                .count(),
            avg_jct_s: mean(&jcts),
            p50_jct_s: quantile_sorted(&jcts, 0.5),
            p99_jct_s: quantile_sorted(&jcts, 0.99),
            avg_responsiveness_s: resp_mean,
            makespan_s,
            gpu_utilisation: if horizon > 0.0 && gpus > 0 {
                gpu_s / (gpus as f64 * horizon)
            } else {
                0.0
            },
            preemptions: tracked.iter().map(|j| j.preemptions as u64).sum(),
            lost_work_gpu_s: all.iter().map(|j| j.lost_work_gpu_seconds).sum(),
            startup_gpu_s: all
                .iter()
                .map(|j| j.gpu_seconds - j.productive_gpu_seconds)
                .sum(),
            rounds,
            sim_time_s: now_s,
            unfinished: tracked.iter().filter(|j| !j.status.is_terminal()).count(),
            stopped_by: match stop {
                Some(StopReason::Limit(l)) => Some(l),
                _ => None,
            },
            interruptions: all.iter().map(|j| u64::from(j.interruptions)).sum(),
            failure_lost_gpu_s: all.iter().map(|j| j.failure_lost_gpu_seconds).sum(),
            ettr: weighted_ettr(tracked.iter()).1,
            ettr_by_size: SIZE_BUCKETS
                .iter()
                .filter_map(|(label, lo, hi)| {
                    let (n, e) =
                        weighted_ettr(tracked.iter().filter(|j| (*lo..=*hi).contains(&j.num_gpus)));
                    Some((label.to_string(), n, e?))
                })
                .collect(),
            spare_swaps: 0,
            quarantines: 0,
            figures: Vec::new(),
        }
    }

    /// True when a limit stopped the run with tracked jobs still unfinished.
    pub fn stopped_early(&self) -> bool {
        self.stopped_by.is_some() && self.unfinished > 0
    }
}

fn hours(s: f64) -> String {
    if s.is_nan() {
        "n/a".into()
    } else {
        format!("{:.2} h", s / 3600.0)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let blox_core::PolicyNames {
            admission: a,
            scheduling: s,
            placement: p,
        } = &self.policies;
        writeln!(
            f,
            "policies           admission={a}  scheduling={s}  placement={p}"
        )?;
        writeln!(
            f,
            "jobs               {} finished of {} ({} rejected)",
            self.jobs_finished, self.jobs_total, self.jobs_rejected
        )?;
        writeln!(f, "avg JCT            {}", hours(self.avg_jct_s))?;
        writeln!(f, "p50 JCT            {}", hours(self.p50_jct_s))?;
        writeln!(f, "p99 JCT            {}", hours(self.p99_jct_s))?;
        writeln!(f, "avg responsiveness {}", hours(self.avg_responsiveness_s))?;
        writeln!(f, "makespan           {}", hours(self.makespan_s))?;
        writeln!(
            f,
            "GPU utilisation    {:.1} %",
            self.gpu_utilisation * 100.0
        )?;
        writeln!(f, "preemptions        {}", self.preemptions)?;
        if self.lost_work_gpu_s > 0.0 {
            writeln!(
                f,
                "lost work          {:.1} GPU-h since checkpoints, {:.1} GPU-h starting",
                self.lost_work_gpu_s / 3600.0,
                self.startup_gpu_s / 3600.0
            )?;
        }
        if self.interruptions > 0 {
            writeln!(
                f,
                "failures           {} interruptions; {:.1} GPU-h lost to failures, {:.1} GPU-h to preemptions",
                self.interruptions,
                self.failure_lost_gpu_s / 3600.0,
                (self.lost_work_gpu_s - self.failure_lost_gpu_s).max(0.0) / 3600.0
            )?;
            let sizes: Vec<String> = self
                .ettr_by_size
                .iter()
                .map(|(l, n, e)| format!("{l}: {e:.3} ({n} jobs)"))
                .collect();
            if let Some(e) = self.ettr {
                writeln!(f, "ETTR               {e:.3}; {}", sizes.join(", "))?;
            }
            if self.spare_swaps + self.quarantines > 0 {
                writeln!(
                    f,
                    "resilience         {} spare nodes called in, {} quarantines",
                    self.spare_swaps, self.quarantines
                )?;
            }
        }
        for (name, mean, max) in &self.figures {
            writeln!(f, "{name:<18} {mean:.2} mean over rounds, {max:.2} at most")?;
        }
        write!(
            f,
            "rounds             {} ({} simulated)",
            self.rounds,
            hours(self.sim_time_s)
        )?;
        if let (Some(by), true) = (&self.stopped_by, self.unfinished > 0) {
            write!(
                f,
                "\nwarning            stopped by {by} with {} of {} jobs unfinished",
                self.unfinished, self.jobs_total
            )?;
        }
        Ok(())
    }
}
