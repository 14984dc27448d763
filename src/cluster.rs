//! The real runtime's commands: `blox scheduler`, `blox worker`,
//! `blox submit`, `blox status` and `blox cancel` (blox-runtime's scheduler,
//! worker manager and gRPC protocol).

use anyhow::{bail, Context, Result};
use blox_runtime::ctl::{Ctl, CtlError};
use blox_runtime::net::{Security, TlsFiles};
use blox_runtime::proto::JobSubmission;
use blox_runtime::scheduler::RuntimeConfig;
use blox_runtime::worker::WorkerConfig;
use clap::Args;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How to reach and authenticate with a scheduler (clients and workers).
#[derive(Args, Clone, Debug)]
pub struct Connect {
    /// The scheduler's address.
    #[arg(long, env = "BLOX_SCHEDULER", default_value = "127.0.0.1:50051")]
    pub scheduler: String,
    /// File holding the cluster's shared token.
    #[arg(long, env = "BLOX_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Use TLS, trusting this certificate authority (PEM).
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Name to expect in the peer's certificate (default: the address's host).
    #[arg(long)]
    pub tls_domain: Option<String>,
}

impl Connect {
    fn security(&self, cert: Option<PathBuf>, key: Option<PathBuf>) -> Result<Security> {
        let token = self
            .token_file
            .as_deref()
            .map(Security::token_from_file)
            .transpose()?;
        let tls = (self.tls_ca.is_some() || cert.is_some() || key.is_some()).then(|| TlsFiles {
            cert,
            key,
            ca: self.tls_ca.clone(),
            domain: self.tls_domain.clone(),
        });
        Ok(Security { token, tls })
    }

    fn ctl(&self) -> Result<Ctl> {
        Ctl::connect(&self.scheduler, &self.security(None, None)?)
            .with_context(|| format!("connecting to {}", self.scheduler))
    }
}

/// `blox scheduler`: runs until SIGINT/SIGTERM.
pub fn scheduler(
    config: &Path,
    listen: Option<String>,
    state: Option<PathBuf>,
    set: &[(String, String)],
) -> Result<()> {
    let cfg = blox_sim::load_config(config, None, set)?;
    let mut policies =
        blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
    // Policy synthesis ([synthesizer]) runs here as in `blox sim`: it forks
    // the live state into simulations of every candidate.
    let sim: blox_sim::SimConfig = cfg.section("sim").parse()?;
    let selector = blox_sim::synth::Synthesizer::from_config(&cfg, &sim)?.map(|s| {
        use blox_sim::synth::module_label;
        policies.names = (
            module_label(&cfg.admission),
            module_label(&cfg.scheduling),
            module_label(&cfg.placement),
        );
        Box::new(s) as Box<dyn blox_core::PolicySelector>
    });
    let mut rt = RuntimeConfig::from_config(&cfg)?;
    if let Some(l) = listen {
        rt.listen = l;
    }
    if let Some(s) = state {
        rt.state = s;
    }
    let state = rt.state.clone();
    let label = policies.label();
    let synthesizing = selector.is_some();
    let handle =
        blox_runtime::scheduler::start_with_selector(rt, policies, cfg.run.round_s, selector)
            .with_context(|| format!("starting the scheduler of {}", config.display()))?;
    println!(
        "blox scheduler: listening on {} ({label}{}, {} s rounds, job table {})",
        handle.address,
        if synthesizing {
            ", policy synthesis on"
        } else {
            ""
        },
        cfg.run.round_s,
        state.display()
    );
    std::io::stdout().flush().ok();
    let stop = handle.stop_flag();
    std::thread::spawn(move || {
        if blox_runtime::ctl::wait_for_signal().is_ok() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    handle.wait()?;
    eprintln!("blox scheduler: stopped; running jobs are requeued when it starts again");
    Ok(())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "worker".into())
}

/// Options of `blox worker`.
#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// N logical GPUs instead of the ones NVML finds (also where NVML is absent).
    #[arg(long)]
    pub gpus: Option<u32>,
    /// Where the worker's own service listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// The address the scheduler should use to reach this worker (default: --listen).
    #[arg(long)]
    pub advertise: Option<String>,
    /// The node's name (default: the host name).
    #[arg(long)]
    pub name: Option<String>,
    /// Control directories and (without a shared checkpoint dir) checkpoints.
    #[arg(long, default_value = "blox-worker")]
    pub workdir: PathBuf,
    /// This worker's TLS certificate and key (PEM).
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
}

pub fn worker(a: WorkerArgs) -> Result<()> {
    let security = a.connect.security(a.tls_cert.clone(), a.tls_key.clone())?;
    let listen = a
        .listen
        .parse()
        .with_context(|| format!("--listen {}: expected HOST:PORT", a.listen))?;
    let cfg = WorkerConfig {
        scheduler: a.connect.scheduler.clone(),
        listen,
        advertise: a.advertise,
        name: a.name.unwrap_or_else(host_name),
        logical_gpus: a.gpus,
        workdir: a.workdir,
        security,
    };
    blox_runtime::ctl::run_worker(cfg, |addr| {
        println!("blox worker: listening on {addr}");
        std::io::stdout().flush().ok();
    })?;
    Ok(())
}

