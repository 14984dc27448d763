//! The round loop, written once for every backend (Blox, EuroSys'24, §3.2 and
//! Fig. 2): update cluster → collect metrics → prune finished → pop new → admit →
//! schedule → place → preempt → launch → wait. `round/checks.rs` holds the checks
//! every policy decision passes before it runs.

mod admission;
mod builder;
mod checks;
mod cluster_events;
pub mod events;
mod fork;
mod holding;
mod intake;
mod policies;
mod resilience;
mod startup;
mod timings;
mod wait;

#[cfg(test)]
mod tests;

pub use builder::LoopBuilder;
pub use checks::PlacementCheck;
use events::{Recorder, What};
pub use fork::PolicyForks;
use holding::copy_of_holding;
pub use policies::{Policies, PolicyNames, PolicySelector};
pub use startup::StartupRules;
use startup::Stopped;
use timings::lap;
pub use timings::RoundTimings;
pub use wait::WaitExplainer;

use crate::cluster::{ClusterError, ClusterState};
use crate::extension::{same_gpus, Profile, ProtectionInput};
use crate::ids::{GpuId, JobId};
use crate::job::{Job, JobStatus};
use crate::job_state::JobState;
use crate::module::{Backend, BackendError, ClusterEvent, Placement, RoundInfo};
use std::collections::HashMap;
use tracing::{debug, debug_span};

/// A failure of one round. State changes made before the failing step stay.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("backend failed during {step}")]
    Backend {
        step: &'static str,
        #[source]
        source: BackendError,
    },
    /// A policy's decision broke the contract of its extension point; nothing
    /// of it was executed.
    #[error("{kind} policy `{module}` returned an invalid decision: {reason}")]
    InvalidDecision {
        kind: &'static str,
        module: String,
        reason: String,
    },
    /// A policy read a per-round metric ([`crate::metric::PER_ROUND`]) it
    /// does not name in its `metrics_read()`, in a run whose backend
    /// publishes those only to policies that declare them.
    #[error(
        "{kind} policy `{module}` read metric `{key}` (of {job}) without naming it in its \
         `metrics_read()`; the simulator publishes the per-round progress metrics ({}) only \
         while a policy declares it reads them",
        crate::metric::PER_ROUND.join(", ")
    )]
    UndeclaredMetric {
        kind: &'static str,
        module: String,
        key: String,
        job: JobId,
    },
    /// The policies moved or preempted a job before its first iteration
    /// `rounds` rounds in a row: it never gets past its start-up.
    #[error(
        "policies `{policies}` moved or preempted {job} before its first iteration {rounds} rounds in a row: a livelock (it never gets past its start-up, and the run would not end); [run] livelock_after = {rounds} stops the run here (0: never)"
    )]
    Livelock {
        policies: String,
        job: String,
        rounds: u32,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error("policy selector `{module}` failed")]
    Selector {
        module: String,
        #[source]
        source: Box<SelectorError>,
    },
}

/// Why a [`PolicySelector`] could not decide.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    /// A candidate's policies could not be built.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A forked run of a candidate failed.
    #[error("the forked run of candidate `{candidate}` failed")]
    Fork {
        candidate: String,
        #[source]
        source: Box<LoopError>,
    },
}

/// What the loop does with a policy's invalid decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnInvalidDecision {
    /// Stop: `run_round` returns the error (simulations, tests).
    #[default]
    Fail,
    /// Drop the round's decision, report it in [`RoundReport::invalid`], log
    /// it, and go on with the next round (a live cluster keeps serving).
    SkipRound,
}

fn backend(step: &'static str) -> impl FnOnce(BackendError) -> LoopError {
    move |source| LoopError::Backend { step, source }
}

