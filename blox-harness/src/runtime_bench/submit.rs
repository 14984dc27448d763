//! `blox bench submit`: the live scheduler's intake.
//!
//! `clients` gRPC clients, each its own connection and user, submit `jobs`
//! jobs in all to a scheduler on loopback that has mock workers (they
//! acknowledge launches and run nothing: what is measured is the
//! scheduler, not a 2-core machine starting thousands of processes). Every
//! submission carries an idempotency key and is retried with it on
//! `UNAVAILABLE` or `RESOURCE_EXHAUSTED`, after the hint the refusal gives.
//! Afterwards every job is read back through `Status`, a page of 1,000 at a
//! time: none may be missing or there twice.

use super::{bench_config, policies, register, rt, serve_mock_worker, wait_status, BenchError};
use blox_runtime::net::Security;
use blox_runtime::proto::*;
use blox_runtime::scheduler::{self, RoundStats};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// What `blox bench submit` measured.
#[derive(Clone, Debug)]
pub struct SubmitResult {
    pub clients: usize,
    pub jobs: usize,
    /// Accepted submissions per second, first call to last reply.
    pub per_s: f64,
    /// Each accepted submission's own call (its last attempt), seconds.
    pub latency_p50_s: f64,
    pub latency_p99_s: f64,
    /// Attempts answered `UNAVAILABLE` or `RESOURCE_EXHAUSTED` and retried.
    pub retries: u64,
    /// Jobs submitted but absent from `Status`, and present more than once.
    pub lost: usize,
    pub duplicated: usize,
    /// The scheduler's round time (its own work, not the wait) over the
    /// run: median and 99th percentile, from `Status`.
    pub round_p50_s: f64,
    pub round_p99_s: f64,
    /// `Status` of every job, pages of 1,000: the slowest page and the
    /// median one, seconds, and how many jobs the scheduler listed.
    pub status_page_p50_s: f64,
    pub status_page_max_s: f64,
    pub listed: usize,
    /// The peak resident memory of this process (scheduler and clients), KiB.
    pub peak_rss_kib: u64,
    /// Once every submission is in: `steady_rounds` rounds with nothing
    /// new, the jobs past the cluster's 128 GPUs waiting (`waiting`), each
    /// round's own time (`Status`'s measure): median and 99th percentile,
    /// seconds (0 when no steady rounds were asked for).
    pub steady_rounds: usize,
    pub waiting: usize,
    pub steady_p50_s: f64,
    pub steady_p99_s: f64,
    /// Of those rounds, the median of their publishing part (the status
    /// view and job-table pass after the loop's round), seconds.
    pub steady_publish_p50_s: f64,
}

/// The GPUs of the bench's cluster: 16 mock workers of 8.
const WORKERS: usize = 16;
const GPUS_PER_WORKER: u32 = 8;

/// Peak resident set of this process, KiB (`VmHWM`; 0 where unreadable).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// How long a refusal asks the client to wait: the `retry-after-ms`
/// metadata the scheduler sends with it, else 50 ms.
fn backoff(s: &tonic::Status) -> Duration {
    let ms = s
        .metadata()
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(50);
    Duration::from_millis(ms.clamp(1, 5_000))
}

