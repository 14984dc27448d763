//! The evolutionary step of [`super::Ones`]: refresh, crossover, mutation, pad,
//! reorder, select, and the update rule that decides what is deployed.

use super::{Candidate, OnesParams, View};
use blox_core::{GpuId, Job, JobId};
use rand::Rng;
use std::collections::HashMap;

/// One round's search over candidates (slots = GPUs, grouped by node).
pub(super) struct Search<'a> {
    views: &'a [View],
    slots: &'a [(GpuId, u32)],
    slot_of: HashMap<GpuId, usize>,
    index: HashMap<JobId, u32>,
    nodes: usize,
    crossover: f64,
    mutation: f64,
    /// Jobs never started, in arrival order.
    new_jobs: Vec<u32>,
    /// Started jobs by predicted time to finish on one GPU, shortest first.
    pad_order: Vec<u32>,
    /// Slots each job runs on now.
    current: Vec<Vec<usize>>,
}

impl<'a> Search<'a> {
    pub(super) fn new(
        views: &'a [View],
        order: &[&Job],
        slots: &'a [(GpuId, u32)],
        params: &OnesParams,
    ) -> Self {
        let slot_of: HashMap<GpuId, usize> =
            slots.iter().enumerate().map(|(i, s)| (s.0, i)).collect();
        let index = views
            .iter()
            .enumerate()
            .map(|(i, v)| (v.id, i as u32))
            .collect();
        let current = order
            .iter()
            .map(|j| {
                j.allocation
                    .iter()
                    .filter_map(|g| slot_of.get(g).copied())
                    .collect()
            })
            .collect();
        let new_jobs = (0..views.len() as u32)
            .filter(|&i| views[i as usize].new)
            .collect();
        let mut pad_order: Vec<u32> = (0..views.len() as u32)
            .filter(|&i| !views[i as usize].new)
            .collect();
        let key: Vec<f64> = views.iter().map(View::time_on_one).collect();
        pad_order.sort_by(|a, b| key[*a as usize].total_cmp(&key[*b as usize]).then(a.cmp(b)));
        Search {
            views,
            slots,
            slot_of,
            index,
            nodes: slots.last().map_or(0, |s| s.1 as usize + 1),
            crossover: params.crossover.unwrap_or(0.5),
            mutation: params.mutation_rate,
            new_jobs,
            pad_order,
            current,
        }
    }

    /// The schedule running now.
    pub(super) fn current(&self) -> Candidate {
        let mut c = vec![None; self.slots.len()];
        for (j, s) in self.current.iter().enumerate() {
            for &s in s {
                c[s] = Some(j as u32);
            }
        }
        c
    }

    pub(super) fn encode(&self, genes: &[(GpuId, JobId)]) -> Candidate {
        let mut c = vec![None; self.slots.len()];
        for (g, j) in genes {
            if let (Some(&s), Some(&j)) = (self.slot_of.get(g), self.index.get(j)) {
                c[s] = Some(j);
            }
        }
        c
    }

    pub(super) fn decode(&self, c: &Candidate) -> Vec<(GpuId, JobId)> {
        c.iter()
            .enumerate()
            .filter_map(|(s, j)| Some((self.slots[s].0, self.views[(*j)? as usize].id)))
            .collect()
    }

    fn counts(&self, c: &Candidate) -> Vec<u32> {
        let mut n = vec![0u32; self.views.len()];
        for j in c.iter().flatten() {
            n[*j as usize] += 1;
        }
        n
    }

    /// Refresh: every job keeps at most its size (its first slots).
    fn refresh(&self, c: &Candidate) -> Candidate {
        let mut n = vec![0u32; self.views.len()];
        c.iter()
            .map(|j| {
                let j = (*j)?;
                n[j as usize] += 1;
                (n[j as usize] <= self.views[j as usize].size).then_some(j)
            })
            .collect()
    }

    /// Uniform crossover: on each GPU, with probability ξ the children swap
    /// their parents' jobs; a job never exceeds its size.
    fn crossover(
        &self,
        a: &Candidate,
        b: &Candidate,
        rng: &mut impl Rng,
    ) -> (Candidate, Candidate) {
        let (mut x, mut y) = (vec![None; a.len()], vec![None; a.len()]);
        let (mut nx, mut ny) = (vec![0u32; self.views.len()], vec![0u32; self.views.len()]);
        for s in 0..a.len() {
            let (p, q) = if rng.random::<f64>() >= self.crossover {
                (a[s], b[s])
            } else {
                (b[s], a[s])
            };
            for (gene, child, n) in [(p, &mut x, &mut nx), (q, &mut y, &mut ny)] {
                if let Some(j) = gene {
                    if n[j as usize] < self.views[j as usize].size {
                        n[j as usize] += 1;
                        child[s] = Some(j);
                    }
                }
            }
        }
        (x, y)
    }

