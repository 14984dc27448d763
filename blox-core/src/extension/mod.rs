//! Named extension points of the round loop besides the three policies:
//! rules that are policy, not mechanism, and so are chosen by config like
//! any policy (Kubernetes' scheduling framework: an extension point, a
//! registry of plugins for it, a profile choosing one per point).
//!
//! | point | config | decides | shipped plugins (default first) |
//! |---|---|---|---|
//! | protection | `[protection] policy` | which of a checked placement's preemptions and moves run this round | `startup-aware`, `none` |
//! | checkpointing | `[checkpointing] policy` | how often a job that names no interval saves | `fixed`, `young-daly` |
//! | recovery | `[recovery] policy` | what a job a node failure stopped does | `hot-spares`, `requeue` |
//!
//! Each point is exclusive: a config names one plugin for it. The
//! plugins' own settings stay where they always were, in `[run]`
//! (`min_run_s`, `max_startup_s`, `checkpoint_interval_s`,
//! `checkpoint_save_s`, `checkpoint_gpu_mtbf_h`, …; the spare pool is
//! `[cluster] spares`), so a config without
//! these sections runs the default profile. A plugin from another crate
//! registers itself like a policy and takes its own keys from its section:
//!
//! ```ignore
//! blox_core::register_protection!("never-preempt", "what it does", |params, run| {
//!     Ok(Box::new(NeverPreempt::from_params(params)?))
//! });
//! ```
//!
//! The loop checks what protection leaves of a placement before any of it
//! runs, exactly as it checks the placement policy's decision: a plugin
//! whose result fails is an invalid decision naming it.

mod checkpointing;
mod protection;
mod recovery;

pub use checkpointing::{FixedCheckpoints, YoungDaly};
pub(crate) use protection::same_gpus;
pub use protection::{keep_on_their_gpus, StartupAware, Unprotected};
pub use recovery::{HotSpares, Requeue};

use crate::cluster::ClusterState;
use crate::config::{CheckpointRule, ConfigError, ModuleConfig, RunConfig, Section};
use crate::health::Health;
use crate::ids::{GpuId, JobId, NodeId};
use crate::job::Job;
use crate::job_state::JobState;
use crate::module::{Placement, RoundInfo};
use crate::round::{PlacementCheck, StartupRules};
use std::sync::Arc;

/// What a protection plugin decides from.
pub struct ProtectionInput<'a> {
    pub round: &'a RoundInfo,
    pub jobs: &'a JobState,
    pub cluster: &'a ClusterState,
    /// What the scheduling policy asked for this round
    /// ([`crate::Schedule::min_run_s`]): least run time past the first
    /// iteration before a job is preempted or moved, seconds.
    pub asked_min_run_s: Option<f64>,
}

impl ProtectionInput<'_> {
    /// The check the loop applies to the result ([`PlacementCheck`]).
    pub fn check(&self) -> PlacementCheck<'_> {
        PlacementCheck {
            jobs: self.jobs,
            cluster: self.cluster,
        }
    }
}

/// Extension point `protection`: which of the placement policy's
/// preemptions and moves run this round. It gets the checked decision and
/// returns what runs: the same, or less of it (jobs kept on their GPUs,
/// launches that needed those GPUs deferred). It decides from the state it
/// is given; the loop checks its result before anything runs.
pub trait Protection: Send + Sync {
    /// Its registered name, for messages.
    fn name(&self) -> &str;

    /// What of `placement` (checked) runs this round.
    fn protect(&self, input: &ProtectionInput<'_>, placement: Placement) -> Placement;
}

/// Extension point `checkpointing`: how often a job that names no interval
/// of its own saves a checkpoint.
pub trait Checkpointing: Send + Sync {
    /// Its registered name, for messages.
    fn name(&self) -> &str;

    /// When a job is submitted: the checkpoint cost and interval it runs
    /// with unless it names its own (`checkpoint_save_s` and
    /// `checkpoint_interval_s` in its metrics), or a mark
    /// ([`Job::auto_checkpoint`]) that its interval is chosen at launch.
    fn at_submission(&self, job: &mut Job);

