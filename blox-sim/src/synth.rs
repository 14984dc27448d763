//! Policy synthesis (Blox, EuroSys'24, §5.2 and Appendix A): every few rounds,
//! fork what the scheduler knows now — admitted jobs with their progress and
//! attained service, jobs waiting for admission, the cluster with its
//! allocations — into one simulation per candidate combination of admission ×
//! scheduling × placement, run each ahead, score it, and switch the live loop
//! to the best.
//!
//! The forks use only what a scheduler has: no future arrivals; a job's run
//! time is its submitted estimate (`expected_duration_s`, the same oracle
//! SRTF uses), or `default_duration_s` when it has none. Jobs run in the forks
//! as duration jobs (linear speedup in GPUs), each from the progress it has
//! made. Because it is a [`PolicySelector`] of the round loop, it runs the same
//! way in the simulator and on a real cluster.
//!
//! ```toml
//! [synthesizer]
//! enabled = true             # false: run the config's own policies only
//! every_rounds = 12          # decide every 12 rounds
//! horizon_s = 86400          # simulate a day ahead (unset: until the known jobs drain)
//! objective = "avg-jct"      # "avg-responsiveness", or "mix" with jct_weight
//! admission = [{ policy = "accept-all" }, { policy = "load-based", threshold = 1.2 }]
//! scheduling = [{ policy = "fifo" }, { policy = "srtf" }, { policy = "las" }]
//! placement = [{ policy = "consolidated" }]
//! ```
//!
//! A module list left out is the config's own module only.

use crate::backend::{SimBackend, SimConfig};
use crate::workload::{SimJob, WorkModel};
use blox_config::{Config, Table};
use blox_core::runner::{self, Driver};
use blox_core::*;
use rayon::prelude::*;
use serde::Deserialize;
use std::sync::{Arc, Mutex};

/// What a fork is scored on (lower is better).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Average job completion time of the known jobs.
    #[default]
    AvgJct,
    /// Average time from submission to first start.
    AvgResponsiveness,
    /// `jct_weight × avg JCT + (1 − jct_weight) × avg responsiveness`
    /// (Appendix A's weighted objective).
    Mix,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SynthConfig {
    /// `false` turns the synthesizer off (the config's own policies run).
    #[serde(default = "d_enabled")]
    enabled: bool,
    #[serde(default = "d_every")]
    every_rounds: u64,
    horizon_s: Option<f64>,
    #[serde(default)]
    objective: Objective,
    #[serde(default = "d_weight")]
    jct_weight: f64,
    #[serde(default)]
    admission: Vec<Table>,
    #[serde(default)]
    scheduling: Vec<Table>,
    #[serde(default)]
    placement: Vec<Table>,
    /// Run time assumed for a job that gave no estimate, seconds.
    #[serde(default = "d_default_duration")]
    default_duration_s: f64,
    /// Most rounds a fork simulates, whatever the horizon.
    #[serde(default = "d_max_rounds")]
    max_fork_rounds: u64,
}

fn d_enabled() -> bool {
    true
}
fn d_every() -> u64 {
    12
}
fn d_weight() -> f64 {
    0.5
}
fn d_default_duration() -> f64 {
    3600.0
}
fn d_max_rounds() -> u64 {
    100_000
}

/// One combination the synthesizer may pick.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub admission: ModuleConfig,
    pub scheduling: ModuleConfig,
    pub placement: ModuleConfig,
}

/// `policy` or `policy(key=value,…)`: a module with its parameters, so two
/// settings of one policy are told apart.
pub fn module_label(m: &ModuleConfig) -> String {
    let t = m.params.table();
    if t.is_empty() {
        return m.policy.clone();
    }
    let kv: Vec<String> = t
        .iter()
        .map(|(k, v)| format!("{k}={}", blox_config::convert::value_to_toml(v)))
        .collect();
    format!("{}({})", m.policy, kv.join(","))
}

