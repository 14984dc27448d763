//! Fencing: a worker cut off from the scheduler stops its jobs before the
//! scheduler relaunches them elsewhere, so no job runs twice at once and no
//! launch resumes from an older checkpoint than an earlier one wrote.

use super::common::*;
use blox_harness::soak::{journal, ports::reserve_port, proxy::CutProxy};
use blox_runtime::worker::WorkerConfig;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// The two proxies a worker's traffic goes through, one each way.
struct Link(CutProxy, CutProxy);

impl Link {
    /// Cuts both ways for `d`, then restores.
    fn cut_for(&self, d: Duration) {
        self.0.cut();
        self.1.cut();
        std::thread::sleep(d);
        self.0.restore();
        self.1.restore();
    }
}

/// The journal shows no two launches at once and no launch resuming from
/// an older checkpoint than was written before it.
fn assert_no_overlap_or_regression(journal: &Path) -> journal::JournalReport {
    let seen = journal::check(journal).unwrap();
    assert!(seen.overlaps.is_empty(), "{seen:?}");
    assert!(seen.regressions.is_empty(), "{seen:?}");
    assert!(seen.bad_lines.is_empty(), "{seen:?}");
    seen
}

/// Adds a worker whose traffic both ways goes through two cuttable proxies.
fn add_cuttable_worker(c: &mut Cluster, dir: &Path, name: &str) -> Link {
    let sched = c.sched.as_ref().unwrap().address;
    // Held until the worker binds it (a bind to port 0 here or in a
    // parallel test could otherwise take it first).
    let mut port = reserve_port().unwrap();
    let listen = port.addr();
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (up, down) = c.rt.block_on(async {
        (
            CutProxy::start(any, sched).await.unwrap(),
            CutProxy::start(any, listen).await.unwrap(),
        )
    });
    let cfg = WorkerConfig {
        scheduler: up.addr.to_string(),
        listen,
        advertise: Some(down.addr.to_string()),
        name: name.into(),
        logical_gpus: Some(2),
        workdir: dir.join(name),
        security: c.worker_security.clone(),
        labels: Default::default(),
        job_user: None,
        allow_root_jobs: true,
        job_uids: None,
        gpu_slowdown: Vec::new(),
        speed_probe: None,
        ..WorkerConfig::default()
    };
    port.release();
    let w = c.rt.block_on(blox_runtime::worker::start(cfg)).unwrap();
    c.workers.push(w);
    Link(up, down)
}

#[test]
fn a_worker_cut_off_longer_than_its_timeout_fences_its_job_before_it_runs_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = runtime_config(dir.path());
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 0);
    let link = add_cuttable_worker(&mut c, dir.path(), "cut");
    c.wait_for_gpus(2);
    let journal_file = dir.path().join("journal");
    let mut ctl = c.ctl();
    // Long enough to still run when the scheduler relaunches it.
    let command = journaled_toy(15.0, &journal_file);
    let id = ctl.submit(job("cut-off", 2, command, None)).unwrap();
    wait_running(&c, &[id]);
    // Where the job goes next.
    c.add_worker(dir.path(), "w1");
    c.wait_for_gpus(4);
    // Past the lease and its grace (1.5 + 0.9 s) and the scheduler's
    // worker timeout (3 s): the job is relaunched on w1 meanwhile.
    link.cut_for(Duration::from_secs(6));
    let r = c.wait_all(&[id], Duration::from_secs(60));
    assert_eq!(r[&id].status, "finished", "{}", r[&id].reason);
    assert!(r[&id].launches >= 2, "{:?}", r[&id]);
    let seen = assert_no_overlap_or_regression(&journal_file);
    assert!(seen.launches >= 2, "{seen:?}");
    // The cut-off worker comes back as a new worker.
    let t = Instant::now();
    loop {
        let s = ctl.status(&[]).unwrap();
        if s.workers.iter().filter(|w| w.alive).count() >= 2 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", s.workers);
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_cut_shorter_than_the_timeout_but_past_the_lease_requeues_without_blame() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    // Any blamed crash would fail the job.
    cfg.max_retries = 0;
    cfg.worker_timeout_s = 4.0;
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 0);
    let link = add_cuttable_worker(&mut c, dir.path(), "cut");
    c.wait_for_gpus(2);
    let journal_file = dir.path().join("journal");
    let mut ctl = c.ctl();
    let command = journaled_toy(5.0, &journal_file);
    let id = ctl.submit(job("fenced", 2, command, None)).unwrap();
    wait_running(&c, &[id]);
    // Past the lease (2 s), short of the timeout (4 s).
    link.cut_for(Duration::from_millis(2600));
    let r = c.wait_all(&[id], Duration::from_secs(60));
    assert_eq!(r[&id].status, "finished", "{}", r[&id].reason);
    assert!(r[&id].launches >= 2, "{:?}", r[&id]);
    assert_no_overlap_or_regression(&journal_file);
}

