//! ONES's online evolutionary search (ONES, SC'21, §3.2.2, Fig. 5 and 7–10).
//!
//! A candidate schedule maps every GPU slot to a job (or idle): Eq. 1's
//! `S: J × C → b`, with `b_j^i` the job's per-GPU batch `b_j` wherever job `j`
//! holds GPU `i`. The operators keep `B_j / c_j = b_j` (refresh scales a job by
//! whole GPUs at its per-GPU batch), so a gene only needs the job; global batch
//! and GPU count follow Eq. 2 (`B_j = c_j · b_j`). One job per GPU (Eq. 4).
//!
//! Operators: [`refresh`], [`crossover`], [`mutate`], [`reorder`]; candidates
//! are scored by Eq. 8 ([`score`]) with progress samples drawn once per round
//! (Algorithm 1).

use blox_goodput::{AppLimits, ThroughputParams};
use rand::seq::IndexedRandom;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// A slot nobody holds.
pub const IDLE: u32 = u32::MAX;

/// A candidate schedule: the job index on each GPU slot, or [`IDLE`].
pub type Candidate = Vec<u32>;

/// How a job's throughput `X_j` (samples/s) at another size is predicted.
#[derive(Clone, Debug)]
pub enum Throughput {
    /// The job's fitted throughput model (reported by its agent as `pollux.*`
    /// metrics; ONES measures throughput online, §3.2.1).
    Fitted {
        params: ThroughputParams,
        limits: AppLimits,
    },
    /// Only the current throughput is known: assume it scales linearly.
    Linear { per_gpu: f64 },
    /// Never measured.
    Unknown,
}

impl Throughput {
    /// Samples per second on `c` GPUs over `n` nodes at per-GPU batch `b`.
    pub fn at(&self, n: u32, c: u32, b: u32) -> Option<f64> {
        match self {
            Throughput::Fitted { params, limits } => {
                let cfg = limits.fixed_batch(c, (c as f64) * b as f64);
                let x = params.throughput(n.max(1), c, cfg.atomic as f64, cfg.accum);
                (x.is_finite() && x > 0.0).then_some(x)
            }
            Throughput::Linear { per_gpu } => Some(per_gpu * c as f64),
            Throughput::Unknown => None,
        }
    }
}

/// What the search knows about one job this round.
#[derive(Clone, Debug)]
pub struct JobInfo {
    /// Per-GPU batch `b_j`.
    pub local_batch: u32,
    /// `⌊R_j / b_j⌋`, at least 1: most GPUs the batch-size limit allows.
    pub limit_gpus: u32,
    /// Never launched: refresh gives it one GPU (§3.2.2, refresh (3)).
    pub new: bool,
    /// `T_processed`: seconds it has run.
    pub run_time_s: f64,
    /// `Y_processed`: samples processed.
    pub y_processed: f64,
    /// `Y_j = Y_processed (1/ρ_j − 1)` for this round's sample `ρ_j` (Eq. 7).
    pub y_remaining: f64,
    pub throughput: Throughput,
}

impl JobInfo {
    /// `T_j · c_j = Y_j · c_j / X_j` (Eq. 5, one term of Eq. 8).
    fn utilisation(&self, n: u32, c: u32) -> f64 {
        if c == 0 || self.y_remaining <= 0.0 {
            return 0.0;
        }
        match self.throughput.at(n, c, self.local_batch) {
            Some(x) => self.y_remaining * c as f64 / x,
            None => 0.0,
        }
    }
}

/// One round's search problem.
#[derive(Clone, Debug)]
pub struct Problem {
    /// Node index of every slot; slots are grouped by node.
    pub node_of: Vec<u32>,
    pub nodes: usize,
    /// GPUs per node (largest).
    pub gpus_per_node: u32,
    pub jobs: Vec<JobInfo>,
    /// Uniform mutation rate θ.
    pub mutation_rate: f64,
}

