//! PolluxSched's search (Pollux, OSDI'21, §4.2): a genetic algorithm over
//! allocation matrices `A` (jobs × nodes, replicas of job `j` on node `k`).
//!
//! Settings as the artifact runs it (`pollux-data.md` §6.3–6.4): NSGA-II with
//! two objectives — the power mean of scaled, restart-penalised speedups
//! (Eq. 14–15; harmonic, `p = −1`) and cluster utility (Eq. 17) — population
//! 100, 100 offspring per generation, 100 generations, binary tournament, row
//! crossover, the three mutations, and repair (interference avoidance, max
//! replicas, node capacity). Where the paper and the artifact differ, the
//! artifact's choice is taken and noted in `super`'s doc.

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use rayon::prelude::*;
use std::collections::HashSet;

/// Everything fixed during one round's search.
pub struct Problem {
    pub jobs: usize,
    pub nodes: usize,
    /// GPUs per node.
    pub capacity: Vec<u8>,
    /// Current allocation, row-major `jobs × nodes`.
    pub current: Vec<u8>,
    /// Per job: speedup table indexed `[n * (max_r + 1) + r]`.
    pub speedup: Vec<Vec<f64>>,
    pub max_replicas: Vec<u32>,
    /// Restart penalty factor applied when a job's row changes.
    pub restart_factor: Vec<f64>,
    pub weights: Vec<f64>,
    /// Scale from speedup to scaled speedup (`d·N`).
    pub scale: f64,
    /// Power of the power mean (−1: harmonic).
    pub power: f64,
    pub interference_avoidance: bool,
}

/// GA settings.
#[derive(Clone, Copy, Debug)]
pub struct GaSettings {
    pub population: usize,
    pub offspring: usize,
    pub generations: usize,
    pub crossover_prob: f64,
}

