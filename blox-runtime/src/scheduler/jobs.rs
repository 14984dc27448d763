//! The scheduler's job table in memory: every job's record by id, and an
//! index of ids by phase kept in step with it, so that a `Status` filtered
//! by phase (`blox status --phase running`, the dashboard's filters) and the
//! per-state gauges walk only the jobs in those phases, not the whole table;
//! and how a record reads on the API (its info, its wire status and phase).

use crate::proto::{JobInfo, JobPhase, JobRecord};
use blox_core::{Job, JobStatus};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::{Deref, DerefMut};

pub(super) fn info_of(r: &JobRecord) -> &JobInfo {
    r.info.as_ref().expect("records always carry their info")
}

/// The reason a cancelled job ends with.
pub(super) const CANCELLED: &str = "cancelled";

/// `JobInfo.status`, the word `blox.proto` documents: a cancelled job is
/// "failed" there (with reason "cancelled"), so that clients that wait for
/// finished, failed or rejected end; `phase` tells it apart.
pub(super) fn wire_status(s: &JobStatus) -> &'static str {
    match s {
        JobStatus::Cancelled => JobStatus::Failed.as_str(),
        other => other.as_str(),
    }
}

/// The API's state of a job of the loop.
pub(super) fn state_of(j: &Job) -> JobPhase {
    match j.status {
        JobStatus::Submitted => JobPhase::Submitted,
        JobStatus::Queued => JobPhase::Queued,
        JobStatus::Running => JobPhase::Running,
        JobStatus::Finished => JobPhase::Finished,
        JobStatus::Failed => JobPhase::Failed,
        JobStatus::Rejected => JobPhase::Rejected,
        JobStatus::Cancelled => JobPhase::Cancelled,
    }
}

/// Job records by id, indexed by phase.
#[derive(Debug, Default)]
pub(super) struct JobTable {
    all: BTreeMap<u64, JobRecord>,
    by_phase: HashMap<i32, BTreeSet<u64>>,
    /// Each job's submission, encoded: its bytes (the bounds on what
    /// waits count them every round; a submission never changes).
    bytes: rustc_hash::FxHashMap<u64, u64>,
}

fn phase_of(r: &JobRecord) -> i32 {
    r.info
        .as_ref()
        .map_or(JobPhase::Unspecified as i32, |i| i.phase)
}

impl JobTable {
    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn get(&self, id: &u64) -> Option<&JobRecord> {
        self.all.get(id)
    }

    /// The record of `id`, to change: the index follows its phase when the
    /// guard is dropped.
    pub fn get_mut(&mut self, id: &u64) -> Option<RecordMut<'_>> {
        let rec = self.all.get_mut(id)?;
        let was = phase_of(rec);
        Some(RecordMut {
            id: *id,
            was,
            rec,
            by_phase: &mut self.by_phase,
        })
    }

    /// The bytes of job `id`'s submission, encoded (0: none kept).
    pub fn submission_bytes(&self, id: u64) -> u64 {
        self.bytes.get(&id).copied().unwrap_or(0)
    }

    pub fn insert(&mut self, id: u64, rec: JobRecord) -> Option<JobRecord> {
        let phase = phase_of(&rec);
        self.bytes.insert(
            id,
            rec.job
                .as_ref()
                .map_or(0, |j| prost::Message::encoded_len(j) as u64),
        );
        let old = self.all.insert(id, rec);
        if let Some(o) = &old {
            self.unindex(id, phase_of(o));
        }
        self.by_phase.entry(phase).or_default().insert(id);
        old
    }

    pub fn remove(&mut self, id: &u64) -> Option<JobRecord> {
        let old = self.all.remove(id)?;
        self.bytes.remove(id);
        self.unindex(*id, phase_of(&old));
        Some(old)
    }

    fn unindex(&mut self, id: u64, phase: i32) {
        if let Some(s) = self.by_phase.get_mut(&phase) {
            s.remove(&id);
            if s.is_empty() {
                self.by_phase.remove(&phase);
            }
        }
    }

    #[cfg(test)]
    pub fn values(&self) -> impl Iterator<Item = &JobRecord> {
        self.all.values()
    }

    /// How many jobs are in `phase`.
    pub fn count(&self, phase: JobPhase) -> usize {
        self.by_phase.get(&(phase as i32)).map_or(0, BTreeSet::len)
    }

    /// Jobs with ids from `from` on, in id order: all of them when
    /// `phases` is empty, else those in one of `phases` (through the index).
    pub fn walk_from<'a>(
        &'a self,
        from: u64,
        phases: &[i32],
    ) -> Box<dyn Iterator<Item = (u64, &'a JobRecord)> + 'a> {
        if phases.is_empty() {
            return Box::new(self.all.range(from..).map(|(k, v)| (*k, v)));
        }
        let mut phases = phases.to_vec();
        phases.sort_unstable();
        phases.dedup();
        let mut heads: Vec<_> = phases
            .iter()
            .filter_map(|p| self.by_phase.get(p))
            .map(|s| s.range(from..).copied().peekable())
            .collect();
        // A merge of a few sorted id sets (at most one per phase).
        let ids = std::iter::from_fn(move || {
            let (i, _) = heads
                .iter_mut()
                .enumerate()
                .filter_map(|(i, h)| h.peek().map(|id| (i, *id)))
                .min_by_key(|(_, id)| *id)?;
            heads[i].next()
        });
        Box::new(ids.filter_map(move |id| self.all.get(&id).map(|r| (id, r))))
    }
}