impl Problem {
    fn counts(&self, c: &Candidate) -> Vec<u32> {
        let mut n = vec![0u32; self.jobs.len()];
        for &j in c {
            if j != IDLE {
                n[j as usize] += 1;
            }
        }
        n
    }

    /// GPUs and nodes of every job.
    fn shape(&self, c: &Candidate) -> (Vec<u32>, Vec<u32>) {
        let nj = self.jobs.len();
        let mut gpus = vec![0u32; nj];
        let mut nodes = vec![0u32; nj];
        let mut last = vec![u32::MAX; nj];
        for (s, &j) in c.iter().enumerate() {
            if j == IDLE {
                continue;
            }
            let j = j as usize;
            gpus[j] += 1;
            // Slots are grouped by node: a new node shows as a change.
            if last[j] != self.node_of[s] {
                last[j] = self.node_of[s];
                nodes[j] += 1;
            }
        }
        (gpus, nodes)
    }
}

/// Eq. 8: `Σ_{j running} Y_processed_j · c_j / X_j · (1/ρ_j − 1)`, smaller is better.
pub fn score(p: &Problem, c: &Candidate) -> f64 {
    let (gpus, nodes) = p.shape(c);
    gpus.iter()
        .zip(&nodes)
        .zip(&p.jobs)
        .map(|((&g, &n), job)| job.utilisation(n, g))
        .sum()
}

/// Takes GPUs from jobs above their limit: job `j` keeps `⌊R_j c_j / B_j⌋ =
/// limit_gpus` (refresh step (2)); its last slots go.
fn trim(p: &Problem, c: &mut Candidate) {
    let mut count = p.counts(c);
    for slot in c.iter_mut().rev() {
        let j = *slot;
        if j != IDLE && count[j as usize] > p.jobs[j as usize].limit_gpus {
            count[j as usize] -= 1;
            *slot = IDLE;
        }
    }
}

/// Idle slots, ordered for a job: nodes it already uses first, then nodes with
/// the most idle GPUs (so a job's workers stay close).
fn idle_slots_for(p: &Problem, c: &Candidate, job: u32) -> Vec<usize> {
    let mut idle_on = vec![0u32; p.nodes];
    let mut has = vec![false; p.nodes];
    for (s, &j) in c.iter().enumerate() {
        let n = p.node_of[s] as usize;
        if j == IDLE {
            idle_on[n] += 1;
        } else if j == job {
            has[n] = true;
        }
    }
    let mut slots: Vec<usize> = (0..c.len()).filter(|&s| c[s] == IDLE).collect();
    slots.sort_by_key(|&s| {
        let n = p.node_of[s] as usize;
        (!has[n], std::cmp::Reverse(idle_on[n]), s)
    });
    slots
}

/// Gives `job` up to `extra` idle slots; returns how many it got.
fn grow(p: &Problem, c: &mut Candidate, job: u32, extra: u32) -> u32 {
    let slots = idle_slots_for(p, c, job);
    let k = (extra as usize).min(slots.len());
    for &s in &slots[..k] {
        c[s] = job;
    }
    k as u32
}

