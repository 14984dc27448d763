use super::*;
use crate::test_util::*;
use blox_goodput::{AgentReport, AppLimits, GradStats, ThroughputParams};
use matrix::Row;
use std::collections::BTreeMap;

/// 1 node of 4 "slow" GPUs and 1 node of 4 "fast" ones.
fn cluster() -> ClusterState {
    let mut c = ClusterState::new();
    for t in ["slow", "fast"] {
        let mut n = NodeSpec::with_gpus(4);
        n.gpu_type = t.into();
        c.add_node(n);
    }
    c
}

fn params() -> SiaParams {
    Section::empty("scheduling").parse().unwrap()
}

fn limits() -> AppLimits {
    AppLimits {
        m0: 128,
        mmax: 4096,
        bmin: 32,
        bmax: 512,
    }
}

/// A job measured on `fits` (type → compute time per sample), with the
/// one-replica throughputs `xput1` it was submitted with.
fn measured(state: &JobState, id: u64, fits: &[(&str, f64)], xput1: &[(&str, f64)]) {
    // As a typed agent reports: the legacy keys hold the fit of the type
    // it runs on (here the first), beside `pollux.<type>.*`.
    let report = AgentReport {
        limits: limits(),
        params: fits.first().map(|(_, beta)| fit(*beta)),
        grad: Some(GradStats {
            sqr: 1.0,
            var: 50.0,
        }),
        max_profiled_replicas: 1,
        replica_cap: None,
        fixed_batch: None,
    };
    let m = state.metrics();
    for (k, v) in report.to_metrics() {
        m.set(JobId(id), k, v);
    }
    for (t, beta) in fits {
        let p = fit(*beta);
        let names = [
            "alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma",
        ];
        for (k, v) in names.iter().zip(p.to_array()) {
            m.set(JobId(id), &format!("pollux.{t}.{k}"), v);
        }
        m.set(JobId(id), &format!("pollux.{t}.max_profiled_replicas"), 1.0);
    }
    for (t, x) in xput1 {
        m.set(JobId(id), &format!("type.{t}.xput1"), *x);
    }
}

fn fit(beta_c: f64) -> ThroughputParams {
    ThroughputParams {
        alpha_c: 0.01,
        beta_c,
        alpha_n: 0.05,
        beta_n: 0.01,
        alpha_r: 0.02,
        beta_r: 0.005,
        gamma: 1.5,
    }
}

fn rules() -> RowRules {
    RowRules {
        project: true,
        share_max_replicas: true,
        max_gpus: 64,
    }
}

fn values(row: Row) -> Vec<f64> {
    match row {
        Row::Adaptive(v) => v,
        Row::Rigid { .. } => panic!("adaptive row expected"),
    }
}

/// Sia §3.2: a job that has run only on the slow type is estimated on the
/// fast one from its slow model, scaled by the two types' one-replica
/// throughputs; the row's minimum is 1.
#[test]
fn an_unseen_type_is_bootstrapped_from_a_seen_one() {
    let c = cluster();
    let mut state = JobState::new();
    let mut cc = c.clone();
    add(&mut state, &mut cc, job(1, 0.0, 1), &[]);
    measured(
        &state,
        1,
        &[("slow", 0.002)],
        &[("slow", 100.0), ("fast", 300.0)],
    );
    let configs = Configs::of(&c, 64, &BTreeMap::new());
    let types = [TypeKeys::new("slow", 4), TypeKeys::new("fast", 4)];
    let j = state.get(JobId(1)).unwrap();
    let report = matrix::report_of(j, &state);
    let on = matrix::job_on_types(j, &state, report.as_ref(), &types);
    assert!(on[0].model.is_some() && on[1].model.is_none());
    let v = values(matrix::row(j, report.as_ref(), &on, &configs, rules()));
    let slow1 = configs.of_type[0][0];
    let fast1 = configs.of_type[1][0];
    assert!((v[slow1] - 1.0).abs() < 1e-9, "{v:?}");
    assert!(
        (v[fast1] - 3.0).abs() < 1e-9,
        "three times the one-GPU throughput: {v:?}"
    );
    // Up to twice the replicas profiled (1): 1 and 2 GPUs, not 4.
    let four = configs.of_type[1][2];
    assert_eq!(configs.list[four].2, 4);
    assert!(v[four] <= matrix::ZERO_ALLOC_GAIN);
}

