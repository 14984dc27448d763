//! Starting a soak's cluster: its folder, tokens and configs, the
//! scheduler, and each worker behind a proxy a cut closes both ways.

use super::faults::{self, Cluster};
use super::isolation::{self, Isolation};
use super::ports::reserve_port;
use super::procs::{raise_fd_limit, Proc};
use super::proxy::CutProxy;
use super::{err, teams, SoakConfig, SoakError};
use blox_runtime::net::Security;
use blox_runtime::proto::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A soak's cluster, up: every worker's GPUs registered.
pub(super) struct Started {
    /// The soak's folder (absolute).
    pub dir: PathBuf,
    /// How jobs are run apart from the workers.
    pub iso: Isolation,
    /// Root-owned decoys the attackers aim the worker at.
    #[cfg(unix)]
    pub decoys: Option<blox_runtime::toy::node_attack::Decoys>,
    /// The journal every toy job writes its runs to.
    pub journal_file: PathBuf,
    /// The clients' runtime.
    pub rt: tokio::runtime::Runtime,
    /// When the scheduler was started.
    pub start: Instant,
    /// The scheduler's and workers' processes.
    pub cluster: Arc<Mutex<Cluster>>,
    /// Each worker's proxies (towards the scheduler, towards the worker).
    pub proxies: Vec<(CutProxy, CutProxy)>,
    /// The users' credentials.
    pub users: Security,
    /// The scheduler's address.
    pub addr: String,
    /// GPUs over all workers.
    pub total_gpus: u32,
}

/// Prepares the folder and starts the scheduler and workers; returns once
/// every worker's GPUs are registered.
pub(super) fn start(
    cfg: &SoakConfig,
    progress: &mut dyn FnMut(String),
) -> Result<Started, SoakError> {
    for (what, p) in [("blox", &cfg.blox), ("blox-toy-job", &cfg.toy)] {
        if !p.is_file() {
            return Err(err(format!("the {what} binary is not at {}", p.display())));
        }
    }
    if cfg.workers == 0 || cfg.gpus_per_worker < 8 || cfg.jobs == 0 || cfg.clients == 0 {
        return Err(err(
            "needs at least 1 job, 1 client and 1 worker of at least 8 GPUs (the widest job)",
        ));
    }
    raise_fd_limit();
    let Folder {
        dir,
        iso,
        #[cfg(unix)]
        decoys,
        journal_file,
        clock,
    } = prepare_folder(cfg)?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| err(format!("{name}: {e}")))
    };
    // Every port is reserved before any process starts and released just
    // before its process binds it (see `ports`).
    let mut sched_port = reserve_port().map_err(err)?;
    let sched_addr = sched_port.addr();
    let mut worker_ports = (0..cfg.workers)
        .map(|_| reserve_port())
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    write("scheduler.toml", &scheduler_toml(cfg, sched_addr, &iso))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(err)?;
    let start = Instant::now();
    sched_port.release();
    let scheduler_env = clock
        .as_ref()
        .map(|(file, lib)| faults::faketime_env(lib, file))
        .unwrap_or_default();
    let scheduler = Proc::spawn_with_env(
        &cfg.blox,
        &[
            "scheduler".into(),
            "--config".into(),
            dir.join("scheduler.toml").display().to_string(),
            "--log".into(),
            "info".into(),
        ],
        &scheduler_env,
        &dir.join("scheduler.log"),
    )?;
    // Each worker reaches the scheduler, and is reached, through a proxy
    // of its own that a cut closes both ways.
    let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let mut proxies = Vec::new();
    let mut workers = Vec::new();
    for (i, port) in worker_ports.iter_mut().enumerate() {
        let listen = port.addr();
        let (up, down) = rt
            .block_on(async {
                Ok::<_, std::io::Error>((
                    CutProxy::start(any, sched_addr).await?,
                    CutProxy::start(any, listen).await?,
                ))
            })
            .map_err(err)?;
        let name = format!("w{i}");
        let args = worker_args(cfg, i, &dir, &iso, (up.addr, listen, down.addr));
        port.release();
        workers.push(Proc::spawn(
            &cfg.blox,
            &args,
            &dir.join(format!("{name}.log")),
        )?);
        proxies.push((up, down));
    }
    let cluster = Arc::new(Mutex::new(Cluster {
        scheduler,
        workers,
        blox: cfg.blox.clone(),
        state: dir.join("state.redb"),
        clock: clock.map(|(file, _)| file),
    }));
    let users = Security {
        token: Some(Security::token_from_file(&dir.join("user-token")).map_err(err)?),
        tls: None,
    };
    let addr = sched_addr.to_string();
    // Wait for every worker's GPUs.
    let total_gpus = cfg.workers as u32 * cfg.gpus_per_worker;
    rt.block_on(wait_for_gpus(&users, &addr, total_gpus, &cluster))?;
    progress(format!(
        "soak: scheduler and {} workers × {} GPUs up in {:.1} s",
        cfg.workers,
        cfg.gpus_per_worker,
        start.elapsed().as_secs_f64()
    ));
    Ok(Started {
        dir,
        iso,
        #[cfg(unix)]
        decoys,
        journal_file,
        rt,
        start,
        cluster,
        proxies,
        users,
        addr,
        total_gpus,
    })
}

