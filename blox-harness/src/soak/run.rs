//! `blox bench soak`: a real scheduler and real workers (separate
//! processes, `blox scheduler` and `blox worker`) on loopback, many
//! concurrent clients submitting short `blox-toy-job`s, and faults during
//! the run: workers SIGKILLed and restarted, the scheduler SIGKILLed and
//! restarted on the same job table, and network cuts between a worker and
//! the scheduler longer than the worker timeout ([`CutProxy`]). At the end
//! it checks what must never happen: an accepted job lost, a submission
//! run as two jobs, two launches of a job at once, a launch resuming from
//! an older checkpoint than an earlier one wrote.

use super::faults;
use super::isolation::{self, Isolation, ATTACKER_EVERY};
use super::journal;
use super::proxy::CutProxy;
use super::start::{self, Started};
use super::{err, teams, SoakConfig, SoakError, SoakReport};
use blox_runtime::net::SchedulerClient;
use blox_runtime::proto::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Code;

/// splitmix64: the job mix and the faults follow the seed.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One job of the mix: (GPUs, seconds, crashes once).
fn job_mix(rng: &mut Rng) -> (u32, f64, bool) {
    let r = rng.next();
    let gpus = if r < 0.6 {
        1
    } else if r < 0.8 {
        2
    } else if r < 0.95 {
        4
    } else {
        8
    };
    (gpus, 1.0 + 3.0 * rng.next(), rng.next() < 0.05)
}

