//! Failures on a live scheduler: a worker declared gone
//! is a failed node (its jobs back to their last checkpoint), the worker
//! back from the same address is that node repaired, and the loop's
//! quarantine and spares act on them as in the simulator.

use super::*;

/// `[cluster] spares` and `[cluster.quarantine]` reach a scheduler's
/// config; a bad value is refused at its line.
#[test]
fn a_schedulers_spares_and_quarantine_are_read_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.toml");
    let read = |extra: &str| {
        std::fs::write(
            &path,
            format!("[run]\nround_s = 1\n[runtime]\nlisten = \"127.0.0.1:0\"\n{extra}"),
        )
        .unwrap();
        let cfg = blox_sim::load_config(&path, None, &[]).unwrap();
        RuntimeConfig::from_config(&cfg)
    };
    let r = read(
        "[cluster]\nspares = 1\n[cluster.quarantine]\nfailures = 2\nwindow_h = 24\nprobation_h = 12\n",
    )
    .unwrap();
    assert_eq!(r.spares, 1);
    let q = r.quarantine.unwrap();
    assert_eq!(
        (q.failures, q.window_s, q.probation_s),
        (2, 86_400.0, 43_200.0)
    );
    for (extra, line, key) in [
        ("[cluster]\nspares = -1\n", 6, "spares"),
        (
            "[cluster.quarantine]\nfailures = 1\nwindow_h = 0\nprobation_h = 24\n",
            7,
            "window_h",
        ),
    ] {
        let e = read(extra).unwrap_err().to_string();
        assert!(
            e.contains(&format!("live.toml:{line}")) && e.contains(key),
            "{extra}: {e}"
        );
    }
}

