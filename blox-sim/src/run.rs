//! A whole simulation: a config in, job and round tables out.

use crate::backend::failures::Failures;
use crate::backend::{SimBackend, SimConfig};
use crate::report::{SimResult, StopReason};
use crate::rounds::{self, RunState, SimRounds};
use crate::workload::{self, SimJob, WorkloadError};
use blox_config::{Config, ConfigInput, Override, SectionSource};
use blox_core::runner;
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
    /// tables are the same whatever it is (`tests/sim/ended_rows.rs`).
    pub ended_kept: usize,
    /// The tables and logs of the run so far.
    st: RunState,
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
    /// Builds policies, cluster and workload from a config. Module and
    /// plugin names are checked first, so a bad name fails before the
    /// workload is read.
    pub fn from_config(cfg: &Config) -> Result<Self, SimError> {
        let policies =
            blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
        let profile = Some(cfg.profile()?);
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
        let mut policies = policies;
        let mut selector: Option<Box<dyn PolicySelector>> = None;
        let mut decisions = None;
        if let Some(synth) = synth {
            // Name the starting policies the way the synthesizer names its
            // candidates, so the first decision recognises them.
            use crate::synth::module_label;
            policies.names = PolicyNames::new(
                module_label(&cfg.admission),
                module_label(&cfg.scheduling),
                module_label(&cfg.placement),
            );
            decisions = Some(synth.decisions());
            selector = Some(Box::new(synth));
        }
        let mut s = Self::build(
            policies,
            cluster,
            cfg.run.clone(),
            sim,
            jobs,
            selector,
            profile,
        )?;
        s.backend = s.backend.with_host_profiles(host).with_failures(failures);
        s.synth_decisions = decisions;
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
        let profile = Some(cfg.profile()?);
        let mut s = Self::build(policies, cluster, cfg.run.clone(), sim, jobs, None, profile)?;
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
        Self::build(policies, cluster, run, sim, jobs, None, None)
    }

    /// [`Simulation::new`], with a policy selector (synthesis) and the
    /// plugins a config selects (`None`: the default profile of `[run]`).
    fn build(
        policies: Policies,
        cluster: ClusterState,
        run: RunConfig,
        sim: SimConfig,
        jobs: Vec<SimJob>,
        selector: Option<Box<dyn PolicySelector>>,
        profile: Option<Profile>,
    ) -> Result<Self, SimError> {
        check_jobs(&jobs)?;
        for j in &jobs {
            let accepted = policies.scheduling.accepts(&j.spec).or_else(|why| {
                // A placement that keeps each job to its GPU types makes
                // them a constraint the scheduling policy need not honour.
                let types = &j.spec.elasticity.gpu_types;
                if types.is_empty() || !policies.placement.honours_gpu_types() {
                    return Err(why);
                }
                let mut any_type = j.spec.clone();
                any_type.elasticity.gpu_types.clear();
                policies.scheduling.accepts(&any_type).map_err(|_| why)
            });
            if let Err(why) = accepted {
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
        let round_loop = RoundLoop::builder(policies, cluster, run.round_s.get())
            .selector(selector)
            .profile(profile.unwrap_or_else(|| Profile::of_rules(StartupRules::from_run(&run))))
            .build();
        // Every job ends up as a row: room for them once, not a doubling
        // buffer (up to twice their size) grown as they end.
        let mut ended_rows = Vec::new();
        ended_rows.reserve_exact(num_jobs);
        Ok(Simulation {
            round_loop,
            backend,
            run,
            sim,
            ended_kept: ENDED_KEPT,
            st: RunState {
                tracked_total,
                ended_rows,
                ..RunState::default()
            },
            synth_decisions: None,
        })
    }

    /// Writes every decision of the run from now on to `path` as JSON lines
    /// (`blox sim --out` writes `events.jsonl`; `blox events` reads it).
    pub fn log_events(&mut self, path: &std::path::Path) -> Result<(), SimError> {
        let log = blox_eventlog::EventLog::create(path)?;
        self.st.events = Some(crate::log_writer::LogWriter::spawn(log)?);
        self.round_loop.record_events(true);
        Ok(())
    }

    /// Keeps every decision of the run from now on in memory (beside any
    /// log file), for [`Simulation::take_events`].
    pub fn keep_events(&mut self) {
        self.st.kept = Some(Vec::new());
        self.round_loop.record_events(true);
    }

    /// The decisions kept so far (see [`Simulation::keep_events`]).
    pub fn take_events(&mut self) -> Vec<blox_core::round::events::Event> {
        self.st
            .kept
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The same simulation with its loop built again from `f` applied to
    /// the loop's builder ([`RoundLoop::into_builder`]): a replay starting
    /// from a log's middle gives it the log's jobs and cluster.
    pub(crate) fn map_loop(self, f: impl FnOnce(LoopBuilder) -> LoopBuilder) -> Self {
        let Simulation {
            round_loop,
            backend,
            run,
            sim,
            ended_kept,
            st,
            synth_decisions,
        } = self;
        Simulation {
            round_loop: f(round_loop.into_builder()).build(),
            backend,
            run,
            sim,
            ended_kept,
            st,
            synth_decisions,
        }
    }

    /// Why the run stopped (or would stop now), if its stop condition holds.
    pub fn stop_reason(&self) -> Option<StopReason> {
        rounds::stop_reason(&self.run, &self.st, &self.round_loop, &self.backend)
    }

    /// What a forecast forks from now: the loop's state, with the metrics
    /// the simulator already holds for jobs submitted this round (their
    /// epoch size, per-type speeds) though the loop collects them only next
    /// round. Without those, a fork of a policy that reads them (ONES's
    /// predictor) learns from other features than the run itself.
    pub fn snapshot(&self) -> blox_forecast::Snapshot {
        let snap = blox_forecast::Snapshot::of(&self.round_loop, self.backend.now_s());
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
        let mut driver = SimRounds {
            run: &self.run,
            sim: &self.sim,
            ended_kept: self.ended_kept,
            st: &mut self.st,
        };
        match runner::step(&mut self.round_loop, &mut self.backend, &mut driver)? {
            runner::Step::Ran => Ok(true),
            runner::Step::Stopped(_) => {
                // Everything written before a caller reads the log.
                if let Some(log) = &mut self.st.events {
                    log.close()?;
                }
                Ok(false)
            }
        }
    }

    /// Fraction of tracked jobs that have ended (for progress bars).
    pub fn fraction_done(&self) -> f64 {
        if self.st.tracked_total == 0 {
            1.0
        } else {
            self.st.tracked_ended as f64 / self.st.tracked_total as f64
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
            st,
            ..
        } = self;
        // The simulator's own state goes before the tables are built.
        drop(backend);
        SimResult::from_finished_loop(
            round_loop,
            st.ended_rows,
            st.rounds,
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
        if let Some(why) = j.spec.share_problem() {
            return Err(invalid(format!("{} ({}): {why}", j.spec.id, j.spec.name)));
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
                if let Some(Value::String(k)) = old.table().get("kind") {
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
