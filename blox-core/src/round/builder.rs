//! Building a [`RoundLoop`]: every driver (the simulator, the live
//! scheduler, the local runner, the synthesizer's and forecasts' forks, a
//! what-if replay) states here, once, what its loop is (its policies, its
//! cluster, the jobs it starts from and how it treats start-up and invalid
//! decisions), then runs it with [`crate::runner`]. No driver sets the
//! loop's fields.

use super::{wait, OnInvalidDecision, Policies, PolicySelector, Recorder, RoundLoop, StartupRules};
use crate::cluster::ClusterState;
use crate::extension::Profile;
use crate::job_state::JobState;
use std::collections::HashMap;

/// A [`RoundLoop`] being built ([`RoundLoop::builder`]).
pub struct LoopBuilder {
    policies: Policies,
    cluster: ClusterState,
    round_s: f64,
    jobs: JobState,
    selector: Option<Box<dyn PolicySelector>>,
    profile: Option<Profile>,
    on_invalid: OnInvalidDecision,
    fork: bool,
    record_events: bool,
    first_round: u64,
}

impl RoundLoop {
    /// A loop running `policies` on `cluster` every `round_s` seconds, with
    /// the defaults of [`LoopBuilder`]'s methods.
    pub fn new(policies: Policies, cluster: ClusterState, round_s: f64) -> Self {
        Self::builder(policies, cluster, round_s).build()
    }

    /// Starts building a loop running `policies` on `cluster` every
    /// `round_s` seconds.
    pub fn builder(policies: Policies, cluster: ClusterState, round_s: f64) -> LoopBuilder {
        LoopBuilder {
            policies,
            cluster,
            round_s,
            jobs: JobState::new(),
            selector: None,
            profile: None,
            on_invalid: OnInvalidDecision::Fail,
            fork: false,
            record_events: false,
            first_round: 0,
        }
    }
}

impl RoundLoop {
    /// A builder of this loop's kind: its policies, selector, cluster,
    /// jobs, round length, start-up rules and handling of invalid
    /// decisions, with what it ran so far forgotten (a replay starts it
    /// again from a log's middle).
    pub fn into_builder(self) -> LoopBuilder {
        LoopBuilder {
            policies: self.policies,
            cluster: self.cluster,
            round_s: self.round_s,
            jobs: self.jobs,
            selector: self.selector,
            profile: Some(self.profile),
            on_invalid: self.on_invalid,
            fork: !self.check_invariants,
            record_events: self.events.on(),
            first_round: 0,
        }
    }
}

impl LoopBuilder {
    /// Starts from these admitted jobs (a fork of a live run, a replay from
    /// a log's middle); their GPUs must be the cluster's assignments.
    /// Default: none.
    pub fn jobs(mut self, jobs: JobState) -> Self {
        self.jobs = jobs;
        self
    }

    /// Swaps the policies between rounds (policy synthesis). Default: none.
    pub fn selector(mut self, selector: Option<Box<dyn PolicySelector>>) -> Self {
        self.selector = selector;
        self
    }

    /// How jobs keep their GPUs while starting and for a while after
    /// (`[run] min_run_s`). Default: [`StartupRules::for_round`].
    /// The rest of the default profile goes with them: start-up-aware
    /// protection, and fixed or Young/Daly checkpoint intervals as the rules
    /// say ([`Profile::of_rules`]).
    pub fn startup(mut self, rules: StartupRules) -> Self {
        self.profile = Some(Profile::of_rules(rules));
        self
    }

    /// The plugins at the loop's extension points and the `[run]` rules
    /// (a config's: [`Profile::from_config`]). Default: the default
    /// profile of [`LoopBuilder::startup`]'s rules.
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = Some(profile);
        self
    }

    /// What a policy's invalid decision does. Default: the round fails
    /// ([`OnInvalidDecision::Fail`]).
    pub fn on_invalid(mut self, on_invalid: OnInvalidDecision) -> Self {
        self.on_invalid = on_invalid;
        self
    }

    /// A throwaway fork (forecasts, synthesis): no re-check of the GPU table
    /// after each round (decisions are still checked before they run) and
    /// no wait reasons. Default: a loop of record, which does both.
    pub fn fork(mut self) -> Self {
        self.fork = true;
        self
    }

    /// Each round's report carries its decisions ([`super::events`]).
    /// Default: off.
    pub fn record_events(mut self) -> Self {
        self.record_events = true;
        self
    }

    /// Numbers the first round `round` (a replay that continues a log's
    /// rounds). Default: 0.
    pub fn first_round(mut self, round: u64) -> Self {
        self.first_round = round;
        self
    }

    /// Replaces the cluster (a replay's, as its log left it).
    pub fn cluster_state(mut self, cluster: ClusterState) -> Self {
        self.cluster = cluster;
        self
    }

    /// The policies it will run (to check them against the cluster before
    /// building).
    pub fn policies(&self) -> &Policies {
        &self.policies
    }

    /// The cluster it will run on.
    pub fn cluster(&self) -> &ClusterState {
        &self.cluster
    }

    /// The loop.
    pub fn build(self) -> RoundLoop {
        let mut events = Recorder::default();
        events.set_on(self.record_events);
        RoundLoop {
            selector: self.selector,
            check_invariants: !self.fork,
            wait_reasons: !self.fork,
            on_invalid: self.on_invalid,
            profile: self
                .profile
                .unwrap_or_else(|| Profile::of_rules(StartupRules::for_round(self.round_s))),
            policies: self.policies,
            jobs: self.jobs,
            cluster: self.cluster,
            waiting: Vec::new(),
            last_invalid: None,
            livelock: None,
            note: None,
            events,
            decided: wait::Decided::default(),
            round: self.first_round,
            round_s: self.round_s,
            last_start_s: None,
            holds: HashMap::new(),
            reject_holds: false,
            failed_out: Vec::new(),
            id_marks: Default::default(),
        }
    }
}
