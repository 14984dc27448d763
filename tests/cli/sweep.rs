//! `blox sweep` and `blox report`: grids, resuming, shards, labels.

use super::*;

#[test]
fn sweep_runs_every_cell_and_writes_one_table() {
    let dir = tempdir("sweep");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,4,600\n1,0,1,60\n2,30,2,300\n3,90,8,120\n",
    );
    let cfg = write(
        &dir,
        "s.toml",
        &format!("{SMALL}\n[sweep]\nscheduling = [\"fifo\", \"las\", \"srtf\"]\nadmission = [\"accept-all\", {{ policy = \"load-based\", k = 1.0 }}]\nseeds = [1, 2]\n"),
    );
    let out = dir.join("out");
    let o = blox(&[
        "sweep",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let table = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 3 * 2 * 2, "{table}");
    assert!(table.contains("load-based(k=1.0)"), "{table}");
}

#[test]
fn grid_sweep_is_resumable_and_report_draws_its_plots() {
    let dir = tempdir("grid");
    // Two policy configs sharing the Philly digest, two loads.
    for (name, policy) in [("fifo.toml", "fifo"), ("las.toml", "las")] {
        write(
            &dir,
            name,
            &format!("[cluster]\nnodes = 2\ngpus_per_node = 4\n\n[run]\nround_s = 300\n\n[workload]\nkind = \"philly\"\npath = \"{}/data/pollux/traces/philly.csv\"\nnum_jobs = 30\n\n[scheduling]\npolicy = \"{policy}\"\n", env!("CARGO_MANIFEST_DIR")),
        );
    }
    let grid = write(
        &dir,
        "grid.toml",
        "[[grid]]\nname = \"small\"\nconfigs = [\"fifo.toml\", \"las.toml\"]\njobs_per_hour = [2, 6]\nseeds = [1]\nsections.cluster = { nodes = 1, gpus_per_node = 8 }\n",
    );
    let out = dir.join("out");
    let run = || {
        blox(&[
            "sweep",
            grid.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = run();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("4 cells: 0 already done, 4 to run"),
        "{}",
        text(&o)
    );
    let table = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 4, "{table}");
    assert!(out.join("small/las/6jph-s1/jobs.csv").is_file());
    // The section replacement took effect: 8 GPUs on one node.
    let first = std::fs::read_to_string(out.join("small/fifo/2jph-s1/rounds.csv")).unwrap();
    assert!(
        first.lines().nth(1).unwrap().contains(",8,accept-all/"),
        "{first}"
    );
    // Run again: nothing is recomputed, the table is the same.
    let o = run();
    assert!(
        text(&o).contains("4 cells: 4 already done, 0 to run"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(out.join("sweep.csv")).unwrap(),
        table
    );
    let o = blox(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    for f in [
        "small-jct-cdf.svg",
        "small-jct-vs-load.svg",
        "small-resp-vs-load.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("fifo") && svg.contains("las"),
            "{f}"
        );
        assert!(
            svg.contains("load (jobs per hour)") || f.contains("cdf"),
            "{f}"
        );
    }
    // Every plot also as PNG, and the time series at the highest load.
    for f in [
        "small-jct-cdf.png",
        "small-jct-vs-load.png",
        "small-util-over-time.png",
        "small-queue-over-time.png",
    ] {
        let png = std::fs::read(out.join(f)).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{f}");
    }
    let svg = std::fs::read_to_string(out.join("small-util-over-time.svg")).unwrap();
    assert!(svg.contains("time (hours)") && svg.contains("6 jobs/hour"));
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("| fifo |") && md.contains("| las |"), "{md}");
}

#[test]
fn sweep_labels_with_commas_survive_the_table_and_report_reads_it() {
    let dir = tempdir("sweep-commas");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s,user\n0,0,4,600,a\n1,0,1,60,b\n2,30,2,300,a\n",
    );
    // A policy with two parameters is labelled `quota(max_gpus=4,max_jobs=2)`.
    let cfg = write(
        &dir,
        "s.toml",
        &format!("{SMALL}\n[sweep]\nadmission = [\"accept-all\", {{ policy = \"quota\", max_jobs = 2, max_gpus = 4 }}]\n"),
    );
    let out = dir.join("out");
    let o = blox(&[
        "sweep",
        cfg.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let mut rdr = csv::Reader::from_path(out.join("sweep.csv")).unwrap();
    let header = rdr.headers().unwrap().clone();
    let admission = header.iter().position(|h| h == "admission").unwrap();
    let labels: Vec<String> = rdr
        .records()
        .map(|r| r.unwrap()[admission].to_string())
        .collect();
    assert!(labels.iter().any(|l| l.contains(',')), "{labels:?}");
    let o = blox(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("summary.md").is_file());
}

#[test]
fn a_grid_cell_is_recomputed_when_its_config_changes_and_stems_do_not_collide() {
    let dir = tempdir("grid-hash");
    for sub in ["a", "b"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        // Same file name in two folders, different jobs.
        write(
            &dir.join(sub),
            "trace.csv",
            &format!(
                "job_id,arrival_s,num_gpus,duration_s\n0,0,1,{}\n",
                if sub == "a" { 600 } else { 60 }
            ),
        );
    }
    let cfg = write(&dir, "fifo.toml", SMALL);
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1,10\n",
    );
    let grid = write(
        &dir,
        "grid.toml",
        "[[grid]]\nname = \"g\"\nconfigs = [\"fifo.toml\"]\nworkloads = [\"a/trace.csv\", \"b/trace.csv\"]\n",
    );
    let out = dir.join("out");
    let run = || {
        blox(&[
            "sweep",
            grid.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = run();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("2 cells: 0 already done, 2 to run"),
        "{}",
        text(&o)
    );
    let table = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert!(
        table.contains("a-trace") && table.contains("b-trace"),
        "{table}"
    );
    // Each cell ran its own trace (jobs of 600 s and of 60 s).
    let mut rdr = csv::Reader::from_path(out.join("sweep.csv")).unwrap();
    let jct = rdr
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "avg_jct_s")
        .unwrap();
    let jcts: Vec<f64> = rdr
        .records()
        .map(|r| r.unwrap()[jct].parse().unwrap())
        .collect();
    assert_eq!(jcts, vec![600.0, 60.0], "{table}");
    // Unchanged: both reused. Changed config: both run again.
    assert!(text(&run()).contains("2 cells: 2 already done, 0 to run"));
    std::fs::write(&cfg, SMALL.replace("round_s = 60", "round_s = 30")).unwrap();
    assert!(text(&run()).contains("2 cells: 0 already done, 2 to run"));
}

/// `--shard I/N` runs cells I, I+N, …; merging every shard gives the table
/// and cell folders of the unsharded sweep (all but the wall times), and
/// `blox report` reads it. Incomplete or mixed shards are refused.
#[test]
fn a_sharded_and_merged_sweep_equals_the_unsharded_one() {
    let dir = tempdir("shards");
    write(
        &dir,
        "trace.csv",
        "job_id,arrival_s,num_gpus,duration_s\n0,0,4,600\n1,0,1,60\n2,30,2,300\n3,90,8,120\n",
    );
    let cfg = write(
        &dir,
        "s.toml",
        &format!(
            "{SMALL}\n[sweep]\nscheduling = [\"fifo\", \"las\", \"srtf\"]\nseeds = [1, 2, 3]\n"
        ),
    );
    let run = |extra: &[&str], out: &Path| {
        let mut args = vec![
            "sweep",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = blox(&args);
        assert!(o.status.success(), "{}", text(&o));
    };
    let whole = dir.join("whole");
    run(&[], &whole);
    // 9 cells over 4 shards: 3, 2, 2, 2.
    let shards: Vec<PathBuf> = (0..4).map(|i| dir.join(format!("shard-{i}"))).collect();
    for (i, s) in shards.iter().enumerate() {
        run(&["--shard", &format!("{i}/4")], s);
        let rows = std::fs::read_to_string(s.join("sweep.csv")).unwrap();
        assert_eq!(rows.lines().count() - 1, if i == 0 { 3 } else { 2 });
    }
    let merged = dir.join("merged");
    let merge = |dirs: &[PathBuf], out: &Path| {
        let mut args = vec!["sweep".to_string(), "merge".to_string()];
        args.extend(dirs.iter().rev().map(|d| d.display().to_string()));
        args.extend(["--out".to_string(), out.display().to_string()]);
        blox(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let o = merge(&shards, &merged);
    assert!(o.status.success(), "{}", text(&o));
    // Same rows in the same order; only the wall time differs.
    assert_eq!(sweep_table(&whole), sweep_table(&merged));
    let dirs: Vec<String> = {
        let mut r = csv::Reader::from_path(whole.join("sweep.csv")).unwrap();
        let i = r
            .headers()
            .unwrap()
            .iter()
            .position(|h| h == "dir")
            .unwrap();
        r.records().map(|rec| rec.unwrap()[i].to_string()).collect()
    };
    assert_eq!(dirs.len(), 9);
    for d in &dirs {
        assert_eq!(
            std::fs::read_to_string(whole.join(d).join("jobs.csv")).unwrap(),
            std::fs::read_to_string(merged.join(d).join("jobs.csv")).unwrap(),
            "{d}"
        );
    }
    let o = blox(&["report", merged.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    // A missing shard, or one of another split, is refused.
    let o = merge(&shards[..3], &dir.join("bad"));
    assert!(!o.status.success());
    assert!(text(&o).contains("shard 3/4 is missing"), "{}", text(&o));
    let other = dir.join("other");
    run(&["--shard", "0/3"], &other);
    let o = merge(
        &[
            shards[1].clone(),
            shards[2].clone(),
            shards[3].clone(),
            other,
        ],
        &dir.join("bad2"),
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("does not belong"), "{}", text(&o));
    let o = blox(&["sweep", cfg.to_str().unwrap(), "--shard", "4/4"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("0 <= I < N"), "{}", text(&o));
}
