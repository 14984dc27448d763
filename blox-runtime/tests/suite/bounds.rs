//! Bounded memory on a scheduler that runs for months: ended jobs are
//! forgotten after their retention, metric floods are dropped and counted,
//! and every worker request has size limits.

use super::common::*;
use blox_runtime::ctl::Ctl;
use blox_runtime::proto::*;
use blox_runtime::store::Store;
use std::time::{Duration, Instant};
use tonic::Code;

#[test]
fn ended_jobs_past_their_retention_are_forgotten_from_memory_and_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.retention_jobs = 2;
    let state = cfg.state.clone();
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let mut ctl = c.ctl();
    let mut ids = Vec::new();
    for k in 0..4 {
        let mut j = job(&format!("j{k}"), 1, toy(0.2, &[]), None);
        j.idempotency_key = format!("key-{k}");
        ids.push(ctl.submit(j).unwrap());
    }
    // Compaction runs after each round: the first two to end go while the
    // others run (so ask for every job, not by id).
    let t = Instant::now();
    let s = loop {
        let s = ctl.status(&[]).unwrap();
        let all_ended = s.jobs.iter().all(|j| j.status == "finished");
        if s.compacted_jobs == 2 && all_ended {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{s:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(s.total_jobs, 2);
    let kept: Vec<u64> = s.jobs.iter().map(|j| j.id).collect();
    assert_eq!(kept.len(), 2);
    // The oldest ended are the ones forgotten: NOT_FOUND now.
    let gone: Vec<u64> = ids.iter().copied().filter(|i| !kept.contains(i)).collect();
    let e = ctl.status(&[gone[0]]).unwrap_err();
    assert_eq!(e.code(), Some(Code::NotFound), "{e}");
    // A forgotten job's idempotency key is free again: a new job.
    let gone_key = (0..4).find(|k| ids[*k] == gone[0]).unwrap();
    let mut again = job("again", 1, toy(0.2, &[]), None);
    again.idempotency_key = format!("key-{gone_key}");
    let new_id = ctl.submit(again).unwrap();
    assert!(new_id > *ids.iter().max().unwrap());
    // It ends, and the oldest of the other two goes.
    let t = Instant::now();
    loop {
        let s = ctl.status(&[]).unwrap();
        if s.compacted_jobs == 3 && s.jobs.iter().any(|j| j.id == new_id) {
            assert_eq!(s.total_jobs, 2);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{s:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(ctl);
    c.sched.take().unwrap().shutdown().unwrap();
    let (records, next) = Store::open(&state).unwrap().load().unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(next > new_id, "ids are never reused");
}

#[test]
fn a_metric_flood_is_bounded_per_job_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 1);
    let mut ctl = c.ctl();
    // Long enough to run through the flood (about 1 s here, idle).
    let id = ctl.submit(job("long", 1, toy(6.0, &[]), None)).unwrap();
    let t = Instant::now();
    while ctl.status(&[id]).unwrap().jobs[0].status != "running" {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(50));
    }
    let worker = c.workers[0].worker_id().unwrap();
    let mut wctl = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
    let (rt, client) = wctl.parts();
    // The worker's own credential: reports are accepted only with it.
    let cred = c.workers[0].credential().unwrap();
    let batch = |job_id: u64, n: usize, key: &dyn Fn(usize) -> String| {
        blox_runtime::net::with_credential(
            MetricBatch {
                worker_id: worker.clone(),
                samples: (0..n)
                    .map(|i| MetricSample {
                        launch: Some(LaunchRef { job_id, launch: 1 }),
                        key: key(i),
                        value: i as f64,
                    })
                    .collect(),
            },
            &cred,
        )
    };
    // Too many in one call.
    let e = rt
        .block_on(client.push_metrics(batch(id, 10_001, &|_| "x".into())))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("at most 10000"), "{}", e.message());
    let e = rt
        .block_on(client.push_metrics(batch(id, 1, &|_| "k".repeat(129))))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("samples[0].key"), "{}", e.message());
    // 10 × 10,000 samples of the running job, and of a launch that does not
    // run here: at most 1024 of the job's are kept between two rounds.
    for _ in 0..10 {
        rt.block_on(client.push_metrics(batch(id, 10_000, &|i| format!("k{}", i % 8))))
            .unwrap();
    }
    rt.block_on(client.push_metrics(batch(id + 100, 10_000, &|_| "x".into())))
        .unwrap();
    let s = ctl.status(&[id]).unwrap();
    let pushed = 110_000u64;
    assert!(
        s.metrics_dropped >= pushed - 1024 * (s.rounds + 2),
        "dropped {} of {pushed} in {} rounds",
        s.metrics_dropped,
        s.rounds
    );
    // Distinct keys per job are bounded too: 300 new keys, at most 256 kept.
    rt.block_on(client.push_metrics(batch(id, 300, &|i| format!("new{i}"))))
        .unwrap();
    c.wait_rounds(1);
    let after = ctl.status(&[id]).unwrap().metrics_dropped;
    assert!(after >= s.metrics_dropped + 300 - 256, "{after}");
    // The job ran through it all: what was dropped was over its bounds,
    // not the samples of a launch that had ended.
    let now = ctl.status(&[id]).unwrap();
    assert_eq!(now.jobs[0].status, "running", "{:?}", now.jobs[0]);
    // The scheduler still serves and the job finishes.
    let r = c.wait_all(&[id], Duration::from_secs(60));
    assert_eq!(r[&id].status, "finished", "{}", r[&id].reason);
}

