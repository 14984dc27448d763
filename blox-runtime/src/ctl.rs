//! Blocking helpers for command-line tools: submit, inspect and cancel jobs
//! on a scheduler, run a worker until a signal, wait for a signal.

use crate::net::{NetError, SchedulerClient, Security};
use crate::proto::*;
use crate::worker::{WorkerConfig, WorkerError};
use serde::Deserialize;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// A failed call: the gRPC status (its code and the scheduler's message) or
/// a local problem (address, TLS files).
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{}: {}", code_name(.0.code()), .0.message())]
    Status(tonic::Status),
    #[error(transparent)]
    Net(#[from] NetError),
    #[error("{0}")]
    Runtime(String),
    /// A job file (`blox submit --file`) that cannot be read.
    #[error("{path}: {message}")]
    JobFile { path: String, message: String },
}

fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match c {
        InvalidArgument => "invalid argument",
        NotFound => "not found",
        FailedPrecondition => "failed precondition",
        Unauthenticated => "unauthenticated",
        PermissionDenied => "permission denied",
        Unavailable => "unavailable (is the scheduler running at that address?)",
        AlreadyExists => "already exists",
        DeadlineExceeded => "deadline exceeded",
        _ => "error",
    }
}

impl CtlError {
    /// The gRPC code, when the scheduler answered with one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CtlError::Status(s) => Some(s.code()),
            _ => None,
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CtlError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CtlError::Runtime(e.to_string()))
}

/// A blocking connection to a scheduler.
pub struct Ctl {
    rt: tokio::runtime::Runtime,
    client: SchedulerClient,
}

impl Ctl {
    pub fn connect(addr: &str, security: &Security) -> Result<Ctl, CtlError> {
        let rt = runtime()?;
        let client = {
            let _g = rt.enter();
            security.scheduler_client(addr)?
        };
        Ok(Ctl { rt, client })
    }

    pub fn submit(&mut self, job: JobSubmission) -> Result<u64, CtlError> {
        let r = self
            .rt
            .block_on(self.client.submit(SubmitRequest { job: Some(job) }))
            .map_err(CtlError::Status)?;
        Ok(r.into_inner().job_id)
    }

    /// The named jobs, or every job (all pages of them), and the workers.
    pub fn status(&mut self, job_ids: &[u64]) -> Result<StatusReply, CtlError> {
        self.all_pages(StatusRequest {
            job_ids: job_ids.to_vec(),
            ..Default::default()
        })
    }

    /// [`Ctl::status`] of the jobs that have not ended (submitted, queued,
    /// running): what `blox status --start` shows.
    pub fn status_unended(&mut self, job_ids: &[u64]) -> Result<StatusReply, CtlError> {
        let phases = [JobPhase::Submitted, JobPhase::Queued, JobPhase::Running];
        if !job_ids.is_empty() {
            let mut r = self.status(job_ids)?;
            r.jobs.retain(|j| phases.contains(&j.phase()));
            return Ok(r);
        }
        self.all_pages(StatusRequest {
            phases: phases.iter().map(|p| *p as i32).collect(),
            ..Default::default()
        })
    }

    /// Every page of `req`'s answer, as one reply.
    fn all_pages(&mut self, mut req: StatusRequest) -> Result<StatusReply, CtlError> {
        let mut reply = self.status_page(&req)?;
        // Later pages of jobs without the workers, then the workers'.
        req.no_workers = true;
        while reply.next_after_id != 0 {
            req.after_id = reply.next_after_id;
            let next = self.status_page(&req)?;
            reply.jobs.extend(next.jobs);
            reply.next_after_id = next.next_after_id;
        }
        while !reply.next_workers_after.is_empty() {
            let next = self.status_page(&StatusRequest {
                workers_only: true,
                workers_after: std::mem::take(&mut reply.next_workers_after),
                ..Default::default()
            })?;
            reply.workers.extend(next.workers);
            reply.next_workers_after = next.next_workers_after;
        }
        Ok(reply)
    }

    /// One `Status` call: a page of jobs (see `StatusRequest`).
    pub fn status_page(&mut self, req: &StatusRequest) -> Result<StatusReply, CtlError> {
        let r = self
            .rt
            .block_on(self.client.status(req.clone()))
            .map_err(CtlError::Status)?;
        Ok(r.into_inner())
    }

    pub fn cancel(&mut self, job_id: u64) -> Result<(), CtlError> {
        self.rt
            .block_on(self.client.cancel(CancelRequest { job_id }))
            .map_err(CtlError::Status)?;
        Ok(())
    }

    /// The raw client and its runtime (benchmarks, tools).
    pub fn parts(&mut self) -> (&tokio::runtime::Runtime, &mut SchedulerClient) {
        (&self.rt, &mut self.client)
    }
}

