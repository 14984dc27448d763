//! Step 5 of a round: admission. Jobs the placement could never place on
//! the cluster as it is ([`crate::PlacementPolicy::never_places`]) are held
//! back, with its words, before the admission policy sees the others (or
//! rejected, when the driver knows the cluster can no longer change:
//! [`RoundLoop::reject_held_next_round`]); the admission policy's decision
//! is checked and carried out.

use super::events::What;
use super::{LoopError, RoundLoop};
use crate::ids::JobId;
use crate::job::Job;
use crate::module::RoundInfo;
use rustc_hash::FxHashSet;
use std::collections::HashMap;

/// Jobs with their place in the wait queue.
type Indexed = Vec<(usize, Job)>;

impl RoundLoop {
    pub(super) fn admit(&mut self, info: &RoundInfo) -> Result<(), LoopError> {
        self.holds.clear();
        for j in &self.waiting {
            if let Some(why) = self.policies.placement.never_places(j, &self.cluster) {
                self.holds.insert(j.id(), why);
            }
        }
        // Offered to admission: the others, in submission order.
        let (offered, held): (Indexed, Indexed) = if self.holds.is_empty() {
            (
                std::mem::take(&mut self.waiting)
                    .into_iter()
                    .enumerate()
                    .collect(),
                Vec::new(),
            )
        } else {
            std::mem::take(&mut self.waiting)
                .into_iter()
                .enumerate()
                .partition(|(_, j)| !self.holds.contains_key(&j.id()))
        };
        let (order, offered): (Vec<usize>, Vec<Job>) = offered.into_iter().unzip();
        let decision = self
            .policies
            .admission
            .admit(info, &offered, &self.jobs, &self.cluster);
        let bad = |reason: String| LoopError::InvalidDecision {
            kind: "admission",
            module: self.policies.names.admission.clone(),
            reason,
        };
        let offered_ids: FxHashSet<JobId> = offered.iter().map(|j| j.id()).collect();
        let checked = (|| {
            let mut verdict: HashMap<JobId, Option<String>> = HashMap::new();
            for id in decision.accept {
                if verdict.insert(id, None).is_some() {
                    return Err(bad(format!("{id} decided twice")));
                }
            }
            for (id, why) in decision.reject {
                if verdict.insert(id, Some(why)).is_some() {
                    return Err(bad(format!("{id} decided twice")));
                }
            }
            if let Some(id) = verdict.keys().find(|id| !offered_ids.contains(id)) {
                let why = if self.holds.contains_key(id) {
                    "decided on a job held back for the placement"
                } else {
                    "decided on a job that is not waiting"
                };
                return Err(bad(format!("{why} ({id})")));
            }
            Ok(verdict)
        })();
        let mut verdict = match checked {
            Ok(v) => v,
            Err(e) => {
                // Everything goes back: nothing submitted is lost.
                let mut all: Indexed = order.into_iter().zip(offered).collect();
                all.extend(held);
                all.sort_by_key(|(i, _)| *i);
                self.waiting = all.into_iter().map(|(_, j)| j).collect();
                return Err(e);
            }
        };
        let mut remaining: Indexed = Vec::new();
        let give_up = std::mem::take(&mut self.reject_holds);
        for (i, mut job) in held {
            if !give_up {
                remaining.push((i, job));
                continue;
            }
            let why = self.holds.remove(&job.id()).unwrap_or_default();
            let reason = format!(
                "placement `{}` could never place it: {why}",
                self.policies.names.placement
            );
            self.jobs.metrics().remove_job(job.id());
            self.end_unadmitted(&mut job, info.now_s, reason);
            self.jobs.record_ended(job);
        }
        for (i, mut job) in order.into_iter().zip(offered) {
            match verdict.remove(&job.id()) {
                None => remaining.push((i, job)),
                Some(None) => {
                    self.events.job(&job, What::Admitted);
                    self.jobs.insert(job)
                }
                Some(Some(reason)) => {
                    self.jobs.metrics().remove_job(job.id());
                    self.end_unadmitted(&mut job, info.now_s, reason);
                    self.jobs.record_ended(job);
                }
            }
        }
        remaining.sort_by_key(|(i, _)| *i);
        self.waiting = remaining.into_iter().map(|(_, j)| j).collect();
        Ok(())
    }

    /// Why the placement holds `job` before admission, if it does.
    pub fn placement_hold(&self, job: JobId) -> Option<&str> {
        self.holds.get(&job).map(String::as_str)
    }
}
