//! The `share` placement: shares of one GPU, model constraints, what no
//! node can hold, and the fragmentation it reports.

use super::*;
use crate::test_util::*;

/// A queued job asking `milli` thousandths of one GPU (whole GPUs at
/// 1000 or above), with `cpus` CPUs and 4 GiB.
fn part(id: u64, milli: u32, cpus: f64) -> Job {
    let mut j = job(id, 0.0, 1);
    j.spec.gpu_milli = (milli < 1000).then_some(milli);
    j.spec.host_need = Some(HostShare {
        cpus_per_gpu: cpus,
        mem_gb_per_gpu: 4.0,
    });
    j
}

fn typed(types: &[&str], gpus: u32) -> ClusterState {
    let mut c = ClusterState::new();
    for t in types {
        let mut spec = NodeSpec::with_gpus(gpus);
        spec.gpu_type = t.to_string();
        c.add_node(spec);
    }
    c
}

fn place(p: &mut SharePlacement, state: &JobState, c: &ClusterState) -> Placement {
    let order: Vec<&Job> = state.runnable().collect();
    p.place(&info(0.0), &Schedule::in_priority_order(order), state, c)
}

#[test]
fn fgd_puts_two_halves_on_one_gpu_and_keeps_the_other_whole() {
    let c = ClusterState::homogeneous(1, 2);
    let mut state = JobState::new();
    state.insert(part(1, 500, 1.0));
    state.insert(part(2, 500, 1.0));
    let p = place(
        &mut SharePlacement::new("fgd", 95.0, 42).unwrap(),
        &state,
        &c,
    );
    assert_eq!(p.launch.len(), 2, "{p:?}");
    assert_eq!(p.launch[0].gpus, p.launch[1].gpus, "{p:?}");
    assert!(p.launch.iter().all(|a| a.share == Some(500)));
    assert!(p.preempt.is_empty());
}

#[test]
fn a_share_goes_beside_a_running_share_and_whole_gpu_jobs_take_idle_gpus() {
    let mut c = ClusterState::homogeneous(1, 2);
    let mut state = JobState::new();
    let mut first = part(1, 600, 1.0);
    c.assign_share(first.id(), GpuId(1), 600, first.spec.host_need.unwrap())
        .unwrap();
    first.status = JobStatus::Running;
    first.allocation = vec![GpuId(1)];
    state.insert(first);
    state.insert(part(2, 400, 1.0));
    state.insert(part(3, 1000, 1.0));
    for scorer in ["fgd", "best-fit", "gpu-packing"] {
        let mut p = SharePlacement::new(scorer, 95.0, 42).unwrap();
        let d = place(&mut p, &state, &c);
        let on = |j: u64| d.launch.iter().find(|a| a.job == JobId(j)).cloned();
        let (two, three) = (on(2).unwrap(), on(3).unwrap());
        assert_eq!(
            (two.gpus, two.share),
            (vec![GpuId(1)], Some(400)),
            "{scorer}"
        );
        assert_eq!(
            (three.gpus, three.share),
            (vec![GpuId(0)], None),
            "{scorer}"
        );
    }
}

#[test]
fn shares_go_only_to_nodes_that_share_gpus_and_whole_gpu_jobs_go_anywhere() {
    // Node 0's worker gives its GPUs whole only (an older worker); node 1
    // shares them.
    let mut c = ClusterState::new();
    let mut old = NodeSpec::with_gpus(2);
    old.whole_gpus_only = true;
    c.add_node(old);
    c.add_node(NodeSpec::with_gpus(2));
    let mut state = JobState::new();
    for id in 1..=3 {
        state.insert(part(id, 500, 1.0));
    }
    state.insert(part(4, 1000, 1.0));
    for scorer in ["fgd", "best-fit", "dot-product", "gpu-packing", "random"] {
        let mut p = SharePlacement::new(scorer, 95.0, 42).unwrap();
        let d = place(&mut p, &state, &c);
        assert_eq!(d.launch.len(), 4, "{scorer}: {d:?}");
        for a in &d.launch {
            let node = c.gpu(a.gpus[0]).unwrap().node;
            if a.share.is_some() {
                assert_eq!(node, NodeId(1), "{scorer}: {a:?}");
            }
        }
    }
    // With only whole-GPU nodes, a share waits and the words say why.
    let mut c = ClusterState::new();
    let mut old = NodeSpec::with_gpus(2);
    old.whole_gpus_only = true;
    c.add_node(old);
    let d = place(
        &mut SharePlacement::new("fgd", 95.0, 42).unwrap(),
        &state,
        &c,
    );
    assert_eq!(d.launch.len(), 1, "{d:?}");
    assert_eq!((d.launch[0].job, d.launch[0].share), (JobId(4), None));
    assert!(c.largest_free_share().is_empty());
}

#[test]
fn a_job_bound_to_a_model_goes_only_to_its_nodes_and_waits_when_they_are_full() {
    let c = typed(&["T4", "V100"], 1);
    let mut state = JobState::new();
    let mut j = part(1, 300, 1.0);
    j.spec.elasticity.gpu_types = vec!["V100".into()];
    state.insert(j);
    let mut p = SharePlacement::new("best-fit", 95.0, 42).unwrap();
    let d = place(&mut p, &state, &c);
    assert_eq!(d.launch[0].gpus, vec![GpuId(1)]);
    // CPUs: a job asking more than a node has left waits.
    let mut state = JobState::new();
    state.insert(part(2, 300, 1000.0));
    assert!(place(&mut p, &state, &c).launch.is_empty());
    let why = p.never_places(state.get(JobId(2)).unwrap(), &c).unwrap();
    assert!(why.contains("no node could hold it even empty"), "{why}");
    assert!(why.contains("1000.0 CPUs"), "{why}");
    let mut j = part(3, 300, 1.0);
    j.spec.elasticity.gpu_types = vec!["A100".into()];
    let why = p.never_places(&j, &c).unwrap();
    assert!(why.contains("on A100"), "{why}");
    assert!(p.never_places(&part(4, 300, 1.0), &c).is_none());
}