/// Refresh (§3.2.2): bring a candidate up to date with the real job status.
/// (1) finished jobs' GPUs are already idle (the carried population is
/// re-indexed to this round's jobs); (2) jobs over their batch-size limit scale
/// down; (3) every new job gets one GPU, taken from the jobs with the largest
/// `T_processed` when too few are idle; (4) idle GPUs go, one choice at a time,
/// to the job whose growth to its limit adds the least sampled utilisation
/// `ΔT·c` (Fig. 7, probability sampling as Algorithm 1).
pub fn refresh(p: &Problem, c: &mut Candidate) {
    trim(p, c);
    let mut count = p.counts(c);
    let new: Vec<u32> = (0..p.jobs.len() as u32)
        .filter(|&j| p.jobs[j as usize].new && count[j as usize] == 0)
        .take(c.len())
        .collect();
    let mut idle = c.iter().filter(|&&j| j == IDLE).count();
    if idle < new.len() {
        // Longest-running jobs give up GPUs first (their last slots).
        let mut donors: Vec<u32> = (0..p.jobs.len() as u32)
            .filter(|&j| count[j as usize] > 0 && !p.jobs[j as usize].new)
            .collect();
        donors.sort_by(|a, b| {
            p.jobs[*b as usize]
                .run_time_s
                .total_cmp(&p.jobs[*a as usize].run_time_s)
                .then(a.cmp(b))
        });
        'take: for d in donors {
            for s in (0..c.len()).rev() {
                if idle >= new.len() {
                    break 'take;
                }
                if c[s] == d {
                    c[s] = IDLE;
                    count[d as usize] -= 1;
                    idle += 1;
                }
            }
        }
    }
    for j in new {
        if grow(p, c, j, 1) == 1 {
            count[j as usize] += 1;
        }
    }
    fill_least_utilisation(p, c);
}

/// Refresh step (4).
fn fill_least_utilisation(p: &Problem, c: &mut Candidate) {
    let (mut gpus, mut nodes) = p.shape(c);
    let gpn = p.gpus_per_node.max(1);
    loop {
        let idle = c.iter().filter(|&&j| j == IDLE).count() as u32;
        if idle == 0 {
            return;
        }
        let mut best: Option<(f64, u32, u32)> = None;
        for (j, job) in p.jobs.iter().enumerate() {
            let have = gpus[j];
            if have >= job.limit_gpus {
                continue;
            }
            let want = job.limit_gpus.min(have + idle);
            // Node count after growing, packed (the exact spread is scored later).
            let n_after = nodes[j].max(want.div_ceil(gpn));
            let delta = job.utilisation(n_after, want) - job.utilisation(nodes[j], have);
            if best.is_none_or(|b| delta < b.0) {
                best = Some((delta, j as u32, want - have));
            }
        }
        let Some((_, j, extra)) = best else {
            return;
        };
        grow(p, c, j, extra);
        let (g, n) = p.shape(c);
        gpus = g;
        nodes = n;
    }
}

/// Fills idle GPUs with jobs picked uniformly at random among those below their
/// limit (the refill after crossover and mutation, Fig. 9), never `exclude`.
fn fill_random(p: &Problem, c: &mut Candidate, exclude: &[u32], rng: &mut impl Rng) {
    let mut count = p.counts(c);
    loop {
        let idle = c.iter().filter(|&&j| j == IDLE).count() as u32;
        if idle == 0 {
            return;
        }
        let eligible: Vec<u32> = (0..p.jobs.len() as u32)
            .filter(|&j| count[j as usize] < p.jobs[j as usize].limit_gpus && !exclude.contains(&j))
            .collect();
        let Some(&j) = eligible.choose(rng) else {
            return;
        };
        let room = p.jobs[j as usize].limit_gpus - count[j as usize];
        let extra = rng.random_range(1..=room.min(idle));
        count[j as usize] += grow(p, c, j, extra);
    }
}

/// Uniform crossover (Fig. 8): on every GPU independently, one child inherits
/// the first parent's job and the other child the second's.
pub fn crossover(a: &Candidate, b: &Candidate, rng: &mut impl Rng) -> (Candidate, Candidate) {
    let mut x = a.clone();
    let mut y = b.clone();
    for s in 0..a.len() {
        if rng.random::<bool>() {
            std::mem::swap(&mut x[s], &mut y[s]);
        }
    }
    (x, y)
}

/// Uniform mutation (Fig. 9): every job in the candidate is preempted with
/// probability θ; the freed GPUs go to other jobs.
pub fn mutate(p: &Problem, c: &mut Candidate, rng: &mut impl Rng) {
    let count = p.counts(c);
    let hit: Vec<u32> = (0..p.jobs.len() as u32)
        .filter(|&j| count[j as usize] > 0 && rng.random::<f64>() < p.mutation_rate)
        .collect();
    for s in c.iter_mut() {
        if hit.contains(s) {
            *s = IDLE;
        }
    }
    fill_random(p, c, &hit, rng);
    // Only the preempted jobs could use what is left: they take it back.
    fill_random(p, c, &[], rng);
}

