//! The real runtime's commands: `blox scheduler`, `blox worker`,
//! `blox submit`, `blox status` and `blox cancel` (blox-runtime's scheduler,
//! worker manager and gRPC protocol).

use crate::cli::{Connect, SubmitArgs, WorkerArgs};
use crate::say;
use anyhow::{bail, Context, Result};
use blox_config::Override;
use blox_runtime::ctl::{Ctl, CtlError, JobFile};
use blox_runtime::net::{Security, TlsFiles};
use blox_runtime::proto::JobSubmission;
use blox_runtime::scheduler::{RuntimeConfig, SchedulerHandle};
use blox_runtime::worker::WorkerConfig;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The token and TLS settings of a connection (a worker adds its own
/// certificate and key).
fn security(c: &Connect, cert: Option<PathBuf>, key: Option<PathBuf>) -> Result<Security> {
    let c = &c.auth;
    let token = c
        .token_file
        .as_deref()
        .map(Security::token_from_file)
        .transpose()?;
    let tls = (c.tls_ca.is_some() || cert.is_some() || key.is_some()).then(|| TlsFiles {
        cert,
        key,
        ca: c.tls_ca.clone(),
        domain: c.tls_domain.clone(),
        client_auth: None,
    });
    Ok(Security { token, tls })
}

/// A client's token and TLS settings.
pub fn security_of(c: &Connect) -> Result<Security> {
    security(c, None, None)
}

fn ctl(c: &Connect) -> Result<Ctl> {
    Ctl::connect(&c.scheduler, &security(c, None, None)?)
        .with_context(|| format!("connecting to {}", c.scheduler))
}

/// Starts the scheduler a config describes: its policies (and policy
/// synthesis, if it has a `[synthesizer]`), its `[runtime]` settings with
/// `listen` and `state` replaced when given.
pub fn start_scheduler(
    cfg: &blox_config::Config,
    listen: Option<String>,
    state: Option<PathBuf>,
) -> Result<SchedulerHandle> {
    let (policies, selector) = super::policies_of(cfg)?;
    let mut rt = RuntimeConfig::from_config(cfg)?;
    if let Some(l) = listen {
        rt.listen = l;
    }
    if let Some(s) = state {
        rt.state = s;
    }
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim"))?;
    let forecaster = blox_sim::forecast::SimForecaster::from_config(cfg, &sim)?
        .map(|f| std::sync::Arc::new(f) as std::sync::Arc<dyn blox_forecast::Forecaster>);
    Ok(blox_runtime::scheduler::start_with(
        rt,
        policies,
        cfg.run.round_s.get(),
        blox_runtime::scheduler::Extras {
            selector,
            forecaster,
        },
    )?)
}

/// `blox scheduler`: runs until SIGINT/SIGTERM.
pub fn scheduler(
    config: &Path,
    listen: Option<String>,
    state: Option<PathBuf>,
    overrides: &[Override],
) -> Result<ExitCode> {
    let cfg = blox_sim::load_config(config, None, overrides)?;
    let synth = cfg.has_section("synthesizer");
    super::note_unused(
        &cfg,
        "scheduler",
        &[
            ("cluster", "the workers that register bring the GPUs; only [cluster.topology] is read, for their --labels"),
            ("workload", "jobs come from `blox submit`"),
            ("sweep", "`blox sweep` runs its combinations"),
            (
                if synth { "" } else { "sim" },
                "it configures simulations; here only policy synthesis's forks use it",
            ),
        ],
        &["max_time_s", "max_rounds", "track_jobs", "allow_unfinished"],
    );
    let mut rt = RuntimeConfig::from_config(&cfg)?;
    let table = state.clone().unwrap_or(rt.state.clone());
    rt.state = table.clone();
    let events = rt.events_path();
    let synthesizing = cfg.has_section("synthesizer");
    let handle = start_scheduler(&cfg, listen, state)
        .with_context(|| format!("starting the scheduler of {}", config.display()))?;
    say!(
        "blox scheduler: listening on {} ({}/{}/{}{}, {} s rounds, job table {})",
        handle.address,
        cfg.admission.policy,
        cfg.scheduling.policy,
        cfg.placement.policy,
        if synthesizing {
            ", policy synthesis on"
        } else {
            ""
        },
        cfg.run.round_s.get(),
        table.display()
    )?;
    if let Some(a) = handle.dashboard_address {
        say!("blox scheduler: dashboard at http://{a}/")?;
    }
    if let Some(a) = handle.metrics_address {
        say!("blox scheduler: Prometheus metrics at http://{a}/metrics")?;
    }
    say!(
        "blox scheduler: event log {} (blox events {} --follow)",
        events.display(),
        events.display()
    )?;
    let stop = handle.stop_flag();
    std::thread::spawn(move || {
        if blox_runtime::ctl::wait_for_signal().is_ok() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    handle.wait()?;
    eprintln!("blox scheduler: stopped; running jobs run on under their workers' leases: started again within the lease, it adopts them, and requeues those that stopped");
    Ok(ExitCode::SUCCESS)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "worker".into())
}

/// `rack=r3,block=b1` as a map (repeated `--labels` add up).
fn labels_of(args: &[String]) -> Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for kv in args
        .iter()
        .flat_map(|a| a.split(','))
        .filter(|s| !s.trim().is_empty())
    {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--labels {kv}: expected LEVEL=DOMAIN, e.g. rack=r3");
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            bail!("--labels {kv}: expected LEVEL=DOMAIN, e.g. rack=r3");
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            bail!("--labels: `{k}` given twice");
        }
    }
    Ok(out)
}

