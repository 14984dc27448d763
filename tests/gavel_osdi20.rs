//! Gavel on its own paper's setting (examples/configs/gavel/: 36 V100 + 36
//! P100 + 36 K80, 6-minute rounds, Gavel's job generator and measured
//! throughputs, data/gavel/): heterogeneity awareness is what Gavel is for,
//! so the aware program must beat the same program blind to GPU types (OSDI'20
//! §7.2), and both must beat neither less than plain LAS. The configs' speed
//! tables must be the vendored measurements.

mod shared;

use shared::blox_ok;
use std::collections::BTreeMap;

/// Mean JCT (s) of jobs 20-219 of a bundled workload under a config.
fn mean_jct_s(config: &str, workload: &str) -> f64 {
    let out = std::env::temp_dir().join(format!(
        "blox-gavel-{config}-{workload}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&out);
    blox_ok(&[
        "sim",
        &format!("examples/configs/gavel/{config}.toml"),
        "--workload",
        &format!("data/gavel/workloads/{workload}.csv"),
        "--out",
        &out.display().to_string(),
        "--no-events",
        "--quiet",
        "--set",
        "run.track_jobs=[20, 219]",
    ]);
    let csv = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (id, jct, status, name) = (col("job_id"), col("jct_s"), col("status"), col("name"));
    let tracked: Vec<f64> = lines
        .map(|l| l.split(',').collect::<Vec<_>>())
        .filter(|r| (20..=219).contains(&r[id].parse::<u64>().unwrap()))
        .map(|r| {
            assert_eq!(r[status], "finished", "{config} {workload}: {r:?}");
            // The trace's `name` column names the job (`resnet50-bs32-41`).
            assert!(r[name].ends_with(&format!("-{}", r[id])), "{r:?}");
            r[jct].parse::<f64>().unwrap()
        })
        .collect();
    assert_eq!(tracked.len(), 200, "{config} {workload}");
    let _ = std::fs::remove_dir_all(&out);
    tracked.iter().sum::<f64>() / tracked.len() as f64
}

#[test]
#[ignore = "long (20 s in a debug build): the README's long tests, run by .ci/run with --ignored"]
fn heterogeneity_aware_gavel_beats_its_speed_agnostic_baseline_and_las() {
    for workload in ["single-6jph-seed1", "multi-2.5jph-seed1"] {
        let gavel = mean_jct_s("gavel", workload);
        let max_min = mean_jct_s("max-min", workload);
        let las = mean_jct_s("las", workload);
        eprintln!(
            "{workload}: gavel {:.2} h, max-min {:.2} h, las {:.2} h",
            gavel / 3600.0,
            max_min / 3600.0,
            las / 3600.0
        );
        assert!(
            gavel < 0.85 * max_min,
            "{workload}: Gavel {gavel:.0} s against its agnostic baseline {max_min:.0} s"
        );
        assert!(
            gavel < las,
            "{workload}: Gavel {gavel:.0} s against LAS {las:.0} s"
        );
    }
}

/// `{model: {type: speed}}` of a config's `[sim.model_type_speed]`.
fn config_speeds(config: &str) -> BTreeMap<String, BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(format!("examples/configs/gavel/{config}.toml")).unwrap();
    let t: blox_config::toml::Table = blox_config::toml::from_str(&text).unwrap();
    let table = t["sim"]["model_type_speed"].as_table().unwrap();
    table
        .iter()
        .map(|(m, types)| {
            let types = types.as_table().unwrap();
            (
                m.clone(),
                types
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_float().unwrap()))
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn the_configs_speeds_are_gavels_measured_throughputs() {
    // data/gavel/throughputs.csv: steps/s of each job type on each type.
    let csv = std::fs::read_to_string("data/gavel/throughputs.csv").unwrap();
    let mut tp: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let (job, rest) = line.rsplit_once(',').unwrap();
        let (job, gpu) = job.rsplit_once(',').unwrap();
        tp.entry(job.trim_matches('"').to_string())
            .or_default()
            .insert(gpu.to_string(), rest.parse().unwrap());
    }
    assert_eq!(tp.len(), 26, "Gavel's job table");
    let slug = |job: &str| -> String {
        let (family, bs) = job.split_once(" (batch size ").unwrap_or((job, ""));
        let name = family.to_lowercase().replace('-', "");
        if bs.is_empty() {
            name
        } else {
            format!("{name}-bs{}", bs.trim_end_matches(')'))
        }
    };
    for config in ["gavel", "max-min", "las"] {
        let speeds = config_speeds(config);
        // Every job type that runs on every type (ResNet-50 at batch size
        // 128 does not fit on a K80).
        assert_eq!(speeds.len(), 25, "{config}");
        for (job, by_type) in &tp {
            let Some(got) = speeds.get(&slug(job)) else {
                assert_eq!(by_type["K80"], 0.0, "{job} is missing from {config}");
                continue;
            };
            for gpu in ["V100", "P100", "K80"] {
                let want = by_type[gpu] / by_type["V100"];
                assert!(
                    (got[gpu] - want).abs() < 1e-4,
                    "{config}: {job} on {gpu}: {} against {want}",
                    got[gpu]
                );
            }
        }
    }
}