/// Runs the soak; `progress` gets a line now and then.
pub fn run(cfg: &SoakConfig, progress: &mut dyn FnMut(String)) -> Result<SoakReport, SoakError> {
    let mut s = start::start(cfg, progress)?;
    // The job mix, and how long it takes at full use (plus a second per
    // launch for rounds and start-up).
    let mut rng = Rng(cfg.seed);
    let jobs: Vec<(u32, f64, bool)> = (0..cfg.jobs).map(|_| job_mix(&mut rng)).collect();
    let gpu_s: f64 = jobs.iter().map(|(g, d, _)| *g as f64 * (d + 1.0)).sum();
    let expect_s = (gpu_s / s.total_gpus as f64).max(20.0);
    let max_time_s = cfg.max_time_s.unwrap_or(3.0 * expect_s + 120.0);
    // Submissions are spread over the first 60 % of it; faults over 10-70 %.
    let window_s = 0.6 * expect_s;
    let faults = faults::plan(cfg, &mut rng);
    progress(format!(
        "soak: {} jobs from {} clients (≈ {:.0} s of work on {} GPUs), {} faults, at most {:.0} s",
        cfg.jobs,
        cfg.clients,
        expect_s,
        s.total_gpus,
        faults.len(),
        max_time_s
    ));
    let deadline = s.start + Duration::from_secs_f64(max_time_s);
    let journal_arg = s.journal_file.display().to_string();
    let per_client = submissions(cfg, &s.iso, &jobs, &journal_arg);
    let pauses: Vec<Vec<f64>> = per_client
        .iter()
        .map(|js| {
            let mean = window_s / js.len().max(1) as f64;
            js.iter().map(|_| 2.0 * mean * rng.next()).collect()
        })
        .collect();
    let plan = Plan {
        per_client,
        pauses,
        faults,
        expect_s,
        deadline,
    };
    // Huge submissions (past `max_job_bytes`) the scheduler took.
    let huge = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let proxies = std::mem::take(&mut s.proxies);
    let outcome =
        s.rt.block_on(drive(cfg, &s, proxies, plan, huge.clone(), progress));
    let escaped = stop_all(cfg, &s, progress);
    let Outcome {
        accepted,
        latencies,
        refused,
        faults,
        all,
        round,
        quota_waits,
    } = outcome?;
    let huge_accepted = huge.load(std::sync::atomic::Ordering::Relaxed);
    // With every worker gone, nothing a job started may be left (a
    // launch's guardian kills its group when its worker dies).
    let leftover = {
        let t = Instant::now();
        loop {
            let n = job_processes_under(&s.dir);
            if n == 0 || t.elapsed() > Duration::from_secs(5) {
                break n;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let seen = journal::check(&s.journal_file).map_err(err)?;
    let mut report = tally(accepted, latencies, refused, all, &seen);
    report.leftover_processes = leftover;
    #[cfg(unix)]
    if s.iso.attackers {
        let tokens: Vec<String> = ["user-token", "worker-token"]
            .iter()
            .filter_map(|n| std::fs::read_to_string(s.dir.join(n)).ok())
            .collect();
        let mut a = blox_runtime::toy::attack::check(&s.dir, &tokens);
        a.escaped = escaped;
        if let Some(d) = &s.decoys {
            let changed = d.changed();
            for c in changed.iter().take(5) {
                progress(format!("soak: a decoy changed: {c}"));
            }
            a.decoys_changed = changed.len();
        }
        a.budgets_exceeded += huge_accepted;
        report.attacks = Some(a);
    }
    report.round_p50_s = round.0;
    report.round_p99_s = round.1;
    report.faults = faults;
    report.quota_waits = quota_waits;
    report.wall_s = s.start.elapsed().as_secs_f64();
    for (job, a, b) in seen.overlaps.iter().take(5) {
        progress(format!(
            "soak: job {job}: generation {a} still ran when {b} started"
        ));
    }
    for (job, g, at, before) in seen.regressions.iter().take(5) {
        progress(format!(
            "soak: job {job}: generation {g} resumed at iteration {at}, but {before} was checkpointed before"
        ));
    }
    Ok(report)
}

/// What the clients submit and when, and the faults.
struct Plan {
    /// Each client's submissions.
    per_client: Vec<Vec<(usize, JobSubmission)>>,
    /// The pause before each.
    pauses: Vec<Vec<f64>>,
    /// The faults, in order.
    faults: Vec<faults::Fault>,
    /// How long the jobs take at full use.
    expect_s: f64,
    /// When the soak gives up waiting.
    deadline: Instant,
}

/// What the clients were told, the faults injected and what the scheduler
/// holds at the end.
struct Outcome {
    accepted: HashMap<usize, u64>,
    latencies: Vec<f64>,
    refused: Vec<String>,
    faults: Vec<String>,
    all: Vec<JobInfo>,
    round: (f64, f64),
    quota_waits: Option<teams::QuotaWaits>,
}

/// The clients submitting, the faults injected, then waiting for every job
/// to end (or the deadline).
async fn drive(
    cfg: &SoakConfig,
    s: &Started,
    proxies: Vec<(CutProxy, CutProxy)>,
    plan: Plan,
    huge: Arc<std::sync::atomic::AtomicUsize>,
    progress: &mut dyn FnMut(String),
) -> Result<Outcome, SoakError> {
    let Plan {
        per_client,
        pauses,
        faults,
        expect_s,
        deadline,
    } = plan;
    let (users, addr, cluster, start) = (&s.users, &s.addr, &s.cluster, s.start);
    // Clients.
    let accepted: Arc<Mutex<HashMap<usize, u64>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for (js, pauses) in per_client.into_iter().zip(pauses) {
        let mut client = users.scheduler_client(addr).map_err(err)?;
        let (accepted, latencies, refused, huge) = (
            accepted.clone(),
            latencies.clone(),
            refused.clone(),
            huge.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for ((k, job), pause) in js.into_iter().zip(pauses) {
                tokio::time::sleep(Duration::from_secs_f64(pause)).await;
                // Now and then a submission of 128 KB of arguments:
                // refused (INVALID_ARGUMENT, [runtime] max_job_bytes).
                if k % HUGE_EVERY == HUGE_EVERY / 3 {
                    let mut big = job.clone();
                    big.name = format!("{}-huge", big.name);
                    big.idempotency_key.clear();
                    big.command.extend((0..4).map(|_| "x".repeat(32 * 1024)));
                    let r = client.submit(SubmitRequest { job: Some(big) }).await;
                    if r.is_ok() {
                        huge.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                match submit(&mut client, job, deadline).await {
                    Ok((id, s)) => {
                        accepted.lock().expect("not poisoned").insert(k, id);
                        latencies.lock().expect("not poisoned").push(s);
                    }
                    Err(e) => refused.lock().expect("not poisoned").push(e),
                }
            }
        }));
    }
    // Teams: how long a team waits below its quota.
    let stop_sampling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = match cfg.teams {
        true => Some(tokio::spawn(teams::sample(
            users.scheduler_client(addr).map_err(err)?,
            accepted.clone(),
            teams::quota(cfg),
            stop_sampling.clone(),
        ))),
        false => None,
    };
    // Faults, spread over 10-70 % of the expected run.
    let done_faults: Arc<Mutex<Vec<String>>> = Arc::default();
    let fault_task = {
        let cluster = cluster.clone();
        let done = done_faults.clone();
        let n = faults.len();
        let proxies = Arc::new(proxies);
        tokio::spawn(async move {
            for (i, f) in faults.into_iter().enumerate() {
                let at = start
                    + Duration::from_secs_f64(
                        expect_s * (0.1 + 0.6 * (i as f64 + 0.5) / n.max(1) as f64),
                    );
                tokio::time::sleep_until(at.into()).await;
                let what = faults::inject(f, &cluster, &proxies).await;
                done.lock().expect("not poisoned").push(what);
            }
            proxies
        })
    };
    // Wait for every client, then for every job to end.
    for t in tasks {
        let _ = t.await;
    }
    let proxies = fault_task.await.map_err(err)?;
    let (all, round) = wait_all_ended(s, deadline, progress).await?;
    stop_sampling.store(true, std::sync::atomic::Ordering::Relaxed);
    let quota_waits = match sampler {
        Some(s) => Some(s.await.map_err(err)?),
        None => None,
    };
    drop(proxies);
    let accepted = std::mem::take(&mut *accepted.lock().expect("not poisoned"));
    let latencies = std::mem::take(&mut *latencies.lock().expect("not poisoned"));
    let refused = std::mem::take(&mut *refused.lock().expect("not poisoned"));
    let faults = std::mem::take(&mut *done_faults.lock().expect("not poisoned"));
    Ok(Outcome {
        accepted,
        latencies,
        refused,
        faults,
        all,
        round,
        quota_waits,
    })
}

/// Waits for every job to end (or the deadline), the scheduler alive;
/// returns every job and the scheduler's round p50 and largest p99.
async fn wait_all_ended(
    s: &Started,
    deadline: Instant,
    progress: &mut dyn FnMut(String),
) -> Result<(Vec<JobInfo>, (f64, f64)), SoakError> {
    let (cluster, start) = (&s.cluster, s.start);
    let mut client = s.users.scheduler_client(&s.addr).map_err(err)?;
    let mut round = (0.0f64, 0.0f64);
    let mut last_note = Instant::now();
    loop {
        {
            let mut c = cluster.lock().expect("not poisoned");
            c.scheduler.check_alive("the scheduler")?;
        }
        let unfinished = match count_unfinished(&mut client).await {
            Ok((n, p50, p99)) => {
                round = (p50, round.1.max(p99));
                Some(n)
            }
            Err(_) => None,
        };
        if unfinished == Some(0) || Instant::now() >= deadline {
            break;
        }
        if last_note.elapsed() > Duration::from_secs(30) {
            progress(format!(
                "soak: {:.0} s, {} jobs not ended yet",
                start.elapsed().as_secs_f64(),
                unfinished.map_or("?".into(), |n| n.to_string())
            ));
            last_note = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok((all_jobs(&mut client).await?, round))
}

/// Stops every process before the journal is read (no job writes after
/// this); where jobs ran as other uids, returns how many of their processes
/// outlived a sweep by each worker started once more.
fn stop_all(cfg: &SoakConfig, s: &Started, progress: &mut dyn FnMut(String)) -> usize {
    let cluster = &s.cluster;
    // Stop everything before reading the journal: no job writes after this.
    {
        let mut c = cluster.lock().expect("not poisoned");
        for w in &mut c.workers {
            w.kill();
        }
        c.scheduler.kill();
    }
    // A worker killed with SIGKILL leaves what a job moved out of its
    // process group; started again, it kills that before anything else.
    // Each is started once more, given that time, and killed.
    #[cfg(unix)]
    let escaped = if s.iso.attackers {
        {
            let mut c = cluster.lock().expect("not poisoned");
            for w in &mut c.workers {
                if let Err(e) = w.restart(&cfg.blox) {
                    progress(format!("soak: restarting a worker to sweep: {e}"));
                }
            }
        }
        std::thread::sleep(Duration::from_secs(3));
        {
            let mut c = cluster.lock().expect("not poisoned");
            for w in &mut c.workers {
                w.kill();
            }
        }
        let t = Instant::now();
        loop {
            let n = processes_of_uids(isolation::JOB_UIDS);
            if n == 0 || t.elapsed() > Duration::from_secs(5) {
                break n;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    } else {
        0
    };
    #[cfg(not(unix))]
    let escaped = 0;
    escaped
}

/// One submission in this many is preceded by a huge one (refused).
const HUGE_EVERY: usize = 25;

/// One job in this many forks a `sleep` into its process group.
const FORKING_EVERY: usize = 20;

/// Each client's share of the jobs (`(index, submission)`), round robin:
/// toy jobs of the mix's duration that journal their runs, some crashing
/// half-way.
fn submissions(
    cfg: &SoakConfig,
    iso: &Isolation,
    jobs: &[(u32, f64, bool)],
    journal_arg: &str,
) -> Vec<Vec<(usize, JobSubmission)>> {
    let toy = iso.toy.display().to_string();
    (0..cfg.clients)
        .map(|c| {
            jobs.iter()
                .enumerate()
                .filter(|(k, _)| k % cfg.clients == c)
                .map(|(k, (gpus, dur, crash))| {
                    let mut command = vec![
                        toy.clone(),
                        "--duration-s".into(),
                        format!("{dur:.2}"),
                        "--iteration-s".into(),
                        "0.05".into(),
                        "--checkpoint-every".into(),
                        "5".into(),
                        "--journal".into(),
                        journal_arg.to_string(),
                    ];
                    if *crash {
                        command.extend(["--fail-at".into(), "0.5".into()]);
                    }
                    // Attackers go for the job with the id before theirs.
                    if iso.attackers && k % ATTACKER_EVERY == ATTACKER_EVERY / 2 + 1 {
                        command.extend(["--attack".into(), "1".into()]);
                    }
                    // One job in 20 forks a child that outlives it unless
                    // its process group is killed.
                    if k % FORKING_EVERY == FORKING_EVERY / 2 {
                        let mut wrapped = vec![
                            "/bin/sh".to_string(),
                            "-c".into(),
                            "sleep 3600 & exec \"$0\" \"$@\"".into(),
                        ];
                        wrapped.extend(command);
                        command = wrapped;
                    }
                    let name = format!("soak-{k}");
                    (
                        k,
                        JobSubmission {
                            name: name.clone(),
                            command,
                            gpus: *gpus,
                            idempotency_key: name,
                            team: cfg.teams.then(|| teams::team_of(k)),
                            ..Default::default()
                        },
                    )
                })
                .collect()
        })
        .collect()
}

/// The report from what the scheduler holds at the end against what the
/// clients were told and what the journal saw.
fn tally(
    accepted: HashMap<usize, u64>,
    mut latencies: Vec<f64>,
    refused: Vec<String>,
    all: Vec<JobInfo>,
    seen: &journal::JournalReport,
) -> SoakReport {
    let mut report = SoakReport {
        accepted: accepted.len(),
        overlapping_runs: seen.overlaps.len(),
        checkpoint_regressions: seen.regressions.len(),
        launches: seen.launches,
        ..Default::default()
    };
    for r in refused {
        *report
            .failed_reasons
            .entry(format!("not accepted: {r}"))
            .or_default() += 1;
        report.failed += 1;
    }
    let by_id: HashMap<u64, &JobInfo> = all.iter().map(|j| (j.id, j)).collect();
    let mut names: HashMap<&str, usize> = HashMap::new();
    for j in &all {
        *names.entry(j.name.as_str()).or_default() += 1;
    }
    report.duplicated = names.values().map(|n| n - 1).sum();
    for id in accepted.values() {
        match by_id.get(id) {
            None => report.lost += 1,
            Some(j) => match j.phase() {
                JobPhase::Finished => {
                    report.finished += 1;
                    report.finished_undone += !seen.done.contains(id) as usize;
                }
                JobPhase::Failed | JobPhase::Rejected | JobPhase::Cancelled => {
                    report.failed += 1;
                    *report.failed_reasons.entry(j.reason.clone()).or_default() += 1;
                }
                _ => report.unfinished += 1,
            },
        }
    }
    if !latencies.is_empty() {
        report.submit_p50_s = blox_core::stats::quantile(&mut latencies, 0.5);
        report.submit_p99_s = blox_core::stats::quantile(&mut latencies, 0.99);
    }
    report
}

/// Submits `job` until it is accepted (retrying what a restart or a cut
/// explains, with the same idempotency key) or `deadline` passes. Returns
/// the job id and the accepting call's latency.
async fn submit(
    client: &mut SchedulerClient,
    job: JobSubmission,
    deadline: Instant,
) -> Result<(u64, f64), String> {
    let first = Instant::now();
    loop {
        let t = Instant::now();
        let call = client.submit(SubmitRequest {
            job: Some(job.clone()),
        });
        let r = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no reply in 10 s")));
        // A retryable refusal, for the report should the run end first.
        let last = match r {
            Ok(reply) => return Ok((reply.into_inner().job_id, t.elapsed().as_secs_f64())),
            // Workers still registering after a restart.
            Err(e)
                if e.code() == Code::FailedPrecondition
                    || (e.code() == Code::InvalidArgument
                        && e.message().contains("the cluster has")) =>
            {
                format!("{:?}: {}", e.code(), e.message())
            }
            Err(e)
                if matches!(
                    e.code(),
                    Code::InvalidArgument | Code::AlreadyExists | Code::Unauthenticated
                ) =>
            {
                return Err(format!("{:?}: {}", e.code(), e.message()));
            }
            Err(e) => format!("{:?}: {}", e.code(), e.message()),
        };
        if Instant::now() >= deadline {
            // Without the seconds it tried: submissions given up on for the
            // same last answer are one group of the report.
            let _ = first;
            return Err(format!("the run ended first; its last answer: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Jobs not ended yet, and the scheduler's round p50/p99.
async fn count_unfinished(
    client: &mut SchedulerClient,
) -> Result<(usize, f64, f64), tonic::Status> {
    let mut after = 0;
    let mut n = 0;
    loop {
        let s = client
            .status(StatusRequest {
                limit: 1000,
                after_id: after,
                phases: vec![
                    JobPhase::Submitted as i32,
                    JobPhase::Queued as i32,
                    JobPhase::Running as i32,
                ],
                ..Default::default()
            })
            .await?
            .into_inner();
        n += s.jobs.len();
        if s.next_after_id == 0 {
            return Ok((n, s.round_p50_s, s.round_p99_s));
        }
        after = s.next_after_id;
    }
}

async fn all_jobs(client: &mut SchedulerClient) -> Result<Vec<JobInfo>, SoakError> {
    let mut after = 0;
    let mut out = Vec::new();
    for _ in 0..100 {
        match client
            .status(StatusRequest {
                limit: 1000,
                after_id: after,
                ..Default::default()
            })
            .await
        {
            Ok(s) => {
                let s = s.into_inner();
                out.extend(s.jobs);
                if s.next_after_id == 0 {
                    return Ok(out);
                }
                after = s.next_after_id;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    Err(err("the scheduler did not answer Status at the end"))
}

/// Live processes whose real or effective uid is in `range`
/// (`FIRST-LAST`).
fn processes_of_uids(range: &str) -> usize {
    let Some((a, b)) = range
        .split_once('-')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
    else {
        return 0;
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .is_some_and(|l| {
                        l.split_whitespace()
                            .take(2)
                            .filter_map(|v| v.parse::<u32>().ok())
                            .any(|u| (a..=b).contains(&u))
                    })
            })
        })
        .count()
}

/// Live processes whose environment names a control directory under `dir`
/// (job processes and what they forked; Linux, elsewhere 0).
fn job_processes_under(dir: &std::path::Path) -> usize {
    let needle = format!("BLOX_CONTROL_DIR={}", dir.display());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read(e.path().join("environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|v| v.starts_with(needle.as_bytes()))
            })
        })
        .count()
}
