//! The simulator as a [`Forecaster`]: when will each job start and finish?
//! A [`Snapshot`] of the loop is forked into a simulation under the
//! scheduler's own policies and start-up rules ([`crate::synth::fork_live`],
//! the fork policy synthesis uses) and run until every job it knows has
//! finished, or its reach ends. What `blox status --start` shows.
//!
//! A launch's start-up runs from the start of the round that launched it to
//! its first iteration: waiting for the jobs it replaces to checkpoint and
//! exit, the launch call, and the job's own start. A job's next one is its
//! own last one where that was a relaunch, else at least this cluster's
//! relaunch cost: the median of the last start-ups of the jobs launched more
//! than once, and at least the recent wait from a round's start to a
//! relaunch's spawn the live backend measured (`Snapshot::launch_costs`,
//! known before any launch reports its first iteration); a first launch's
//! likewise over the jobs launched once. Each stands in for the other where
//! there is none, else `[sim]`'s `launch_overhead_s` / `restart_overhead_s`.
//!
//! A job's run time at its requested GPUs is its `duration_s` where given,
//! else its measured rate (productive GPU-seconds per unit of progress, once
//! it reported `min_progress`), else unknown: it runs on in the fork, its
//! finish is unknown, and a job behind it may not start within reach.
//!
//! ```toml
//! [forecast]
//! enabled = true        # false: no predictions (blox status --start says so)
//! horizon_s = 604800    # simulate at most a week ahead
//! max_rounds = 20000    # and at most this many rounds
//! max_wall_s = 1.0      # and for at most this long (wall clock)
//! min_progress = 0.01   # progress before a job's rate is trusted
//! ```

use crate::backend::{SimBackend, SimConfig};
use crate::synth::{fork_live, LiveView};
use blox_config::Config;
use blox_core::runner::{self, Driver};
use blox_core::*;
use blox_forecast::{DurationFrom, Forecast, ForecastError, Forecaster, Prediction, Snapshot};
use rustc_hash::FxHashMap as HashMap;
use serde::Deserialize;
use std::time::Instant;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForecastConfig {
    #[serde(default = "d_enabled")]
    enabled: bool,
    #[serde(default = "d_horizon")]
    horizon_s: Positive,
    #[serde(default = "d_rounds")]
    max_rounds: u64,
    #[serde(default = "d_wall")]
    max_wall_s: Positive,
    #[serde(default = "d_progress")]
    min_progress: Positive,
}

fn d_enabled() -> bool {
    true
}
fn d_horizon() -> Positive {
    Positive::of(7.0 * 86400.0)
}
fn d_rounds() -> u64 {
    20_000
}
fn d_wall() -> Positive {
    Positive::of(1.0)
}
fn d_progress() -> Positive {
    Positive::of(0.01)
}

/// Run time given to a job whose run time is unknown: it never finishes
/// within any reach.
const UNKNOWN_DURATION_S: f64 = 1e15;

/// The medians of the last measured start-ups of the jobs launched once,
/// and of those launched more than once.
fn measured_startups(jobs: &JobState) -> (Option<f64>, Option<f64>) {
    let mut first = Vec::new();
    let mut again = Vec::new();
    for j in jobs.active() {
        if let Some(s) = j.last_startup_s.filter(|s| s.is_finite()) {
            if j.launches > 1 {
                again.push(s);
            } else {
                first.push(s);
            }
        }
    }
    let median = |mut v: Vec<f64>| (!v.is_empty()).then(|| blox_core::stats::quantile(&mut v, 0.5));
    (median(first), median(again))
}

/// The simulator's forecaster (module docs).
pub struct SimForecaster {
    admission: ModuleConfig,
    scheduling: ModuleConfig,
    placement: ModuleConfig,
    sim: SimConfig,
    cfg: ForecastConfig,
}

