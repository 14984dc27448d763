//! Checkpoints on a live scheduler: a job that declares it saves only every
//! so often (`checkpoint_interval_s`) reports each checkpoint it saves
//! (`blox_client::Job::save_checkpoint`); when LAS preempts it, the work
//! since its last reported checkpoint is counted as lost, in `Status`.

use super::common::*;
use blox_runtime::proto::JobSubmission;
use std::time::{Duration, Instant};

#[test]
fn a_preempted_job_loses_the_work_since_its_last_reported_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    // Preemptible before its first checkpoint by the interval it declares
    // (so that the interval alone would put its last checkpoint at its
    // first iteration, and only its reports say better).
    cfg.profile = Some(blox_core::Profile::of_rules(blox_core::StartupRules {
        until_checkpoint: false,
        ..blox_core::StartupRules::for_round(1.0)
    }));
    let c = Cluster::start(dir.path(), cfg, "las", 1);
    let mut ctl = c.ctl();
    // 50 iterations of 20 ms between checkpoints: one a second.
    let mut a = job("a", 2, toy(8.0, &["--checkpoint-every", "50"]), None);
    a.metrics.insert("checkpoint_interval_s".into(), 100.0);
    let a = ctl.submit(a).unwrap();
    wait_running(&c, &[a]);
    // Two and a half seconds of work past its first iteration (its second
    // checkpoint reported), however slow the machine.
    let t = Instant::now();
    loop {
        let s = ctl.status(&[a]).unwrap();
        if s.jobs[0].attained_gpu_s >= 2.0 * 2.5 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", s.jobs);
        std::thread::sleep(Duration::from_millis(50));
    }
    // B has attained nothing: LAS preempts A for it.
    let b = ctl
        .submit(JobSubmission {
            name: "b".into(),
            command: toy(1.0, &[]),
            gpus: 2,
            ..Default::default()
        })
        .unwrap();
    let t = Instant::now();
    let info = loop {
        let s = ctl.status(&[a]).unwrap();
        if s.jobs[0].preemptions > 0 {
            break s.jobs[0].clone();
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", s.jobs);
        std::thread::sleep(Duration::from_millis(50));
    };
    // Lost: 2 GPUs × the time since its last reported checkpoint, a second
    // at most (and some slack for reading the metric); counted from its
    // first iteration, as the interval alone says, it would be 5 or more.
    assert!(
        info.lost_work_gpu_s > 0.0 && info.lost_work_gpu_s <= 2.0 * 1.75,
        "{}",
        info.lost_work_gpu_s
    );
    let ended = c.wait_all(&[a, b], Duration::from_secs(60));
    assert!(ended.values().all(|j| j.status == "finished"), "{ended:?}");
    assert!(ended[&a].lost_work_gpu_s >= info.lost_work_gpu_s);
}
