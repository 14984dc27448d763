//! Benchmarks of the real runtime, run by `blox bench metric-push`,
//! `blox bench runtime-round` and `blox bench submit` (`submit.rs`; results
//! in docs/PERFORMANCE.md).
//!
//! Both run an in-process scheduler on loopback against [`MockWorker`], a
//! worker service that accepts every launch and revocation without starting
//! a process, so what is measured is the scheduler.

use blox_core::*;
use blox_runtime::net::Security;
use blox_runtime::proto::worker_server::{Worker, WorkerServer};
use blox_runtime::proto::*;
use blox_runtime::scheduler::{self, RuntimeConfig};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::{Request, Response, Status};

mod submit;
pub use submit::{submissions, SubmitResult};

/// A runtime benchmark that could not run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BenchError(pub String);

impl From<String> for BenchError {
    fn from(s: String) -> Self {
        BenchError(s)
    }
}

impl From<&str> for BenchError {
    fn from(s: &str) -> Self {
        BenchError(s.to_string())
    }
}

/// The runtime benchmarks, by name.
pub const NAMES: &[&str] = &["lease", "metric-push", "runtime-round"];

/// Runs runtime benchmark `which` (one of [`NAMES`]); each result line goes
/// to `out`.
pub fn run(which: &str, repeat: usize, out: &mut dyn FnMut(String)) -> Result<(), BenchError> {
    match which {
        "lease" => {
            let n = 1_000_000;
            let per = lease_check_us(n)?;
            out(format!(
                "lease        {n} checks of a held lease: {per:.2} µs per check (target 20 µs)"
            ));
        }
        "metric-push" => {
            for (clients, batch) in [(1, 1), (8, 1), (8, 100), (64, 100)] {
                let r = metric_push(clients, batch, 3.0)?;
                out(format!(
                    "metric-push  {:>3} workers × {:>3} samples per call: {:>9.0} calls/s  {:>11.0} samples/s  ({} replaced older ones in full queues)",
                    r.clients, r.batch, r.rpcs_per_s, r.samples_per_s, r.replaced
                ));
            }
        }
        "runtime-round" => {
            for _ in 0..repeat.max(1) {
                let r = round_overhead(1000, 512, 8, 100)?;
                out(format!(
                    "runtime-round {} jobs on {} GPUs, {} rounds: overhead p50 {:.2} ms, p99 {:.2} ms (target 10 ms); policies p50 {:.2} ms; status view + job table p50 {:.2} ms",
                    r.jobs,
                    r.gpus,
                    r.rounds,
                    1e3 * r.overhead_p50_s,
                    1e3 * r.overhead_p99_s,
                    1e3 * r.policy_p50_s,
                    1e3 * r.publish_p50_s
                ));
            }
        }
        other => {
            return Err(BenchError(format!(
                "unknown runtime benchmark `{other}`; choose {}",
                NAMES.join(", ")
            )))
        }
    }
    Ok(())
}

