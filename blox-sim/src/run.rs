//! A whole simulation: a config in, job and round tables out.

use crate::backend::{SimBackend, SimConfig};
use crate::report::{JobRow, RoundRow, SimResult, Summary};
use crate::workload::{self, SimJob, WorkloadError};
use blox_core::*;
use std::path::Path;

/// Anything that stops a simulation from starting or finishing.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error("simulation failed at round {round}: {source}")]
    Loop {
        round: u64,
        #[source]
        source: LoopError,
    },
    #[error("{0}")]
    Io(String),
}

/// A composed scheduler driving the simulator.
pub struct Simulation {
    pub round_loop: RoundLoop,
    pub backend: SimBackend,
    pub run: RunConfig,
    pub sim: SimConfig,
    rounds: Vec<RoundRow>,
    tracked_total: usize,
    tracked_ended: usize,
    seen_ended: usize,
    /// The synthesizer's decisions, when one is configured.
    pub synth_decisions: Option<std::sync::Arc<std::sync::Mutex<Vec<crate::synth::Decision>>>>,
}

impl Simulation {
    /// Builds policies, cluster and workload from a config. Module names are checked
    /// first, so a bad name fails before the workload is read.
    pub fn from_config(cfg: &Config) -> Result<Self, SimError> {
        let policies =
            blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
        let sim: SimConfig = cfg.section("sim").parse()?;
        let section = cfg.section("workload");
        let jobs = workload::load(&section, &cfg.base_dir, cfg.run.seed)?;
        let host = workload::load_host_profiles(&section, &cfg.base_dir, &jobs)?;
        let synth = crate::synth::Synthesizer::from_config(cfg, &sim)?;
        let mut s = Self::new(policies, cfg.cluster_state()?, cfg.run.clone(), sim, jobs)?;
        s.backend = s.backend.with_host_profiles(host);
        if let Some(synth) = synth {
            // Name the starting policies the way the synthesizer names its
            // candidates, so the first decision recognises them.
            use crate::synth::module_label;
            s.round_loop.policies.names = (
                module_label(&cfg.admission),
                module_label(&cfg.scheduling),
                module_label(&cfg.placement),
            );
            s.synth_decisions = Some(synth.decisions());
            s.round_loop.selector = Some(Box::new(synth));
        }
        Ok(s)
    }

    /// Builds a simulation from parts (for tests and custom drivers).
    pub fn new(
        policies: Policies,
        cluster: ClusterState,
        run: RunConfig,
        sim: SimConfig,
        jobs: Vec<SimJob>,
    ) -> Result<Self, SimError> {
        let tracked_total = match run.track_jobs {
            Some([a, b]) => jobs
                .iter()
                .filter(|j| (a..=b).contains(&j.spec.id.0))
                .count(),
            None => jobs.len(),
        };
        let backend = SimBackend::new(sim.clone(), run.round_s, jobs, &cluster);
        let round_loop = RoundLoop::new(policies, cluster, run.round_s);
        Ok(Simulation {
            round_loop,
            backend,
            run,
            sim,
            rounds: Vec::new(),
            tracked_total,
            tracked_ended: 0,
            seen_ended: 0,
            synth_decisions: None,
        })
    }

    fn is_tracked(&self, id: JobId) -> bool {
        match self.run.track_jobs {
            Some([a, b]) => (a..=b).contains(&id.0),
            None => true,
        }
    }

    /// True once the run's stop condition holds.
    pub fn is_done(&self) -> bool {
        if let Some(m) = self.run.max_rounds {
            if self.round_loop.rounds() >= m {
                return true;
            }
        }
        if let Some(t) = self.run.max_time_s {
            if self.backend.now_s() >= t {
                return true;
            }
        }
        if self.run.track_jobs.is_some() && self.tracked_ended >= self.tracked_total {
            return true;
        }
        self.backend.exhausted() && self.round_loop.is_idle()
    }

    /// Runs one round; returns false once done.
    pub fn step(&mut self) -> Result<bool, SimError> {
        if self.is_done() {
            return Ok(false);
        }
        let r = self
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
        self.seen_ended = finished.len();
        self.rounds.push(RoundRow::from(r));
        Ok(true)
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
        let quantized = self.sim.round_quantized;
        let round_s = self.run.round_s;
        let now = self.backend.now_s();
        let state = &self.round_loop.jobs;
        let mut jobs: Vec<JobRow> = state
            .finished()
            .iter()
            .chain(state.active())
            .chain(self.round_loop.waiting())
            .map(|j| JobRow::from_job(j, quantized, round_s))
            .collect();
        jobs.sort_by_key(|j| j.job_id);
        let tracked: Vec<&JobRow> = jobs
            .iter()
            .filter(|j| self.is_tracked(JobId(j.job_id)))
            .collect();
        let summary = Summary::compute(
            &tracked,
            &jobs,
            self.round_loop.cluster.num_gpus(),
            now,
            self.round_loop.rounds(),
            self.round_loop.policies.names.clone(),
        );
        SimResult {
            jobs,
            rounds: self.rounds,
            summary,
        }
    }
}

/// Reads a config file, applies `--set` overrides and an optional workload file
/// (which replaces `workload.path` and is re-detected from its header).
pub fn load_config(
    path: &Path,
    workload: Option<&Path>,
    overrides: &[(String, String)],
) -> Result<Config, SimError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SimError::Io(format!("{}: {e}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut overrides = overrides.to_vec();
    if let Some(w) = workload {
        let abs = std::env::current_dir()
            .map(|d| d.join(w))
            .unwrap_or_else(|_| w.to_path_buf());
        let kind = workload::detect_format(&abs)?;
        let mut cfg_kind = kind.to_string();
        // A Philly-format file keeps a config's `blox-recipe` kind.
        if kind == "philly" {
            let probe = Config::parse(&text, &path.display().to_string(), base, &[])?;
            if let Some(toml::Value::String(k)) = probe.section("workload").table().get("kind") {
                if k == "blox-recipe" {
                    cfg_kind = k.clone();
                }
            }
        }
        overrides.push((
            "workload.path".into(),
            toml_string(&abs.display().to_string()),
        ));
        overrides.push(("workload.kind".into(), toml_string(&cfg_kind)));
    }
    Ok(Config::parse(
        &text,
        &path.display().to_string(),
        base,
        &overrides,
    )?)
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
