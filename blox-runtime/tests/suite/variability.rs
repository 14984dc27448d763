//! GPU variability on a live cluster: workers report each GPU's relative
//! time (declared here, `--gpu-slowdown`; a probe's seconds otherwise), the
//! scheduler turns them into slowdown factors, `pm-first` puts a job on
//! the fast GPUs though the slow ones come first by id, and the dashboard
//! shows each GPU's factor.

use super::common::*;
use blox_core::registry;
use std::time::{Duration, Instant};

#[test]
fn two_logical_gpus_declared_slow_are_passed_over_and_shown() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.dashboard_listen = Some("127.0.0.1:0".into());
    let policies = registry::build_named("accept-all", "fifo", "pm-first").unwrap();
    let mut c = Cluster::start_built(dir.path(), cfg, policies, 0, Default::default());
    // The slow worker registers first: its GPUs get the lower ids.
    for (name, times) in [("slow", [2.0, 2.0]), ("fast", [1.0, 1.0])] {
        let mut w = c.worker_config(dir.path(), name);
        w.gpu_slowdown = times.to_vec();
        let h = c.rt.block_on(blox_runtime::worker::start(w)).unwrap();
        c.workers.push(h);
    }
    c.wait_for_gpus(4);
    let mut ctl = c.ctl();
    let first = ctl.submit(job("first", 2, toy(2.0, &[]), None)).unwrap();
    let t = Instant::now();
    let gpus = loop {
        let s = ctl.status(&[first]).unwrap();
        let g = s.jobs[0].gpus.clone();
        if !g.is_empty() {
            break g;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", s.jobs[0]);
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(gpus.iter().all(|g| g.starts_with("fast-")), "{gpus:?}");
    // Each GPU's factor: its time over the median (1.5).
    let addr = c.sched.as_ref().unwrap().dashboard_address.unwrap();
    let (_, body) = http_get(addr, "/api/cluster", None);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut factors: Vec<(String, f64)> = Vec::new();
    for n in v["nodes"].as_array().unwrap() {
        for g in n["gpus"].as_array().unwrap() {
            factors.push((
                n["worker"].as_str().unwrap().to_string(),
                g["slowdown"].as_f64().unwrap_or_else(|| panic!("{body}")),
            ));
        }
    }
    for (w, f) in &factors {
        let want = if w.starts_with("slow-") {
            2.0 / 1.5
        } else {
            1.0 / 1.5
        };
        assert!((f - want).abs() < 1e-9, "{w}: {f} ({body})");
    }
    assert_eq!(factors.len(), 4, "{body}");
    c.wait_all(&[first], Duration::from_secs(30));
}
