//! The example's runner (`src/main.rs`, three lines) is the whole `blox`
//! command line with this crate's policies: they are listed, selected by
//! name in `sim` and `sweep`, and `report` plots them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn blox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custom-blox"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the runner starts")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("custom-blox-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn policies_lists_the_crates_policies_beside_the_built_in_ones() {
    let o = blox(&["policies"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for name in [
        "max-waiting",
        "fewest-gpus-first",
        "spread",
        "fifo",
        "consolidated",
    ] {
        assert!(t.contains(name), "{name} missing: {t}");
    }
}

#[test]
fn sim_runs_the_three_policies_selected_by_name() {
    let out = out_dir("sim");
    let o = blox(&[
        "sim",
        "--quiet",
        "configs/small.toml",
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("admission=max-waiting  scheduling=fewest-gpus-first  placement=spread"),
        "{t}"
    );
    let rounds = std::fs::read_to_string(out.join("rounds.csv")).unwrap();
    assert!(
        rounds.contains("max-waiting/fewest-gpus-first/spread"),
        "{rounds}"
    );
    // Another choice of policy changes the result.
    let fifo = blox(&[
        "sim",
        "--quiet",
        "configs/small.toml",
        "--set",
        "scheduling.policy=fifo",
    ]);
    assert!(fifo.status.success(), "{}", text(&fifo));
    let jct = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("avg JCT"))
            .map(str::to_string)
    };
    assert_ne!(jct(&t), jct(&text(&fifo)), "{t}\n{}", text(&fifo));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn sweep_and_report_run_the_crates_policies() {
    let out = out_dir("sweep");
    let o = blox(&[
        "sweep",
        "configs/sweep.toml",
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let table = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 2 * 2 * 2, "{table}");
    assert!(
        table.contains("fewest-gpus-first") && table.contains("spread"),
        "{table}"
    );
    let o = blox(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let cdf = std::fs::read_to_string(out.join("sweep-jct-vs-load.svg")).unwrap();
    assert!(
        cdf.contains("fewest-gpus-first"),
        "the plot names the policy"
    );
    assert!(Path::new(&out.join("summary.md")).is_file());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_bad_parameter_of_a_crate_policy_names_its_line() {
    let o = blox(&[
        "sim",
        "--quiet",
        "configs/small.toml",
        "--set",
        "admission.limit=0",
    ]);
    let t = text(&o);
    assert!(!o.status.success());
    assert!(
        t.contains("--set admission.limit=0") && t.contains("limit must be at least 1"),
        "{t}"
    );
}
