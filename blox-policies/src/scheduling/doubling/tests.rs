use super::*;

fn params(variant: Variant) -> DoublingParams {
    DoublingParams {
        traces_dir: None,
        gpus_per_node: 4,
        variant,
        explore_s: 600.0,
        tolerance: 0.01,
        min_loss_points: 4,
    }
}

#[test]
fn convergence_fit_recovers_a_one_over_k_loss_curve() {
    let truth = [0.5, 0.2, 0.3];
    let pts: Vec<(f64, f64)> = (0..12)
        .map(|k| (k as f64, 1.0 / (truth[0] * k as f64 + truth[1]) + truth[2]))
        .collect();
    let b = fit_convergence(&pts).unwrap();
    for (k, l) in &pts {
        let pred = 1.0 / (b[0] * k + b[1]) + b[2];
        assert!((pred - l).abs() < 1e-3, "k={k}: {pred} vs {l} ({b:?})");
    }
    // Converged when the excess is 1 % of the start: β0·k = 99·β1.
    let k = converged_at(&b, 0.01);
    assert!((k - 99.0 * 0.2 / 0.5).abs() / k < 0.05, "{k}");
    assert!(b.iter().all(|v| *v >= 0.0));
}

#[test]
fn eq5_fits_ring_allreduce_exactly_and_the_others_approximately() {
    let (m, tfb, a, bt, g, n) = (256.0, 1e-3, 1e-4, 1e-9, 1e-10, 1e8);
    for (name, t, tol) in [
        (
            "ring",
            t_ring as fn(f64, f64, f64, f64, f64, f64, f64) -> f64,
            1e-9,
        ),
        ("doubling-halving", t_doubling_halving, 0.05),
        ("binary-blocks", t_binary_blocks, 0.05),
    ] {
        let ws = [1.0, 2.0, 4.0, 8.0];
        let rows: Vec<Vec<f64>> = ws.iter().map(|&w| features(w, m)).collect();
        let y: Vec<f64> = ws.iter().map(|&w| t(w, m, tfb, a, bt, g, n)).collect();
        let th = nnls(&rows, &y);
        let th = [th[0], th[1], th[2], th[3]];
        for (&w, &v) in ws.iter().zip(&y) {
            let p = step_time(&th, w as u32, m as u32);
            assert!((p - v).abs() <= tol * v, "{name} at w={w}: {p} vs {v}");
        }
    }
}

#[test]
fn exploratory_jobs_try_1_2_4_8_gpus_then_are_doubled_from_what_they_measured() {
    let mut d = Doubling::new(params(Variant::Exploratory), None);
    let cluster = ClusterState::homogeneous(4, 4);
    let mut state = JobState::new();
    let mut j = Job::new(JobSpec::new(1, 0.0, 1));
    j.spec.batch_size = Some(64);
    j.status = JobStatus::Queued;
    state.insert(j);
    let mut seen = Vec::new();
    for round in 0..12u32 {
        let s = d.schedule(
            &crate::test_util::info(60.0 * round as f64),
            &state,
            &cluster,
        );
        let k = s.entries[0].gpus;
        seen.push(k);
        let job = state.get_mut(JobId(1)).unwrap();
        job.status = JobStatus::Running;
        job.allocation = (0..k).map(GpuId).collect();
        job.run_time_s += 60.0;
        // Perfectly linear throughput: more GPUs always pay.
        state
            .metrics()
            .set(JobId(1), metric::THROUGHPUT, 100.0 * k as f64);
    }
    // 150 s per size with 60 s rounds: 1,1,1 then 2,2,(2) …, then 8 until
    // the job doubles to the whole cluster.
    assert_eq!(&seen[..3], &[1, 1, 1], "{seen:?}");
    assert!(
        seen.contains(&2) && seen.contains(&4) && seen.contains(&8),
        "{seen:?}"
    );
    assert_eq!(*seen.last().unwrap(), 16, "{seen:?}");
    assert!(seen.iter().all(|k| k.is_power_of_two()));
}

#[test]
fn nnls_recovers_non_negative_coefficients_and_clips_negative_ones() {
    let rows: Vec<Vec<f64>> = [1.0, 2.0, 4.0, 8.0]
        .iter()
        .map(|&w| features(w, 256.0))
        .collect();
    let truth = [0.001, 0.01, 0.05, 0.02];
    let y: Vec<f64> = rows
        .iter()
        .map(|r| r.iter().zip(&truth).map(|(a, b)| a * b).sum())
        .collect();
    let fit = nnls(&rows, &y);
    // With m fixed, m/w and (w−1)/w = 1 − 1/w are collinear with the
    // constant: the coefficients are not unique, the predictions are.
    let fit4 = [fit[0], fit[1], fit[2], fit[3]];
    for w in [1u32, 3, 16, 64] {
        let (a, b) = (step_time(&fit4, w, 256), step_time(&truth, w, 256));
        assert!(
            (a - b).abs() < 1e-9 * b.max(1.0),
            "w={w}: {a} vs {b} ({fit:?})"
        );
    }
    assert!(fit.iter().all(|c| *c >= 0.0));
    // y = 1 − x has a negative slope: NNLS keeps it at 0.
    let rows = vec![vec![0.0, 1.0], vec![1.0, 1.0], vec![2.0, 1.0]];
    let fit = nnls(&rows, &[1.0, 0.0, -1.0]);
    assert_eq!(fit[0], 0.0);
    assert!(fit[1] >= 0.0);
}

#[test]
fn allocations_are_powers_of_two_within_capacity() {
    let traces = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/pollux/traces");
    let mut d = Doubling::new(params(Variant::Precompute), Some(traces));
    let cluster = ClusterState::homogeneous(4, 4);
    let mut state = JobState::new();
    for (id, app, batch) in [
        (1, "cifar10", 1024),
        (2, "imagenet", 3200),
        (3, "bert", 96),
        (4, "ncf", 32768),
    ] {
        let mut j = Job::new(JobSpec::new(id, id as f64, 1));
        j.spec.model = Some(app.into());
        j.spec.batch_size = Some(batch);
        j.status = JobStatus::Queued;
        state.insert(j);
    }
    let s = d.schedule(&crate::test_util::info(0.0), &state, &cluster);
    let total: u32 = s.entries.iter().map(|e| e.gpus).sum();
    assert!(total <= 16);
    for e in &s.entries {
        assert!(e.gpus.is_power_of_two(), "{e:?}");
    }
    // ncf never grows past one GPU; the others got more than one.
    assert_eq!(
        s.entries.iter().find(|e| e.job == JobId(4)).unwrap().gpus,
        1
    );
    assert!(s.entries.iter().any(|e| e.gpus > 1), "{s:?}");
}