/// A record being changed; re-indexed by phase when dropped.
pub(super) struct RecordMut<'a> {
    id: u64,
    was: i32,
    rec: &'a mut JobRecord,
    by_phase: &'a mut HashMap<i32, BTreeSet<u64>>,
}

impl Deref for RecordMut<'_> {
    type Target = JobRecord;
    fn deref(&self) -> &JobRecord {
        self.rec
    }
}

impl DerefMut for RecordMut<'_> {
    fn deref_mut(&mut self) -> &mut JobRecord {
        self.rec
    }
}

impl Drop for RecordMut<'_> {
    fn drop(&mut self) {
        let now = phase_of(self.rec);
        if now != self.was {
            if let Some(s) = self.by_phase.get_mut(&self.was) {
                s.remove(&self.id);
                if s.is_empty() {
                    self.by_phase.remove(&self.was);
                }
            }
            self.by_phase.entry(now).or_default().insert(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::JobInfo;
    use proptest::prelude::*;

    fn rec(id: u64, phase: JobPhase) -> JobRecord {
        JobRecord {
            info: Some(JobInfo {
                id,
                phase: phase as i32,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const PHASES: [JobPhase; 5] = [
        JobPhase::Submitted,
        JobPhase::Queued,
        JobPhase::Running,
        JobPhase::Finished,
        JobPhase::Cancelled,
    ];

    proptest! {
        /// After any sequence of inserts, phase changes and removals, a
        /// filtered walk through the index returns what a walk of the whole
        /// table that filters each record would, in id order.
        #[test]
        fn the_index_agrees_with_a_full_walk(
            ops in prop::collection::vec((0u8..3, 1u64..40, 0usize..5), 0..200),
            filter in prop::collection::vec(0usize..5, 0..4),
            from in 0u64..45,
        ) {
            let mut t = JobTable::default();
            for (op, id, p) in ops {
                match op {
                    0 => { t.insert(id, rec(id, PHASES[p])); }
                    1 => {
                        if let Some(mut r) = t.get_mut(&id) {
                            r.info.as_mut().unwrap().set_phase(PHASES[p]);
                        }
                    }
                    _ => { t.remove(&id); }
                }
            }
            let phases: Vec<i32> = filter.iter().map(|&p| PHASES[p] as i32).collect();
            let fast: Vec<u64> = t.walk_from(from, &phases).map(|(id, _)| id).collect();
            let slow: Vec<u64> = t
                .walk_from(from, &[])
                .filter(|(_, r)| phases.is_empty() || phases.contains(&phase_of(r)))
                .map(|(id, _)| id)
                .collect();
            prop_assert_eq!(fast, slow);
            for p in PHASES {
                prop_assert_eq!(
                    t.count(p),
                    t.values().filter(|r| phase_of(r) == p as i32).count()
                );
            }
        }
    }
}
