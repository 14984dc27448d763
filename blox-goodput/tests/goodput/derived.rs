//! Derived applications `base(scale=S;epochs=E)`: dataset subsets trained for a
//! given number of epochs (the ONES SC'21 workload).

use blox_goodput::profile::{parse_derived, ProfileCache};
use std::path::PathBuf;

fn traces() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/pollux/traces")
}

#[test]
fn a_subset_scales_every_epoch_and_keeps_the_step_times() {
    let mut cache = ProfileCache::new(&traces());
    let base = cache.get("imagenet").unwrap();
    let d = cache.get("imagenet(scale=0.01;epochs=30)").unwrap();
    assert_eq!(d.max_epochs, 30);
    assert_eq!(d.app, "imagenet(scale=0.01;epochs=30)");
    for e in 1..=30 {
        let want = base.epoch_boundary(e) * 0.01;
        assert!(
            (d.epoch_boundary(e) - want).abs() < 1e-9 * want.max(1.0),
            "epoch {e}"
        );
    }
    assert!((d.target_progress() - base.epoch_boundary(30) * 0.01).abs() < 1e-6);
    assert_eq!(d.limits, base.limits);
    assert_eq!(
        d.step_time(&[4, 4], 32.0),
        base.step_time(&[4, 4], 32.0),
        "same machine, same step"
    );
    // The same name is the same shared profile.
    assert!(std::sync::Arc::ptr_eq(
        &d,
        &cache.get("imagenet(scale=0.01;epochs=30)").unwrap()
    ));
}

#[test]
fn epochs_beyond_the_measured_ones_repeat_the_last_increment() {
    let mut cache = ProfileCache::new(&traces());
    let base = cache.get("bert").unwrap();
    assert_eq!(base.max_epochs, 2, "the artifact measured two BERT epochs");
    let d = cache.get("bert(scale=0.5;epochs=5)").unwrap();
    assert_eq!(d.max_epochs, 5);
    for e in 1..=2 {
        let want = 0.5 * base.epoch_boundary(e);
        assert!(
            (d.epoch_boundary(e) - want).abs() < 1e-6 * want,
            "epoch {e}"
        );
    }
    // Each measured curve goes on by its own last increment: the (min over
    // curves) boundary keeps growing by about one epoch's worth.
    for e in 3..=5 {
        let got = d.epoch_boundary(e) - d.epoch_boundary(e - 1);
        assert!(
            got > 0.0 && got <= 0.5 * (base.epoch_boundary(2) - base.epoch_boundary(1)) * 1.5,
            "epoch {e}: {got}"
        );
    }
    assert!(d.iterations_to_finish(12.0) > base.iterations_to_finish(12.0));
}

#[test]
fn bad_derived_names_are_named_errors() {
    for bad in [
        "imagenet(scale=0)",
        "imagenet(scale=-1;epochs=3)",
        "imagenet(epochs=0)",
        "imagenet(epochs=2.5)",
        "imagenet(speed=2)",
        "imagenet(scale=1",
        "(scale=1)",
        "imagenet(scale)",
    ] {
        let e = parse_derived(bad).expect_err(bad).to_string();
        assert!(e.contains(bad), "{bad}: {e}");
    }
    assert_eq!(parse_derived("imagenet").unwrap(), None);
    assert_eq!(
        parse_derived("imagenet(epochs=4)").unwrap(),
        Some(("imagenet", 1.0, Some(4)))
    );
    let mut cache = ProfileCache::new(&traces());
    let e = cache.get("nosuchapp(scale=0.5)").unwrap_err().to_string();
    assert!(e.contains("nosuchapp"), "{e}");
}
