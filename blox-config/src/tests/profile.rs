//! Choosing the loop's plugins by config: names, exclusivity, conflicts
//! with `[run]`.

use crate::{Config, ConfigError};
use blox_core::extension::Profile;
use blox_core::health::Health;
use blox_core::{Job, JobId, JobSpec};

fn parse(extra: &str) -> Result<Config, ConfigError> {
    let text = format!("[cluster]\nnodes = 1\ngpus_per_node = 2\n{extra}");
    Config::parse(&text, "c.toml", std::path::Path::new("."), &[])
}

fn profile(extra: &str) -> Result<Profile, String> {
    parse(extra)
        .and_then(|c| c.profile())
        .map_err(|e| e.to_string())
}

#[test]
fn a_config_without_the_sections_runs_the_default_profile() {
    let p = profile("").unwrap();
    assert_eq!(p.label(), "startup-aware/fixed/hot-spares");
    let p = profile("[run]\ncheckpoint = \"young-daly\"\ncheckpoint_save_s = 30\n").unwrap();
    assert_eq!(p.label(), "startup-aware/young-daly/hot-spares");
    let p = profile("[protection]\npolicy = \"none\"\n").unwrap();
    assert_eq!(p.label(), "none/fixed/hot-spares");
}

#[test]
fn an_unknown_plugin_is_refused_naming_the_line_and_the_registered_ones() {
    let e = profile("[protection]\npolicy = \"startup-awar\"\n").unwrap_err();
    assert!(e.starts_with("c.toml:5:"), "{e}");
    assert!(
        e.contains("unknown protection policy `startup-awar`"),
        "{e}"
    );
    assert!(e.contains("did you mean `startup-aware`"), "{e}");
    assert!(e.contains("none, startup-aware"), "{e}");
    let e = profile("[checkpointing]\npolicy = \"daly\"\n").unwrap_err();
    assert!(
        e.contains("registered checkpointing policies: fixed, young-daly"),
        "{e}"
    );
}

#[test]
fn an_exclusive_point_takes_one_plugin() {
    let e = parse("[protection]\npolicy = [\"none\", \"startup-aware\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:5:"), "{e}");
    assert!(e.contains("exclusive extension point"), "{e}");
    // [run] checkpoint names the checkpointing plugin too: two different
    // ones are refused, naming both places.
    let e = parse("[run]\ncheckpoint = \"young-daly\"\ncheckpoint_save_s = 30\n[checkpointing]\npolicy = \"fixed\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:8:"), "{e}");
    assert!(e.contains("c.toml:5"), "{e}");
    assert!(
        e.contains("exclusive extension point `checkpointing`"),
        "{e}"
    );
    // The same one twice is no conflict.
    parse("[run]\ncheckpoint = \"young-daly\"\ncheckpoint_save_s = 30\n[checkpointing]\npolicy = \"young-daly\"\n")
        .unwrap();
}

#[test]
fn the_shipped_plugins_take_their_settings_from_run() {
    let e = profile("[protection]\npolicy = \"startup-aware\"\nmin_run_s = 5\n").unwrap_err();
    assert!(e.starts_with("c.toml:6:"), "{e}");
    assert!(e.contains("unknown key `min_run_s`"), "{e}");
    assert!(e.contains("from [run]"), "{e}");
    let e = profile("[checkpointing]\npolicy = \"young-daly\"\n").unwrap_err();
    assert!(e.contains("checkpoint_save_s"), "{e}");
    let e = profile("[run]\ncheckpoint_interval_s = 600\n[checkpointing]\npolicy = \"young-daly\"\ncheckpoint_save_s = 1\n")
        .unwrap_err();
    assert!(e.contains("unknown key `checkpoint_save_s`"), "{e}");
}

#[test]
fn young_daly_grows_with_the_mtbf_and_shrinks_with_the_gpus() {
    let p = profile(
        "[run]\ncheckpoint_save_s = 50\ncheckpoint_gpu_mtbf_h = 100\n[checkpointing]\npolicy = \"young-daly\"\n",
    )
    .unwrap();
    let mut job = Job::new(JobSpec::new(1, 0.0, 8));
    p.checkpointing.at_submission(&mut job);
    assert!(job.auto_checkpoint);
    assert_eq!(
        job.spec.metrics.get(blox_core::metric::CHECKPOINT_SAVE_S),
        Some(&50.0)
    );
    let health = Health::default();
    let one = p.checkpointing.at_launch(&job, 1, &health).unwrap();
    let eight = p.checkpointing.at_launch(&job, 8, &health).unwrap();
    // sqrt(2 x 50 s x 360,000 s) + 50 s on one GPU; an eighth of the MTTF on eight.
    assert!(
        (one - (2.0f64 * 50.0 * 360_000.0).sqrt() - 50.0).abs() < 1e-9,
        "{one}"
    );
    assert!(
        (eight - (2.0f64 * 50.0 * 45_000.0).sqrt() - 50.0).abs() < 1e-9,
        "{eight}"
    );
    // A job that names its own interval keeps it.
    let mut spec = JobSpec::new(2, 0.0, 1);
    spec.metrics
        .insert(blox_core::metric::CHECKPOINT_INTERVAL_S.to_string(), 900.0);
    let mut own = Job::new(spec);
    p.checkpointing.at_submission(&mut own);
    assert!(!own.auto_checkpoint);
    assert_eq!(own.id(), JobId(2));
}

#[test]
fn spares_need_a_recovery_plugin_that_calls_them() {
    let p = profile("[recovery]\npolicy = \"requeue\"\n").unwrap();
    assert_eq!(p.label(), "startup-aware/fixed/requeue");
    let text =
        "[cluster]\nnodes = 4\ngpus_per_node = 2\nspares = 1\n[recovery]\npolicy = \"requeue\"\n";
    let e = Config::parse(text, "c.toml", std::path::Path::new("."), &[])
        .and_then(|c| c.profile())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("c.toml:6:"), "{e}");
    assert!(e.contains("never calls a spare"), "{e}");
    assert!(e.contains("(c.toml:4)"), "{e}");
    let text = "[cluster]\nnodes = 4\ngpus_per_node = 2\nspares = 1\n";
    let p = Config::parse(text, "c.toml", std::path::Path::new("."), &[])
        .and_then(|c| c.profile())
        .unwrap();
    assert_eq!(p.recovery.name(), "hot-spares");
    let e = profile("[recovery]\npolicy = \"spares\"\n").unwrap_err();
    assert!(
        e.contains("registered recovery policies: hot-spares, requeue"),
        "{e}"
    );
}