/// What happened in one round (one row of `rounds.csv`, plus the decisions).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundReport {
    pub round: u64,
    pub time_s: f64,
    /// GPUs held after this round's launches.
    pub busy_gpus: u32,
    /// Online GPUs.
    pub total_gpus: u32,
    /// Admitted jobs without GPUs after this round's launches.
    pub queued_jobs: usize,
    pub running_jobs: usize,
    /// Submitted jobs that admission has not accepted yet.
    pub waiting_jobs: usize,
    /// The largest job that could be placed after this round without
    /// spanning beyond one innermost topology domain (one node without a
    /// topology): fragmentation (`ClusterState::largest_placeable`).
    pub largest_placeable: u32,
    /// What the placement policy measures of the cluster after the round
    /// ([`crate::PlacementPolicy::round_figures`]); empty for most.
    pub figures: Vec<(&'static str, f64)>,
    pub launched: Vec<JobId>,
    pub preempted: Vec<JobId>,
    /// Jobs that ended during the last round (pruned in this one).
    pub ended: Vec<JobId>,
    /// The policies that decided this round, `admission/scheduling/placement`.
    pub policy: String,
    /// A policy's invalid decision that was dropped this round
    /// ([`OnInvalidDecision::SkipRound`]), with the policy it came from.
    pub invalid: Option<String>,
    /// The scheduling policy's note on its decision ([`crate::Schedule::note`]),
    /// e.g. a solver that kept every allocation.
    pub note: Option<String>,
    /// Where the round's time went.
    pub timings: RoundTimings,
    /// The round's decisions, while [`RoundLoop::record_events`] is on.
    pub events: Vec<events::Event>,
}

/// Rounds between full checks of the GPU table against the jobs in a
/// release build; the rounds between check what they changed.
const FULL_CHECK_EVERY: u64 = 256;

/// A composed scheduler: the policies plus the shared state they work on.
pub struct RoundLoop {
    /// Swaps `policies` between rounds (policy synthesis), if set.
    selector: Option<Box<dyn PolicySelector>>,
    /// Re-check the GPU table against the jobs after every round (default
    /// on): over what the round changed ([`ClusterState::check_changes`])
    /// and in full every 256th round; debug builds run both every round.
    /// Decisions are validated before they run either way; throwaway forks
    /// (the synthesizer's) turn this off for speed.
    pub check_invariants: bool,
    /// Give every job that is not running its wait reason after every round
    /// (default on; throwaway forks — forecasts, synthesis — turn it off).
    wait_reasons: bool,
    /// Fail on a policy's invalid decision, or drop it and go on.
    on_invalid: OnInvalidDecision,
    /// The plugins at the loop's extension points (start-up protection,
    /// checkpoint intervals, recovery from failures) and the `[run]` rules
    /// it keeps itself.
    profile: Profile,
    pub policies: Policies,
    pub jobs: JobState,
    pub cluster: ClusterState,
    /// Submitted, not yet admitted jobs, in submission order.
    waiting: Vec<Job>,
    /// The last invalid decision dropped (logged once, not every round).
    last_invalid: Option<String>,
    /// A livelock found this round (`note_stopped`), returned at its end.
    livelock: Option<LoopError>,
    /// This round's scheduling note ([`crate::Schedule::note`]).
    note: Option<String>,
    events: Recorder,
    /// What this round decided, for the wait reasons.
    decided: wait::Decided,
    round: u64,
    round_s: f64,
    /// When the last round started (its metrics are the jobs' latest).
    last_start_s: Option<f64>,
    /// Jobs held before admission because the placement could never place
    /// them, with its words.
    holds: HashMap<JobId, String>,
    /// Whether the next admission rejects the jobs it holds
    /// ([`RoundLoop::reject_held_next_round`]).
    reject_holds: bool,
    /// Jobs a node failure stopped this round, with the GPUs they held
    /// (for the spares, `round/resilience.rs`).
    failed_out: Vec<(JobId, Vec<GpuId>)>,
    /// Scratch for checking schedules ([`checks::IdMarks`]).
    id_marks: checks::IdMarks,
}

/// What a round's steps 5–8 did: jobs launched and preempted, and the
/// words of an invalid decision it skipped.
type StepsDone = (Vec<JobId>, Vec<JobId>, Option<String>);

impl RoundLoop {
    pub fn round_s(&self) -> f64 {
        self.round_s
    }

    /// Turns event recording on or off: with it on, each [`RoundReport`]
    /// carries the round's decisions as [`events::Event`]s.
    pub fn record_events(&mut self, on: bool) {
        self.events.set_on(on);
    }

    /// The `[run]` rules on jobs that are starting ([`LoopBuilder::startup`]).
    pub fn startup(&self) -> StartupRules {
        self.profile.rules
    }