/// A job file for `blox submit --file`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    name: Option<String>,
    gpus: u32,
    command: Vec<String>,
    batch_size: Option<u32>,
    user: Option<String>,
    model: Option<String>,
    duration_s: Option<f64>,
    #[serde(default)]
    metrics: HashMap<String, f64>,
}

/// Options of `blox submit`.
#[derive(Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub connect: Connect,
    /// The job as a TOML file (name, gpus, command, batch_size, user, model,
    /// duration_s, metrics); flags override its fields.
    #[arg(long)]
    pub file: Option<PathBuf>,
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub gpus: Option<u32>,
    #[arg(long)]
    pub batch_size: Option<u32>,
    #[arg(long)]
    pub user: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    /// Expected run time at --gpus GPUs (for SRTF-like policies).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// A metric known up front: `--metric best_cpus_per_gpu=6`.
    #[arg(long = "metric", value_name = "KEY=VALUE")]
    pub metrics: Vec<String>,
    /// The program and its arguments (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

fn submission(a: &SubmitArgs) -> Result<JobSubmission> {
    let mut j = JobSubmission::default();
    if let Some(path) = &a.file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let f: JobFile = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
        j.name = f.name.unwrap_or_default();
        j.gpus = f.gpus;
        j.command = f.command;
        j.batch_size = f.batch_size;
        j.user = f.user;
        j.model = f.model;
        j.duration_s = f.duration_s;
        j.metrics = f.metrics;
    }
    if let Some(n) = &a.name {
        j.name = n.clone();
    }
    if let Some(g) = a.gpus {
        j.gpus = g;
    }
    if a.batch_size.is_some() {
        j.batch_size = a.batch_size;
    }
    if a.user.is_some() {
        j.user = a.user.clone();
    }
    if a.model.is_some() {
        j.model = a.model.clone();
    }
    if a.duration_s.is_some() {
        j.duration_s = a.duration_s;
    }
    for m in &a.metrics {
        let (k, v) = m
            .split_once('=')
            .with_context(|| format!("--metric {m}: expected KEY=VALUE"))?;
        let v: f64 = v
            .trim()
            .parse()
            .with_context(|| format!("--metric {m}: the value is not a number"))?;
        j.metrics.insert(k.trim().to_string(), v);
    }
    if !a.command.is_empty() {
        j.command = a.command.clone();
    }
    if j.command.is_empty() {
        bail!("no command: give it after `--` (blox submit --gpus 1 -- train --epochs 3) or in --file");
    }
    if j.gpus == 0 && a.file.is_none() && a.gpus.is_none() {
        j.gpus = 1;
    }
    Ok(j)
}

pub fn submit(a: SubmitArgs) -> Result<()> {
    let j = submission(&a)?;
    let id = a.connect.ctl()?.submit(j).map_err(rpc("submit"))?;
    println!("submitted job {id}");
    Ok(())
}

fn rpc(what: &'static str) -> impl Fn(CtlError) -> anyhow::Error {
    move |e| anyhow::anyhow!("{what}: {e}")
}

pub fn status(connect: &Connect, jobs: &[u64]) -> Result<()> {
    let r = connect.ctl()?.status(jobs).map_err(rpc("status"))?;
    println!(
        "scheduler {} · {} · {} rounds",
        connect.scheduler, r.policy, r.rounds
    );
    println!(
        "{:<6} {:<16} {:<9} {:>4} {:>8} {:>8} {:>5}  where / reason",
        "job", "name", "status", "gpus", "progress", "JCT s", "runs"
    );
    for j in &r.jobs {
        let jct = j.finished_unix_s.map_or("-".to_string(), |f| {
            format!("{:.1}", f - j.submitted_unix_s)
        });
        let place = if !j.gpus.is_empty() {
            j.gpus.join(",")
        } else {
            j.reason.clone()
        };
        println!(
            "{:<6} {:<16} {:<9} {:>4} {:>7.1}% {:>8} {:>5}  {}",
            j.id,
            j.name,
            j.status,
            j.requested_gpus,
            100.0 * j.progress,
            jct,
            j.launches,
            place
        );
    }
    println!("workers:");
    for w in &r.workers {
        println!(
            "  {:<28} {:<22} {} GPUs ({})  {}, last heartbeat {:.1} s ago",
            w.id,
            w.address,
            w.gpus.len(),
            w.gpus.first().map_or("", |g| g.name.as_str()),
            if w.alive { "alive" } else { "gone" },
            w.last_heartbeat_s_ago
        );
    }
    Ok(())
}

pub fn cancel(connect: &Connect, job: u64) -> Result<()> {
    connect.ctl()?.cancel(job).map_err(rpc("cancel"))?;
    println!("cancelled job {job}");
    Ok(())
}
