//! Workers place themselves in the scheduler's topology (`--labels`): a
//! worker whose labels name no level, lack one, or put a rack in a second
//! block is refused at registration with the reason; the others' nodes join
//! the loop's topology, shown by the dashboard.

use super::common::*;
use blox_core::topology::Level;
use blox_runtime::worker::WorkerConfig;
use std::time::Duration;

#[test]
fn workers_place_themselves_by_label_and_bad_labels_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.topology = Some(vec![
        Level {
            name: "block".into(),
            bandwidth_gbps: 12.5,
        },
        Level {
            name: "rack".into(),
            bandwidth_gbps: 50.0,
        },
    ]);
    cfg.dashboard_listen = Some("127.0.0.1:0".into());
    let c = Cluster::start(dir.path(), cfg, "fifo", 0);
    let start = |name: &str, labels: &[(&str, &str)]| {
        c.rt.block_on(blox_runtime::worker::start(WorkerConfig {
            scheduler: c.addr(),
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name: name.into(),
            logical_gpus: Some(2),
            workdir: dir.path().join(name),
            security: c.worker_security.clone(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            job_user: None,
            allow_root_jobs: true,
            job_uids: None,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            ..WorkerConfig::default()
        }))
        .unwrap()
    };
    let refused = |w: &blox_runtime::worker::WorkerHandle| -> String {
        c.rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), w.refused()).await })
            .expect("refused within 10 s")
    };
    let a = start("a", &[("block", "b0"), ("rack", "r0")]);
    let b = start("b", &[("block", "b1"), ("rack", "r1")]);
    c.wait_for_gpus(4);
    let bad_level = start("x", &[("block", "b0"), ("rack", "r0"), ("row", "7")]);
    let why = refused(&bad_level);
    assert!(why.contains("label `row` names no level"), "{why}");
    let no_rack = start("y", &[("block", "b0")]);
    assert!(refused(&no_rack).contains("no `rack` label"));
    let two_blocks = start("z", &[("block", "b1"), ("rack", "r0")]);
    let why = refused(&two_blocks);
    assert!(
        why.contains("rack `r0` is in block `b0`, not `b1`"),
        "{why}"
    );
    // The two good workers are in the loop's topology.
    let addr = c.sched.as_ref().unwrap().dashboard_address.unwrap();
    let t = std::time::Instant::now();
    let body = loop {
        let (_, body) = http_get(addr, "/api/cluster", None);
        if body.contains("\"r1\"") || t.elapsed() > Duration::from_secs(10) {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        body.contains("\"labels\":{\"block\":\"b0\",\"rack\":\"r0\"}"),
        "{body}"
    );
    assert!(body.contains("\"rack\":\"r1\""), "{body}");
    drop((a, b));
}
