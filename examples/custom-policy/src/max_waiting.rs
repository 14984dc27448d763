//! `max-waiting`: admits jobs while fewer than `limit` admitted jobs are
//! without GPUs; the rest wait for admission, in submission order. Jobs
//! asking for more than `max_gpus` GPUs are rejected with a reason.

use blox_core::*;
use serde::Deserialize;

/// Parameters, read from the `[admission]` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxWaiting {
    /// Most admitted jobs without GPUs at a time.
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// Larger requests are rejected (unset: no limit).
    pub max_gpus: Option<u32>,
}

fn default_limit() -> usize {
    8
}

impl AdmissionPolicy for MaxWaiting {
    fn admit(
        &mut self,
        _round: &RoundInfo,
        waiting: &[Job],
        jobs: &JobState,
        _cluster: &ClusterState,
    ) -> AdmissionDecision {
        let mut d = AdmissionDecision::default();
        let mut queued = jobs.queued().count();
        for j in waiting {
            if let Some(m) = self.max_gpus.filter(|m| j.requested_gpus() > *m) {
                d.reject
                    .push((j.id(), format!("asks for more than {m} GPUs")));
            } else if queued < self.limit {
                d.accept.push(j.id());
                queued += 1;
            }
        }
        d
    }
}

blox_core::register_admission!(
    "max-waiting",
    "example crate: admit while fewer than `limit` admitted jobs wait for GPUs",
    |params| {
        let p: MaxWaiting = params.parse()?;
        if p.limit == 0 {
            return Err(params.error_at("limit", "limit must be at least 1"));
        }
        Ok(Box::new(p))
    }
);