#[test]
fn the_fragmentation_it_reports_follows_the_cluster() {
    let mut c = ClusterState::homogeneous(1, 2);
    let mut state = JobState::new();
    state.insert(part(1, 500, 1.0));
    state.insert(part(2, 500, 1.0));
    let mut p = SharePlacement::new("fgd", 95.0, 42).unwrap();
    place(&mut p, &state, &c);
    // Nothing held: no fragment (every free GPU can take a half).
    let empty = p.round_figures(&c);
    assert_eq!(
        empty.iter().map(|f| f.0).collect::<Vec<_>>(),
        ["frag_gpus", "frag_percent"]
    );
    assert_eq!(empty[0].1, 0.0);
    // 700 thousandths out: the 300 left cannot take a half.
    c.assign_share(
        JobId(9),
        GpuId(0),
        700,
        HostShare {
            cpus_per_gpu: 0.0,
            mem_gb_per_gpu: 0.0,
        },
    )
    .unwrap();
    let f = p.round_figures(&c);
    assert!((f[0].1 - 0.3).abs() < 1e-9, "{f:?}");
    assert!((f[1].1 - 100.0 * 300.0 / 1300.0).abs() < 1e-9, "{f:?}");
    assert_eq!(p.round_figures(&c), f, "unchanged cluster, same figures");
    c.release_job(JobId(9));
    assert_eq!(p.round_figures(&c)[0].1, 0.0);
}

#[test]
fn an_unknown_scorer_or_share_of_tasks_is_refused() {
    let e = SharePlacement::new("fdg", 95.0, 42).err().unwrap();
    assert!(
        e.contains("unknown scorer `fdg`") && e.contains("best-fit"),
        "{e}"
    );
    assert!(SharePlacement::new("fgd", 0.0, 42).is_err());
    assert!(SharePlacement::new("fgd", 101.0, 42).is_err());
}

/// A queued job asking for no GPU: `cpus` CPUs and `mem` GiB in all.
fn cpu_only(id: u64, cpus: f64, mem: f64) -> Job {
    let mut j = job(id, 0.0, 0);
    j.spec.host_need = Some(HostShare {
        cpus_per_gpu: cpus,
        mem_gb_per_gpu: mem,
    });
    j
}

#[test]
fn a_job_without_gpus_gets_a_node_with_room_and_no_gpu_for_every_scorer() {
    // Node 0: 4 CPUs, node 1: 32 CPUs (the default), 2 GPUs each.
    let mut c = ClusterState::new();
    let mut small = NodeSpec::with_gpus(2);
    small.cpus = 4;
    c.add_node(small);
    c.add_node(NodeSpec::with_gpus(2));
    let mut state = JobState::new();
    state.insert(cpu_only(1, 6.0, 8.0));
    state.insert(part(2, 500, 1.0));
    for scorer in policy::NAMES {
        let mut p = SharePlacement::new(scorer, 95.0, 42).unwrap();
        assert!(p.places_jobs_without_gpus());
        let d = place(&mut p, &state, &c);
        let a = d.launch.iter().find(|a| a.job == JobId(1)).expect(scorer);
        assert_eq!(
            (a.node, a.gpus.is_empty(), a.share),
            (Some(NodeId(1)), true, None),
            "{scorer}: only node 1 has 6 CPUs free"
        );
        assert!(d.launch.iter().any(|a| a.job == JobId(2)), "{scorer}");
    }
    // More CPUs than any node has: it waits, and is never placed.
    state.insert(cpu_only(3, 40.0, 1.0));
    let mut p = SharePlacement::new("fgd", 95.0, 42).unwrap();
    let d = place(&mut p, &state, &c);
    assert!(d.launch.iter().all(|a| a.job != JobId(3)));
    let why = p.never_places(state.get(JobId(3)).unwrap(), &c).unwrap();
    assert!(why.contains("40.0 CPUs"), "{why}");
}

#[test]
fn cpus_a_job_without_gpus_holds_are_not_given_to_a_gpu_job_again() {
    // One node of 8 CPUs and 2 GPUs; a job without GPUs holds 6 CPUs.
    let mut spec = NodeSpec::with_gpus(2);
    spec.cpus = 8;
    let mut c = ClusterState::new();
    c.add_node(spec);
    let mut state = JobState::new();
    let mut held = cpu_only(1, 6.0, 8.0);
    c.assign_host(held.id(), NodeId(0), 6.0, 8.0).unwrap();
    held.status = JobStatus::Running;
    held.host_node = Some(NodeId(0));
    state.insert(held);
    // A GPU job asking for 3 CPUs finds no room; one asking for 2 fits.
    state.insert(part(2, 1000, 3.0));
    state.insert(part(3, 1000, 2.0));
    let mut p = SharePlacement::new("fgd", 95.0, 42).unwrap();
    let d = place(&mut p, &state, &c);
    let placed: Vec<JobId> = d.launch.iter().map(|a| a.job).collect();
    assert_eq!(placed, vec![JobId(3)], "{d:?}");
}
