//! GPUs that jobs share on a live cluster: under the `fgd` placement two
//! jobs asking half a GPU run on one logical GPU at once, each launched
//! with its share in the environment CUDA MPS reads; `status` shows the
//! shares; a job whose share fits nowhere waits, saying so, and runs when
//! the sharers leave.

use super::common::*;
use blox_core::*;
use blox_runtime::proto::JobPhase;
use std::time::{Duration, Instant};

fn share(name: &str, milli: Option<u32>, secs: f64) -> blox_runtime::proto::JobSubmission {
    let mut j = job(name, 1, toy(secs, &[]), None);
    j.gpu_milli = milli;
    j
}

#[test]
fn two_halves_share_one_gpu_and_a_third_share_waits_for_room() {
    test_log();
    let dir = tempfile::tempdir().unwrap();
    let policies = registry::build_named("accept-all", "fifo", "fgd").unwrap();
    blox_runtime::net::write_private(&dir.path().join("token"), "share-token\n").unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.token_file = Some(dir.path().join("token"));
    cfg.dashboard_listen = Some("127.0.0.1:0".into());
    let c = Cluster::start_built(dir.path(), cfg, policies, 1, Default::default());
    c.wait_for_gpus(2);
    let mut ctl = c.ctl();
    let a = ctl.submit(share("half-a", Some(500), 6.0)).unwrap();
    let b = ctl.submit(share("half-b", Some(500), 6.0)).unwrap();
    let whole = ctl.submit(share("whole", None, 6.0)).unwrap();
    let third = ctl.submit(share("third", Some(300), 1.0)).unwrap();
    wait_started(&c, &[a, b, whole]);
    let s = ctl.status(&[a, b, whole, third]).unwrap();
    let by = |id: u64| s.jobs.iter().find(|j| j.id == id).unwrap();
    // The halves on one GPU, each holding 500 thousandths; the whole job on
    // the other.
    assert_eq!(by(a).gpus, by(b).gpus, "{:?}", s.jobs);
    assert_eq!((by(a).gpu_milli, by(b).gpu_milli), (Some(500), Some(500)));
    assert_eq!(by(whole).gpu_milli, None);
    assert_ne!(by(whole).gpus, by(a).gpus);
    // No room for 0.3 of a GPU anywhere: it waits, in those words.
    let t = by(third);
    assert_eq!(t.phase(), JobPhase::Queued, "{t:?}");
    let why = t
        .wait
        .as_ref()
        .map(|w| w.reason.clone())
        .unwrap_or_default();
    assert!(
        why.contains("waiting for 0.3 of a GPU: the largest free share is 0;"),
        "{why}"
    );
    let text = blox_runtime::ctl::render_status("test", &s);
    assert!(text.contains("0.5 of "), "{text}");
    // The dashboard's cluster view lists both sharers on their GPU.
    let addr = c.sched.as_ref().unwrap().dashboard_address.unwrap();
    let (_, body) = http_get(addr, "/api/cluster", Some("share-token"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let shared: Vec<&serde_json::Value> = v["nodes"][0]["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g.get("shares").is_some())
        .collect();
    assert_eq!(shared.len(), 1, "{v}");
    let milli: Vec<u64> = (shared[0]["shares"].as_array().unwrap().iter())
        .map(|x| x["milli"].as_u64().unwrap())
        .collect();
    assert_eq!(milli, [500, 500], "{v}");
    // Each half was told its share.
    let worker = dir.path().join("w0");
    for id in [a, b] {
        let out = job_dir(&worker, id).join("launch-1").join("stdout");
        let t = Instant::now();
        let text = loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if !text.is_empty() || t.elapsed() > Duration::from_secs(10) {
                break text;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(
            text.contains("gpu share: 500 thousandths")
                && text.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"),
            "{text}"
        );
        // A logical GPU has no memory to divide: no memory limit.
        assert!(
            text.trim_end()
                .ends_with("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="),
            "{text}"
        );
    }
    // Everything ends; the third share runs once there is room.
    let done = c.wait_all(&[a, b, whole, third], Duration::from_secs(60));
    for (id, j) in &done {
        assert_eq!(j.status, "finished", "job {id}: {j:?}");
    }
}

#[test]
fn a_submission_asking_an_impossible_share_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), runtime_config(dir.path()), "fifo", 1);
    let mut ctl = c.ctl();
    for (gpus, milli) in [(1, 0), (1, 1000), (2, 500)] {
        let mut j = share("bad", Some(milli), 1.0);
        j.gpus = gpus;
        let e = ctl.submit(j).unwrap_err().to_string();
        assert!(e.contains("gpu_milli"), "{e}");
    }
}

/// A worker older than GPU shares (its registration does not set
/// `shares_gpus`) joins with its GPUs given whole only: the sharers all go
/// to the worker that shares, and the older one is given none.
#[test]
fn a_worker_that_does_not_say_it_shares_gpus_gets_no_shares() {
    use blox_runtime::ctl::Ctl;
    use blox_runtime::net::with_credential;
    use blox_runtime::proto::{GpuDevice, HeartbeatRequest, RegisterRequest};
    test_log();
    let dir = tempfile::tempdir().unwrap();
    let policies = registry::build_named("accept-all", "fifo", "fgd").unwrap();
    let mut c = Cluster::start_built(
        dir.path(),
        runtime_config(dir.path()),
        policies,
        0,
        Default::default(),
    );
    // The older worker joins first (node 0: ties would go to it), with two
    // GPUs, kept alive by heartbeats from here. Its address serves nothing:
    // a launch there would fail.
    let mut wctl = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
    let (rt, client) = wctl.parts();
    let reg = rt
        .block_on(
            client.register(RegisterRequest {
                name: "old".into(),
                address: "127.0.0.1:1".into(),
                gpus: (0..2)
                    .map(|i| GpuDevice {
                        index: i,
                        name: "logical".into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        )
        .unwrap()
        .into_inner();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let beating = {
        let (stop, addr, sec) = (stop.clone(), c.addr(), c.worker_security.clone());
        std::thread::spawn(move || {
            let mut ctl = Ctl::connect(&addr, &sec).unwrap();
            let (rt, client) = ctl.parts();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // It sees the shared checkpoint storage (as a worker reads
                // the scheduler's probe file and sends it back).
                let probe = std::fs::read_to_string(&reg.checkpoint_probe_path).unwrap_or_default();
                let beat = HeartbeatRequest {
                    worker_id: reg.worker_id.clone(),
                    checkpoint_probe: probe,
                    ..Default::default()
                };
                if let Err(e) =
                    rt.block_on(client.heartbeat(with_credential(beat, &reg.worker_secret)))
                {
                    eprintln!("heartbeat: {e}");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    c.wait_for_gpus(2);
    // Alone with it, a share waits: no GPU of the cluster is shared.
    let mut ctl = c.ctl();
    let first = ctl.submit(share("half-0", Some(500), 2.0)).unwrap();
    c.wait_rounds(3);
    let s = ctl.status(&[first]).unwrap();
    let j = &s.jobs[0];
    assert_eq!(j.phase(), JobPhase::Queued, "{j:?}");
    let why = j
        .wait
        .as_ref()
        .map(|w| w.reason.clone())
        .unwrap_or_default();
    assert!(
        why.contains("waiting for 0.5 of a GPU: the largest free share is 0;"),
        "{why}"
    );
    let s = ctl.status(&[]).unwrap();
    assert!(
        s.workers.iter().any(|w| w.whole_gpus_only),
        "{:?}",
        s.workers
    );
    let text = blox_runtime::ctl::render_status("test", &s);
    assert!(text.contains("GPUs whole only"), "{text}");
    // A worker that shares joins: every share runs there.
    c.add_worker(dir.path(), "w0");
    c.wait_for_gpus(4);
    let mut halves = vec![first];
    halves.extend((1..4).map(|i| {
        ctl.submit(share(&format!("half-{i}"), Some(500), 2.0))
            .unwrap()
    }));
    wait_started(&c, &halves);
    let s = ctl.status(&halves).unwrap();
    for j in &s.jobs {
        assert_eq!(j.gpu_milli, Some(500), "{j:?}");
        assert!(
            j.gpus.iter().all(|g| !g.starts_with("old:")),
            "a share went to the older worker: {j:?}"
        );
    }
    let done = c.wait_all(&halves, Duration::from_secs(60));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    beating.join().unwrap();
    for (id, j) in &done {
        assert_eq!(j.status, "finished", "job {id}: {j:?}");
        assert_eq!(
            j.launches, 1,
            "job {id} was launched elsewhere first: {j:?}"
        );
    }
}