    /// Mutation: every executed job of the candidate is dropped with
    /// probability θ (jobs still warming up are kept).
    fn mutate(&self, c: &Candidate, rng: &mut impl Rng) -> Candidate {
        let mut keep: HashMap<u32, bool> = HashMap::new();
        let mut out = c.clone();
        for g in out.iter_mut() {
            if let Some(j) = *g {
                let k = *keep.entry(j).or_insert_with(|| {
                    !self.views[j as usize].executed || rng.random::<f64>() >= self.mutation
                });
                if !k {
                    *g = None;
                }
            }
        }
        out
    }

    /// Pad: idle GPUs to new jobs (one each, arrival order), then to started
    /// jobs by predicted time on one GPU up to their size, then to executed
    /// jobs up to their `max_size`.
    fn pad(&self, n: Vec<u32>) -> Vec<u32> {
        self.pad_where(n, |_| true)
    }

    /// [`Search::pad`] giving GPUs only to jobs `may_grow` allows.
    fn pad_where(&self, mut n: Vec<u32>, may_grow: impl Fn(usize) -> bool) -> Vec<u32> {
        let total = self.slots.len() as u32;
        let mut k: u32 = n.iter().sum();
        for &j in &self.new_jobs {
            if k >= total {
                return n;
            }
            if n[j as usize] == 0 && may_grow(j as usize) {
                n[j as usize] = 1;
                k += 1;
            }
        }
        for stage in [0, 1] {
            for &j in &self.pad_order {
                if k >= total {
                    return n;
                }
                let v = &self.views[j as usize];
                if !may_grow(j as usize) {
                    continue;
                }
                let want = if stage == 0 {
                    v.size
                } else if v.executed {
                    v.max_size
                } else {
                    0
                };
                let add = want.saturating_sub(n[j as usize]).min(total - k);
                n[j as usize] += add;
                k += add;
            }
        }
        n
    }

    /// Reorder: jobs keep (up to their count) the GPUs they run on; the rest
    /// go first to nodes the job is on, then node by node, most idle first.
    fn reorder(&self, n: &[u32]) -> Candidate {
        let mut c: Candidate = vec![None; self.slots.len()];
        let mut need = n.to_vec();
        for (j, cur) in self.current.iter().enumerate() {
            for &s in cur.iter().take(n[j] as usize) {
                c[s] = Some(j as u32);
                need[j] -= 1;
            }
        }
        let mut free: Vec<Vec<usize>> = vec![Vec::new(); self.nodes];
        for (s, g) in c.iter().enumerate() {
            if g.is_none() {
                free[self.slots[s].1 as usize].push(s);
            }
        }
        for f in free.iter_mut() {
            f.reverse(); // pop() takes the lowest slot first
        }
        let mut todo: Vec<usize> = (0..need.len()).filter(|&j| need[j] > 0).collect();
        todo.sort_by(|a, b| need[*b].cmp(&need[*a]).then(a.cmp(b)));
        for j in todo {
            let mut home: Vec<usize> = self.current[j]
                .iter()
                .map(|&s| self.slots[s].1 as usize)
                .collect();
            home.dedup();
            while need[j] > 0 {
                let node = home
                    .iter()
                    .copied()
                    .find(|&h| !free[h].is_empty())
                    .or_else(|| {
                        (0..self.nodes)
                            .filter(|&k| !free[k].is_empty())
                            .max_by(|a, b| free[*a].len().cmp(&free[*b].len()).then(b.cmp(a)))
                    });
                let Some(node) = node else { break };
                if !home.contains(&node) {
                    home.push(node);
                }
                let s = free[node].pop().expect("non-empty");
                c[s] = Some(j as u32);
                need[j] -= 1;
            }
        }
        c
    }

    /// Eq. 8: `Σ Y_remaining · n / X(n)` over predicted jobs; smaller is better.
    pub(super) fn score(&self, c: &Candidate) -> f64 {
        let nj = self.views.len();
        let (mut gpus, mut nodes, mut last) = (vec![0u32; nj], vec![0u32; nj], vec![u32::MAX; nj]);
        for (s, j) in c.iter().enumerate() {
            let Some(j) = *j else { continue };
            let j = j as usize;
            gpus[j] += 1;
            if last[j] != self.slots[s].1 {
                last[j] = self.slots[s].1;
                nodes[j] += 1;
            }
        }
        let mut total = 0.0;
        for (j, v) in self.views.iter().enumerate() {
            if let (Some(r), true) = (v.remaining, gpus[j] > 0) {
                if let Some(x) = v.x(gpus[j], nodes[j]).filter(|x| *x > 0.0) {
                    total += r * gpus[j] as f64 / x;
                }
            }
        }
        total
    }