/// A job the job table shows as never launched may have been launched after
/// the table's last write (the scheduler killed mid-round): after a restart
/// its first launch still resumes from the newest checkpoint.
#[test]
fn a_restored_job_resumes_from_its_checkpoint_even_if_the_table_missed_its_launch() {
    use blox_runtime::proto::*;
    let dir = tempfile::tempdir().unwrap();
    let cfg = runtime_config(dir.path());
    let command = toy(1.0, &[]);
    {
        let store = blox_runtime::store::Store::open(&cfg.state).unwrap();
        let rec = JobRecord {
            info: Some(JobInfo {
                id: 1,
                name: "restored".into(),
                status: "running".into(),
                phase: JobPhase::Running as i32,
                requested_gpus: 1,
                launches: 0,
                submitted_unix_s: 1.0,
                command: command.clone(),
                ..Default::default()
            }),
            job: Some(job("restored", 1, command, None)),
            run_time_s: 0.0,
        };
        store.write(&[&rec], Some(2)).unwrap();
    }
    // What its unrecorded launch checkpointed (iteration 40 of 50).
    let ck = cfg.checkpoint_dir.clone().unwrap().join("1");
    std::fs::create_dir_all(&ck).unwrap();
    std::fs::write(ck.join("iteration.gen-5"), "40").unwrap();
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let r = c.wait_all(&[1], Duration::from_secs(60));
    assert_eq!(r[&1].status, "finished", "{}", r[&1].reason);
    let err = std::fs::read_to_string(dir.path().join("w0/jobs/1/launch-1/stderr")).unwrap();
    assert!(err.contains("resumed at iteration 40"), "{err}");
}

/// A node that does not mount the shared checkpoint storage would resume
/// jobs from nothing: it stays out of the cluster until it reads back the
/// scheduler's probe file.
#[test]
fn a_worker_that_cannot_see_the_shared_checkpoints_stays_out_of_the_cluster() {
    use blox_runtime::ctl::Ctl;
    use blox_runtime::proto::*;
    use tonic::Code;
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 1);
    let mut wctl = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
    let (rt, client) = wctl.parts();
    let reg = rt
        .block_on(
            client.register(RegisterRequest {
                name: "no-mount".into(),
                address: "127.0.0.1:1".into(),
                gpus: (0..2)
                    .map(|i| GpuDevice {
                        index: i,
                        name: "g".into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        )
        .unwrap()
        .into_inner();
    assert!(!reg.checkpoint_probe_path.is_empty());
    let beat = |probe: String| {
        blox_runtime::net::with_credential(
            HeartbeatRequest {
                worker_id: reg.worker_id.clone(),
                checkpoint_probe: probe,
                ..Default::default()
            },
            &reg.worker_secret,
        )
    };
    let e = rt
        .block_on(client.heartbeat(beat(String::new())))
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("checkpoint_probe"), "{}", e.message());
    let e = rt
        .block_on(client.heartbeat(beat("another-mount".into())))
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    // Its GPUs do not count: the cluster has the real worker's 2.
    let mut ctl = c.ctl();
    let e = ctl.submit(job("wide", 3, toy(0.5, &[]), None)).unwrap_err();
    assert!(e.to_string().contains("cluster has 2 GPUs"), "{e}");
    // Once it reads the probe, it joins.
    let probe = std::fs::read_to_string(&reg.checkpoint_probe_path).unwrap();
    let (rt, client) = wctl.parts();
    rt.block_on(client.heartbeat(beat(probe))).unwrap();
    assert!(ctl.submit(job("wide", 3, toy(0.5, &[]), None)).is_ok());
}
