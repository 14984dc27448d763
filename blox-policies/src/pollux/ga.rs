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

use rand::SeedableRng;
use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

/// An allocation matrix stored sparsely: per job (row), its non-zero cells
/// `(node index, replicas)` sorted by node. Cost of every operation is
/// proportional to jobs plus non-zero cells, not to jobs × nodes — at 2,048
/// GPUs the dense matrix has hundreds of thousands of cells, almost all zero.
/// Cells `(node index, replicas)`.
type Row = [(u32, u8)];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alloc {
    jobs: u32,
    /// One allocation (each offspring is one): the `jobs + 1` row starts
    /// (in `.0`), then the cells; row `j` is the cells `start[j]..start[j + 1]`.
    data: Vec<(u32, u8)>,
}

impl Alloc {
    /// No job holds anything.
    pub fn empty(jobs: usize) -> Self {
        Alloc {
            jobs: jobs as u32,
            data: vec![(0, 0); jobs + 1],
        }
    }

    /// From `(job, node, replicas)` triples, sorted by job then node (each
    /// pair once) with no zero counts.
    fn from_rows(jobs: usize, t: &[(u32, u32, u8)]) -> Self {
        let mut data = Vec::with_capacity(jobs + 1 + t.len());
        data.resize(jobs + 1, (0, 0));
        for c in t {
            data[c.0 as usize + 1].0 += 1;
        }
        for j in 0..jobs {
            data[j + 1].0 += data[j].0;
        }
        data.extend(t.iter().map(|&(_, k, x)| (k, x)));
        Alloc {
            jobs: jobs as u32,
            data,
        }
    }

    /// From `(job, node, replicas)` triples, in any order; zero counts dropped.
    pub fn from_triples(jobs: usize, mut t: Vec<(u32, u32, u8)>) -> Self {
        t.retain(|c| c.2 > 0);
        t.sort_unstable_by_key(|c| (c.0, c.1));
        Self::from_rows(jobs, &t)
    }

    /// From a dense row-major `jobs × nodes` matrix.
    pub fn from_dense(a: &[u8], jobs: usize, nodes: usize) -> Self {
        let t = (0..jobs)
            .flat_map(|j| (0..nodes).map(move |k| (j as u32, k as u32, a[j * nodes + k])))
            .collect();
        Self::from_triples(jobs, t)
    }

    /// The dense row-major matrix.
    pub fn to_dense(&self, nodes: usize) -> Vec<u8> {
        let mut a = vec![0u8; self.jobs() * nodes];
        for j in 0..self.jobs() {
            for &(k, x) in self.row(j) {
                a[j * nodes + k as usize] = x;
            }
        }
        a
    }

    pub fn jobs(&self) -> usize {
        self.jobs as usize
    }

    /// The row starts, then the cells.
    #[inline]
    fn parts(&self) -> (&Row, &Row) {
        self.data.split_at(self.jobs as usize + 1)
    }

    /// Job `j`'s non-zero cells, by node.
    #[inline]
    pub fn row(&self, j: usize) -> &[(u32, u8)] {
        let (start, cells) = self.parts();
        &cells[start[j].0 as usize..start[j + 1].0 as usize]
    }

    /// All cells as `(job, node, replicas)`.
    #[cfg(test)]
    fn triples(&self) -> Vec<(u32, u32, u8)> {
        (0..self.jobs())
            .flat_map(|j| self.row(j).iter().map(move |&(k, x)| (j as u32, k, x)))
            .collect()
    }

    /// A 128-bit fingerprint for duplicate detection (two multiplicative
    /// hashes over the words; collisions are negligible at these sizes).
    fn key(&self) -> (u64, u64) {
        let (start, cells) = self.parts();
        key_of(
            start.iter().map(|&(x, _)| x),
            cells.iter().map(|&(k, x)| (k, x)),
        )
    }
}