/// A job never measured anywhere is worth one GPU, anywhere, and nothing
/// more.
#[test]
fn a_new_job_is_worth_one_gpu_of_any_type() {
    let c = cluster();
    let mut state = JobState::new();
    let mut cc = c.clone();
    add(&mut state, &mut cc, job(1, 0.0, 4), &[]);
    let configs = Configs::of(&c, 64, &BTreeMap::new());
    let types = [TypeKeys::new("slow", 4), TypeKeys::new("fast", 4)];
    let j = state.get(JobId(1)).unwrap();
    let report = matrix::report_of(j, &state);
    let on = matrix::job_on_types(j, &state, report.as_ref(), &types);
    let v = values(matrix::row(j, report.as_ref(), &on, &configs, rules()));
    for (c, &(_, _, g)) in configs.list.iter().enumerate() {
        let want = if g == 1 { 1.0 } else { matrix::ZERO_ALLOC_GAIN };
        assert!((v[c] - want).abs() < 1e-12, "config {c}: {v:?}");
    }
}

/// Two jobs, one fast type with room for one of them: the job that gains
/// more from the fast type gets it (Sia matches jobs to GPU types), and
/// the other runs on the slow type.
#[test]
fn the_job_that_gains_most_from_a_type_gets_it() {
    let mut c = ClusterState::new();
    for t in ["slow", "fast"] {
        let mut n = NodeSpec::with_gpus(1);
        n.gpu_type = t.into();
        c.add_node(n);
    }
    let mut state = JobState::new();
    let mut cc = c.clone();
    for id in [1, 2] {
        add(&mut state, &mut cc, job(id, 0.0, 1), &[]);
    }
    // Job 1 runs 4x faster on the fast type, job 2 only 1.2x.
    measured(&state, 1, &[("slow", 0.004), ("fast", 0.001)], &[]);
    measured(&state, 2, &[("slow", 0.0012), ("fast", 0.001)], &[]);
    let mut sia = Sia::new(params());
    let s = sia.schedule(&info(3600.0), &state, &c);
    let type_of = |id: u64| {
        let d = s.entries.iter().find(|d| d.job == JobId(id)).unwrap();
        let g = d.gpu_ids.as_ref().unwrap()[0];
        c.node(c.gpu(g).unwrap().node)
            .unwrap()
            .spec
            .gpu_type
            .clone()
    };
    assert_eq!(type_of(1), "fast");
    assert_eq!(type_of(2), "slow");
    assert!(sia.last.proven_optimal);
}

/// A job restoring its checkpoint keeps its configuration even when
/// another would be better (`preserve_ckpt_allocs`).
#[test]
fn a_job_restoring_its_checkpoint_is_not_moved() {
    let c = cluster();
    let mut state = JobState::new();
    let mut cc = c.clone();
    let mut j = job(1, 0.0, 1);
    j.launches = 1;
    j.last_launch_s = Some(3590.0);
    // On the slow node's first GPU, still starting (no first iteration).
    add(&mut state, &mut cc, j, &[0]);
    measured(&state, 1, &[("slow", 0.004), ("fast", 0.001)], &[]);
    let mut sia = Sia::new(params());
    let s = sia.schedule(&info(3600.0), &state, &c);
    assert_eq!(s.entries[0].gpu_ids.as_deref(), Some(&[GpuId(0)][..]));
    let mut moving = Sia::new(SiaParams {
        hold_restoring: false,
        ..params()
    });

    let s = moving.schedule(&info(3600.0), &state, &c);
    assert_ne!(s.entries[0].gpu_ids.as_deref(), Some(&[GpuId(0)][..]));
}

#[test]
fn configurations_follow_the_paper() {
    let mut c = ClusterState::new();
    for _ in 0..3 {
        let mut n = NodeSpec::with_gpus(8);
        n.gpu_type = "rtx".into();
        c.add_node(n);
    }
    let configs = Configs::of(&c, 64, &BTreeMap::new());
    let gpus: Vec<(u32, u32)> = configs.list.iter().map(|&(_, n, g)| (n, g)).collect();
    assert_eq!(gpus, vec![(1, 1), (1, 2), (1, 4), (1, 8), (2, 16), (3, 24)]);
    let capped = Configs::of(&c, 64, &BTreeMap::from([("rtx".to_string(), 2)]));
    assert_eq!(capped.list.len(), 5);
}