    /// When a job marked [`Job::auto_checkpoint`] is launched on `gpus`
    /// GPUs: its interval from now on, seconds (`None`: unchanged).
    fn at_launch(&self, job: &Job, gpus: usize, health: &Health) -> Option<f64>;
}

/// What a recovery plugin decides from.
pub struct RecoveryInput<'a> {
    pub round: &'a RoundInfo,
    pub jobs: &'a JobState,
    /// The cluster, its spare pool and failures included
    /// ([`ClusterState::health`]).
    pub cluster: &'a ClusterState,
}

/// A job a failure stopped resuming at once: the spare nodes called in
/// for it (out of the pool, into service) and the GPUs it runs on (ones
/// that are free now, or on those nodes).
#[derive(Clone, Debug, PartialEq)]
pub struct Resume {
    pub job: JobId,
    pub spares: Vec<NodeId>,
    pub gpus: Vec<GpuId>,
}

/// Extension point `recovery`: what becomes of the jobs a node failure
/// stopped this round (after the jobs that ended are pruned). Those it
/// does not resume wait in the queue. The loop checks each resume before
/// it runs: the job waits, the nodes are idle spares that are up, the GPUs
/// are free or on those nodes, each once.
pub trait Recovery: Send + Sync {
    /// Its registered name, for messages.
    fn name(&self) -> &str;

    /// Whether it calls in spares: a config that keeps spares (`[cluster]
    /// spares`) for a plugin that never calls them is refused.
    fn uses_spares(&self) -> bool {
        false
    }

    /// `hit`: the jobs a failure stopped this round, each with the GPUs it
    /// held, in the order they were stopped.
    fn recover(&self, input: &RecoveryInput<'_>, hit: &[(JobId, Vec<GpuId>)]) -> Vec<Resume>;
}

/// A plugin's factory: from its section (`policy` removed) and `[run]`.
pub type Factory<T> = fn(&Section, &RunConfig) -> Result<Box<T>, ConfigError>;

crate::registry::entry_type!(
    /// A registered protection plugin.
    ProtectionEntry, "protection", find_protection, protection_entries,
    Factory<dyn Protection>
);
crate::registry::entry_type!(
    /// A registered checkpointing plugin.
    CheckpointingEntry, "checkpointing", find_checkpointing, checkpointing_entries,
    Factory<dyn Checkpointing>
);
crate::registry::entry_type!(
    /// A registered recovery plugin.
    RecoveryEntry, "recovery", find_recovery, recovery_entries,
    Factory<dyn Recovery>
);

/// Registers a recovery plugin: `register_recovery!(name, about, |params, run| ...)`.
#[macro_export]
macro_rules! register_recovery {
    ($name:expr, $about:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::extension::RecoveryEntry { name: $name, about: $about, build: $build }
        }
    };
}

/// Registers a protection plugin: `register_protection!(name, about, |params, run| ...)`.
#[macro_export]
macro_rules! register_protection {
    ($name:expr, $about:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::extension::ProtectionEntry { name: $name, about: $about, build: $build }
        }
    };
}

/// Registers a checkpointing plugin: `register_checkpointing!(name, about, |params, run| ...)`.
#[macro_export]
macro_rules! register_checkpointing {
    ($name:expr, $about:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::extension::CheckpointingEntry { name: $name, about: $about, build: $build }
        }
    };
}

/// The plugins a loop runs at its extension points, and the `[run]` rules
/// it keeps itself (warnings and livelocks of jobs stopped while starting).
/// Cloning shares the plugins (forks follow the same profile).
#[derive(Clone)]
pub struct Profile {
    pub rules: StartupRules,
    pub protection: Arc<dyn Protection>,
    pub checkpointing: Arc<dyn Checkpointing>,
    pub recovery: Arc<dyn Recovery>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("rules", &self.rules)
            .field("protection", &self.protection.name())
            .field("checkpointing", &self.checkpointing.name())
            .field("recovery", &self.recovery.name())
            .finish()
    }
}

