//! Reclaim by cost (`reclaim = "cost"`): when the pool of borrowable GPUs
//! shrinks, which running borrowers keep their GPUs. The set that stops
//! should cost least to stop (kueue#8551); equivalently the set that keeps
//! its GPUs should cost most, within the pool and each team's borrowing
//! limit. A greedy walk from the costliest down is not that: with a pool of
//! 8, keeping A (8 GPUs, cost 80) stops B and C (4 GPUs, 60 each), 120 lost
//! where stopping A loses 80.
//!
//! Exact by dynamic programming over GPU counts: for each team, the most
//! cost it can keep on g GPUs (0/1 knapsack within its limit), then one
//! count per team within the pool (a grouped knapsack). Work is about
//! jobs × pool + teams × pool²; past [`MAX_WORK`] (pools of thousands of
//! GPUs) it falls back to the greedy walk, which the log says.

/// Past this many table cells, the greedy walk decides.
pub const MAX_WORK: u64 = 50_000_000;

/// One team's knapsack: the most cost kept on at most g GPUs, the indices
/// of its borrowers, and which of them each table entry took.
type TeamTable = (Vec<f64>, Vec<usize>, Vec<Vec<bool>>);

/// One running borrower: its cost to stop, its team and its GPUs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Borrower {
    pub cost: f64,
    pub team: usize,
    pub gpus: u32,
}

/// Which borrowers keep their GPUs (`true`), within `pool` GPUs in all and
/// `limits[t]` for team `t`, keeping the greatest total cost. Ties go to
/// the earlier borrowers in `items`.
pub fn keep(items: &[Borrower], pool: u32, limits: &[u32]) -> Vec<bool> {
    let teams = limits.len();
    // Everyone fits (the common round): nobody stops.
    let all = vec![true; items.len()];
    if feasible(items, &all, pool, limits) {
        return all;
    }
    // The tables need no more GPUs than the borrowers hold.
    let held: u64 = items.iter().map(|i| u64::from(i.gpus)).sum();
    let pool = pool.min(held as u32);
    let cap = pool as usize;
    let work: u64 =
        items.len() as u64 * (cap as u64 + 1) + teams as u64 * (cap as u64 + 1) * (cap as u64 + 1);
    if work > MAX_WORK {
        tracing::debug!(
            pool,
            borrowers = items.len(),
            "teams: reclaim by cost is greedy (the exact table would be {work} cells)"
        );
        return greedy(items, pool, limits);
    }
    let mut keep = vec![false; items.len()];
    // Per team: best[g] = most cost kept on at most g GPUs, and the choice
    // table to read the set back.
    let mut per_team: Vec<TeamTable> = Vec::with_capacity(teams);
    for (t, &limit) in limits.iter().enumerate() {
        let c = cap.min(limit as usize);
        let idx: Vec<usize> = (0..items.len()).filter(|&i| items[i].team == t).collect();
        let mut best = vec![0.0f64; c + 1];
        let mut took: Vec<Vec<bool>> = Vec::with_capacity(idx.len());
        for &i in &idx {
            let g = items[i].gpus as usize;
            let mut row = vec![false; c + 1];
            if g <= c {
                for w in (g..=c).rev() {
                    let with = best[w - g] + items[i].cost;
                    if with > best[w] {
                        best[w] = with;
                        row[w] = true;
                    }
                }
            }
            took.push(row);
        }
        per_team.push((best, idx, took));
    }
    // Across teams: total[t][p] = most cost of teams 0..=t on at most p
    // GPUs, and how many team t used.
    let mut total = vec![0.0f64; cap + 1];
    let mut used: Vec<Vec<usize>> = Vec::with_capacity(teams);
    for (best, _, _) in &per_team {
        let mut next = vec![0.0f64; cap + 1];
        let mut arg = vec![0usize; cap + 1];
        for p in 0..=cap {
            let mut b = total[p];
            let mut a = 0;
            for (g, v) in best.iter().enumerate().take(p + 1).skip(1) {
                let with = total[p - g] + v;
                if with > b {
                    b = with;
                    a = g;
                }
            }
            next[p] = b;
            arg[p] = a;
        }
        total = next;
        used.push(arg);
    }
    // Read the choices back, last team first.
    let mut p = cap;
    for t in (0..teams).rev() {
        let g = used[t][p];
        p -= g;
        let (_, idx, took) = &per_team[t];
        let mut w = g;
        for k in (0..idx.len()).rev() {
            if took[k][w] {
                keep[idx[k]] = true;
                w -= items[idx[k]].gpus as usize;
            }
        }
    }
    // Borrowers that cost nothing to stop are never needed for the most
    // cost: keep any that still fit rather than stop them for nothing.
    fill(items, 0..items.len(), &mut keep, pool, limits);
    keep
}

