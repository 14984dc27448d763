//! The policy synthesizer (Blox §5.2): it switches when the workload changes
//! character and always picks the best forked score.

// The built-in policies, registered by name.
use blox_policies as _;
use blox_sim::{load_config, Simulation};

fn run(trace: &str, extra: &str) -> (blox_sim::SimResult, Vec<blox_sim::synth::Decision>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("t.csv"), trace).unwrap();
    let cfg = format!(
        r#"
[cluster]
nodes = 1
gpus_per_node = 4
[run]
round_s = 300
[workload]
path = "t.csv"
[scheduling]
policy = "fifo"
[placement]
policy = "consolidated"
[synthesizer]
every_rounds = 1
scheduling = [{{ policy = "fifo" }}, {{ policy = "srtf" }}]
{extra}
"#
    );
    std::fs::write(dir.path().join("c.toml"), cfg).unwrap();
    let c = load_config(&dir.path().join("c.toml"), None, &[]).unwrap();
    let sim = Simulation::from_config(&c).unwrap();
    let log = sim.synth_decisions.clone();
    let r = sim.run_to_end().unwrap();
    let d = log.map(|l| l.lock().unwrap().clone()).unwrap_or_default();
    (r, d)
}

/// Four GPUs busy with long jobs, four more long jobs queued, then at 20 min a
/// burst of eight 10-minute jobs.
fn burst_trace() -> String {
    let mut t = String::from("job_id,arrival_s,num_gpus,duration_s\n");
    let mut id = 0;
    for _ in 0..4 {
        t += &format!("{id},0,1,20000\n");
        id += 1;
    }
    for _ in 0..4 {
        t += &format!("{id},600,1,20000\n");
        id += 1;
    }
    for _ in 0..8 {
        t += &format!("{id},1200,1,600\n");
        id += 1;
    }
    t
}

#[test]
fn switches_to_srtf_when_a_burst_of_short_jobs_arrives() {
    let (r, decisions) = run(&burst_trace(), "");
    assert!(!decisions.is_empty());
    // Before the burst FIFO and SRTF order the jobs alike: it stays on FIFO.
    for d in decisions.iter().filter(|d| d.time_s < 1200.0) {
        assert!(d.chosen.contains("/fifo/"), "{d:?}");
        assert!(!d.switched);
    }
    // When the burst is submitted it switches to SRTF.
    let at = decisions
        .iter()
        .find(|d| d.switched)
        .expect("it switched once the burst arrived");
    assert_eq!(at.time_s, 1200.0);
    assert!(at.chosen.contains("/srtf/"), "{at:?}");
    // The switch shows in rounds.csv's policy column.
    assert!(r.rounds.iter().any(|x| x.policy.contains("/srtf/")));
    assert!(r.rounds.first().unwrap().policy.contains("/fifo/"));
}

#[test]
fn never_chooses_a_combination_whose_forked_score_was_worse() {
    for extra in [
        "",
        "objective = \"avg-responsiveness\"",
        "objective = \"mix\"\njct_weight = 0.3",
    ] {
        let (_, decisions) = run(&burst_trace(), extra);
        for d in &decisions {
            let best = d.scores.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
            let chosen = d.scores.iter().find(|s| s.0 == d.chosen).unwrap().1;
            assert!(chosen <= best, "{extra}: {d:?}");
        }
    }
}

#[test]
fn the_synthesized_run_beats_static_fifo_on_the_burst() {
    let (synth, _) = run(&burst_trace(), "");
    let (fifo, _) = run(&burst_trace(), "enabled = false");
    assert!(
        synth.summary.avg_jct_s < 0.8 * fifo.summary.avg_jct_s,
        "synthesizer {} vs FIFO {}",
        synth.summary.avg_jct_s,
        fifo.summary.avg_jct_s
    );
}

#[test]
fn a_bad_candidate_fails_at_load_with_the_synthesizer_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("t.csv"),
        "job_id,arrival_s,num_gpus,duration_s\n0,0,1,60\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("c.toml"),
        "[cluster]\nnodes = 1\ngpus_per_node = 4\n[workload]\npath = \"t.csv\"\n[synthesizer]\nscheduling = [{ policy = \"fifo\" }, { policy = \"sjf\" }]\n",
    )
    .unwrap();
    let c = load_config(&dir.path().join("c.toml"), None, &[]).unwrap();
    let e = Simulation::from_config(&c)
        .err()
        .expect("fails")
        .to_string();
    assert!(e.contains("sjf") && e.contains("c.toml:7"), "{e}");
}