impl SimForecaster {
    /// From a config: its policies, its `[sim]` (start-up and restart
    /// overheads) and its `[forecast]`. `None` when `[forecast] enabled =
    /// false`. The policies are built once here, so a bad one fails now.
    pub fn from_config(cfg: &Config, sim: &SimConfig) -> Result<Option<Self>, ConfigError> {
        let section = cfg.section("forecast");
        let fc: ForecastConfig = section.parse()?;
        if !fc.enabled {
            return Ok(None);
        }
        if fc.max_rounds == 0 {
            return Err(section.error_at("max_rounds", "max_rounds must be at least 1"));
        }
        registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement)?;
        Ok(Some(SimForecaster {
            admission: cfg.admission.clone(),
            scheduling: cfg.scheduling.clone(),
            placement: cfg.placement.clone(),
            sim: sim.clone(),
            cfg: fc,
        }))
    }

    /// The simulated time a forecast looks ahead at most.
    pub fn horizon_s(&self) -> f64 {
        self.cfg.horizon_s.get()
    }

    fn duration(&self, j: &Job) -> (f64, DurationFrom) {
        match DurationFrom::of(j, self.cfg.min_progress.get()) {
            (Some(d), from) => (d, from),
            (None, from) => (UNKNOWN_DURATION_S, from),
        }
    }
}

impl Forecaster for SimForecaster {
    fn forecast(&self, snap: &Snapshot) -> Result<Forecast, ForecastError> {
        let started = Instant::now();
        // The loop's own policies with their state where they handed it over
        // (Tiresias's queues, a team's attained service, ONES's predictor),
        // fresh ones from the config otherwise.
        let (policies, mut notes) = match &snap.policies {
            Some(f) => f.lock().unwrap_or_else(|e| e.into_inner()).build(
                &self.admission,
                &self.scheduling,
                &self.placement,
            ),
            None => registry::build_policies(&self.admission, &self.scheduling, &self.placement)
                .map(|p| (p, Vec::new())),
        }
        .map_err(|e| ForecastError(e.to_string()))?;
        // A forecast knows no failure to come, nor when a failed node
        // returns: it says so where that matters now.
        let down = snap.cluster.health().down.len();
        if down > 0 {
            notes.push(format!(
                "{down} failed node(s) taken to stay down (a forecast knows neither repairs nor further failures)"
            ));
        }
        let round = RoundInfo {
            round: snap.round,
            now_s: snap.now_s,
            round_s: snap.round_s,
            wall_clock: false,
        };
        let live = LiveView {
            round: &round,
            jobs: &snap.jobs,
            cluster: &snap.cluster,
            waiting: &snap.waiting,
        };
        // Start-up as this cluster shows it: the median of the jobs' last
        // measured start-ups, first launches and relaunches apart (a
        // relaunch waits for the jobs it replaces to checkpoint and exit),
        // each standing in for the other where it has none yet.
        let mut sim = self.sim.clone();
        // A launch costs at least the wait for its spawn the backend saw
        // lately (known before a launch reports its first iteration).
        let (first, again) = measured_startups(&snap.jobs);
        let c = snap.launch_costs;
        let at_least = |m: Option<f64>, wait: Option<f64>| match (m, wait) {
            (Some(m), Some(w)) => Some(m.max(w)),
            (m, w) => m.or(w),
        };
        let first = at_least(first, c.launch_wait_s);
        let again = at_least(again, c.relaunch_wait_s);
        if let Some(m) = first.or(again) {
            sim.launch_overhead_s = m;
        }
        if let Some(m) = again.or(first) {
            sim.restart_overhead_s = m;
        }
        tracing::debug!(
            round = snap.round,
            "forecast start-ups: {:.3} s to launch, {:.3} s to relaunch (waits for the spawn: {:?}, {:?})",
            sim.launch_overhead_s,
            sim.restart_overhead_s,
            c.launch_wait_s,
            c.relaunch_wait_s
        );
        let (fork, mut backend) = fork_live(
            &sim,
            snap.profile.clone(),
            policies,
            &live,
            snap.measured_at_s,
            |j| self.duration(j).0,
        );
        let mut fork = fork.on_invalid(OnInvalidDecision::SkipRound).build();
        // Every job, with where its run time came from.
        let mut from: HashMap<JobId, DurationFrom> = HashMap::default();
        let mut unstarted = 0usize;
        let mut known_left = 0usize;
        for j in snap.jobs.active().chain(&snap.waiting) {
            let f = self.duration(j).1;
            from.insert(j.id(), f);
            unstarted += usize::from(!j.is_running());
            known_left += usize::from(f != DurationFrom::Unknown);
        }
        let mut ahead = Lookahead {
            snap,
            from: &from,
            starts: HashMap::default(),
            unstarted,
            known_left,
            end: snap.now_s + self.cfg.horizon_s.get(),
            rounds: 0,
            max_rounds: self.cfg.max_rounds,
            max_wall_s: self.cfg.max_wall_s.get(),
            started,
        };
        let stopped = runner::run(&mut fork, &mut backend, &mut ahead)?;
        let (starts, rounds) = (ahead.starts, ahead.rounds);
        let finishes: HashMap<JobId, f64> = fork
            .jobs
            .finished()
            .iter()
            .filter(|j| j.status == JobStatus::Finished)
            .filter_map(|j| Some((j.id(), j.finish_s?)))
            .collect();
        let mut predictions: Vec<Prediction> = from
            .iter()
            .map(|(id, f)| Prediction {
                job: *id,
                start_s: starts.get(id).copied().filter(|t| !t.is_nan()),
                finish_s: finishes
                    .get(id)
                    .copied()
                    .filter(|_| *f != DurationFrom::Unknown),
                duration_from: *f,
            })
            .collect();
        predictions.sort_by_key(|p| p.job);
        Ok(Forecast {
            round: snap.round,
            made_at_s: snap.now_s,
            reached_s: backend.now_s(),
            rounds,
            stopped: if notes.is_empty() {
                stopped.to_string()
            } else {
                format!("{stopped}; {}", notes.join("; "))
            },
            predictions,
        })
    }
}

