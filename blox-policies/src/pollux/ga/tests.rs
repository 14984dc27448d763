use super::*;
use proptest::prelude::*;

/// Linear speedup up to max replicas, 10 % less when spread over nodes.
fn problem(jobs: usize, nodes: usize, max_r: u32, current: Vec<u8>) -> Problem {
    let current = Alloc::from_dense(&current, jobs, nodes);
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
        let dense: Vec<u8> = genes.iter().cycle().take(jobs * nodes).copied().collect();
        let mut sparse = Alloc::from_dense(&dense, jobs, nodes);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        p.repair(&mut sparse, &mut rng);
        let a = sparse.to_dense(nodes);
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

proptest! {
    /// The sparse form round-trips and splices like the dense matrix.
    #[test]
    fn sparse_allocations_match_the_dense_matrix(
        jobs in 1usize..7, nodes in 1usize..6, cut in 0usize..7,
        a in proptest::collection::vec(0u8..3, 42), b in proptest::collection::vec(0u8..3, 42),
    ) {
        let cut = cut % jobs;
        let (a, b) = (&a[..jobs * nodes], &b[..jobs * nodes]);
        let (sa, sb) = (Alloc::from_dense(a, jobs, nodes), Alloc::from_dense(b, jobs, nodes));
        prop_assert_eq!(sa.to_dense(nodes), a.to_vec());
        let mut want = a[..cut * nodes].to_vec();
        want.extend_from_slice(&b[cut * nodes..]);
        prop_assert_eq!(Parent { a: &sa, b: &sb, cut }.to_alloc().to_dense(nodes), want);
    }
}

#[test]
fn restart_penalty_makes_the_unchanged_allocation_win_a_tie() {
    // Job 0 on node 0 now; the same allocation on node 1 has equal speedup.
    let p = problem(1, 2, 4, vec![2, 0]);
    let stay = p.evaluate(&Alloc::from_dense(&[2, 0], 1, 2));
    let moved = p.evaluate(&Alloc::from_dense(&[0, 2], 1, 2));
    assert!(stay.0 > moved.0, "{stay:?} vs {moved:?}");
    assert_eq!(stay.1, moved.1);
}

#[test]
fn search_fills_an_idle_cluster() {
    let p = problem(4, 4, 4, vec![0; 16]);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let front = solve(&p, vec![p.current.clone()], GaSettings::default(), &mut rng);
    let best = pick(&front).unwrap().genes.to_dense(4);
    // Four jobs, four nodes, linear speedup: the harmonic mean is best with
    // every job on its own node with all 4 GPUs.
    for j in 0..4 {
        let row = &best[j * 4..j * 4 + 4];
        assert_eq!(row.iter().filter(|&&x| x > 0).count(), 1, "{:?}", best);
        assert_eq!(row.iter().map(|&x| x as u32).sum::<u32>(), 4, "{:?}", best);
    }
}

// The operators as first written (before `ops.rs`'s buffers and counting
// sorts): the reference the faster ones must match draw for draw.

use rand::seq::SliceRandom;
use rand::{Rng, RngCore};

/// Walks cells sorted by (node, job) one node at a time.
fn by_node(t: &mut [(u32, u32, u8)]) -> Vec<std::ops::Range<usize>> {
    t.sort_unstable_by_key(|c| (c.1, c.0));
    let mut groups = Vec::new();
    let mut i = 0;
    while i < t.len() {
        let k = t[i].1;
        let s = i;
        while i < t.len() && t[i].1 == k {
            i += 1;
        }
        groups.push(s..i);
    }
    groups
}

/// Repairs cells given as `(job, node, replicas)` triples.
fn reference_repaired(p: &Problem, mut t: Vec<(u32, u32, u8)>, rng: &mut dyn RngCore) -> Alloc {
    t.retain(|c| c.2 > 0);
    let groups = by_node(&mut t);
    if p.interference_avoidance {
        // "Distributed" is decided once, before any zeroing.
        let mut spans = vec![0u32; p.jobs];
        for c in &t {
            spans[c.0 as usize] += 1;
        }
        let distributed: Vec<bool> = spans.iter().map(|&n| n > 1).collect();
        for g in &groups {
            let mut seen = 0;
            for c in &mut t[g.clone()] {
                if seen < 2 && distributed[c.0 as usize] {
                    seen += 1;
                }
                if seen >= 2 {
                    c.2 = 0;
                }
            }
        }
    }
    // Max replicas: trim rows over their limit, visiting nodes at random.
    let mut total = vec![0u32; p.jobs];
    for c in &t {
        total[c.0 as usize] += c.2 as u32;
    }
    let mut cells_of: Vec<Vec<usize>> = vec![Vec::new(); p.jobs];
    for (i, c) in t.iter().enumerate() {
        if c.2 > 0 && total[c.0 as usize] > p.max_replicas[c.0 as usize] {
            cells_of[c.0 as usize].push(i);
        }
    }
    for (j, mut idx) in cells_of
        .into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
    {
        idx.shuffle(rng);
        let mut left = p.max_replicas[j];
        for i in idx {
            let keep = (t[i].2 as u32).min(left);
            left -= keep;
            t[i].2 = keep as u8;
        }
    }
    // Node capacity, jobs in order (t is still sorted by node, then job).
    for g in groups {
        let mut left = p.capacity[t[g.start].1 as usize];
        for c in &mut t[g] {
            let keep = c.2.min(left);
            left -= keep;
            c.2 = keep;
        }
    }
    Alloc::from_triples(p.jobs, t)
}

/// Mutated and repaired copy of `a`.
/// Failures before the next success of a Bernoulli(p) sequence.
fn reference_geometric(p: f64, rng: &mut dyn RngCore) -> u64 {
    if p >= 1.0 {
        return 0;
    }
    let u: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    (u.ln() / (1.0 - p).ln()).floor().min(u64::MAX as f64 / 2.0) as u64
}

/// Rows `< cut` of `a`, the rest of `b`, copied.
fn reference_splice(a: &Alloc, b: &Alloc, cut: usize) -> Alloc {
    let mut t = Vec::new();
    for j in 0..a.jobs() {
        let row = if j < cut { a.row(j) } else { b.row(j) };
        t.extend(row.iter().map(|&(k, x)| (j as u32, k, x)));
    }
    Alloc::from_triples(a.jobs(), t)
}

fn reference_mutate(p: &Problem, a: &Alloc, rng: &mut dyn RngCore) -> Alloc {
    let jn = p.jobs;
    // 1. Reset rows to the current allocation; 2. zero cells of some rows.
    let mut t: Vec<(u32, u32, u8)> = Vec::with_capacity(a.parts().1.len() + p.nodes);
    let mut row_start = Vec::with_capacity(jn + 1);
    for j in 0..jn {
        row_start.push(t.len());
        let row = if rng.random_bool(0.1) {
            p.current.row(j)
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
    row_start.push(t.len());
    // 3. Grow cells on nodes with a free GPU: a cell with replicas is
    // picked with p1 + p2 − p1·p2 (p1 = 1/J, p2 = 1/holders of the node),
    // an empty one with p1 — those are drawn as geometric gaps over the
    // (free node, job) grid, so the cost follows the hits, not the grid.
    let mut used = vec![0u32; p.nodes];
    let mut holders = vec![0u32; p.nodes];
    for c in &t {
        used[c.1 as usize] += c.2 as u32;
        holders[c.1 as usize] += 1;
    }
    let free: Vec<bool> = (0..p.nodes)
        .map(|k| used[k] < p.capacity[k] as u32)
        .collect();
    let p1 = 1.0 / jn as f64;
    for c in &mut t {
        let k = c.1 as usize;
        if free[k] {
            let p2 = 1.0 / holders[k] as f64;
            if rng.random_bool((p1 + p2 - p1 * p2).min(1.0)) {
                c.2 = rng.random_range(c.2..=p.capacity[k].max(c.2));
            }
        }
    }
    let free_nodes: Vec<u32> = (0..p.nodes as u32).filter(|&k| free[k as usize]).collect();
    let grid = (free_nodes.len() * jn) as u64;
    let existing = t.len();
    let mut at = reference_geometric(p1, rng);
    while at < grid {
        let (k, j) = (
            free_nodes[(at / jn as u64) as usize],
            (at % jn as u64) as u32,
        );
        let row = &t[row_start[j as usize]..row_start[j as usize + 1]];
        if row.binary_search_by_key(&k, |c| c.1).is_err() {
            t.push((j, k, rng.random_range(0..=p.capacity[k as usize])));
        }
        at += 1 + reference_geometric(p1, rng);
    }
    debug_assert!(t[..existing]
        .windows(2)
        .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
    reference_repaired(p, t, rng)
}

proptest! {
    /// From the same generator state, the operators give the same matrix
    /// and leave the generator in the same state as the reference ones —
    /// with few cells (sorted by comparison) and many (counting sorts).
    #[test]
    fn operators_match_the_reference_draw_for_draw(
        jobs in 1usize..17, nodes in 1usize..13, max_r in 1u32..30, seed in any::<u64>(),
        interference in any::<bool>(), cap in 1u8..9,
        genes in proptest::collection::vec(prop_oneof![2 => Just(0u8), 1 => 1u8..=9], 192),
        current in proptest::collection::vec(0u8..=3, 192),
    ) {
        let mut p = problem(jobs, nodes, max_r, current[..jobs * nodes].to_vec());
        p.interference_avoidance = interference;
        p.capacity = (0..nodes).map(|k| cap.saturating_add(k as u8 % 3)).collect();
        let dense: Vec<u8> = genes[..jobs * nodes].to_vec();
        let a = Alloc::from_dense(&dense, jobs, nodes);
        let (mut r1, mut r2) = (ChaCha8Rng::seed_from_u64(seed), ChaCha8Rng::seed_from_u64(seed));
        let mut fast = a.clone();
        p.repair(&mut fast, &mut r1);
        let slow = reference_repaired(&p, a.triples(), &mut r2);
        prop_assert_eq!(&fast, &slow);
        prop_assert_eq!(r1.next_u64(), r2.next_u64());
        for _ in 0..4 {
            let fast = p.mutate(Parent::whole(&a), &mut r1);
            let slow = reference_mutate(&p, &a, &mut r2);
            prop_assert_eq!(&fast, &slow);
            prop_assert_eq!(r1.next_u64(), r2.next_u64());
        }
        // Crossover, then mutation of each child.
        let b = Alloc::from_dense(&genes[genes.len() - jobs * nodes..], jobs, nodes);
        let (x, y) = p.crossover(&a, &b, &mut r1);
        let cut = r2.random_range(0..jobs);
        let (sx, sy) = (reference_splice(&b, &a, cut), reference_splice(&a, &b, cut));
        prop_assert_eq!(p.mutate(x, &mut r1), reference_mutate(&p, &sx, &mut r2));
        prop_assert_eq!(p.mutate(y, &mut r1), reference_mutate(&p, &sy, &mut r2));
        prop_assert_eq!(r1.next_u64(), r2.next_u64());
    }
}

proptest! {
    /// The integer keys the sorts use order numbers as `total_cmp` does
    /// (signed zeros, infinities and NaNs included).
    #[test]
    fn ordered_keys_order_as_total_cmp(
        a in prop_oneof![any::<f64>(), Just(0.0), Just(-0.0), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(f64::NAN)],
        b in prop_oneof![any::<f64>(), Just(0.0), Just(-0.0), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(-f64::NAN)],
    ) {
        prop_assert_eq!(ordered(a).cmp(&ordered(b)), a.total_cmp(&b));
    }
}

/// A search that panics hands its panic to the caller (its helpers stop)
/// rather than leaving the caller waiting for them.
#[test]
fn a_panicking_search_does_not_hang() {
    let mut p = problem(3, 4, 4, vec![0; 12]);
    // A speedup table too short for any allocation: the search indexes
    // past it and panics.
    p.max_replicas = vec![4; 3];
    p.weights = vec![1.0; 2];
    let outcome = std::panic::catch_unwind(|| {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        solve(&p, vec![p.current.clone()], GaSettings::default(), &mut rng)
    });
    assert!(outcome.is_err());
}

proptest! {
    /// An offspring's key is its allocation's, and a known key drops it
    /// after the same draws.
    #[test]
    fn offspring_keys_are_their_allocations(
        jobs in 1usize..12, nodes in 1usize..9, seed in any::<u64>(),
        genes in proptest::collection::vec(prop_oneof![2 => Just(0u8), 1 => 1u8..=6], 96),
    ) {
        let p = problem(jobs, nodes, 6, vec![0; jobs * nodes]);
        let a = Alloc::from_dense(&genes[..jobs * nodes], jobs, nodes);
        let (mut r1, mut r2) = (ChaCha8Rng::seed_from_u64(seed), ChaCha8Rng::seed_from_u64(seed));
        let (key, child) = p.offspring(Parent::whole(&a), &mut r1, &KeySet::default()).unwrap();
        prop_assert_eq!(key, child.key());
        prop_assert_eq!(&child, &p.mutate(Parent::whole(&a), &mut r2));
        let known: KeySet = [key].into_iter().collect();
        let (mut r3, mut r4) = (ChaCha8Rng::seed_from_u64(seed), ChaCha8Rng::seed_from_u64(seed));
        prop_assert!(p.offspring(Parent::whole(&a), &mut r3, &known).is_none());
        p.mutate(Parent::whole(&a), &mut r4);
        prop_assert_eq!(r3.next_u64(), r4.next_u64());
    }
}
