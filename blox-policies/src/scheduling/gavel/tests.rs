use super::*;
use crate::test_util::*;

/// 4 V100s and 4 K80s: job 1 runs 4× faster on a V100, job 2 only 1.2×.
fn hetero() -> (ClusterState, JobState) {
    let mut cluster = ClusterState::new();
    let mut v = NodeSpec::with_gpus(4);
    v.gpu_type = "V100".into();
    let mut k = NodeSpec::with_gpus(4);
    k.gpu_type = "K80".into();
    cluster.add_node(v);
    cluster.add_node(k);
    let mut state = JobState::new();
    let mut c = cluster.clone();
    for (id, speedup) in [(1, 4.0), (2, 1.2)] {
        add(&mut state, &mut c, job(id, id as f64, 4), &[]);
        state.metrics().set(JobId(id), "speed.V100", speedup);
        state.metrics().set(JobId(id), "speed.K80", 1.0);
    }
    (cluster, state)
}

/// Normalised throughput of each job under allocation `x` (the objective's terms).
fn normalised(state: &JobState, x: &HashMap<JobId, BTreeMap<String, f64>>) -> Vec<f64> {
    x.iter()
        .map(|(id, xs)| {
            let got: f64 = xs.iter().map(|(k, v)| v * type_speed(state, *id, k)).sum();
            let eq = (type_speed(state, *id, "V100") + type_speed(state, *id, "K80")) / 2.0;
            got / eq
        })
        .collect()
}

#[test]
fn the_allocation_is_max_min_fair_and_rounds_realise_it() {
    let (cluster, state) = hetero();
    let order: Vec<&Job> = state.runnable().collect();
    let types = [("K80".to_string(), 4), ("V100".to_string(), 4)];
    let x = Gavel::solve(&order, &state, &types).unwrap();
    let best = normalised(&state, &x)
        .into_iter()
        .fold(f64::INFINITY, f64::min);
    // No other feasible split (job 1 gets share a of the V100s) does better.
    for a in 0..=10 {
        let a = a as f64 / 10.0;
        let alt: HashMap<JobId, BTreeMap<String, f64>> = [
            (
                JobId(1),
                BTreeMap::from([("V100".to_string(), a), ("K80".to_string(), 1.0 - a)]),
            ),
            (
                JobId(2),
                BTreeMap::from([("V100".to_string(), 1.0 - a), ("K80".to_string(), a)]),
            ),
        ]
        .into();
        let m = normalised(&state, &alt)
            .into_iter()
            .fold(f64::INFINITY, f64::min);
        assert!(best >= m - 1e-9, "a = {a}: {m} beats the LP's {best}");
    }
    // Over many rounds each job's share of rounds on each type follows X.
    let mut g = Gavel::default();
    let mut on: BTreeMap<(JobId, String), u32> = BTreeMap::new();
    let rounds = 40;
    for r in 0..rounds {
        let s = g.schedule(&info(60.0 * r as f64), &state, &cluster);
        let mut seen = std::collections::HashSet::new();
        for d in &s.entries {
            let gpus = d.gpu_ids.as_ref().unwrap();
            assert_eq!(gpus.len(), 4);
            let t = cluster
                .node(cluster.gpu(gpus[0]).unwrap().node)
                .unwrap()
                .spec
                .gpu_type
                .clone();
            for gpu in gpus {
                assert!(seen.insert(*gpu), "GPU {gpu} twice");
                let n = cluster.node(cluster.gpu(*gpu).unwrap().node).unwrap();
                assert_eq!(n.spec.gpu_type, t, "a job spans GPU types");
            }
            *on.entry((d.job, t)).or_default() += 1;
        }
    }
    for ((job, t), n) in on {
        let want = g.alloc[&job][&t];
        let got = n as f64 / rounds as f64;
        assert!(
            (got - want).abs() <= 0.1,
            "{job:?} on {t}: {got} of rounds, X = {want}"
        );
    }
}

#[test]
fn jobs_share_an_oversubscribed_type_in_turns_without_double_booking() {
    // Three 4-GPU jobs, one 4-GPU type: each runs about a third of the rounds.
    let cluster = ClusterState::homogeneous(1, 4);
    let mut state = JobState::new();
    let mut c = cluster.clone();
    for id in 1..=3 {
        add(&mut state, &mut c, job(id, id as f64, 4), &[]);
    }
    let mut g = Gavel::default();
    let mut ran: BTreeMap<JobId, u32> = BTreeMap::new();
    for r in 0..30 {
        let s = g.schedule(&info(60.0 * r as f64), &state, &cluster);
        assert_eq!(s.entries.len(), 1, "{s:?}");
        *ran.entry(s.entries[0].job).or_default() += 1;
    }
    assert!(ran.values().all(|&n| n == 10), "{ran:?}");
}