/// Microseconds per lease check of `blox-client` (a job's per-iteration
/// cost), over `n` checks of a lease that holds.
pub fn lease_check_us(n: u32) -> Result<f64, BenchError> {
    use blox_client::{env, Job, JobEnv};
    let dir = std::env::temp_dir().join(format!("blox-bench-lease-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| BenchError(format!("{}: {e}", dir.display())))?;
    let d = dir.display().to_string();
    let job = JobEnv::from_lookup(|k| match k {
        env::JOB_ID => Some("1".into()),
        env::CHECKPOINT_DIR | env::CONTROL_DIR => Some(d.clone()),
        _ => None,
    })
    .and_then(Job::attach)
    .map_err(|e| BenchError(e.to_string()))?;
    let t = Instant::now();
    let mut revoked = 0u32;
    for _ in 0..n {
        revoked += u32::from(std::hint::black_box(&job).lease_revoked());
    }
    let per = t.elapsed().as_secs_f64() / n.max(1) as f64 * 1e6;
    let _ = std::fs::remove_dir_all(&dir);
    if revoked != 0 {
        return Err(BenchError(
            "the lease was revoked during the benchmark".into(),
        ));
    }
    Ok(per)
}

/// A worker service that acknowledges everything and runs nothing.
#[derive(Clone, Default)]
pub struct MockWorker;

#[tonic::async_trait]
impl Worker for MockWorker {
    async fn launch(&self, _r: Request<LaunchRequest>) -> Result<Response<Ack>, Status> {
        Ok(Response::new(Ack {}))
    }
    async fn revoke(&self, _r: Request<RevokeRequest>) -> Result<Response<RevokeReply>, Status> {
        Ok(Response::new(RevokeReply {
            was_running: true,
            ..Default::default()
        }))
    }
    async fn reconfigure(&self, _r: Request<ReconfigureRequest>) -> Result<Response<Ack>, Status> {
        Ok(Response::new(Ack {}))
    }
}

/// Serves a [`MockWorker`] on a free loopback port; returns its address.
pub async fn serve_mock_worker() -> Result<String, BenchError> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = l.local_addr().map_err(|e| e.to_string())?.to_string();
    tokio::spawn(async move {
        let incoming = blox_runtime::net::incoming(l);
        let _ = tonic::transport::Server::builder()
            .add_service(WorkerServer::new(MockWorker))
            .serve_with_incoming(incoming)
            .await;
    });
    Ok(addr)
}

fn policies(scheduling: &str, placement: &str) -> Result<Policies, String> {
    registry::build_named("accept-all", scheduling, placement).map_err(|e| e.to_string())
}

fn bench_config(tag: &str, round_s_timeout: f64) -> RuntimeConfig {
    let state = std::env::temp_dir().join(format!(
        "blox-bench-{tag}-{}-{}.redb",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    RuntimeConfig {
        listen: "127.0.0.1:0".into(),
        // Its own event log (the default, `events.jsonl` beside the state,
        // would be one file in the temp folder shared by every run).
        events: Some(state.with_extension("events.jsonl")),
        state,
        // Registered mock workers never beat.
        heartbeat_s: round_s_timeout,
        worker_timeout_s: 1e6,
        ..RuntimeConfig::default()
    }
}

/// Removes a benchmark scheduler's job table and event log (with the
/// log's rotated files).
fn remove_files(state: &std::path::Path) {
    let _ = std::fs::remove_file(state);
    let events = state.with_extension("events.jsonl");
    let _ = std::fs::remove_file(&events);
    for k in 1..=16 {
        let mut rotated = events.clone().into_os_string();
        rotated.push(format!(".{k}"));
        let _ = std::fs::remove_file(rotated);
    }
}

fn rt() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
}

/// Registers `n` workers of `gpus` GPUs each, all served by the mock at
/// `mock`; each one's credential by its id.
async fn register(
    client: &mut blox_runtime::net::SchedulerClient,
    mock: &str,
    n: usize,
    gpus: u32,
) -> Result<std::collections::HashMap<String, String>, String> {
    let mut ids = std::collections::HashMap::with_capacity(n);
    for i in 0..n {
        let r = client
            .register(RegisterRequest {
                name: format!("node{i}"),
                address: mock.to_string(),
                gpus: (0..gpus)
                    .map(|g| GpuDevice {
                        index: g,
                        uuid: format!("node{i}-gpu{g}"),
                        name: "logical".into(),
                        memory_gb: 16.0,
                        relative_time: 0.0,
                    })
                    .collect(),
                cpus: 32,
                host_mem_gb: 244.0,
                running: Vec::new(),
                labels: Default::default(),
                // As a current worker (the mocks acknowledge any launch).
                shares_gpus: true,
                ..Default::default()
            })
            .await
            .map_err(|e| e.message().to_string())?;
        let r = r.into_inner();
        ids.insert(r.worker_id, r.worker_secret);
    }
    Ok(ids)
}

/// Metric-push throughput of the scheduler.
#[derive(Clone, Debug)]
pub struct PushResult {
    pub clients: usize,
    pub batch: usize,
    /// Samples that replaced an older one in a job's queue (at most 1,024
    /// per job between two rounds are kept; pushes this fast overflow it).
    pub replaced: u64,
    pub rpcs_per_s: f64,
    pub samples_per_s: f64,
}

/// `clients` concurrent workers, each running one one-GPU job, push
/// batches of `batch` samples of that job's launch to one scheduler for
/// `seconds`, over loopback. Every sample is for a running launch on the
/// pushing worker, so it goes through validation into the job's queue (the
/// benchmark fails if a first sample per launch is dropped).
pub fn metric_push(clients: usize, batch: usize, seconds: f64) -> Result<PushResult, BenchError> {
    let cfg = bench_config("push", 1.0);
    let state = cfg.state.clone();
    let sched =
        scheduler::start(cfg, policies("fifo", "first-free")?, 0.2).map_err(|e| e.to_string())?;
    let addr = sched.address.to_string();
    let rt = rt()?;
    let result = rt.block_on(async move {
        let mock = serve_mock_worker().await?;
        let sec = Security::default();
        let mut c = sec.scheduler_client(&addr).map_err(|e| e.to_string())?;
        let creds = register(&mut c, &mock, clients, 1).await?;
        wait_status(&mut c, |s| s.rounds >= 2).await?;
        submit(&mut c, clients, 1).await?;
        let launches = all_running(&mut c).await?;
        // One sample per launch first, from its worker: none may be dropped
        // (that would mean the benchmark pushes for launches the scheduler
        // does not run there, and measures only their refusal).
        for (job_id, launch, worker) in &launches {
            c.push_metrics(blox_runtime::net::with_credential(
                MetricBatch {
                    worker_id: worker.clone(),
                    samples: vec![MetricSample {
                        launch: Some(LaunchRef {
                            job_id: *job_id,
                            launch: *launch,
                        }),
                        key: metric::LOSS.into(),
                        value: 1.0,
                    }],
                },
                creds.get(worker).map_or("", String::as_str),
            ))
            .await
            .map_err(|e| e.message().to_string())?;
        }
        let first = wait_status(&mut c, |_| true).await?;
        if first.metrics_dropped != 0 {
            return Err(BenchError(format!(
                "the scheduler dropped {} of the first samples: the benchmark must push for running launches only",
                first.metrics_dropped
            )));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let mut tasks = Vec::new();
        for (job_id, launch, worker) in launches {
            let mut c = sec.scheduler_client(&addr).map_err(|e| e.to_string())?;
            let cred = creds.get(&worker).cloned().unwrap_or_default();
            tasks.push(tokio::spawn(async move {
                let samples: Vec<MetricSample> = (0..batch)
                    .map(|i| MetricSample {
                        launch: Some(LaunchRef { job_id, launch }),
                        key: metric::LOSS.into(),
                        value: i as f64,
                    })
                    .collect();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let req = MetricBatch {
                        worker_id: worker.clone(),
                        samples: samples.clone(),
                    };
                    if c
                        .push_metrics(blox_runtime::net::with_credential(req, &cred))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    n += 1;
                }
                n
            }));
        }
        let t = Instant::now();
        let mut rpcs = 0u64;
        for task in tasks {
            rpcs += task.await.unwrap_or(0);
        }
        let el = t.elapsed().as_secs_f64();
        let after = wait_status(&mut c, |_| true).await?;
        Ok::<_, BenchError>(PushResult {
            replaced: after.metrics_dropped,
            clients,
            batch,
            rpcs_per_s: rpcs as f64 / el,
            samples_per_s: (rpcs as usize * batch) as f64 / el,
        })
    });
    let _ = sched.shutdown();
    remove_files(&state);
    result
}

/// Round overhead of the scheduler with many jobs on many GPUs.
#[derive(Clone, Debug)]
pub struct RoundResult {
    pub jobs: usize,
    pub gpus: u32,
    pub rounds: usize,
    /// Per round, policy time excluded: median and 99th percentile, seconds.
    pub overhead_p50_s: f64,
    pub overhead_p99_s: f64,
    /// Policy time per round (median), seconds.
    pub policy_p50_s: f64,
    /// Status view and job table update per round (median), seconds.
    pub publish_p50_s: f64,
}

/// A policy whose every call is timed into `log` (policy time is excluded
/// from the round overhead).
struct Timed<P> {
    inner: P,
    log: Arc<Mutex<Vec<f64>>>,
}

impl SchedulingPolicy for Timed<Box<dyn SchedulingPolicy>> {
    fn schedule(&mut self, round: &RoundInfo, jobs: &JobState, cluster: &ClusterState) -> Schedule {
        let t = Instant::now();
        let s = self.inner.schedule(round, jobs, cluster);
        self.log.lock().unwrap().push(t.elapsed().as_secs_f64());
        s
    }

    fn accepts(&self, job: &JobSpec) -> Result<(), String> {
        self.inner.accepts(job)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        self.inner.metrics_read()
    }

    fn requires_placement(&self) -> Option<&'static str> {
        self.inner.requires_placement()
    }

    fn pair_with_placement(&mut self, placement: &str) -> Result<(), String> {
        self.inner.pair_with_placement(placement)
    }

    fn sort_key(&self, job: &blox_core::Job, jobs: &blox_core::JobState) -> Option<String> {
        self.inner.sort_key(job, jobs)
    }

    fn fits_cluster(&self, cluster: &blox_core::ClusterState) -> Result<(), String> {
        self.inner.fits_cluster(cluster)
    }
}

impl PlacementPolicy for Timed<Box<dyn PlacementPolicy>> {
    fn place(
        &mut self,
        round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let t = Instant::now();
        let p = self.inner.place(round, schedule, jobs, cluster);
        self.log.lock().unwrap().push(t.elapsed().as_secs_f64());
        p
    }
    fn never_places(&self, job: &Job, cluster: &ClusterState) -> Option<String> {
        self.inner.never_places(job, cluster)
    }

    fn metrics_read(&self) -> Vec<&'static str> {
        self.inner.metrics_read()
    }

    fn requires_variability(&self) -> bool {
        self.inner.requires_variability()
    }

    fn requires_scheduling(&self) -> Option<&'static str> {
        self.inner.requires_scheduling()
    }

    fn fits_cluster(&self, cluster: &ClusterState) -> std::result::Result<(), String> {
        self.inner.fits_cluster(cluster)
    }
}

