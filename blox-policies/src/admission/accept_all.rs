//! Accept-all admission: every submitted job is admitted at once (Blox, EuroSys'24,
//! §4.1; the default of most schedulers in the paper's Table 1).

use blox_core::*;
use serde::Deserialize;

/// Admits every waiting job. No parameters.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptAll {}

impl AdmissionPolicy for AcceptAll {
    fn fork(&self) -> Fork<dyn AdmissionPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn admit(
        &mut self,
        _round: &RoundInfo,
        waiting: &[Job],
        _jobs: &JobState,
        _cluster: &ClusterState,
    ) -> AdmissionDecision {
        AdmissionDecision {
            accept: waiting.iter().map(|j| j.id()).collect(),
            reject: Vec::new(),
        }
    }
}

blox_core::register_admission!(
    "accept-all",
    "admit every submitted job at once (Blox §4.1)",
    |p| { Ok(Box::new(p.parse::<AcceptAll>()?)) }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn every_waiting_job_is_admitted() {
        let waiting = vec![job(1, 0.0, 1), job(2, 5.0, 64)];
        let d = AcceptAll {}.admit(
            &info(0.0),
            &waiting,
            &JobState::new(),
            &ClusterState::homogeneous(1, 1),
        );
        assert_eq!(d.accept, vec![JobId(1), JobId(2)]);
        assert!(d.reject.is_empty());
    }
}