/// Runs the benchmark: `jobs` submissions from `clients` clients against a
/// scheduler with `round_s` rounds and 16 mock workers of 8 GPUs; then,
/// for `steady_rounds` rounds, the round time with what did not fit waiting.
pub fn submissions(
    clients: usize,
    jobs: usize,
    round_s: f64,
    steady_rounds: usize,
) -> Result<SubmitResult, BenchError> {
    let clients = clients.max(1);
    let mut cfg = bench_config("submit", round_s);
    cfg.max_waiting_jobs = jobs.max(1) + 1;
    let state = cfg.state.clone();
    let sched = scheduler::start(cfg, policies("fifo", "first-free")?, round_s)
        .map_err(|e| e.to_string())?;
    let addr = sched.address.to_string();
    let rt = rt()?;
    let result = rt.block_on(async move {
        let mock = serve_mock_worker().await?;
        let sec = Security::default();
        let mut c = sec.scheduler_client(&addr).map_err(|e| e.to_string())?;
        register(&mut c, &mock, WORKERS, GPUS_PER_WORKER).await?;
        wait_status(&mut c, |s| s.rounds >= 1).await?;
        let t0 = Instant::now();
        let mut tasks = Vec::with_capacity(clients);
        for k in 0..clients {
            let mut c = sec.scheduler_client(&addr).map_err(|e| e.to_string())?;
            // Client k submits jobs k, k + clients, ...
            let mine: Vec<usize> = (k..jobs).step_by(clients).collect();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(mine.len());
                let mut ids = Vec::with_capacity(mine.len());
                let mut retries = 0u64;
                for i in mine {
                    let req = SubmitRequest {
                        job: Some(JobSubmission {
                            name: format!("bench-{i}"),
                            command: vec!["mock".into()],
                            gpus: 1,
                            user: Some(format!("client{k}")),
                            idempotency_key: format!("bench-{i}"),
                            ..Default::default()
                        }),
                    };
                    loop {
                        let t = Instant::now();
                        match c.submit(req.clone()).await {
                            Ok(r) => {
                                lat.push(t.elapsed().as_secs_f64());
                                ids.push(r.into_inner().job_id);
                                break;
                            }
                            Err(s)
                                if matches!(
                                    s.code(),
                                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                                ) =>
                            {
                                retries += 1;
                                tokio::time::sleep(backoff(&s)).await;
                            }
                            Err(s) => return Err(format!("bench-{i}: {}", s.message())),
                        }
                    }
                }
                Ok((lat, ids, retries))
            }));
        }
        let (mut lat, mut ids, mut retries) = (Vec::new(), Vec::new(), 0u64);
        for t in tasks {
            let (l, i, r) = t.await.map_err(|e| e.to_string())??;
            lat.extend(l);
            ids.extend(i);
            retries += r;
        }
        let el = t0.elapsed().as_secs_f64();
        // Every job read back, a page of 1,000 at a time.
        let mut names: Vec<String> = Vec::with_capacity(jobs);
        let mut pages = Vec::new();
        let mut after = 0u64;
        let mut last: (f64, f64);
        loop {
            let req = StatusRequest {
                limit: 1000,
                after_id: after,
                no_workers: true,
                ..Default::default()
            };
            let t = Instant::now();
            let r = c
                .status(req)
                .await
                .map_err(|e| e.message().to_string())?
                .into_inner();
            pages.push(t.elapsed().as_secs_f64());
            names.extend(r.jobs.iter().map(|j| j.name.clone()));
            after = r.next_after_id;
            last = (r.round_p50_s, r.round_p99_s);
            if after == 0 {
                break;
            }
        }
        let listed = names.len();
        let mut seen = HashSet::with_capacity(names.len());
        let duplicated = names.iter().filter(|n| !seen.insert(n.as_str())).count();
        let lost = (0..jobs)
            .filter(|i| !seen.contains(format!("bench-{i}").as_str()))
            .count();
        let distinct: HashSet<u64> = ids.iter().copied().collect();
        if distinct.len() != ids.len() {
            return Err(BenchError(format!(
                "{} submissions were answered with an id another one got",
                ids.len() - distinct.len()
            )));
        }
        let (round_p50_s, round_p99_s) = last;
        let page_max = pages.iter().copied().fold(0.0, f64::max);
        Ok::<_, BenchError>(SubmitResult {
            clients,
            jobs,
            per_s: ids.len() as f64 / el,
            latency_p50_s: blox_core::stats::quantile(&mut lat.clone(), 0.5),
            latency_p99_s: blox_core::stats::quantile(&mut lat, 0.99),
            retries,
            lost,
            duplicated,
            round_p50_s,
            round_p99_s,
            status_page_p50_s: blox_core::stats::quantile(&mut pages, 0.5),
            status_page_max_s: page_max,
            listed,
            peak_rss_kib: peak_rss_kib(),
            steady_rounds,
            waiting: jobs.saturating_sub(WORKERS * GPUS_PER_WORKER as usize),
            steady_p50_s: 0.0,
            steady_p99_s: 0.0,
            steady_publish_p50_s: 0.0,
        })
    });
    // The intake's last rounds pass first (two rounds), then the steady
    // ones are measured.
    let result = result.and_then(|mut r| {
        if steady_rounds == 0 {
            return Ok(r);
        }
        // Each round's (loop, publishing) seconds.
        let rounds = || {
            let s = sched.round_stats();
            s.busy_s
                .iter()
                .zip(&s.publish_s)
                .map(|(b, p)| (*b, *p))
                .collect::<Vec<(f64, f64)>>()
        };
        let wait_for = |n: usize| -> Result<Vec<(f64, f64)>, BenchError> {
            let from = rounds().len();
            let t = Instant::now();
            loop {
                let v = rounds();
                if v.len() >= from + n || v.len() >= RoundStats::KEPT {
                    return Ok(v[v.len().saturating_sub(n)..].to_vec());
                }
                if t.elapsed() > Duration::from_secs_f64(60.0 + 10.0 * n as f64 * round_s) {
                    return Err(BenchError(format!("{n} rounds did not complete")));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        wait_for(2)?;
        let steady = wait_for(steady_rounds)?;
        let mut total: Vec<f64> = steady.iter().map(|(b, p)| b + p).collect();
        let mut publish: Vec<f64> = steady.iter().map(|(_, p)| *p).collect();
        r.steady_p50_s = blox_core::stats::quantile(&mut total.clone(), 0.5);
        r.steady_p99_s = blox_core::stats::quantile(&mut total, 0.99);
        r.steady_publish_p50_s = blox_core::stats::quantile(&mut publish, 0.5);
        Ok(r)
    });
    let _ = sched.shutdown();
    drop(rt);
    super::remove_files(&state);
    result
}
