//! What the cluster tests share: a scheduler with in-process workers on
//! loopback, stopped (with every job process) when dropped.
#![allow(dead_code)]

// The built-in policies, registered by name.
use blox_core::*;
use blox_policies as _;
use blox_runtime::ctl::Ctl;
use blox_runtime::net::Security;
use blox_runtime::proto::*;
use blox_runtime::scheduler::{RuntimeConfig, SchedulerHandle};
use blox_runtime::worker::{WorkerConfig, WorkerHandle};
use blox_sim::workload::{SimJob, WorkModel};
use blox_sim::{SimConfig, Simulation};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// One HTTP/1.1 GET of `path` on `addr` (with `token` as a bearer token);
/// returns the status line and the body.
pub fn http_get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(s, "GET {path} HTTP/1.1\r\nHost: blox\r\n{auth}\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

pub const TOY: &str = env!("CARGO_BIN_EXE_blox-toy-job");

pub fn policies(scheduling: &str) -> Policies {
    registry::build_named("accept-all", scheduling, "consolidated").unwrap()
}

/// The live scheduler's round period in these tests. Most of them wait on
/// rounds (a submission seen, a preemption decided, a queue drained), so a
/// short round keeps them short: the suite takes about 100 s at 0.5 s, 86 s
/// at 0.25 s and 135 s at 1 s (4 tests at a time, 2 cores). Beside two CPU
/// hogs, 0.25 s rounds once starved workers' heartbeats past their timeout
/// (three tests failed in one run of five); 0.5 s rounds passed.
pub const ROUND_S: f64 = 0.5;

/// With `BLOX_TEST_LOG` set (a filter: `warn`, `blox_runtime=debug`), the
/// schedulers' and workers' logs go to the output of the test that started
/// them, shown when it fails (the threads a test starts write to its
/// captured output).
pub fn test_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("BLOX_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
}

pub fn runtime_config(dir: &Path) -> RuntimeConfig {
    RuntimeConfig {
        listen: "127.0.0.1:0".into(),
        state: dir.join("state.redb"),
        checkpoint_dir: Some(dir.join("checkpoints")),
        heartbeat_s: 0.2,
        worker_timeout_s: 3.0,
        grace_s: 3.0,
        ..RuntimeConfig::default()
    }
}

/// A scheduler and its workers; dropping it stops all of them and kills
/// every job process.
pub struct Cluster {
    pub workers: Vec<WorkerHandle>,
    pub rt: tokio::runtime::Runtime,
    pub sched: Option<SchedulerHandle>,
    /// The users' credential (clients).
    pub security: Security,
    /// The workers' credential.
    pub worker_security: Security,
}

impl Cluster {
    pub fn start(dir: &Path, cfg: RuntimeConfig, scheduling: &str, workers: usize) -> Cluster {
        Self::start_with(dir, cfg, scheduling, workers, Default::default())
    }

    /// [`Cluster::start`] with a policy selector or forecaster.
    pub fn start_with(
        dir: &Path,
        cfg: RuntimeConfig,
        scheduling: &str,
        workers: usize,
        extras: blox_runtime::scheduler::Extras,
    ) -> Cluster {
        Self::start_built(dir, cfg, policies(scheduling), workers, extras)
    }

    /// [`Cluster::start_with`] with policies built by the caller (from a
    /// config with parameters).
    pub fn start_built(
        dir: &Path,
        cfg: RuntimeConfig,
        policies: Policies,
        workers: usize,
        extras: blox_runtime::scheduler::Extras,
    ) -> Cluster {
        let security = cfg.security().unwrap();
        Self::start_as(dir, cfg, policies, workers, extras, security)
    }

    /// [`Cluster::start_built`], its clients presenting `users` (a tenant's
    /// token where the config has a tokens file).
    pub fn start_as(
        dir: &Path,
        cfg: RuntimeConfig,
        policies: Policies,
        workers: usize,
        extras: blox_runtime::scheduler::Extras,
        security: Security,
    ) -> Cluster {
        Self::start_timed(dir, cfg, policies, workers, extras, security, ROUND_S)
    }

    /// [`Cluster::start`] on 1 s rounds, those of the simulations that the
    /// same-loop tests compare a live run with.
    pub fn start_on_1s_rounds(dir: &Path, scheduling: &str, workers: usize) -> Cluster {
        let cfg = runtime_config(dir);
        let security = cfg.security().unwrap();
        let policies = policies(scheduling);
        Self::start_timed(
            dir,
            cfg,
            policies,
            workers,
            Default::default(),
            security,
            1.0,
        )
    }

    /// [`Cluster::start_as`] with rounds of `round_s` seconds: the tests
    /// that compare a live run with a simulation of the same trace use
    /// the simulation's 1 s rounds.
    pub fn start_timed(
        dir: &Path,
        cfg: RuntimeConfig,
        policies: Policies,
        workers: usize,
        extras: blox_runtime::scheduler::Extras,
        security: Security,
        round_s: f64,
    ) -> Cluster {
        let worker_security = cfg.worker_security().unwrap();
        test_log();
        let sched = blox_runtime::scheduler::start_with(cfg, policies, round_s, extras).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut c = Cluster {
            workers: Vec::new(),
            rt,
            sched: Some(sched),
            security,
            worker_security,
        };
        for i in 0..workers {
            c.add_worker(dir, &format!("w{i}"));
        }
        c.wait_for_gpus(2 * workers);
        c
    }

    pub fn addr(&self) -> String {
        self.sched.as_ref().unwrap().address.to_string()
    }

    pub fn add_worker(&mut self, dir: &Path, name: &str) {
        self.add_labelled_worker(dir, name, &[]);
    }

    /// The config of a worker of 2 logical GPUs named `name` (its workdir
    /// under `dir`), listening on any free loopback port.
    pub fn worker_config(&self, dir: &Path, name: &str) -> WorkerConfig {
        WorkerConfig {
            scheduler: self.addr(),
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name: name.into(),
            logical_gpus: Some(2),
            workdir: dir.join(name),
            security: self.worker_security.clone(),
            labels: Default::default(),
            job_user: None,
            allow_root_jobs: true,
            job_uids: None,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            ..WorkerConfig::default()
        }
    }

    /// A worker of 2 logical GPUs that registers with `labels`.
    pub fn add_labelled_worker(&mut self, dir: &Path, name: &str, labels: &[(&str, &str)]) {
        let mut cfg = self.worker_config(dir, name);
        cfg.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let w = self.rt.block_on(blox_runtime::worker::start(cfg)).unwrap();
        self.workers.push(w);
    }

    pub fn ctl(&self) -> Ctl {
        Ctl::connect(&self.addr(), &self.security).unwrap()
    }

    /// Waits until the workers' GPUs joined the loop's cluster.
    pub fn wait_for_gpus(&self, n: usize) {
        let mut ctl = self.ctl();
        let t = Instant::now();
        loop {
            let s = ctl.status(&[]).unwrap();
            // A worker has its node number once the round that added its
            // node began; that round's cluster changes come before it takes
            // new submissions, so a job submitted from now on sees the GPUs.
            let gpus: usize = s
                .workers
                .iter()
                .filter(|w| w.alive && w.node.is_some())
                .map(|w| w.gpus.len())
                .sum();
            if gpus >= n {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "workers did not register"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `n` whole rounds ran after this call (the round under way
    /// when it is made does not count): what was sent before it has reached
    /// the loop and the status view by then, on a slow machine too.
    pub fn wait_rounds(&self, n: u64) {
        let mut ctl = self.ctl();
        let from = ctl.status(&[]).unwrap().rounds;
        let t = Instant::now();
        while ctl.status(&[]).unwrap().rounds < from + n + 1 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{n} rounds did not run in 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn started(&self) -> Instant {
        self.sched.as_ref().unwrap().started
    }

    /// Polls until every listed job ended; returns their records.
    pub fn wait_all(&self, ids: &[u64], limit: Duration) -> BTreeMap<u64, JobInfo> {
        let mut ctl = self.ctl();
        let t = Instant::now();
        loop {
            let s = ctl.status(ids).unwrap();
            if s.jobs
                .iter()
                .all(|j| matches!(j.status.as_str(), "finished" | "failed" | "rejected"))
            {
                return s.jobs.into_iter().map(|j| (j.id, j)).collect();
            }
            assert!(
                t.elapsed() < limit,
                "jobs did not end: {:?}",
                s.jobs.iter().map(|j| (j.id, &j.status)).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for w in &mut self.workers {
            w.shutdown();
        }
        if let Some(s) = self.sched.take() {
            let _ = s.shutdown();
        }
    }
}

pub fn toy(dur: f64, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        TOY.to_string(),
        "--duration-s".into(),
        dur.to_string(),
        "--iteration-s".into(),
        "0.02".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// A toy job of `secs` seconds that checkpoints every 5 iterations and
/// writes its launches to `journal` (`blox_harness::soak::journal`).
pub fn journaled_toy(secs: f64, journal: &Path) -> Vec<String> {
    let j = journal.display().to_string();
    toy(secs, &["--checkpoint-every", "5", "--journal", j.as_str()])
}

/// Waits until every job in `ids` runs and has reported its first
/// progress: a blocker holding GPUs, a victim with a live launch.
pub fn wait_started(c: &Cluster, ids: &[u64]) {
    wait_progress(c, ids, 0.0);
}

/// Waits until every job in `ids` runs and has done a tenth of its work.
pub fn wait_running(c: &Cluster, ids: &[u64]) {
    wait_progress(c, ids, 0.1);
}

/// Waits (30 s at most) until every job in `ids` runs with a share of its
/// work done over `above`.
fn wait_progress(c: &Cluster, ids: &[u64], above: f64) {
    let mut ctl = c.ctl();
    let t = Instant::now();
    loop {
        let s = ctl.status(ids).unwrap();
        if s.jobs
            .iter()
            .all(|j| j.status == "running" && j.progress > above)
        {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", s.jobs);
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn job(name: &str, gpus: u32, command: Vec<String>, duration_s: Option<f64>) -> JobSubmission {
    JobSubmission {
        name: name.into(),
        command,
        gpus,
        duration_s,
        ..Default::default()
    }
}

/// (arrival s, GPUs, duration s)
pub type Trace = Vec<(f64, u32, f64)>;

/// Simulated JCTs of `trace` (by position) under `scheduling` with
/// consolidated placement, 1 s rounds.
pub fn run_sim(scheduling: &str, trace: &Trace, cluster: ClusterState) -> Vec<f64> {
    run_sim_with_startup(scheduling, trace, cluster, &[])
}

/// [`run_sim`], job `i` spending `startup[i]` seconds (0 if absent) starting
/// at each launch.
pub fn run_sim_with_startup(
    scheduling: &str,
    trace: &Trace,
    cluster: ClusterState,
    startup: &[f64],
) -> Vec<f64> {
    let sim = simulation(scheduling, trace, cluster, startup);
    let r = sim.run_to_end().unwrap();
    let mut by: Vec<(u64, f64)> = r
        .jobs
        .iter()
        .map(|j| (j.job_id, j.jct_s.unwrap()))
        .collect();
    by.sort_by_key(|x| x.0);
    by.into_iter().map(|x| x.1).collect()
}

/// [`run_sim`], writing the loop's decisions to `events` (job `i` named
/// `j{i}`, as the cluster tests submit it).
pub fn run_sim_logging_events(
    scheduling: &str,
    trace: &Trace,
    cluster: ClusterState,
    events: &Path,
) {
    let mut sim = simulation(scheduling, trace, cluster, &[]);
    sim.log_events(events).unwrap();
    sim.run_to_end().unwrap();
}

/// The simulation of `trace`: 1 s rounds, job `i` named `j{i}`.
fn simulation(
    scheduling: &str,
    trace: &Trace,
    cluster: ClusterState,
    startup: &[f64],
) -> Simulation {
    let jobs = trace
        .iter()
        .enumerate()
        .map(|(i, &(a, g, d))| {
            let mut spec = JobSpec::new(i as u64, a, g).with_duration(d);
            spec.name = format!("j{i}");
            SimJob {
                startup_s: startup.get(i).copied(),
                spec,
                work: WorkModel::Duration { duration_s: d },
                converge_at: None,
            }
        })
        .collect();
    let run = RunConfig {
        round_s: blox_core::config::Positive::of(1.0),
        ..RunConfig::default()
    };
    Simulation::new(
        policies(scheduling),
        cluster,
        run,
        SimConfig::default(),
        jobs,
    )
    .unwrap()
}

/// The sim-vs-real trace of the local and gRPC tests (job ids are
/// positions): 6 jobs on 2 × 2 GPUs, so LAS preempts and resumes. Durations
/// end mid-round: a job ending exactly on a round boundary ends a few ms late
/// for real, which can flip that boundary's decision.
pub fn preemption_trace() -> Trace {
    vec![
        (0.0, 2, 4.4),
        (0.0, 1, 2.7),
        (0.5, 1, 4.6),
        (1.5, 2, 1.6),
        (2.5, 1, 2.3),
        (3.5, 2, 2.8),
    ]
}

/// Job `job`'s directory under `base` (a worker's `jobs/` or the shared
/// checkpoint directory): under the job table's identity
/// (`base/c<16 hex>/<job>`), where every test's fresh table puts it.
pub fn keyed_dir(base: &Path, job: u64) -> std::path::PathBuf {
    let keyed = std::fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .find_map(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            (n.len() == 17 && n.starts_with('c')).then(|| e.path())
        });
    match keyed {
        Some(k) => k.join(job.to_string()),
        None => base.join(job.to_string()),
    }
}

/// A worker's directory of job `job` (its launches' `launch-<n>`).
pub fn job_dir(worker_dir: &Path, job: u64) -> std::path::PathBuf {
    keyed_dir(&worker_dir.join("jobs"), job)
}
