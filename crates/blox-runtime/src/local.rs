//! A real backend on one machine: job processes on local (or logical) GPUs,
//! wall-clock rounds, leases revoked through the job's control directory
//! (`blox-client`). It implements every mechanism trait of the round loop, so
//! `blox_core::RoundLoop` drives real processes with the same policies and the
//! same code as in simulation.
//!
//! What a launch does: a control directory `WORKDIR/jobs/<id>/launch-<n>/`
//! (the job's `stdout`, `stderr`, `metrics` log, and the `revoked`, `done`,
//! `batch_size` files), a checkpoint directory `WORKDIR/jobs/<id>/checkpoint/`
//! kept across launches, and the job's argv run directly (no shell) with the
//! environment of [`blox_client::env`]. A waiter thread per process records the
//! exit time to the millisecond.
//!
//! With `process_per_gpu`, a job on k GPUs runs as k processes (ranks 0..k−1,
//! one GPU each, output in `stdout.rank<r>`/`stderr.rank<r>`) sharing the
//! control directory; a failing rank takes the others down.
//!
//! Preemption writes `revoked`; the job checkpoints and exits at its next
//! iteration boundary, or is killed after `grace_s`. A process that exits
//! non-zero, or without finishing, is retried up to `max_retries` times (from
//! its last checkpoint), then the job fails with its exit status.

use blox_client::env;
use blox_core::*;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Settings of the local backend.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Where control and checkpoint directories go.
    pub workdir: PathBuf,
    /// Seconds a revoked job may take to checkpoint and exit before it is killed.
    pub grace_s: f64,
    /// Times a crashed process is restarted before the job fails.
    pub max_retries: u32,
    /// One process per GPU (ranks 0..k−1, each seeing its own GPU, sharing
    /// the launch's control directory; two-phase revocation stops them at the
    /// same iteration) instead of one process holding all the job's GPUs.
    pub process_per_gpu: bool,
}

impl LocalConfig {
    pub fn new(workdir: impl Into<PathBuf>) -> Self {
        LocalConfig {
            workdir: workdir.into(),
            grace_s: 10.0,
            max_retries: 2,
            process_per_gpu: false,
        }
    }
}

/// How a process ended, as its waiter saw it.
#[derive(Clone, Copy, Debug)]
struct Exit {
    at_s: f64,
    code: Option<i32>,
}

/// One process of a launch.
struct Rank {
    exit: Arc<Mutex<Option<Exit>>>,
    kill: Arc<AtomicBool>,
}

struct Proc {
    control: PathBuf,
    gpus: u32,
    /// Time of the last run-time accounting.
    accounted_s: f64,
    ranks: Vec<Rank>,
    metrics_offset: u64,
}

impl Proc {
    /// The launch's exit once every rank exited: the last exit time, status 0
    /// only if every rank exited 0. A rank that fails takes the others down.
    fn exit(&self) -> Option<Exit> {
        let exits: Vec<Option<Exit>> = self
            .ranks
            .iter()
            .map(|r| *r.exit.lock().expect("not poisoned"))
            .collect();
        if exits.iter().flatten().any(|e| e.code != Some(0)) {
            self.kill();
        }
        let all: Vec<Exit> = exits.into_iter().collect::<Option<_>>()?;
        let at_s = all.iter().map(|e| e.at_s).fold(0.0, f64::max);
        let code = all
            .iter()
            .map(|e| e.code)
            .find(|c| *c != Some(0))
            .unwrap_or(Some(0));
        Some(Exit { at_s, code })
    }

