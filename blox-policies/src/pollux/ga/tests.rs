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
        prop_assert_eq!(Alloc::splice(&sa, &sb, cut).to_dense(nodes), want);
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
