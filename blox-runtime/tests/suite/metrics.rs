//! The scheduler's Prometheus endpoint (`[runtime] metrics_listen`): a
//! scrape after a known sequence of events (two workers, three jobs, one of
//! which crashes once and is retried) shows exactly those events, and a
//! scheduler with a users' token refuses scrapes without it.

use super::common::*;
use std::time::{Duration, Instant};

/// The value of the sample `name` (with its labels, as exposed).
fn value(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in:\n{body}"))
}

#[test]
fn a_scrape_counts_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.metrics_listen = Some("127.0.0.1:0".into());
    let c = Cluster::start(dir.path(), cfg, "fifo", 2);
    let addr = c.sched.as_ref().unwrap().metrics_address.unwrap();
    let mut ctl = c.ctl();
    let ids = [
        ctl.submit(job("a", 1, toy(0.5, &[]), None)).unwrap(),
        ctl.submit(job("b", 2, toy(0.5, &[]), None)).unwrap(),
        ctl.submit(job(
            "crashes-once",
            1,
            toy(1.0, &["--fail-at", "0.3"]),
            None,
        ))
        .unwrap(),
    ];
    let r = c.wait_all(&ids, Duration::from_secs(60));
    assert!(r.values().all(|j| j.status == "finished"), "{r:?}");
    // The job table's state reaches the status view at the next round.
    c.wait_rounds(1);
    let (status, body) = http_get(addr, "/metrics", None);
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert_eq!(value(&body, "blox_submissions_total"), 3.0);
    assert_eq!(value(&body, "blox_jobs{state=\"finished\"}"), 3.0);
    assert_eq!(value(&body, "blox_jobs{state=\"running\"}"), 0.0);
    assert_eq!(value(&body, "blox_queue_length"), 0.0);
    // Three first launches and one retry.
    assert_eq!(value(&body, "blox_launches_total"), 4.0);
    assert_eq!(
        value(&body, "blox_job_exits_total{outcome=\"crashed\"}"),
        1.0
    );
    assert_eq!(
        value(&body, "blox_job_exits_total{outcome=\"finished\"}"),
        3.0
    );
    assert_eq!(value(&body, "blox_workers{state=\"alive\"}"), 2.0);
    assert_eq!(value(&body, "blox_workers_lost_total"), 0.0);
    assert!(value(&body, "blox_worker_heartbeats_total") >= 2.0);
    assert!(value(&body, "blox_rounds_total") >= 2.0);
    assert!(value(&body, "blox_round_duration_seconds_count") >= 2.0);
    assert!(value(&body, "blox_job_table_write_seconds_count") >= 3.0);
    // Both workers' logical GPUs, none busy now.
    let total: f64 = body
        .lines()
        .filter(|l| l.starts_with("blox_gpus{") && l.contains("state=\"total\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(total, 4.0, "{body}");
    // The same per worker: two nodes of two GPUs, nothing busy now.
    let per_node = |state: &str| -> Vec<f64> {
        body.lines()
            .filter(|l| {
                l.starts_with("blox_node_gpus{") && l.contains(&format!("state=\"{state}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .collect()
    };
    assert_eq!(per_node("total"), vec![2.0, 2.0], "{body}");
    assert_eq!(per_node("busy"), vec![0.0, 0.0], "{body}");
    // Every round's parts are timed, each once per round.
    let rounds = value(
        &body,
        "blox_round_part_duration_seconds_count{part=\"cluster\"}",
    );
    assert!(rounds >= 2.0, "{body}");
    for part in ["metrics", "admission", "scheduling", "placement", "launch"] {
        let n = value(
            &body,
            &format!("blox_round_part_duration_seconds_count{{part=\"{part}\"}}"),
        );
        // A scrape may fall between the observations of one round.
        assert!((n - rounds).abs() <= 1.0, "{part}: {n} against {rounds}");
    }
    assert!(
        body.contains("blox_policy_info{policy=\"accept-all/fifo/consolidated\"} 1"),
        "{body}"
    );
    assert_eq!(http_get(addr, "/", None).0, "HTTP/1.1 404 Not Found");
}

#[test]
fn with_a_users_token_a_scrape_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    blox_runtime::net::write_private(&dir.path().join("token"), "metrics-token\n").unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.token_file = Some(dir.path().join("token"));
    cfg.metrics_listen = Some("127.0.0.1:0".into());
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let addr = c.sched.as_ref().unwrap().metrics_address.unwrap();
    let (status, _) = http_get(addr, "/metrics", None);
    assert_eq!(status, "HTTP/1.1 401 Unauthorized");
    assert_eq!(
        http_get(addr, "/metrics", Some("wrong")).0,
        "HTTP/1.1 401 Unauthorized"
    );
    let (status, body) = http_get(addr, "/metrics", Some("metrics-token"));
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(value(&body, "blox_workers{state=\"alive\"}"), 1.0);
}

/// A client that never finishes its request head is cut off after 5 s; the
/// endpoint goes on answering others meanwhile.
#[test]
fn a_request_head_never_finished_is_cut_off() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.metrics_listen = Some("127.0.0.1:0".into());
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let addr = c.sched.as_ref().unwrap().metrics_address.unwrap();
    let mut slow = std::net::TcpStream::connect(addr).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: bl")
        .unwrap();
    let t = Instant::now();
    assert_eq!(http_get(addr, "/metrics", None).0, "HTTP/1.1 200 OK");
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(15),
        "cut off after {waited:?}"
    );
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
}