#[test]
fn worker_requests_beyond_their_limits_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 1);
    let mut wctl = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
    let (rt, client) = wctl.parts();
    let gpu = |i: u32| GpuDevice {
        index: i,
        name: "g".into(),
        ..Default::default()
    };
    let cases: Vec<(RegisterRequest, &str)> = vec![
        (
            RegisterRequest {
                name: "n".repeat(300),
                address: "127.0.0.1:1".into(),
                gpus: vec![gpu(0)],
                ..Default::default()
            },
            "name: 300 bytes",
        ),
        (
            RegisterRequest {
                address: "127.0.0.1:1".into(),
                gpus: (0..2000).map(gpu).collect(),
                ..Default::default()
            },
            "gpus: 2000 devices",
        ),
        (
            RegisterRequest {
                address: "127.0.0.1:1".into(),
                gpus: vec![GpuDevice {
                    memory_gb: f64::NAN,
                    ..gpu(0)
                }],
                ..Default::default()
            },
            "memory_gb",
        ),
        (
            RegisterRequest {
                address: "127.0.0.1:1".into(),
                gpus: vec![GpuDevice {
                    relative_time: f64::INFINITY,
                    ..gpu(0)
                }],
                ..Default::default()
            },
            "gpus[0].relative_time",
        ),
        (
            RegisterRequest {
                address: "127.0.0.1:1".into(),
                gpus: vec![GpuDevice {
                    relative_time: -0.5,
                    ..gpu(0)
                }],
                ..Default::default()
            },
            "gpus[0].relative_time",
        ),
        (
            RegisterRequest {
                address: "127.0.0.1:1".into(),
                gpus: vec![gpu(0)],
                host_mem_gb: -1.0,
                ..Default::default()
            },
            "host_mem_gb",
        ),
    ];
    // Launches reported when registering again (re-adoption).
    let launch = |job: u64, gpus: &[u32], first: u32, ranks: u32, world: u32| RunningLaunch {
        launch: Some(LaunchRef {
            job_id: job,
            launch: 1,
        }),
        gpus: gpus.to_vec(),
        first_rank: first,
        ranks,
        world_size: world,
        ..Default::default()
    };
    let with = |running: Vec<RunningLaunch>| RegisterRequest {
        address: "127.0.0.1:1".into(),
        gpus: vec![gpu(0), gpu(1)],
        running,
        ..Default::default()
    };
    let mut cases = cases;
    cases.extend([
        (
            with(vec![launch(1, &[2], 0, 1, 1)]),
            "running[0].gpus: this worker has 2 GPUs; there is no GPU 2",
        ),
        (
            with(vec![launch(1, &[0], 0, 1, 1), launch(2, &[0], 0, 1, 1)]),
            "running[1].gpus: GPU 0 is held twice",
        ),
        (
            with(vec![launch(1, &[0], 0, 1, 1), launch(1, &[1], 0, 1, 1)]),
            "running[1].launch: job 1 appears twice",
        ),
        (
            with(vec![launch(1, &[0], u32::MAX, 2, 4)]),
            "running[0].first_rank",
        ),
        (
            with(vec![launch(1, &[0], 0, 0, 1)]),
            "running[0].first_rank",
        ),
        (with(vec![launch(0, &[0], 0, 1, 1)]), "running[0].launch"),
        (
            with(vec![RunningLaunch {
                running_s: f64::INFINITY,
                ..launch(1, &[0], 0, 1, 1)
            }]),
            "running[0].running_s",
        ),
        (
            with(vec![RunningLaunch {
                startup_s: Some(f64::NAN),
                ..launch(1, &[0], 0, 1, 1)
            }]),
            "running[0].startup_s",
        ),
        // More launches than GPUs may share them, up to what a worker
        // may run (1,024).
        (
            with(vec![launch(1, &[0], 0, 1, 1); 1025]),
            "running: 1025 launches on 2 GPUs",
        ),
    ]);
    for (req, text) in cases {
        let e = rt.block_on(client.register(req)).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
        assert!(
            e.message().contains(text),
            "{} should say {text}",
            e.message()
        );
    }
    let worker = c.workers[0].worker_id().unwrap();
    let e = rt
        .block_on(client.heartbeat(HeartbeatRequest {
            worker_id: worker.clone(),
            running: vec![LaunchRef::default(); 100_001],
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("running: 100001"), "{}", e.message());
    let e = rt
        .block_on(client.report_exit(ExitReport {
            worker_id: worker,
            launch: Some(LaunchRef {
                job_id: 1,
                launch: 1,
            }),
            reason: "r".repeat(5000),
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("reason: 5000 bytes"),
        "{}",
        e.message()
    );
    // Nothing changed: one worker, alive.
    let mut ctl = c.ctl();
    let s = ctl.status(&[]).unwrap();
    assert_eq!(s.workers.len(), 1);
}

#[test]
fn a_request_over_the_transport_limit_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 1);
    let mut ctl = c.ctl();
    // A 5 MB name: gRPC's 4 MiB limit refuses the message before any field
    // is read (OUT_OF_RANGE, saying the size and the limit).
    let e = ctl
        .submit(job(&"n".repeat(5 << 20), 1, toy(0.2, &[]), None))
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::OutOfRange), "{e}");
    assert!(e.to_string().contains("4194304"), "{e}");
    // Under the transport limit but over the field's: the field is named.
    let e = ctl
        .submit(job(&"n".repeat(1 << 20), 1, toy(0.2, &[]), None))
        .unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    assert!(e.to_string().contains("name: 1048576 bytes"), "{e}");
    // Nothing was accepted; the scheduler still serves.
    let s = ctl.status(&[]).unwrap();
    assert_eq!(s.total_jobs, 0);
    let id = ctl.submit(job("ok", 1, toy(0.2, &[]), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(60));
    assert_eq!(r[&id].status, "finished");
}