impl Candidate {
    pub fn label(&self) -> String {
        format!(
            "{}/{}/{}",
            module_label(&self.admission),
            module_label(&self.scheduling),
            module_label(&self.placement)
        )
    }

    /// Builds the three modules, named by their labels.
    pub fn build(&self) -> Result<Policies, ConfigError> {
        let mut p = registry::build_policies(&self.admission, &self.scheduling, &self.placement)?;
        p.names = PolicyNames::new(
            module_label(&self.admission),
            module_label(&self.scheduling),
            module_label(&self.placement),
        );
        Ok(p)
    }
}

/// One decision: every candidate's forked score and what was chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub round: u64,
    pub time_s: f64,
    /// (candidate label, score in seconds), in candidate order.
    pub scores: Vec<(String, f64)>,
    pub chosen: String,
    pub switched: bool,
}

/// The synthesizer: a [`PolicySelector`] that forks simulations.
pub struct Synthesizer {
    cfg: SynthConfig,
    candidates: Vec<Candidate>,
    sim: SimConfig,
    /// The live loop's profile (start-up protection, checkpoints), which
    /// the forks follow too.
    profile: Profile,
    decisions: Arc<Mutex<Vec<Decision>>>,
}

/// What a fork needs from the live scheduler.
pub struct LiveView<'a> {
    pub round: &'a RoundInfo,
    pub jobs: &'a JobState,
    pub cluster: &'a ClusterState,
    pub waiting: &'a [Job],
}

impl Synthesizer {
    /// From the config's `[synthesizer]` section, if it has one. Every
    /// candidate is built once here, so a bad name or parameter fails now.
    pub fn from_config(cfg: &Config, sim: &SimConfig) -> Result<Option<Self>, ConfigError> {
        if !cfg.has_section("synthesizer") {
            return Ok(None);
        }
        let section = &cfg.section("synthesizer");
        let sc: SynthConfig = section.parse()?;
        if !sc.enabled {
            return Ok(None);
        }
        if sc.every_rounds == 0 {
            return Err(section.error_at("every_rounds", "every_rounds must be at least 1"));
        }
        if !(0.0..=1.0).contains(&sc.jct_weight) {
            return Err(section.error_at("jct_weight", "jct_weight must be in [0, 1]"));
        }
        if let Some(h) = sc.horizon_s {
            if h.is_nan() || h <= 0.0 {
                return Err(section.error_at("horizon_s", "horizon_s must be positive"));
            }
        }
        let modules = |key: &str,
                       list: &[Table],
                       own: &ModuleConfig|
         -> Result<Vec<ModuleConfig>, ConfigError> {
            if list.is_empty() {
                return Ok(vec![own.clone()]);
            }
            list.iter()
                .enumerate()
                .map(|(i, t)| {
                    let path = format!("{key}.{i}");
                    let mut params = section.subsection(key, &path, t.clone());
                    let Some(policy) = params.take_string("policy")? else {
                        return Err(section.error_at(
                            &path,
                            format!("every entry of `{key}` needs `policy = \"name\"`"),
                        ));
                    };
                    let line = params.line_of_key("policy").unwrap_or(0);
                    let m = ModuleConfig {
                        policy,
                        line,
                        params,
                    };
                    // Built once now, so a bad name or parameter names its entry.
                    match key {
                        "admission" => registry::build_admission(&m).map(drop)?,
                        "scheduling" => registry::build_scheduling(&m).map(drop)?,
                        _ => registry::build_placement(&m).map(drop)?,
                    }
                    Ok(m)
                })
                .collect()
        };
        let adm = modules("admission", &sc.admission, &cfg.admission)?;
        let sch = modules("scheduling", &sc.scheduling, &cfg.scheduling)?;
        let pla = modules("placement", &sc.placement, &cfg.placement)?;
        let mut candidates = Vec::new();
        for a in &adm {
            for s in &sch {
                for p in &pla {
                    candidates.push(Candidate {
                        admission: a.clone(),
                        scheduling: s.clone(),
                        placement: p.clone(),
                    });
                }
            }
        }
        Ok(Some(Synthesizer {
            cfg: sc,
            candidates,
            sim: SimConfig {
                start_after_first_round: false,
                ..sim.clone()
            },
            profile: cfg.profile()?,
            decisions: Arc::new(Mutex::new(Vec::new())),
        }))
    }

