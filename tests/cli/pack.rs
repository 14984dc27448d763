//! `blox pack`: the FGD packing experiment on the bundled openb trace.

use super::{blox, tempdir, text, write};

#[test]
fn pack_reports_the_published_allocation_and_writes_placements() {
    let dir = tempdir("pack");
    let out = dir.join("out");
    let o = blox(&[
        "pack",
        "--policy",
        "best-fit,gpu-packing",
        "--seed",
        "42-43",
        "--out",
        out.to_str().unwrap(),
        "--placements",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // Ours beside the authors' published figures for the same seed.
    for row in [
        "best-fit          42    10866    8190    2676       92.94       93.13  92.94, 93.13",
        "gpu-packing       42    10866    8072    2794       91.37       91.57  91.37, 91.57",
        // The means over the seeds, ours and the published ones.
        "default      best-fit          2   93.19   93.19  +0.00",
    ] {
        assert!(t.contains(row), "{row}\n{t}");
    }
    let placements =
        std::fs::read_to_string(out.join("default-best-fit-42-placements.csv")).unwrap();
    assert_eq!(placements.lines().count(), 10_867);
    assert!(
        placements.starts_with("event,task,node,gpus,gpu_milli,arrived_gpu_milli,used_gpu_milli,frag_gpu_milli,frag_percent,why\n")
    );
    // A task that failed says why, quoted where the reason has commas.
    let failed = placements.lines().find(|l| l.contains(",,,")).unwrap();
    assert!(
        failed.contains(",\"waiting for ") || failed.contains(",waiting for "),
        "{failed}"
    );
    assert!(
        failed.contains("the largest free share")
            || failed.contains("idle on a node")
            || failed.contains("cores and"),
        "{failed}"
    );
    let curves = std::fs::read_to_string(out.join("curves.csv")).unwrap();
    assert!(
        curves.lines().any(|l| l == "default,best-fit,42,130,93.13"),
        "{curves}"
    );
    let table = std::fs::read_to_string(out.join("pack.csv")).unwrap();
    assert!(
        table.contains("default,gpu-packing,43,10793,8123,2670,91.78,92.06,91.78,92.06,"),
        "{table}"
    );
    assert!(
        out.join("allocation-default.svg").exists() && out.join("allocation-default.png").exists()
    );
}

#[test]
fn pack_names_a_bad_policy_row_or_file() {
    let o = blox(&["pack", "--policy", "fgd,tightest"]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("unknown policy `tightest`") && t.contains("best-fit"),
        "{t}"
    );
    let o = blox(&["pack", "--seed", "51-42"]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("--seed `51-42`"), "{t}");

    let dir = tempdir("pack-bad");
    let pods = write(
        &dir,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nok,4000,1024,1,500\nbad,4000,1024,1,2000\n",
    );
    let o = blox(&["pack", "--trace", pods.to_str().unwrap(), "--tune", "0"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("skipped 1 × `gpu_milli` is over 1000 (one GPU) (first at line 3)"),
        "{t}"
    );
    assert!(t.contains("1 tasks on 1213 nodes"), "{t}");

    let o = blox(&["pack", "--trace", "no-such-trace.csv"]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("no-such-trace.csv"),
        "{t}"
    );

    // Two lists of one name from two folders: their outputs would
    // overwrite each other.
    std::fs::create_dir_all(dir.join("other")).unwrap();
    let again = dir.join("other").join("pods.csv");
    std::fs::copy(&pods, &again).unwrap();
    let o = blox(&[
        "pack",
        "--trace",
        pods.to_str().unwrap(),
        "--trace",
        again.to_str().unwrap(),
        "--tune",
        "0",
    ]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("both named `pods`") && t.contains("overwrite"),
        "{t}"
    );
}

#[test]
fn pack_timed_runs_by_the_traces_own_times() {
    let dir = tempdir("pack-timed");
    let out = dir.join("out");
    let o = blox(&[
        "pack",
        "--timed",
        "--tune",
        "0",
        "--policy",
        "fgd",
        "--out",
        out.to_str().unwrap(),
        "--placements",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // The default list's tasks are short: at most 1.06 % of the GPUs at once.
    assert!(
        t.contains(
            "default      fgd               42     8152    8152       0       0.23%       1.06%"
        ),
        "{t}"
    );
    let events = std::fs::read_to_string(out.join("default-fgd-42-events.csv")).unwrap();
    assert_eq!(events.lines().count(), 1 + 2 * 8152);
    assert!(
        events.lines().last().unwrap().contains(",leave,"),
        "{events}"
    );
    // The multigpu lists have no times.
    let o = blox(&["pack", "--timed", "--trace", "multigpu50"]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("has no creation time"),
        "{t}"
    );
}

#[test]
fn a_failed_run_is_reported_and_the_others_are_kept() {
    let dir = tempdir("pack-partial");
    // One GPU thousandth in all: 1.3 x the capacity would need millions of copies.
    let tiny = write(
        &dir,
        "tiny.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1,1,1\n",
    );
    let out = dir.join("out");
    let o = blox(&[
        "pack",
        "--trace",
        &format!("default,{}", tiny.to_str().unwrap()),
        "--policy",
        "best-fit",
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("1 of 2 runs failed") && t.contains("100 copies of each"),
        "{t}"
    );
    let table = std::fs::read_to_string(out.join("pack.csv")).unwrap();
    assert!(
        table.contains("default,best-fit,42,10866,8190,2676,92.94,93.13"),
        "{table}"
    );

    for (args, says) in [
        (vec!["pack", "--placements"], "give --out DIR too"),
        (vec!["pack", "--tune", "1e300"], "from 0 to 100"),
        (
            vec!["pack", "--trace", "nosuch"],
            "no bundled pod list `nosuch`",
        ),
    ] {
        let o = blox(&args);
        let t = text(&o);
        assert!(!o.status.success() && t.contains(says), "{args:?}: {t}");
    }
}

#[test]
fn fgd_exact_is_a_variant_with_no_published_figure() {
    let o = blox(&["pack", "--policy", "fgd-exact"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let row = t
        .lines()
        .find(|l| l.starts_with("default      fgd-exact"))
        .unwrap_or_else(|| panic!("{t}"));
    assert!(row.trim_end().ends_with(" -"), "{row}");
}

#[test]
fn a_packing_sweep_file_runs_the_grid_as_blox_pack_does() {
    let dir = tempdir("pack-sweep");
    let file = write(
        &dir,
        "grid.toml",
        "[packing]\ntraces = \"default\"\npolicies = \"best-fit, fgd\"\nseeds = [42, \"43\"]\n",
    );
    let out = dir.join("out");
    let o = blox(&[
        "sweep",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let table = std::fs::read_to_string(out.join("pack.csv")).unwrap();
    // 2 policies × 2 seeds, each beside its published figures.
    assert_eq!(table.lines().count(), 1 + 4, "{table}");
    assert!(
        table.contains("default,best-fit,42,10866,8190,2676,92.94,93.13,92.94,93.13,"),
        "{table}"
    );
    assert!(
        table.contains("default,fgd,43,10793,8351,2442,95.06,95.32,95.06,95.32,"),
        "{table}"
    );
    assert!(out.join("allocation-default.svg").exists());
    let means = std::fs::read_to_string(out.join("means.csv")).unwrap();
    assert!(means.contains("default,best-fit,2,93.19,93.19"), "{means}");

    // Paths of pod and node lists are read relative to the file.
    write(
        &dir,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,4000,1024,1,500\nb,8000,2048,2,1000\n",
    );
    write(
        &dir,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,64000,262144,2,P100\n",
    );
    let own = write(
        &dir,
        "own.toml",
        "[packing]\ntraces = \"pods.csv\"\nnodes = \"nodes.csv\"\nplacements = true\n",
    );
    let o = blox(&[
        "sweep",
        own.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(out.join("pods-fgd-42-placements.csv").exists());

    // What the file gets wrong is named, with the file.
    for (body, says) in [
        (
            "[packing]\ntrace = \"default\"\n",
            "unknown key [packing] trace",
        ),
        (
            "[packing]\nseeds = 4.2\n",
            "[packing] seeds: expected an integer",
        ),
        (
            "[packing]\npolicies = [\"tightest\"]\n",
            "unknown policy `tightest`",
        ),
        ("[packing]\n[sweep]\n", "`sweep` beside [packing]"),
        (
            "[packing]\ntune = \"high\"\n",
            "[packing] tune: expected a number",
        ),
    ] {
        let bad = write(&dir, "bad.toml", body);
        let o = blox(&[
            "sweep",
            bad.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let t = text(&o);
        assert!(!o.status.success() && t.contains(says), "{body}: {t}");
    }
    let o = blox(&["sim", file.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o).contains("is a sweep file"));
    let o = blox(&["sweep", file.to_str().unwrap(), "--shard", "0/2"]);
    assert!(!o.status.success() && text(&o).contains("--out and --threads only"));
}