/// Blocks until SIGINT or SIGTERM.
pub fn wait_for_signal() -> Result<(), CtlError> {
    runtime()?.block_on(signal());
    Ok(())
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Runs a worker manager until SIGINT or SIGTERM, then revokes its jobs
/// (they checkpoint and exit; up to 30 s, or until a second signal); if the
/// scheduler refuses the worker for good (wrong token, rejected arguments)
/// it does the same and returns [`WorkerError::Refused`];
/// `ready` gets the address it serves on once it listens.
pub fn run_worker(cfg: WorkerConfig, ready: impl FnOnce(&str)) -> Result<(), WorkerError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("blox-worker")
        .enable_all()
        .build()
        .map_err(|e| WorkerError::Io(e.to_string()))?;
    rt.block_on(async move {
        let mut w = crate::worker::start(cfg).await?;
        ready(&w.address);
        let refused = tokio::select! {
            _ = signal() => None,
            why = w.refused() => Some(why),
        };
        tracing::warn!(
            "stopping: revoking the jobs here (they checkpoint; a second signal kills them)"
        );
        tokio::select! {
            _ = w.drain(Duration::from_secs(30)) => {}
            _ = signal() => tracing::warn!("killing the jobs here"),
        }
        w.shutdown();
        match refused {
            Some(why) => Err(WorkerError::Refused(why)),
            None => Ok(()),
        }
    })
}

/// A job file for `blox submit --file` (TOML).
///
/// ```toml
/// name = "resnet"        # optional
/// gpus = 2
/// command = ["python", "train.py", "--epochs", "3"]
/// batch_size = 256       # optional
/// user = "alice"         # optional
/// model = "resnet50"     # optional
/// duration_s = 3600      # optional estimate at `gpus` GPUs
/// metrics = { best_cpus_per_gpu = 6 }   # optional
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    pub name: Option<String>,
    pub gpus: u32,
    pub command: Vec<String>,
    pub batch_size: Option<u32>,
    pub user: Option<String>,
    #[serde(default)]
    pub team: Option<String>,
    pub model: Option<String>,
    pub duration_s: Option<f64>,
    #[serde(default)]
    pub metrics: HashMap<String, f64>,
    /// Submitting the same file twice with a key creates one job.
    pub idempotency_key: Option<String>,
    /// Host memory its processes may use on each node, GB, and how many
    /// processes (threads too) at once: cgroup limits where the worker has
    /// cgroups.
    #[serde(default)]
    pub memory_gb: Option<f64>,
    #[serde(default)]
    pub max_processes: Option<u32>,
    /// Part of one GPU, in thousandths (1-999, with `gpus = 1`).
    #[serde(default)]
    pub gpu_milli: Option<u32>,
}

impl JobFile {
    /// Reads a job file; errors name the file (and line, from the parser).
    pub fn read(path: &Path) -> Result<JobSubmission, CtlError> {
        let err = |message: String| CtlError::JobFile {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let f: JobFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        Ok(f.into())
    }
}

impl From<JobFile> for JobSubmission {
    fn from(f: JobFile) -> Self {
        JobSubmission {
            name: f.name.unwrap_or_default(),
            gpus: f.gpus,
            command: f.command,
            batch_size: f.batch_size,
            user: f.user,
            team: f.team,
            model: f.model,
            duration_s: f.duration_s,
            metrics: f.metrics,
            idempotency_key: f.idempotency_key.unwrap_or_default(),
            memory_gb: f.memory_gb,
            max_processes: f.max_processes,
            gpu_milli: f.gpu_milli,
        }
    }
}

/// What separates a new note from what `place` already says.
fn sep(place: &str) -> &'static str {
    if place.is_empty() {
        ""
    } else {
        " · "
    }
}

