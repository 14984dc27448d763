//! Blocking helpers for command-line tools: submit, inspect and cancel jobs
//! on a scheduler, run a worker until a signal, wait for a signal.

use crate::net::{NetError, SchedulerClient, Security};
use crate::proto::*;
use crate::worker::{WorkerConfig, WorkerError};
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

    pub fn status(&mut self, job_ids: &[u64]) -> Result<StatusReply, CtlError> {
        let r = self
            .rt
            .block_on(self.client.status(StatusRequest {
                job_ids: job_ids.to_vec(),
            }))
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
/// (they checkpoint and exit; up to 30 s, or until a second signal);
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
        signal().await;
        tracing::warn!(
            "stopping: revoking the jobs here (they checkpoint; a second signal kills them)"
        );
        tokio::select! {
            _ = w.drain(Duration::from_secs(30)) => {}
            _ = signal() => tracing::warn!("killing the jobs here"),
        }
        w.shutdown();
        Ok(())
    })
}