/// Polls the scheduler's status until `done` holds; that status.
async fn wait_status(
    c: &mut blox_runtime::net::SchedulerClient,
    done: impl Fn(&StatusReply) -> bool,
) -> Result<StatusReply, String> {
    loop {
        // Every page of jobs.
        let mut req = StatusRequest::default();
        let mut s = c
            .status(req.clone())
            .await
            .map_err(|e| e.message().to_string())?
            .into_inner();
        while s.next_after_id != 0 {
            req.after_id = s.next_after_id;
            let next = c
                .status(req.clone())
                .await
                .map_err(|e| e.message().to_string())?
                .into_inner();
            s.jobs.extend(next.jobs);
            s.next_after_id = next.next_after_id;
        }
        if done(&s) {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every running launch in `s`: (job id, launch number, the worker it runs
/// on), the worker read from its first GPU (`worker:local-index`).
fn running_launches(s: &StatusReply) -> Vec<(u64, u32, String)> {
    s.jobs
        .iter()
        .filter(|j| j.status == JobStatus::Running.as_str())
        .filter_map(|j| {
            let (worker, _) = j.gpus.first()?.rsplit_once(':')?;
            Some((j.id, j.launches, worker.to_string()))
        })
        .collect()
}

/// Submits `n` mock jobs of `gpus` GPUs each; their ids.
async fn submit(
    c: &mut blox_runtime::net::SchedulerClient,
    n: usize,
    gpus: u32,
) -> Result<Vec<u64>, String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let r = c
            .submit(SubmitRequest {
                job: Some(JobSubmission {
                    name: format!("bench-{i}"),
                    command: vec!["mock".into()],
                    gpus,
                    ..Default::default()
                }),
            })
            .await
            .map_err(|e| e.message().to_string())?;
        ids.push(r.into_inner().job_id);
    }
    Ok(ids)
}

/// Waits until every job runs; their launches (see [`running_launches`]).
async fn all_running(
    c: &mut blox_runtime::net::SchedulerClient,
) -> Result<Vec<(u64, u32, String)>, String> {
    let s = wait_status(c, |s| {
        s.jobs
            .iter()
            .all(|j| j.status == JobStatus::Running.as_str() && !j.gpus.is_empty())
    })
    .await?;
    Ok(running_launches(&s))
}

/// `jobs` running jobs spread over `nodes` mock workers of `gpus_per_node`
/// GPUs (each job as many GPUs as divide evenly), each job pushing one
/// metric per round; times `rounds` steady-state rounds of FIFO with
/// consolidated placement.
pub fn round_overhead(
    jobs: usize,
    nodes: usize,
    gpus_per_node: u32,
    rounds: usize,
) -> Result<RoundResult, BenchError> {
    let total = nodes as u32 * gpus_per_node;
    let per_job = (total / jobs as u32).max(1).min(gpus_per_node);
    let round_s = 0.1;
    let cfg = bench_config("round", round_s);
    let state = cfg.state.clone();
    let mut p = policies("fifo", "consolidated")?;
    let sched_log = Arc::new(Mutex::new(Vec::new()));
    let place_log = Arc::new(Mutex::new(Vec::new()));
    p.scheduling = Box::new(Timed {
        inner: p.scheduling,
        log: sched_log.clone(),
    });
    p.placement = Box::new(Timed {
        inner: p.placement,
        log: place_log.clone(),
    });
    let sched = scheduler::start(cfg, p, round_s).map_err(|e| e.to_string())?;
    let addr = sched.address.to_string();
    let rt = rt()?;
    let sec = Security::default();
    let (ids, stop) = rt.block_on(async {
        let mock = serve_mock_worker().await?;
        let mut c = sec.scheduler_client(&addr).map_err(|e| e.to_string())?;
        let creds = register(&mut c, &mock, nodes, gpus_per_node).await?;
        // Submissions wait in the scheduler until the nodes joined.
        wait_status(&mut c, |s| s.rounds >= 2).await?;
        let ids = submit(&mut c, jobs, per_job).await?;
        let launches = all_running(&mut c).await?;
        // Every job reports progress once per round, from its worker.
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        // One batch per worker, of the launches it runs.
        let mut by_worker: std::collections::BTreeMap<String, Vec<(u64, u32)>> = Default::default();
        for (job_id, launch, worker) in launches {
            by_worker.entry(worker).or_default().push((job_id, launch));
        }
        let mut pc = c.clone();
        tokio::spawn(async move {
            let mut v = 0.0;
            loop {
                v += 1e-4;
                for (worker, launches) in &by_worker {
                    let samples = launches
                        .iter()
                        .map(|&(job_id, launch)| MetricSample {
                            launch: Some(LaunchRef { job_id, launch }),
                            key: metric::PROGRESS.into(),
                            value: v,
                        })
                        .collect();
                    let _ = pc
                        .push_metrics(blox_runtime::net::with_credential(
                            MetricBatch {
                                worker_id: worker.clone(),
                                samples,
                            },
                            creds.get(worker).map_or("", String::as_str),
                        ))
                        .await;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs_f64(round_s)) => {}
                    _ = stop_rx.changed() => return,
                }
            }
        });
        Ok::<_, BenchError>((ids, stop_tx))
    })?;
    let before = sched.round_stats().busy_s.len();
    let sched_before = sched_log.lock().unwrap().len();
    let place_before = place_log.lock().unwrap().len();
    let t = Instant::now();
    while sched.round_stats().busy_s.len() < before + rounds {
        std::thread::sleep(Duration::from_millis(20));
        if t.elapsed() > Duration::from_secs(600) {
            return Err("the rounds did not complete".into());
        }
    }
    let _ = stop.send(true);
    let stats = sched.round_stats();
    let busy: Vec<f64> = stats
        .busy_s
        .range(before..before + rounds)
        .copied()
        .collect();
    let s_log = sched_log.lock().unwrap()[sched_before..].to_vec();
    let p_log = place_log.lock().unwrap()[place_before..].to_vec();
    let mut policy: Vec<f64> = (0..rounds)
        .map(|i| s_log.get(i).copied().unwrap_or(0.0) + p_log.get(i).copied().unwrap_or(0.0))
        .collect();
    let mut overhead: Vec<f64> = busy
        .iter()
        .zip(&policy)
        .map(|(b, p)| (b - p).max(0.0))
        .collect();
    let mut publish: Vec<f64> = (stats.publish_s.iter().rev().take(rounds).copied()).collect();
    let r = RoundResult {
        jobs: ids.len(),
        gpus: total,
        rounds,
        overhead_p50_s: blox_core::stats::quantile(&mut overhead, 0.5),
        overhead_p99_s: blox_core::stats::quantile(&mut overhead, 0.99),
        policy_p50_s: blox_core::stats::quantile(&mut policy, 0.5),
        publish_p50_s: blox_core::stats::quantile(&mut publish, 0.5),
    };
    let dropped = rt.block_on(async {
        let mut c = sec.scheduler_client(&addr).map_err(|e| e.to_string())?;
        wait_status(&mut c, |_| true)
            .await
            .map(|s| s.metrics_dropped)
    })?;
    let _ = sched.shutdown();
    drop(rt);
    if dropped != 0 {
        return Err(BenchError(format!(
            "the scheduler dropped {dropped} of the pushed samples: every push must be for a running launch"
        )));
    }
    remove_files(&state);
    Ok(r)
}