/// Reorder (Fig. 10): pack each job's workers together, jobs in order of
/// first occurrence, idle GPUs last.
pub fn reorder(c: &mut Candidate) {
    let mut order: Vec<u32> = Vec::new();
    let mut count: std::collections::HashMap<u32, usize> = Default::default();
    for &j in c.iter() {
        if j == IDLE {
            continue;
        }
        let e = count.entry(j).or_insert(0);
        if *e == 0 {
            order.push(j);
        }
        *e += 1;
    }
    let mut s = 0;
    for j in order {
        for _ in 0..count[&j] {
            c[s] = j;
            s += 1;
        }
    }
    for slot in c.iter_mut().skip(s) {
        *slot = IDLE;
    }
}

/// A candidate after crossover: over-limit jobs trimmed, idle GPUs refilled.
fn repair(p: &Problem, c: &mut Candidate, rng: &mut impl Rng) {
    trim(p, c);
    fill_random(p, c, &[], rng);
}

/// A random initial candidate (G₀: "a random job on each GPU"), refreshed.
pub fn random_candidate(p: &Problem, slots: usize, rng: &mut impl Rng) -> Candidate {
    let mut c = vec![IDLE; slots];
    refresh_new_only(p, &mut c);
    fill_random(p, &mut c, &[], rng);
    reorder(&mut c);
    c
}

fn refresh_new_only(p: &Problem, c: &mut Candidate) {
    let new: Vec<u32> = (0..p.jobs.len() as u32)
        .filter(|&j| p.jobs[j as usize].new)
        .take(c.len())
        .collect();
    for j in new {
        grow(p, c, j, 1);
    }
}