    /// Evolves `carried` (topped up with the current schedule) for
    /// `generations` steps; the population, best first.
    pub(super) fn run(
        &mut self,
        mut pop: Vec<Candidate>,
        k: usize,
        generations: usize,
        rng: &mut impl Rng,
    ) -> Vec<Candidate> {
        pop.truncate(k);
        while pop.len() < k {
            pop.push(self.current());
        }
        for _ in 0..generations {
            let mut next: Vec<Candidate> = pop.iter().map(|c| self.refresh(c)).collect();
            for _ in 0..k / 2 {
                let a = rng.random_range(0..k);
                let mut b = rng.random_range(0..k - 1);
                if b >= a {
                    b += 1;
                }
                let (x, y) = self.crossover(&next[a], &next[b], rng);
                next.push(x);
                next.push(y);
            }
            for i in 0..k {
                let m = self.mutate(&next[i], rng);
                next.push(m);
            }
            let mut scored: Vec<(f64, Candidate)> = next
                .into_iter()
                .map(|c| {
                    let c = self.reorder(&self.pad(self.counts(&c)));
                    (self.score(&c), c)
                })
                .collect();
            scored.sort_by(|a, b| a.0.total_cmp(&b.0));
            scored.truncate(k);
            pop = scored.iter().map(|s| s.1.clone()).collect();
        }
        pop
    }

    /// The update rule: jobs whose GPUs in `best` are all idle start now; the
    /// rest of `best` is deployed only if `may_change(j)` holds for every
    /// running job whose placement it changes; otherwise, with `pad_idle`,
    /// GPUs still idle go to waiting jobs as padding would give them.
    /// Returns each job's GPUs and whether `best` was deployed in full.
    pub(super) fn update(
        &self,
        current: &Candidate,
        best: &Candidate,
        pad_idle: bool,
        may_change: impl Fn(usize) -> bool,
    ) -> (Vec<(usize, Vec<GpuId>)>, bool) {
        let nj = self.views.len();
        let per_job = |c: &Candidate| {
            let mut v: Vec<Vec<usize>> = vec![Vec::new(); nj];
            for (s, j) in c.iter().enumerate() {
                if let Some(j) = j {
                    v[*j as usize].push(s);
                }
            }
            v
        };
        let (src, dst) = (per_job(current), per_job(best));
        let changed = (0..nj).filter(|&j| !src[j].is_empty() && src[j] != dst[j]);
        let full = changed.clone().all(&may_change);
        let gpus = |slots: &[usize]| slots.iter().map(|&s| self.slots[s].0).collect::<Vec<_>>();
        if full {
            let out = (0..nj)
                .filter(|&j| !dst[j].is_empty())
                .map(|j| (j, gpus(&dst[j])))
                .collect();
            return (out, true);
        }
        // Running jobs stay; jobs whose GPUs in `best` are idle start there;
        // GPUs still idle go to waiting jobs as padding would give them (the
        // authors' loop reacts within a second; a round is longer).
        let mut c = current.clone();
        for j in 0..nj {
            let available = src[j].is_empty()
                && !dst[j].is_empty()
                && dst[j].iter().all(|&s| current[s].is_none());
            if available {
                for &s in &dst[j] {
                    c[s] = Some(j as u32);
                }
            }
        }
        let fixed = self.counts(&c);
        let n = if pad_idle {
            self.pad_where(fixed.clone(), |j| src[j].is_empty() && fixed[j] == 0)
        } else {
            fixed.clone()
        };
        let mut out = Vec::new();
        let mut free = c
            .iter()
            .enumerate()
            .filter(|(_, j)| j.is_none())
            .map(|(s, _)| s);
        let mut extra: Vec<Vec<usize>> = vec![Vec::new(); nj];
        for j in 0..nj {
            for _ in fixed[j]..n[j] {
                match free.next() {
                    Some(s) => extra[j].push(s),
                    None => break,
                }
            }
        }
        let per = per_job(&c);
        for j in 0..nj {
            let mut slots = per[j].clone();
            slots.extend(&extra[j]);
            if !slots.is_empty() {
                out.push((j, gpus(&slots)));
            }
        }
        (out, false)
    }
}
