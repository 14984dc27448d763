//! A what-if replays the cluster its history ran on: nodes of their GPU
//! types, with their topology labels, joining and leaving at their times
//! (a live scheduler's log, whose workers join as they register), whatever
//! `[cluster]` the replay's config gives. The history here is a simulation
//! whose nodes join and leave the way a live cluster's do
//! (`SimBackend::plan_nodes`), so its log carries `node_joined` events.

use blox_config::Config;
use blox_core::round::events::{Event, What};
use blox_core::*;
use blox_sim::whatif::{self, History};
use blox_sim::{SimConfig, SimJob, Simulation};

use blox_policies as _;

/// LAS over a topology placement. The `[cluster]` is a single 8-GPU node
/// of the default type: a replay that took it (and not the history's
/// nodes) could not make the history's decisions.
const CONFIG: &str = "[run]\nround_s = 60\n\
    [[cluster.node_groups]]\ncount = 1\ngpus = 8\nlabels = { rack = \"x\" }\n\
    [cluster.topology]\nlevels = [{ name = \"rack\", bandwidth_gbps = 50 }]\n\
    [scheduling]\npolicy = \"las\"\n[placement]\npolicy = \"topology\"\n";

fn node(gpu_type: &str, rack: &str) -> NodeSpec {
    let mut s = NodeSpec::with_gpus(4);
    s.gpu_type = gpu_type.into();
    s.labels.insert("rack".into(), rack.into());
    s
}

fn jobs() -> Vec<SimJob> {
    (0..40)
        .map(|i| {
            let gpus = [1, 2, 4, 8][i % 4];
            let d = 1800.0 + 900.0 * ((i * 7) % 5) as f64;
            let spec = JobSpec::new(i as u64, 300.0 * i as f64, gpus).with_duration(d);
            SimJob::of_duration(spec, d)
        })
        .collect()
}

/// The history: two A100 nodes in rack r0 and two K80 nodes in rack r1
/// join at the start, a third K80 node joins at 3,000 s, and node 1 (an
/// A100) leaves at 6,000 s.
fn history_log(cfg: &Config) -> Vec<Event> {
    let policies =
        registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement).unwrap();
    let sim = SimConfig::from_section(&cfg.section("sim")).unwrap();
    let mut cluster = ClusterState::new();
    cluster.set_topology(topology::Topology::empty(cfg.topology_levels().unwrap().unwrap()).ok());
    let mut s = Simulation::new(policies, cluster, cfg.run.clone(), sim, jobs()).unwrap();
    s.backend.plan_nodes(vec![
        (0.0, ClusterEvent::NodeAdded(node("A100", "r0"))),
        (0.0, ClusterEvent::NodeAdded(node("A100", "r0"))),
        (0.0, ClusterEvent::NodeAdded(node("K80", "r1"))),
        (0.0, ClusterEvent::NodeAdded(node("K80", "r1"))),
        (3000.0, ClusterEvent::NodeAdded(node("K80", "r1"))),
        (6000.0, ClusterEvent::NodeRemoved(NodeId(1))),
    ]);
    s.keep_events();
    while s.step().unwrap() {}
    s.take_events()
}

#[test]
fn a_history_of_typed_labelled_nodes_joining_and_leaving_is_replayed_decision_for_decision() {
    replayed_decision_for_decision(CONFIG);
}

/// The same with the types' speeds (`[sim] type_speed`): a job's work in
/// the history is the time it ran times the speed of the GPUs it held, so a
/// replay that moves it to another type runs it at that type's speed (before,
/// the time on a K80 counted as time on an A100, and decisions differed).
#[test]
fn a_history_on_gpus_of_different_speeds_is_replayed_decision_for_decision() {
    replayed_decision_for_decision(&format!(
        "{CONFIG}[sim]\ntype_speed = {{ A100 = 2.0, K80 = 0.5 }}\n"
    ));
}

fn replayed_decision_for_decision(config: &str) {
    let cfg = Config::parse(config, "whatif.toml", std::path::Path::new("."), &[]).unwrap();
    let log = history_log(&cfg);
    // The log carries each node's type and labels, and the join and leave.
    let joined: Vec<(u32, String, f64)> = log
        .iter()
        .filter_map(|e| match &e.what {
            What::NodeJoined { node, spec, .. } => {
                Some((*node, spec.as_ref().unwrap().gpu_type.clone(), e.time_s))
            }
            _ => None,
        })
        .collect();
    assert_eq!(joined.len(), 5, "{joined:?}");
    assert_eq!(joined[4], (4, "K80".to_string(), 3000.0));
    assert!(log
        .iter()
        .any(|e| matches!(e.what, What::NodeLeft { node: 1 }) && e.time_s == 6000.0));
    let sim = SimConfig::from_section(&cfg.section("sim")).unwrap();
    // From the start, before the join, between the join and the leave,
    // and after both.
    for at in [0.0, 2000.0, 4500.0, 7000.0] {
        let h = History::from_events(&log, Some(at), &sim, 60.0).unwrap();
        assert!(
            h.notes.iter().all(|n| !n.contains("GPU type")),
            "{:?}",
            h.notes
        );
        let nodes = h.nodes.as_ref().unwrap();
        let types: Vec<&str> = nodes
            .iter()
            .map(|n| n.as_ref().unwrap().spec.gpu_type.as_str())
            .collect();
        assert_eq!(types, ["A100", "A100", "K80", "K80", "K80"]);
        assert_eq!(nodes[1].as_ref().unwrap().left_s, Some(6000.0));
        let r = whatif::replay(&h, &cfg, "same", None).unwrap();
        let d = r.against_history(&h, 0).unwrap();
        assert!(
            d.is_same() && d.matched > 20,
            "at {at}: {} matched, differences: {:?}",
            d.matched,
            &d.differences[..d.differences.len().min(5)]
        );
    }
}

#[test]
fn a_log_whose_nodes_carry_no_type_says_what_it_assumed_and_still_replays() {
    let cfg = Config::parse(CONFIG, "whatif.toml", std::path::Path::new("."), &[]).unwrap();
    let mut log = history_log(&cfg);
    // As a log written before nodes carried their spec.
    for e in &mut log {
        if let What::NodeJoined { spec, .. } = &mut e.what {
            *spec = None;
        }
    }
    let sim = SimConfig::from_section(&cfg.section("sim")).unwrap();
    let h = History::from_events(&log, Some(0.0), &sim, 60.0).unwrap();
    let notes: Vec<&String> = h.notes.iter().filter(|n| n.contains("GPU type")).collect();
    assert_eq!(notes.len(), 1, "{:?}", h.notes);
    assert!(notes[0].contains("5 nodes"), "{notes:?}");
    let r = whatif::replay(&h, &cfg, "same", None).unwrap();
    assert!(r.result.jobs.iter().all(|j| j.finish_s.is_some()));
}
