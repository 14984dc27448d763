//! The ids of jobs that ended and are no longer held whole, as runs of
//! consecutive ids: a simulation of ten million jobs keeps one entry per
//! gap (a job still active or not yet arrived), not one per job.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A set of job ids stored as inclusive ranges, `first → last`, that
/// neither overlap nor touch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct EndedIds(BTreeMap<u64, u64>);

impl EndedIds {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.0
            .range(..=id)
            .next_back()
            .is_some_and(|(_, &last)| id <= last)
    }

    pub(super) fn insert(&mut self, id: u64) {
        let before = self.0.range(..=id).next_back().map(|(&f, &l)| (f, l));
        if before.is_some_and(|(_, last)| id <= last) {
            return;
        }
        let joins_before = before.filter(|&(_, last)| last + 1 == id);
        let after = id
            .checked_add(1)
            .and_then(|next| self.0.remove(&next).map(|last| (next, last)));
        let last = after.map_or(id, |(_, last)| last);
        match joins_before {
            Some((first, _)) => self.0.insert(first, last),
            None => self.0.insert(id, last),
        };
    }

    /// How many runs of consecutive ids it holds.
    #[cfg(test)]
    pub(super) fn runs(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_ending_in_any_order_merge_into_runs() {
        let mut e = EndedIds::default();
        for id in [5, 3, 4, 9, 7, 8, u64::MAX, 0] {
            e.insert(id);
        }
        assert_eq!(e.runs(), 4, "{e:?}"); // 0, 3..=5, 7..=9, MAX
        for id in [0, 3, 4, 5, 7, 8, 9, u64::MAX] {
            assert!(e.contains(id), "{id}");
        }
        for id in [1, 2, 6, 10, u64::MAX - 1] {
            assert!(!e.contains(id), "{id}");
        }
        e.insert(6);
        assert_eq!(e.runs(), 3);
        assert!(e.contains(6));
    }

    proptest! {
        #[test]
        fn it_is_the_set_of_ids_inserted(ids in proptest::collection::vec(0u64..200, 0..300)) {
            let mut e = EndedIds::default();
            let mut want = std::collections::BTreeSet::new();
            for &id in &ids {
                e.insert(id);
                want.insert(id);
            }
            for id in 0..201 {
                prop_assert_eq!(e.contains(id), want.contains(&id));
            }
            // Runs neither overlap nor touch: one per gap in the ids.
            let runs = want.iter().zip(want.iter().skip(1)).filter(|(a, b)| **a + 1 != **b).count()
                + usize::from(!want.is_empty());
            prop_assert_eq!(e.runs(), runs);
        }
    }
}