/// Restarts worker `i` on the address it had (a node back from repair).
fn restart(c: &mut Cluster, dir: &std::path::Path, i: usize, name: &str) {
    let address = c.workers[i].address.clone();
    c.workers[i].shutdown();
    let mut cfg = c.worker_config(dir, name);
    cfg.listen = address.parse().unwrap();
    // Its port is free again once the old service stopped.
    let t = Instant::now();
    let w = loop {
        match c.rt.block_on(blox_runtime::worker::start(cfg.clone())) {
            Ok(w) => break w,
            Err(e) => {
                assert!(t.elapsed() < Duration::from_secs(10), "restart: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    c.workers[i] = w;
}

/// Polls Status until `done` holds of it.
fn wait_status(c: &Cluster, what: &str, done: impl Fn(&StatusReply) -> bool) -> StatusReply {
    let mut ctl = c.ctl();
    let t = Instant::now();
    loop {
        let s = ctl.status(&[]).unwrap();
        if done(&s) {
            return s;
        }
        assert!(t.elapsed() < Duration::from_secs(40), "{what}: {s:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn worker_at<'a>(s: &'a StatusReply, address: &str) -> Option<&'a WorkerInfo> {
    s.workers
        .iter()
        .filter(|w| w.address == address)
        .max_by_key(|w| w.alive)
}

/// Submits a 4-GPU gang that checkpoints every 5 iterations and waits
/// until it runs; returns it and the index of a worker it runs on.
fn start_gang(c: &Cluster) -> (u64, usize) {
    let mut ctl = c.ctl();
    let gang = ctl
        .submit(job("gang", 4, toy(6.0, &["--checkpoint-every", "5"]), None))
        .unwrap();
    wait_running(c, &[gang]);
    let s = ctl.status(&[gang]).unwrap();
    let on = s.jobs[0].gpus[0].rsplit_once(':').unwrap().0.to_string();
    let i = (0..c.workers.len())
        .find(|i| c.workers[*i].worker_id().as_deref() == Some(on.as_str()))
        .unwrap();
    (gang, i)
}

/// A worker lost under a gang is a failed node: the gang resumes on the
/// other workers (an interruption, counted), and the worker that comes
/// back from the same address is the same node. Failing a second time
/// within the window, it is quarantined when it comes back: alive, beating,
/// but kept out of the cluster, so a job that needs its GPUs waits.
#[test]
fn a_lost_worker_is_a_failed_node_and_one_that_keeps_failing_is_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.quarantine = Some(blox_core::health::QuarantineRule {
        failures: 1,
        window_s: 3600.0,
        probation_s: 3600.0,
    });
    cfg.metrics_listen = Some("127.0.0.1:0".into());
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 3);
    let mut ctl = c.ctl();
    // One of the workers the gang runs on fails.
    let (gang, i) = start_gang(&c);
    let address = c.workers[i].address.clone();
    let name = format!("w{i}");
    c.workers[i].shutdown();
    let r = c.wait_all(&[gang], Duration::from_secs(60));
    let g = &r[&gang];
    assert_eq!(g.status, "finished", "{g:?}");
    assert_eq!(g.interruptions, 1, "{g:?}");
    assert!(g.launches >= 2, "{g:?}");
    let ettr = g.ettr.expect("an ended job has its ETTR");
    assert!(ettr > 0.0 && ettr < 1.0, "{ettr}");
    // Back from the same address: the same node, its GPUs in again.
    let node = |s: &StatusReply| worker_at(s, &address).and_then(|w| w.node);
    let before = wait_status(&c, "the lost worker declared gone", |s| {
        worker_at(s, &address).is_some_and(|w| !w.alive)
    });
    let old_node = node(&before).expect("its node");
    restart(&mut c, dir.path(), i, &name);
    let back = wait_status(&c, "the worker back", |s| {
        worker_at(s, &address).is_some_and(|w| w.alive && w.node == Some(old_node))
    });
    assert!(worker_at(&back, &address).unwrap().problem.is_empty());
    // Its earlier self is listed gone, with what became of it.
    let gone = |s: &StatusReply| -> Vec<String> {
        s.workers
            .iter()
            .filter(|w| w.address == address && !w.alive)
            .map(|w| w.problem.clone())
            .collect()
    };
    assert_eq!(
        gone(&before),
        ["gone: no heartbeat within worker_timeout_s"]
    );
    let now = &worker_at(&back, &address).unwrap().id;
    assert_eq!(gone(&back), [format!("gone: registered again as {now}")]);
    // It fails again within the window, and comes back quarantined.
    c.workers[i].shutdown();
    wait_status(&c, "declared gone again", |s| {
        worker_at(s, &address).is_some_and(|w| !w.alive)
    });
    restart(&mut c, dir.path(), i, &name);
    let held = wait_status(&c, "the worker back, quarantined", |s| {
        worker_at(s, &address).is_some_and(|w| w.alive && w.problem.contains("quarantined"))
    });
    assert_eq!(worker_at(&held, &address).unwrap().node, Some(old_node));
    // A job that needs all six GPUs waits while it is out; one of four runs.
    let six = ctl.submit(job("six", 6, toy(1.0, &[]), None)).unwrap();
    let four = ctl.submit(job("four", 4, toy(1.0, &[]), None)).unwrap();
    let r = c.wait_all(&[four], Duration::from_secs(30));
    assert_eq!(r[&four].status, "finished");
    let s = ctl.status(&[six]).unwrap();
    assert_eq!(s.jobs[0].status, "queued", "{:?}", s.jobs[0]);
    // Prometheus counts both failures and the gang's ETTR.
    let m = c.sched.as_ref().unwrap().metrics_address.unwrap();
    let (_, text) = http_get(m, "/metrics", None);
    assert!(text.contains("blox_failures_total 2"), "{text}");
    assert!(text.contains("blox_job_ettr_count"), "{text}");
}

/// `[cluster] spares = 1` on a live cluster: of three workers one is kept
/// aside (Status says why); a 4-GPU gang that loses one of its two workers
/// resumes at once on the survivor and the spare (with the spare held back,
/// two GPUs would be left and the gang could never run again), and the
/// spare is then an ordinary worker.
#[test]
fn a_gang_that_loses_a_worker_resumes_on_the_spare() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.spares = 1;
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 3);
    let s = wait_status(&c, "one worker kept as a spare", |s| {
        s.workers
            .iter()
            .filter(|w| w.alive && w.problem.contains("a spare"))
            .count()
            == 1
    });
    let spare = s
        .workers
        .iter()
        .find(|w| w.problem.contains("a spare"))
        .unwrap()
        .address
        .clone();
    let (gang, i) = start_gang(&c);
    assert_ne!(c.workers[i].address, spare, "the gang runs on the spare");
    c.workers[i].shutdown();
    let r = c.wait_all(&[gang], Duration::from_secs(60));
    let g = &r[&gang];
    assert_eq!(g.status, "finished", "{g:?}");
    assert_eq!(g.interruptions, 1, "{g:?}");
    let s = wait_status(&c, "the spare called in", |s| {
        worker_at(s, &spare).is_some_and(|w| w.alive && w.problem.is_empty())
    });
    assert!(
        s.workers.iter().all(|w| !w.problem.contains("a spare")),
        "{:?}",
        s.workers
    );
}
