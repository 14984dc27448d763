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
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // Ours beside the authors' published figures for the same seed.
    assert!(
        t.contains(
            "best-fit          42    10866    8190    2676       92.94       93.13  92.94, 93.13"
        ),
        "{t}"
    );
    assert!(
        t.contains(
            "gpu-packing       42    10866    8072    2794       91.37       91.57  91.37, 91.57"
        ),
        "{t}"
    );
    let placements = std::fs::read_to_string(out.join("best-fit-42-placements.csv")).unwrap();
    assert_eq!(placements.lines().count(), 10_867);
    assert!(
        placements.starts_with("event,task,node,gpus,gpu_milli,arrived_gpu_milli,used_gpu_milli\n")
    );
    let curve = std::fs::read_to_string(out.join("best-fit-42-curve.csv")).unwrap();
    assert!(curve.lines().any(|l| l == "130,93.13"), "{curve}");
}

#[test]
fn pack_names_a_bad_policy_row_or_file() {
    let o = blox(&["pack", "--policy", "fgd,tightest"]);
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains("unknown policy `tightest`") && t.contains("best-fit"),
        "{t}"
    );

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
}