    pub fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }

    /// The decisions so far (shared: readable after the loop took the module).
    pub fn decisions(&self) -> Arc<Mutex<Vec<Decision>>> {
        self.decisions.clone()
    }

    fn estimate(&self, j: &Job) -> f64 {
        j.spec
            .expected_duration_s
            .unwrap_or(self.cfg.default_duration_s)
    }

    /// Forks the live state into a simulation under `c`, runs it ahead and
    /// returns its score (seconds; lower is better).
    pub fn evaluate(&self, c: &Candidate, live: &LiveView) -> Result<f64, SelectorError> {
        self.evaluate_from(c, live, None)
    }

    /// [`Synthesizer::evaluate`], the candidate's policies continuing from
    /// `state` where given (the active combination's, forked with its state:
    /// a fork of what runs decides as it would).
    pub fn evaluate_from(
        &self,
        c: &Candidate,
        live: &LiveView,
        state: Option<&std::sync::Mutex<PolicyForks>>,
    ) -> Result<f64, SelectorError> {
        let now = live.round.now_s;
        let policies = match state {
            Some(f) => {
                let (mut p, _) = f.lock().unwrap_or_else(|e| e.into_inner()).build(
                    &c.admission,
                    &c.scheduling,
                    &c.placement,
                )?;
                p.names = PolicyNames::new(
                    module_label(&c.admission),
                    module_label(&c.scheduling),
                    module_label(&c.placement),
                );
                p
            }
            None => c.build()?,
        };
        let (fork, mut backend) = fork_live(
            &self.sim,
            self.profile.clone(),
            policies,
            live,
            now,
            |j: &Job| self.estimate(j),
        );
        let mut fork = fork.build();
        let mut trial = Trial {
            end: self.cfg.horizon_s.map_or(f64::INFINITY, |h| now + h),
            rounds: 0,
            max_rounds: self.cfg.max_fork_rounds,
            candidate: c.label(),
        };
        runner::run(&mut fork, &mut backend, &mut trial)?;
        let t_end = backend.now_s();
        let (mut jct, mut resp, mut n) = (0.0, 0.0, 0usize);
        let mut score = |j: &Job| {
            let a = j.arrival_s();
            jct += j.jct_s().unwrap_or(t_end - a);
            resp += j.first_start_s.unwrap_or(t_end) - a;
            n += 1;
        };
        for j in fork.jobs.finished() {
            score(j);
        }
        for j in fork.jobs.active() {
            score(j);
        }
        for j in fork.waiting() {
            score(j);
        }
        if n == 0 {
            return Ok(0.0);
        }
        let (jct, resp) = (jct / n as f64, resp / n as f64);
        Ok(match self.cfg.objective {
            Objective::AvgJct => jct,
            Objective::AvgResponsiveness => resp,
            Objective::Mix => self.cfg.jct_weight * jct + (1.0 - self.cfg.jct_weight) * resp,
        })
    }
}

