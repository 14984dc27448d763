//! The genetic operators on allocation matrices: mutation, crossover and
//! repair, in the artifact's order and with its random draws.
//!
//! Every offspring is mutated and repaired, ten thousand times a round, so
//! these work in buffers each thread keeps (`Scratch`), allocating only the
//! offspring itself, and never sort: cells stay in row order (by job, then
//! node). The artifact's repair walks each node's cells in job order; walking
//! all cells in row order visits each node's cells in that same order, so
//! with one counter per node it makes the same decisions. `tests.rs` keeps
//! the straightforward version of each operator and checks that both give the
//! same matrix from the same generator state.

use super::{key_of, Alloc, Geometric, KeySet, Parent, Problem};
use rand::seq::SliceRandom;
use rand::{Rng, RngCore};
use std::cell::RefCell;

/// A cell: `(job, node, replicas)`.
type Cell = (u32, u32, u8);

/// Buffers one thread reuses across offspring.
#[derive(Default)]
struct Scratch {
    /// The matrix being built, in row order.
    cells: Vec<Cell>,
    /// Cells a mutation adds, in (node, job) order, and a merge buffer.
    added: Vec<Cell>,
    spare: Vec<Cell>,
    /// Per job in `mutate`: where its row starts in `cells`.
    row_start: Vec<usize>,
    /// Per node: GPUs held and cells holding them (`mutate`); distributed
    /// jobs seen and GPUs left (repair).
    used: Vec<u32>,
    holders: Vec<u32>,
    free_nodes: Vec<u32>,
    /// Per job: cells (interference) then replicas (max replicas).
    per_job: Vec<u32>,
    picked: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
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

    /// Repairs the cells in `s.cells` (in row order, each `(job, node)` at
    /// most once).
    fn repaired<R: Rng + ?Sized>(&self, s: &mut Scratch, rng: &mut R) -> Alloc {
        self.repair_cells(s, rng);
        Alloc::from_rows(self.jobs, &s.cells)
    }

    /// Repairs `s.cells` in place, leaving no empty cell.
    fn repair_cells<R: Rng + ?Sized>(&self, s: &mut Scratch, rng: &mut R) {
        let (jobs, nodes) = (self.jobs, self.nodes);
        let t = &mut s.cells;
        t.retain(|c| c.2 > 0);
        debug_assert!(t.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
        if self.interference_avoidance {
            // "Distributed" is decided once, before any zeroing: a job with
            // cells on more than one node. On each node, from the second
            // distributed job on (in job order), every cell is emptied.
            s.per_job.clear();
            s.per_job.resize(jobs, 0);
            for c in t.iter() {
                s.per_job[c.0 as usize] += 1;
            }
            let seen = &mut s.used;
            seen.clear();
            seen.resize(nodes, 0);
            for c in t.iter_mut() {
                let k = c.1 as usize;
                if seen[k] < 2 && s.per_job[c.0 as usize] > 1 {
                    seen[k] += 1;
                }
                if seen[k] >= 2 {
                    c.2 = 0;
                }
            }
        }
        // Max replicas: trim rows over their limit, visiting their nodes at
        // random (a row's cells, by node, shuffled).
        let mut from = 0;
        while from < t.len() {
            let j = t[from].0;
            let to = from + t[from..].iter().take_while(|c| c.0 == j).count();
            let total: u32 = t[from..to].iter().map(|c| c.2 as u32).sum();
            let max = self.max_replicas[j as usize];
            if total > max {
                s.picked.clear();
                s.picked
                    .extend((from..to).filter(|&i| t[i].2 > 0).map(|i| i as u32));
                s.picked.shuffle(rng);
                let mut left = max;
                for &at in &s.picked {
                    let c = &mut t[at as usize];
                    let keep = (c.2 as u32).min(left);
                    left -= keep;
                    c.2 = keep as u8;
                }
            }
            from = to;
        }
        // Node capacity, each node's jobs in order.
        let left = &mut s.used;
        left.clear();
        left.extend(self.capacity.iter().map(|&c| c as u32));
        for c in t.iter_mut() {
            let k = c.1 as usize;
            let keep = (c.2 as u32).min(left[k]);
            left[k] -= keep;
            c.2 = keep as u8;
        }
        t.retain(|c| c.2 > 0);
    }

    /// Mutated and repaired copy of `a`.
    #[cfg(test)]
    pub(super) fn mutate<R: Rng + ?Sized>(&self, a: Parent, rng: &mut R) -> Alloc {
        SCRATCH.with_borrow_mut(|s| {
            self.mutated(a, s, rng);
            Alloc::from_rows(self.jobs, &s.cells)
        })
    }

    /// A mutated and repaired copy of `a` with its key, unless its key is
    /// among `known` (the same draws either way).
    pub(super) fn offspring<R: Rng + ?Sized>(
        &self,
        a: Parent,
        rng: &mut R,
        known: &KeySet,
    ) -> Option<((u64, u64), Alloc)> {
        SCRATCH.with_borrow_mut(|s| {
            self.mutated(a, s, rng);
            let t = &s.cells;
            // Row starts: the cells before each job's row.
            let mut at = 0;
            let start = (0..=self.jobs as u32).map(|j| {
                while at < t.len() && t[at].0 < j {
                    at += 1;
                }
                at as u32
            });
            let key = key_of(start, t.iter().map(|&(_, k, x)| (k, x)));
            (!known.contains(&key)).then(|| (key, Alloc::from_rows(self.jobs, t)))
        })
    }

    /// Mutates and repairs `a` into `s.cells`.
    fn mutated<R: Rng + ?Sized>(&self, a: Parent, s: &mut Scratch, rng: &mut R) {
        let jn = self.jobs;
        // 1. Reset rows to the current allocation; 2. zero cells of some rows.
        let t = &mut s.cells;
        t.clear();
        s.added.clear();
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
        let gap = Geometric::new(p1);
        let mut at = gap.draw(rng);
        while at < grid {
            let (k, j) = (
                s.free_nodes[(at / jn as u64) as usize],
                (at % jn as u64) as usize,
            );
            let row = &t[s.row_start[j]..s.row_start[j + 1]];
            if row.binary_search_by_key(&k, |c| c.1).is_err() {
                s.added
                    .push((j as u32, k, rng.random_range(0..=self.capacity[k as usize])));
            }
            at += 1 + gap.draw(rng);
        }
        debug_assert!(t.windows(2).all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
        if !s.added.is_empty() {
            // The added cells came by (node, job): into row order, then
            // merged with the rows (no cell is in both).
            s.added
                .sort_unstable_by_key(|c| ((c.0 as u64) << 32) | c.1 as u64);
            s.spare.clear();
            let (mut i, mut k) = (0, 0);
            while i < t.len() && k < s.added.len() {
                if (t[i].0, t[i].1) < (s.added[k].0, s.added[k].1) {
                    s.spare.push(t[i]);
                    i += 1;
                } else {
                    s.spare.push(s.added[k]);
                    k += 1;
                }
            }
            s.spare.extend_from_slice(&t[i..]);
            s.spare.extend_from_slice(&s.added[k..]);
            std::mem::swap(&mut s.cells, &mut s.spare);
        }
        self.repair_cells(s, rng);
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
