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

use blox_core::metric;
use blox_goodput::{AppLimits, ThroughputParams};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use std::sync::OnceLock;

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

impl Throughput {
    /// The job's fitted model from its agent's `pollux.*` metrics, else
    /// `per_gpu` (its last measured throughput per GPU) scaled linearly.
    pub fn from_metrics(m: impl Fn(&str) -> Option<f64>, per_gpu: Option<f64>) -> Self {
        match blox_goodput::AgentReport::from_metrics(m).and_then(|r| Some((r.params?, r.limits))) {
            Some((params, limits)) => Throughput::Fitted { params, limits },
            None => match per_gpu {
                Some(per_gpu) => Throughput::Linear { per_gpu },
                None => Throughput::Unknown,
            },
        }
    }
}

/// A job's submitted global batch (its spec's, else the one it runs at).
pub fn submitted_batch(job: &blox_core::Job) -> u32 {
    job.spec.batch_size.or(job.current_batch_size).unwrap_or(1)
}

/// A job's per-GPU batch under ONES: its submitted global batch over the
/// GPUs it asked for, capped at what fits one GPU (`max_local_batch_size`).
pub fn per_gpu_batch(job: &blox_core::Job, m: impl Fn(&str) -> Option<f64>) -> u32 {
    let want = submitted_batch(job).div_ceil(job.requested_gpus().max(1));
    let fits = m(metric::MAX_LOCAL_BATCH_SIZE).map_or(u32::MAX, |b| b.max(1.0) as u32);
    want.min(fits).max(1)
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
#[derive(Debug)]
pub struct Problem {
    /// Node index of every slot; slots are grouped by node.
    pub node_of: Vec<u32>,
    pub nodes: usize,
    /// GPUs per node (largest).
    pub gpus_per_node: u32,
    pub jobs: Vec<JobInfo>,
    /// Uniform mutation rate θ.
    pub mutation_rate: f64,
    /// `T_j·c_j` by (GPUs, nodes), filled on first use (shared by threads).
    cache: Vec<Vec<OnceLock<f64>>>,
}

/// Largest per-job table of cached utilisations.
const CACHE_LIMIT: usize = 1 << 16;

impl Problem {
    pub fn new(
        node_of: Vec<u32>,
        nodes: usize,
        gpus_per_node: u32,
        jobs: Vec<JobInfo>,
        mutation_rate: f64,
    ) -> Self {
        let cache = jobs
            .iter()
            .map(|j| {
                let size = j.limit_gpus as usize * nodes.min(j.limit_gpus as usize);
                if size <= CACHE_LIMIT && j.y_remaining > 0.0 {
                    (0..size).map(|_| OnceLock::new()).collect()
                } else {
                    Vec::new()
                }
            })
            .collect();
        Problem {
            node_of,
            nodes,
            gpus_per_node,
            jobs,
            mutation_rate,
            cache,
        }
    }

    /// `T_j·c_j` of job `j` on `c` GPUs over `n` nodes, cached.
    fn utilisation(&self, j: usize, n: u32, c: u32) -> f64 {
        let job = &self.jobs[j];
        if c == 0 || job.y_remaining <= 0.0 {
            return 0.0;
        }
        let width = self.nodes.min(job.limit_gpus as usize);
        let (ci, ni) = (c as usize - 1, n.max(1) as usize - 1);
        match self.cache[j].get(ci * width + ni) {
            Some(cell) if ni < width => *cell.get_or_init(|| job.utilisation(n, c)),
            _ => job.utilisation(n, c),
        }
    }

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
        .enumerate()
        .map(|(j, (&g, &n))| p.utilisation(j, n, g))
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

/// Incremental bookkeeping for handing idle slots to jobs: GPUs per job, idle
/// slots per node, and a node of each job (so a job grows where it already
/// is, then on the nodes with the most idle GPUs).
struct Filler {
    count: Vec<u32>,
    /// A node each job holds a GPU on (`u32::MAX`: none).
    home: Vec<u32>,
    idle_on: Vec<Vec<usize>>,
    /// Nodes by idle GPUs at the start, most first; `cursor` skips drained ones.
    order: Vec<u32>,
    cursor: usize,
    idle: u32,
}

impl Filler {
    fn new(p: &Problem, c: &Candidate) -> Self {
        let mut count = vec![0u32; p.jobs.len()];
        let mut home = vec![u32::MAX; p.jobs.len()];
        let mut idle_on = vec![Vec::new(); p.nodes];
        let mut idle = 0;
        for (s, &j) in c.iter().enumerate() {
            let n = p.node_of[s];
            if j == IDLE {
                idle_on[n as usize].push(s);
                idle += 1;
            } else {
                count[j as usize] += 1;
                home[j as usize] = n;
            }
        }
        for v in idle_on.iter_mut() {
            v.reverse(); // pop() hands out the lowest slot first
        }
        let mut order: Vec<u32> = (0..p.nodes as u32)
            .filter(|&n| !idle_on[n as usize].is_empty())
            .collect();
        order.sort_by_key(|&n| (std::cmp::Reverse(idle_on[n as usize].len()), n));
        Filler {
            count,
            home,
            idle_on,
            order,
            cursor: 0,
            idle,
        }
    }

    /// Gives `job` up to `extra` idle slots; returns how many it got.
    fn grow(&mut self, c: &mut Candidate, job: u32, extra: u32) -> u32 {
        let mut got = 0;
        while got < extra && self.idle > 0 {
            let h = self.home[job as usize];
            let node = if h != u32::MAX && !self.idle_on[h as usize].is_empty() {
                h
            } else {
                while self.idle_on[self.order[self.cursor] as usize].is_empty() {
                    self.cursor += 1;
                }
                self.order[self.cursor]
            };
            let s = self.idle_on[node as usize]
                .pop()
                .expect("node has an idle slot");
            c[s] = job;
            self.home[job as usize] = node;
            self.idle -= 1;
            got += 1;
        }
        self.count[job as usize] += got;
        got
    }
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
    let idle = c.iter().filter(|&&j| j == IDLE).count();
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
        let mut take = new.len() - idle;
        let mut rank = vec![u32::MAX; p.jobs.len()];
        for (r, d) in donors.iter().enumerate() {
            rank[*d as usize] = r as u32;
        }
        // Walk donors in rank order, freeing their last slots.
        let mut slots_of: Vec<Vec<usize>> = vec![Vec::new(); donors.len()];
        for (s, &j) in c.iter().enumerate() {
            if j != IDLE && rank[j as usize] != u32::MAX {
                slots_of[rank[j as usize] as usize].push(s);
            }
        }
        'take: for slots in slots_of.iter() {
            for &s in slots.iter().rev() {
                if take == 0 {
                    break 'take;
                }
                count[c[s] as usize] -= 1;
                c[s] = IDLE;
                take -= 1;
            }
        }
    }
    let mut f = Filler::new(p, c);
    for j in new {
        f.grow(c, j, 1);
    }
    fill_least_utilisation(p, c, &mut f);
}