    /// The plugins at its extension points ([`LoopBuilder::profile`]).
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// From now on, a policy's invalid decision does `on_invalid`
    /// ([`LoopBuilder::on_invalid`]).
    pub fn set_on_invalid(&mut self, on_invalid: OnInvalidDecision) {
        self.on_invalid = on_invalid;
    }

    /// Takes the policy selector out: the loop keeps its current policies
    /// from now on.
    pub fn take_selector(&mut self) -> Option<Box<dyn PolicySelector>> {
        self.selector.take()
    }

    /// Rounds run so far.
    pub fn rounds(&self) -> u64 {
        self.round
    }

    /// When the last round started: the time of the jobs' latest metrics.
    pub fn last_round_start_s(&self) -> Option<f64> {
        self.last_start_s
    }

    /// Submitted jobs waiting for admission.
    pub fn waiting(&self) -> &[Job] {
        &self.waiting
    }

    /// Has the next round's admission reject, with the placement's words,
    /// every job the placement holds then because it could never place it
    /// on the cluster as it is ([`crate::PlacementPolicy::never_places`]).
    /// For a driver that knows the cluster can no longer change (no node
    /// to come back, none to be added): those jobs would wait for ever.
    pub fn reject_held_next_round(&mut self) {
        self.reject_holds = true;
    }

    /// No admitted job and nobody waiting for admission.
    pub fn is_idle(&self) -> bool {
        self.jobs.is_empty() && self.waiting.is_empty()
    }

    /// Runs one round against `backend` and waits for the next one.
    pub fn run_round<B: Backend + ?Sized>(&mut self, b: &mut B) -> Result<RoundReport, LoopError> {
        let info = RoundInfo {
            round: self.round,
            now_s: b.now_s(),
            round_s: self.round_s,
            wall_clock: b.real_time(),
        };
        self.events.start_round(info.round, info.now_s);
        self.last_start_s = Some(info.now_s);
        let span = debug_span!("round", n = info.round, t = info.now_s);
        let _enter = span.enter();
        let mut timings = RoundTimings::default();
        let mut clock = std::time::Instant::now();

        // 1. Cluster management: nodes joining, leaving, failing and
        // repaired; quarantines ending; spares called in.
        self.manage_cluster(&info, b)?;
        timings.cluster_s = lap(&mut clock);
        // 2. Metric collection. The backend may leave out per-round
        // metrics no policy reads; a selector may switch to any policy.
        let reads = self
            .selector
            .is_none()
            .then(|| self.policies.metrics_read());
        self.jobs.metrics().declare_reads(reads);
        b.collect_metrics(&info, &mut self.jobs)
            .map_err(backend("metric collection"))?;
        // 3. Prune finished jobs, freeing their GPUs.
        let ended = self.prune();
        // Jobs a failure stopped resume on spares (after the prune: a job
        // that ended as its node failed is not relaunched).
        self.call_spares(&info, b)?;
        // 4. Pop newly submitted jobs; impossible requests are rejected here.
        self.take_submissions(&info, b)?;
        timings.metrics_s = lap(&mut clock);
        // 4½. Policy selection (synthesis).
        self.select_policies(&info)?;
        // 5.–8. Admission, scheduling, placement, preemption and launch.
        self.note = None;
        let (launched, preempted, invalid) = self.decide_or_skip(&info, b, &mut timings, clock)?;
        if let Some(e) = self.livelock.take() {
            return Err(e);
        }
        self.check_after_round()?;
        self.decided.preempted.extend(preempted.iter().copied());
        if self.wait_reasons {
            self.set_wait_reasons(info.now_s);
            self.undeclared_read("scheduling", 1)?;
        }

        let running_jobs = self.jobs.running().count();
        let report = RoundReport {
            round: info.round,
            time_s: info.now_s,
            busy_gpus: self.cluster.num_busy(),
            total_gpus: self.cluster.num_gpus(),
            queued_jobs: self.jobs.num_active() - running_jobs,
            running_jobs,
            waiting_jobs: self.waiting.len(),
            largest_placeable: self.cluster.largest_placeable(),
            figures: self.policies.placement.round_figures(&self.cluster),
            launched,
            preempted,
            ended,
            policy: self.policies.label(),
            invalid,
            note: self.note.take(),
            timings,
            events: self.events.take(),
        };
        debug!(
            busy = report.busy_gpus,
            running = report.running_jobs,
            queued = report.queued_jobs,
            "round done"
        );
        // 9. Wait for the next round.
        self.round += 1;
        b.wait_round(self.round_s, self.is_idle())
            .map_err(backend("wait"))?;
        Ok(report)
    }

