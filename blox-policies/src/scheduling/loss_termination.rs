//! Loss-based termination (Blox, EuroSys'24, §5.3 and Fig. 16): end a job as
//! soon as its training loss is within a relative threshold of its target,
//! instead of running every epoch it asked for (Jeon et al.: about 75 % of jobs
//! reach within 0.1 % of their lowest loss in 40 % of their epochs).
//!
//! A wrapper around any scheduling policy, named by `inner` with its
//! parameters in `[scheduling.inner_params]`: each round the inner policy
//! decides, then every runnable job whose reported `loss` metric is at most
//! `loss_target × (1 + threshold)` is terminated (taken out of the schedule and
//! recorded as finished now). Jobs that report no loss run to completion. The
//! target is what the job reports as `loss_target`: in simulation the lowest
//! loss of its curve (the oracle Blox's experiment uses), on a cluster the
//! target the user gives.
//!
//! ```toml
//! [scheduling]
//! policy = "loss-termination"
//! inner = "fifo"
//! threshold = 0.002
//! ```

use blox_core::*;
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    inner: String,
    #[serde(default = "default_threshold")]
    threshold: f64,
    #[serde(default)]
    inner_params: blox_core::config::Table,
}

fn default_threshold() -> f64 {
    0.002
}

pub struct LossTermination {
    inner: Box<dyn SchedulingPolicy>,
    threshold: f64,
}

impl LossTermination {
    pub fn new(inner: Box<dyn SchedulingPolicy>, threshold: f64) -> Self {
        LossTermination { inner, threshold }
    }

    /// True once `job`'s loss is within the threshold of its target.
    fn converged(&self, jobs: &JobState, job: &Job) -> Option<String> {
        let loss = jobs.metrics().get(job.id(), metric::LOSS)?;
        let target = jobs.metrics().get(job.id(), metric::LOSS_TARGET)?;
        (loss <= target * (1.0 + self.threshold)).then(|| {
            format!(
                "converged: loss {loss:.4} within {:.2} % of its target {target:.4}",
                self.threshold * 100.0
            )
        })
    }
}

impl SchedulingPolicy for LossTermination {
    fn fork(&self) -> Fork<dyn SchedulingPolicy> {
        match self.inner.fork().into_copy("its inner policy") {
            Ok(inner) => Fork::Copy(Box::new(LossTermination {
                inner,
                threshold: self.threshold,
            })),
            Err(why) => Fork::Unforkable(why),
        }
    }

    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let mut s = self.inner.schedule(round, jobs, cluster);
        let done: Vec<(JobId, String)> = jobs
            .runnable()
            .filter_map(|j| self.converged(jobs, j).map(|why| (j.id(), why)))
            .collect();
        s.entries
            .retain(|d| !done.iter().any(|(id, _)| *id == d.job));
        s.terminate.extend(done);
        s
    }

    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        self.inner.accepts(job)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        let mut m = self.inner.metrics_read();
        m.extend([metric::LOSS, metric::LOSS_TARGET]);
        m
    }

    fn requires_placement(&self) -> Option<&'static str> {
        self.inner.requires_placement()
    }

    fn pair_with_placement(&mut self, placement: &str) -> Result<(), String> {
        self.inner.pair_with_placement(placement)
    }

    fn sort_key(&self, job: &blox_core::Job, jobs: &blox_core::JobState) -> Option<String> {
        self.inner.sort_key(job, jobs)
    }

    fn fits_cluster(&self, cluster: &blox_core::ClusterState) -> Result<(), String> {
        self.inner.fits_cluster(cluster)
    }
}

blox_core::register_scheduling!(
    "loss-termination",
    "wraps `inner`: ends jobs whose loss is within `threshold` of their target (Blox §5.3)",
    |p| {
        let params = p.parse::<Params>()?;
        if !(params.threshold >= 0.0 && params.threshold.is_finite()) {
            return Err(p.error_at("threshold", "threshold must be a non-negative number"));
        }
        if params.inner == "loss-termination" {
            return Err(p.error_at("inner", "loss-termination cannot wrap itself"));
        }
        let entry = blox_core::registry::find_scheduling(&params.inner).ok_or_else(|| {
            let known: Vec<&str> = blox_core::registry::scheduling_entries()
                .iter()
                .map(|e| e.name)
                .collect();
            p.error_at(
                "inner",
                format!(
                    "unknown scheduling policy `{}`; known: {}",
                    params.inner,
                    known.join(", ")
                ),
            )
        })?;
        let inner = (entry.build)(&Section::from_table(
            "scheduling.inner_params",
            params.inner_params,
        ))?;
        Ok(Box::new(LossTermination::new(inner, params.threshold)))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::fifo::Fifo;
    use crate::test_util::*;

    #[test]
    fn a_converged_job_is_terminated_and_left_out_of_the_schedule() {
        let cluster = ClusterState::homogeneous(1, 4);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, job(1, 0.0, 2), &[0, 1]);
        add(&mut state, &mut c, job(2, 1.0, 2), &[]);
        add(&mut state, &mut c, job(3, 2.0, 2), &[]);
        let m = state.metrics();
        m.set(JobId(1), metric::LOSS, 1.001);
        m.set(JobId(1), metric::LOSS_TARGET, 1.0);
        m.set(JobId(2), metric::LOSS, 1.5);
        m.set(JobId(2), metric::LOSS_TARGET, 1.0);
        let mut p = LossTermination::new(Box::new(Fifo::default()), 0.002);
        let s = p.schedule(&info(0.0), &state, &cluster);
        assert_eq!(s.job_order(), vec![JobId(2), JobId(3)]);
        assert_eq!(s.terminate.len(), 1);
        assert_eq!(s.terminate[0].0, JobId(1));
    }
}
