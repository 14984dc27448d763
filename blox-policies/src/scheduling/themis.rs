//! Themis finish-time fairness (Themis, NSDI'20, §3; Blox, EuroSys'24, Table 1:
//! "finish time fair policy").
//!
//! A job's finish-time fairness is `ρ = T_shared / T_ideal`:
//! - `T_shared` — its estimated finish time in the shared cluster, measured from
//!   arrival: time since arrival plus its remaining run time (trace duration ×
//!   (1 − progress), an oracle assumption as for SRTF);
//! - `T_ideal` — its run time on an exclusive `1/N` share of the cluster, with
//!   `N` the jobs contending now: the duration, stretched by `G·N/C` when its `G`
//!   GPUs exceed the `C/N` share.
//!
//! Each round the jobs furthest from fairness (largest ρ) go first. Themis
//! offers GPUs to the fraction `f` of jobs with the largest ρ and then runs a
//! partial-allocation auction among them for efficiency; as in Blox, the
//! auction is replaced by the ρ order itself, and `filter` (f, default 1.0: all
//! jobs) keeps only the worst-off fraction in the schedule. Jobs without a
//! known duration go last, in arrival order.

use blox_core::*;
use serde::Deserialize;

/// Parameters: `filter` — the fraction of contending jobs (by largest ρ) that
/// may run this round (Themis's `f`), in (0, 1].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Themis {
    #[serde(default = "one")]
    pub filter: f64,
}

fn one() -> f64 {
    1.0
}

/// Finish-time fairness ρ of `job` at `now_s` among `n` contending jobs on
/// `gpus` GPUs; `None` without a known duration.
pub fn finish_time_fairness(job: &Job, now_s: f64, n: usize, gpus: u32) -> Option<f64> {
    let duration = job.spec.expected_duration_s?;
    let remaining = job.expected_remaining_s()?;
    let shared = (now_s - job.arrival_s()).max(0.0) + remaining;
    let share = gpus as f64 / n.max(1) as f64;
    let ideal = duration * (job.requested_gpus() as f64 / share).max(1.0);
    Some(if ideal > 0.0 {
        shared / ideal
    } else {
        f64::INFINITY
    })
}

impl SchedulingPolicy for Themis {
    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let runnable: Vec<&Job> = jobs.runnable().collect();
        let n = runnable.len();
        let mut scored: Vec<(Option<f64>, &Job)> = runnable
            .into_iter()
            .map(|j| {
                (
                    finish_time_fairness(j, round.now_s, n, cluster.num_gpus()),
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
        let keep = ((n as f64 * self.filter).ceil() as usize).clamp(usize::from(n > 0), n);
        Schedule::in_priority_order(scored.into_iter().take(keep).map(|(_, j)| j))
    }
}

blox_core::register_scheduling!(
    "themis",
    "finish-time fairness: largest T_shared / T_ideal first (Themis §3, Blox Table 1)",
    |p| {
        let t = p.parse::<Themis>()?;
        if !(t.filter > 0.0 && t.filter <= 1.0) {
            return Err(p.error_at("filter", "filter must be in (0, 1]"));
        }
        Ok(Box::new(t))
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
        let s = Themis { filter: 1.0 }.schedule(&info(3600.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(1), JobId(2), JobId(3)]);
        let r1 = finish_time_fairness(state.get(JobId(1)).unwrap(), 3600.0, 3, 4).unwrap();
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
        let r1 = finish_time_fairness(state.get(JobId(1)).unwrap(), 500.0, 2, 8).unwrap();
        assert!((r1 - 1500.0 / 2000.0).abs() < 1e-9, "{r1}");
        let s = Themis { filter: 0.5 }.schedule(&info(500.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(2)]);
    }
}
