//! Task for task against the FGD authors' simulator: its per-task placements
//! (vendored under `data/openb/reference/`, with the command that made them)
//! must be ours.

use std::io::BufRead;
use std::path::PathBuf;

use blox_share::openb::{read_nodes, read_tasks};
use blox_share::packing::{run, PackingSetup};
use blox_share::policy::by_name;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/openb")
}

/// (task, node, gpus, fragment amount) of each row of a reference file.
fn reference(file: &str) -> Vec<(String, String, String, String)> {
    let f = std::fs::File::open(data().join("reference").join(file)).unwrap();
    let lines = std::io::BufReader::new(flate2::read::GzDecoder::new(f)).lines();
    lines
        .skip(1)
        .map(|l| {
            let l = l.unwrap();
            let v: Vec<&str> = l.split(',').collect();
            let frag = v.get(4).map(|f| f.to_string()).unwrap_or_default();
            (v[1].to_string(), v[2].to_string(), v[3].to_string(), frag)
        })
        .collect()
}

fn check(trace: &str, policy: &str, seed: i64) {
    check_file(trace, policy, seed, "");
}

/// [`check`] against the first tasks of a reference run stopped early
/// (`<trace>-<policy>-1.3-<seed>-first.csv.gz`: nodes and fragment amounts;
/// a stopped run has no GPU indices), returning how many were compared.
fn check_first(trace: &str, policy: &str, seed: i64) -> usize {
    check_file(trace, policy, seed, "-first")
}

fn check_file(trace: &str, policy: &str, seed: i64, suffix: &str) -> usize {
    let partial = !suffix.is_empty();
    let (nodes, skipped) = read_nodes(&data().join("openb_node_list_gpu_node.csv")).unwrap();
    assert_eq!(skipped.total(), 0);
    let (tasks, skipped) = read_tasks(
        &data().join(format!("openb_pod_list_{trace}.csv.gz")),
        &nodes,
    )
    .unwrap();
    assert_eq!(skipped.total(), 0);
    let mut p = by_name(policy).unwrap();
    let setup = PackingSetup {
        seed,
        ..PackingSetup::default()
    };
    let ours = run(&nodes, &tasks, p.as_mut(), &setup).unwrap();
    let theirs = reference(&format!(
        "openb_pod_list_{trace}-{policy}-1.3-{seed}{suffix}.csv.gz"
    ));
    if partial {
        assert!(ours.outcomes.len() >= theirs.len(), "tasks arriving");
    } else {
        assert_eq!(ours.outcomes.len(), theirs.len(), "tasks arriving");
    }
    let mut differ = Vec::new();
    let mut frag_differs: Vec<String> = Vec::new();
    for (i, (o, (task, node, gpus, frag))) in ours.outcomes.iter().zip(&theirs).enumerate() {
        assert_eq!(&o.task, task, "arrival {i}");
        let our_node = o.node.map(|n| ours.nodes[n].clone()).unwrap_or_default();
        let our_gpus = o
            .gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("-");
        let gpus_differ = !partial && &our_gpus != gpus;
        if &our_node != node || gpus_differ {
            differ.push(format!(
                "{i} {task}: ours {our_node} [{our_gpus}], reference {node} [{gpus}]"
            ));
        }
        // The cluster's fragment amount after the task, as the reference
        // prints it (%.2f).
        let our_frag = format!("{:.2}", o.frag_milli);
        if &our_frag != frag {
            frag_differs.push(format!("{i} {task}: ours {our_frag}, reference {frag}"));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} tasks placed differently; first: {:?}",
        differ.len(),
        theirs.len(),
        &differ[..differ.len().min(5)]
    );
    assert!(
        frag_differs.is_empty(),
        "{} fragment amounts differ; first: {:?}",
        frag_differs.len(),
        &frag_differs[..frag_differs.len().min(5)]
    );
    theirs.len()
}

#[test]
fn fgd_on_the_default_trace_places_every_task_as_the_reference() {
    check("default", "fgd", 42);
}

#[test]
fn the_allocation_curve_is_the_published_one() {
    // The published `analysis_allo_discrete.csv` row for this run
    // (openb_pod_list_default, 06-FGD, 1.3, 42): 95.14 at 100 % arrived,
    // 95.29 at 130 %.
    let (nodes, _) = read_nodes(&data().join("openb_node_list_gpu_node.csv")).unwrap();
    let (tasks, _) = read_tasks(&data().join("openb_pod_list_default.csv.gz"), &nodes).unwrap();
    let ours = run(
        &nodes,
        &tasks,
        by_name("fgd").unwrap().as_mut(),
        &PackingSetup::default(),
    )
    .unwrap();
    let curve = blox_share::curve::allocation_curve(&ours.outcomes, ours.total_gpus, 130);
    assert_eq!(blox_share::curve::allocated_at(&curve, 100), Some(95.14));
    assert_eq!(blox_share::curve::allocated_at(&curve, 130), Some(95.29));
}

