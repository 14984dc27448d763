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

mod jobs_file;

pub use jobs_file::{parse_jobs, read_jobs_file, JobsFileError};

use crate::process::{LaunchSpec, Running, StartError};
use crate::record::{settle, Ended, LaunchClock, Record};
use blox_core::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
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
    /// A launch that has not reported its start-up after this many seconds
    /// (a program that does not use a client library) counts as started
    /// when it launched (`[run] max_startup_s`).
    pub max_startup_s: f64,
}

impl LocalConfig {
    pub fn new(workdir: impl Into<PathBuf>) -> Self {
        LocalConfig {
            workdir: workdir.into(),
            grace_s: 10.0,
            max_retries: 2,
            process_per_gpu: false,
            max_startup_s: 600.0,
        }
    }
}

/// How a launch ended, in seconds since the backend started.
#[derive(Clone, Copy, Debug)]
struct Exit {
    at_s: f64,
    code: Option<i32>,
}

struct Proc {
    run: Running,
    clock: LaunchClock,
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
    records: rustc_hash::FxHashMap<JobId, Record>,
    /// Local index of each GPU (`CUDA_VISIBLE_DEVICES`).
    local_index: Vec<u32>,
    /// Launches that ended since the last metric collection.
    ended: Vec<Ended>,
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
            records: Default::default(),
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
    fn read_metrics(p: &mut Proc, id: JobId, jobs: &mut JobState, now_s: f64) {
        let clock = &mut p.clock;
        p.run.read_metrics(id.0, |k, v| {
            clock.on_metric(k, v, now_s);
            if k == metric::PROGRESS {
                if let Some(j) = jobs.get_mut(id) {
                    j.progress = v.clamp(0.0, 1.0);
                }
            }
            jobs.metrics().set(id, k, v);
        });
    }

    fn exit_of(&self, p: &Proc) -> Option<Exit> {
        p.run.exit().map(|e| Exit {
            at_s: e.at.saturating_duration_since(self.start).as_secs_f64(),
            code: e.code,
        })
    }

    /// Ends the launch of `id` at `until`: its time goes to the job's record.
    fn retire(&mut self, id: JobId, until: f64) -> Option<Proc> {
        let mut p = self.procs.remove(&id)?;
        p.clock.advance(until);
        self.records.entry(id).or_default().fold(&p.clock);
        Some(p)
    }
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
            .filter_map(|(id, p)| self.exit_of(p).map(|e| (*id, e)))
            .collect();
        for (id, exit) in exited {
            let p = self.procs.get_mut(&id).expect("listed above");
            Self::read_metrics(p, id, jobs, exit.at_s);
            let done = p.run.marked_done();
            if done && exit.code == Some(0) {
                p.clock.finished();
            }
            self.retire(id, exit.at_s);
            self.ended.push(if done && exit.code == Some(0) {
                Ended::finished(id, exit.at_s)
            } else {
                Ended::crashed(id, exit.at_s, exit.code, None)
            });
        }
        let running: Vec<JobId> = self.procs.keys().copied().collect();
        for id in running {
            let p = self.procs.get_mut(&id).expect("listed above");
            Self::read_metrics(p, id, jobs, now);
            p.clock.advance(now);
            p.clock.give_up_waiting(now, self.cfg.max_startup_s);
        }
        let ended = std::mem::take(&mut self.ended);
        let live = self.procs.iter().map(|(id, p)| (*id, &p.clock));
        settle(ended, &mut self.records, live, jobs, self.cfg.max_retries);
        Ok(())
    }
}

impl PreemptionMechanism for LocalBackend {
    /// Revokes the lease and waits (up to `grace_s`) for the job to checkpoint
    /// and exit; kills it after that.
    fn preempt(&mut self, round: &RoundInfo, job: &Job) -> Result<(), BackendError> {
        self.preempt_all(round, &[job])
    }

    /// Revokes every lease first, then waits for all the jobs together (at
    /// most `grace_s` in all, then the stragglers are killed).
    fn preempt_all(&mut self, _round: &RoundInfo, jobs: &[&Job]) -> Result<(), BackendError> {
        // A job that already exited is folded in next round.
        let ids: Vec<JobId> = jobs
            .iter()
            .map(|j| j.id())
            .filter(|id| self.procs.contains_key(id))
            .collect();
        for id in &ids {
            let p = &self.procs[id];
            if let Err(e) = p.run.revoke() {
                tracing::warn!(job = %id, "cannot revoke the lease ({e}); killing the job");
                p.run.kill();
            }
        }
        let deadline = Instant::now() + Duration::from_secs_f64(self.cfg.grace_s);
        for id in ids {
            let p = &self.procs[&id];
            let left = deadline.saturating_duration_since(Instant::now());
            // Past the deadline: killed (and waited for).
            let e = p
                .run
                .wait(left)
                .unwrap_or_else(|| p.run.revoke_and_wait(Duration::ZERO, id.0));
            self.stopped(id, e);
        }
        Ok(())
    }
}

