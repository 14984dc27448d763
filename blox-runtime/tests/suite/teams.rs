//! Teams on a live scheduler, with labelled workers and gang placement on
//! the topology: a team borrows the idle quota of another, gets preempted
//! when the lender's jobs come, the lender holds its quota within a few
//! rounds, a 2-GPU job is placed whole within one rack, and every job ends.

use super::common::*;
use blox_core::topology::Level;
use blox_core::*;
use std::time::{Duration, Instant};

// The live cluster is the workers; `[cluster]` is only what a config needs.
const CONFIG: &str = r#"
[cluster]
nodes = 2
gpus_per_node = 2

[scheduling]
policy = "teams"
within = { policy = "fifo" }
teams = [{ name = "a", quota = 2 }, { name = "b", quota = 2 }]

[placement]
policy = "topology"
"#;

fn submit(c: &Cluster, name: &str, team: &str, gpus: u32, secs: f64) -> u64 {
    let mut j = job(name, gpus, toy(secs, &[]), None);
    j.team = Some(team.into());
    c.ctl().submit(j).unwrap()
}

#[test]
fn a_lender_gets_its_quota_back_on_a_live_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.topology = Some(vec![Level {
        name: "rack".into(),
        bandwidth_gbps: 50.0,
    }]);
    let text = blox_config::Config::parse(CONFIG, "teams.toml", dir.path(), &[]).unwrap();
    let policies =
        registry::build_policies(&text.admission, &text.scheduling, &text.placement).unwrap();
    let mut c = Cluster::start_built(dir.path(), cfg, policies, 0, Default::default());
    c.add_labelled_worker(dir.path(), "w0", &[("rack", "r0")]);
    c.add_labelled_worker(dir.path(), "w1", &[("rack", "r1")]);
    c.wait_for_gpus(4);

    // B runs on all four GPUs: its quota and A's idle one.
    let b: Vec<u64> = (0..4)
        .map(|i| submit(&c, &format!("b{i}"), "b", 1, 12.0))
        .collect();
    wait_running(&c, &b);
    // A's two jobs come: two of B's borrowers are preempted, and A runs
    // within a few one-second rounds.
    let asked = Instant::now();
    let a: Vec<u64> = (0..2)
        .map(|i| submit(&c, &format!("a{i}"), "a", 1, 2.0))
        .collect();
    let mut ctl = c.ctl();
    loop {
        let s = ctl.status(&a).unwrap();
        if s.jobs
            .iter()
            .all(|j| j.status != "queued" && j.status != "submitted")
        {
            break;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(8),
            "A did not get its quota back: {:?}",
            s.jobs
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = ctl.status(&b).unwrap();
    let preempted: u32 = s.jobs.iter().map(|j| j.preemptions).sum();
    assert_eq!(preempted, 2, "{:?}", s.jobs);
    // B's first two (in quota) were not touched.
    assert!(
        s.jobs[..2].iter().all(|j| j.preemptions == 0),
        "{:?}",
        s.jobs
    );

    // A gang of 2 GPUs goes whole onto one rack (one worker).
    let gang = submit(&c, "a-gang", "a", 2, 1.0);
    let t = Instant::now();
    let gpus = loop {
        let s = ctl.status(&[gang]).unwrap();
        let j = &s.jobs[0];
        if !j.gpus.is_empty() {
            break j.gpus.clone();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{j:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let worker = |g: &String| g.split(':').next().unwrap().to_string();
    assert_eq!(gpus.len(), 2);
    assert_eq!(worker(&gpus[0]), worker(&gpus[1]), "{gpus:?}");

    let mut all = b.clone();
    all.extend(&a);
    all.push(gang);
    let ended = c.wait_all(&all, Duration::from_secs(60));
    assert!(
        ended.values().all(|j| j.status == "finished"),
        "{:?}",
        ended
            .values()
            .map(|j| (&j.name, &j.status))
            .collect::<Vec<_>>()
    );
}
