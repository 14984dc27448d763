//! Invariants of the packing run, on random clusters and tasks: no GPU over
//! its thousandths, no node over its CPU or memory, the final state is the
//! sum of the placements, and a task fails only where no node could take it.

use blox_share::node::NodeState;
use blox_share::openb::{NodeSpec, TaskSpec};
use blox_share::packing::{run, PackingError, PackingSetup};
use blox_share::policy::{by_name, NAMES};
use proptest::prelude::*;

fn node() -> impl Strategy<Value = (i64, i64, u32, usize)> {
    (1_000i64..64_000, 1i64..65_536, 0u32..9, 0usize..3)
}

fn task() -> impl Strategy<Value = (i64, i64, u32, u32, usize)> {
    (0i64..20_000, 0i64..20_000, 0u32..5, 1u32..1001, 0usize..4)
}

const MODELS: [&str; 3] = ["T4", "V100", "G2"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn placements_respect_every_limit(
        nodes in prop::collection::vec(node(), 1..12),
        tasks in prop::collection::vec(task(), 1..80),
        seed in 0i64..1000,
        tune in prop::sample::select(vec![0.0, 0.8, 1.3]),
    ) {
        let nodes: Vec<NodeSpec> = nodes.iter().enumerate().map(|(i, &(cpu, mem, gpus, m))| NodeSpec {
            name: format!("node-{i:02}"),
            cpu_milli: cpu,
            memory_mib: mem,
            gpus,
            model: if gpus == 0 { String::new() } else { MODELS[m].to_string() },
        }).collect();
        let tasks: Vec<TaskSpec> = tasks.iter().enumerate().map(|(i, &(cpu, mem, num, milli, spec))| TaskSpec {
            name: format!("task-{i:03}"),
            cpu_milli: cpu,
            memory_mib: mem,
            num_gpu: num,
            gpu_milli: if num == 0 { 0 } else if num > 1 { 1000 } else { milli },
            gpu_models: if spec < 3 && num > 0 { vec![MODELS[spec].to_string()] } else { vec![] },
            creation_s: None,
            deletion_s: None,
        }).collect();
        let has_gpu_demand = tasks.iter().any(|t| t.total_gpu_milli() > 0) && nodes.iter().any(|n| n.gpus > 0);
        for name in NAMES {
            let setup = PackingSetup { tune, seed, ..PackingSetup::default() };
            let result = run(&nodes, &tasks, by_name(name).unwrap().as_mut(), &setup);
            let r = match result {
                Ok(r) => r,
                Err(e) => {
                    // Only the inflation may refuse: nothing to inflate, or
                    // more than 100 copies of each task needed.
                    prop_assert!(tune > 0.0 && matches!(e, PackingError::Tune(_)), "{name}: {e}");
                    prop_assert!(has_gpu_demand || e.to_string().contains("cannot inflate"), "{name}: {e}");
                    continue;
                }
            };
            let mut sorted: Vec<&NodeSpec> = nodes.iter().collect();
            sorted.sort_by(|a, b| a.name.cmp(&b.name));
            let mut state: Vec<NodeState> = sorted.iter().map(|s| NodeState::new(s)).collect();
            let by_name: std::collections::HashMap<&str, &TaskSpec> =
                tasks.iter().map(|t| (t.name.as_str(), t)).collect();
            for o in &r.outcomes {
                let base = o.task.split("-tuned-").next().unwrap();
                let t = by_name[base];
                prop_assert_eq!(o.why.is_some(), o.node.is_none(), "{}: a reason exactly for a failure", name);
                match o.node {
                    Some(n) => {
                        prop_assert!(state[n].fits(t), "{name}: {} placed on {} where it does not fit", o.task, r.nodes[n]);
                        state[n].take(t, &o.gpus).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
                    }
                    None => prop_assert!(
                        state.iter().all(|s| !s.fits(t)),
                        "{name}: {} failed although a node could take it", o.task
                    ),
                }
            }
            prop_assert_eq!(&state, &r.final_nodes, "{}: final state", name);
            for s in &state {
                prop_assert!(s.cpu_left >= 0 && s.memory_left >= 0 && s.gpu_left.iter().all(|&g| g <= 1000));
            }
        }
    }
}

#[test]
fn a_task_no_policy_can_place_is_refused_before_the_run() {
    let nodes = [NodeSpec {
        name: "n".into(),
        cpu_milli: 8000,
        memory_mib: 1000,
        gpus: 2,
        model: "T4".into(),
    }];
    let shares_of_two = TaskSpec {
        name: "two-halves".into(),
        cpu_milli: 1000,
        memory_mib: 1,
        num_gpu: 2,
        gpu_milli: 500,
        gpu_models: vec![],
        creation_s: None,
        deletion_s: None,
    };
    for name in NAMES {
        let e = run(
            &nodes,
            std::slice::from_ref(&shares_of_two),
            by_name(name).unwrap().as_mut(),
            &PackingSetup::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&e, PackingError::BadTask { task, .. } if task == "two-halves"),
            "{name}: {e}"
        );
        assert!(e.to_string().contains("several GPUs"), "{e}");
    }
}

#[test]
fn an_inflation_that_would_not_end_is_refused() {
    let nodes = [NodeSpec {
        name: "n".into(),
        cpu_milli: 8000,
        memory_mib: 1000,
        gpus: 8,
        model: "T4".into(),
    }];
    let tiny = TaskSpec {
        name: "tiny".into(),
        cpu_milli: 0,
        memory_mib: 0,
        num_gpu: 1,
        gpu_milli: 1,
        gpu_models: vec![],
        creation_s: None,
        deletion_s: None,
    };
    let e = run(
        &nodes,
        &[tiny],
        by_name("fgd").unwrap().as_mut(),
        &PackingSetup::default(),
    )
    .unwrap_err();
    assert!(
        matches!(e, PackingError::Tune(_)) && e.to_string().contains("100 copies"),
        "{e}"
    );
    let huge = PackingSetup {
        tune: 1e300,
        ..PackingSetup::default()
    };
    let t = TaskSpec {
        name: "t".into(),
        cpu_milli: 1,
        memory_mib: 1,
        num_gpu: 1,
        gpu_milli: 500,
        gpu_models: vec![],
        creation_s: None,
        deletion_s: None,
    };
    let e = run(&nodes, &[t], by_name("fgd").unwrap().as_mut(), &huge).unwrap_err();
    assert!(matches!(e, PackingError::Tune(_)), "{e}");
}
