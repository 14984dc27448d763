//! Per-GPU-type profiles (the Sia artifact's, `data/sia/`): what the loader
//! reads and the rules it carries.

use blox_goodput::typed::{is_per_type, packed, sia_fixed_batch, FixedRule};
use blox_goodput::{AppProfile, TypedCache};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cache() -> TypedCache {
    TypedCache::open(&root().join("data/sia/traces")).expect("data/sia/traces reads")
}

fn types(t: &[&str]) -> Vec<String> {
    t.iter().map(|s| s.to_string()).collect()
}

/// The artifact's `aws` profiles are the Pollux artifact's, so a typed load
/// of `aws` gives Pollux's step times (without Pollux's yolov3 override).
#[test]
fn aws_is_the_pollux_artifacts_gpu() {
    assert!(is_per_type(&root().join("data/sia/traces")));
    assert!(!is_per_type(&root().join("data/pollux/traces")));
    let mut c = cache();
    for app in ["cifar10", "bert", "imagenet", "deepspeech2"] {
        let typed = c.get(app, &types(&["aws"])).unwrap();
        let aws = typed.on("aws").unwrap();
        let pollux = AppProfile::load(&root().join("data/pollux/traces"), app).unwrap();
        for per_node in [
            vec![1],
            vec![4, 2],
            vec![4, 4, 4, 4],
            vec![4, 4, 4, 4, 4, 4],
        ] {
            let b = pollux.limits.bmin as f64 * 2.0;
            assert_eq!(
                aws.step_time(&per_node, b),
                pollux.step_time(&per_node, b),
                "{app} {per_node:?}"
            );
        }
        assert_eq!(aws.limits.m0, pollux.limits.m0);
        assert_eq!(aws.limits.mmax, pollux.limits.mmax);
    }
}

/// The constants of applications.csv and the exceptions of per_type.csv.
#[test]
fn model_constants_and_exceptions_apply() {
    let mut c = cache();
    let ds = c.get("deepspeech2", &types(&["aws", "rtx"])).unwrap();
    assert_eq!(ds.on("rtx").unwrap().limits.bmax, 57);
    assert!(ds.on("aws").unwrap().limits.bmax > 57);
    let cifar = c.get("cifar10", &types(&["aws"])).unwrap();
    let p = cifar.on("aws").unwrap();
    assert!((p.calibration - 1.0 / 1.8).abs() < 1e-12);
    assert_eq!(p.restart_s, Some(50.0));
    // The hybrid-parallel GPT: 8 stages on rtx, 2 on dgx-ext, nothing on aws.
    let gpt = c
        .get("gpt_pmp", &types(&["aws", "rtx", "dgx-ext"]))
        .unwrap();
    assert!(gpt.on("aws").is_none());
    assert_eq!(gpt.on("rtx").unwrap().pipeline.unwrap().stages, 8);
    assert_eq!(gpt.on("dgx-ext").unwrap().pipeline.unwrap().stages, 2);
    // A pipeline step: 3·((stages − 1) + 48)·f + sync, looked up per replica's 48 samples.
    let rtx = gpt.on("rtx").unwrap();
    let (compute, sync) = rtx.step_time(&[8], 48.0).unwrap();
    assert!(
        (compute - 3.0 * (7.0 + 48.0) * 0.099).abs() < 1e-9,
        "{compute}"
    );
    assert!((sync - 0.3275).abs() < 1e-12);
    // No gpt_pmp profile on the cluster's only type: an error naming the file.
    let err = c.get("gpt_pmp", &types(&["aws"])).unwrap_err().to_string();
    assert!(err.contains("placements-aws.csv"), "{err}");
}

/// Faster GPU types have a higher one-replica throughput: the ratio Sia
/// bootstraps unseen types with.
#[test]
fn one_replica_throughput_orders_the_gpu_types() {
    let mut c = cache();
    for app in ["cifar10", "imagenet", "bert"] {
        let t = c.get(app, &types(&["aws", "rtx", "dgx-ext"])).unwrap();
        let x = |k: &str| t.on(k).unwrap().atomic_throughput().unwrap();
        assert!(x("dgx-ext") > x("aws"), "{app}");
        assert!(x("dgx-ext") > x("rtx"), "{app}");
        let slowest = t.slowest_of(["aws", "rtx", "dgx-ext"].into_iter()).unwrap();
        assert_ne!(slowest.gpu_type.as_deref(), Some("dgx-ext"));
    }
}

/// The artifact's fixed-batch rule takes the placement's largest measured
/// atomic batch, and its memory cap at the replica count.
#[test]
fn the_fixed_batch_rule_respects_the_placements_measured_batches() {
    let mut c = cache();
    let t = c.get("cifar10", &types(&["rtx"])).unwrap();
    let p = t.on("rtx").unwrap();
    for r in [1u32, 2, 3, 6, 8, 12, 16] {
        let place = packed(r, 8);
        let cfg = sia_fixed_batch(p, &place, 4096.0, FixedRule::Job);
        let most = p.max_atomic_for(&place).unwrap();
        assert!(cfg.atomic <= most, "{r}: {cfg:?} over {most}");
        assert!(cfg.global(r) <= p.limits.mmax, "{r}: {cfg:?}");
        assert!(
            p.step_time_or_nearest(&place, cfg.atomic as f64).is_some(),
            "{r}"
        );
    }
    // One GPU above M0 accumulates at least once (and Gavel's estimate always).
    let one = sia_fixed_batch(p, &[1], 256.0, FixedRule::Job);
    assert!(one.accum >= 1);
    let m0 = sia_fixed_batch(p, &[1], p.limits.m0 as f64, FixedRule::Job);
    assert_eq!(m0.accum, 0);
    let gavel = sia_fixed_batch(p, &[1], p.limits.m0 as f64, FixedRule::Gavel);
    assert_eq!(gavel.accum, 1);
}