/// What waits is bounded, per user and in all: a submission past
/// either limit is RESOURCE_EXHAUSTED naming the limit, and is accepted
/// again once jobs started.
#[test]
fn waiting_jobs_are_bounded_per_user_and_in_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.max_waiting_jobs = 5;
    cfg.max_waiting_per_user = 3;
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let mut ctl = c.ctl();
    // The worker's 2 GPUs busy: everything after this waits.
    let blocker = ctl.submit(job("blocker", 2, toy(60.0, &[]), None)).unwrap();
    wait_started(&c, &[blocker]);
    let of = |user: &str, k: usize| {
        let mut j = job(&format!("{user}-{k}"), 2, toy(0.2, &[]), None);
        j.user = Some(user.into());
        j
    };
    // Rounds settle between submissions: the counts are the round's.
    let settle = || c.wait_rounds(1);
    let mut waiting = Vec::new();
    for k in 0..3 {
        waiting.push(ctl.submit(of("ann", k)).unwrap());
        settle();
    }
    let r = ctl.submit(of("ann", 3));
    let e = match r {
        Ok(id) => panic!(
            "accepted {id}: {:?}",
            ctl.status(&[])
                .unwrap()
                .jobs
                .iter()
                .map(|j| (j.id, j.status.clone()))
                .collect::<Vec<_>>()
        ),
        Err(e) => e,
    };
    assert_eq!(e.code(), Some(Code::ResourceExhausted), "{e}");
    assert!(e.to_string().contains("max_waiting_per_user = 3"), "{e}");
    assert!(
        e.to_string().contains("retry-after-ms"),
        "a retry hint: {e}"
    );
    for k in 0..2 {
        waiting.push(ctl.submit(of("bob", k)).unwrap());
        settle();
    }
    let e = ctl.submit(of("bob", 2)).unwrap_err();
    assert_eq!(e.code(), Some(Code::ResourceExhausted), "{e}");
    assert!(e.to_string().contains("max_waiting_jobs = 5"), "{e}");
    // Nothing refused was kept; once the blocker ends, the queue drains and
    // submissions are accepted again.
    assert_eq!(ctl.status(&[]).unwrap().total_jobs, 6);
    ctl.cancel(blocker).unwrap();
    let r = c.wait_all(&waiting, Duration::from_secs(60));
    assert!(r.values().all(|j| j.status == "finished"), "{r:?}");
    settle();
    assert!(ctl.submit(of("ann", 4)).is_ok());
}