impl Default for GaSettings {
    fn default() -> Self {
        GaSettings {
            population: 100,
            offspring: 100,
            generations: 100,
            crossover_prob: 0.9,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Individual {
    pub genes: Vec<u8>,
    /// (fitness F1, utility U), both maximised.
    pub obj: (f64, f64),
}

impl Problem {
    fn row<'a>(&self, a: &'a [u8], j: usize) -> &'a [u8] {
        &a[j * self.nodes..(j + 1) * self.nodes]
    }

    /// Speedup of job `j` with `r` replicas on `n` nodes.
    pub fn speedup_of(&self, j: usize, n: u32, r: u32) -> f64 {
        if r == 0 {
            return 0.0;
        }
        let m = self.max_replicas[j];
        if r > m {
            return 0.0;
        }
        self.speedup[j]
            .get(n as usize * (m as usize + 1) + r as usize)
            .copied()
            .unwrap_or(0.0)
    }

    /// (F1, U) of an allocation (Eq. 14–15 with the restart penalty; Eq. 17).
    pub fn evaluate(&self, a: &[u8]) -> (f64, f64) {
        let mut sum = 0.0;
        let mut wsum = 0.0;
        let mut used = vec![false; self.nodes];
        let mut total_speedup = 0.0;
        for j in 0..self.jobs {
            let row = self.row(a, j);
            let (mut r, mut n) = (0u32, 0u32);
            for (k, &x) in row.iter().enumerate() {
                if x > 0 {
                    r += x as u32;
                    n += 1;
                    used[k] = true;
                }
            }
            let sp = self.speedup_of(j, n, r);
            total_speedup += sp;
            let mut scaled = sp * self.scale;
            if row != self.row(&self.current, j) {
                scaled *= self.restart_factor[j];
            }
            sum += self.weights[j] * (scaled + 1e-3).powf(self.power);
            wsum += self.weights[j];
        }
        let f1 = if self.jobs == 0 {
            0.0
        } else {
            (sum / wsum).powf(1.0 / self.power)
        };
        let active: f64 = used
            .iter()
            .zip(&self.capacity)
            .filter(|(u, _)| **u)
            .map(|(_, c)| *c as f64)
            .sum();
        let u = if active > 0.0 {
            total_speedup / active
        } else {
            0.0
        };
        (f1, u)
    }

    /// The repair steps, in the artifact's order.
    pub fn repair(&self, a: &mut [u8], rng: &mut dyn RngCore) {
        let (jn, nn) = (self.jobs, self.nodes);
        if self.interference_avoidance {
            let distributed: Vec<bool> = (0..jn)
                .map(|j| self.row(a, j).iter().filter(|&&x| x > 0).count() > 1)
                .collect();
            for k in 0..nn {
                let mut seen = 0;
                let mut clearing = false;
                for j in 0..jn {
                    if !clearing && distributed[j] && a[j * nn + k] > 0 {
                        seen += 1;
                        clearing = seen >= 2;
                    }
                    if clearing {
                        a[j * nn + k] = 0;
                    }
                }
            }
        }
        let mut order: Vec<usize> = (0..nn).collect();
        for j in 0..jn {
            let total: u32 = self.row(a, j).iter().map(|&x| x as u32).sum();
            if total > self.max_replicas[j] {
                order.shuffle(rng);
                let mut left = self.max_replicas[j];
                for &k in &order {
                    let x = &mut a[j * nn + k];
                    let keep = (*x as u32).min(left);
                    left -= keep;
                    *x = keep as u8;
                }
            }
        }
        for k in 0..nn {
            let mut left = self.capacity[k];
            for j in 0..jn {
                let x = &mut a[j * nn + k];
                let keep = (*x).min(left);
                left -= keep;
                *x = keep;
            }
        }
    }

    fn mutate(&self, a: &mut [u8], rng: &mut dyn RngCore) {
        let (jn, nn) = (self.jobs, self.nodes);
        for j in 0..jn {
            if rng.random_bool(0.1) {
                a[j * nn..(j + 1) * nn].copy_from_slice(self.row(&self.current, j));
            }
        }
        for j in 0..jn {
            if rng.random_bool(0.1) {
                for k in 0..nn {
                    if rng.random_bool(0.1) {
                        a[j * nn + k] = 0;
                    }
                }
            }
        }
        // Step 3. Elements without replicas share the probability p1 = 1/J, so
        // the gaps between their hits are geometric: draw the gaps instead of
        // one number per element (same distribution, far fewer draws).
        let p1 = 1.0 / jn as f64;
        let geometric = |rng: &mut dyn RngCore| -> u64 {
            if p1 >= 1.0 {
                return 0;
            }
            let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
            (u.ln() / (1.0 - p1).ln()).floor() as u64
        };
        let mut skip = geometric(rng);
        for k in 0..nn {
            let used: u32 = (0..jn).map(|j| a[j * nn + k] as u32).sum();
            if used >= self.capacity[k] as u32 {
                continue;
            }
            let holders = (0..jn).filter(|&j| a[j * nn + k] > 0).count();
            for j in 0..jn {
                let x = a[j * nn + k];
                let hit = if x > 0 {
                    let p2 = 1.0 / holders as f64;
                    rng.random_bool((p1 + p2 - p1 * p2).min(1.0))
                } else if skip == 0 {
                    skip = geometric(rng);
                    true
                } else {
                    skip -= 1;
                    false
                };
                if hit {
                    a[j * nn + k] = rng.random_range(x..=self.capacity[k].max(x));
                }
            }
        }
    }

    fn crossover(&self, a: &[u8], b: &[u8], rng: &mut dyn RngCore) -> (Vec<u8>, Vec<u8>) {
        let cut = rng.random_range(0..self.jobs) * self.nodes;
        let mut x = b[..cut].to_vec();
        x.extend_from_slice(&a[cut..]);
        let mut y = a[..cut].to_vec();
        y.extend_from_slice(&b[cut..]);
        (x, y)
    }
}

fn dominates(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 >= b.0 && a.1 >= b.1 && (a.0 > b.0 || a.1 > b.1)
}

/// Non-dominated sorting for two maximised objectives, best front first
/// (indices into `objs`). Points are taken in decreasing (f0, f1); each goes to
/// the first front none of whose members dominates it — for two objectives a
/// front is summarised by its largest f1 (and the largest f0 reaching it), so
/// the sort is O(n log n + n·fronts) instead of O(n²).
fn fronts(objs: &[(f64, f64)]) -> Vec<Vec<usize>> {
    let mut idx: Vec<usize> = (0..objs.len()).collect();
    idx.sort_by(|&a, &b| {
        objs[b]
            .0
            .total_cmp(&objs[a].0)
            .then(objs[b].1.total_cmp(&objs[a].1))
    });
    let mut out: Vec<Vec<usize>> = Vec::new();
    // Per front: (largest f1, largest f0 among members with that f1).
    let mut tops: Vec<(f64, f64)> = Vec::new();
    for i in idx {
        let (f0, f1) = objs[i];
        let dominated = |t: &(f64, f64)| t.0 > f1 || (t.0 == f1 && t.1 > f0);
        let k = tops
            .iter()
            .position(|t| !dominated(t))
            .unwrap_or(tops.len());
        if k == tops.len() {
            tops.push((f1, f0));
            out.push(vec![i]);
        } else {
            if f1 > tops[k].0 {
                tops[k] = (f1, f0);
            }
            out[k].push(i);
        }
    }
    out
}

/// Crowding distance of each member of one front.
fn crowding(objs: &[(f64, f64)], front: &[usize]) -> Vec<f64> {
    let m = front.len();
    let mut d = vec![0.0; m];
    if m <= 2 {
        return vec![f64::INFINITY; m];
    }
    for obj in 0..2 {
        let get = |i: usize| {
            if obj == 0 {
                objs[front[i]].0
            } else {
                objs[front[i]].1
            }
        };
        let mut idx: Vec<usize> = (0..m).collect();
        idx.sort_by(|&a, &b| get(a).total_cmp(&get(b)));
        let (lo, hi) = (get(idx[0]), get(idx[m - 1]));
        d[idx[0]] = f64::INFINITY;
        d[idx[m - 1]] = f64::INFINITY;
        if hi > lo {
            for w in 1..m - 1 {
                d[idx[w]] += (get(idx[w + 1]) - get(idx[w - 1])) / (hi - lo);
            }
        }
    }
    d
}

/// Ranks and crowding distances of a population.
fn rank_and_crowd(objs: &[(f64, f64)]) -> (Vec<usize>, Vec<f64>) {
    let mut rank = vec![0; objs.len()];
    let mut crowd = vec![0.0; objs.len()];
    for (r, f) in fronts(objs).iter().enumerate() {
        for (i, c) in f.iter().zip(crowding(objs, f)) {
            rank[*i] = r;
            crowd[*i] = c;
        }
    }
    (rank, crowd)
}

/// Runs NSGA-II from `initial` (repaired and evaluated here); returns the final
/// non-dominated set.
pub fn solve(
    p: &Problem,
    initial: Vec<Vec<u8>>,
    s: GaSettings,
    rng: &mut dyn RngCore,
) -> Vec<Individual> {
    let eval = |genes: Vec<u8>| {
        let obj = p.evaluate(&genes);
        Individual { genes, obj }
    };
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut pop: Vec<Individual> = Vec::new();
    for mut g in initial {
        p.repair(&mut g, rng);
        if seen.insert(g.clone()) {
            pop.push(eval(g));
        }
    }
    if pop.is_empty() {
        let mut g = p.current.clone();
        p.repair(&mut g, rng);
        seen.insert(g.clone());
        pop.push(eval(g));
    }
    if p.jobs == 0 || p.nodes == 0 {
        return pop;
    }
    for _ in 1..s.generations {
        let objs: Vec<(f64, f64)> = pop.iter().map(|i| i.obj).collect();
        let (rank, crowd) = rank_and_crowd(&objs);
        let tournament = |rng: &mut dyn RngCore| {
            let a = rng.random_range(0..pop.len());
            let b = rng.random_range(0..pop.len());
            if dominates(objs[a], objs[b]) || (rank[a] < rank[b] && !dominates(objs[b], objs[a])) {
                a
            } else if dominates(objs[b], objs[a]) || rank[b] < rank[a] {
                b
            } else if crowd[a] > crowd[b] {
                a
            } else if crowd[b] > crowd[a] {
                b
            } else if rng.random_bool(0.5) {
                a
            } else {
                b
            }
        };
        let mut children: Vec<Vec<u8>> = Vec::with_capacity(s.offspring);
        let mut tries = 0;
        while children.len() < s.offspring && tries < 100 {
            let mut batch = Vec::new();
            for _ in 0..(s.offspring - children.len()).div_ceil(2) {
                let (a, b) = (tournament(rng), tournament(rng));
                let (mut x, mut y) = if rng.random_bool(s.crossover_prob) {
                    p.crossover(&pop[a].genes, &pop[b].genes, rng)
                } else {
                    (pop[a].genes.clone(), pop[b].genes.clone())
                };
                for c in [&mut x, &mut y] {
                    p.mutate(c, rng);
                    p.repair(c, rng);
                }
                batch.push(x);
                batch.push(y);
            }
            let before = children.len();
            for c in batch {
                if children.len() < s.offspring && seen.insert(c.clone()) {
                    children.push(c);
                }
            }
            if children.len() == before {
                tries += 1;
            }
        }
        if children.is_empty() {
            break;
        }
        let evaluated: Vec<Individual> =
            children.into_par_iter().with_min_len(8).map(eval).collect();
        pop.extend(evaluated);
        // Survival: fronts in order, the last one cut by crowding distance.
        let objs: Vec<(f64, f64)> = pop.iter().map(|i| i.obj).collect();
        let mut keep: Vec<usize> = Vec::with_capacity(s.population);
        for f in fronts(&objs) {
            if keep.len() + f.len() <= s.population {
                keep.extend(&f);
            } else {
                let c = crowding(&objs, &f);
                let mut idx: Vec<usize> = (0..f.len()).collect();
                idx.sort_by(|&a, &b| c[b].total_cmp(&c[a]));
                keep.extend(
                    idx.into_iter()
                        .take(s.population - keep.len())
                        .map(|i| f[i]),
                );
                break;
            }
        }
        keep.sort_unstable();
        let mut old: Vec<Option<Individual>> = pop.into_iter().map(Some).collect();
        pop = keep
            .into_iter()
            .map(|i| old[i].take().expect("kept once"))
            .collect();
        seen = pop.iter().map(|i| i.genes.clone()).collect();
    }
    let objs: Vec<(f64, f64)> = pop.iter().map(|i| i.obj).collect();
    let first: HashSet<usize> = fronts(&objs)
        .into_iter()
        .next()
        .unwrap_or_default()
        .into_iter()
        .collect();
    pop.into_iter()
        .enumerate()
        .filter(|(i, _)| first.contains(i))
        .map(|(_, x)| x)
        .collect()
}

/// The member with the largest F1 (first on ties).
pub fn pick(front: &[Individual]) -> Option<&Individual> {
    front
        .iter()
        .fold(None, |best: Option<&Individual>, x| match best {
            Some(b) if b.obj.0 >= x.obj.0 => Some(b),
            _ => Some(x),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Linear speedup up to max replicas, 10 % less when spread over nodes.
    fn problem(jobs: usize, nodes: usize, max_r: u32, current: Vec<u8>) -> Problem {
        let speedup = (0..jobs)
            .map(|_| {
                let mut t = vec![0.0; (nodes + 1) * (max_r as usize + 1)];
                for n in 1..=nodes {
                    for r in n as u32..=max_r {
                        t[n * (max_r as usize + 1) + r as usize] =
                            r as f64 * if n > 1 { 0.9 } else { 1.0 };
                    }
                }
                t
            })
            .collect();
        Problem {
            jobs,
            nodes,
            capacity: vec![4; nodes],
            current,
            speedup,
            max_replicas: vec![max_r; jobs],
            restart_factor: vec![0.5; jobs],
            weights: vec![1.0; jobs],
            scale: 0.25,
            power: -1.0,
            interference_avoidance: true,
        }
    }

    proptest! {
        /// After repair no node is over capacity, no job exceeds its max
        /// replicas, and no node hosts two distributed jobs.
        #[test]
        fn repair_respects_capacity_and_interference(
            jobs in 1usize..8, nodes in 1usize..6, seed in any::<u64>(), max_r in 1u32..12,
            genes in proptest::collection::vec(0u8..=6, 48),
        ) {
            let p = problem(jobs, nodes, max_r, vec![0; jobs * nodes]);
            let mut a: Vec<u8> = genes.iter().cycle().take(jobs * nodes).copied().collect();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            p.repair(&mut a, &mut rng);
            for k in 0..nodes {
                let used: u32 = (0..jobs).map(|j| a[j * nodes + k] as u32).sum();
                prop_assert!(used <= 4);
                let distributed = (0..jobs)
                    .filter(|&j| a[j * nodes + k] > 0 && (0..nodes).filter(|&q| a[j * nodes + q] > 0).count() > 1)
                    .count();
                prop_assert!(distributed <= 1, "node {k}: {a:?}");
            }
            for j in 0..jobs {
                let r: u32 = (0..nodes).map(|k| a[j * nodes + k] as u32).sum();
                prop_assert!(r <= max_r);
            }
        }
    }

    /// The O(n²) definition.
    fn fronts_naive(objs: &[(f64, f64)]) -> Vec<usize> {
        let mut rank = vec![usize::MAX; objs.len()];
        let mut r = 0;
        while rank.contains(&usize::MAX) {
            let open: Vec<usize> = (0..objs.len()).filter(|&i| rank[i] == usize::MAX).collect();
            for &i in &open {
                if !open.iter().any(|&j| dominates(objs[j], objs[i])) {
                    rank[i] = r;
                }
            }
            r += 1;
        }
        rank
    }

    proptest! {
        #[test]
        fn fast_sort_matches_the_definition(pts in proptest::collection::vec((0u8..6, 0u8..6), 1..60)) {
            let objs: Vec<(f64, f64)> = pts.iter().map(|&(a, b)| (a as f64, b as f64)).collect();
            let mut rank = vec![0; objs.len()];
            for (r, f) in fronts(&objs).iter().enumerate() {
                for &i in f {
                    rank[i] = r;
                }
            }
            prop_assert_eq!(rank, fronts_naive(&objs));
        }
    }

    #[test]
    fn restart_penalty_makes_the_unchanged_allocation_win_a_tie() {
        // Job 0 on node 0 now; the same allocation on node 1 has equal speedup.
        let p = problem(1, 2, 4, vec![2, 0]);
        let stay = p.evaluate(&[2, 0]);
        let moved = p.evaluate(&[0, 2]);
        assert!(stay.0 > moved.0, "{stay:?} vs {moved:?}");
        assert_eq!(stay.1, moved.1);
    }

    #[test]
    fn search_fills_an_idle_cluster() {
        let p = problem(4, 4, 4, vec![0; 16]);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let front = solve(&p, vec![p.current.clone()], GaSettings::default(), &mut rng);
        let best = pick(&front).unwrap();
        // Four jobs, four nodes, linear speedup: the harmonic mean is best with
        // every job on its own node with all 4 GPUs.
        for j in 0..4 {
            let row = &best.genes[j * 4..j * 4 + 4];
            assert_eq!(
                row.iter().filter(|&&x| x > 0).count(),
                1,
                "{:?}",
                best.genes
            );
            assert_eq!(
                row.iter().map(|&x| x as u32).sum::<u32>(),
                4,
                "{:?}",
                best.genes
            );
        }
    }
}
