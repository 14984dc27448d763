//! ONES on its own paper's setting (examples/configs/ones-sc21/, workloads from
//! examples/ones-sc21/generate.py): every config runs, and ONES keeps its
//! defining advantage over Tiresias (SC'21 §4.2: elastic jobs start at once
//! instead of queueing for their requested GPUs).

mod shared;

use shared::blox_ok;

/// Runs a config on the first `jobs` jobs of workload 1; mean JCT in seconds.
fn mean_jct_s(config: &str, jobs: u32) -> f64 {
    let out = std::env::temp_dir().join(format!("blox-ones-sc21-{config}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    blox_ok(&[
        "sim",
        &format!("examples/configs/ones-sc21/{config}.toml"),
        "--out",
        &out.display().to_string(),
        "--quiet",
        "--set",
        &format!("workload.num_jobs={jobs}"),
    ]);
    let csv = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let (jct, status) = (
        head.iter().position(|h| *h == "jct_s").unwrap(),
        head.iter().position(|h| *h == "status").unwrap(),
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), jobs as usize, "{config}");
    assert!(
        rows.iter().all(|r| r[status] == "finished"),
        "{config}: not all finished"
    );
    let _ = std::fs::remove_dir_all(&out);
    rows.iter()
        .map(|r| r[jct].parse::<f64>().unwrap())
        .sum::<f64>()
        / rows.len() as f64
}

#[test]
fn every_ones_sc21_config_runs_its_workload_to_the_end() {
    for c in ["ones-paper-literal", "optimus", "optimus-oracle"] {
        let m = mean_jct_s(c, 40);
        assert!(m.is_finite() && m > 0.0, "{c}: {m}");
    }
}

#[test]
fn ones_beats_tiresias_on_its_own_setting() {
    let ones = mean_jct_s("ones", 150);
    let tiresias = mean_jct_s("tiresias", 150);
    assert!(
        ones < 0.8 * tiresias,
        "ONES {ones:.0} s against Tiresias {tiresias:.0} s"
    );
}
