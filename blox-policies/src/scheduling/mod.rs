//! Scheduling policies: the priority order of runnable jobs and what each gets
//! (Blox §3.1).

pub mod doubling;
pub mod fifo;
pub mod gavel;
pub mod las;
pub mod loss_termination;
pub mod optimus;
pub mod srtf;
pub mod synergy;
pub mod teams;
pub mod themis;
pub mod tiresias;

/// Runnable jobs by `(key, arrival, id)`, floats by `total_cmp`: the key is
/// read once per job and the sort runs over a contiguous table rather than
/// following a pointer per comparison (a large cluster's policy
/// sorts thousands of jobs every round). Ids are distinct, so the order is
/// total and equals a stable sort by the same comparison.
pub fn by_key_then_arrival<'a>(
    jobs: impl Iterator<Item = &'a blox_core::Job>,
    key: impl Fn(&blox_core::Job) -> f64,
) -> Vec<&'a blox_core::Job> {
    KeptOrder::default().sort(jobs, key)
}

/// One entry of the table [`KeptOrder::sort`] sorts: key, arrival, id,
/// the job, and its place among the jobs as they came.
type Keyed<'a> = (f64, f64, blox_core::JobId, &'a blox_core::Job, u32);

fn by_key(a: &Keyed<'_>, b: &Keyed<'_>) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0)
        .then(a.1.total_cmp(&b.1))
        .then(a.2.cmp(&b.2))
}

/// Sorts `v` by [`by_key`] with insertion while that takes at most `budget`
/// moves; whether it finished (`v` is a permutation of itself either way).
fn insertion_sort_within(v: &mut [Keyed<'_>], budget: usize) -> bool {
    let mut moves = 0;
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && by_key(&v[j - 1], &v[j]).is_gt() {
            v.swap(j - 1, j);
            j -= 1;
            moves += 1;
            if moves > budget {
                return false;
            }
        }
    }
    true
}

/// [`by_key_then_arrival`] that starts each round from the last round's
/// order (an incremental order). Keys move little from one round
/// to the next (a running job's attained service or remaining time changes
/// by a round's worth), so the table laid out in the last order is nearly
/// sorted, and a run-detecting sort finishes it in close to one pass
/// instead of sorting thousands of jobs from scratch every round (insertion
/// within a budget of moves, then a full sort if the round reshuffled
/// much). The order is total, so the result is the same whatever the
/// starting layout.
#[derive(Clone, Debug, Default)]
pub struct KeptOrder {
    /// The last order's jobs by id, each with its place in that order.
    rank_by_id: Vec<(blox_core::JobId, u32)>,
}

impl KeptOrder {
    /// `jobs` in `(key, arrival, id)` order. They come in id order
    /// (`JobState`'s iterators), which lets each find its last place by a
    /// merge; in any other order the result is the same, only slower.
    pub fn sort<'a>(
        &mut self,
        jobs: impl Iterator<Item = &'a blox_core::Job>,
        key: impl Fn(&blox_core::Job) -> f64,
    ) -> Vec<&'a blox_core::Job> {
        let mut last = self.rank_by_id.iter().peekable();
        let mut placed: Vec<Option<Keyed<'a>>> = vec![None; self.rank_by_id.len()];
        let mut new = Vec::new();
        for (n, j) in jobs.enumerate() {
            let id = j.id();
            let e = (key(j), j.arrival_s(), id, j, n as u32);
            while last.next_if(|l| l.0 < id).is_some() {}
            match last.peek() {
                Some(&&(lid, rank)) if lid == id && placed[rank as usize].is_none() => {
                    placed[rank as usize] = Some(e)
                }
                _ => new.push(e),
            }
        }
        // The jobs of the last order, laid out in it, are nearly sorted:
        // insertion costs one pass plus a move per pair that swapped since;
        // past a budget of moves (a round that reshuffled much) a full sort
        // finishes it. The new jobs are sorted apart and merged in.
        let mut old: Vec<Keyed<'a>> = placed.into_iter().flatten().collect();
        let budget = 4 * old.len() + 64;
        if !insertion_sort_within(&mut old, budget) {
            old.sort_by(by_key);
        }
        new.sort_by(by_key);
        let mut keyed: Vec<Keyed<'a>> = Vec::with_capacity(old.len() + new.len());
        let (mut a, mut b) = (old.into_iter().peekable(), new.into_iter().peekable());
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if by_key(x, y).is_le() => a.next(),
                (Some(_), None) => a.next(),
                (_, Some(_)) => b.next(),
                (None, None) => break,
            };
            keyed.extend(next);
        }
        // Where each job went, by id: its place as it came says where.
        self.rank_by_id.clear();
        self.rank_by_id
            .resize(keyed.len(), (blox_core::JobId(0), 0));
        for (rank, e) in keyed.iter().enumerate() {
            self.rank_by_id[e.4 as usize] = (e.2, rank as u32);
        }
        if !self.rank_by_id.windows(2).all(|w| w[0].0 < w[1].0) {
            // Jobs that did not come in id order: sort the table so the
            // next merge finds them.
            self.rank_by_id.sort_unstable();
        }
        keyed.into_iter().map(|k| k.3).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blox_core::{Job, JobSpec};
    use proptest::prelude::*;

    proptest! {
        /// Round after round, with jobs coming and going and keys moving
        /// (both the insertion and, past its budget, the full sort)
        /// (ties included), the kept order is the order a fresh sort by
        /// `(key, arrival, id)` gives, whether jobs come in id order or not.
        #[test]
        fn the_kept_order_is_a_fresh_sorts_every_round(
            rounds in proptest::collection::vec(
                proptest::collection::vec((0u64..40, 0u8..6, 0u8..4), 0..40),
                1..12,
            ),
            shuffle in any::<bool>(),
        ) {
            let mut kept = KeptOrder::default();
            for round in rounds {
                let mut by_id = std::collections::BTreeMap::new();
                for (id, key, arrival) in round {
                    let mut j = Job::new(JobSpec::new(id, f64::from(arrival), 1));
                    j.attained_service_gpu_s = f64::from(key) * 0.5;
                    by_id.insert(id, j);
                }
                let mut jobs: Vec<&Job> = by_id.values().collect();
                if shuffle {
                    jobs.reverse();
                }
                let got: Vec<_> = kept
                    .sort(jobs.iter().copied(), |j| j.attained_service_gpu_s)
                    .iter()
                    .map(|j| j.id())
                    .collect();
                let mut want = jobs.clone();
                want.sort_by(|a, b| {
                    a.attained_service_gpu_s
                        .total_cmp(&b.attained_service_gpu_s)
                        .then(a.arrival_s().total_cmp(&b.arrival_s()))
                        .then(a.id().cmp(&b.id()))
                });
                let want: Vec<_> = want.iter().map(|j| j.id()).collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
