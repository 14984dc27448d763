//! The genetic operators on allocation matrices: mutation, crossover and
//! repair, in the artifact's order and with its random draws.
//!
//! Every offspring is mutated and repaired, ten thousand times a round, so
//! these work in buffers each thread keeps (`Scratch`) and sort cells by
//! counting (job and node indices are small), allocating only the offspring
//! itself. `tests.rs` keeps the straightforward version of each and checks
//! that both give the same matrix from the same generator state.

use super::{Alloc, Geometric, Parent, Problem};
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use std::cell::RefCell;

/// A cell: `(job, node, replicas)`.
type Cell = (u32, u32, u8);

/// Buffers one thread reuses across offspring.
#[derive(Default)]
struct Scratch {
    cells: Vec<Cell>,
    spare: Vec<Cell>,
    /// Per job in `mutate`: where its row starts in `cells`.
    row_start: Vec<usize>,
    /// Per node: GPUs held and cells holding them (`mutate`).
    used: Vec<u32>,
    holders: Vec<u32>,
    free_nodes: Vec<u32>,
    /// Counting sort: per key, its first position, then a cursor.
    start: Vec<u32>,
    cursor: Vec<u32>,
    /// Per job: cells (interference) then replicas (max replicas).
    per_job: Vec<u32>,
    /// `(job, position)` of the cells of jobs over their replica limit.
    over: Vec<(u32, u32)>,
    picked: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Stable counting sort of `src` into `dst` by `key(cell) < keys`; leaves in
/// `start` (length `keys + 1`) where each key's cells begin.
fn counting_sort(
    src: &[Cell],
    dst: &mut Vec<Cell>,
    keys: usize,
    key: impl Fn(&Cell) -> u32,
    start: &mut Vec<u32>,
    cursor: &mut Vec<u32>,
) {
    start.clear();
    start.resize(keys + 1, 0);
    for c in src {
        start[key(c) as usize + 1] += 1;
    }
    for k in 0..keys {
        start[k + 1] += start[k];
    }
    cursor.clear();
    cursor.extend_from_slice(&start[..keys]);
    dst.clear();
    dst.resize(src.len(), (0, 0, 0));
    for c in src {
        let at = &mut cursor[key(c) as usize];
        dst[*at as usize] = *c;
        *at += 1;
    }
}

impl Problem {
    /// The repair steps, in the artifact's order.
    pub fn repair(&self, a: &mut Alloc, rng: &mut dyn RngCore) {
        SCRATCH.with_borrow_mut(|s| {
            s.cells.clear();
            for j in 0..a.jobs() {
                s.cells
                    .extend(a.row(j).iter().map(|&(k, x)| (j as u32, k, x)));
            }
            *a = self.repaired(s, rng);
        });
    }

    /// Repairs the cells in `s.cells` (each `(job, node)` at most once, in
    /// any order).
    fn repaired<R: Rng + ?Sized>(&self, s: &mut Scratch, rng: &mut R) -> Alloc {
        let (jobs, nodes) = (self.jobs, self.nodes);
        s.cells.retain(|c| c.2 > 0);
        // By (node, job): by job, then stably by node.
        counting_sort(
            &s.cells,
            &mut s.spare,
            jobs,
            |c| c.0,
            &mut s.start,
            &mut s.cursor,
        );
        counting_sort(
            &s.spare,
            &mut s.cells,
            nodes,
            |c| c.1,
            &mut s.start,
            &mut s.cursor,
        );
        let t = &mut s.cells;
        let node_start = &s.start;
        let node = |k: usize| node_start[k] as usize..node_start[k + 1] as usize;
        if self.interference_avoidance {
            // "Distributed" is decided once, before any zeroing: a job with
            // cells on more than one node.
            s.per_job.clear();
            s.per_job.resize(jobs, 0);
            for c in t.iter() {
                s.per_job[c.0 as usize] += 1;
            }
            for k in 0..nodes {
                let mut seen = 0;
                for c in &mut t[node(k)] {
                    if seen < 2 && s.per_job[c.0 as usize] > 1 {
                        seen += 1;
                    }
                    if seen >= 2 {
                        c.2 = 0;
                    }
                }
            }
        }
        // Max replicas: trim rows over their limit, visiting nodes at random.
        s.per_job.clear();
        s.per_job.resize(jobs, 0);
        for c in t.iter() {
            s.per_job[c.0 as usize] += c.2 as u32;
        }
        s.over.clear();
        for (i, c) in t.iter().enumerate() {
            if c.2 > 0 && s.per_job[c.0 as usize] > self.max_replicas[c.0 as usize] {
                s.over.push((c.0, i as u32));
            }
        }
        s.over.sort_unstable();
        let mut i = 0;
        while i < s.over.len() {
            let j = s.over[i].0;
            s.picked.clear();
            while i < s.over.len() && s.over[i].0 == j {
                s.picked.push(s.over[i].1);
                i += 1;
            }
            s.picked.shuffle(rng);
            let mut left = self.max_replicas[j as usize];
            for &at in &s.picked {
                let c = &mut t[at as usize];
                let keep = (c.2 as u32).min(left);
                left -= keep;
                c.2 = keep as u8;
            }
        }
        // Node capacity, jobs in order.
        for k in 0..nodes {
            let mut left = self.capacity[k];
            for c in &mut t[node(k)] {
                let keep = c.2.min(left);
                left -= keep;
                c.2 = keep;
            }
        }
        // Back to rows: by node, then stably by job.
        t.retain(|c| c.2 > 0);
        counting_sort(t, &mut s.spare, jobs, |c| c.0, &mut s.start, &mut s.cursor);
        Alloc {
            start: s.start.clone(),
            cells: s.spare.iter().map(|&(_, k, x)| (k, x)).collect(),
        }
    }