pub fn worker(a: WorkerArgs) -> Result<ExitCode> {
    let mut security = security(&a.connect, a.tls_cert.clone(), a.tls_key.clone())?;
    if let Some(ca) = &a.tls_client_ca {
        match &mut security.tls {
            Some(tls) if tls.cert.is_some() && tls.key.is_some() => {
                tls.client_auth = Some(blox_runtime::net::ClientAuth {
                    ca: ca.clone(),
                    optional: false,
                })
            }
            _ => bail!("--tls-client-ca needs the worker's own --tls-cert and --tls-key"),
        }
    }
    let listen = a
        .listen
        .parse()
        .with_context(|| format!("--listen {}: expected HOST:PORT", a.listen))?;
    for e in &a.pass_env {
        blox_runtime::process::check_pass_env(e).map_err(|m| anyhow::anyhow!("--pass-env: {m}"))?;
    }
    let mut cfg = WorkerConfig {
        scheduler: a.connect.scheduler.clone(),
        listen,
        advertise: a.advertise,
        name: a.name.unwrap_or_else(host_name),
        logical_gpus: a.gpus,
        workdir: a.workdir,
        security,
        labels: labels_of(&a.labels)?,
        job_user: a.job_user,
        allow_root_jobs: a.allow_root_jobs,
        job_uids: a.job_uids,
        gpu_slowdown: a.gpu_slowdown,
        speed_probe: a.speed_probe,
        pass_env: a.pass_env,
        cgroup: a.cgroup.as_deref().map_or(
            blox_runtime::worker::cgroup::CgroupSetting::Auto,
            blox_runtime::worker::cgroup::CgroupSetting::parse,
        ),
        memory_gb: a.memory_gb,
        max_processes: a.max_processes,
    };
    if let Some(path) = &a.config {
        blox_runtime::worker::WorkerSection::read(path)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .apply(&mut cfg);
    }
    blox_runtime::ctl::run_worker(cfg, |addr| {
        let _ = say!("blox worker: listening on {addr}");
    })?;
    Ok(ExitCode::SUCCESS)
}

fn submission(a: &SubmitArgs) -> Result<JobSubmission> {
    let mut j = match &a.file {
        Some(path) => JobFile::read(path)?,
        None => JobSubmission::default(),
    };
    if let Some(n) = &a.name {
        j.name = n.clone();
    }
    if let Some(g) = a.gpus {
        j.gpus = g;
    }
    if a.batch_size.is_some() {
        j.batch_size = a.batch_size;
    }
    if a.team.is_some() {
        j.team = a.team.clone();
    }
    if a.user.is_some() {
        j.user = a.user.clone();
    }
    if a.model.is_some() {
        j.model = a.model.clone();
    }
    if let Some(d) = a.duration_s {
        if !(d > 0.0 && d.is_finite()) {
            bail!("--duration-s {d}: the expected run time must be a positive number of seconds");
        }
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
    if let Some(m) = a.gpu_milli {
        if !(1..1000).contains(&m) || a.gpus.is_some_and(|g| g != 1) {
            bail!(
                "--gpu-milli {m}: a share is 1-999 thousandths of one GPU (with --gpus 1 or none)"
            );
        }
        if a.gpus.is_none() && j.gpus > 1 {
            bail!(
                "--gpu-milli {m}: the job file asks for {} GPUs; a share is of one GPU (give --gpus 1)",
                j.gpus
            );
        }
        j.gpu_milli = Some(m);
        j.gpus = 1;
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

pub fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let j = submission(&a)?;
    let id = ctl(&a.connect)?.submit(j).map_err(rpc("submit"))?;
    say!("submitted job {id}")?;
    Ok(ExitCode::SUCCESS)
}

fn rpc(what: &'static str) -> impl Fn(CtlError) -> anyhow::Error {
    move |e| anyhow::anyhow!("{what}: {e}")
}

pub fn status(connect: &Connect, jobs: &[u64], start: bool) -> Result<ExitCode> {
    let mut c = ctl(connect)?;
    let text = if start {
        let r = c.status_unended(jobs).map_err(rpc("status"))?;
        blox_runtime::ctl::render_start(&connect.scheduler, &r, blox_runtime::ctl::unix_now())
    } else {
        let r = c.status(jobs).map_err(rpc("status"))?;
        blox_runtime::ctl::render_status(&connect.scheduler, &r)
    };
    say!("{}", text.trim_end())?;
    Ok(ExitCode::SUCCESS)
}

pub fn cancel(connect: &Connect, job: u64) -> Result<ExitCode> {
    ctl(connect)?.cancel(job).map_err(rpc("cancel"))?;
    say!("cancelled job {job}")?;
    Ok(ExitCode::SUCCESS)
}
