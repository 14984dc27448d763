//! A whole simulation: a config in, job and round tables out.

use crate::backend::failures::Failures;
use crate::backend::{SimBackend, SimConfig};
use crate::report::{JobRow, RoundRow, SimResult, StopReason};
use crate::workload::{self, SimJob, WorkloadError};
use blox_core::config::{ConfigInput, Override, SectionSource};
use blox_core::*;
use std::path::{Path, PathBuf};

/// Anything that stops a simulation from starting or finishing.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    /// A round failed (its message names the step and the module).
    #[error("simulation failed at round {round}")]
    Loop {
        round: u64,
        #[source]
        source: LoopError,
    },
    /// Jobs wait, nothing runs and nothing can change: the run would never end.
    #[error(
        "no progress is possible at round {round} ({time_h:.2} h): {detail}; no job runs, all {gpus} GPUs are idle and no arrival or cluster change is pending. The policies (admission `{}`, scheduling `{}`, placement `{}`) start none of the waiting jobs",
        policies.admission, policies.scheduling, policies.placement
    )]
    Stalled {
        round: u64,
        time_h: f64,
        gpus: u32,
        detail: String,
        policies: blox_core::PolicyNames,
    },
    /// A job keeps failing and never keeps any work (`[failures]`): its
    /// time between interruptions is shorter than its checkpoint interval
    /// plus restart, or than its whole run when it saves only when stopped.
    #[error(
        "no progress is possible at {time_h:.2} h: job {job} ({gpus} GPUs) was interrupted {interruptions} times by node failures without keeping any work; failures come faster than it can start and checkpoint (give it a shorter checkpoint_interval_s, fewer GPUs, or the nodes a longer gpu_mtbf_h)"
    )]
    NoProgress {
        job: u64,
        gpus: u32,
        interruptions: u32,
        time_h: f64,
    },
    #[error(transparent)]
    Events(#[from] blox_eventlog::EventLogError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Rounds in a row with jobs waiting, idle GPUs and nothing pending before a
/// run is declared stalled (a policy may hold jobs back for a round or two).
pub const STALL_ROUNDS: u64 = 10;

/// Interruptions in a row without any work kept after which a run stops
/// ([`SimError::NoProgress`]).
pub const FRUITLESS_INTERRUPTIONS: u32 = 50;

/// Ended jobs a simulation's loop keeps whole (at least; every job that
/// ended in the round just run too): older ones become table rows as the
/// run goes (`JobState::finished`).
pub const ENDED_KEPT: usize = 4096;

/// A composed scheduler driving the simulator.
pub struct Simulation {
    pub round_loop: RoundLoop,
    pub backend: SimBackend,
    pub run: RunConfig,
    pub sim: SimConfig,
    /// Ended jobs the loop keeps whole, at least ([`ENDED_KEPT`]; every job
    /// that ended in the round just run too); older ones become rows. The
    /// tables are the same whatever it is (`tests/ended_rows.rs`).
    pub ended_kept: usize,
    rounds: Vec<RoundRow>,
    tracked_total: usize,
    tracked_ended: usize,
    seen_ended: usize,
    /// Rows of the ended jobs the loop no longer keeps whole
    /// ([`ENDED_KEPT`]), in the order they ended.
    ended_rows: Vec<JobRow>,
    stalled_rounds: u64,
    /// Per job: its interruptions and useful GPU-seconds when it last kept
    /// more work than before (`[failures]`; [`SimError::NoProgress`]).
    kept_work: std::collections::HashMap<JobId, (u32, f64)>,
    /// Where the loop's decisions go, when [`Simulation::log_events`] was called.
    events: Option<crate::log_writer::LogWriter>,
    /// The decisions kept in memory, when [`Simulation::keep_events`] was called.
    kept: Option<Vec<blox_core::round::events::Event>>,
    /// The synthesizer's decisions, when one is configured.
    pub synth_decisions: Option<std::sync::Arc<std::sync::Mutex<Vec<crate::synth::Decision>>>>,
}

/// A placement that orders GPUs by speed needs the cluster's factors.
fn check_variability(
    policies: &Policies,
    cluster: &ClusterState,
    at: &str,
) -> Result<(), SimError> {
    if policies.placement.requires_variability() && cluster.variability().is_none() {
        return Err(ConfigError::Incompatible {
            at: at.to_string(),
            message: format!(
                "[placement] policy `{}` orders GPUs by their per-class slowdown factors, and the cluster has none: give them in [cluster.variability] (`factors = \"file.csv\"`, `default_class`; docs/RESULTS.md, PAL)",
                policies.names.placement
            ),
        }
        .into());
    }
    Ok(())
}

impl Simulation {
    /// Builds policies, cluster and workload from a config. Module names are checked
    /// first, so a bad name fails before the workload is read.
    pub fn from_config(cfg: &Config) -> Result<Self, SimError> {
        let policies =
            blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
        let sim = SimConfig::from_section(&cfg.section("sim"))?;
        let section = cfg.section("workload");
        let cluster = cfg.cluster_state()?;
        check_variability(&policies, &cluster, &cfg.placement.location())?;
        // A workload drawn to a size is checked before it is drawn; a trace
        // once read (it fits; the run holds more).
        let too_big = |n: usize, what: &str| {
            crate::memory::check(n, what, &sim)
                .map_err(|m| SimError::Workload(WorkloadError::Invalid(m)))
        };
        if let Some(n) = workload::WorkloadConfig::from_section(&section)?
            .common
            .num_jobs
        {
            too_big(n, &section.location("num_jobs"))?;
        }
        let jobs = workload::load_for(&section, cfg.run.seed, Some(&cluster))?;
        too_big(jobs.len(), &section.location("path"))?;
        let host = workload::load_host_profiles(&section, &jobs)?;
        let synth = crate::synth::Synthesizer::from_config(cfg, &sim)?;
        let failures = Failures::from_section(&cfg.section("failures"), &cluster, cfg.run.seed)?;
        let mut s = Self::new(policies, cluster, cfg.run.clone(), sim, jobs)?;
        s.backend = s.backend.with_host_profiles(host).with_failures(failures);
        if let Some(synth) = synth {
            // Name the starting policies the way the synthesizer names its
            // candidates, so the first decision recognises them.
            use crate::synth::module_label;
            s.round_loop.policies.names = PolicyNames::new(
                module_label(&cfg.admission),
                module_label(&cfg.scheduling),
                module_label(&cfg.placement),
            );
            s.synth_decisions = Some(synth.decisions());
            s.round_loop.selector = Some(Box::new(synth));
        }
        Ok(s)
    }

    /// Builds policies, cluster and `[sim]` from a config, and runs `jobs`
    /// instead of its workload (tests, custom drivers).
    pub fn with_jobs(cfg: &Config, jobs: Vec<SimJob>) -> Result<Self, SimError> {
        let policies =
            blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
        let sim = SimConfig::from_section(&cfg.section("sim"))?;
        let cluster = cfg.cluster_state()?;
        check_variability(&policies, &cluster, &cfg.placement.location())?;
        let failures = Failures::from_section(&cfg.section("failures"), &cluster, cfg.run.seed)?;
        let mut s = Self::new(policies, cluster, cfg.run.clone(), sim, jobs)?;
        s.backend = s.backend.with_failures(failures);
        Ok(s)
    }

    /// Builds a simulation from parts (for tests and custom drivers). The jobs
    /// must be sorted by arrival, with distinct ids and finite, non-negative
    /// arrival times.
    pub fn new(
        policies: Policies,
        cluster: ClusterState,
        run: RunConfig,
        sim: SimConfig,
        jobs: Vec<SimJob>,
    ) -> Result<Self, SimError> {
        check_jobs(&jobs)?;
        for j in &jobs {
            if let Err(why) = policies.scheduling.accepts(&j.spec) {
                return Err(SimError::Workload(WorkloadError::Invalid(format!(
                    "scheduling policy `{}` refuses job {} ({}): {why}",
                    policies.names.scheduling, j.spec.id, j.spec.name
                ))));
            }
        }
        check_variability(&policies, &cluster, "the placement policy")?;
        if let Err(why) = policies.placement.fits_cluster(&cluster) {
            return Err(SimError::Workload(WorkloadError::Invalid(format!(
                "placement policy `{}` does not fit the cluster: {why}",
                policies.names.placement
            ))));
        }
        if let Err(why) = policies.scheduling.fits_cluster(&cluster) {
            return Err(SimError::Workload(WorkloadError::Invalid(format!(
                "scheduling policy `{}` does not fit the cluster ({} GPUs): {why}",
                policies.names.scheduling,
                cluster.num_gpus()
            ))));
        }
        let tracked_total = match run.track_jobs {
            Some([a, b]) => jobs
                .iter()
                .filter(|j| (a..=b).contains(&j.spec.id.0))
                .count(),
            None => jobs.len(),
        };
        if let (Some([a, b]), 0, false) = (run.track_jobs, tracked_total, jobs.is_empty()) {
            return Err(SimError::Workload(WorkloadError::Invalid(format!(
                "run.track_jobs = [{a}, {b}] selects none of the workload's {} jobs (ids {} to {}): \
                 measure them all with `--set run.track_jobs=`, or name ids the workload has",
                jobs.len(),
                jobs.iter().map(|j| j.spec.id.0).min().unwrap_or(0),
                jobs.iter().map(|j| j.spec.id.0).max().unwrap_or(0),
            ))));
        }
        let num_jobs = jobs.len();
        let backend = SimBackend::new(sim.clone(), run.round_s.get(), jobs, &cluster);
        let mut round_loop = RoundLoop::new(policies, cluster, run.round_s.get());
        // Every job ends up as a row: room for them once, not a doubling
        // buffer (up to twice their size) grown as they end.
        let mut ended_rows = Vec::new();
        ended_rows.reserve_exact(num_jobs);
        round_loop.startup = StartupRules::from_run(&run);
        Ok(Simulation {
            round_loop,
            backend,
            run,
            sim,
            ended_kept: ENDED_KEPT,
            rounds: Vec::new(),
            tracked_total,
            tracked_ended: 0,
            seen_ended: 0,
            ended_rows,
            stalled_rounds: 0,
            kept_work: Default::default(),
            events: None,
            kept: None,
            synth_decisions: None,
        })
    }

    /// Writes every decision of the run from now on to `path` as JSON lines
    /// (`blox sim --out` writes `events.jsonl`; `blox events` reads it).
    pub fn log_events(&mut self, path: &std::path::Path) -> Result<(), SimError> {
        let log = blox_eventlog::EventLog::create(path)?;
        self.events = Some(crate::log_writer::LogWriter::spawn(log)?);
        self.round_loop.record_events(true);
        Ok(())
    }

    /// Keeps every decision of the run from now on in memory (beside any
    /// log file), for [`Simulation::take_events`].
    pub fn keep_events(&mut self) {
        self.kept = Some(Vec::new());
        self.round_loop.record_events(true);
    }

    /// The decisions kept so far (see [`Simulation::keep_events`]).
    pub fn take_events(&mut self) -> Vec<blox_core::round::events::Event> {
        self.kept.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn is_tracked(&self, id: JobId) -> bool {
        match self.run.track_jobs {
            Some([a, b]) => (a..=b).contains(&id.0),
            None => true,
        }
    }

    /// Why the run stopped (or would stop now), if its stop condition holds.
    pub fn stop_reason(&self) -> Option<StopReason> {
        if self.run.track_jobs.is_some() && self.tracked_ended >= self.tracked_total {
            return Some(StopReason::Completed);
        }
        if self.backend.exhausted() && self.round_loop.is_idle() {
            return Some(StopReason::Completed);
        }
        if let Some(m) = self.run.max_rounds {
            if self.round_loop.rounds() >= m {
                return Some(StopReason::Limit(format!("run.max_rounds = {m}")));
            }
        }
        if let Some(t) = self.run.max_time_s.map(|t| t.get()) {
            if self.backend.now_s() >= t {
                return Some(StopReason::Limit(format!("run.max_time_s = {t}")));
            }
        }
        None
    }

    /// What a forecast forks from now: the loop's state, with the metrics
    /// the simulator already holds for jobs submitted this round (their
    /// epoch size, per-type speeds) though the loop collects them only next
    /// round. Without those, a fork of a policy that reads them (ONES's
    /// predictor) learns from other features than the run itself.
    pub fn snapshot(&self) -> blox_core::forecast::Snapshot {
        let snap = blox_core::forecast::Snapshot::of(&self.round_loop, self.backend.now_s());
        for (id, k, v) in self.backend.pending_metrics() {
            if snap.jobs.get(*id).is_some() {
                snap.jobs.metrics().set(*id, k, *v);
            }
        }
        snap
    }

    /// True once the run's stop condition holds.
    pub fn is_done(&self) -> bool {
        self.stop_reason().is_some()
    }

    /// Runs one round; returns false once done.
    pub fn step(&mut self) -> Result<bool, SimError> {
        if self.is_done() {
            // Everything written before a caller reads the log.
            if let Some(log) = &mut self.events {
                log.close()?;
            }
            return Ok(false);
        }
        let mut r = self
            .round_loop
            .run_round(&mut self.backend)
            .map_err(|source| SimError::Loop {
                round: self.round_loop.rounds(),
                source,
            })?;
        let finished = self.round_loop.jobs.finished();
        for j in &finished[self.seen_ended..] {
            if self.is_tracked(j.id()) {
                self.tracked_ended += 1;
            }
        }
        let ended_now = finished.len() - self.seen_ended;
        self.seen_ended = finished.len();
        self.compact_ended(ended_now);
        let stuck = r.running_jobs == 0
            && r.busy_gpus == 0
            && r.queued_jobs + r.waiting_jobs > 0
            && !self.backend.has_pending_events();
        self.stalled_rounds = if stuck { self.stalled_rounds + 1 } else { 0 };
        if self.stalled_rounds >= STALL_ROUNDS {
            return Err(self.stalled(&r));
        }
        if self.backend.failure_counts().is_some() {
            self.check_progress(r.time_s)?;
        }
        if let Some(k) = &mut self.kept {
            k.extend(r.events.iter().cloned());
        }
        if let Some(log) = &mut self.events {
            log.send(std::mem::take(&mut r.events))?;
        }
        self.rounds.push(RoundRow::from(r));
        Ok(true)
    }

    /// Turns the oldest ended records into rows once the loop holds twice
    /// what it keeps ([`Simulation::ended_kept`], and every job that ended
    /// this round): a row is half a `Job`, and the run's end has nothing
    /// left to convert.
    fn compact_ended(&mut self, ended_now: usize) {
        let keep = self.ended_kept.max(ended_now);
        if self.round_loop.jobs.finished().len() < keep.saturating_mul(2) {
            return;
        }
        let (quantized, round_s) = (self.sim.round_quantized, self.round_loop.round_s());
        let old = self.round_loop.jobs.drain_finished_oldest(keep);
        let n = old.len();
        self.ended_rows
            .extend(old.map(|j| JobRow::from_job(&j, quantized, round_s)));
        self.seen_ended -= n;
    }

    /// Stops a run in which a job keeps failing without keeping work.
    fn check_progress(&mut self, now_s: f64) -> Result<(), SimError> {
        for j in self.round_loop.jobs.active() {
            if j.interruptions == 0 {
                continue;
            }
            let useful = j.attained_service_gpu_s - j.lost_work_gpu_s;
            let mark = self
                .kept_work
                .entry(j.id())
                .or_insert((j.interruptions, useful));
            if useful > mark.1 + 1e-6 {
                *mark = (j.interruptions, useful);
            } else if j.interruptions >= mark.0 + FRUITLESS_INTERRUPTIONS {
                return Err(SimError::NoProgress {
                    job: j.id().0,
                    gpus: j.requested_gpus(),
                    interruptions: j.interruptions - mark.0,
                    time_h: now_s / 3600.0,
                });
            }
        }
        Ok(())
    }

    fn stalled(&self, r: &RoundReport) -> SimError {
        let lp = &self.round_loop;
        let mut waiting: Vec<String> = lp
            .jobs
            .queued()
            .chain(lp.waiting())
            .take(5)
            .map(|j| {
                let state = if j.status == JobStatus::Submitted {
                    "waiting for admission"
                } else {
                    "admitted"
                };
                format!("{} ({} GPUs, {state})", j.id(), j.requested_gpus())
            })
            .collect();
        let n = r.queued_jobs + r.waiting_jobs;
        if n > waiting.len() {
            waiting.push(format!("{} more", n - waiting.len()));
        }
        SimError::Stalled {
            round: r.round,
            time_h: r.time_s / 3600.0,
            gpus: r.total_gpus,
            detail: format!("{n} jobs wait: {}", waiting.join(", ")),
            policies: lp.policies.names.clone(),
        }
    }

    /// Fraction of tracked jobs that have ended (for progress bars).
    pub fn fraction_done(&self) -> f64 {
        if self.tracked_total == 0 {
            1.0
        } else {
            self.tracked_ended as f64 / self.tracked_total as f64
        }
    }

    /// Runs to the stop condition and returns the tables.
    pub fn run_to_end(mut self) -> Result<SimResult, SimError> {
        while self.step()? {}
        Ok(self.finish())
    }

    /// The tables of the run so far.
    pub fn finish(self) -> SimResult {
        let stop = self.stop_reason();
        let now_s = self.backend.now_s();
        let Simulation {
            round_loop,
            backend,
            run,
            sim,
            rounds,
            ended_rows,
            ..
        } = self;
        // The simulator's own state goes before the tables are built.
        drop(backend);
        SimResult::from_finished_loop(
            round_loop,
            ended_rows,
            rounds,
            now_s,
            sim.round_quantized,
            run.track_jobs,
            stop,
        )
    }
}

/// Jobs handed to the simulator: sorted by arrival (the backend releases
/// them in order), distinct ids, finite arrival times.
fn check_jobs(jobs: &[SimJob]) -> Result<(), SimError> {
    let invalid = |m: String| SimError::Workload(WorkloadError::Invalid(m));
    let mut ids = rustc_hash::FxHashSet::default();
    ids.reserve(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        let a = j.spec.arrival_s;
        if !(a.is_finite() && a >= 0.0) {
            return Err(invalid(format!(
                "{} arrives at {a} s: arrival times must be finite and non-negative",
                j.spec.id
            )));
        }
        if i > 0 && a < jobs[i - 1].spec.arrival_s {
            return Err(invalid(format!(
                "the jobs are not sorted by arrival: {} (at {a} s) comes after {} (at {} s)",
                j.spec.id,
                jobs[i - 1].spec.id,
                jobs[i - 1].spec.arrival_s
            )));
        }
        if !ids.insert(j.spec.id) {
            return Err(invalid(format!("job id {} appears twice", j.spec.id.0)));
        }
    }
    Ok(())
}

/// Reads a config file, applies overrides and an optional workload file
/// (which replaces `workload.path` and is re-detected from its header).
pub fn load_config(
    path: &Path,
    workload: Option<&Path>,
    overrides: &[Override],
) -> Result<Config, SimError> {
    ConfigRequest::new(path)
        .workload(workload.map(Path::to_path_buf), "--workload")
        .overrides(overrides.to_vec())
        .load()
}

/// A config file plus what replaces parts of it: a workload file (like
/// `--workload`), whole sections from another file, overrides.
#[derive(Clone, Debug)]
pub struct ConfigRequest {
    pub path: PathBuf,
    pub workload: Option<(PathBuf, String)>,
    pub sections: Vec<SectionSource>,
    pub overrides: Vec<Override>,
    /// A config without `[cluster]` is read (`ConfigInput::cluster_optional`).
    pub cluster_optional: bool,
}

impl ConfigRequest {
    pub fn new(path: &Path) -> Self {
        ConfigRequest {
            path: path.to_path_buf(),
            workload: None,
            sections: Vec::new(),
            overrides: Vec::new(),
            cluster_optional: false,
        }
    }

    /// Reads a config without `[cluster]` too: its cluster comes from
    /// elsewhere (a replayed log's nodes).
    pub fn cluster_optional(mut self) -> Self {
        self.cluster_optional = true;
        self
    }

    /// Replaces the workload file; `origin` names where it was asked for.
    pub fn workload(mut self, path: Option<PathBuf>, origin: &str) -> Self {
        self.workload = path.map(|p| (p, origin.to_string()));
        self
    }

    pub fn overrides(mut self, o: Vec<Override>) -> Self {
        self.overrides.extend(o);
        self
    }

    pub fn sections(mut self, s: Vec<SectionSource>) -> Self {
        self.sections.extend(s);
        self
    }

    /// Reads and checks the config.
    pub fn load(&self) -> Result<Config, SimError> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| SimError::Io {
            path: self.path.clone(),
            source,
        })?;
        let base = self.path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let file = self.path.display().to_string();
        let mut input = ConfigInput::new(&text, &file, &base);
        input.sections = self.sections.clone();
        input.cluster_optional = self.cluster_optional;
        if let Some((w, origin)) = &self.workload {
            let abs = std::path::absolute(w).unwrap_or_else(|_| w.clone());
            let kind = workload::detect_format(&abs)?;
            let mut cfg_kind = kind.to_string();
            let mut probe = ConfigInput::new(&text, &file, &base);
            probe.sections = self.sections.clone();
            probe.cluster_optional = self.cluster_optional;
            let probe = Config::from_input(probe)?;
            let old = probe.section("workload");
            // A Philly-format file keeps a config's `blox-recipe` kind.
            if kind == "philly" {
                if let Some(toml::Value::String(k)) = old.table().get("kind") {
                    if k == "blox-recipe" {
                        cfg_kind = k.clone();
                    }
                }
            }
            let origin = format!("{origin} {}", w.display());
            // The keys of the old kind go with it (a generator's `jobs_per_hour` means
            // nothing to a trace file); keys the user sets below still reach the check.
            for key in workload::keys_of_other_kinds(old.table(), &cfg_kind) {
                tracing::info!(
                    "{origin}: dropping `workload.{key}` ({}): it does not apply to a `{cfg_kind}` workload",
                    old.location(key)
                );
                input
                    .overrides
                    .push(Override::unset(&format!("workload.{key}")).with_origin(origin.clone()));
            }
            input.overrides.push(
                Override::set("workload.path", &toml_string(&abs.display().to_string()))
                    .with_origin(origin.clone()),
            );
            input
                .overrides
                .push(Override::set("workload.kind", &toml_string(&cfg_kind)).with_origin(origin));
        }
        input.overrides.extend(self.overrides.iter().cloned());
        Ok(Config::from_input(input)?)
    }
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