    /// Step 4½: policy selection (synthesis): the selector may switch the
    /// loop to other policies; its failure is an error, or logged and the
    /// policies kept, as `on_invalid` says.
    fn select_policies(&mut self, info: &RoundInfo) -> Result<(), LoopError> {
        if let Some(mut sel) = self.selector.take() {
            let r = sel.select(
                info,
                &self.jobs,
                &self.cluster,
                &self.waiting,
                &self.policies,
            );
            let name = sel.name().to_string();
            self.selector = Some(sel);
            match r {
                Ok(Some(p)) => {
                    tracing::info!(from = %self.policies.label(), to = %p.label(), "policies switched");
                    let what = What::PolicySwitched {
                        from: self.policies.label(),
                        to: p.label(),
                    };
                    self.events.other(what);
                    self.policies = p;
                }
                Ok(None) => {}
                Err(source) => {
                    let e = LoopError::Selector {
                        module: name,
                        source: Box::new(source),
                    };
                    if self.on_invalid == OnInvalidDecision::Fail {
                        return Err(e);
                    }
                    tracing::error!("{}; keeping {}", error_chain(&e), self.policies.label());
                }
            }
        }
        Ok(())
    }

    /// Steps 5–8, or, for an invalid decision under
    /// [`OnInvalidDecision::SkipRound`], nothing of this round's decision
    /// (its words returned): launched and preempted jobs.
    fn decide_or_skip<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        b: &mut B,
        timings: &mut RoundTimings,
        clock: std::time::Instant,
    ) -> Result<StepsDone, LoopError> {
        let done = match self.decide_and_execute(info, b, timings, clock) {
            Ok((l, p)) => (l, p, None),
            Err(e @ LoopError::InvalidDecision { .. })
                if self.on_invalid == OnInvalidDecision::SkipRound =>
            {
                let text = e.to_string();
                // Logged when it first appears, not again every round.
                if self.last_invalid.as_deref() != Some(text.as_str()) {
                    tracing::error!(
                        round = info.round,
                        "{text}; this round's decision is dropped"
                    );
                } else {
                    tracing::debug!(
                        round = info.round,
                        "{text}; this round's decision is dropped"
                    );
                }
                self.last_invalid = Some(text.clone());
                self.decided.dropped = true;
                (Vec::new(), Vec::new(), Some(text))
            }
            Err(e) => return Err(e),
        };
        Ok(done)
    }

    /// The cluster's invariants after a round: over what the round changed,
    /// and in full every so many rounds.
    fn check_after_round(&mut self) -> Result<(), LoopError> {
        if self.check_invariants {
            // Over what the round changed, and in full every so many
            // rounds. Debug builds (the tests) run both every round: the
            // check of changes must pass wherever the full one does.
            if cfg!(debug_assertions) {
                self.cluster.check_changes(&self.jobs)?;
                self.cluster.check_all(&self.jobs)?;
            } else if self.round.is_multiple_of(FULL_CHECK_EVERY) {
                self.cluster.check_all(&self.jobs)?;
            } else {
                self.cluster.check_changes(&self.jobs)?;
            }
        }
        Ok(())
    }

    /// Steps 5–8: every policy's decision is checked before any of it runs.
    fn decide_and_execute<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        b: &mut B,
        timings: &mut RoundTimings,
        mut clock: std::time::Instant,
    ) -> Result<(Vec<JobId>, Vec<JobId>), LoopError> {
        // 5. Admission.
        if !self.waiting.is_empty() {
            self.admit(info)?;
            self.undeclared_read("admission", 0)?;
        }
        timings.admission_s = lap(&mut clock);
        // 6. Scheduling.
        let schedule = self
            .policies
            .scheduling
            .schedule(info, &self.jobs, &self.cluster);
        self.undeclared_read("scheduling", 1)?;
        self.validate_schedule(&schedule)?;
        self.note.clone_from(&schedule.note);
        self.decided.order.clear();
        self.decided
            .order
            .extend(schedule.entries.iter().map(|d| (d.job, d.gpus)));
        for (id, reason) in &schedule.terminate {
            let job = self.jobs.get(*id).expect("validated");
            if job.status.is_terminal() {
                continue;
            }
            if job.is_running() {
                self.suspend_all(info, &[*id], b)?;
            }
            let job = self.jobs.get_mut(*id).expect("validated");
            job.status = JobStatus::Finished;
            job.finish_s = Some(info.now_s);
            job.end_reason = Some(reason.clone());
            tracing::debug!(job = %id, "terminated: {reason}");
        }
        if let Some(n) = schedule.desired_nodes {
            let online = self.cluster.nodes().iter().filter(|x| x.online).count() as u32;
            if n != online {
                b.request_nodes(info, n)
                    .map_err(backend("cluster management"))?;
            }
        }
        timings.scheduling_s = lap(&mut clock);
        // 7. Placement.
        let placement = self
            .policies
            .placement
            .place(info, &schedule, &self.jobs, &self.cluster);
        self.undeclared_read("placement", 2)?;
        self.validate(&placement)?;
        self.decided
            .placed
            .extend(placement.launch.iter().map(|a| a.job));
        // 7½. Protection: what of the decision runs this round, checked
        // again before any of it does.
        let protection = &self.profile.protection;
        let input = ProtectionInput {
            round: info,
            jobs: &self.jobs,
            cluster: &self.cluster,
            asked_min_run_s: schedule.min_run_s,
        };
        let placement = protection.protect(&input, placement);
        self.validate_as("protection", protection.name(), &placement)?;
        timings.placement_s = lap(&mut clock);
        // 8. Preemption, then launch.
        let done = self.execute(info, placement, b);
        timings.launch_s = lap(&mut clock);
        done
    }

    fn execute<B: Backend + ?Sized>(
        &mut self,
        info: &RoundInfo,
        p: Placement,
        b: &mut B,
    ) -> Result<(Vec<JobId>, Vec<JobId>), LoopError> {
        // Jobs moving to other GPUs release theirs before anyone takes them.
        let mut moving = Vec::new();
        for a in &p.launch {
            if let Some(job) = self.jobs.get(a.job) {
                if job.is_running()
                    && (!same_gpus(&job.allocation, &a.gpus)
                        || job.host_share != a.host
                        || job.host_node != a.node
                        || self.cluster.share_of(a.job).map(|s| s.milli) != a.share)
                {
                    moving.push(a.job);
                }
            }
        }
        // Preempted and moving jobs stop together (the backend may wait for
        // all of them at once).
        let stopping: Vec<JobId> = p.preempt.iter().chain(&moving).copied().collect();
        if self.events.on() {
            let by = format!("not kept by {}", self.policies.label());
            for (i, id) in stopping.iter().enumerate() {
                let reason = if i < p.preempt.len() {
                    by.clone()
                } else {
                    "moved to other GPUs".to_string()
                };
                let job = self.jobs.get(*id).expect("validated");
                self.events.job(job, What::Preempted { reason });
            }
        }
        self.suspend_all(info, &stopping, b)?;
        for id in &moving {
            if let Some(job) = self.jobs.get_mut(*id) {
                job.restarts += 1;
            }
        }
        let mut preempted = Vec::new();
        for id in p.preempt {
            if let Some(job) = self.jobs.get_mut(id) {
                job.preemptions += 1;
            }
            preempted.push(id);
        }
        let mut launched = Vec::new();
        for a in p.launch {
            let Some(job) = self.jobs.get(a.job) else {
                continue;
            };
            if job.is_running() {
                // Same GPUs: only the batch size may change (elastic, no restart).
                if let Some(bs) = a.batch_size {
                    if job.current_batch_size != Some(bs) {
                        b.reconfigure(info, job, bs)
                            .map_err(backend("reconfigure"))?;
                        self.jobs.get_mut(a.job).unwrap().current_batch_size = Some(bs);
                    }
                }
                continue;
            }
            let id = a.job;
            self.start(info, b, a)?;
            launched.push(id);
        }
        Ok((launched, preempted))
    }
}

/// An error and its sources, `: `-separated (for logs).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if !out.ends_with(&m) {
            out.push_str(": ");
            out.push_str(&m);
        }
        cur = s.source();
    }
    out
}