/// Forks what a live scheduler knows into a simulation under `policies`:
/// its admitted jobs carry on from their progress (running ones on their
/// GPUs, without a restart), jobs waiting for admission are submitted again
/// in the fork's first round, and every job runs as a duration job of
/// `duration(job)` seconds at its requested GPUs. No future arrivals.
/// `measured_at_s`: when the jobs' progress was measured (at most the live
/// clock); running jobs are credited the progress since.
/// Shared by the synthesizer and the forecaster (`crate::forecast`), which
/// finish building the fork's loop (a throwaway one: [`LoopBuilder::fork`]).
pub fn fork_live(
    sim: &SimConfig,
    profile: Profile,
    policies: Policies,
    live: &LiveView,
    measured_at_s: f64,
    duration: impl Fn(&Job) -> f64,
) -> (LoopBuilder, SimBackend) {
    let round_s = live.round.round_s;
    let now = live.round.now_s;
    let trace: Vec<SimJob> = live
        .waiting
        .iter()
        .map(|j| SimJob {
            startup_s: None,
            spec: j.spec.clone(),
            work: WorkModel::Duration {
                duration_s: duration(j),
            },
            converge_at: None,
        })
        .collect();
    let sim = SimConfig {
        start_after_first_round: false,
        ..sim.clone()
    };
    let mut backend = SimBackend::new(sim, round_s, trace, live.cluster);
    backend.start_at(now);
    let mut jobs = JobState::new();
    for j in live.jobs.active() {
        backend.adopt(j, duration(j), now);
        for (k, v) in live.jobs.metrics().of_job(j.id()) {
            jobs.metrics().set(j.id(), &k, v);
        }
        jobs.insert(j.clone());
    }
    // Running jobs made progress since it was measured.
    backend.catch_up(measured_at_s);
    let fork = RoundLoop::builder(policies, live.cluster.clone(), round_s)
        .jobs(jobs)
        .profile(profile)
        .fork();
    (fork, backend)
}

impl PolicySelector for Synthesizer {
    fn name(&self) -> &str {
        "synthesizer"
    }

    fn select(
        &mut self,
        round: &RoundInfo,
        jobs: &JobState,
        cluster: &ClusterState,
        waiting: &[Job],
        active: &Policies,
    ) -> Result<Option<Policies>, SelectorError> {
        if !round.round.is_multiple_of(self.cfg.every_rounds)
            || (jobs.is_empty() && waiting.is_empty())
        {
            return Ok(None);
        }
        let live = LiveView {
            round,
            jobs,
            cluster,
            waiting,
        };
        let current = active.label();
        // The active combination goes on from its own state.
        let state = std::sync::Mutex::new(active.fork());
        let scores: Vec<f64> = self
            .candidates
            .par_iter()
            .map(|c| self.evaluate_from(c, &live, (c.label() == current).then_some(&state)))
            .collect::<Result<_, _>>()?;
        let best = scores.iter().copied().fold(f64::INFINITY, f64::min);
        // The first best; the active combination if it is among the best.
        let pick = self
            .candidates
            .iter()
            .zip(&scores)
            .position(|(c, s)| c.label() == current && *s <= best)
            .or_else(|| scores.iter().position(|s| *s <= best))
            .unwrap_or(0);
        let chosen = self.candidates[pick].label();
        let switched = chosen != current;
        self.decisions.lock().expect("not poisoned").push(Decision {
            round: round.round,
            time_s: round.now_s,
            scores: self
                .candidates
                .iter()
                .map(|c| c.label())
                .zip(scores.iter().copied())
                .collect(),
            chosen: chosen.clone(),
            switched,
        });
        if !switched {
            return Ok(None);
        }
        Ok(Some(self.candidates[pick].build()?))
    }
}

/// A candidate's fork: runs until its jobs ended, its horizon or its round
/// budget.
struct Trial {
    end: f64,
    rounds: u64,
    max_rounds: u64,
    candidate: String,
}

impl Driver<SimBackend> for Trial {
    type Stop = ();
    type Error = SelectorError;

    fn stop(&mut self, lp: &RoundLoop, backend: &SimBackend) -> Option<()> {
        (runner::all_done(lp, backend)
            || backend.now_s() >= self.end
            || self.rounds >= self.max_rounds)
            .then_some(())
    }

    fn after_round(
        &mut self,
        _: RoundReport,
        _: &mut RoundLoop,
        _: &mut SimBackend,
    ) -> Result<(), SelectorError> {
        self.rounds += 1;
        Ok(())
    }

    fn failed(&mut self, _: &RoundLoop, source: LoopError) -> SelectorError {
        SelectorError::Fork {
            candidate: std::mem::take(&mut self.candidate),
            source: Box::new(source),
        }
    }
}
