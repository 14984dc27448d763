//! Themis finish-time fairness (Themis, NSDI'20, §3; Blox, EuroSys'24, Table 1:
//! "finish time fair policy").
//!
//! A job's finish-time fairness is `ρ = T_shared / T_ideal`:
//! - `T_shared` — its estimated finish time in the shared cluster, measured from
//!   arrival: time since arrival plus its remaining run time (trace duration ×
//!   (1 − progress), an oracle assumption as for SRTF);
//! - `T_ideal` — its run time on an exclusive `1/N` share of the cluster, with
//!   `N` the contention over the job's life so far (Themis §3.1: the average
//!   number of jobs contending since it arrived, weighted by time; the count
//!   at arrival until a round has passed): the duration, stretched by `G·N/C`
//!   when its `G` GPUs exceed the `C/N` share.
//!
//! Each round the jobs furthest from fairness (largest ρ) go first. Themis
//! offers GPUs to the fraction `f` of jobs with the largest ρ and then runs a
//! partial-allocation auction among them for efficiency; as in Blox, the
//! auction is replaced by the ρ order itself, and `filter` (f, default 1.0: all
//! jobs) keeps only the worst-off fraction in the schedule. Jobs without a
//! known duration go last, in arrival order.

use blox_core::*;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Parameters: `filter` — the fraction of contending jobs (by largest ρ) that
/// may run this round (Themis's `f`), in (0, 1].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThemisParams {
    #[serde(default = "one")]
    pub filter: f64,
}

/// The Themis scheduler: its parameters and each job's contention so far.
#[derive(Clone, Debug)]
pub struct Themis {
    pub params: ThemisParams,
    /// Per job: (∑ contention × seconds, seconds) since it arrived.
    contention: HashMap<JobId, (f64, f64)>,
    /// The last round's time and contention.
    last: Option<(f64, usize)>,
}

impl Themis {
    pub fn new(params: ThemisParams) -> Self {
        Themis {
            params,
            contention: HashMap::new(),
            last: None,
        }
    }

    /// Folds the last interval's contention into every job that contended
    /// through it, and returns each runnable job's average contention.
    fn average_contention(&mut self, now_s: f64, runnable: &[&Job]) -> HashMap<JobId, f64> {
        let n = runnable.len();
        if let Some((t, n_prev)) = self.last {
            let dt = (now_s - t).max(0.0);
            for v in self.contention.values_mut() {
                v.0 += n_prev as f64 * dt;
                v.1 += dt;
            }
        }
        self.last = Some((now_s, n));
        let live: HashSet<JobId> = runnable.iter().map(|j| j.id()).collect();
        self.contention.retain(|id, _| live.contains(id));
        runnable
            .iter()
            .map(|j| {
                let (sum, secs) = *self.contention.entry(j.id()).or_insert((0.0, 0.0));
                let avg = if secs > 0.0 { sum / secs } else { n as f64 };
                (j.id(), avg.max(1.0))
            })
            .collect()
    }
}

fn one() -> f64 {
    1.0
}

/// Finish-time fairness ρ of `job` at `now_s` with `n` jobs contending (on
/// average over its life) for `gpus` GPUs; `None` without a known duration.
pub fn finish_time_fairness(job: &Job, now_s: f64, n: f64, gpus: u32) -> Option<f64> {
    let duration = job.spec.expected_duration_s?;
    let remaining = job.expected_remaining_s()?;
    let shared = (now_s - job.arrival_s()).max(0.0) + remaining;
    let share = gpus as f64 / n.max(1.0);
    let ideal = duration * (job.requested_gpus() as f64 / share).max(1.0);
    Some(if ideal > 0.0 {
        shared / ideal
    } else {
        f64::INFINITY
    })
}

impl SchedulingPolicy for Themis {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let runnable: Vec<&Job> = jobs.runnable().collect();
        let n = runnable.len();
        let avg = self.average_contention(round.now_s, &runnable);
        let mut scored: Vec<(Option<f64>, &Job)> = runnable
            .into_iter()
            .map(|j| {
                (
                    finish_time_fairness(j, round.now_s, avg[&j.id()], cluster.num_gpus()),
                    j,
                )
            })
            .collect();
        scored.sort_by(|(ra, a), (rb, b)| {
            let (ra, rb) = (
                ra.unwrap_or(f64::NEG_INFINITY),
                rb.unwrap_or(f64::NEG_INFINITY),
            );
            rb.total_cmp(&ra)
                .then(a.arrival_s().total_cmp(&b.arrival_s()))
                .then(a.id().cmp(&b.id()))
        });
        let keep = ((n as f64 * self.params.filter).ceil() as usize).clamp(usize::from(n > 0), n);
        Schedule::in_priority_order(scored.into_iter().take(keep).map(|(_, j)| j))
    }
}