    /// Mutated and repaired copy of `a`.
    pub(super) fn mutate<R: Rng + ?Sized>(&self, a: Parent, rng: &mut R) -> Alloc {
        SCRATCH.with_borrow_mut(|s| self.mutated(a, s, rng))
    }

    fn mutated<R: Rng + ?Sized>(&self, a: Parent, s: &mut Scratch, rng: &mut R) -> Alloc {
        let jn = self.jobs;
        // 1. Reset rows to the current allocation; 2. zero cells of some rows.
        let t = &mut s.cells;
        t.clear();
        s.row_start.clear();
        for j in 0..jn {
            s.row_start.push(t.len());
            let row = if rng.random_bool(0.1) {
                self.current.row(j)
            } else {
                a.row(j)
            };
            let zeroing = rng.random_bool(0.1);
            for &(k, x) in row {
                if !(zeroing && rng.random_bool(0.1)) {
                    t.push((j as u32, k, x));
                }
            }
        }
        s.row_start.push(t.len());
        // 3. Grow cells on nodes with a free GPU: a cell with replicas is
        // picked with p1 + p2 − p1·p2 (p1 = 1/J, p2 = 1/holders of the node),
        // an empty one with p1 — those are drawn as geometric gaps over the
        // (free node, job) grid, so the cost follows the hits, not the grid.
        s.used.clear();
        s.used.resize(self.nodes, 0);
        s.holders.clear();
        s.holders.resize(self.nodes, 0);
        for c in t.iter() {
            s.used[c.1 as usize] += c.2 as u32;
            s.holders[c.1 as usize] += 1;
        }
        let free = |k: usize| s.used[k] < self.capacity[k] as u32;
        let p1 = 1.0 / jn as f64;
        for c in t.iter_mut() {
            let k = c.1 as usize;
            if free(k) {
                let p2 = 1.0 / s.holders[k] as f64;
                if rng.random_bool((p1 + p2 - p1 * p2).min(1.0)) {
                    c.2 = rng.random_range(c.2..=self.capacity[k].max(c.2));
                }
            }
        }
        s.free_nodes.clear();
        s.free_nodes
            .extend((0..self.nodes as u32).filter(|&k| free(k as usize)));
        let grid = (s.free_nodes.len() * jn) as u64;
        let existing = t.len();
        let gap = Geometric::new(p1);
        let mut at = gap.draw(rng);
        while at < grid {
            let (k, j) = (
                s.free_nodes[(at / jn as u64) as usize],
                (at % jn as u64) as usize,
            );
            let row = &t[s.row_start[j]..s.row_start[j + 1]];
            if row.binary_search_by_key(&k, |c| c.1).is_err() {
                t.push((j as u32, k, rng.random_range(0..=self.capacity[k as usize])));
            }
            at += 1 + gap.draw(rng);
        }
        debug_assert!(t[..existing]
            .windows(2)
            .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
        self.repaired(s, rng)
    }

    /// Row crossover at a random job: (rows before it of `b`, the rest of
    /// `a`) and (rows before it of `a`, the rest of `b`).
    pub(super) fn crossover<'a, R: Rng + ?Sized>(
        &self,
        a: &'a Alloc,
        b: &'a Alloc,
        rng: &mut R,
    ) -> (Parent<'a>, Parent<'a>) {
        let cut = rng.random_range(0..self.jobs);
        (Parent { a: b, b: a, cut }, Parent { a, b, cut })
    }
}