/// One generation: from population `pop` (already refreshed), K pairs of
/// parents give 2K children by crossover, K members are mutated; everything is
/// reordered and the K best of the union survive (selection by the sampled
/// Eq. 8 score). Returns the new population, best first, with scores.
pub fn generation(
    p: &Problem,
    pop: Vec<Candidate>,
    k: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<(f64, Candidate)> {
    let seeds: Vec<u64> = (0..k).map(|_| rng.next_u64()).collect();
    let n = pop.len();
    let offspring: Vec<Candidate> = seeds
        .par_iter()
        .flat_map_iter(|&seed| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            let (a, b) = (r.random_range(0..n), r.random_range(0..n));
            let (mut x, mut y) = crossover(&pop[a], &pop[b], &mut r);
            repair(p, &mut x, &mut r);
            repair(p, &mut y, &mut r);
            reorder(&mut x);
            reorder(&mut y);
            let mut m = pop[r.random_range(0..n)].clone();
            mutate(p, &mut m, &mut r);
            reorder(&mut m);
            [x, y, m]
        })
        .collect();
    let mut all: Vec<(f64, Candidate)> = pop
        .into_par_iter()
        .chain(offspring.into_par_iter())
        .map(|c| (score(p, &c), c))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    all.dedup_by(|a, b| a.1 == b.1);
    all.truncate(k.max(1));
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn problem(jobs: Vec<JobInfo>, nodes: usize, gpn: u32) -> Problem {
        Problem {
            node_of: (0..nodes as u32 * gpn).map(|s| s / gpn).collect(),
            nodes,
            gpus_per_node: gpn,
            jobs,
            mutation_rate: 0.2,
        }
    }

    fn job(limit: u32, new: bool, y: f64) -> JobInfo {
        JobInfo {
            local_batch: 32,
            limit_gpus: limit,
            new,
            run_time_s: 100.0 * y,
            y_processed: y,
            y_remaining: y,
            // Sub-linear scaling: 100 samples/s on one GPU, 0.9 efficiency per doubling.
            throughput: Throughput::Linear { per_gpu: 100.0 },
        }
    }

    #[test]
    fn refresh_gives_every_new_job_a_gpu_taking_from_the_longest_running() {
        let p = problem(
            vec![
                job(8, false, 5.0),
                job(8, false, 1.0),
                job(1, true, 0.0),
                job(1, true, 0.0),
            ],
            1,
            4,
        );
        let mut c = vec![0, 0, 1, 1];
        refresh(&p, &mut c);
        let n = p.counts(&c);
        assert_eq!(n[2], 1);
        assert_eq!(n[3], 1);
        // Job 0 has run longest: it gave up both GPUs.
        assert_eq!(n[0], 0, "{c:?}");
        assert_eq!(n[1], 2);
    }

    #[test]
    fn refresh_scales_down_jobs_over_their_limit_and_fills_idle_gpus() {
        let p = problem(vec![job(2, false, 1.0), job(8, false, 3.0)], 2, 4);
        let mut c = vec![0, 0, 0, 0, 0, 0, IDLE, IDLE];
        refresh(&p, &mut c);
        let n = p.counts(&c);
        assert_eq!(n[0], 2);
        assert_eq!(n[1], 6);
    }

    #[test]
    fn reorder_packs_workers_in_order_of_first_occurrence() {
        let mut c = vec![2, 0, IDLE, 2, 0, 1];
        reorder(&mut c);
        assert_eq!(c, vec![2, 2, 0, 0, 1, IDLE]);
    }

    #[test]
    fn score_prefers_running_the_job_with_least_remaining_utilisation() {
        let p = problem(vec![job(1, false, 10.0), job(1, false, 1.0)], 1, 1);
        assert!(score(&p, &vec![1]) < score(&p, &vec![0]));
    }

    fn arb_problem() -> impl Strategy<Value = (Problem, Vec<Candidate>, u64)> {
        (1usize..4, 1u32..5, 1usize..9, any::<u64>()).prop_flat_map(|(nodes, gpn, nj, seed)| {
            let g = nodes * gpn as usize;
            (
                prop::collection::vec((1u32..6, any::<bool>(), 0.0f64..10.0), nj),
                prop::collection::vec(prop::collection::vec(0u32..=nj as u32, g), 2..6),
            )
                .prop_map(move |(js, pop)| {
                    let jobs = js
                        .into_iter()
                        .map(|(l, n, y)| job(l, n, if n { 0.0 } else { y }))
                        .collect();
                    let pop = pop
                        .into_iter()
                        .map(|c| {
                            c.into_iter()
                                .map(|j| if j == nj as u32 { IDLE } else { j })
                                .collect()
                        })
                        .collect();
                    (problem(jobs, nodes, gpn), pop, seed)
                })
        })
    }

    proptest! {
        /// ONES never gives a job more GPUs than its batch-size limit allows
        /// (B_j = c_j·b_j ≤ R_j) and never shares a GPU, whatever it evolves.
        #[test]
        fn evolved_candidates_respect_limits_and_fill_gpus(
            (p, mut pop, seed) in arb_problem()
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for c in pop.iter_mut() {
                refresh(&p, c);
            }
            let k = pop.len();
            let out = generation(&p, pop, k, &mut rng);
            let room: u32 = p.jobs.iter().map(|j| j.limit_gpus).sum();
            for (_, c) in &out {
                prop_assert_eq!(c.len(), p.node_of.len());
                let n = p.counts(c);
                for (j, job) in p.jobs.iter().enumerate() {
                    prop_assert!(n[j] * job.local_batch <= job.limit_gpus * job.local_batch);
                }
                // Eq. 4: no GPU idle while some job could take it.
                let idle = c.iter().filter(|&&j| j == IDLE).count() as u32;
                let used: u32 = n.iter().sum();
                prop_assert!(idle == 0 || used == room, "{:?}", c);
            }
            // Sorted best first.
            prop_assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        }
    }
}