/// `blox status`'s view of a scheduler: a header, one line per job and one
/// per worker.
pub fn render_status(scheduler: &str, r: &StatusReply) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scheduler {scheduler} · {} · {} rounds",
        r.policy, r.rounds
    );
    if !r.last_error.is_empty() {
        let _ = writeln!(out, "last policy error: {}", r.last_error);
    }
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:<9} {:>4} {:>8} {:>8} {:>5}  where / reason",
        "job", "name", "status", "gpus", "progress", "JCT s", "runs"
    );
    for j in &r.jobs {
        let jct = j.jct_s.map_or_else(
            || {
                j.finished_unix_s.map_or("-".to_string(), |f| {
                    format!("{:.1}", f - j.submitted_unix_s)
                })
            },
            |v| format!("{v:.1}"),
        );
        let mut place = if !j.gpus.is_empty() {
            match j.gpu_milli {
                Some(m) => format!("{} of {}", f64::from(m) / 1000.0, j.gpus.join(",")),
                None => j.gpus.join(","),
            }
        } else if let Some(w) = j.wait.as_ref().filter(|_| j.reason.is_empty()) {
            w.reason.clone()
        } else {
            j.reason.clone()
        };
        if j.startup_s > 0.0 {
            let _ = write!(place, "{}start-up {:.1} s", sep(&place), j.startup_s);
        }
        if j.lost_work_gpu_s > 0.0 {
            let _ = write!(
                place,
                "{}lost {:.1} GPU-s since checkpoints",
                sep(&place),
                j.lost_work_gpu_s
            );
        }
        if !j.warning.is_empty() {
            let _ = write!(place, "{}warning: {}", sep(&place), j.warning);
        }
        let _ = writeln!(
            out,
            "{:<6} {:<16} {:<9} {:>4} {:>7.1}% {:>8} {:>5}  {}",
            j.id,
            j.name,
            if j.phase() == JobPhase::Cancelled {
                "cancelled"
            } else {
                j.status.as_str()
            },
            j.requested_gpus,
            100.0 * j.progress,
            jct,
            j.launches,
            place
        );
    }
    let _ = writeln!(out, "workers:");
    for w in &r.workers {
        let _ = writeln!(
            out,
            "  {:<28} {:<22} {} GPUs ({})  {}, last heartbeat {:.1} s ago",
            w.id,
            w.address,
            w.gpus.len(),
            w.gpus.first().map_or("", |g| g.name.as_str()),
            if w.alive {
                "alive"
            } else if !w.problem.is_empty() {
                w.problem.as_str()
            } else {
                "gone"
            },
            w.last_heartbeat_s_ago
        );
        if !w.containment.is_empty() {
            let _ = writeln!(out, "    launches contained by: {}", w.containment);
        }
        if w.whole_gpus_only {
            let _ = writeln!(
                out,
                "    GPUs whole only: this worker does not share GPUs (older than gpu_milli)"
            );
        }
    }
    out
}

/// Seconds since 1970 (UTC), now.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `2026-11-25T14:02:11Z` (UTC, RFC 3339) for Unix seconds `t`.
pub fn utc(t: f64) -> String {
    // humantime formats years up to 9999.
    let s = t.clamp(0.0, 253_402_300_799.0);
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs_f64(s))
        .to_string()
}

/// `12 s`, `4m05s`, `3h20m`, `2d04h`: a span of seconds, for people.
pub fn span(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// `blox status --start`: every job that has not ended with its predicted
/// start and finish (relative to `now` and in UTC), where its run time came
/// from, and why it waits.
pub fn render_start(scheduler: &str, r: &StatusReply, now: f64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scheduler {scheduler} · {} · {} rounds",
        r.policy, r.rounds
    );
    match &r.forecast {
        None => {
            let _ = writeln!(
                out,
                "no forecast yet (the first is made after a round; [forecast] enabled = false turns them off)"
            );
        }
        Some(f) => {
            let _ = writeln!(
                out,
                "forecast made {} ago in {:.2} s, {} rounds to {} ahead: {}",
                span(now - f.made_unix_s),
                f.took_s,
                f.rounds,
                span(f.reached_unix_s - f.made_unix_s),
                f.stopped
            );
            if !f.error.is_empty() {
                let _ = writeln!(out, "the last forecast failed: {}", f.error);
            }
            // Jobs it has not seen (submitted since): what it says does not
            // cover them yet.
            let unseen = r
                .jobs
                .iter()
                .filter(|j| j.prediction.is_none() && j.finished_unix_s.is_none())
                .count();
            if unseen > 0 {
                let _ = writeln!(
                    out,
                    "{unseen} of these jobs came after it: the next forecast (after the next round) includes them"
                );
            }
        }
    }
    let when = |t: Option<f64>| match t {
        Some(t) if t <= now => format!("now ({})", utc(t)),
        Some(t) => format!("in {} ({})", span(t - now), utc(t)),
        None => "unknown".to_string(),
    };
    let _ = writeln!(
        out,
        "{:<6} {:<16} {:<9} {:>4}  {:<32} {:<32} {:<13} why it waits",
        "job", "name", "status", "gpus", "start", "finish", "run time from"
    );
    for j in &r.jobs {
        let (start, finish, from) = match &j.prediction {
            None if r.forecast.is_some() => {
                ("next forecast".to_string(), String::new(), String::new())
            }
            None => ("not forecast yet".to_string(), String::new(), String::new()),
            Some(p) => (
                if j.phase() == JobPhase::Running {
                    "running".to_string()
                } else {
                    when(p.start_unix_s)
                },
                when(p.finish_unix_s),
                p.duration_from.clone(),
            ),
        };
        let why = j.wait.as_ref().map_or("", |w| w.reason.as_str());
        let _ = writeln!(
            out,
            "{:<6} {:<16} {:<9} {:>4}  {:<32} {:<32} {:<13} {}",
            j.id, j.name, j.status, j.requested_gpus, start, finish, from, why
        );
    }
    out
}