/// The authors' objective weights each job's term by its GPU count: with
/// equal speeds, a 1-GPU job gets its whole time and a 4-GPU job the
/// rest, instead of both the same fraction (0.8 each without the weight).
#[test]
fn the_objective_shares_gpu_time_not_wall_time() {
    let cluster = ClusterState::homogeneous(1, 4);
    let mut state = JobState::new();
    let mut c = cluster.clone();
    add(&mut state, &mut c, job(1, 1.0, 1), &[]);
    add(&mut state, &mut c, job(2, 2.0, 4), &[]);
    let order: Vec<&Job> = state.runnable().collect();
    let types = [("any".to_string(), 4)];
    let x = Gavel::solve(&order, &state, &types).unwrap();
    let (x1, x2) = (x[&JobId(1)]["any"], x[&JobId(2)]["any"]);
    assert!((x1 - 1.0).abs() < 1e-6, "{x1}");
    assert!((0.25 - 1e-6..=0.75 + 1e-6).contains(&x2), "{x2}");
    assert!(x1 + 4.0 * x2 <= 4.0 + 1e-6);
}

/// A round leaves no GPU idle that a waiting job could use: both jobs'
/// time is planned on the V100s only, so one of them waits for them each
/// round; it runs on the otherwise idle K80s instead.
#[test]
fn leftover_gpus_go_to_jobs_without_an_allocation() {
    let (cluster, state) = hetero();
    let mut g = Gavel::default();
    let ids: Vec<JobId> = state.runnable().map(|j| j.id()).collect();
    g.solved_for = ids.clone();
    for id in &ids {
        g.alloc.insert(
            *id,
            BTreeMap::from([("V100".to_string(), 0.5), ("K80".to_string(), 0.0)]),
        );
    }
    for r in 0..6 {
        let s = g.schedule(&info(60.0 * r as f64), &state, &cluster);
        assert_eq!(s.entries.len(), 2, "round {r}: {s:?}");
    }
}

/// With a job wider than every type, the program still fits the cluster:
/// all the time it plans, on every column, is at most 8 GPUs' worth.
#[test]
fn the_mixed_type_does_not_add_capacity() {
    let (_, mut state) = hetero();
    let mut c = ClusterState::new();
    add(&mut state, &mut c, job(3, 3.0, 6), &[]);
    let order: Vec<&Job> = state.runnable().collect();
    let types = [("K80".to_string(), 4), ("V100".to_string(), 4)];
    let x = Gavel::solve(&order, &state, &types).unwrap();
    let planned: f64 = order
        .iter()
        .map(|j| j.requested_gpus() as f64 * x[&j.id()].values().sum::<f64>())
        .sum();
    assert!(planned <= 8.0 + 1e-6, "{planned} GPUs planned on 8: {x:?}");
}

/// The speed-agnostic baseline ignores the jobs' speeds entirely.
#[test]
fn the_baseline_ignores_the_gpu_types_speeds() {
    let (_, fast) = hetero();
    let mut plain = JobState::new();
    let mut c = ClusterState::new();
    for id in [1, 2] {
        add(&mut plain, &mut c, job(id, id as f64, 4), &[]);
    }
    let types = [("K80".to_string(), 4), ("V100".to_string(), 4)];
    let a = Gavel::solve_with(&fast.runnable().collect::<Vec<_>>(), &fast, &types, false).unwrap();
    let b =
        Gavel::solve_with(&plain.runnable().collect::<Vec<_>>(), &plain, &types, false).unwrap();
    assert_eq!(a, b);
}

#[test]
fn a_job_larger_than_every_type_still_runs_across_types() {
    let (cluster, mut state) = hetero();
    let mut c = cluster.clone();
    add(&mut state, &mut c, job(3, 3.0, 6), &[]);
    let mut g = Gavel::default();
    let mut ran = false;
    for r in 0..10 {
        let s = g.schedule(&info(60.0 * r as f64), &state, &cluster);
        if let Some(d) = s.entries.iter().find(|d| d.job == JobId(3)) {
            assert_eq!(d.gpus, 6);
            ran = true;
        }
    }
    assert!(
        ran,
        "the 6-GPU job never ran on a cluster of two 4-GPU types"
    );
}
