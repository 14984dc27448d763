//! `jobs.csv`/`jobs.parquet` of a big run are written a batch at a time;
//! what comes back from disk is every row, in order, with its values — also
//! across batch boundaries (65,536 rows each).
#![cfg(feature = "polars")]

use blox_core::JobStatus;
use blox_sim::{JobRow, RoundRow, SimResult, Summary};
use polars::prelude::*;

fn row(i: u64) -> JobRow {
    JobRow {
        job_id: i,
        name: format!("job-{i}"),
        arrival_s: i as f64 * 1.5,
        first_start_s: (!i.is_multiple_of(3)).then_some(i as f64 * 2.0),
        finish_s: Some(i as f64 * 3.0),
        jct_s: Some(i as f64),
        queueing_s: None,
        responsiveness_s: Some(0.5),
        preemptions: (i % 7) as u32,
        restarts: 0,
        gpu_seconds: i as f64 * 4.0,
        num_gpus: 1 + (i % 8) as u32,
        status: JobStatus::Finished,
        reason: if i == 70_000 {
            "a, \"quoted\" reason".into()
        } else {
            String::new()
        },
        model: String::new(),
        team: String::new(),
        run_time_s: 1.0,
        startup_s: 0.0,
        productive_gpu_seconds: 2.0,
        launches_without_progress: 0,
        wait_s: [i as f64, 0.0, 0.5, 0.0, 1.0],
        lost_work_gpu_seconds: (i % 5) as f64,
        interruptions: (i % 3) as u32,
        failure_lost_gpu_seconds: (i % 2) as f64,
        ettr: (!i.is_multiple_of(4)).then_some(0.75),
    }
}

#[test]
fn tables_spanning_several_batches_come_back_whole() {
    let n = 150_000u64;
    let r = SimResult {
        jobs: (0..n).map(row).collect(),
        rounds: (0..10)
            .map(|k| RoundRow {
                time_s: k as f64 * 60.0,
                busy_gpus: k,
                total_gpus: 8,
                queued_jobs: 0,
                waiting_jobs: 0,
                running_jobs: k,
                largest_placeable: 8 - k.min(8),
                policy: "accept-all/fifo/first-free".into(),
                note: String::new(),
                figures: Vec::new(),
            })
            .collect(),
        summary: Summary::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    r.write(dir.path()).unwrap();
    let pq = ParquetReader::new(std::fs::File::open(dir.path().join("jobs.parquet")).unwrap())
        .finish()
        .unwrap();
    assert_eq!(pq.height(), n as usize);
    let ids = pq.column("job_id").unwrap().u64().unwrap().clone();
    assert!((0..n as usize).all(|i| ids.get(i) == Some(i as u64)));
    let start = pq.column("first_start_s").unwrap().f64().unwrap().clone();
    assert_eq!(
        start.get(65_536),
        Some(131_072.0),
        "first row of the second batch"
    );
    assert_eq!(start.get(65_535), None, "65,535 is a multiple of 3");
    let reason = pq.column("reason").unwrap().str().unwrap().clone();
    assert_eq!(reason.get(70_000), Some("a, \"quoted\" reason"));

    let csv = std::fs::read_to_string(dir.path().join("jobs.csv")).unwrap();
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("job_id,arrival_s,first_start_s"));
    // One header, then every row once, in id order (the quoted reason holds no newline).
    let body: Vec<&str> = lines.collect();
    assert_eq!(body.len(), n as usize);
    assert!(
        body[65_536].starts_with("65536,98304.0,131072.0,"),
        "{}",
        body[65_536]
    );
    assert!(body[149_999].starts_with("149999,"));
    let rounds = std::fs::read_to_string(dir.path().join("rounds.csv")).unwrap();
    assert_eq!(rounds.lines().count(), 11);
}