/// Refresh step (4), with a lazy priority queue: a job's increase is
/// recomputed when the number of idle GPUs it would get has changed.
fn fill_least_utilisation(p: &Problem, c: &mut Candidate, f: &mut Filler) {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    /// An `f64` ordered by `total_cmp`, for the heap.
    struct Key(f64);
    impl PartialEq for Key {
        fn eq(&self, o: &Self) -> bool {
            self.0.total_cmp(&o.0).is_eq()
        }
    }
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Key {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&o.0)
        }
    }
    if f.idle == 0 {
        return;
    }
    let gpn = p.gpus_per_node.max(1);
    let (_, nodes) = p.shape(c);
    let delta = |j: usize, have: u32, idle: u32| -> (f64, u32) {
        let job = &p.jobs[j];
        let want = job.limit_gpus.min(have + idle);
        // Node count after growing, packed (the exact spread is scored later).
        let n_after = nodes[j].max(want.div_ceil(gpn));
        (
            p.utilisation(j, n_after, want) - p.utilisation(j, nodes[j], have),
            want,
        )
    };
    let mut heap = BinaryHeap::new();
    for j in 0..p.jobs.len() {
        if f.count[j] < p.jobs[j].limit_gpus {
            let (d, want) = delta(j, f.count[j], f.idle);
            heap.push(Reverse((Key(d), j, want)));
        }
    }
    while f.idle > 0 {
        let Some(Reverse((_, j, want))) = heap.pop() else {
            return;
        };
        let have = f.count[j];
        if have >= p.jobs[j].limit_gpus {
            continue;
        }
        let now_want = p.jobs[j].limit_gpus.min(have + f.idle);
        if now_want != want {
            let (d, w) = delta(j, have, f.idle);
            heap.push(Reverse((Key(d), j, w)));
            continue;
        }
        f.grow(c, j as u32, want - have);
    }
}

/// Fills idle GPUs with jobs picked uniformly at random among those below their
/// limit (the refill after crossover and mutation, Fig. 9), never `exclude`.
/// `exclude` is a mask over jobs (empty: none).
fn fill_random(p: &Problem, c: &mut Candidate, exclude: &[bool], rng: &mut impl Rng) {
    let mut f = Filler::new(p, c);
    if f.idle == 0 {
        return;
    }
    let mut eligible: Vec<u32> = (0..p.jobs.len() as u32)
        .filter(|&j| {
            f.count[j as usize] < p.jobs[j as usize].limit_gpus
                && !exclude.get(j as usize).copied().unwrap_or(false)
        })
        .collect();
    while f.idle > 0 && !eligible.is_empty() {
        let k = rng.random_range(0..eligible.len());
        let j = eligible[k];
        let room = p.jobs[j as usize].limit_gpus - f.count[j as usize];
        let extra = rng.random_range(1..=room.min(f.idle));
        f.grow(c, j, extra);
        if f.count[j as usize] >= p.jobs[j as usize].limit_gpus {
            eligible.swap_remove(k);
        }
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
    let hit: Vec<bool> = (0..p.jobs.len())
        .map(|j| count[j] > 0 && rng.random::<f64>() < p.mutation_rate)
        .collect();
    for s in c.iter_mut() {
        if *s != IDLE && hit[*s as usize] {
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
    let mut f = Filler::new(p, c);
    for j in (0..p.jobs.len() as u32).filter(|&j| p.jobs[j as usize].new) {
        if f.grow(c, j, 1) == 0 {
            break;
        }
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
        Problem::new(
            (0..nodes as u32 * gpn).map(|s| s / gpn).collect(),
            nodes,
            gpn,
            jobs,
            0.2,
        )
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
