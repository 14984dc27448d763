//! Unit tests of [`super`]: live logs (joined runs, measured start-ups,
//! logged losses).

use super::*;

fn ev(round: u64, t: f64, unix0: f64, job: Option<u64>, what: What) -> Event {
    Event {
        round,
        time_s: t,
        unix_s: Some(unix0 + t),
        job: job.map(JobId),
        name: job.map(|j| format!("j{j}")),
        what,
    }
}

fn launched(n: u32) -> What {
    What::Launched {
        gpus: (0..n).map(|gpu| GpuPlace { node: 0, gpu }).collect(),
        batch_size: None,
        share: None,
        node: None,
    }
}

/// A live log whose scheduler restarted 9 s after it started (its
/// second run's clock starts at 0 again): job 1 ran through the
/// restart (adopted), job 2 was stopped by it and relaunched; the
/// second run submitted and admitted both again from its job table.
fn restarted_log() -> Vec<Event> {
    let (a, b) = (1000.0, 1009.0);
    let joined = What::NodeJoined {
        node: 0,
        gpus: 2,
        worker: Some("w".into()),
        spec: None,
    };
    let submitted = |id: u64, at: f64| What::Submitted {
        spec: Box::new(JobSpec::new(id, at, 1).with_duration(6.0)),
    };
    let finished = |jct: f64| What::Finished {
        jct_s: Some(jct),
        reason: None,
        attained_gpu_s: Some(6.0),
        lost_gpu_s: None,
        startup_s: Some(0.02),
    };
    vec![
        ev(1, 1.0, a, None, joined.clone()),
        ev(1, 1.0, a, Some(1), submitted(1, 0.9)),
        ev(1, 1.0, a, Some(2), submitted(2, 0.95)),
        ev(1, 1.0, a, Some(1), What::Admitted),
        ev(1, 1.0, a, Some(2), What::Admitted),
        ev(1, 1.0, a, Some(1), launched(1)),
        ev(1, 1.0, a, Some(2), launched(1)),
        ev(
            2,
            2.0,
            a,
            Some(2),
            What::Waiting {
                wait_kind: "waiting-for-gpus".into(),
                reason: String::new(),
            },
        ),
        // The second run: its clock is 9 s behind the first's.
        ev(1, 1.0, b, None, joined),
        ev(1, 1.0, b, Some(1), submitted(1, -9.1)),
        ev(1, 1.0, b, Some(2), submitted(2, -9.05)),
        ev(1, 1.0, b, Some(1), What::Admitted),
        ev(1, 1.0, b, Some(2), What::Admitted),
        ev(
            1,
            1.0,
            b,
            Some(1),
            What::Adopted {
                gpus: vec![GpuPlace { node: 0, gpu: 0 }],
            },
        ),
        ev(1, 1.0, b, Some(2), launched(1)),
        ev(
            2,
            2.0,
            b,
            Some(2),
            What::Launched {
                gpus: vec![GpuPlace { node: 0, gpu: 1 }],
                batch_size: None,
                share: None,
                node: None,
            },
        ),
        ev(3, 3.0, b, Some(1), finished(11.1)),
    ]
}

#[test]
fn a_live_logs_runs_are_joined_on_the_unix_clock() {
    let events = restarted_log();
    let sim = crate::SimConfig::default();
    let h = History::from_events(&events, None, &sim, 1.0).unwrap();
    assert!(
        h.notes
            .iter()
            .any(|n| n.contains("joined on the Unix clock")),
        "{:?}",
        h.notes
    );
    // Both jobs, once each, at their first run's arrivals.
    let arrivals: Vec<(u64, f64)> = h.future.iter().map(|s| (s.id.0, s.arrival_s)).collect();
    assert_eq!(arrivals, [(1, 0.9), (2, 0.95)]);
    // The second run's events on the first's clock; nothing submitted
    // or admitted twice; the node that joined again is the same node.
    let t: Vec<f64> = h.tail.iter().map(|e| e.time_s).collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "{t:?}");
    assert_eq!(h.tail.last().unwrap().time_s, 12.0);
    let count = |k: &str| h.tail.iter().filter(|e| e.what.kind() == k).count();
    assert_eq!((count("submitted"), count("admitted")), (2, 2));
    assert_eq!(h.nodes.as_ref().map(|n| n.len()), Some(1));
    assert_eq!(h.nodes.as_ref().unwrap()[0].as_ref().unwrap().joined_s, 1.0);
    // Job 1 ended where its JCT says, on the joined clock; its
    // measured start-up is its one launch's (it was adopted).
    assert_eq!(h.actual[&JobId(1)].finish_s, Some(0.9 + 11.1));
    assert_eq!(h.startup.get(&JobId(1)), Some(&0.02));
}

