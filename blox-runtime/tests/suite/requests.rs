//! Bad requests: a clear status, and nothing changed.

use super::*;

#[test]
fn bad_requests_get_a_clear_status_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    blox_runtime::net::write_private(&token_file, "s3cret-token\n").unwrap();
    let worker_token_file = dir.path().join("worker-token");
    blox_runtime::net::write_private(&worker_token_file, "w0rker-token\n").unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.token_file = Some(token_file.clone());
    cfg.worker_token_file = Some(worker_token_file.clone());
    // Before any worker registers, nothing can be placed.
    let security = cfg.security().unwrap();
    let sched = blox_runtime::scheduler::start(cfg.clone(), policies("fifo"), ROUND_S).unwrap();
    let mut ctl = Ctl::connect(&sched.address.to_string(), &security).unwrap();
    let (c, m) = code(ctl.submit(job("early", 1, toy(1.0, &[]), None)));
    assert_eq!(c, Code::FailedPrecondition, "{m}");
    assert!(m.contains("no worker has registered"), "{m}");
    drop(sched);

    let c = Cluster::start(dir.path(), cfg, "fifo", 2);
    let mut ctl = c.ctl();
    let ok = ctl.submit(job("ok", 1, toy(0.5, &[]), None)).unwrap();
    let cases: Vec<(JobSubmission, Code, &str)> = vec![
        (
            job("zero", 0, toy(1.0, &[]), None),
            Code::InvalidArgument,
            "gpus: must be at least 1",
        ),
        (
            job("huge", 5, toy(1.0, &[]), None),
            Code::InvalidArgument,
            "cluster has 4 GPUs",
        ),
        (
            job("no-argv", 1, vec![], None),
            Code::InvalidArgument,
            "command:",
        ),
        (
            job("nul", 1, vec![TOY.into(), "a\0b".into()], None),
            Code::InvalidArgument,
            "command[1]: contains a NUL byte",
        ),
        (
            job("dur", 1, toy(1.0, &[]), Some(-3.0)),
            Code::InvalidArgument,
            "duration_s",
        ),
        (
            job(&"n".repeat(300), 1, toy(1.0, &[]), None),
            Code::InvalidArgument,
            "name: 300 bytes, at most 256",
        ),
        (
            job(
                "argv",
                1,
                std::iter::once(TOY.to_string())
                    .chain(std::iter::repeat_n("x".to_string(), 4999))
                    .collect(),
                None,
            ),
            Code::InvalidArgument,
            "command: 5000 arguments, at most 4096",
        ),
        (
            job(
                "argv-bytes",
                1,
                vec![TOY.to_string(), "x".repeat(200_000)],
                None,
            ),
            Code::InvalidArgument,
            "command: ",
        ),
        (
            JobSubmission {
                metrics: (0..300).map(|i| (format!("m{i}"), 1.0)).collect(),
                ..job("metrics", 1, toy(1.0, &[]), None)
            },
            Code::InvalidArgument,
            "metrics: 300 entries, at most 256",
        ),
    ];
    for (j, want, text) in cases {
        let (got, m) = code(ctl.submit(j));
        assert_eq!(got, want, "{m}");
        assert!(m.contains(text), "{m} should say {text}");
    }
    let (got, m) = code(ctl.status(&[ok, 999]));
    assert_eq!(got, Code::NotFound, "{m}");
    assert!(m.contains("job 999"), "{m}");
    let (got, m) = code(ctl.cancel(999));
    assert_eq!(got, Code::NotFound, "{m}");
    // Job ids start at 1: 0, the unset value, names no job.
    assert!(ok >= 1);
    let (got, m) = code(ctl.cancel(0));
    assert_eq!(got, Code::InvalidArgument, "{m}");
    assert!(m.contains("job_id: required"), "{m}");
    let (got, m) = code(ctl.status(&[0]));
    assert_eq!(got, Code::InvalidArgument, "{m}");
    // An idempotency key over 128 bytes.
    let mut long_key = job("key", 1, toy(1.0, &[]), None);
    long_key.idempotency_key = "k".repeat(129);
    let (got, m) = code(ctl.submit(long_key));
    assert_eq!(got, Code::InvalidArgument, "{m}");
    assert!(m.contains("idempotency_key"), "{m}");
    // A user cannot act as a worker, nor a worker as a user.
    {
        let (rt, client) = ctl.parts();
        let e = rt
            .block_on(client.register(RegisterRequest {
                name: "rogue".into(),
                address: "127.0.0.1:1".into(),
                gpus: vec![GpuDevice::default()],
                ..Default::default()
            }))
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{}", e.message());
        assert!(e.message().contains("workers' token"), "{}", e.message());
        let mut as_worker = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
        let (got, m) = code(as_worker.submit(job("w", 1, toy(1.0, &[]), None)));
        assert_eq!(got, Code::Unauthenticated, "{m}");
        let (got, _) = code(as_worker.status(&[]));
        assert_eq!(got, Code::Unauthenticated);
    }
    // A worker's token equal to the users' is refused at start.
    let mut same = c_cfg_same_token(&token_file, dir.path());
    let e = same.worker_security().unwrap_err().to_string();
    assert!(e.contains("token of their own"), "{e}");
    same.worker_token_file = None;
    assert_eq!(
        same.worker_security().unwrap().token,
        same.security().unwrap().token
    );
    // A missing job in the request.
    let (rt, client) = ctl.parts();
    let e = rt
        .block_on(client.submit(SubmitRequest { job: None }))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    // Workers (with the workers' token): no GPUs, unknown worker id.
    let mut wctl = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
    let (rt, client) = wctl.parts();
    let e = rt
        .block_on(client.register(RegisterRequest {
            name: "empty".into(),
            address: "127.0.0.1:1".into(),
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    // A 1 MB label (5 MB is refused by the transport first: bounds.rs),
    // and labels to a scheduler without a topology.
    for (k, v) in [("rack", "x".repeat(1 << 20)), ("rack", "r1".to_string())] {
        let e = rt
            .block_on(client.register(RegisterRequest {
                name: "labelled".into(),
                address: "127.0.0.1:1".into(),
                gpus: vec![GpuDevice::default()],
                labels: [(k.to_string(), v)].into_iter().collect(),
                ..Default::default()
            }))
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
        assert!(e.message().starts_with("labels"), "{}", e.message());
    }
    // A worker is who its credential says: none is UNAUTHENTICATED, one
    // this scheduler never issued NOT_FOUND (the worker registers again).
    let e = rt
        .block_on(client.heartbeat(HeartbeatRequest {
            worker_id: "nobody".into(),
            ..Default::default()
        }))
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{}", e.message());
    let e = rt
        .block_on(client.heartbeat(blox_runtime::net::with_credential(
            HeartbeatRequest {
                worker_id: "nobody".into(),
                ..Default::default()
            },
            "not-a-credential",
        )))
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{}", e.message());
    // Without the token, or with the wrong one: refused.
    for token in [None, Some(Arc::from("wrong"))] {
        let sec = Security { token, tls: None };
        let mut other = Ctl::connect(&c.addr(), &sec).unwrap();
        let (got, m) = code(other.submit(job("sneaky", 1, toy(1.0, &[]), None)));
        assert_eq!(got, Code::Unauthenticated, "{m}");
    }
    // Nothing else changed: one job, which finishes; two workers.
    let r = c.wait_all(&[ok], Duration::from_secs(30));
    assert_eq!(r[&ok].status, "finished");
    let s = ctl.status(&[]).unwrap();
    assert_eq!(s.jobs.len(), 1, "{:?}", s.jobs);
    assert_eq!(s.workers.iter().filter(|w| w.alive).count(), 2);
    // A finished job cannot be cancelled.
    let (got, m) = code(ctl.cancel(ok));
    assert_eq!(got, Code::FailedPrecondition, "{m}");
    // Worker calls with values no duration can hold, or that are no
    // numbers, are refused or clamped; nothing panics.
    let (rt, client) = wctl.parts();
    let e = rt
        .block_on(client.push_metrics(MetricBatch {
            worker_id: "nobody".into(),
            samples: vec![MetricSample {
                launch: Some(LaunchRef {
                    job_id: ok,
                    launch: 1,
                }),
                key: "loss".into(),
                value: f64::NAN,
            }],
        }))
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(e.message().contains("samples[0].value"), "{}", e.message());
    let fake = rt
        .block_on(client.register(RegisterRequest {
            name: "fake".into(),
            address: "127.0.0.1:1".into(),
            gpus: vec![GpuDevice {
                index: 0,
                name: "fake".into(),
                ..Default::default()
            }],
            ..Default::default()
        }))
        .unwrap()
        .into_inner();
    rt.block_on(client.report_exit(blox_runtime::net::with_credential(
        ExitReport {
            worker_id: fake.worker_id,
            launch: Some(LaunchRef {
                job_id: 999,
                launch: 1,
            }),
            exited_s_ago: 1e300,
            ..Default::default()
        },
        &fake.worker_secret,
    )))
    .unwrap();
    assert!(ctl.status(&[]).is_ok());
}

/// A client that gives up on a submission while the scheduler writes it
/// (its deadline passes, its connection drops) leaves the idempotency key
/// usable: the retry gets the one job, never "being written" for good.
/// (The soak found a key held so for 171 s after a client's 10 s deadline
/// passed during a slow write.)
#[test]
fn a_submission_abandoned_mid_write_can_be_retried_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 1);
    let addr = c.addr();
    let ids: Vec<u64> = c.rt.block_on(async {
        let mut client = c.security.scheduler_client(&addr).unwrap();
        let mut ids = Vec::new();
        for i in 0..40u64 {
            let mut j = job(&format!("abandoned-{i}"), 1, toy(0.1, &[]), None);
            j.idempotency_key = format!("key-{i}");
            let req = || blox_runtime::proto::SubmitRequest {
                job: Some(j.clone()),
            };
            // Cut off after 0-2 ms: before, during or after the write.
            let cut = Duration::from_micros(i * 50);
            let _ = tokio::time::timeout(cut, client.submit(req())).await;
            // The retry: accepted within seconds.
            let t = std::time::Instant::now();
            let id = loop {
                match client.submit(req()).await {
                    Ok(r) => break r.into_inner().job_id,
                    Err(e) if e.code() == Code::Unavailable => {
                        assert!(
                            t.elapsed() < Duration::from_secs(10),
                            "job {i}: still {e:?} after 10 s"
                        );
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("job {i}: {e:?}"),
                }
            };
            ids.push(id);
        }
        ids
    });
    // One job per key.
    let distinct: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 40);
    let all = c.ctl().status(&[]).unwrap().jobs;
    assert_eq!(all.len(), 40, "{all:?}");
}