blox_core::register_scheduling!(
    "themis",
    "finish-time fairness: largest T_shared / T_ideal first (Themis §3, Blox Table 1)",
    |p| {
        let t = p.parse::<ThemisParams>()?;
        if !(t.filter > 0.0 && t.filter <= 1.0) {
            return Err(p.error_at("filter", "filter must be in (0, 1]"));
        }
        Ok(Box::new(Themis::new(t)))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn timed(id: u64, arrival: f64, gpus: u32, duration: f64, progress: f64) -> Job {
        let mut j = job(id, arrival, gpus);
        j.spec.expected_duration_s = Some(duration);
        j.progress = progress;
        j
    }

    #[test]
    fn the_job_furthest_from_its_fair_finish_time_runs_first() {
        let cluster = ClusterState::homogeneous(1, 4);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        // Same length; job 1 has waited long and made little progress: its
        // shared finish time is far beyond its ideal one.
        add(&mut state, &mut c, timed(1, 0.0, 1, 1000.0, 0.1), &[]);
        add(&mut state, &mut c, timed(2, 3000.0, 1, 1000.0, 0.5), &[]);
        add(&mut state, &mut c, timed(3, 3500.0, 1, 1000.0, 0.0), &[]);
        let s = Themis::new(ThemisParams { filter: 1.0 }).schedule(&info(3600.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(1), JobId(2), JobId(3)]);
        let r1 = finish_time_fairness(state.get(JobId(1)).unwrap(), 3600.0, 3.0, 4).unwrap();
        // 3600 s waited + 900 s left, over 1000 s ideal (1 GPU fits the 4/3 share).
        assert!((r1 - 4.5).abs() < 1e-9, "{r1}");
    }

    #[test]
    fn a_wide_job_is_measured_against_its_share_and_the_filter_keeps_the_worst_off() {
        let cluster = ClusterState::homogeneous(2, 4);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, timed(1, 0.0, 8, 1000.0, 0.0), &[]);
        add(&mut state, &mut c, timed(2, 0.0, 1, 1000.0, 0.0), &[]);
        // Two jobs share 8 GPUs: the 8-GPU job's ideal is stretched 2×.
        let r1 = finish_time_fairness(state.get(JobId(1)).unwrap(), 500.0, 2.0, 8).unwrap();
        assert!((r1 - 1500.0 / 2000.0).abs() < 1e-9, "{r1}");
        let s = Themis::new(ThemisParams { filter: 0.5 }).schedule(&info(500.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(2)]);
    }

    /// T_ideal uses the contention over the job's life (Themis §3.1), not
    /// the count of this round: a job that shared the cluster with 7 others
    /// for an hour is not judged as if it had been alone once they leave.
    #[test]
    fn the_ideal_share_follows_the_contention_averaged_over_the_jobs_life() {
        let cluster = ClusterState::homogeneous(1, 8);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, timed(1, 0.0, 8, 1000.0, 0.0), &[]);
        for id in 2..=8 {
            add(&mut state, &mut c, timed(id, 0.0, 1, 10.0, 0.0), &[]);
        }
        let mut t = Themis::new(ThemisParams { filter: 1.0 });
        t.schedule(&info(0.0), &state, &cluster);
        // After an hour the seven small jobs are gone; job 1 remains alone.
        let mut alone = JobState::new();
        let mut c = cluster.clone();
        add(&mut alone, &mut c, timed(1, 0.0, 8, 1000.0, 0.0), &[]);
        let avg = t.average_contention(3600.0, &alone.runnable().collect::<Vec<_>>());
        assert!((avg[&JobId(1)] - 8.0).abs() < 1e-9, "{avg:?}");
        // Half an hour alone: the average falls to (8·3600 + 1·1800) / 5400.
        let avg = t.average_contention(5400.0, &alone.runnable().collect::<Vec<_>>());
        assert!(
            (avg[&JobId(1)] - (8.0 * 3600.0 + 1800.0) / 5400.0).abs() < 1e-9,
            "{avg:?}"
        );
        // With the averaged contention its share is 8/5.67 GPUs, so its
        // ideal is stretched; with only this round's count (1) it would not be.
        let j = alone.get(JobId(1)).unwrap();
        let averaged = finish_time_fairness(j, 5400.0, avg[&JobId(1)], 8).unwrap();
        let now_only = finish_time_fairness(j, 5400.0, 1.0, 8).unwrap();
        assert!(averaged < now_only / 5.0, "{averaged} vs {now_only}");
    }
}