/// [`Alloc::key`] of the allocation with these row starts and cells.
fn key_of(start: impl Iterator<Item = u32>, cells: impl Iterator<Item = (u32, u8)>) -> (u64, u64) {
    let (mut h1, mut h2) = (0x9e37_79b9_7f4a_7c15u64, 0xc2b2_ae3d_27d4_eb4fu64);
    let mut mix = |v: u64| {
        h1 = (h1 ^ v).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
        h2 = (h2 ^ v.rotate_left(17))
            .wrapping_mul(0xff51_afd7_ed55_8ccd)
            .rotate_left(31);
    };
    for x in start {
        mix(x as u64);
    }
    for (k, x) in cells {
        mix(((k as u64) << 8) | x as u64);
    }
    (h1, h2)
}

/// A parent as mutation reads it: rows `< cut` of `a`, the rest of `b` — a
/// crossover's child without copying either parent (`cut = jobs`: `a` whole).
#[derive(Clone, Copy)]
pub(crate) struct Parent<'a> {
    a: &'a Alloc,
    b: &'a Alloc,
    cut: usize,
}

impl<'a> Parent<'a> {
    fn whole(a: &'a Alloc) -> Self {
        Parent {
            a,
            b: a,
            cut: a.jobs(),
        }
    }

    fn row(&self, j: usize) -> &'a [(u32, u8)] {
        if j < self.cut {
            self.a.row(j)
        } else {
            self.b.row(j)
        }
    }

    #[cfg(test)]
    fn to_alloc(self) -> Alloc {
        let jobs = self.a.jobs();
        let t = (0..jobs)
            .flat_map(|j| self.row(j).iter().map(move |&(k, x)| (j as u32, k, x)))
            .collect();
        Alloc::from_triples(jobs, t)
    }
}

/// Everything fixed during one round's search.
pub struct Problem {
    pub jobs: usize,
    pub nodes: usize,
    /// GPUs per node.
    pub capacity: Vec<u8>,
    /// Current allocation.
    pub current: Alloc,
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
    pub genes: Alloc,
    /// (fitness F1, utility U), both maximised.
    pub obj: (f64, f64),
}

impl Problem {
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
    pub fn evaluate(&self, a: &Alloc) -> (f64, f64) {
        let mut sum = 0.0;
        let mut wsum = 0.0;
        // Nodes in use, as bits (on the stack up to 512 nodes).
        let words = self.nodes.div_ceil(64);
        let (mut small, mut large) = ([0u64; 8], Vec::new());
        let used: &mut [u64] = if words <= small.len() {
            &mut small[..words]
        } else {
            large.resize(words, 0);
            &mut large
        };
        let mut total_speedup = 0.0;
        for j in 0..self.jobs {
            let row = a.row(j);
            let r: u32 = row.iter().map(|c| c.1 as u32).sum();
            for c in row {
                used[c.0 as usize / 64] |= 1 << (c.0 % 64);
            }
            let sp = self.speedup_of(j, row.len() as u32, r);
            total_speedup += sp;
            let mut scaled = sp * self.scale;
            if row != self.current.row(j) {
                scaled *= self.restart_factor[j];
            }
            let x = scaled + 1e-3;
            sum += self.weights[j]
                * if self.power == -1.0 {
                    1.0 / x
                } else {
                    x.powf(self.power)
                };
            wsum += self.weights[j];
        }
        let f1 = if self.jobs == 0 {
            0.0
        } else {
            (sum / wsum).powf(1.0 / self.power)
        };
        let active: f64 = (0..self.nodes)
            .filter(|&k| used[k / 64] & (1 << (k % 64)) != 0)
            .map(|k| self.capacity[k] as f64)
            .sum();
        let u = if active > 0.0 {
            total_speedup / active
        } else {
            0.0
        };
        (f1, u)
    }
}

/// Bernoulli(p) failure runs, with `ln(1 − p)` worked out once.
#[derive(Clone, Copy)]
struct Geometric {
    p: f64,
    ln_q: f64,
}

impl Geometric {
    fn new(p: f64) -> Self {
        Geometric {
            p,
            ln_q: (1.0 - p).ln(),
        }
    }

    /// Failures before the next success.
    fn draw<R: Rng + ?Sized>(self, rng: &mut R) -> u64 {
        if self.p >= 1.0 {
            return 0;
        }
        let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
        (u.ln() / self.ln_q).floor().min(u64::MAX as f64 / 2.0) as u64
    }
}