/// A live job that checkpoints on its own lost only what it did since
/// its last checkpoint when its node failed (the log's `lost_gpu_s`),
/// not its whole launch as a job that saves only when stopped would.
#[test]
fn a_live_jobs_logged_losses_set_its_progress_at_the_start() {
    let u = 1000.0;
    let on = || What::Launched {
        gpus: vec![GpuPlace { node: 0, gpu: 0 }],
        batch_size: None,
        share: None,
        node: None,
    };
    let events = vec![
        ev(
            0,
            0.0,
            u,
            None,
            What::NodeJoined {
                node: 0,
                gpus: 1,
                worker: None,
                spec: None,
            },
        ),
        ev(
            0,
            0.0,
            u,
            Some(1),
            What::Submitted {
                spec: Box::new(JobSpec::new(1, 0.0, 1)),
            },
        ),
        ev(0, 0.0, u, Some(1), What::Admitted),
        ev(0, 0.0, u, Some(1), on()),
        ev(10, 10.0, u, None, What::NodeFailed { node: 0 }),
        ev(
            10,
            10.0,
            u,
            Some(1),
            What::Requeued {
                reason: "node-0 failed".into(),
            },
        ),
        ev(10, 10.0, u, None, What::NodeRepaired { node: 0 }),
        ev(10, 10.0, u, Some(1), on()),
        ev(
            20,
            20.0,
            u,
            Some(1),
            What::Finished {
                jct_s: Some(20.0),
                reason: None,
                attained_gpu_s: Some(20.0),
                lost_gpu_s: Some(3.0),
                startup_s: None,
            },
        ),
    ];
    let sim = crate::SimConfig::default();
    let h = History::from_events(&events, Some(15.0), &sim, 1.0).unwrap();
    assert_eq!(h.work_of(JobId(1)).unwrap().duration_s, 17.0);
    let (j, _) = &h.active[0];
    // 15 s run, 3 of them lost: 12 of its 17 s.
    assert!((j.progress - 12.0 / 17.0).abs() < 1e-9, "{}", j.progress);
    assert_eq!(j.lost_work_gpu_s, 3.0);
}

#[test]
fn at_a_start_after_the_restart_an_adopted_job_has_run_through_it() {
    let events = restarted_log();
    let sim = crate::SimConfig::default();
    let h = History::from_events(&events, Some(10.5), &sim, 1.0).unwrap();
    let active = |id: u64| {
        h.active
            .iter()
            .find(|(j, _)| j.id() == JobId(id))
            .map(|(j, _)| j.clone())
            .unwrap()
    };
    // The start is the round at or after 10.5 s: 11 s. Job 1 ran from
    // 1.02 s (after its start-up) to 11 s without a break: 9.98 GPU-s.
    // Job 2 ran until the first run's last event (2 s) and again from
    // its relaunch at 10 s: 2 GPU-s, not the 10 of a run through the
    // restart.
    let one = active(1);
    assert!(one.is_running());
    assert!(
        (one.attained_service_gpu_s - 9.98).abs() < 0.05,
        "{}",
        one.attained_service_gpu_s
    );
    let two = active(2);
    assert!(
        (two.attained_service_gpu_s - 2.0).abs() < 1e-9,
        "{}",
        two.attained_service_gpu_s
    );
}