/// `Status` lists workers a page at a time: nine workers with
/// 1,024 GPUs of 256-byte names each (about 5 MB of workers, over the
/// transport's 4 MiB) come in pages `Ctl` follows to the end.
#[test]
fn workers_come_in_pages_that_fit_the_transport() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 1);
    let mut wctl = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
    let (rt, client) = wctl.parts();
    let long = |i: usize| format!("{i:0>256}");
    for w in 0..9 {
        rt.block_on(
            client.register(RegisterRequest {
                name: format!("{w}{}", "n".repeat(200)),
                address: "127.0.0.1:1".into(),
                gpus: (0..1024)
                    .map(|g| GpuDevice {
                        index: g,
                        uuid: long(g as usize),
                        name: long(w),
                        memory_gb: 80.0,
                        relative_time: 0.0,
                    })
                    .collect(),
                ..Default::default()
            }),
        )
        .unwrap();
    }
    let mut ctl = c.ctl();
    let first = ctl.status_page(&StatusRequest::default()).unwrap();
    assert!(
        first.workers.len() < 10,
        "{} workers in one page",
        first.workers.len()
    );
    assert!(!first.next_workers_after.is_empty());
    assert_eq!(first.total_workers, 10);
    let all = ctl.status(&[]).unwrap();
    assert_eq!(all.workers.len(), 10);
    let mut ids: Vec<&str> = all.workers.iter().map(|w| w.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 10, "each worker once");
}

/// `blox bench submit` itself — clients submitting at once, each
/// submission accepted once (idempotency keys, retries after the refusal's
/// hint) and read back once through `Status` pages.
#[test]
fn a_burst_of_submissions_is_listed_once_each() {
    let r = blox_harness::runtime_bench::submissions(4, 1_500, 0.5, 0).unwrap();
    assert_eq!((r.lost, r.duplicated, r.listed), (0, 0, 1_500), "{r:?}");
    assert!(r.per_s > 0.0 && r.latency_p99_s >= r.latency_p50_s, "{r:?}");
}