/// Adds to `keep`, in `order`, every borrower that still fits the pool and
/// its team's limit beside those kept already.
fn fill(
    items: &[Borrower],
    order: impl IntoIterator<Item = usize>,
    keep: &mut [bool],
    pool: u32,
    limits: &[u32],
) {
    let mut per = vec![0u64; limits.len()];
    let mut used = 0u64;
    for (i, _) in items.iter().zip(keep.iter()).filter(|(_, k)| **k) {
        per[i.team] += u64::from(i.gpus);
        used += u64::from(i.gpus);
    }
    for i in order {
        let (t, g) = (items[i].team, u64::from(items[i].gpus));
        if !keep[i] && used + g <= u64::from(pool) && per[t] + g <= u64::from(limits[t]) {
            keep[i] = true;
            used += g;
            per[t] += g;
        }
    }
}

/// The kept set fits the pool and every team's limit.
pub fn feasible(items: &[Borrower], keep: &[bool], pool: u32, limits: &[u32]) -> bool {
    let mut per = vec![0u64; limits.len()];
    let mut all = 0u64;
    for (i, _) in items.iter().zip(keep).filter(|(_, k)| **k) {
        per[i.team] += u64::from(i.gpus);
        all += u64::from(i.gpus);
    }
    all <= u64::from(pool) && per.iter().zip(limits).all(|(u, l)| *u <= u64::from(*l))
}

/// The costliest first, while the pool and the team's limit hold it.
pub fn greedy(items: &[Borrower], pool: u32, limits: &[u32]) -> Vec<bool> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| items[b].cost.total_cmp(&items[a].cost).then(a.cmp(&b)));
    let mut keep = vec![false; items.len()];
    fill(items, order, &mut keep, pool, limits);
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(cost: f64, team: usize, gpus: u32) -> Borrower {
        Borrower { cost, team, gpus }
    }

    fn kept_cost(items: &[Borrower], k: &[bool]) -> f64 {
        items
            .iter()
            .zip(k)
            .filter(|(_, k)| **k)
            .map(|(i, _)| i.cost)
            .sum()
    }

    /// The case: a pool of 8; keeping A (8 GPUs, 80) would stop B
    /// and C (4 GPUs, 60 each): 120 lost where 80 would do.
    #[test]
    fn the_cheapest_set_stops_not_the_cheapest_jobs_one_by_one() {
        let items = [b(80.0, 0, 8), b(60.0, 1, 4), b(60.0, 1, 4)];
        let limits = [u32::MAX, u32::MAX];
        assert_eq!(greedy(&items, 8, &limits), vec![true, false, false]);
        assert_eq!(keep(&items, 8, &limits), vec![false, true, true]);
    }

    #[test]
    fn borrowers_free_to_stop_keep_their_gpus_while_they_fit() {
        let items = [b(0.0, 0, 2), b(0.0, 0, 8)];
        assert_eq!(keep(&items, 4, &[u32::MAX]), vec![true, false]);
    }

    #[test]
    fn a_teams_borrowing_limit_is_kept() {
        let items = [b(60.0, 1, 4), b(60.0, 1, 4), b(10.0, 0, 4)];
        let k = keep(&items, 8, &[8, 4]);
        assert!(feasible(&items, &k, 8, &[8, 4]));
        assert_eq!(kept_cost(&items, &k), 70.0);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// On random small cases the kept set is feasible and keeps as much
        /// cost as the best of all subsets (brute force).
        #[test]
        fn keeps_as_much_as_brute_force(
            raw in proptest::collection::vec((0u32..100, 0usize..3, 1u32..6), 0..9),
            pool in 0u32..14,
            limits in proptest::collection::vec(0u32..12, 3),
        ) {
            let items: Vec<Borrower> = raw
                .iter()
                .map(|&(c, team, gpus)| Borrower { cost: c as f64, team, gpus })
                .collect();
            let k = keep(&items, pool, &limits);
            proptest::prop_assert!(feasible(&items, &k, pool, &limits));
            let mut best = 0.0f64;
            for mask in 0u32..(1 << items.len()) {
                let m: Vec<bool> = (0..items.len()).map(|i| mask & (1 << i) != 0).collect();
                if feasible(&items, &m, pool, &limits) {
                    best = best.max(kept_cost(&items, &m));
                }
            }
            proptest::prop_assert!((kept_cost(&items, &k) - best).abs() < 1e-9,
                "kept {} of the best {best}", kept_cost(&items, &k));
        }
    }
}
