//! Topology in simulation: gang placement within the lowest level that
//! holds a job, a sensitive job that no rack can hold is held before
//! admission with the placement's words (not admitted to wait for ever,
//! kueue#4329), and fragmentation is reported every round.

use blox_config::Config;
use blox_core::*;
use blox_sim::{SimJob, Simulation};

use blox_policies as _;

fn job(id: u64, gpus: u32, duration: f64, model: &str) -> SimJob {
    let mut spec = JobSpec::new(id, 0.0, gpus).with_duration(duration);
    spec.model = Some(model.into());
    SimJob::of_duration(spec, duration)
}

/// 2 racks of 2 nodes × 4 GPUs, LAS with topology placement.
fn sim(jobs: Vec<SimJob>) -> Simulation {
    let text = "[run]\nround_s = 60\n[cluster]\nnodes = 4\ngpus_per_node = 4\n\
        [cluster.topology]\nlevels = [{ name = \"rack\", bandwidth_gbps = 50, size = 2 }]\n\
        [scheduling]\npolicy = \"fifo\"\n[placement]\npolicy = \"topology\"\n";
    build(text, jobs).unwrap()
}

fn build(text: &str, jobs: Vec<SimJob>) -> Result<Simulation, String> {
    let cfg = Config::parse(text, "topo.toml", std::path::Path::new("."), &[]).unwrap();
    Simulation::with_jobs(&cfg, jobs).map_err(|e| e.to_string())
}

/// The nodes a job runs on.
fn nodes_of(lp: &RoundLoop, id: u64) -> Vec<NodeId> {
    lp.jobs
        .get(JobId(id))
        .unwrap()
        .allocation
        .iter()
        .map(|g| lp.cluster.gpu(*g).unwrap().node)
        .collect()
}

#[test]
fn a_sensitive_job_no_rack_holds_is_held_before_admission_and_others_run() {
    // Job 0 (VGG, 12 GPUs) must stay in one rack of 8; job 1 (ResNet, 12
    // GPUs) may span both racks.
    let mut s = sim(vec![
        job(0, 12, 600.0, "vgg16"),
        job(1, 12, 600.0, "resnet50"),
    ]);
    s.step().unwrap();
    let lp = &s.round_loop;
    let held = lp
        .waiting()
        .iter()
        .find(|j| j.id() == JobId(0))
        .expect("not admitted");
    assert_eq!(held.wait, Some(WaitReason::NotAdmitted));
    assert_eq!(
        lp.explain_wait(held).unwrap(),
        "held before admission: placement `topology` could never place it: it must stay within one rack and the largest has 8 GPUs; it asks for 12"
    );
    let running = lp.jobs.get(JobId(1)).unwrap();
    assert!(
        running.is_running(),
        "the spanning job runs: {:?}",
        running.wait
    );
    let t = lp.cluster.topology().unwrap();
    assert_eq!(t.span(&nodes_of(lp, 1)), blox_core::topology::Span::Cluster);
    assert_eq!(running.allocation.len(), 12, "the whole gang");
}

#[test]
fn a_sensitive_job_no_rack_holds_is_rejected_with_those_words_once_the_rest_has_run() {
    let s = sim(vec![
        job(0, 12, 600.0, "vgg16"),
        job(1, 12, 600.0, "resnet50"),
    ]);
    let r = s.run_to_end().expect("ends, not a stall");
    let by_id = |id: u64| r.jobs.iter().find(|j| j.job_id == id).unwrap();
    let (held, other) = (by_id(0), by_id(1));
    assert_eq!(other.status, JobStatus::Finished);
    assert_eq!(held.status, JobStatus::Rejected);
    assert_eq!(
        held.reason,
        "placement `topology` could never place it: it must stay within one rack and the largest has 8 GPUs; it asks for 12"
    );
    assert!(held.finish_s >= other.finish_s, "{held:?}");
    assert_eq!(r.summary.jobs_finished, 1);
}

#[test]
fn jobs_stay_in_a_rack_when_one_holds_them_and_fragmentation_is_reported() {
    // Two 6-GPU jobs: each fits one rack (8 GPUs), neither spans.
    let mut s = sim(vec![
        job(0, 6, 600.0, "resnet50"),
        job(1, 6, 600.0, "resnet50"),
    ]);
    s.step().unwrap();
    let lp = &s.round_loop;
    let t = lp.cluster.topology().unwrap();
    for id in [0, 1] {
        assert_eq!(
            t.span(&nodes_of(lp, id)),
            blox_core::topology::Span::Level(0),
            "job {id}"
        );
    }
    // 2 GPUs left in each rack: the largest job placeable in a rack is 2.
    assert_eq!(lp.cluster.largest_placeable(), 2);
    let r = s.finish();
    assert_eq!(r.rounds[0].largest_placeable, 2);
}

#[test]
fn a_within_level_the_topology_lacks_is_refused_before_the_run() {
    let refused = |text: &str| build(text, vec![]).err();
    let head = "[cluster]\nnodes = 4\ngpus_per_node = 4\n[scheduling]\npolicy = \"fifo\"\n";
    let racks =
        "[cluster.topology]\nlevels = [{ name = \"rack\", bandwidth_gbps = 50, size = 2 }]\n";
    let place = "[placement]\npolicy = \"topology\"\nwithin = \"row\"\n";
    let e = refused(&format!("{head}{racks}{place}")).expect("refused");
    assert!(
        e.contains("within = `row` (topo.toml:10) names no level of the cluster's topology (rack)"),
        "{e}"
    );
    let e = refused(&format!("{head}{place}")).expect("refused");
    assert!(e.contains("the cluster has no [cluster.topology]"), "{e}");
    let ok = "[placement]\npolicy = \"topology\"\nwithin = \"rack\"\n";
    assert_eq!(refused(&format!("{head}{racks}{ok}")), None);
}
