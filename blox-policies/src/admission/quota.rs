//! Quota admission: per-user limits on admitted jobs and on the GPUs they ask
//! for (Blox, EuroSys'24, §3.1 "Admission policy": admission enforces limits
//! such as per-user quotas before jobs reach the scheduler).
//!
//! Each round the waiting jobs are taken in submission order. A job is admitted
//! if, with it, its user stays within `max_jobs` admitted unfinished jobs and
//! `max_gpus` requested GPUs; otherwise it waits. Users do not block one
//! another. A job that alone asks for more GPUs than its user may ever hold is
//! rejected with the reason, rather than left waiting forever. Jobs without a
//! user share the anonymous user `""`. Per-user overrides:
//!
//! ```toml
//! [admission]
//! policy = "quota"
//! max_jobs = 4          # default for every user (omit: unlimited)
//! max_gpus = 16
//! [admission.users.alice]
//! max_gpus = 32
//! ```

use blox_core::*;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// Limits of one user; `None` is unlimited.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_jobs: Option<u32>,
    pub max_gpus: Option<u32>,
}

/// Parameters: default limits plus per-user overrides.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    #[serde(flatten)]
    pub default: Limits,
    #[serde(default)]
    pub users: BTreeMap<String, Limits>,
}

impl Quota {
    /// A user's limits: the override's fields where given, else the default's.
    fn limits(&self, user: &str) -> Limits {
        match self.users.get(user) {
            Some(o) => Limits {
                max_jobs: o.max_jobs.or(self.default.max_jobs),
                max_gpus: o.max_gpus.or(self.default.max_gpus),
            },
            None => self.default,
        }
    }
}

fn user_of(j: &Job) -> &str {
    j.spec.user.as_deref().unwrap_or("")
}

impl AdmissionPolicy for Quota {
    fn fork(&self) -> Fork<dyn AdmissionPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn admit(
        &mut self,
        _round: &RoundInfo,
        waiting: &[Job],
        jobs: &JobState,
        _c: &ClusterState,
    ) -> AdmissionDecision {
        // (jobs, GPUs) admitted and unfinished, per user.
        let mut used: HashMap<&str, (u32, u32)> = HashMap::new();
        for j in jobs.active() {
            let u = used.entry(user_of(j)).or_default();
            u.0 += 1;
            u.1 += j.requested_gpus();
        }
        let mut out = AdmissionDecision::default();
        for job in waiting {
            let user = user_of(job);
            let lim = self.limits(user);
            let want = job.requested_gpus();
            if let Some(g) = lim.max_gpus.filter(|&g| want > g) {
                out.reject.push((
                    job.id(),
                    format!("asks for {want} GPUs but user `{user}` may hold at most {g}"),
                ));
                continue;
            }
            let u = used.entry(user).or_default();
            let jobs_ok = lim.max_jobs.is_none_or(|m| u.0 < m);
            let gpus_ok = lim.max_gpus.is_none_or(|m| u.1 + want <= m);
            if jobs_ok && gpus_ok {
                u.0 += 1;
                u.1 += want;
                out.accept.push(job.id());
            }
        }
        out
    }
}

blox_core::register_admission!(
    "quota",
    "per-user limits on admitted jobs and requested GPUs; over-quota jobs wait (Blox §3.1)",
    |p| Ok(Box::new(p.parse::<Quota>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn owned(id: u64, user: &str, gpus: u32) -> Job {
        let mut j = job(id, id as f64, gpus);
        j.spec.user = Some(user.into());
        j
    }

    #[test]
    fn a_user_over_quota_waits_without_blocking_others() {
        let cluster = ClusterState::homogeneous(4, 4);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, owned(1, "alice", 4), &[0, 1, 2, 3]);
        let waiting = vec![
            owned(2, "alice", 2),
            owned(3, "bob", 8),
            owned(4, "alice", 1),
        ];
        let mut q = Quota {
            default: Limits {
                max_jobs: None,
                max_gpus: Some(6),
            },
            users: BTreeMap::from([(
                "bob".to_string(),
                Limits {
                    max_jobs: Some(1),
                    max_gpus: Some(8),
                },
            )]),
        };
        let d = q.admit(&info(0.0), &waiting, &state, &cluster);
        // alice: 4 + 2 = 6 fits; then 6 + 1 > 6 waits. bob: 8 within his override.
        assert_eq!(d.accept, vec![JobId(2), JobId(3)]);
        assert!(d.reject.is_empty());
    }

    #[test]
    fn a_job_larger_than_its_users_quota_is_rejected_with_the_reason() {
        let cluster = ClusterState::homogeneous(4, 4);
        let state = JobState::new();
        let mut q = Quota {
            default: Limits {
                max_jobs: Some(2),
                max_gpus: Some(4),
            },
            users: BTreeMap::new(),
        };
        let d = q.admit(&info(0.0), &[owned(1, "carol", 8)], &state, &cluster);
        assert!(d.accept.is_empty());
        assert_eq!(d.reject.len(), 1);
        assert!(d.reject[0].1.contains("at most 4"), "{}", d.reject[0].1);
    }

    #[test]
    fn job_count_limit_counts_admitted_unfinished_jobs() {
        let cluster = ClusterState::homogeneous(4, 4);
        let mut state = JobState::new();
        let mut c = cluster.clone();
        add(&mut state, &mut c, owned(1, "dave", 1), &[]);
        let mut q = Quota {
            default: Limits {
                max_jobs: Some(2),
                max_gpus: None,
            },
            users: BTreeMap::new(),
        };
        let waiting = vec![owned(2, "dave", 1), owned(3, "dave", 1)];
        let d = q.admit(&info(0.0), &waiting, &state, &cluster);
        assert_eq!(d.accept, vec![JobId(2)]);
    }
}