    fn kill(&self) {
        for r in &self.ranks {
            r.kill.store(true, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct Record {
    launches: u32,
    crashes: u32,
    /// Why the last launch could not start, if it could not.
    start_error: Option<String>,
    run_time_s: f64,
    attained_gpu_s: f64,
}

/// Runs jobs as processes on this machine.
pub struct LocalBackend {
    cfg: LocalConfig,
    start: Instant,
    next_round: u64,
    /// Submissions not yet handed to the loop, by arrival time.
    pending: Vec<JobSpec>,
    next_pending: usize,
    procs: HashMap<JobId, Proc>,
    records: HashMap<JobId, Record>,
    /// Local index of each GPU (`CUDA_VISIBLE_DEVICES`).
    local_index: Vec<u32>,
    /// Jobs whose process ended since the last metric collection:
    /// (job, exit, finished).
    ended: Vec<(JobId, Exit, bool)>,
}

fn be(msg: impl Into<String>) -> BackendError {
    BackendError(msg.into())
}

impl LocalBackend {
    /// A backend for `cluster` (its GPUs are this machine's, by local id)
    /// replaying `jobs` at their arrival times (seconds from now). Jobs need a
    /// command.
    pub fn new(
        cfg: LocalConfig,
        cluster: &ClusterState,
        mut jobs: Vec<JobSpec>,
    ) -> Result<Self, BackendError> {
        for j in &jobs {
            if j.command.is_empty() || j.command[0].is_empty() {
                return Err(be(format!("{}: no command to run", j.id)));
            }
        }
        jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        std::fs::create_dir_all(&cfg.workdir)
            .map_err(|e| be(format!("{}: {e}", cfg.workdir.display())))?;
        Ok(LocalBackend {
            local_index: cluster.gpus().iter().map(|g| g.local_id).collect(),
            cfg,
            start: Instant::now(),
            next_round: 0,
            pending: jobs,
            next_pending: 0,
            procs: HashMap::new(),
            records: HashMap::new(),
            ended: Vec::new(),
        })
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn job_dir(&self, id: JobId) -> PathBuf {
        self.cfg.workdir.join("jobs").join(id.0.to_string())
    }

    /// Folds new lines of a process's metric log into the store.
    fn read_metrics(p: &mut Proc, id: JobId, jobs: &mut JobState) {
        let path = p.control.join("metrics");
        let Ok(mut f) = std::fs::File::open(&path) else {
            return;
        };
        if f.seek(SeekFrom::Start(p.metrics_offset)).is_err() {
            return;
        }
        let mut r = BufReader::new(&mut f);
        let mut line = String::new();
        while let Ok(n) = r.read_line(&mut line) {
            if n == 0 || !line.ends_with('\n') {
                break; // a line still being written is read next time
            }
            p.metrics_offset += n as u64;
            let mut it = line.split_whitespace();
            if let (Some(k), Some(v), None) = (it.next(), it.next(), it.next()) {
                match v.parse::<f64>() {
                    Ok(v) if k == "progress" => {
                        if let Some(j) = jobs.get_mut(id) {
                            j.progress = v.clamp(0.0, 1.0);
                        }
                        jobs.metrics().set(id, k, v);
                    }
                    Ok(v) => jobs.metrics().set(id, k, v),
                    Err(_) => {
                        tracing::warn!(job = %id, line = %line.trim(), "bad metric line ignored")
                    }
                }
            } else {
                tracing::warn!(job = %id, line = %line.trim(), "bad metric line ignored");
            }
            line.clear();
        }
    }

    /// Charges run time and GPU time up to `until`.
    fn account(&mut self, id: JobId, until: f64) {
        if let Some(p) = self.procs.get_mut(&id) {
            let dt = (until - p.accounted_s).max(0.0);
            p.accounted_s = until.max(p.accounted_s);
            let r = self.records.entry(id).or_default();
            r.run_time_s += dt;
            r.attained_gpu_s += dt * p.gpus as f64;
        }
    }
}

/// Polls the child every 2 ms; records its exit time; kills it when asked.
fn spawn_waiter(
    mut child: Child,
    start: Instant,
    exit: Arc<Mutex<Option<Exit>>>,
    kill: Arc<AtomicBool>,
) {
    std::thread::spawn(move || loop {
        if kill.load(Ordering::Relaxed) {
            let _ = child.kill();
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                *exit.lock().expect("not poisoned") = Some(Exit {
                    at_s: start.elapsed().as_secs_f64(),
                    code: status.code(),
                });
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => {
                *exit.lock().expect("not poisoned") = Some(Exit {
                    at_s: start.elapsed().as_secs_f64(),
                    code: None,
                });
                return;
            }
        }
    });
}

impl ClusterManager for LocalBackend {
    fn cluster_events(&mut self, _round: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError> {
        Ok(Vec::new())
    }
}

impl JobSource for LocalBackend {
    fn poll_submissions(&mut self, _round: &RoundInfo) -> Result<Vec<JobSpec>, BackendError> {
        let now = self.now();
        let mut out = Vec::new();
        while self.next_pending < self.pending.len()
            && self.pending[self.next_pending].arrival_s <= now + 1e-3
        {
            out.push(self.pending[self.next_pending].clone());
            self.next_pending += 1;
        }
        Ok(out)
    }

    fn exhausted(&self) -> bool {
        self.next_pending >= self.pending.len()
    }
}

impl MetricCollector for LocalBackend {
    fn collect_metrics(
        &mut self,
        _round: &RoundInfo,
        jobs: &mut JobState,
    ) -> Result<(), BackendError> {
        let now = self.now();
        // Processes that exited on their own.
        let exited: Vec<(JobId, Exit)> = self
            .procs
            .iter()
            .filter_map(|(id, p)| p.exit().map(|e| (*id, e)))
            .collect();
        for (id, exit) in exited {
            self.account(id, exit.at_s);
            let mut p = self.procs.remove(&id).expect("listed above");
            Self::read_metrics(&mut p, id, jobs);
            let done = p.control.join("done").exists();
            self.ended.push((id, exit, done && exit.code == Some(0)));
        }
        let running: Vec<JobId> = self.procs.keys().copied().collect();
        for id in running {
            self.account(id, now);
            let p = self.procs.get_mut(&id).expect("listed above");
            Self::read_metrics(p, id, jobs);
        }
        for (id, exit, finished) in std::mem::take(&mut self.ended) {
            let rec = self.records.entry(id).or_default();
            let Some(job) = jobs.get_mut(id) else {
                continue;
            };
            if finished {
                job.status = JobStatus::Finished;
                job.finish_s = Some(exit.at_s);
                job.progress = 1.0;
            } else {
                rec.crashes += 1;
                let why = match (rec.start_error.take(), exit.code) {
                    (Some(e), _) => e,
                    (None, Some(c)) => format!("exit status {c}"),
                    (None, None) => "killed by a signal".to_string(),
                };
                if rec.crashes > self.cfg.max_retries {
                    tracing::warn!(job = %id, "failed after {} attempts: {why}", rec.crashes);
                    job.status = JobStatus::Failed;
                    job.finish_s = Some(exit.at_s);
                    job.end_reason =
                        Some(format!("process failed {} times; last: {why}", rec.crashes));
                } else {
                    tracing::warn!(job = %id, "process ended without finishing ({why}); retrying from its checkpoint");
                    job.status = JobStatus::Queued;
                }
            }
        }
        for (id, rec) in &self.records {
            if let Some(job) = jobs.get_mut(*id) {
                job.run_time_s = rec.run_time_s;
                job.attained_service_gpu_s = rec.attained_gpu_s;
            }
        }
        Ok(())
    }
}

impl PreemptionMechanism for LocalBackend {
    /// Revokes the lease and waits (up to `grace_s`) for the job to checkpoint
    /// and exit; kills it after that.
    fn preempt(&mut self, _round: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        let id = job.id();
        let Some(p) = self.procs.get_mut(&id) else {
            return Ok(()); // it already exited; the exit is folded in next round
        };
        let path = p.control.join("revoked");
        std::fs::write(&path, b"").map_err(|e| be(format!("{}: {e}", path.display())))?;
        let deadline = Instant::now() + Duration::from_secs_f64(self.cfg.grace_s);
        let mut warned = false;
        let exit = loop {
            if let Some(e) = p.exit() {
                break e;
            }
            if Instant::now() >= deadline {
                if !warned {
                    tracing::warn!(job = %id, "did not exit {} s after revocation; killed", self.cfg.grace_s);
                    warned = true;
                }
                p.kill();
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        self.account(id, exit.at_s);
        let p = self.procs.remove(&id).expect("checked above");
        if p.control.join("done").exists() && exit.code == Some(0) {
            // It finished just as it was revoked: report that next round.
            self.ended.push((id, exit, true));
        }
        Ok(())
    }
}

impl LaunchMechanism for LocalBackend {
    fn launch(
        &mut self,
        _round: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        batch_size: Option<u32>,
    ) -> Result<(), BackendError> {
        let id = job.id();
        if self
            .ended
            .iter()
            .any(|(j, _, finished)| *j == id && *finished)
        {
            // It finished as it was being moved: reported next round, not rerun.
            return Ok(());
        }
        let rec = self.records.entry(id).or_default();
        rec.launches += 1;
        let n = rec.launches;
        let dir = self.job_dir(id);
        let control = dir.join(format!("launch-{n}"));
        let ckpt = dir.join("checkpoint");
        for d in [&control, &ckpt] {
            std::fs::create_dir_all(d).map_err(|e| be(format!("{}: {e}", d.display())))?;
        }
        let devices: Vec<String> = gpus
            .iter()
            .map(|g| {
                self.local_index
                    .get(g.index())
                    .map_or_else(|| g.0.to_string(), |l| l.to_string())
            })
            .collect();
        let out = |name: &str| -> Result<std::fs::File, BackendError> {
            let p = control.join(name);
            std::fs::File::create(&p).map_err(|e| be(format!("{}: {e}", p.display())))
        };
        let argv = &job.spec.command;
        // One process with every GPU, or one per GPU.
        let groups: Vec<Vec<String>> = if self.cfg.process_per_gpu {
            devices.iter().map(|d| vec![d.clone()]).collect()
        } else {
            vec![devices.clone()]
        };
        let world = groups.len();
        let mut ranks = Vec::with_capacity(world);
        for (rank, devs) in groups.iter().enumerate() {
            let suffix = if world > 1 {
                format!(".rank{rank}")
            } else {
                String::new()
            };
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .env(env::JOB_ID, id.0.to_string())
                .env(env::RANK, rank.to_string())
                .env(env::WORLD_SIZE, world.to_string())
                .env(env::VISIBLE_DEVICES, devs.join(","))
                .env(env::MASTER_ADDR, "127.0.0.1")
                .env(env::CHECKPOINT_DIR, &ckpt)
                .env(env::CONTROL_DIR, &control)
                .env(env::RESUME, if n > 1 { "1" } else { "0" })
                .env(
                    env::BATCH_SIZE,
                    batch_size
                        .or(job.current_batch_size)
                        .map(|b| b.to_string())
                        .unwrap_or_default(),
                )
                .stdin(Stdio::null())
                .stdout(out(&format!("stdout{suffix}"))?)
                .stderr(out(&format!("stderr{suffix}"))?);
            let child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    // The job's fault, not the scheduler's: it is retried, then
                    // fails with this reason; the loop goes on.
                    let why = format!("cannot start {argv:?}: {e}");
                    tracing::warn!(job = %id, "{why}");
                    for r in &ranks {
                        let r: &Rank = r;
                        r.kill.store(true, Ordering::Relaxed);
                    }
                    self.records.entry(id).or_default().start_error = Some(why);
                    let at_s = self.now();
                    self.ended.push((id, Exit { at_s, code: None }, false));
                    return Ok(());
                }
            };
            let exit = Arc::new(Mutex::new(None));
            let kill = Arc::new(AtomicBool::new(false));
            spawn_waiter(child, self.start, exit.clone(), kill.clone());
            ranks.push(Rank { exit, kill });
        }
        let now = self.now();
        self.procs.insert(
            id,
            Proc {
                control,
                gpus: gpus.len() as u32,
                accounted_s: now,
                ranks,
                metrics_offset: 0,
            },
        );
        Ok(())
    }

    /// Writes the new batch size for the job to pick up at its next boundary.
    fn reconfigure(
        &mut self,
        _round: &RoundInfo,
        job: &Job,
        batch_size: u32,
    ) -> Result<(), BackendError> {
        let p = self
            .procs
            .get(&job.id())
            .ok_or_else(|| be(format!("{} is not running here", job.id())))?;
        let path = p.control.join("batch_size");
        std::fs::write(&path, batch_size.to_string())
            .map_err(|e| be(format!("{}: {e}", path.display())))
    }
}

impl RoundClock for LocalBackend {
    fn now_s(&self) -> f64 {
        self.now()
    }

    /// Sleeps until the next round boundary (rounds start every `round_s`
    /// from the backend's start, whatever a round took).
    fn wait_round(&mut self, round_s: f64, _idle: bool) -> Result<(), BackendError> {
        self.next_round += 1;
        let due = self.next_round as f64 * round_s;
        let left = due - self.now();
        if left > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(left));
        }
        Ok(())
    }
}

impl Drop for LocalBackend {
    /// No process outlives the backend.
    fn drop(&mut self) {
        for p in self.procs.values() {
            p.kill();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && self.procs.values().any(|p| p.exit().is_none()) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl LocalBackend {
    /// Process launches per job so far (first start, restarts, retries).
    pub fn launches(&self) -> BTreeMap<JobId, u32> {
        self.records.iter().map(|(k, r)| (*k, r.launches)).collect()
    }
}

/// The job directory of `id` under `workdir`.
pub fn job_dir(workdir: &Path, id: JobId) -> PathBuf {
    workdir.join("jobs").join(id.0.to_string())
}
