//! The Pollux profile lookups against the artifact's own outputs
//! (`data/pollux/test-vectors/`, pollux-data.md §3.1, §4.1, §4.3).

use blox_sim::workload::pollux::{canonical_placement, AppProfile};
use std::collections::HashMap;
use std::path::PathBuf;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/pollux")
}

fn profiles() -> HashMap<String, AppProfile> {
    [
        "bert",
        "cifar10",
        "deepspeech2",
        "imagenet",
        "ncf",
        "yolov3",
    ]
    .iter()
    .map(|a| {
        (
            a.to_string(),
            AppProfile::load(&data().join("traces"), a).unwrap(),
        )
    })
    .collect()
}

fn rows(file: &str) -> Vec<HashMap<String, String>> {
    let mut r = csv::Reader::from_path(data().join("test-vectors").join(file)).unwrap();
    let h = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            h.iter()
                .zip(rec.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-12)
}

#[test]
fn placement_canonicalisation_is_rotation_not_sorting() {
    assert_eq!(canonical_placement(&[4, 2]), 24);
    assert_eq!(canonical_placement(&[4, 1, 2]), 124);
    assert_eq!(canonical_placement(&[4, 2, 1]), 142);
}

#[test]
fn step_time_lookup_matches_the_artifact_up_to_four_nodes() {
    let p = profiles();
    let mut checked = 0;
    for r in rows("throughput_lookup.csv") {
        if r["step_time"] == "ERROR" || r["num_nodes"].parse::<u32>().unwrap() > 4 {
            continue;
        }
        let per_node: Vec<u32> = r["placement"]
            .chars()
            .map(|c| c.to_digit(10).unwrap())
            .collect();
        let b: f64 = r["local_bsz"].parse().unwrap();
        let (step, sync) = p[&r["app"]].step_time(&per_node, b).unwrap();
        assert!(
            close(step, r["step_time"].parse().unwrap(), 1e-9),
            "{r:?}: {step}"
        );
        assert!(
            close(sync, r["sync_time"].parse().unwrap(), 1e-9),
            "{r:?}: {sync}"
        );
        checked += 1;
    }
    assert!(checked >= 240, "only {checked} rows checked");
}

#[test]
fn epoch_boundaries_and_completion_target_match_the_artifact() {
    let p = profiles();
    for r in rows("epoch_progress.csv") {
        let e: usize = r["epoch"].parse().unwrap();
        let want: f64 = r["progress_boundary"].parse().unwrap();
        assert!(close(p[&r["app"]].epoch_boundary(e), want, 1e-12), "{r:?}");
    }
    assert!(close(
        p["cifar10"].target_progress(),
        39062.908166595334,
        1e-12
    ));
}

#[test]
fn gradient_gain_matches_the_artifact() {
    let p = profiles();
    for r in rows("grad_stats.csv") {
        let m: f64 = r["batch_size"].parse().unwrap();
        let e: usize = r["epoch_index"].parse().unwrap();
        let gain = p[&r["app"]].gain(m, e);
        assert!(
            close(gain, r["gain_per_step"].parse().unwrap(), 1e-9),
            "{r:?}: {gain}"
        );
    }
}

#[test]
fn profile_duration_is_progress_target_over_goodput() {
    // One GPU at the initial batch: gain is 1 per step, so the duration is
    // P* x step time at the smallest atomic batch that holds M0.
    let p = profiles();
    let cifar = &p["cifar10"];
    let d = cifar.duration_s(1, cifar.m0, 4).unwrap();
    let (step, _) = cifar.step_time(&[1], cifar.m0 as f64).unwrap();
    assert!(close(d, cifar.target_progress() * step, 1e-9), "{d}");
    // More GPUs at the same batch never make it slower than 8x faster.
    let d8 = cifar.duration_s(8, 1024, 4).unwrap();
    assert!(d8 < d && d8 > d / 64.0);
}