/// Hashes the search's keys, which are hashes already, by folding their words.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = self.0.rotate_left(23) ^ v;
    }
}

/// The keys of the individuals present (membership only: never iterated).
type KeySet = HashSet<(u64, u64), std::hash::BuildHasherDefault<KeyHasher>>;

/// `x`'s bits as an integer that orders as [`f64::total_cmp`] orders `x`.
fn ordered(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
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
    // Ties by index: the order a stable sort gives, without its buffer.
    let mut keyed: Vec<(u64, u64, usize)> = objs
        .iter()
        .enumerate()
        .map(|(i, o)| (!ordered(o.0), !ordered(o.1), i))
        .collect();
    keyed.sort_unstable();
    let idx = keyed.into_iter().map(|k| k.2);
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
        let mut keyed: Vec<(u64, usize)> = (0..m).map(|i| (ordered(get(i)), i)).collect();
        keyed.sort_unstable();
        let idx: Vec<usize> = keyed.into_iter().map(|k| k.1).collect();
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
///
/// Each generation's matings run in parallel, but they are small (tens of
/// microseconds in all), and a pool worker that found nothing to do goes to
/// sleep sooner than the next generation comes: waking it took longer than
/// the work it was woken for. So, called from outside the pool, the search
/// runs on a worker while the others stay awake for the length of the search,
/// taking each generation's matings as soon as they are offered
/// (`keep_warm`). Inside a pool's work (a sweep's simulations) the other
/// workers are busy and the search runs as it is.
pub fn solve(
    p: &Problem,
    initial: Vec<Alloc>,
    s: GaSettings,
    rng: &mut (dyn RngCore + Send),
) -> Vec<Individual> {
    if rayon::current_thread_index().is_some() {
        return search(p, initial, s, rng);
    }
    let helpers = rayon::current_num_threads().saturating_sub(1);
    let done = AtomicBool::new(false);
    rayon::scope(|scope| {
        let home = rayon::current_thread_index();
        let done = &done;
        for _ in 0..helpers {
            scope.spawn(move |_| keep_warm(done, home));
        }
        // Released however the search ends: were it to panic, the scope
        // would otherwise wait for its helpers forever.
        let _release = Release(done);
        search(p, initial, s, rng)
    })
}

/// Tells [`keep_warm`]'s helpers to stop when dropped.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs whatever work the pool has until `done`, spinning (and now and then
/// yielding the CPU) in between. On the search's own thread (`home`), which
/// may take it up while it waits for its matings, it returns at once.
fn keep_warm(done: &AtomicBool, home: Option<usize>) {
    if rayon::current_thread_index() == home {
        return;
    }
    let mut idle = 0u32;
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => idle = 0,
            _ => {
                idle = idle.wrapping_add(1);
                if idle.is_multiple_of(64) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

fn search(
    p: &Problem,
    initial: Vec<Alloc>,
    s: GaSettings,
    rng: &mut (dyn RngCore + Send),
) -> Vec<Individual> {
    let eval = |genes: Alloc| {
        let obj = p.evaluate(&genes);
        Individual { genes, obj }
    };
    let mut seen = KeySet::default();
    // The population, and each member's key.
    let mut pop: Vec<Individual> = Vec::new();
    let mut keys: Vec<(u64, u64)> = Vec::new();
    for mut g in initial {
        p.repair(&mut g, rng);
        let key = g.key();
        if seen.insert(key) {
            pop.push(eval(g));
            keys.push(key);
        }
    }
    if pop.is_empty() {
        let mut g = p.current.clone();
        p.repair(&mut g, rng);
        seen.insert(g.key());
        keys.push(g.key());
        pop.push(eval(g));
    }
    if p.jobs == 0 || p.nodes == 0 {
        return pop;
    }
    // Each member's front and crowding distance; after the first generation
    // they come from the survival step.
    let (mut rank, mut crowd) = rank_and_crowd(&pop.iter().map(|i| i.obj).collect::<Vec<_>>());
    for _ in 1..s.generations {
        let objs: Vec<(f64, f64)> = pop.iter().map(|i| i.obj).collect();
        let tournament = |rng: &mut ChaCha8Rng| {
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
        // Matings run in parallel; each draws from its own generator seeded
        // from the round's, so the result does not depend on thread timing.
        // Each child is evaluated where it is made. One already in the
        // population is dropped there (the step below would drop it): it is
        // neither built nor evaluated. A repeat within this batch is still
        // evaluated for nothing, cheaper than a second parallel pass.
        let mate = |seed: u64, known: &KeySet| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let (a, b) = (tournament(&mut rng), tournament(&mut rng));
            let (a, b) = (&pop[a].genes, &pop[b].genes);
            let (x, y) = if rng.random_bool(s.crossover_prob) {
                p.crossover(a, b, &mut rng)
            } else {
                (Parent::whole(a), Parent::whole(b))
            };
            [x, y].map(|parent| {
                p.offspring(parent, &mut rng, known)
                    .map(|(key, genes)| (key, eval(genes)))
            })
        };
        let mut children: Vec<Individual> = Vec::with_capacity(s.offspring);
        let mut tries = 0;
        while children.len() < s.offspring && tries < 100 {
            let seeds: Vec<u64> = (0..(s.offspring - children.len()).div_ceil(2))
                .map(|_| rng.next_u64())
                .collect();
            type Child = Option<((u64, u64), Individual)>;
            let batch: Vec<[Child; 2]> = seeds
                .into_par_iter()
                .map(|seed| mate(seed, &seen))
                .collect();
            let before = children.len();
            for (key, c) in batch.into_iter().flatten().flatten() {
                if children.len() < s.offspring && seen.insert(key) {
                    children.push(c);
                    keys.push(key);
                }
            }
            if children.len() == before {
                tries += 1;
            }
        }
        if children.is_empty() {
            break;
        }
        pop.extend(children);
        // Survival: fronts in order, the last one cut by crowding distance.
        // The survivors' fronts and distances for the next generation come
        // with them, as sorting the survivors again would find them: a whole
        // front keeps both; the cut front keeps its rank, its distances taken
        // again among its survivors (in the front's order).
        let objs: Vec<(f64, f64)> = pop.iter().map(|i| i.obj).collect();
        // (member, front, crowding distance)
        let mut keep: Vec<(usize, usize, f64)> = Vec::with_capacity(s.population);
        for (r, f) in fronts(&objs).into_iter().enumerate() {
            let c = crowding(&objs, &f);
            if keep.len() + f.len() <= s.population {
                keep.extend(f.iter().zip(c).map(|(&i, c)| (i, r, c)));
            } else {
                let mut keyed: Vec<(u64, usize)> = c
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| (!ordered(x), i))
                    .collect();
                keyed.sort_unstable();
                let mut chosen: Vec<usize> = keyed
                    .into_iter()
                    .take(s.population - keep.len())
                    .map(|k| k.1)
                    .collect();
                chosen.sort_unstable();
                let survivors: Vec<usize> = chosen.into_iter().map(|q| f[q]).collect();
                let c = crowding(&objs, &survivors);
                keep.extend(survivors.iter().zip(c).map(|(&i, c)| (i, r, c)));
                break;
            }
        }
        keep.sort_unstable_by_key(|k| k.0);
        rank = keep.iter().map(|k| k.1).collect();
        crowd = keep.iter().map(|k| k.2).collect();
        let keep: Vec<usize> = keep.into_iter().map(|k| k.0).collect();
        let mut old: Vec<Option<Individual>> = pop.into_iter().map(Some).collect();
        pop = keep
            .iter()
            .map(|&i| old[i].take().expect("kept once"))
            .collect();
        debug_assert!({
            let (r, c) = rank_and_crowd(&pop.iter().map(|i| i.obj).collect::<Vec<_>>());
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            r == rank && bits(&c) == bits(&crowd)
        });
        keys = keep.iter().map(|&i| keys[i]).collect();
        seen.clear();
        seen.extend(keys.iter().copied());
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

mod ops;
#[cfg(test)]
mod tests;