/// A forecast's fork: runs until every job started and every one of known
/// run time finished, or a limit; notes when each job first starts.
struct Lookahead<'a> {
    snap: &'a Snapshot,
    from: &'a HashMap<JobId, DurationFrom>,
    /// When each job not running at the snapshot first gets GPUs in the
    /// fork (NaN: it ended without starting).
    starts: HashMap<JobId, f64>,
    unstarted: usize,
    known_left: usize,
    end: f64,
    rounds: u64,
    max_rounds: u64,
    max_wall_s: f64,
    started: std::time::Instant,
}

impl Driver<SimBackend> for Lookahead<'_> {
    type Stop = &'static str;
    type Error = ForecastError;

    fn stop(&mut self, _: &RoundLoop, backend: &SimBackend) -> Option<&'static str> {
        if self.unstarted == 0 && self.known_left == 0 {
            return Some("every job started, and every one with a known run time finished");
        }
        if backend.now_s() >= self.end {
            return Some("horizon_s reached");
        }
        if self.rounds >= self.max_rounds {
            return Some("max_rounds reached");
        }
        // (A forecast runs beside the live scheduler: wall-clock bounded.)
        if self.started.elapsed().as_secs_f64() >= self.max_wall_s {
            return Some("max_wall_s reached");
        }
        None
    }

    fn after_round(
        &mut self,
        report: RoundReport,
        _: &mut RoundLoop,
        _: &mut SimBackend,
    ) -> Result<(), ForecastError> {
        self.rounds += 1;
        let running_before = |id: &JobId| self.snap.jobs.get(*id).is_some_and(|j| j.is_running());
        for id in &report.launched {
            if !self.starts.contains_key(id) && !running_before(id) {
                self.starts.insert(*id, report.time_s);
                self.unstarted -= 1;
            }
        }
        for id in &report.ended {
            if self
                .from
                .get(id)
                .is_some_and(|f| *f != DurationFrom::Unknown)
            {
                self.known_left -= 1;
            }
            // Ended without starting (rejected): it never will.
            if !self.starts.contains_key(id) && !running_before(id) {
                self.unstarted -= 1;
                self.starts.insert(*id, f64::NAN);
            }
        }
        Ok(())
    }

    fn failed(&mut self, _: &RoundLoop, e: LoopError) -> ForecastError {
        ForecastError(error_chain(&e))
    }
}