impl LocalBackend {
    /// Accounts a launch that stopped after its revocation.
    fn stopped(&mut self, id: JobId, e: crate::process::Exit) {
        let Some(p) = self.procs.get(&id) else {
            return;
        };
        let finished = p.run.finished(&e);
        let exit = Exit {
            at_s: e.at.saturating_duration_since(self.start).as_secs_f64(),
            code: e.code,
        };
        self.retire(id, exit.at_s);
        if finished {
            // It finished just as it was revoked: report that next round.
            self.ended.push(Ended::finished(id, exit.at_s));
        }
    }
}

impl LaunchMechanism for LocalBackend {
    fn launch(
        &mut self,
        round: &RoundInfo,
        job: &Job,
        gpus: &[GpuId],
        batch_size: Option<u32>,
    ) -> Result<(), BackendError> {
        let id = job.id();
        if self.ended.iter().any(|e| e.job == id && e.finished) {
            // It finished as it was being moved: reported next round, not rerun.
            return Ok(());
        }
        let rec = self.records.entry(id).or_default();
        rec.launches += 1;
        let n = rec.launches;
        let dir = self.job_dir(id);
        let control = dir.join(format!("launch-{n}"));
        let ckpt = dir.join("checkpoint");
        let devices: Vec<String> = gpus
            .iter()
            .map(|g| {
                self.local_index
                    .get(g.index())
                    .map_or_else(|| g.0.to_string(), |l| l.to_string())
            })
            .collect();
        let spec = LaunchSpec {
            job: id.0,
            argv: job.spec.command.clone(),
            devices,
            control,
            checkpoint: ckpt,
            coord: None,
            resume: n > 1,
            batch_size: batch_size.or(job.current_batch_size),
            master_addr: "127.0.0.1".into(),
            worker_addr: String::new(),
            process_per_gpu: self.cfg.process_per_gpu,
            first_rank: 0,
            world_size: None,
            generation: u64::from(n),
            // The local backend runs jobs as whoever runs it (one user, no
            // cluster credential to guard).
            job_user: None,
            // No scheduler to lose: no lease.
            lease: None,
            // The user's own jobs, with the user's own environment (their
            // virtualenv, library paths); only the BLOX_* settings are the
            // runtime's.
            pass_env: vec!["*".into()],
            cgroup_procs: Vec::new(),
            share: job
                .gpu_share
                .map(|m| crate::process::GpuShareEnv::of(m, 0.0)),
        };
        match Running::spawn(&spec) {
            Ok(run) => {
                let now = self.now();
                self.procs.insert(
                    id,
                    Proc {
                        run,
                        clock: LaunchClock::spawned(round.now_s, now, gpus.len() as u32),
                    },
                );
            }
            Err(StartError {
                message: why,
                permanent,
                ..
            }) => {
                // The job's fault, not the scheduler's: it is retried, then
                // fails with this reason (at once when a retry cannot help:
                // its program does not exist); the loop goes on.
                tracing::warn!(job = %id, "{why}");
                let at_s = self.now();
                let mut e = Ended::crashed(id, at_s, None, Some(why));
                e.permanent = permanent;
                self.ended.push(e);
            }
        }
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
        p.run
            .set_batch_size(batch_size)
            .map_err(|e| be(format!("{}: {e}", p.run.control.display())))
    }
}

impl RoundClock for LocalBackend {
    fn now_s(&self) -> f64 {
        self.now()
    }

    fn real_time(&self) -> bool {
        true
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
            p.run.kill();
        }
        // Dropping each `Running` waits for its processes.
        self.procs.clear();
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

/// Runs `lp` on `backend` until every job has ended; `on_round` sees each
/// round's report and the loop after it. Returns every round's report.
pub fn run_until_done(
    lp: &mut RoundLoop,
    backend: &mut LocalBackend,
    mut on_round: impl FnMut(&RoundReport, &RoundLoop),
) -> Result<Vec<RoundReport>, LoopError> {
    let mut rounds = Vec::new();
    blox_core::runner::run(
        lp,
        backend,
        &mut blox_core::runner::UntilDone(|r: RoundReport, lp: &RoundLoop| {
            on_round(&r, lp);
            rounds.push(r);
        }),
    )?;
    Ok(rounds)
}
