//! Load-based admission: admit jobs in submission order while the GPUs requested by
//! admitted, unfinished jobs stay within `k` × the cluster's GPUs; the rest wait,
//! FIFO (Blox, EuroSys'24, §5.2 "Admission policies", used with k = 1.2 and 1.4 in
//! the synthesizer experiments, Fig. 14/15).

use blox_core::*;
use serde::Deserialize;

/// Parameters: `k`, the admitted-load bound as a multiple of cluster GPUs.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBased {
    /// Bound on Σ requested GPUs of admitted jobs, as a multiple of cluster GPUs.
    #[serde(default = "default_k")]
    pub k: f64,
}

fn default_k() -> f64 {
    1.2
}

impl AdmissionPolicy for LoadBased {
    fn fork(&self) -> Fork<dyn AdmissionPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn admit(
        &mut self,
        _round: &RoundInfo,
        waiting: &[Job],
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> AdmissionDecision {
        let limit = self.k * cluster.num_gpus() as f64;
        let mut load: f64 = jobs.active().map(|j| j.requested_gpus() as f64).sum();
        let mut accept = Vec::new();
        for job in waiting {
            // FIFO release: the first job that does not fit blocks the ones behind it.
            if load + job.requested_gpus() as f64 > limit {
                break;
            }
            load += job.requested_gpus() as f64;
            accept.push(job.id());
        }
        AdmissionDecision {
            accept,
            reject: Vec::new(),
        }
    }
}

blox_core::register_admission!(
    "load-based",
    "admit FIFO while requested GPUs of admitted jobs <= k x cluster GPUs (Blox §5.2); k = 1.2",
    |p| {
        let policy = p.parse::<LoadBased>()?;
        if !(policy.k > 0.0 && policy.k.is_finite()) {
            return Err(p.error_at("k", "k must be a positive number"));
        }
        Ok(Box::new(policy))
    }
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    #[test]
    fn admits_in_order_until_requested_gpus_exceed_k_times_cluster() {
        let mut cluster = ClusterState::homogeneous(1, 4); // 4 GPUs, k=1.5 -> 6
        let mut state = JobState::new();
        add(&mut state, &mut cluster, job(0, 0.0, 2), &[0, 1]);
        let waiting = vec![job(1, 1.0, 2), job(2, 2.0, 4), job(3, 3.0, 1)];
        let d = LoadBased { k: 1.5 }.admit(&info(0.0), &waiting, &state, &cluster);
        // 2 (admitted) + 2 = 4 <= 6; + 4 = 8 > 6 stops; job 3 waits behind job 2.
        assert_eq!(d.accept, vec![JobId(1)]);
    }

    #[test]
    fn bad_k_is_a_config_error() {
        let mut t = blox_core::config::Table::new();
        t.insert("k".into(), blox_core::Value::Float(-1.0));
        let section = Section::from_table("admission", t);
        let entry = blox_core::registry::find_admission("load-based").unwrap();
        let e = (entry.build)(&section)
            .err()
            .expect("k = -1 refused")
            .to_string();
        assert!(e.contains("k"), "{e}");
    }
}