impl Profile {
    /// The default profile for `rules`: start-up-aware protection,
    /// Young/Daly's intervals if the rules ask for them (else fixed ones),
    /// and hot spares (which call none while the cluster keeps none).
    pub fn of_rules(rules: StartupRules) -> Self {
        let checkpointing: Arc<dyn Checkpointing> = match rules.young_daly_prior_s {
            Some(prior_s) => Arc::new(YoungDaly {
                save_s: rules.checkpoint_save_s,
                prior_s,
            }),
            None => Arc::new(FixedCheckpoints {
                save_s: rules.checkpoint_save_s,
                interval_s: rules.checkpoint_interval_s,
            }),
        };
        Profile {
            rules,
            protection: Arc::new(StartupAware::new(rules)),
            checkpointing,
            recovery: Arc::new(HotSpares),
        }
    }

    /// The profile a config selects: `[protection]`, `[checkpointing]` and
    /// `[recovery]` (each optional; `[run] checkpoint` names the
    /// checkpointing plugin too), with the `[run]` rules. An unknown name is
    /// refused naming the file, the line and the registered plugins.
    pub fn from_config(
        run: &RunConfig,
        protection: &ModuleConfig,
        checkpointing: &ModuleConfig,
        recovery: &ModuleConfig,
    ) -> Result<Self, ConfigError> {
        let rules = StartupRules::from_run(run);
        let built_protection =
            (ProtectionEntry::named(protection)?.build)(&protection.params, run)?;
        let built_checkpointing =
            (CheckpointingEntry::named(checkpointing)?.build)(&checkpointing.params, run)?;
        let built_recovery = (RecoveryEntry::named(recovery)?.build)(&recovery.params, run)?;
        Ok(Profile {
            rules,
            protection: Arc::from(built_protection),
            checkpointing: Arc::from(built_checkpointing),
            recovery: Arc::from(built_recovery),
        })
    }

    /// `protection/checkpointing/recovery`, for messages.
    pub fn label(&self) -> String {
        format!(
            "{}/{}/{}",
            self.protection.name(),
            self.checkpointing.name(),
            self.recovery.name()
        )
    }
}

/// `[checkpointing] policy` and `[run] checkpoint` naming different plugins
/// are refused: the point is exclusive.
pub fn one_checkpointing_plugin(
    run: &RunConfig,
    run_section: &Section,
    checkpointing: &ModuleConfig,
) -> Result<(), ConfigError> {
    let named = default_checkpointing(run);
    if run.checkpoint.is_none() || checkpointing.policy == named {
        return Ok(());
    }
    Err(ConfigError::Incompatible {
        at: checkpointing.location(),
        message: format!(
            "[checkpointing] policy `{}` and [run] checkpoint = \"{named}\" ({}) name different \
             plugins for the exclusive extension point `checkpointing`: keep one",
            checkpointing.policy,
            run_section.location("checkpoint"),
        ),
    })
}

/// The checkpointing plugin a config names by default: `[run] checkpoint`'s.
pub fn default_checkpointing(run: &RunConfig) -> &'static str {
    match run.checkpoint {
        Some(CheckpointRule::YoungDaly) => "young-daly",
        _ => "fixed",
    }
}

/// Refuses any key in a shipped plugin's section but `policy` (their
/// settings are `[run]`'s).
fn no_keys(params: &Section, plugin: &str) -> Result<(), ConfigError> {
    match params.table().keys().next() {
        Some(k) => Err(params.error_at(
            k,
            format!(
                "unknown key `{k}`: `{plugin}` takes its settings from [run] (min_run_s, \
                 min_run_startup_factor, max_startup_s, min_run_until_checkpoint, \
                 checkpoint_interval_s, checkpoint_save_s, checkpoint_gpu_mtbf_h) and \
                 [cluster] (spares)"
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
