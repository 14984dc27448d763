//! The trace's own times: arrivals and departures in time order.

use std::path::PathBuf;

use blox_share::openb::{read_nodes, read_tasks, NodeSpec, TaskSpec};
use blox_share::packing::{PackingError, PackingSetup};
use blox_share::policy::{by_name, NAMES};
use blox_share::timed::run_timed;

fn task(name: &str, milli: u32, from: i64, to: Option<i64>) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        cpu_milli: 1000,
        memory_mib: 10,
        num_gpu: 1,
        gpu_milli: milli,
        gpu_models: vec![],
        creation_s: Some(from),
        deletion_s: to,
    }
}

fn one_gpu() -> Vec<NodeSpec> {
    vec![NodeSpec {
        name: "n".into(),
        cpu_milli: 8000,
        memory_mib: 1000,
        gpus: 1,
        model: "T4".into(),
    }]
}

const AS_IS: PackingSetup = PackingSetup {
    tune: 0.0,
    seed: 1,
    shuffle: false,
    popular_percent: 95.0,
};

#[test]
fn a_departure_frees_its_share_for_an_arrival_at_the_same_time() {
    // a holds 0.6 of the GPU from 0 to 10; b (0.6 at 5) cannot fit; c (0.6
    // at 10) arrives as a leaves, and the departure goes first.
    let tasks = [
        task("a", 600, 0, Some(10)),
        task("b", 600, 5, Some(20)),
        task("c", 600, 10, Some(30)),
    ];
    let r = run_timed(&one_gpu(), &tasks, by_name("fgd").unwrap().as_mut(), &AS_IS).unwrap();
    let seen: Vec<(i64, &str, bool, Option<usize>, i64)> = r
        .events
        .iter()
        .map(|e| (e.time_s, e.task.as_str(), e.arrival, e.node, e.used_milli))
        .collect();
    assert_eq!(
        seen,
        [
            (0, "a", true, Some(0), 600),
            (5, "b", true, None, 600),
            (10, "a", false, Some(0), 0),
            (10, "c", true, Some(0), 600),
            (20, "b", false, None, 600),
            (30, "c", false, Some(0), 0),
        ]
    );
    assert_eq!((r.placed, r.failed), (2, 1));
    assert_eq!(r.mean_allocated_percent, 60.0);
    assert_eq!(r.peak_allocated_percent, 60.0);
}

#[test]
fn a_task_without_times_is_an_error_naming_it() {
    let mut t = task("untimed", 500, 0, None);
    t.creation_s = None;
    let e = run_timed(
        &one_gpu(),
        &[t],
        by_name("best-fit").unwrap().as_mut(),
        &AS_IS,
    )
    .unwrap_err();
    assert_eq!(e, PackingError::NoTimes("untimed".into()));
    assert!(e.to_string().contains("creation_time"));
}

#[test]
fn the_default_trace_by_its_times_ends_with_an_empty_cluster() {
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/openb");
    let (nodes, _) = read_nodes(&data.join("openb_node_list_gpu_node.csv")).unwrap();
    let (tasks, skipped) = read_tasks(&data.join("openb_pod_list_default.csv.gz"), &nodes).unwrap();
    assert_eq!(skipped.total(), 0);
    for name in NAMES {
        let r = run_timed(
            &nodes,
            &tasks,
            by_name(name).unwrap().as_mut(),
            &PackingSetup::default(),
        )
        .unwrap();
        let arrivals = r.events.iter().filter(|e| e.arrival).count();
        assert_eq!(r.placed + r.failed, arrivals, "{name}");
        // Every task of this list has a deletion time: all leave.
        assert_eq!(r.events.last().unwrap().used_milli, 0, "{name}");
        assert!(
            r.events.windows(2).all(|w| w[0].time_s <= w[1].time_s),
            "{name}"
        );
        assert!(
            r.mean_allocated_percent > 0.0 && r.peak_allocated_percent <= 100.0,
            "{name}"
        );
    }
}