#[test]
fn best_fit_on_the_default_trace_places_every_task_as_the_reference() {
    check("default", "best-fit", 42);
}

/// GPU model constraints (a third of the tasks bound to models):
/// `openb_pod_list_gpuspec33`, FGD, seed 42, run in full.
#[test]
fn fgd_on_the_gpuspec33_trace_places_every_task_as_the_reference() {
    check("gpuspec33", "fgd", 42);
}

/// Tasks of several whole GPUs (`openb_pod_list_multigpu50`: half the GPU
/// tasks ask for more than one), FGD, seed 43 (the second seed), run in
/// full: every task's node and GPU indices.
#[test]
fn fgd_on_the_multigpu50_trace_seed_43_places_every_task_as_the_reference() {
    check("multigpu50", "fgd", 43);
}

/// `gpushare40` (40 % of the GPU tasks share GPUs), FGD, seed 42, run in
/// full: every task's node and GPU indices, the 2,784 that fail included.
#[test]
fn fgd_on_gpushare40_places_every_task_as_the_reference() {
    check("gpushare40", "fgd", 42);
}

/// FGD on `multigpu50` with the first seed too (42), run in full.
#[test]
fn fgd_on_the_multigpu50_trace_seed_42_places_every_task_as_the_reference() {
    check("multigpu50", "fgd", 42);
}

/// `multigpu50`, best fit, seed 43, run in full: every task's node and GPU
/// indices, the 1,453 that fail included.
#[test]
fn best_fit_on_multigpu50_places_every_task_as_the_reference() {
    check("multigpu50", "best-fit", 43);
}

/// `multigpu50` (half the GPU tasks ask for several GPUs), GPU packing,
/// seed 43, run in full: every task's node and GPU indices.
#[test]
fn gpu_packing_on_multigpu50_places_every_task_as_the_reference() {
    check("multigpu50", "gpu-packing", 43);
}

/// `multigpu50`, dot product, seed 42, run in full: every task's node and
/// GPU indices.
#[test]
fn dot_product_on_multigpu50_places_every_task_as_the_reference() {
    check("multigpu50", "dot-product", 42);
}

/// `multigpu50`, GPU clustering, seed 42, run in full: every task's node
/// and GPU indices.
#[test]
fn gpu_clustering_on_multigpu50_places_every_task_as_the_reference() {
    check("multigpu50", "gpu-clustering", 42);
}

/// `gpuspec33`, dot product, seed 42: the first tasks of a run stopped
/// after 12 minutes.
#[test]
fn dot_product_on_gpuspec33_places_the_first_tasks_as_the_reference() {
    assert!(check_first("gpuspec33", "dot-product", 42) > 1000);
}

/// `gpushare40`, best fit, seed 43: the first tasks of a run stopped after
/// 12 minutes.
#[test]
fn best_fit_on_gpushare40_places_the_first_tasks_as_the_reference() {
    assert!(check_first("gpushare40", "best-fit", 43) > 1000);
}

/// The CPU family (tasks' CPU demands scaled; lists the other runs do not
/// touch), every policy on lists of its own, the first tasks of runs
/// stopped after 8 minutes: `cpu050` FGD 42, `cpu250` best fit 43.
#[test]
fn the_cpu_lists_place_the_first_tasks_as_the_reference() {
    assert!(check_first("cpu050", "fgd", 42) > 2000);
    assert!(check_first("cpu250", "best-fit", 43) > 2000);
}

/// `gpushare100` GPU packing 42, `multigpu20` dot product 43, `gpuspec10`
/// GPU clustering 42: one list of each family besides the ones run in
/// full, the first tasks of runs stopped after 8 minutes.
#[test]
fn other_lists_of_each_family_place_the_first_tasks_as_the_reference() {
    assert!(check_first("gpushare100", "gpu-packing", 42) > 2000);
    assert!(check_first("multigpu20", "dot-product", 43) > 2000);
    assert!(check_first("gpuspec10", "gpu-clustering", 42) > 1000);
}

/// GPU packing and dot product on the default list, seed 42, run in full
/// (2026-12-02): every task on the reference's node and GPU indices.
#[test]
fn gpu_packing_and_dot_product_on_the_default_trace_place_every_task_as_the_reference() {
    check("default", "gpu-packing", 42);
    check("default", "dot-product", 42);
}