/// A soak's folder, ready: tokens written, isolation prepared.
struct Folder {
    dir: PathBuf,
    iso: Isolation,
    #[cfg(unix)]
    decoys: Option<blox_runtime::toy::node_attack::Decoys>,
    journal_file: PathBuf,
    /// The scheduler's clock file and libfaketime, for clock steps.
    clock: Option<(PathBuf, PathBuf)>,
}

/// Empties (or makes) the soak's folder and writes what the processes read.
fn prepare_folder(cfg: &SoakConfig) -> Result<Folder, SoakError> {
    let dir = &cfg.dir;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let dir = std::path::absolute(dir).map_err(err)?;
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| err(format!("{name}: {e}")))
    };
    let secret = |name: &str, text: &str| {
        blox_runtime::net::write_private(&dir.join(name), text)
            .map_err(|e| err(format!("{name}: {e}")))
    };
    secret("user-token", &format!("soak-user-{}\n", cfg.seed))?;
    secret("worker-token", &format!("soak-worker-{}\n", cfg.seed))?;
    let journal_file = dir.join("journal");
    let iso = isolation::prepare(&dir, &cfg.toy, &journal_file)?;
    // Root-owned decoys the attackers aim the worker at (checked at the end).
    #[cfg(unix)]
    let decoys = if iso.attackers {
        Some(
            blox_runtime::toy::node_attack::Decoys::plant(&dir)
                .map_err(|e| err(format!("decoys: {e}")))?,
        )
    } else {
        None
    };
    // The scheduler's wall clock, for clock steps (libfaketime).
    let clock = match (cfg.clock_steps, faults::libfaketime()) {
        (0, _) | (_, None) => None,
        (_, Some(lib)) => {
            write("clock", "+0\n")?;
            Some((dir.join("clock"), lib))
        }
    };
    Ok(Folder {
        dir,
        iso,
        #[cfg(unix)]
        decoys,
        journal_file,
        clock,
    })
}

/// The scheduler's config. Short timeouts so faults resolve in seconds:
/// lease 2 s, fence grace 1.2 s, declared gone after 4 s.
fn scheduler_toml(cfg: &SoakConfig, sched_addr: SocketAddr, iso: &Isolation) -> String {
    format!(
        r#"[run]
round_s = 1.0
min_run_s = 1.0

{policies}
[runtime]
listen = "{sched_addr}"
state = "state.redb"
checkpoint_dir = "checkpoints"
token_file = "user-token"
worker_token_file = "worker-token"
grace_s = 2
max_retries = 3
heartbeat_s = 0.5
worker_timeout_s = 4
{uids}"#,
        uids = iso.runtime_lines,
        policies = if cfg.teams {
            teams::sections(cfg)
        } else {
            format!(
                "[scheduling]\npolicy = \"{}\"\n\n[placement]\npolicy = \"consolidated\"\n",
                cfg.policy
            )
        }
    )
}

/// Worker `i`'s arguments; `(up, listen, down)`: its proxy towards the
/// scheduler, where it listens, and its proxy towards it.
fn worker_args(
    cfg: &SoakConfig,
    i: usize,
    dir: &Path,
    iso: &Isolation,
    (up, listen, down): (SocketAddr, SocketAddr, SocketAddr),
) -> Vec<String> {
    let name = format!("w{i}");
    let mut args: Vec<String> = [
        "worker",
        "--scheduler",
        &up.to_string(),
        "--token-file",
        &dir.join("worker-token").display().to_string(),
        "--gpus",
        &cfg.gpus_per_worker.to_string(),
        "--listen",
        &listen.to_string(),
        "--advertise",
        &down.to_string(),
        "--name",
        &name,
        "--workdir",
        &dir.join(&name).display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(iso.worker_args.iter().cloned());
    if cfg.teams {
        args.extend(["--labels".to_string(), teams::labels(i)]);
    }
    args
}

async fn wait_for_gpus(
    users: &Security,
    addr: &str,
    gpus: u32,
    cluster: &Arc<Mutex<Cluster>>,
) -> Result<(), SoakError> {
    let mut client = users.scheduler_client(addr).map_err(err)?;
    let t = Instant::now();
    loop {
        {
            let mut c = cluster.lock().expect("not poisoned");
            c.scheduler.check_alive("the scheduler")?;
            for (i, w) in c.workers.iter_mut().enumerate() {
                w.check_alive(&format!("worker w{i}"))?;
            }
        }
        if let Ok(s) = client
            .status(StatusRequest {
                limit: 1,
                ..Default::default()
            })
            .await
        {
            let s = s.into_inner();
            let have: usize = s
                .workers
                .iter()
                .filter(|w| w.alive)
                .map(|w| w.gpus.len())
                .sum();
            if have as u32 >= gpus && s.rounds >= 2 {
                return Ok(());
            }
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(err("the workers did not register within 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