/// A submission over `max_job_bytes` is refused naming its size; waiting
/// submissions are bounded in bytes per user and in all; ended records are
/// forgotten past `retention_bytes`.
#[test]
fn submissions_are_bounded_in_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.max_job_bytes = 4096;
    cfg.max_waiting_bytes_per_user = 6000;
    cfg.max_waiting_bytes = 9000;
    cfg.retention_bytes = 1;
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let mut ctl = c.ctl();
    // Four 32 KB arguments: refused at once, nothing kept.
    let mut huge = job("huge", 1, toy(0.2, &[]), None);
    huge.command.extend((0..3).map(|_| "x".repeat(32 * 1024)));
    let e = ctl.submit(huge).unwrap_err();
    assert_eq!(e.code(), Some(Code::InvalidArgument), "{e}");
    assert!(
        e.to_string().contains("max_job_bytes") && e.to_string().contains("983"),
        "{e}"
    );
    assert_eq!(ctl.status(&[]).unwrap().total_jobs, 0);
    let blocker = ctl.submit(job("blocker", 2, toy(60.0, &[]), None)).unwrap();
    wait_started(&c, &[blocker]);
    let of = |user: &str, k: usize| {
        let mut j = job(&format!("{user}-{k}"), 2, toy(0.2, &[]), None);
        j.user = Some(user.into());
        j.command.push("y".repeat(2500));
        j
    };
    let settle = || c.wait_rounds(1);
    let mut waiting = vec![ctl.submit(of("ann", 0)).unwrap()];
    settle();
    waiting.push(ctl.submit(of("ann", 1)).unwrap());
    settle();
    let e = ctl.submit(of("ann", 2)).unwrap_err();
    assert_eq!(e.code(), Some(Code::ResourceExhausted), "{e}");
    assert!(
        e.to_string().contains("max_waiting_bytes_per_user = 6000"),
        "{e}"
    );
    waiting.push(ctl.submit(of("bob", 0)).unwrap());
    settle();
    let e = ctl.submit(of("bob", 1)).unwrap_err();
    assert_eq!(e.code(), Some(Code::ResourceExhausted), "{e}");
    assert!(e.to_string().contains("max_waiting_bytes = 9000"), "{e}");
    ctl.cancel(blocker).unwrap();
    // Every ended record is over the one byte kept: each is forgotten as
    // it ends, and all end.
    let t = Instant::now();
    loop {
        let s = ctl.status(&[]).unwrap();
        if s.total_jobs == 0 && s.compacted_jobs == 1 + waiting.len() as u64 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{s:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Thousands of connections that never speak (and more than the
/// endpoint takes) leave the workers' heartbeats and `Status` answering;
/// the silent ones are closed.
#[test]
fn silent_connections_do_not_starve_heartbeats_or_status() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.max_connections = 256;
    cfg.handshake_timeout_s = 1.0;
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let addr: std::net::SocketAddr = c.addr().parse().unwrap();
    blox_runtime::conn::raise_fd_limit();
    // Half a preface each, then nothing.
    let mut held = Vec::new();
    let t = Instant::now();
    while held.len() < 3000 && t.elapsed() < Duration::from_secs(20) {
        if let Ok(mut s) = std::net::TcpStream::connect(addr) {
            use std::io::Write;
            let _ = s.write_all(b"PRI * HTTP/2.0\r\n");
            held.push(s);
        }
    }
    assert!(held.len() >= 1000, "opened only {}", held.len());
    // Status answers on a fresh connection, and the worker is still in.
    let t = Instant::now();
    let s = c.ctl().status(&[]).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        s.workers
            .iter()
            .all(|w| w.alive && w.last_heartbeat_s_ago < 2.0),
        "{:?}",
        s.workers
    );
    // A job still runs through.
    let mut ctl = c.ctl();
    let id = ctl.submit(job("through", 1, toy(0.3, &[]), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(30));
    assert_eq!(r[&id].status, "finished");
    // The silent ones were closed by the server: reads see their end
    // (after whatever it answered).
    let closed = held
        .iter_mut()
        .take(200)
        .filter(|s| {
            use std::io::Read;
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut buf = [0u8; 256];
            loop {
                match (&**s).read(&mut buf) {
                    Ok(0) => return true,
                    Ok(_) => continue,
                    Err(e) => {
                        return !matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        )
                    }
                }
            }
        })
        .count();
    assert!(closed >= 190, "{closed} of 200 closed");
}
